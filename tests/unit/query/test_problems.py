"""What ``status`` and ``alerts`` say is handled, and which problems ``status --problems``
lists: pure logic over rows, table-driven (the commands themselves:
tests/unit/fleetwatch/cli/test_problems_cli.py)."""

from __future__ import annotations

import pytest

from query import handling as p
from fleetwatch.display import iso, table

T0 = 1_700_000_000.0
WEB, DB = "a" * 32, "b" * 32
ACK = {"id": 1, "by": "alice", "comment": "on it", "sticky": False, "created": iso(T0),
       "until": None}


def agent(uuid=WEB, hostname="web-1", state="UP", since=T0, **extra):
    return {"uuid": uuid, "hostname": hostname, "state": state, "state_since": iso(since),
            "ack": None, **extra}


def check(plugin="load", status=2, uuid=WEB, hostname="web-1", kind="HARD", since=T0,
          **extra):
    names = {None: "PENDING", 0: "OK", 1: "WARNING", 2: "CRITICAL", 3: "UNKNOWN"}
    return {"uuid": uuid, "hostname": hostname, "plugin": plugin, "status": status,
            "state": names[status], "state_type": kind, "attempt": 1, "max_attempts": 3,
            "hard_since": iso(since), "last_run": iso(since), "output": f"{plugin} output",
            "stale": False, "stale_since": None, "ack": None, **extra}


def judged(agents, checks, unreachable_hosts=(), unreachable_checks=(), downtime=p.none):
    host_rows = [{"uuid": a["uuid"], "name": "", "unreachable": "sw-3"
                  if a["uuid"] in unreachable_hosts else None} for a in agents]
    check_rows = [{"uuid": c["uuid"], "plugin": c["plugin"],
                   "unreachable": "poller-1/ping" if c["plugin"] in unreachable_checks
                   else None} for c in checks]
    p.with_handling(agents, checks, check_rows, host_rows, downtime)
    return p.problems(agents, checks)


def in_downtime(hostname, uuid, check, problem=None):
    if check in (None, "disk"):
        return {"id": 7, "by": "bob", "comment": "kernel", "until": iso(T0 + 3600),
                "every": None, "flexible": None}
    return None


# ---------------------------------------------------------------- which are unhandled

@pytest.mark.parametrize("case, agent_state, status, extra, handled_by", [
    ("a plain HARD problem", "UP", 2, {}, None),
    ("a SOFT one counts too", "UP", 1, {"kind": "SOFT"}, None),
    ("a stale check is a problem", "UP", 3,
     {"stale": True, "stale_since": iso(T0)}, None),
    ("acknowledged", "UP", 2, {"ack": ACK}, "ack"),
    ("its host DOWN", "DOWN", 2, {}, "host"),
    ("its host UNREACHABLE", "UNREACHABLE", 2, {}, "host"),
    ("held behind a parent check", "UP", 2, {"plugin": "http"}, "unreachable"),
    ("in a downtime", "UP", 2, {"plugin": "disk"}, "downtime"),
])
def test_a_check_problem_and_what_handles_it(case, agent_state, status, extra, handled_by):
    a = agent(state=agent_state if agent_state != "UNREACHABLE" else "DOWN")
    c = check(status=status, **extra)
    down = (WEB,) if agent_state == "UNREACHABLE" else ()
    rows = judged([a], [c], down, ("http",),
                  lambda h, u, ch, pr=None: in_downtime(h, u, ch) if ch == "disk" else None)
    problem = [r for r in rows if r["kind"] == "check"][0]
    reasons = [k for k in p.HANDLING if problem["handled"][k]]
    assert reasons == ([handled_by] if handled_by else []), case
    assert (problem in p.unhandled(rows)) is (handled_by is None)


@pytest.mark.parametrize("status", [0, None])
def test_ok_and_pending_are_no_problems(status):
    assert judged([agent()], [check(status=status)]) == []


def test_an_agent_down_is_a_problem_unless_acknowledged_in_a_downtime_or_unreachable():
    agents = [agent(WEB, "web-1", "DOWN"), agent(DB, "db-1", "DOWN", ack=ACK),
              agent("c" * 32, "c-1", "DOWN"), agent("d" * 32, "d-1", "DOWN")]
    rows = judged(agents, [], unreachable_hosts=("c" * 32,),
                  downtime=lambda h, u, ch, pr=None: in_downtime(h, u, ch) if h == "d-1"
                  else None)
    assert [(r["hostname"], r["state"]) for r in p.unhandled(rows)] == [("web-1", "DOWN")]
    by_name = {r["hostname"]: r for r in rows}
    assert by_name["c-1"]["state"] == "UNREACHABLE" and agents[2]["state"] == "UNREACHABLE"
    assert by_name["c-1"]["handled"]["unreachable"] == "sw-3"
    assert by_name["db-1"]["handled"]["ack"] == ACK
    assert by_name["d-1"]["handled"]["downtime"]["id"] == 7


def test_an_agent_up_is_never_unreachable_and_a_process_down_is_a_problem():
    a = agent(processes=[{"name": "backup", "state": "DOWN", "state_since": iso(T0)},
                         {"name": "cron", "state": "UP", "state_since": iso(T0)}])
    rows = judged([a], [], unreachable_hosts=(WEB,))
    assert a["state"] == "UP" and a["handled"]["unreachable"] is None
    (row,) = rows
    assert (row["kind"], row["process"], p.what(row)) == ("process", "backup", "process backup")
    down = agent(state="DOWN", processes=[{"name": "backup", "state": "DOWN",
                                           "state_since": iso(T0)}])
    rows = judged([down], [])
    assert [r["kind"] for r in p.unhandled(rows)] == ["host"]      # the process: host DOWN


def test_worst_first():
    agents = [agent(WEB, "web-1"), agent(DB, "db-1", "DOWN", since=T0 - 50)]
    checks = [check("warn", 1, since=T0), check("crit-old", 2, since=T0 - 100),
              check("crit-new", 2, since=T0), check("unknown", 3),
              check("crit-soft", 2, kind="SOFT", since=T0 + 10),
              check("crit-db", 2, uuid=DB, hostname="db-1")]
    rows = judged(agents, checks)
    assert [(r["hostname"], p.what(r)) for r in rows] == [
        ("db-1", "DOWN"), ("db-1", "crit-db"), ("web-1", "crit-new"), ("web-1", "crit-old"),
        ("web-1", "crit-soft"), ("web-1", "unknown"), ("web-1", "warn")]
    # the check of db-1 (DOWN) is handled by its host; the rest are not
    assert [p.what(r) for r in p.unhandled(rows)] == ["DOWN", "crit-new", "crit-old",
                                                      "crit-soft", "unknown", "warn"]
    assert rows[1]["handled"]["host"] == "DOWN"


def test_worst_first_survives_missing_times():
    rows = judged([agent()], [check("a", 2, since=None), check("b", 2)])
    assert [r["check"] for r in rows] == ["b", "a"]


# ---------------------------------------------------------------- texts

def test_cells_say_how():
    assert p.cell(None) is None and p.cell(p.handled()) is None
    assert p.cell(p.handled(ack=ACK)) == "ACK alice: on it"
    assert p.cell(p.handled(ack={**ACK, "comment": "", "until": iso(T0)})) == \
        "ACK alice (until 2023-11-14 22:13:20 UTC)"
    dt = {"id": 7, "by": "bob", "comment": "kernel", "until": iso(T0)}
    assert p.cell(p.handled(downtime=dt)) == \
        "DOWNTIME by bob until 2023-11-14 22:13:20 UTC: kernel"
    assert p.cell(p.handled(downtime={**dt, "by": "", "comment": "", "until": None})) == \
        "DOWNTIME"
    assert p.cell(p.handled(unreachable="poller-1/ping_sw3")) == \
        "UNREACHABLE (because of poller-1/ping_sw3)"
    assert p.cell(p.handled(host="DOWN", stale={"since": iso(T0)})) == \
        "host DOWN; STALE since 2023-11-14 22:13:20 UTC"
    assert p.cell(p.handled(ack=ACK, unreachable="sw-3")) == \
        "ACK alice: on it; UNREACHABLE (because of sw-3)"


def test_what_operators_wrote_is_escaped_in_a_table():
    hostile = {**ACK, "by": "eve\x1b]0;x\x07", "comment": "ok\rforged\n"}
    text = table([{"handled": p.cell(p.handled(ack=hostile, unreachable="sw\u202e3"))}],
                 ["handled"])
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text
    assert "\\x1b]0;x\\x07" in text and "ok\\rforged\\n" in text and "sw\\u202e3" in text


@pytest.mark.parametrize("shown, handled, line", [
    (0, 0, "no unhandled problems"),
    (1, 0, "1 unhandled problem"),
    (2, 3, "2 unhandled problems (3 handled: fleetwatch status lists them)"),
])
def test_summary(shown, handled, line):
    assert p.summary([{}] * shown, handled) == line


# ---------------------------------------------------------------- freshness, alerts

@pytest.mark.parametrize("row, since", [
    ({}, None), ({"heard": 5.0, "stale_at": None}, None), ({"heard": 5.0, "stale_at": 9.0}, 9.0),
    ({"heard": 10.0, "stale_at": 9.0}, None), ({"heard": None, "stale_at": 9.0}, 9.0),
])
def test_stale_since(row, since):
    assert p.stale_since(row) == since


def test_alerts_carry_the_handling_of_their_problem_since_its_last_recovery():
    how = p.handled(ack=ACK)
    alerts = [{"key": "k", "action": "trigger", "received_at": 30.0},
              {"key": "k", "action": "resolve", "received_at": 20.0},
              {"key": "k", "action": "trigger", "received_at": 10.0},
              {"key": "other", "action": "trigger", "received_at": 5.0}]
    p.on_alerts(alerts, {"k": how})
    assert [a["handled"] for a in alerts] == [how, None, None, None]


# ---------------------------------------------------------------- downtimes, by the sinks' matcher

def test_downtime_of_uses_the_sinks_matcher():
    from datetime import timezone
    from sinks.alerting.downtimes.rules import Downtime
    rows = [Downtime(1, "web-*", None, T0 - 60, T0 + 600, comment="patch", author="bob"),
            Downtime(2, "sw-3", None, T0 - 60, T0 + 60, children=True, author="carol"),
            Downtime(3, "db-1", "pg", T0 - 86400, None, every="daily 22:00-23:00"),
            Downtime(4, "db-1", "disk", T0 - 60, T0 + 60, flexible=300.0),
            Downtime(5, "gone-1", None, T0 - 60, T0 + 60, removed=T0 - 1)]
    agents = [{"uuid": "u-app", "hostname": "app-1", "parents": ["sw-3"]},
              {"uuid": "u-x", "hostname": "x-1", "parents": "not a list"}]
    of = p.downtime_of(rows, T0, agents, timezone.utc)
    shown = of("web-1", "u1", "load")
    assert (shown["id"], shown["by"], shown["comment"], shown["until"]) == (
        1, "bob", "patch", iso(T0 + 600))
    assert of("app-1", "u-app", None)["id"] == 2               # --children: app-1 behind sw-3
    assert of("x-1", "u-x", None) is None and of("gone-1", "u", None) is None
    # 2023-11-14 22:13:20 UTC is in the daily 22:00-23:00 window: until its end
    assert of("db-1", "u", "pg")["until"] == iso(T0 + 2800) and of("db-1", "u", "pg")["every"]
    # flexible: only a problem that began in its window, for its length from then
    assert of("db-1", "u", "disk", None) is None
    assert of("db-1", "u", "disk", T0 - 30)["until"] == iso(T0 + 270)
    assert p.downtime_of([], T0) is p.none


@pytest.mark.parametrize("extra, kind", [
    ({}, "HARD"), ({"kind": "SOFT"}, "SOFT 1/3"), ({"flapping": True}, "FLAPPING"),
    ({"kind": "SOFT", "stale": True, "stale_since": iso(T0)}, "STALE SOFT 1/3"),
])
def test_the_problems_table_type(extra, kind):
    from fleetwatch.cli.status import _problem_type
    (row,) = judged([agent()], [check(**extra)])
    assert _problem_type(row) == kind


def test_a_host_problem_has_no_type():
    from fleetwatch.cli.status import _problem_type
    (row,) = judged([agent(state="DOWN")], [])
    assert _problem_type(row) is None


def test_an_agent_gone_is_shown_gone_and_is_no_problem():
    from query.fleet import with_states
    host = {"uuid": "u1", "name": "", "up": False, "since": 100.0, "deadline": 50.0,
            "last_heard": 40.0, "gone": 60.0}
    agents = [{"uuid": "u1", "hostname": "i-1", "last_seen": None}]
    with_states(agents, [], [], [host], now=200.0)
    assert (agents[0]["state"], agents[0]["state_since"]) == ("GONE", iso(60.0))
    assert p.problems(agents, []) == []
