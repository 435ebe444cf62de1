"""PostgreSQL as the shared state database (tests/support/pg.py starts a throwaway cluster).

The state database layer on PostgreSQL (table creation by sinks starting at once, the
textual upserts, the readers), then the real registry and alerting sinks as processes
writing to it with a scheduler reading it, and the scheduler's ``--list`` and refresh.
"""

from __future__ import annotations

import json
import threading

import pytest

from support.fleet import intake_path, wait_for, wait_intake
from fleetwatch import protocol
from fleetwatch.protocol import Relayed

pytest.importorskip("sqlalchemy")
pytest.importorskip("psycopg")
pytestmark = pytest.mark.timeout(90)

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
U2 = "b9a1c7d2-0e6f-4b3a-8c9d-2e1f0a3b4c5d"


def relayed(type_: str, uuid: str = U1, router: str = "router-1", **fields) -> Relayed:
    return Relayed(uuid, router, protocol.make(type_, uuid, **fields))


def test_sinks_starting_at_once_create_their_tables_once(pg_url):
    """Four sinks on a new database at once: none fails on CREATE TABLE (advisory lock)."""
    from fleetwatch.store import db
    errors: list[Exception] = []
    engines = [db.engine(pg_url) for _ in range(4)]

    def create(eng, owner):
        try:
            db.create(eng, owner)
        except Exception as e:      # collected, asserted below
            errors.append(e)
    threads = [threading.Thread(target=create, args=(eng, owner))
               for eng, owner in zip(engines, ["registry", "alerting"] * 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for eng in engines:
        eng.dispose()
    assert errors == []


def test_registry_and_alerting_writes_and_reads(pg_url):
    from fleetwatch.store.reader import read
    from fleetwatch.store import db, reads
    from sinks.alerting.sink import AlertingSink
    from sinks.registry import RegistrySink
    registry, alerting = RegistrySink(db.engine(pg_url)), AlertingSink(db.engine(pg_url))
    try:
        registry.start()
        alerting.start()
        hello = relayed("HELLO", hostname="web-1", heartbeat=1.0, version="1.0")
        register = relayed("REGISTER", name="agent", hostname="web-1",
                           plugins=[{"name": "load", "interval": 60, "timeout": 10}])
        registry.write([hello, register])
        registry.write([relayed("HELLO", router="router-2", hostname="web-2", heartbeat=1.0),
                        register])                                   # upserts (REGISTER last)
        notify = relayed("NOTIFY", severity="error", text="disk full")
        alerting.write([notify, notify])
        alerting.write([notify])
        assert alerting.counts["notify_recorded"] == 1
        assert alerting.counts["notify_already_recorded"] == 2
        old = relayed("RESULT", command_id="s:1", plugin="load", status=2, output="LOAD CRIT",
                      started=100.0, slot=100.0, perfdata=[{"label": "load1", "value": 9.5}])
        new = relayed("RESULT", command_id="s:2", plugin="load", status=0, output="LOAD OK",
                      started=160.0, slot=160.0)
        alerting.write([new])
        alerting.write([old])                                        # older: not stored

        (agent,) = read(pg_url, reads.agents)
        assert agent["hostname"] == "web-1" and set(agent["routers"]) == {"router-1",
                                                                          "router-2"}
        (plugin,) = read(pg_url, reads.plugins)
        assert plugin["spec"] == {"interval": 60, "timeout": 10}
        (alert,) = read(pg_url, reads.alerts)
        assert alert["text"] == "disk full" and alert["hostname"] == "web-1"
        (check,) = read(pg_url, reads.checks)
        assert check["command_id"] == "s:2" and check["status"] == 0
        (judged,) = read(pg_url, reads.check_state)
        assert judged["status"] == 0 and judged["unreachable"] is None
        # an older version's database, before an owner added the new nullable columns
        eng = db.engine(pg_url)
        with eng.begin() as conn:
            conn.exec_driver_sql("ALTER TABLE check_state DROP COLUMN unreachable")
            conn.exec_driver_sql("ALTER TABLE agents DROP COLUMN parents")
        eng.dispose()
        (judged,) = read(pg_url, reads.check_state)
        (agent,) = read(pg_url, reads.agents)
        assert (judged["unreachable"], agent["parents"]) == (None, None)
    finally:
        registry.close()
        alerting.close()


def test_scheduler_reads_the_registry_from_postgres(pg_url, fleet):
    from fleetwatch.config import build
    from scheduler.config import SchedulerConfig
    from scheduler.service import Service
    from fleetwatch.store import db
    from sinks.registry import RegistrySink
    sink = RegistrySink(db.engine(pg_url))
    sink.start()
    sink.write([relayed("REGISTER", name="agent", hostname="web-1",
                        plugins=[{"name": "load", "interval": 60}, {"name": "manual"}]),
                # the host's name is its agent's own (SECURITY.md), not a local process's
                relayed("REGISTER", uuid=U2, name="agent", hostname="db-1", plugins=[]),
                relayed("REGISTER", uuid=U2, name="backup", hostname="db-1",
                        plugins=[{"name": "backup_age", "interval": 3600, "timeout": 30}])])
    cfg = build(SchedulerConfig, {"routers": ["tcp://127.0.0.1:9"], "state_url": pg_url})
    service = Service(cfg)
    try:
        diff = service.refresh()
        assert sorted(j.key for j in diff.added) == [(U1, "load"), (U2, "backup_age")]
        assert service.plan.jobs[(U2, "backup_age")].hostname == "db-1"
        sink.write([relayed("REGISTER", uuid=U2, name="backup", plugins=[])])
        assert service.refresh().removed == [(U2, "backup_age")]
    finally:
        service.reader.close()
        sink.close()

    fleet.state_url = pg_url
    path = fleet.scheduler_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])
    doc = json.loads(fleet.cli("scheduler", "--config", str(path), "--list", "--json").stdout)
    assert [(j["hostname"], j["plugin"]) for j in doc["jobs"]] == [("web-1", "load")]


def test_unreachable_postgres_is_one_line_and_exit_69(fleet):
    import socket
    with socket.socket() as held:           # bound, never listening: connection refused
        held.bind(("127.0.0.1", 0))
        fleet.state_url = (f"postgresql+psycopg://fw:s3cret@127.0.0.1:"
                           f"{held.getsockname()[1]}/fleetwatch")
        path = fleet.scheduler_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])
        res = fleet.cli("scheduler", "--config", str(path), "--list", check=False)
    assert res.returncode == 69, res
    assert len(res.stderr.strip().splitlines()) == 1
    assert "cannot read the state database" in res.stderr and "s3cret" not in res.stderr


def test_fleet_on_postgres(fleet, pg_url):
    """Routers, two registry and two alerting sinks (started at once on an empty database),
    an agent with a 1 s plugin and a scheduler, all on one PostgreSQL database."""
    fleet.state_url = pg_url
    folder = fleet.root / "plugins"
    folder.mkdir()
    script = folder / "check_ok"
    script.write_text("#!/bin/sh\necho 'ALL OK | up=1'\n")
    script.chmod(0o755)
    r1 = fleet.router("router-1")
    for i in (1, 2):
        fleet.sink("registry", [r1], name=f"registry-{i}")
        fleet.sink("alerting", [r1], name=f"alerting-{i}")
    fleet.agent([r1], plugins={"dirs": [str(folder)], "checks": [
        {"name": "ok", "command": "check_ok", "interval": 1, "timeout": 5}]})
    fleet.scheduler([r1])
    from agent.client import Client
    wait_intake(intake_path(fleet))
    Client(config_path=str(fleet.root / "agent.yaml"), timeout=10).notify(
        "written to postgres", severity="warning")
    fleet.operator_config([r1])

    def status():
        doc = json.loads(fleet.command("status", "--config", str(fleet.root / "fleetwatch.yaml"),
                                       "--json").stdout)
        checks = [c for c in doc.get("checks", []) if c["plugin"] == "ok"]
        return checks and checks[0]["state"] == "OK" and doc
    doc = wait_for(status, 30, 0.3, "the check's result in PostgreSQL")
    assert doc["agents"][0]["hostname"] == "agent-host"
    assert doc["checks"][0]["command_id"].startswith("s:")

    def texts():
        alerts = json.loads(fleet.command("alerts", "--config",
                                          str(fleet.root / "fleetwatch.yaml"), "--json").stdout)
        return [a["text"] for a in (alerts["alerts"] if isinstance(alerts, dict) else alerts)]
    # the NOTIFY is spooled until an alerting sink ACKs it: it may come after the result
    wait_for(lambda: "written to postgres" in texts(), 30, 0.3, "the NOTIFY in PostgreSQL")
    for proc in fleet.procs:
        assert proc.alive(), f"{proc.name} died:\n{proc.log()}"
