"""The router's CPU priority (router/priority.py): lowered at start to its config's ``nice``,
its session's too when it leads one; without the privilege, one warning and nothing else."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from router import priority
from router.config import RouterConfig

pytestmark = pytest.mark.timeout(30)

CHILD = """
import json, os, sys
from router import priority
session = sys.argv[1] == "session"
if session:
    os.setsid()
said = priority.apply(int(sys.argv[2]), autogroup=sys.argv[3])
print(json.dumps({"nice": os.getpriority(os.PRIO_PROCESS, 0), "said": said}))
"""


def child(tmp_path, nice, session=True, privileged=True):
    autogroup = tmp_path / "autogroup"
    autogroup.write_text("/autogroup-1 nice 0\n")
    prefix = [] if privileged else ["setpriv", "--reuid=65534", "--regid=65534",
                                    "--clear-groups", "--inh-caps=-all"]
    out = subprocess.run([*prefix, sys.executable, "-c", CHILD,
                          "session" if session else "same", str(nice), str(autogroup)],
                         capture_output=True, text=True, timeout=20,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout), autogroup.read_text(), out.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering a nice value needs root")
def test_the_router_lowers_its_nice_value_and_its_sessions(tmp_path):
    got, group, _ = child(tmp_path, -7)
    assert got == {"nice": -7, "said": "nice -7, its session's too"} and group == "-7\n"
    got, group, _ = child(tmp_path, -7, session=False)      # another's session: left alone
    assert got == {"nice": -7, "said": "nice -7"} and group == "/autogroup-1 nice 0\n"
    got, group, _ = child(tmp_path, 0)
    assert got["nice"] == 0 and got["said"].startswith("priority left as it is")


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv"),
                    reason="needs root to drop to nobody with setpriv")
def test_without_the_privilege_it_warns_once_and_runs_as_it_is(tmp_path):
    got, group, err = child(tmp_path, -10, privileged=False)
    assert got["nice"] == 0 and got["said"].startswith("priority not raised")
    assert group == "/autogroup-1 nice 0\n"


def test_the_warning_says_what_to_do(monkeypatch, caplog):
    def refuse(*args):
        raise PermissionError(1, "Operation not permitted")
    monkeypatch.setattr(os, "setpriority", refuse)
    monkeypatch.setattr(os, "getpriority", lambda *a: 0)
    with caplog.at_level(logging.WARNING, "router.priority"):
        assert priority.apply(-10) == "priority not raised: Operation not permitted"
    (record,) = caplog.records
    assert "CAP_SYS_NICE" in record.getMessage() and "nice: 0" in record.getMessage()


def test_nice_is_checked_at_load():
    assert RouterConfig().nice == -10
    for bad in (-21, 20, True):
        with pytest.raises(ValueError, match="nice: expected a whole number"):
            RouterConfig(nice=bad).validate()
    RouterConfig(nice=19).validate()


def test_cpu_weight_follows_the_kernels_steps():
    assert [priority.cpu_weight(n) for n in (0, -1, -10, 10, -20)] == [100, 125, 931, 11, 8674]
