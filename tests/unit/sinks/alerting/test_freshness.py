"""Check freshness (sinks/alerting/freshness/rules.py) on an injected clock: the threshold, the
one silence rule hosts share, a host that holds its checks, and a stale check through the
Nagios state machine (SOFT, HARD, recovery by a late real result)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sinks.alerting.checks import rules as checks
from sinks.alerting.freshness import rules as freshness
from sinks.alerting.hosts import rules as hosts
from sinks.alerting.freshness.rules import Host, Watch, due, held, overdue, threshold

POLICY = checks.Policy(max_attempts=3, renotify_interval=0, flap_detection=False)


@pytest.mark.parametrize("interval, timeout, setting, expected", [
    (60, 10, None, 130.0),      # twice the interval plus the timeout
    (60, 10, 0, 130.0),         # 0: the default
    (60, None, None, 120.0),    # no timeout declared
    (60, 10, 300, 300.0),       # the check's own setting wins
    (1, 1, None, 3.0),
    (60, 10, 5, 5.0),           # even below the interval (the operator said so)
])
def test_threshold(interval, timeout, setting, expected):
    assert threshold(interval, timeout, setting) == expected


@pytest.mark.parametrize("last, limit, now, expected", [
    (100, 10, 109.9, False),
    (100, 10, 110, False),      # exactly at the threshold: not yet
    (100, 10, 110.001, True),
    (100, 0, 100, False),
])
def test_overdue(last, limit, now, expected):
    assert overdue(last, limit, now) is expected


def test_hosts_and_checks_share_the_boundary():
    """A host DOWN and a check stale at the same silence, by the same rule."""
    policy = hosts.Policy(timeout=13)
    host = hosts.HostState(last_heard=100.0)
    watch = Watch(interval=5, timeout=3, heard=100.0)            # threshold 13 too
    for now, expected in ((113.0, False), (113.5, True)):
        state, _ = hosts.expire(host, now, policy)
        assert (not state.up) is expected
        assert due(watch, now) is expected


HEARD = Host(up=True, heard=1e9)            # heard all along
#  declared at 1000, interval 10, timeout 5: threshold 25
W = Watch(interval=10, timeout=5, declared=1000.0)


@pytest.mark.parametrize("name, watch, now, host, floor, expected", [
    ("fresh", Watch(10, 5, None, 1000.0, 1010.0), 1030, HEARD, 0, False),
    ("silent past threshold", Watch(10, 5, None, 1000.0, 1010.0), 1035.5, HEARD, 0, True),
    ("exactly at threshold", Watch(10, 5, None, 1000.0, 1010.0), 1035, HEARD, 0, False),
    ("never reported: from the declaration", W, 1025.5, HEARD, 0, True),
    ("never reported, not yet", W, 1024, HEARD, 0, False),
    ("redeclared later: counts from then", Watch(10, 5, None, 1100.0, 1010.0), 1120,
     HEARD, 0, False),
    ("own setting", Watch(10, 5, 100, 1000.0, 1010.0), 1050, HEARD, 0, False),
    ("own setting, past", Watch(10, 5, 100, 1000.0, 1010.0), 1110.5, HEARD, 0, True),
    ("host DOWN", W, 1100, Host(up=False, heard=1e9), 0, False),
    ("host not heard since the deadline", W, 1100, Host(up=True, heard=1025.0), 0, False),
    ("host heard after the deadline", W, 1100, Host(up=True, heard=1025.5), 0, True),
    ("host not timed by heartbeats", W, 1100, None, 0, True),
    ("sink just started", W, 1100, HEARD, 1090.0, False),
    ("sink started a threshold ago", W, 1115.5, HEARD, 1090.0, True),
    ("stale: next attempt not yet", Watch(10, 5, None, 1000.0, None, 1030.0), 1039, HEARD, 0,
     False),
    ("stale: next attempt after an interval", Watch(10, 5, None, 1000.0, None, 1030.0), 1040,
     HEARD, 0, True),
    ("stale, then heard: fresh again", Watch(10, 5, None, 1000.0, 1035.0, 1030.0), 1050,
     HEARD, 0, False),
    ("stale, then heard, then silent again", Watch(10, 5, None, 1000.0, 1035.0, 1030.0),
     1060.5, HEARD, 0, True),
])
def test_due(name, watch, now, host, floor, expected):
    assert due(watch, now, host, floor) is expected, name


def test_held_reasons():
    assert held(None, 100) is None
    assert held(Host(up=False, heard=200), 100) == "host down"
    assert held(Host(up=True, heard=100), 100) == "host not heard since the deadline"
    assert held(Host(up=True, heard=100.5), 100) is None


def test_stale_text_counts_whole_seconds_from_the_last_result_or_declaration():
    assert freshness.stale_text(Watch(10, 5, None, 1000.0, 1010.0), 1035.7) == \
        "stale: no result for 25 s"
    assert freshness.stale_text(W, 1026.2) == "stale: no result for 26 s"


def test_stale_order_is_just_after_the_last_result():
    assert 1000.0 < freshness.stale_order(1000.0) < 1000.001
    assert 0 < freshness.stale_order(None) < 1e-300


class Fleet:
    """A check judged by the rule on a fake clock, as the sink's tick and results do it."""

    def __init__(self, watch: Watch):
        self.watch, self.state, self.sent = watch, checks.CheckState(), []

    def tick(self, now: float, host: Host | None = HEARD) -> None:
        if not due(self.watch, now, host):
            return
        step = checks.evaluate(self.state, checks.UNKNOWN,
                               freshness.stale_order(self.state.last_result), now, POLICY)
        self._apply(step, now, last_result=self.state.last_result)
        self.watch = Watch(self.watch.interval, self.watch.timeout, self.watch.setting,
                           self.watch.declared, self.watch.heard, now)

    def result(self, status: int, started: float, now: float) -> None:
        step = checks.evaluate(self.state, status, started, now, POLICY)
        assert step.applied
        self._apply(step, now, last_result=step.state.last_result)
        self.watch = Watch(self.watch.interval, self.watch.timeout, self.watch.setting,
                           self.watch.declared, now, None)

    def _apply(self, step, now, last_result):
        state = step.state
        for alert in step.alerts:
            state = checks.delivered(state, alert, now)
            self.sent.append((now, alert.action, checks.NAMES[alert.status]))
        self.state = replace(state, last_result=last_result)


def test_stale_goes_soft_then_hard_once_and_a_late_result_recovers():
    fleet = Fleet(Watch(interval=10, timeout=5, declared=1000.0))
    fleet.result(checks.OK, 1001.0, 1002.0)
    for t in range(1003, 1080):                 # the plugin stops reporting
        fleet.tick(float(t))
    # stale at 1028 (past 1002 + 25): SOFT 1, then 1038 SOFT 2, 1048 HARD: one alert
    assert fleet.sent == [(1048.0, "trigger", "UNKNOWN")]
    assert fleet.state.status == checks.UNKNOWN and fleet.state.hard
    assert fleet.state.last_result == 1001.0            # the stale results did not move it
    fleet.result(checks.OK, 1009.0, 1080.0)             # a run started long ago, late
    assert fleet.sent[-1] == (1080.0, "resolve", "OK")
    for t in range(1081, 1100):
        fleet.tick(float(t))
    assert len(fleet.sent) == 2


def test_stale_soft_then_result_alerts_nobody():
    fleet = Fleet(Watch(interval=10, timeout=5, declared=1000.0))
    fleet.result(checks.OK, 1001.0, 1002.0)
    for t in range(1003, 1040):
        fleet.tick(float(t))
    assert not fleet.state.hard and fleet.state.attempt == 2
    fleet.result(checks.OK, 1039.0, 1040.0)
    assert fleet.sent == [] and fleet.state.status == checks.OK


def test_no_stale_while_the_host_is_down():
    fleet = Fleet(Watch(interval=10, timeout=5, declared=1000.0))
    fleet.result(checks.OK, 1001.0, 1002.0)
    for t in range(1003, 1200):
        fleet.tick(float(t), Host(up=False, heard=1005.0))
    assert fleet.sent == [] and fleet.state.status == checks.OK


@pytest.mark.parametrize("row, stale, output", [
    (None, False, "LOAD OK"),
    ({"heard": 1000.0, "stale_at": None}, False, "LOAD OK"),
    ({"heard": 1000.0, "stale_at": 1030.0}, True, "stale: no result for 60 s"),
    ({"heard": 1040.0, "stale_at": 1030.0}, False, "LOAD OK"),     # heard since
    ({"heard": None, "stale_at": 1030.0}, True, "stale: no result since it was declared"),
])
def test_status_marks_what_the_sinks_judged_stale(row, stale, output):
    from fleetwatch.cli.status import _type
    from query.fleet import with_freshness
    check = {"uuid": "u", "plugin": "load", "state": "OK", "status": 0, "output": "LOAD OK",
             "state_type": "SOFT", "flapping": False}
    with_freshness([check], [{"uuid": "u", "plugin": "load", **row}] if row else [], 1060.0)
    assert check["stale"] is stale and check["output"] == output
    assert (check["state"], _type(check)) == (("UNKNOWN", "STALE SOFT") if stale
                                              else ("OK", "SOFT"))


def test_the_agent_declares_freshness_only_when_set():
    from agent.declared import Declared, Refused, local_plugins
    from agent.plugins_config import CheckConfig
    from fleetwatch.config import ConfigError, build
    checks_ = [build(CheckConfig, {"name": "load", "command": "check_load", "interval": 60}),
               build(CheckConfig, {"name": "backup", "command": "check_backup",
                                   "interval": 3600, "freshness": 90000})]
    assert Declared(checks_).own_wire() == [
        {"name": "load", "interval": 60.0, "timeout": 10.0},      # as older agents sent it
        {"name": "backup", "interval": 3600.0, "timeout": 10.0, "freshness": 90000.0}]
    (plugin,) = local_plugins("job", [{"name": "x", "command": "check_x", "freshness": 5}])
    assert plugin.wire()["freshness"] == 5.0 and plugin.local()["freshness"] == 5.0
    for bad in (-1, True, "5", float("inf")):
        with pytest.raises(Refused, match="freshness"):
            local_plugins("job", [{"name": "x", "command": "check_x", "freshness": bad}])
        with pytest.raises(ConfigError, match="freshness"):
            build(CheckConfig, {"name": "x", "command": "check_x", "freshness": bad})
