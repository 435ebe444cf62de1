"""Acknowledgements end to end, on SQLite and on PostgreSQL.

First two alerting sink objects on one real database with a fake clock and the real
``fleetwatch ack`` command run in-process on that clock: an acknowledgement holds the
reminders back, is announced once whichever sink ticks, ends at its expiry on the tick (the
boundary), and a sticky one lasts over a change and ends at recovery. Then real processes:
a failing check with reminders every second through a real router, a real alerting sink
and a real HTTP receiver: ``ack add`` stops the reminders, the receiver gets
``acknowledge`` with the trigger's dedup key, ``status`` and ``alerts`` show it,
``status --problems`` drops it from the unhandled problems, and after the recovery it is
gone.
"""

from __future__ import annotations

import functools
import json

import pytest

from support.channelservers import HttpReceiver
from support.clock import Clock
from support.fleet import wait_for
from support.threads import in_threads

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from fleetwatch.store import db, reads  # noqa: E402
from support import alertsink  # noqa: E402
from support.alertsink import (  # noqa: E402
    QUICK, T0, WEB, alert_events, failing_plugins, hello, result, rows)

sink = functools.partial(alertsink.sink, **QUICK, renotify_interval=600)
ack = functools.partial(alertsink.command, "ack")
ack_rows = functools.partial(rows, table="acknowledgements")


def events(url) -> list[tuple[str, str]]:
    """(action, summary) of every alert event of the load check, in order."""
    return [(e["action"], e["summary"]) for e in alert_events(url)]


@pytest.fixture
def op(url, fleet):
    fleet.state_url = url
    return fleet.operator_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])


def test_an_ack_holds_reminders_is_told_once_and_expires_on_the_tick(url, op):
    hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    try:
        assert ack(op, clock, "add", "web-1", "load")[0] == 2        # a check never seen
        assert ack(op, clock, "add", "web-1", "load", "--force")[0] == 1  # no problem yet
        a.write([result(2, clock.now)])                              # HARD at once: told
        clock.advance(60)
        code, out = ack(op, clock, "add", "WEB-1", "load", "--comment", "on it",
                        "--expire", "30m", "--by", "alice")
        assert code == 0 and out.startswith(f"ack 1: WEB-1 load (CRITICAL) [{WEB}] by alice")
        for s in (a, b, a):
            s.tick()                                                 # announced once
        for i in range(1, 7):                                        # 30 min, reminders due
            clock.now = T0 + 300 * i
            (a if i % 2 else b).write([result(2, clock.now)])
        clock.now = T0 + 60 + 1800 - 0.001                           # the boundary
        b.tick()
        assert ack_rows(url)[0]["ended"] is None
        clock.now = T0 + 60 + 1800
        a.tick()                                                     # no result needed
        (row,) = ack_rows(url)
        assert (row["ended"], row["end_reason"]) == (T0 + 1860, "expired")
        clock.advance(1)
        b.write([result(2, clock.now)])                              # reminders resume
    finally:
        a.close()
        b.close()
    assert [x for x, _ in events(url)] == ["trigger", "acknowledge", "trigger"]
    assert events(url)[1][1] == "acknowledged by alice: on it"


def test_a_sticky_ack_lasts_over_a_change_and_a_recovery_ends_it(url, op):
    hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    try:
        a.write([result(2, clock.advance(1))])
        code, _ = ack(op, clock, "add", WEB, "load", "--sticky", "--no-notify")
        assert code == 0
        a.tick()
        b.write([result(1, clock.advance(1))])                       # a change: held
        assert ack_rows(url)[0]["ended"] is None
        a.write([result(0, clock.advance(1)), result(2, clock.advance(1))])   # one batch
        b.tick()
    finally:
        a.close()
        b.close()
    (row,) = ack_rows(url)
    assert row["end_reason"] == "recovered"
    # no notice (--no-notify); the change held; recovery told; failing again is new
    assert [x for x, _ in events(url)] == ["trigger", "resolve", "trigger"]
    code, out = ack(op, clock, "list", "--json")
    assert code == 0 and json.loads(out)["acks"] == []


def test_a_normal_ack_ends_at_a_change_which_is_told(url, op):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    try:
        s.write([result(1, clock.advance(1))])
        assert ack(op, clock, "add", "web-1", "load", "--no-notify")[0] == 0
        s.write([result(1, clock.advance(700))])                     # reminder held
        s.write([result(2, clock.advance(1))])                       # change: ends, told
    finally:
        s.close()
    assert [x for x, _ in events(url)] == ["trigger", "trigger"]
    assert ack_rows(url)[0]["end_reason"] == "changed"
    assert ack(op, clock, "remove", "1")[0] == 1


def test_two_sinks_ticking_at_once_announce_each_ack_once(url, op):
    hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    plugins = [f"p{i}" for i in range(8)]
    try:
        a.write([result(2, clock.advance(1), p) for p in plugins])
        for p in plugins:
            assert ack(op, clock, "add", "web-1", p, "--comment", p)[0] == 0
            in_threads(a.tick, b.tick)
    finally:
        a.close()
        b.close()
    eng = db.engine(url, writer=False)
    try:
        with eng.connect() as conn:
            notices = [e["check"] for e in reads.alert_events(conn, limit=100)
                       if e["action"] == "acknowledge"]
    finally:
        eng.dispose()
    assert sorted(notices) == plugins
    assert all(r["announced"] is not None for r in ack_rows(url))


def test_a_host_down_acknowledged_is_told_and_ends_when_it_is_up(url, op):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    beat = alertsink.beat()
    try:
        s.write([beat])
        assert ack(op, clock, "add", "web-1")[0] == 1                # UP: nothing to ack
        clock.advance(20)
        s.tick()                                                     # DOWN
        code, out = ack(op, clock, "add", "web-1", "--comment", "rebooting")
        assert code == 0 and out.startswith(f"ack 1: web-1 (DOWN) [{WEB}] by ")
        s.tick()
        s.write([beat])                                              # UP
        s.tick()
    finally:
        s.close()
    told = [(e["action"], e["summary"]) for e in alert_events(url, f"{WEB}/host")]
    assert [x for x, _ in told] == ["trigger", "acknowledge", "resolve"]
    assert told[1][1].endswith(": rebooting")
    assert ack_rows(url)[0]["end_reason"] == "recovered"


# ---------------------------------------------------------------- real processes

def problems(fleet, op) -> dict:
    """``fleetwatch status --problems --json``: the unhandled problems (exit status 0)."""
    return json.loads(fleet.command("status", "--problems", "--json", "--config",
                                    str(op)).stdout)


def test_ack_stops_reminders_and_pages_acknowledge_with_the_trigger_key(fleet):
    hook = HttpReceiver().start()
    try:
        folder, flags = failing_plugins(fleet, ["flaky"])
        router = fleet.router()
        fleet.sink("registry", [router])
        alerting = {
            "max_check_attempts": 1, "renotify_interval": 1, "flap_detection": False,
            "tick_interval": 0.2, "delivery": {
                "channels": {"pager": {"type": "webhook", "url": hook.url, "timeout": 2}},
                "rules": [{"severity": ["critical"], "channels": ["pager"]}],
                "retry": {"initial": 0.05, "max": 0.2}, "poll_interval": 0.1, "lease": 10}}
        sink = fleet.sink("alerting", [router], alerting=alerting)
        fleet.agent([router], plugins={"dirs": [str(folder)], "checks": [
            {"name": "check_flaky", "command": "check_flaky", "interval": 1, "timeout": 5}]})
        op = fleet.operator_config([router])
        wait_for(lambda: any(c["plugin"] == "check_flaky" for c in fleet.status(op)["checks"]),
                 30, 0.2, "the plugin in the registry")
        fleet.scheduler([router])

        def posts(action):
            return [p for p in list(hook.posts) if p["event_action"] == action]
        wait_for(lambda: len(posts("trigger")) >= 2, 30, 0.1, "a trigger and a reminder")
        key = posts("trigger")[0]["dedup_key"]
        assert key.endswith("/check/check_flaky")
        assert "check_flaky" in [p["check"] for p in problems(fleet, op)["problems"]]
        out = fleet.cli("ack", "add", "agent-host", "check_flaky", "--comment", "on it",
                        "--config", str(op)).stdout
        assert out.startswith("ack 1: agent-host check_flaky (CRITICAL) [")
        (notice,) = wait_for(lambda: posts("acknowledge"), 20, 0.1, "the acknowledge event")
        assert notice["dedup_key"] == key
        assert notice["payload"]["summary"].startswith("ACKNOWLEDGED agent-host/check_flaky: "
                                                       "acknowledged by ")
        assert notice["payload"]["summary"].endswith(": on it")
        triggers = len(posts("trigger"))

        def runs():
            (check,) = [c for c in fleet.status(op)["checks"] if c["plugin"] == "check_flaky"]
            return check
        def three_more_runs():
            first, seen = runs()["last_run"], set()
            wait_for(lambda: seen.add(runs()["last_run"]) or len(seen - {first}) >= 3, 30,
                     0.2, "three more runs, each past the reminder interval")
        three_more_runs()
        assert len(posts("trigger")) == triggers                      # no reminders
        assert sink.stop() == 0                                       # a restart: it stays
        sink = fleet.sink("alerting", [router], alerting=alerting)
        three_more_runs()
        assert len(posts("trigger")) == triggers and len(posts("acknowledge")) == 1
        check = runs()
        assert check["ack"]["comment"] == "on it" and check["ack"]["until"] is None
        shown = [a for a in fleet.alerts(op) if a["key"] == key and a["action"] == "trigger"]
        assert shown[0]["ack"]["comment"] == "on it"
        assert "ACK " in fleet.cli("status", "--config", str(op)).stdout
        unhandled = problems(fleet, op)                               # the on-call view
        assert "check_flaky" not in [p["check"] for p in unhandled["problems"]]
        assert unhandled["handled"] == 1

        flags["flaky"].write_text("OK")
        wait_for(lambda: posts("resolve"), 30, 0.1, "the recovery")
        listed = json.loads(fleet.cli("ack", "list", "--json", "--config", str(op)).stdout)
        assert listed["acks"] == []
        assert runs()["ack"] is None
        assert len(posts("trigger")) == triggers
    finally:
        hook.stop()
