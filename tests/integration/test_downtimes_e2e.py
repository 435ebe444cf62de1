"""Downtimes end to end, on SQLite and on PostgreSQL.

First two alerting sink objects on one real database with a fake clock and the real
``fleetwatch downtime`` command run in-process on that clock: a downtime over a failure
delivers nothing, and the failure that outlives it is delivered once, at the first tick
after its end (no new result needed), whichever sink ticks; one that recovers inside it
delivers nothing at all; a silence's end does the same; a host DOWN in a downtime, a
flexible downtime, ``--children`` and the freshness rule held by a host's downtime. Then
real processes: a failing check through a real router, real sinks, a real SMTP server and a
real HTTP receiver: nothing while the downtime lasts, one trigger on each channel after.
"""

from __future__ import annotations

import functools
import json
import time

import pytest

from support.channelservers import HttpReceiver, SmtpServer
from support.clock import Clock
from support.fleet import wait_for
from support.threads import in_threads

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from sinks.alerting.silences import store as alertstate  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from support import alertsink  # noqa: E402
from support.alertsink import QUICK, T0, WEB, failing_plugins, msg, result, told  # noqa: E402

HOST = f"{WEB}/host"

sink = functools.partial(alertsink.sink, **QUICK, renotify_interval=0)


def downtime(op, clock, verb: str, *argv: str):
    """``fleetwatch downtime VERB ARGV`` on ``clock``; ``add`` with ``--force``: these
    downtimes are planned before their hosts' checks first report (the check that the
    fleet has seen them: tests/unit/query/test_known_hosts.py)."""
    return alertsink.command("downtime", op, clock, verb, *argv,
                             *(("--force",) if verb == "add" else ()))


hello = functools.partial(alertsink.hello, clock=lambda: T0)


@pytest.fixture
def op(url, fleet):
    fleet.state_url = url
    return fleet.operator_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])


def test_a_failure_outliving_a_downtime_is_delivered_once_at_its_end(url, op):
    hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    try:
        code, out = downtime(op, clock, "add", "WEB-1", "load", "--for", "10m", "--comment",
                             "disk swap", "--by", "alice")
        assert code == 0 and out.startswith("downtime 1: WEB-1 load from ")
        for i in range(1, 10):                                  # failing, both sinks
            clock.now = T0 + 60 * i
            (a if i % 2 else b).write([result(2, clock.now)])
            in_threads(a.tick, b.tick)
        assert told(url) == []
        listed = json.loads(downtime(op, clock, "list", "--json")[1])["downtimes"]
        assert [(d["id"], d["state"], d["held"], d["by"]) for d in listed] == \
            [(1, "active", 1, "alice")]
        clock.now = T0 + 600 - 0.001                            # the boundary
        in_threads(a.tick, b.tick)
        assert told(url) == []
        clock.now = T0 + 600.2                                  # the first tick after it
        in_threads(a.tick, b.tick)
        assert told(url) == ["trigger"]                         # no new result needed
        for s in (a, b, a):
            clock.advance(1)
            s.tick()
        a.write([result(2, clock.advance(1))])                  # (renotify 0: no reminder)
    finally:
        a.close()
        b.close()
    assert told(url) == ["trigger"]
    assert json.loads(downtime(op, clock, "list", "--json")[1])["downtimes"] == []
    (gone,) = json.loads(downtime(op, clock, "list", "--all", "--json")[1])["downtimes"]
    assert gone["state"] == "ended" and gone["held"] == 1


def test_a_failure_that_recovers_inside_a_downtime_delivers_nothing(url, op):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    try:
        assert downtime(op, clock, "add", "web-*", "--for", "5m")[0] == 0
        s.write([result(2, clock.advance(10))])
        s.write([result(0, clock.advance(10))])
        clock.now = T0 + 301
        s.tick()
        s.write([result(0, clock.advance(10))])
    finally:
        s.close()
    assert told(url) == []


def test_a_recurring_window_in_the_sinks_time_zone_delivers_at_its_end(url, op):
    from zoneinfo import ZoneInfo
    hello(url)
    clock = Clock(T0)                           # 2023-11-14 22:13:20 UTC, 23:13:20 in Berlin
    s = alertsink.sink(url, clock, tz=ZoneInfo("Europe/Berlin"), max_check_attempts=1,
                       renotify_interval=0)
    try:
        assert downtime(op, clock, "add", "web-1", "--every", "daily 23:00-00:30")[0] == 0
        s.write([result(2, clock.advance(10))])                 # held
        clock.now = T0 + 4600 - 0.1                             # 00:29:59.9 in Berlin
        s.tick()
        assert told(url) == []
        clock.now = T0 + 4600 + 0.1                             # the window's end
        s.tick()
        assert told(url) == ["trigger"]
        s.write([result(0, clock.advance(10))])
        clock.now = T0 + 86400                                  # the next window
        s.write([result(2, clock.now)])
        s.tick()
    finally:
        s.close()
    assert told(url) == ["trigger", "resolve"]


def test_a_removed_downtime_delivers_at_the_next_tick(url, op):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    try:
        assert downtime(op, clock, "add", "web-1", "--for", "1h")[0] == 0
        s.write([result(2, clock.advance(10))])
        s.tick()
        assert downtime(op, clock, "remove", "1") == (0, "downtime 1 removed\n")
        assert downtime(op, clock, "remove", "1")[0] == 1
        s.tick()
    finally:
        s.close()
    assert told(url) == ["trigger"]


def test_a_silence_ending_delivers_what_it_muted_at_the_tick(url, op):
    hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    try:
        with db.engine(url).begin() as conn:
            alertstate.add_silence(conn, "web-1", None, T0, T0 + 120, "work", "alice")
        a.write([result(2, clock.advance(10))])
        in_threads(a.tick, b.tick)
        clock.now = T0 + 121
        in_threads(a.tick, b.tick)
        in_threads(a.tick, b.tick)
    finally:
        a.close()
        b.close()
    assert told(url) == ["trigger"]


def test_a_host_down_in_a_downtime_is_told_once_at_its_end(url, op):
    hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    try:
        a.write([msg("HEARTBEAT", interval=1.0)])
        assert downtime(op, clock, "add", "web-1", "--for", "2m")[0] == 0
        for i in range(1, 12):                                  # DOWN after 10 s: held
            clock.now = T0 + 10 * i
            in_threads(a.tick, b.tick)
        assert told(url, HOST) == []
        clock.now = T0 + 121
        in_threads(a.tick, b.tick)
        in_threads(a.tick, b.tick)
    finally:
        a.close()
        b.close()
    assert told(url, HOST) == ["trigger"]


def test_a_flexible_downtime_covers_a_problem_beginning_in_its_window_for_its_length(url, op):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    iso = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(T0 + 100))
    end = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(T0 + 200))
    try:
        s.write([result(2, clock.advance(10), "disk")])         # began before the window
        assert told(url, f"{WEB}/check/disk") == ["trigger"]
        code, out = downtime(op, clock, "add", "web-1", "--start", iso, "--end", end,
                             "--flexible", "5m")
        assert code == 0, out
        clock.now = T0 + 150
        s.write([result(2, clock.now)])                         # begins in it: held 5 min
        s.write([result(2, clock.now, "disk")])
        for t in (T0 + 250, T0 + 449.9):                        # past the window: still held
            clock.now = t
            s.tick()
            s.write([result(2, clock.now)])
        assert told(url) == []
        clock.now = T0 + 450.1
        s.tick()                                                # 5 min after it began
        assert told(url) == ["trigger"]
        clock.advance(10)
        s.write([result(0, clock.now, "disk")])                 # a resolve is not held
    finally:
        s.close()
    assert told(url, f"{WEB}/check/disk") == ["trigger", "resolve"]


def test_children_covers_the_hosts_behind_a_parent(url, op):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock, ancestors=lambda h: {"sw-3", "core"} if h == "web-1" else set())
    try:
        assert downtime(op, clock, "add", "sw-3", "--for", "1h")[0] == 0
        s.write([result(2, clock.advance(10))])                 # not itself: told
        assert told(url) == ["trigger"]
        assert downtime(op, clock, "add", "sw-3", "--for", "1h", "--children")[0] == 0
        s.write([result(0, clock.advance(10))])                 # behind it: held
        s.write([result(2, clock.advance(10))])
    finally:
        s.close()
    assert told(url) == ["trigger"]


def test_children_come_from_the_dependency_graph_of_the_config(url, op):
    hello(url)
    clock = Clock(T0)
    s = sink(url, clock, dependencies=[{"hosts": "web-*", "parents": ["sw-3"]}])
    try:
        assert downtime(op, clock, "add", "sw-3", "--for", "1h", "--children")[0] == 0
        s.write([result(2, clock.advance(10))])                 # web-1 is behind sw-3
        clock.advance(3600)
        s.tick()                                                # the end: told once
        s.tick()
    finally:
        s.close()
    assert told(url) == ["trigger"]


def test_a_host_downtime_holds_its_checks_freshness(url, op):
    clock = Clock(T0)
    hello(url, clock=clock, plugins=[{"name": "load", "interval": 1, "timeout": 1}])  # stale: 3 s
    s = sink(url, clock)
    try:
        assert downtime(op, clock, "add", "web-1", "--for", "30s")[0] == 0
        for i in range(40):                     # heartbeats, no result: stale only after
            clock.now = T0 + i
            s.write([msg("HEARTBEAT", interval=1.0)])
            s.tick()
            if i == 29:
                assert s.counts["check_stale"] == 0
    finally:
        s.close()
    assert s.counts["check_stale"] > 0
    assert told(url) == ["trigger"]


# ---------------------------------------------------------------- real processes

def test_a_downtime_over_a_real_failure_delivers_nothing_then_once_at_its_end(fleet):
    smtp, hook = SmtpServer().start(), HttpReceiver().start()
    try:
        folder, _ = failing_plugins(fleet, ["flaky"])
        router = fleet.router()
        fleet.sink("registry", [router])
        fleet.sink("alerting", [router], alerting={
            "max_check_attempts": 1, "renotify_interval": 3600, "flap_detection": False,
            "tick_interval": 0.2, "delivery": {
                "channels": {
                    "pager": {"type": "webhook", "url": hook.url, "timeout": 2},
                    "mail": {"type": "email", "host": "127.0.0.1", "port": smtp.port,
                             "from": "fleetwatch@example.org", "to": ["ops@example.org"],
                             "timeout": 2}},
                "rules": [{"channels": ["pager", "mail"]}],
                "retry": {"initial": 0.05, "max": 0.2}, "poll_interval": 0.1, "lease": 10}})
        fleet.agent([router], plugins={"dirs": [str(folder)], "checks": [
            {"name": "check_flaky", "command": "check_flaky", "interval": 1, "timeout": 5}]})
        op = fleet.operator_config([router])
        wait_for(lambda: any(c["plugin"] == "check_flaky" for c in fleet.status(op)["checks"]),
                 30, 0.2, "the plugin in the registry")
        before = time.time()
        # long enough for the scheduler's start and the first failing run on a busy machine
        out = fleet.cli("downtime", "add", "agent-host", "check_flaky", "--for", "15s",
                        "--comment", "planned", "--config", str(op)).stdout
        assert out.startswith("downtime 1: agent-host check_flaky from ")
        ends = before + 15                                      # (it ends after this)
        fleet.scheduler([router])

        def held():
            (d,) = json.loads(fleet.cli("downtime", "list", "--all", "--json", "--config",
                                        str(op)).stdout)["downtimes"]
            return d["held"]
        wait_for(lambda: held() >= 1, 30, 0.2, "the failure held by the downtime")
        (check,) = [c for c in fleet.status(op)["checks"] if c["plugin"] == "check_flaky"]
        assert check["state"] == "CRITICAL"
        wait_for(lambda: time.time() >= ends or hook.posts or smtp.messages, 30, 0.05,
                 "the downtime's end, or a delivery before it")
        assert hook.posts == [] and smtp.messages == []         # nothing while it lasts

        def triggers():
            return [p for p in list(hook.posts) if p["event_action"] == "trigger"]
        wait_for(triggers, 30, 0.1, "the trigger after the downtime")
        wait_for(lambda: smtp.messages, 20, 0.1, "the mail after the downtime")
        assert "CRITICAL agent-host/check_flaky" in smtp.parsed()[0]["Subject"]
        seen: set = set()

        def last_run():
            (c,) = [c for c in fleet.status(op)["checks"] if c["plugin"] == "check_flaky"]
            return c["last_run"]
        first = last_run()
        wait_for(lambda: seen.add(last_run()) or len(seen - {first}) >= 3, 30, 0.2,
                 "three more failing runs after its end")
        assert len(triggers()) == 1 and len(hook.posts) == 1 and len(smtp.messages) == 1
    finally:
        hook.stop()
        smtp.stop()
