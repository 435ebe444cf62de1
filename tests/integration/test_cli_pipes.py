"""Output into a pipe whose reader left (``fleetwatch ... | head``): the command exits
quietly with 141, as a Unix tool killed by SIGPIPE does, without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys

from support.fleet import wait_for

EX_PIPE = 141


def test_agent_once_into_a_closed_pipe_exits_quietly(fleet):
    path = fleet.agent_config([{"endpoints": {"agents": "tcp://127.0.0.1:9"}}])
    r, w = os.pipe()
    os.close(r)                     # the reader is gone before the first write
    try:
        proc = subprocess.run([sys.executable, "-m", "fleetwatch", "agent", "--once",
                               "--config", str(path)], stdout=w, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    finally:
        os.close(w)
    assert proc.stderr == ""
    assert proc.returncode == EX_PIPE


def test_tail_into_head_exits_quietly(fleet):
    router = fleet.router()
    fleet.agent([router])               # heartbeats every 0.3 s: tail always has more
    config = fleet.operator_config([router])
    wait_for(lambda: "alive" in fleet.procs[-1].log(), 15, what="the agent linked")
    err = fleet.root / "tail.err"
    script = (f"'{sys.executable}' -m fleetwatch tail --config '{config}' --timeout 30 "
              f"2>'{err}' | head -n 1; echo \"exit ${{PIPESTATUS[0]}}\"")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)
    first, status = out.stdout.splitlines()
    assert "HEARTBEAT" in first or "STATS" in first or "REGISTER" in first, first
    assert status == f"exit {EX_PIPE}"
    assert "Traceback" not in err.read_text() and "Broken pipe" not in err.read_text()
