"""``fleetwatch status`` (``--problems``, ``--json``) and ``fleetwatch alerts`` run in-process
over a state database written here row by row, the routers' answer faked: what is handled and
how (ack, downtime, unreachable, host, stale), the unhandled problems worst first, the exit
status, and a database of an older version without the ``unreachable`` columns (the sinks'
side is tests/integration/test_acks_e2e.py)."""

from __future__ import annotations

import json
import sys
import time

import pytest

from support.cli import fw, operator_config
from fleetwatch.ask import Answer

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from sinks.alerting.acks import store as ackstore  # noqa: E402
from sinks.alerting.downtimes import store as downtimestore  # noqa: E402
from sinks.alerting.downtimes.rules import Downtime  # noqa: E402
from fleetwatch.store import db, schema  # noqa: E402

WEB, DB, SW, APP = "a" * 32, "b" * 32, "c" * 32, "d" * 32
#: when the test started: the commands read the real clock, so each test sets it again
#: (a time taken at import would be minutes old by the end of a whole suite's run)
NOW = time.time()


@pytest.fixture(autouse=True)
def _now(monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "NOW", time.time())


def check_row(uuid, plugin, status, hard=True, since=None, **extra):
    since = NOW - 600 if since is None else since
    return {"uuid": uuid, "plugin": plugin, "status": status, "hard": hard, "attempt": 3,
            "max_attempts": 3, "hard_status": status, "since": since, "last_change": since,
            "last_result": NOW - 10, "history": "", "percent": 0.0, "flapping": False,
            "notified": status, "last_notified": since, "flap_notified": False,
            "updated": NOW - 10, **extra}


def host_row(uuid, up, since=None, **extra):
    since = NOW - 300 if since is None else since
    return {"uuid": uuid, "name": "", "up": up, "last_heard": NOW - (5 if up else 300),
            "interval": 1.0, "deadline": NOW + 60 if up else NOW - 290, "since": since,
            "routers": ["r1"], "notified": not up, "pending": False, "updated": NOW - 5,
            **extra}


@pytest.fixture
def state(tmp_path):
    """A state database: web-1 UP with load CRITICAL (unhandled), disk WARNING (acked),
    http CRITICAL (held behind web-1/nginx_proc), backup UNKNOWN (stale), mem CRITICAL in a
    downtime; db-1 DOWN (unhandled) with pg CRITICAL (its host DOWN); sw-3 DOWN
    (acknowledged); app-1 UNREACHABLE behind sw-3."""
    url = f"sqlite:///{tmp_path / 'state.db'}"
    eng = db.engine(url)
    for owner in ("registry", "alerting"):
        db.create(eng, owner)
    checks = {WEB: [("load", 2), ("disk", 1), ("http", 2), ("backup", 3), ("mem", 2),
                    ("cpu", 0)], DB: [("pg", 2)]}
    with eng.begin() as conn:
        for uuid, name in ((WEB, "web-1"), (DB, "db-1"), (SW, "sw-3"), (APP, "app-1")):
            conn.execute(schema.agents.insert().values(
                uuid=uuid, hostname=name, version="1", first_seen=NOW - 900,
                last_seen=NOW - 5, parents=["sw-3"] if uuid == APP else None))
        for uuid, plugins in checks.items():
            for plugin, status in plugins:
                conn.execute(schema.plugins.insert().values(
                    uuid=uuid, source="agent", name=plugin,
                    spec={"interval": 60, "timeout": 10}, declared_at=NOW - 900))
                conn.execute(schema.checks.insert().values(
                    uuid=uuid, plugin=plugin, status=status, output=f"{plugin} is {status}",
                    long_output="", perfdata=[], command_id="s:1", last_result=NOW - 10,
                    router="r1"))
                conn.execute(schema.check_state.insert().values(check_row(
                    uuid, plugin, status, unreachable="web-1/nginx_proc"
                    if plugin == "http" else None)))
        conn.execute(schema.check_freshness.insert().values(
            uuid=WEB, plugin="backup", heard=NOW - 400, stale_at=NOW - 100, updated=NOW))
        for uuid, up, extra in ((WEB, True, {}), (DB, False, {}), (SW, False, {}),
                                (APP, False, {"unreachable": "sw-3"})):
            conn.execute(schema.host_state.insert().values(host_row(uuid, up, **extra)))
        ackstore.add(conn, f"{WEB}/check/disk", WEB, "disk", 1, NOW - 60, "alice",
                     "replacing \x1b[2Jit", False, True, NOW + 3600)
        ackstore.add(conn, f"{SW}/host", SW, None, 2, NOW - 60, "bob", "", True, True, None)
        downtimestore.add(conn, Downtime(0, "web-*", "mem", NOW - 60, NOW + 1800,
                                         comment="memory upgrade", author="carol",
                                         created=NOW - 60))
        downtimestore.add(conn, Downtime(0, "db-1", "pg", NOW - 7200, NOW - 3600,
                                         comment="over", author="carol", created=NOW - 7200))
    eng.dispose()
    return url


@pytest.fixture
def op(tmp_path, state, monkeypatch):
    answers = [Answer("tcp://127.0.0.1:9", {"PEERS": {"router": "r1", "agents": []}})]
    monkeypatch.setattr("fleetwatch.cli.status.ask_all", lambda *a, **k: answers)
    return operator_config(tmp_path)


def test_problems_lists_the_unhandled_worst_first(op, capsys):
    code, out, err = fw(capsys, "status", "--problems", "--json", "--config", op)
    doc = json.loads(out)
    assert (code, err) == (0, "")
    assert [(p["hostname"], p["kind"], p["check"], p["state"]) for p in doc["problems"]] == [
        ("db-1", "host", None, "DOWN"), ("web-1", "check", "load", "CRITICAL"),
        ("web-1", "check", "backup", "UNKNOWN")]
    # handled: disk (ack), http (unreachable), mem (downtime), pg (host DOWN), sw-3 (ack),
    # app-1 (unreachable)
    assert doc["handled"] == 6 and doc["routers"][0]["id"] == "r1"
    backup = doc["problems"][2]
    assert backup["handled"]["stale"]["since"].endswith("Z") and backup["state_type"] == "HARD"
    assert set(backup["handled"]) == {"ack", "downtime", "unreachable", "host", "stale"}
    code, out, _ = fw(capsys, "status", "--problems", "--config", op)
    lines = out.splitlines()
    assert lines[0].split() == ["AGENT", "PROBLEM", "STATE", "TYPE", "SINCE", "OUTPUT"]
    assert [line.split()[:3] for line in lines[1:4]] == [
        ["db-1", "DOWN", "DOWN"], ["web-1", "load", "CRITICAL"], ["web-1", "backup", "UNKNOWN"]]
    assert "STALE HARD" in lines[3] and "stale: no result for" in lines[3]
    assert lines[-1] == "3 unhandled problems (6 handled: fleetwatch status lists them)"


def test_status_json_says_how_each_is_handled(op, capsys):
    code, out, _ = fw(capsys, "status", "--json", "--config", op)
    doc = json.loads(out)
    checks = {(c["hostname"], c["plugin"]): c for c in doc["checks"]}
    agents = {a["hostname"]: a for a in doc["agents"]}
    assert code == 0
    disk = checks["web-1", "disk"]["handled"]
    assert disk["ack"]["by"] == "alice" and disk["ack"]["until"].endswith("Z")
    assert disk["ack"] == checks["web-1", "disk"]["ack"]
    assert checks["web-1", "http"]["handled"]["unreachable"] == "web-1/nginx_proc"
    mem = checks["web-1", "mem"]["handled"]["downtime"]
    assert (mem["by"], mem["comment"], mem["every"]) == ("carol", "memory upgrade", None)
    assert mem["until"] is not None
    assert checks["db-1", "pg"]["handled"] == {"ack": None, "downtime": None,
                                               "unreachable": None, "host": "DOWN",
                                               "stale": None}
    assert checks["web-1", "cpu"]["handled"]["downtime"] is None
    assert (agents["app-1"]["state"], agents["app-1"]["handled"]["unreachable"]) == (
        "UNREACHABLE", "sw-3")
    assert agents["sw-3"]["handled"]["ack"]["by"] == "bob"
    assert agents["web-1"]["handled"]["unreachable"] is None


def test_status_table_lists_the_handled_problems_escaped(op, capsys):
    code, out, _ = fw(capsys, "status", "--config", op)
    handled = out.split("\n\n")[-3].splitlines()
    assert handled[0].split() == ["AGENT", "PROBLEM", "HANDLED"]
    rows = {tuple(line.split()[:2]): line for line in handled[1:]}
    assert "ACK bob" in rows["sw-3", "DOWN"]
    assert "UNREACHABLE (because of sw-3)" in rows["app-1", "UNREACHABLE"]
    assert "ACK alice: replacing \\x1b[2Jit (until " in rows["web-1", "disk"]
    assert "UNREACHABLE (because of web-1/nginx_proc)" in rows["web-1", "http"]
    assert "DOWNTIME by carol until " in rows["web-1", "mem"]
    assert rows["db-1", "pg"].endswith("host DOWN")
    assert "\x1b" not in out
    assert "UNREACHABLE" in [line.split()[3] for line in out.splitlines()
                             if line.startswith("app-1")]


def test_the_exit_status_is_the_routers_one(op, capsys, monkeypatch):
    monkeypatch.setattr("fleetwatch.cli.status.ask_all", lambda *a, **k: [
        Answer("tcp://127.0.0.1:9", problem="timed out")])
    code, out, err = fw(capsys, "status", "--problems", "--json", "--config", op)
    assert code == 69 and "no router answered" in err
    assert len(json.loads(out)["problems"]) == 3


def test_no_problems_and_no_database(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("fleetwatch.cli.status.ask_all", lambda *a, **k: [
        Answer("tcp://127.0.0.1:9", {"PEERS": {"router": "r1", "agents": []}})])
    op = operator_config(tmp_path)
    code, out, _ = fw(capsys, "status", "--problems", "--config", op)
    assert (code, out) == (0, "no unhandled problems\n")
    code, out, _ = fw(capsys, "status", "--problems", "--json", "--config", op)
    assert json.loads(out)["problems"] == [] and json.loads(out)["handled"] == 0


def test_a_database_without_the_unreachable_columns_reads(op, state, capsys):
    """An older version's database, before any owner added the new columns: read as None."""
    eng = db.engine(state)
    with eng.begin() as conn:
        for table in ("host_state", "check_state"):
            conn.exec_driver_sql(f"ALTER TABLE {table} DROP COLUMN unreachable")
        conn.exec_driver_sql("ALTER TABLE agents DROP COLUMN parents")
        conn.exec_driver_sql("DROP TABLE downtimes")
    eng.dispose()
    code, out, err = fw(capsys, "status", "--problems", "--json", "--config", op)
    assert (code, err) == (0, "")
    assert [(p["hostname"], p["check"]) for p in json.loads(out)["problems"]] == [
        ("app-1", None), ("db-1", None), ("web-1", "http"), ("web-1", "load"),
        ("web-1", "mem"), ("web-1", "backup")]
    code, out, err = fw(capsys, "alerts", "--json", "--config", op)
    assert (code, err) == (0, "")


def test_alerts_show_the_handling_of_their_problem(op, state, capsys):
    eng = db.engine(state)
    with eng.begin() as conn:
        for i, (key, uuid, check, kind) in enumerate((
                (f"{WEB}/check/disk", WEB, "disk", "check"),
                (f"{WEB}/check/mem", WEB, "mem", "check"),
                (f"{WEB}/check/backup", WEB, "backup", "check"),
                (f"{APP}/host", APP, None, "host"),
                (f"{WEB}/check/load", WEB, "load", "check"))):
            conn.execute(schema.alert_events.insert().values(
                key=key, kind=kind, action="trigger", severity="critical", uuid=uuid,
                hostname={WEB: "web-1", APP: "app-1"}[uuid], check_name=check, status=2,
                summary=f"{check or 'host'} down", text="", created=NOW - 100 + i))
    eng.dispose()
    code, out, _ = fw(capsys, "alerts", "--json", "--config", op)
    alerts = {a["key"]: a for a in json.loads(out)["alerts"]}
    assert code == 0
    assert alerts[f"{WEB}/check/disk"]["handled"]["ack"]["by"] == "alice"
    assert alerts[f"{WEB}/check/disk"]["ack"]["by"] == "alice"
    assert alerts[f"{WEB}/check/mem"]["handled"]["downtime"]["comment"] == "memory upgrade"
    assert alerts[f"{WEB}/check/backup"]["handled"]["stale"] is not None
    assert alerts[f"{APP}/host"]["handled"]["unreachable"] == "sw-3"
    assert not any(alerts[f"{WEB}/check/load"]["handled"].values())
    code, out, _ = fw(capsys, "alerts", "--config", op)
    text = {line.split()[5]: line for line in out.splitlines()[1:]}
    assert "[ACK alice: replacing \\x1b[2Jit (until " in text["disk"]
    assert "[DOWNTIME by carol until " in text["mem"]
    assert "[STALE since " in text["backup"]
    assert "[UNREACHABLE (because of sw-3)] host down" in text["host"]
    assert "[" not in text["load"]


def test_alerts_say_which_silence_or_downtime_kept_a_notification_back(op, state, capsys):
    eng = db.engine(state)
    with eng.begin() as conn:
        for msg_id, kept in (("m1", ("suppressed", "silence_id", 7)),
                             ("m2", ("downtime_suppressed", "downtime_id", 1)), ("m3", None)):
            conn.execute(schema.notifications.insert().values(
                msg_id=msg_id, uuid=WEB, hostname="web-1", severity="error", text=msg_id,
                source=None, sent_at=NOW - 30, received_at=NOW - 30, router="r1"))
            if kept is not None:
                table, column, number = kept
                conn.execute(schema.metadata.tables[table].insert().values(
                    **{column: number}, key=f"{WEB}/notify/{msg_id}", action="trigger",
                    severity="error", kind="notify", uuid=WEB, hostname="web-1",
                    summary=msg_id, created=NOW - 30))
    eng.dispose()
    code, out, _ = fw(capsys, "alerts", "--json", "--config", op)
    kept = {a["msg_id"]: a["kept_back"] for a in json.loads(out)["alerts"]}
    assert code == 0 and kept == {"m1": {"silence": 7}, "m2": {"downtime": 1}, "m3": None}
    code, out, _ = fw(capsys, "alerts", "--config", op)
    lines = {line.split()[6]: line for line in out.splitlines()[1:]}
    assert lines["m1"].endswith("muted by silence 7")
    assert lines["m2"].endswith("held by downtime 1")
    assert lines["m3"].rstrip().endswith("-")
