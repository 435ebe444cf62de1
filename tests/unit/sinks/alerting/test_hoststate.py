"""Hosts gone silent (sinks/alerting/hosts/rules.py) with a fake clock: DOWN/UP, timeouts, a router
that lost a host while another still hears it, and silences."""

from __future__ import annotations

import pytest

from support.clock import Clock
from sinks.alerting.hosts.rules import (HostState, Policy, delivered, deadline, expire, heard)

POLICY = Policy(timeout=0, intervals=3, minimum=10)


def drive(events, policy=POLICY, silenced=lambda t: False):
    """Events: ("beat", t, router) or ("tick", t). Returns the final state, the alerts that
    went out as (t, reason) and every lost router report as (t, router)."""
    state, sent, lost = None, [], []
    for event in events:
        kind, t = event[0], event[1]
        if kind == "beat":
            step = heard(state, event[2], t, 2.0, policy)
            state, alerts = step.state, step.alerts
            lost += [(t, r) for r in step.lost]
        else:
            state, alerts = expire(state, t, policy)
        for alert in alerts:
            if not silenced(t):
                state = delivered(state, alert)
                sent.append((t, alert.reason))
    return state, sent, lost


@pytest.mark.parametrize("timeout, intervals, minimum, interval, expected", [
    (0, 3, 10, 2.0, 10.0),      # 3 x 2 s is under the minimum
    (0, 3, 10, 5.0, 15.0),
    (0, 3, 10, None, 10.0),     # no interval said: 2 s assumed
    (30, 3, 10, 5.0, 30.0),     # an explicit timeout wins
    (0, 4, 0, 0.5, 2.0),
])
def test_timeout(timeout, intervals, minimum, interval, expected):
    policy = Policy(timeout=timeout, intervals=intervals, minimum=minimum)
    assert policy.timeout_for(interval) == expected
    assert deadline(HostState(last_heard=100.0, interval=interval), policy) == 100.0 + expected


def test_steady_heartbeats_never_alert():
    events = []
    for t in range(1000, 1100, 2):
        events += [("beat", t, "r1"), ("beat", t, "r2"), ("tick", t + 1)]
    state, sent, lost = drive(events)
    assert state.up and sent == [] and lost == []
    assert state.routers == {"r1": 1098, "r2": 1098}


def test_down_once_then_up_once():
    events = [("beat", 1000, "r1"), ("tick", 1005), ("tick", 1010), ("tick", 1010.5),
              ("tick", 1020), ("tick", 1100), ("beat", 1200, "r1"), ("tick", 1201),
              ("beat", 1202, "r1")]
    state, sent, _ = drive(events)
    assert sent == [(1010.5, "down"), (1200, "up")]
    assert state.up and state.since == 1200 and not state.notified


def test_down_reports_how_long_it_was_silent():
    state, alerts = expire(heard(None, "r1", 1000, 2.0, POLICY).state, 1012, POLICY)
    assert not state.up and alerts[0].action == "trigger" and alerts[0].silent_for == 12
    assert alerts[0].severity == "critical"
    back = heard(delivered(state, alerts[0]), "r2", 1030, 2.0, POLICY)
    assert back.alerts[0].action == "resolve" and back.alerts[0].silent_for == 30
    assert back.alerts[0].severity == "ok"


def test_a_router_that_lost_the_host_is_not_an_alert():
    events = [("beat", 1000, "r1"), ("beat", 1000, "r2")]
    for t in range(1002, 1040, 2):          # r1 stops relaying at 1000; r2 goes on
        events += [("beat", t, "r2"), ("tick", t + 1)]
    state, sent, lost = drive(events)
    assert sent == [] and state.up
    assert lost == [(1012, "r1")]            # reported once, when past the timeout
    assert state.routers == {"r2": 1038}


def test_a_router_that_hears_the_host_again_is_tracked_again():
    events = [("beat", 1000, "r1"), ("beat", 1000, "r2"), ("beat", 1011, "r2"),
              ("beat", 1012, "r1"), ("beat", 1013, "r2")]
    state, sent, lost = drive(events)
    assert lost == [(1011, "r1")] and sent == []
    assert state.routers == {"r1": 1012, "r2": 1013}


def test_a_host_back_from_down_was_lost_by_no_router_in_particular():
    events = [("beat", 1000, "r1"), ("beat", 1000, "r2"), ("tick", 1011), ("beat", 1020, "r2")]
    state, sent, lost = drive(events)
    assert sent == [(1011, "down"), (1020, "up")] and lost == []
    assert state.routers == {"r2": 1020}


def test_a_process_that_never_said_its_interval_is_never_down():
    policy = Policy(minimum=10, per_router=False)
    state = heard(None, "r1", 1000, None, policy).state
    assert expire(state, 1000 + 30 * 86400, policy) == (state, ())
    state = heard(state, "r1", 1001, 60.0, policy).state          # now it says: timed
    assert not expire(state, 1001 + 181, policy)[0].up


def test_process_heartbeats_take_any_router():
    policy = Policy(minimum=10, per_router=False)
    events = [("beat", 1000 + 2 * i, f"r{i % 3}") for i in range(20)]
    state, sent, lost = drive(events, policy)
    assert lost == [] and sent == [] and list(state.routers) == ["r1"]


def test_a_silenced_down_is_told_when_the_silence_ends_if_still_down():
    events = [("beat", 1000, "r1")] + [("tick", t) for t in range(1011, 1020)]
    state, sent, _ = drive(events, silenced=lambda t: t < 1015)
    assert sent == [(1015, "down")]
    assert not state.up and state.notified and not state.pending


def test_a_host_back_during_its_silence_is_never_told():
    events = [("beat", 1000, "r1"), ("tick", 1011), ("beat", 1012, "r1"), ("tick", 1013),
              ("tick", 1021)]
    state, sent, _ = drive(events, silenced=lambda t: t < 1020)
    assert sent == [] and state.up and not state.pending


def test_an_up_held_back_by_a_silence_goes_out_at_a_later_tick():
    events = [("beat", 1000, "r1"), ("tick", 1011), ("beat", 1050, "r1"), ("tick", 1051),
              ("beat", 1052, "r1"), ("tick", 1061)]
    state, sent, _ = drive(events, silenced=lambda t: 1050 <= t < 1060)
    assert sent == [(1011, "down"), (1061, "up")]
    assert state.up and not state.notified


def test_a_fake_clock_drives_a_whole_day_of_flaky_heartbeats():
    clock = Clock(1000.0)
    state, sent = None, []
    gaps = [2] * 10 + [25] + [2] * 10 + [9] + [2] * 5 + [40] + [2] * 3
    for gap in gaps:
        clock.now += gap
        state, alerts = expire(state, clock.now - 0.001, POLICY) if state else (state, ())
        for a in alerts:
            state = delivered(state, a)
            sent.append(a.reason)
        step = heard(state, "r1", clock(), 2.0, POLICY)
        state = step.state
        for a in step.alerts:
            state = delivered(state, a)
            sent.append(a.reason)
    # the 25 s and 40 s gaps are DOWN/UP; the 9 s one is within the 10 s timeout
    assert sent == ["down", "up", "down", "up"]


# ---------------------------------------------------------------- GONE

def test_an_ephemeral_host_silent_past_its_timeout_is_gone_not_down():
    state = heard(None, "r1", 100.0, 2.0, POLICY).state
    assert expire(state, 110.0, POLICY, ephemeral=True) == (state, ())    # not past yet
    gone_state, alerts = expire(state, 110.5, POLICY, ephemeral=True)
    assert alerts == () and gone_state.gone == 110.5 and not gone_state.up
    assert not gone_state.pending
    assert expire(gone_state, 1e6, POLICY, ephemeral=True) == (gone_state, ())
    assert expire(gone_state, 1e6, POLICY) == (gone_state, ())     # whatever it says now
    back = heard(gone_state, "r1", 200.0, 2.0, POLICY)
    assert back.alerts == () and back.state.up and back.state.gone is None
    assert expire(back.state, 211.0, POLICY)[1][0].action == "trigger"    # timed again


def test_a_deregistered_host_ignores_heartbeats_sent_before_it_left():
    from sinks.alerting.hosts.rules import gone
    state = heard(None, "r1", 100.0, 2.0, POLICY).state
    left = gone(state, 101.0, deregistered=100.5)
    assert (left.gone, left.deregistered, left.up, left.pending) == (101.0, 100.5, False,
                                                                      False)
    late = heard(left, "r2", 102.0, 2.0, POLICY, sent=100.4)
    assert late.state == left and late.alerts == ()
    assert heard(left, "r2", 102.0, 2.0, POLICY).state == left      # no ts: not after it
    again = heard(left, "r2", 300.0, 2.0, POLICY, sent=299.0)
    assert again.state.up and again.state.gone is None and again.alerts == ()


def test_a_deregister_dated_in_the_future_hides_no_later_heartbeat():
    """Issue 31: the DEREGISTER's ``ts`` is the sender's clock, bounded by the receiver's
    (when the host went GONE): one dated in year 9999 leaves the host back at its next
    heartbeat, and DOWN when it then goes silent."""
    from sinks.alerting.hosts.rules import gone
    state = heard(None, "r1", 100.0, 2.0, POLICY).state
    left = gone(state, 101.0, deregistered=253402300799.0)
    assert (left.gone, left.deregistered, left.left) == (101.0, 101.0, 101.0)
    assert heard(left, "r1", 101.5, 2.0, POLICY, sent=100.9).state == left   # sent before
    back = heard(left, "r1", 102.0, 2.0, POLICY, sent=101.9).state
    assert back.up and back.gone is None
    assert expire(back, 112.5, POLICY)[1][0].action == "trigger"
    # a row written before the bound holds the ts as sent: bounded when read
    old = HostState(up=False, last_heard=100.0, gone=101.0, deregistered=253402300799.0)
    assert old.left == 101.0 and heard(old, "r1", 102.0, 2.0, POLICY, sent=101.9).state.up
    assert gone(left, 120.0, deregistered=253402300799.0).left == 101.0    # resent


def test_a_host_down_and_told_that_leaves_owes_nothing():
    from sinks.alerting.hosts.rules import gone
    state, sent, _ = drive([("beat", 100.0, "r1"), ("tick", 111.0)])
    assert sent == [(111.0, "down")] and state.notified
    left = gone(state, 120.0, deregistered=119.0)
    assert not left.notified and not left.pending and expire(left, 500.0, POLICY)[1] == ()
    assert gone(left, 130.0, deregistered=125.0).gone == 120.0      # a resend: still then
