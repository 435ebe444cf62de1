"""`fleetwatch status` with 10,000 agents attached to one real router.

The agents are real connections: tests/support/dealers.py opens DEALERs (plain TCP) in two
processes and says HELLO on each; the router is a real `fleetwatch router`. How fast the
answer comes is bench/status_scale.py's business, not this test's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from fleetwatch import __version__
from support.dealers import FDS_PER_SOCKET

pytestmark = pytest.mark.timeout(120)

AGENTS = 10_000
PROCESSES = 2
DEALERS = str(Path(__file__).parents[1] / "support" / "dealers.py")


def attach(endpoint: str, count: int, processes: int):
    """Start ``processes`` dealer processes sharing ``count`` connections; return them once
    every connection is welcomed (skip if the descriptor limit cannot hold them)."""
    share = count // processes
    procs = [subprocess.Popen([sys.executable, DEALERS, endpoint, str(share), f"agent{i}",
                               "--timeout", "60"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
             for i in range(processes)]
    for proc in procs:
        line = proc.stdout.readline()       # bounded by the helper's own --timeout
        if line.strip() != f"ready {share}":
            problem = proc.stderr.read() if proc.wait(10) is not None else ""
            detach(procs)
            if proc.returncode == 77:
                pytest.skip(f"not enough file descriptors for {share} connections per "
                            f"process (~{share * FDS_PER_SOCKET}): {problem.strip()}")
            raise AssertionError(f"dealers exited {proc.returncode}: {problem}")
    return procs


def detach(procs) -> None:
    """Close every connection: the helpers exit when their standard input closes."""
    for proc in procs:
        if proc.stdin and not proc.stdin.closed:
            proc.stdin.close()
    for proc in procs:
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
        for stream in (proc.stdout, proc.stderr):
            stream.close()


def test_status_lists_ten_thousand_attached_agents(fleet):
    router = fleet.router("router-1", limits={"hellos_per_second": 100_000.0})
    procs = attach(router["endpoints"]["agents"], AGENTS, PROCESSES)
    try:
        op = fleet.operator_config([router])
        res = fleet.cli("status", "--config", str(op), "--json", check=False)
        text = fleet.cli("status", "--config", str(op), check=False)
    finally:
        detach(procs)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["routers"] == [{"endpoint": router["endpoints"]["control"], "id": "router-1",
                               "reachable": True, "problem": None, "known": "configured",
                               "version": __version__}]
    alive = {a["uuid"] for a in out["agents"] if a["alive"] is True}
    assert alive == {f"agent{i}-{n}" for i in range(PROCESSES)
                     for n in range(AGENTS // PROCESSES)}
    assert all(a["routers"] == ["router-1"] for a in out["agents"])
    assert "413" not in res.stderr + text.stderr
    lines = text.stdout.splitlines()
    assert f"{AGENTS} agents, {AGENTS} alive" in lines
    assert sum(1 for line in lines if line.startswith("agent")) == AGENTS
