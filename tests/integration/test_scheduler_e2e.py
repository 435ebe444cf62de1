"""Schedulers end to end: real routers, sinks, agent and schedulers as processes.

Two schedulers and two routers over one agent that declares a 1 s plugin: every RUN goes
through both routers from both schedulers (four copies of each command), and each slot must
run exactly once. The plugin appends its start time to a file and prints it; the RESULTs
(watched on both routers' tails) map each command id to the run that answered it. The same
with PostgreSQL as the shared state database.
"""

from __future__ import annotations

import json
import re
import signal
import stat
from pathlib import Path

import pytest

from support.fleet import wait_for
from support.tail import Tail
from fleetwatch import protocol
from scheduler import slots

pytest.importorskip("sqlalchemy")
pytest.importorskip("apscheduler")
pytestmark = pytest.mark.timeout(120)

PLUGIN = "tick"
RUNS = 5        # slots to see before the schedulers are stopped


def tick_plugin(fleet) -> tuple[Path, Path]:
    """A plugin directory with ``check_tick``, and the file each run appends its start to."""
    folder, runs = fleet.root / "plugins", fleet.root / "runs.txt"
    folder.mkdir(exist_ok=True)
    script = folder / "check_tick"
    script.write_text("#!/bin/sh\n"
                      "t=$(date +%s.%N)\n"
                      f"echo \"$t\" >> '{runs}'\n"
                      "echo \"TICK OK started $t | ticks=1\"\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder, runs


def run_starts(path: Path) -> list[str]:
    return path.read_text().split() if path.exists() else []


def declared(fleet, op: Path, uuid: str) -> bool:
    """Whether ``fleetwatch status --json`` lists the agent's check (the registry has it)."""
    return any(c["uuid"] == uuid and c["plugin"] == PLUGIN for c in fleet.status(op)["checks"])


def agent_uuid(fleet, name: str = "agent") -> str:
    path = fleet.root / f"{name}-state" / "uuid"
    return wait_for(lambda: path.exists() and path.read_text().strip(), 10, what="agent uuid")


def counters(log: str) -> dict[str, int]:
    """The last ``counters:`` line a scheduler logged (its counters are in its log only)."""
    lines = [ln for ln in log.splitlines() if "counters:" in ln]
    if not lines:
        return {}
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", lines[-1].split("counters:")[1])}


@pytest.mark.parametrize("database", ["sqlite", "postgresql"])
def test_two_schedulers_two_routers_each_slot_runs_once(fleet, zctx, database, request):
    if database == "postgresql":
        fleet.state_url = request.getfixturevalue("pg_url")
    folder, runs_file = tick_plugin(fleet)
    r2 = fleet.router("router-2")
    r1 = fleet.router("router-1", peers=[r2["endpoints"]["agents"]])
    routers = [r1, r2]
    fleet.sink("registry", routers)
    fleet.sink("alerting", routers)
    tail = Tail(zctx, [r["endpoints"]["tail"] for r in routers], [protocol.topic("RESULT")])
    try:
        fleet.agent(routers, plugins={"dirs": [str(folder)], "checks": [
            {"name": PLUGIN, "command": "check_tick", "interval": 1, "timeout": 5}]})
        uuid = agent_uuid(fleet)
        op = fleet.operator_config(routers)
        wait_for(lambda: declared(fleet, op, uuid), 20, 0.1, "the plugin in the registry")
        a = fleet.scheduler(routers, "sched-a")
        b = fleet.scheduler(routers, "sched-b")

        wait_for(lambda: len({r.message.get("command_id") for r in tail.pump()}) >= RUNS, 40, 0.05,
                 f"{RUNS} slots run")
        for proc in (a, b):
            proc.signal(signal.SIGTERM)
        for proc in (a, b):
            assert proc.popen.wait(10) == 0, proc.log()

        def settled():
            ids = {r.message.get("command_id") for r in tail.pump()}
            return len(run_starts(runs_file)) == len(ids) and ids
        wait_for(settled, 10, 0.2, "every run answered")
    finally:
        tail.close()

    results = [r.message.body for r in tail.seen if r.message.get("plugin") == PLUGIN]
    starts = run_starts(runs_file)
    by_id: dict[str, set[str]] = {}
    for r in results:
        assert r["status"] == 0, r
        started = re.search(r"started (\S+)", r["output"]).group(1)
        by_id.setdefault(r["command_id"], set()).add(started)
        # the id is the one both schedulers derive from (uuid, plugin, slot)
        assert r["command_id"] == slots.command_id(uuid, PLUGIN, r["slot"]), r
    # each command id was answered by one run only (repeats get the first RESULT again) ...
    assert all(len(s) == 1 for s in by_id.values()), by_id
    # ... each run answered one command id, and each slot had one command id
    assert sorted(s for ss in by_id.values() for s in ss) == sorted(starts)
    slots_seen = {r["slot"] for r in results}
    assert len(slots_seen) == len(by_id) >= RUNS
    phase = slots.phase(uuid, PLUGIN, 1)
    assert all(abs((s - phase) - round(s - phase)) < 1e-6 for s in slots_seen)   # on the grid
    # both schedulers sent every slot through both routers
    for proc in (a, b):
        count = counters(proc.log())
        assert count.get("runs", 0) >= RUNS - 1 and count.get("sent", 0) >= 2 * (RUNS - 1), \
            (proc.name, count)


def test_list_prints_the_job_table(fleet, tmp_path):
    """``--list`` reads the registry (written by the real registry sink class), starts
    nothing, and needs no router: the endpoint here does not exist."""
    from fleetwatch.store import db
    from sinks.registry import RegistrySink
    sink = RegistrySink(db.engine(fleet.state_url))
    sink.start()
    uuid = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
    msg = protocol.make("REGISTER", uuid, name="agent", hostname="web-1", plugins=[
        {"name": "load", "interval": 60, "timeout": 10}, {"name": "disk", "interval": 300},
        {"name": "manual"}])
    sink.write([protocol.Relayed(uuid, "router-1", msg)])
    sink.close()
    path = fleet.scheduler_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])

    out = fleet.cli("scheduler", "--config", str(path), "--list").stdout
    lines = out.splitlines()
    assert lines[0].split() == ["HOSTNAME", "UUID", "PLUGIN", "INTERVAL", "TIMEOUT", "NEXT_RUN"]
    assert lines[1].split()[:5] == ["web-1", uuid, "disk", "300s", "-"]
    assert lines[2].split()[:5] == ["web-1", uuid, "load", "60s", "10s"]
    assert "1 declared plugins have no interval" in out

    doc = json.loads(fleet.cli("scheduler", "--config", str(path), "--list", "--json").stdout)
    assert [(j["plugin"], j["interval"], j["timeout"]) for j in doc["jobs"]] == [
        ("disk", 300, None), ("load", 60, 10)]
    iso = doc["jobs"][1]["next_run"]            # the same time, ISO in JSON, human in the table
    assert lines[2].split()[5:] == [iso[:10], iso[11:19], "UTC"]
    assert doc["on_demand"] == 1

    res = fleet.cli("scheduler", "--config", str(path), "--json", check=False)
    assert res.returncode == 2 and "--json goes with --list" in res.stderr
    bad = fleet.write("bad.yaml", {"routers": ["tcp://127.0.0.1:9"], "jitter": "lots"})
    res = fleet.cli("scheduler", "--config", str(bad), "--list", check=False)
    assert res.returncode == 78 and "jitter" in res.stderr


def test_scheduler_speaks_curve_with_a_backend_key(fleet):
    """With CURVE on, a scheduler's back-end key gets it WELCOMEd and its RUNs answered; an
    agent's key stops it at start (78), before any socket."""
    from support.keys import Keys
    from fleetwatch.store import db
    from sinks.registry import RegistrySink
    keys = Keys(fleet.root)
    backend = keys.backend("sched")             # in the allowlist before the router starts
    router = fleet.router(security=keys.router_security())
    sink = RegistrySink(db.engine(fleet.state_url))
    sink.start()
    uuid = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"           # never attached: 404s
    sink.write([protocol.Relayed(uuid, "router-1", protocol.make(
        "REGISTER", uuid, name="agent", plugins=[{"name": "load", "interval": 1}]))])
    sink.close()
    proc = fleet.scheduler([router], security=keys.client(backend))
    wait_for(lambda: "welcomed us" in proc.log() and counters(proc.log()).get("not_found"),
             15, 0.1, "WELCOME and ERROR 404 over CURVE")

    wrong = fleet.scheduler_config([router], "wrong", security=keys.client(keys.agent(uuid)))
    res = fleet.cli("scheduler", "--config", str(wrong), check=False)
    assert res.returncode == 78 and "needs a backend key" in res.stderr, res
