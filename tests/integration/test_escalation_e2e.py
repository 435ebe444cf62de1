"""Escalation end to end, on SQLite and on PostgreSQL.

First two alerting sink objects on one real database with a fake clock (and the real
``fleetwatch ack`` command run in-process on that clock): notifications are numbered
(a reminder is 2, the 3rd goes to the ``from_notification: 3`` rule too), an ``after`` rule
gets ONE escalation at its boundary whichever sink ticks, its channel hears the recovery,
and a new problem starts the count again; an acknowledgement stops the escalation and its
removal gives the first tier ``after`` again; a silence mutes it until it ends; a host DOWN
escalates like a check; a recovery reaches every channel a trigger of its problem went to;
a problem row no told state backs is dropped at the tick. Then real processes: two failing
checks through a real router, a real alerting sink and two real HTTP receivers (the first
tier, the second): the second receiver is paged ``after`` the first was, for the check
nobody acknowledged only, and hears its recovery.
"""

from __future__ import annotations

import functools
import time
from datetime import datetime

import pytest

from support.channelservers import HttpReceiver
from support.clock import Clock
from support.fleet import wait_for
from support.threads import in_threads

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from sinks.alerting.silences import store as alertstate  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402
from fleetwatch.store import db, schema  # noqa: E402
from support import alertsink  # noqa: E402
from support.alertsink import (  # noqa: E402
    LOAD, QUICK, T0, WEB, alert_events, failing_plugins, hello, result, rows)

CHANNELS = {c: {"type": "webhook", "url": f"http://127.0.0.1:9/{c}"}
            for c in ("pager", "lead", "tier2")}
RULES = [{"severity": ["critical"], "channels": ["pager"]},
         {"from_notification": 3, "channels": ["lead"]},
         {"after": "30m", "channels": ["tier2"]}]
ack = functools.partial(alertsink.command, "ack")
open_problems = functools.partial(rows, table="notified_problems")


def sink(url, clock, rules=RULES) -> AlertingSink:
    return alertsink.sink(url, clock, **QUICK, renotify_interval=600,
                          delivery={"channels": CHANNELS, "rules": rules})


def told(url, key=LOAD) -> list[tuple]:
    """(action, notification, channels) of every alert event of ``key``, in order."""
    return [(e["action"], e.get("notification"), [d["channel"] for d in e["deliveries"]])
            for e in alert_events(url, key)]


@pytest.fixture
def op(url, fleet):
    fleet.state_url = url
    return fleet.operator_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])


def test_numbered_then_escalated_once_at_after_and_the_tier_hears_the_recovery(url):
    hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    try:
        a.write([result(2, clock.advance(1))])                      # notification 1
        clock.now = T0 + 601
        b.write([result(2, clock.now)])                              # a reminder: 2
        clock.now = T0 + 1201
        a.write([result(2, clock.now)])                              # 3: lead too
        clock.now = T0 + 1 + 1800 - 0.001                            # the boundary
        in_threads(a.tick, b.tick)
        assert [x for x, _, _ in told(url)] == ["trigger"] * 3
        clock.now = T0 + 1 + 1800
        in_threads(a.tick, b.tick)                                   # one of them
        a.tick()
        b.tick()
        (row,) = open_problems(url)
        assert (row["opened"], row["notifications"]) == (T0 + 1, 3)
        assert list(row["escalated"].values()) == [T0 + 1801]
        b.write([result(0, clock.advance(1))])                       # recovery
        assert open_problems(url) == []
        a.write([result(2, clock.advance(1))])                       # a new problem: 1
    finally:
        a.close()
        b.close()
    assert told(url) == [("trigger", 1, ["pager"]), ("trigger", 2, ["pager"]),
                         ("trigger", 3, ["pager", "lead"]), ("trigger", 3, ["tier2"]),
                         ("resolve", None, ["pager", "lead", "tier2"]),
                         ("trigger", 1, ["pager"])]
    assert a.counts["escalation_sent"] + b.counts["escalation_sent"] == 1


def test_an_ack_stops_the_escalation_and_its_removal_restarts_the_clock(url, op):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    try:
        s.write([result(2, clock.advance(1))])
        clock.now = T0 + 1799                                        # just before after
        assert ack(op, clock, "add", "web-1", "load")[0] == 0
        for at in (T0 + 1801, T0 + 5000):
            clock.now = at
            s.tick()                                                 # acknowledged: none
        assert [x for x, _, _ in told(url)] == ["trigger", "acknowledge"]
        assert ack(op, clock, "remove", "1")[0] == 0                 # at +5000
        clock.now = T0 + 5000 + 1800 - 0.001
        s.tick()
        assert len(told(url)) == 2
        clock.now = T0 + 5000 + 1800
        s.tick()
    finally:
        s.close()
    assert told(url) == [("trigger", 1, ["pager"]), ("acknowledge", None, ["pager"]),
                         ("trigger", 1, ["tier2"])]


def test_a_silence_mutes_the_escalation_until_it_ends(url):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    eng = db.engine(url)
    try:
        s.write([result(2, clock.advance(1))])
        with eng.begin() as conn:
            alertstate.add_silence(conn, "web-*", None, T0 + 100, T0 + 2500, "work", "bob")
        clock.now = T0 + 1801
        s.tick()
        s.tick()
        assert len(told(url)) == 1 and s.counts["escalation_muted"] == 2
        clock.now = T0 + 2500                                        # the silence is over
        s.tick()
        s.tick()
    finally:
        s.close()
        eng.dispose()
    assert told(url) == [("trigger", 1, ["pager"]), ("trigger", 1, ["tier2"])]


def test_a_host_down_escalates_and_its_tier_hears_it_is_up(url):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock, rules=[{"channels": ["pager"]},
                                {"after": 600, "kind": ["host"], "channels": ["tier2"]}])
    beat = alertsink.beat()
    try:
        s.write([beat])
        s.write([result(2, clock.advance(1))])                       # a check: not host
        clock.advance(20)
        s.tick()                                                     # DOWN
        clock.advance(600)
        s.tick()
        s.tick()
        s.write([beat])                                              # UP
    finally:
        s.close()
    assert told(url, f"{WEB}/host") == [("trigger", 1, ["pager"]), ("trigger", 1, ["tier2"]),
                                        ("resolve", None, ["pager", "tier2"])]
    assert [x for x, _, _ in told(url)] == ["trigger"]               # the check: no tier2


def test_a_problem_the_rule_does_not_match_yet_escalates_once_it_does(url):
    clock = Clock(T0)
    s = sink(url, clock, rules=[{"channels": ["pager"]},
                                {"after": 600, "severity": ["critical"], "channels": ["tier2"]}])
    try:
        s.write([result(1, clock.advance(1))])                       # WARNING
        clock.advance(600)
        s.tick()
        (row,) = open_problems(url)
        assert list(row["escalated"].values()) == [None]              # not read again
        s.write([result(2, clock.advance(1))])                       # CRITICAL: a change
        s.tick()
    finally:
        s.close()
    assert told(url) == [("trigger", 1, ["pager"]), ("trigger", 2, ["pager"]),
                         ("trigger", 2, ["tier2"])]


def test_a_recovery_reaches_every_channel_the_problem_was_told_on(url):
    # before escalation a resolve went to the last trigger's channels only: here "lead"
    # (WARNING again), leaving the pager's CRITICAL incident open for ever
    clock = Clock(T0)
    s = sink(url, clock, rules=[{"severity": ["critical"], "channels": ["pager"]},
                                {"severity": ["warning"], "channels": ["lead"]}])
    try:
        for status in (1, 2, 1, 0):
            s.write([result(status, clock.advance(1))])
    finally:
        s.close()
    assert told(url) == [("trigger", 1, ["lead"]), ("trigger", 2, ["pager"]),
                         ("trigger", 3, ["lead"]), ("resolve", None, ["lead", "pager"])]


def test_a_problem_row_its_state_does_not_back_is_dropped_not_escalated(url):
    clock = Clock(T0)
    s = sink(url, clock)
    eng = db.engine(url)
    try:
        with eng.begin() as conn:                  # a row left behind: no told state
            conn.execute(schema.notified_problems.insert(), {
                "key": LOAD, "uuid": WEB, "check_name": "load", "kind": "check",
                "opened": T0, "notifications": 1, "severity": "critical", "status": 2,
                "summary": "x", "escalated": None, "updated": T0})
        clock.now = T0 + 3600
        s.tick()
    finally:
        s.close()
        eng.dispose()
    assert open_problems(url) == [] and told(url) == []


# ---------------------------------------------------------------- real processes

def when(post) -> float:
    return datetime.fromisoformat(post["payload"]["timestamp"]).timestamp()


def test_the_second_tier_is_paged_after_its_delay_and_not_after_an_ack(fleet):
    first, second = HttpReceiver().start(), HttpReceiver().start()
    after = 4.0
    try:
        folder, flags = failing_plugins(fleet, ["web", "db"])
        router = fleet.router()
        fleet.sink("registry", [router])
        fleet.sink("alerting", [router], alerting={
            "max_check_attempts": 1, "renotify_interval": 0, "flap_detection": False,
            "tick_interval": 0.2, "delivery": {
                "channels": {"first": {"type": "webhook", "url": first.url, "timeout": 2},
                             "second": {"type": "webhook", "url": second.url, "timeout": 2}},
                "rules": [{"severity": ["critical"], "channels": ["first"]},
                          {"after": after, "channels": ["second"]}],
                "retry": {"initial": 0.05, "max": 0.2}, "poll_interval": 0.1, "lease": 10}})
        fleet.agent([router], plugins={"dirs": [str(folder)], "checks": [
            {"name": f"check_{n}", "command": f"check_{n}", "interval": 1, "timeout": 5}
            for n in flags]})
        op = fleet.operator_config([router])
        wait_for(lambda: len(fleet.status(op)["checks"]) == 2, 30, 0.2,
                 "the plugins in the registry")
        fleet.scheduler([router])

        def posts(hook, check, action="trigger"):
            return [p for p in list(hook.posts) if p["event_action"] == action
                    and p["dedup_key"].endswith(f"/check/check_{check}")]
        # db's problem is acknowledged as soon as the first tier is paged: the command
        # in-process (a new interpreter's start would eat much of ``after`` on a busy box)
        (db_page,) = wait_for(lambda: posts(first, "db"), 30, 0.05, "db paged")
        assert ack(op, time.time, "add", "agent-host", "check_db")[0] == 0
        assert time.time() - when(db_page) < after
        (web_page,) = wait_for(lambda: posts(first, "web"), 30, 0.05, "web paged")
        (escalated,) = wait_for(lambda: posts(second, "web"), 30, 0.1, "web escalated")
        assert escalated["dedup_key"] == web_page["dedup_key"]
        assert when(escalated) - when(web_page) >= after
        assert "(escalated: unacknowledged for 4s)" in escalated["payload"]["summary"]

        def ran_past(t):
            return [c for c in fleet.status(op)["checks"] if c["plugin"] == "check_db"
                    and c["last_run"] and datetime.fromisoformat(c["last_run"]).timestamp()
                    > t]
        wait_for(lambda: ran_past(when(db_page) + after + 1), 30, 0.2,
                 "db run past its escalation time")
        assert posts(second, "db") == [] and len(posts(first, "db", "acknowledge")) == 1

        flags["web"].write_text("OK")
        (resolved,) = wait_for(lambda: posts(second, "web", "resolve"), 30, 0.1,
                               "the second tier hears the recovery")
        assert resolved["dedup_key"] == web_page["dedup_key"]
        assert len(posts(second, "web")) == 1 and len(posts(first, "web", "resolve")) == 1
    finally:
        first.stop()
        second.stop()
