"""What Debian's real Nagios plugins (monitoring-plugins-basic, installed by make install)
print parses cleanly: the first line, every perfdata item, the exit status."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from plugins.output import parse

DEBIAN = "/usr/lib/nagios/plugins"


def _run(*argv) -> tuple[int, bytes]:
    res = subprocess.run([os.path.join(DEBIAN, argv[0]), *argv[1:]], capture_output=True,
                         timeout=30)
    return res.returncode, res.stdout


@pytest.fixture
def listening_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


@pytest.mark.skipif(not os.path.isdir(DEBIAN), reason="monitoring-plugins-basic not installed")
def test_live_debian_plugins(listening_port):
    cases = [
        (("check_load", "-w", "500,400,300", "-c", "1000,800,600"), "LOAD OK",
         {"load1", "load5", "load15"}),
        (("check_disk", "-w", "1%", "-c", "1%", "-p", "/"), "DISK", {"/"}),
        (("check_procs", "-w", "100000", "-c", "200000"), "PROCS OK", {"procs"}),
        (("check_users", "-w", "1000", "-c", "2000"), "USERS OK", {"users"}),
        (("check_swap", "-w", "20%", "-c", "10%"), "SWAP", {"swap"}),
        (("check_tcp", "-H", "127.0.0.1", "-p", str(listening_port)), "TCP OK", {"time"}),
        (("check_file_age", "-f", "/etc/hostname", "-w", "1000000000", "-c", "2000000000"),
         "FILE_AGE OK", {"age", "size"}),
    ]
    for argv, prefix, labels in cases:
        code, out = _run(*argv)
        got = parse(out)
        assert got.text.startswith(prefix), (argv, out)
        assert got.bad_perfdata == 0, (argv, out)
        assert {p["label"] for p in got.perfdata} == labels, (argv, out)
        assert all(isinstance(p["value"], float) for p in got.perfdata), (argv, out)
    for status in range(4):
        code, out = _run("check_dummy", str(status), "some text")
        assert code == status and parse(out).text.endswith(": some text")
