"""bench/snmp.py: a tiny run (``--quick``: 10 devices of 5 interfaces on a real snmpd, in a
network namespace of the bench's own; marked slow, as it starts processes) prints the
poller's and the tools' figures, both read the same values of each device, and its section
goes into a RESULTS.md."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from support import ROOT  # noqa: E402
_path = list(sys.path)
sys.path.append(str(ROOT / "bench"))

import snmp as bench  # noqa: E402
sys.path[:] = _path      # snmp.py puts bench/ first: bench/web.py is not web/

from agent.devices import snmp  # noqa: E402

#: what a steady-state poll of a quick device reads: the system group, 8 counter and state
#: columns of its 5 interfaces
QUICK_VALUES = 6 + 8 * 5


def test_the_tools_walk_the_columns_a_poll_walks():
    walked = bench.walked_columns()
    assert set(walked) == set(snmp.COUNTER_COLUMNS) - set(snmp.OCTETS_32) \
        | set(snmp.PROCESSOR_COLUMNS) | set(snmp.STORAGE_COLUMNS)
    assert len(walked) == len(set(walked.values())) == 14


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_quick_run_measures_the_poller_and_the_tools(tmp_path):
    if not bench.can_unshare():
        pytest.skip("needs Net-SNMP, iproute2 and a network namespace (root or user ns)")
    results = tmp_path / "RESULTS.md"
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "snmp.py"), "--quick",
                           "--json", "--results", str(results)],
                          capture_output=True, text=True, timeout=110, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    f, runs = doc["figures"], doc["runs"]
    (p,) = f["pollers"].values()                    # the agent's max_concurrent
    (first,), (polls,) = runs["first"].values(), runs["polls"].values()
    assert p["failed"] == p["first_failed"] == f["baseline_failed"] == 0, runs["poller_log"]
    assert p["interfaces"] == 5
    assert p["values_per_poll"] == f["baseline_values"] == QUICK_VALUES
    assert f["baseline_processes"] == 10 * 15
    assert first["polls"] == polls[0]["polls"] == 10
    assert first["rates"] == 0 and polls[0]["rates"] == 10 * 5 * 2       # in and out
    assert polls[0]["checks"] == 10 * (1 + 5)                # snmp, and if_ each interface
    for key in ("poll_cpu_ms", "polls_per_s", "cpu_ratio", "rate_ratio"):
        assert p[key] > 0, key
    assert f["baseline_device_ms"] > 0 and f["process_floor_ms"] > 0
    assert 10 < p["max_rss_mib"] < 1000
    assert p["holds"] and p["core_share"] < 0.05
    text = results.read_text()
    assert bench.HEADING in text and "bench/snmp.py --quick --json --results" in text
    assert "a core's share at 60 s" in text and "--in-netns" not in text
