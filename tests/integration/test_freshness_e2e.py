"""Check freshness end to end: a scheduled check that stops reporting while its agent still
heartbeats is UNKNOWN "stale", SOFT then HARD, one alert; a silent agent is one DOWN alert
and no stale check.

First the sink objects on a real database (SQLite, then PostgreSQL), two at once on a fake
clock; then real processes: a router, the registry and alerting sinks, an agent declaring a
1 s check with ``freshness: 3``, and a scheduler that runs it, stopped (no RUN, so no
result: the agent is fine, its check is silent) and started again (it recovers).
"""

from __future__ import annotations

import functools
import signal
import stat

import pytest

from support.clock import Clock
from support.fleet import wait_for
from fleetwatch.protocol import Relayed

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from support import alertsink  # noqa: E402
from support.alertsink import T0, WEB, beat, msg, rows  # noqa: E402

CHECK = f"{WEB}/check/load"


def ok(started: float) -> Relayed:
    return msg("RESULT", command_id=f"s:load{int(started * 10)}", plugin="load", status=0,
               output="LOAD OK", started=started)


def declare(url, clock, **spec):
    alertsink.hello(url, clock=clock, plugins=[{"name": "load", **spec}])


sink = functools.partial(alertsink.sink, renotify_interval=0)
events = functools.partial(rows, table="alert_events")


def test_two_sinks_a_check_gone_silent_under_live_heartbeats_alerts_once(url):
    from test_alerting_eval import in_threads
    clock = Clock(T0)
    declare(url, clock, interval=2, timeout=1)          # threshold 2 x 2 + 1 = 5 s
    a, b = sink(url, clock), sink(url, clock)
    try:
        for i in range(4):                              # results at T0 .. T0+3
            clock.now = T0 + i
            (a if i % 2 else b).write([beat(), ok(T0 + i)])
            in_threads(a.tick, b.tick)
        for i in range(4, 30):                          # the check stops, the agent does not
            clock.now = T0 + i
            (a if i % 2 else b).write([beat()])
            in_threads(a.tick, b.tick)
        got = [(e["key"], e["action"], e["severity"], e["summary"]) for e in events(url)]
        # stale at T0+9 (6 s > 5 s) SOFT 1, T0+11 SOFT 2, T0+13 HARD: one alert
        assert got == [(CHECK, "trigger", "unknown", "stale: no result for 10 s")]
        assert a.counts["check_stale"] + b.counts["check_stale"] == 11  # T0+9, 11, ... 29
        clock.now = T0 + 30
        a.write([beat(), ok(T0 + 5)])       # a late run, started before it went stale
        a.tick()
    finally:
        a.close()
        b.close()
    assert [(e["key"], e["action"]) for e in events(url)] == [(CHECK, "trigger"),
                                                              (CHECK, "resolve")]


def test_an_agent_gone_silent_is_down_and_its_checks_are_not_stale(url):
    clock = Clock(T0)
    declare(url, clock, interval=1, timeout=1)          # threshold 3 s, host timeout 10 s
    s = sink(url, clock)
    try:
        for i in range(4):
            clock.now = T0 + i
            s.write([beat(), ok(T0 + i)])
            s.tick()
        for i in range(4, 40):                          # results and heartbeats stop
            clock.now = T0 + i
            s.tick()
    finally:
        s.close()
    assert [(e["key"], e["action"]) for e in events(url)] == [(f"{WEB}/host", "trigger")]


def test_a_check_that_never_reported_is_stale_from_its_declaration(url):
    clock = Clock(T0)
    declare(url, clock, interval=1, timeout=1, freshness=4)
    s = sink(url, clock)
    try:
        for i in range(12):
            clock.now = T0 + i
            s.write([beat()])
            s.tick()
    finally:
        s.close()
    # stale at T0+5 (5 s > 4 s), then T0+6, HARD at T0+7
    assert [(e["key"], e["action"], e["summary"]) for e in events(url)] == [
        (CHECK, "trigger", "stale: no result for 7 s")]


# ---------------------------------------------------------------- real processes

def tick_plugin(fleet):
    folder = fleet.root / "plugins"
    folder.mkdir(exist_ok=True)
    script = folder / "check_tick"
    script.write_text("#!/bin/sh\necho 'TICK OK'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return folder


def test_a_real_check_whose_runs_stop_alerts_stale_once_then_recovers(fleet):
    folder = tick_plugin(fleet)
    router = fleet.router()
    routers = [router]
    fleet.sink("registry", routers)
    fleet.sink("alerting", routers, alerting={"tick_interval": 0.2})
    fleet.agent(routers, plugins={"dirs": [str(folder)], "checks": [
        {"name": "tick", "command": "check_tick", "interval": 1, "timeout": 5,
         "freshness": 3}]})
    op = fleet.operator_config(routers)

    def check():
        found = [c for c in fleet.status(op)["checks"] if c["plugin"] == "tick"]
        return found[0] if found else None

    def stale_alerts():
        return [a for a in fleet.alerts(op) if a.get("kind") == "check"
                and a.get("check") == "tick"]

    scheduler = fleet.scheduler(routers, "sched")
    wait_for(lambda: (check() or {}).get("state") == "OK", 30, 0.2, "the check ran OK")
    scheduler.signal(signal.SIGTERM)
    assert scheduler.popen.wait(10) == 0, scheduler.log()

    fired = wait_for(lambda: [a for a in stale_alerts() if a["action"] == "trigger"], 30, 0.2,
                     "the stale alert")
    assert fired[0]["severity"] == "unknown"
    assert fired[0]["summary"].startswith("stale: no result for ")
    seen = check()
    assert seen["stale"] is True and seen["state"] == "UNKNOWN", seen
    assert seen["output"].startswith("stale: no result for "), seen
    assert seen["state_type"] == "HARD", seen

    fleet.scheduler(routers, "sched-2")                 # runs again: it recovers
    wait_for(lambda: any(a["action"] == "resolve" for a in stale_alerts()), 30, 0.2,
             "the recovery")
    assert [a["action"] for a in stale_alerts()] == ["resolve", "trigger"]   # newest first
    wait_for(lambda: (check() or {}).get("stale") is False, 10, 0.2, "not stale any more")


def test_a_process_of_a_silent_agent_is_held_like_its_checks(url):
    """A local process's heartbeats come through its agent: the agent gone quiet is one
    DOWN; back, with the process still silent, the process is DOWN."""
    clock = Clock(T0)
    s = sink(url, clock)
    job = lambda: msg("HEARTBEAT", name="job", interval=1.0)  # noqa: E731
    try:
        for i in range(4):
            clock.now = T0 + i
            s.write([beat(), job()])
            s.tick()
        for i in range(4, 30):                          # the agent and the process stop
            clock.now = T0 + i
            s.tick()
        assert [(e["key"], e["action"]) for e in events(url)] == [(f"{WEB}/host", "trigger")]
        for i in range(30, 60):                         # the agent is back, not the process
            clock.now = T0 + i
            s.write([beat()])
            s.tick()
    finally:
        s.close()
    assert [(e["key"], e["action"]) for e in events(url)] == [
        (f"{WEB}/host", "trigger"), (f"{WEB}/host", "resolve"),
        (f"{WEB}/process/job", "trigger")]


def test_a_process_silent_under_a_live_agent_is_down(url):
    clock = Clock(T0)
    s = sink(url, clock)
    try:
        for i in range(30):
            clock.now = T0 + i
            s.write([beat()] + ([msg("HEARTBEAT", name="job", interval=1.0)] if i < 4 else []))
            s.tick()
    finally:
        s.close()
    assert [(e["key"], e["action"]) for e in events(url)] == [
        (f"{WEB}/process/job", "trigger")]
