"""Acknowledgements (sinks/alerting/acks/rules.py): when one ends, what it holds back, and a check's
alerts under one on a fake clock (the rule the alerting sink's evaluation applies per result:
end the acknowledgement if due, then hold back what it covers)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from support.clock import Clock
from sinks.alerting.acks import rules as acks
from sinks.alerting.checks import rules as checks
from sinks.alerting.acks.rules import Ack
from sinks.alerting.checks.rules import CRITICAL, OK, WARNING, Policy

UUID = "a1" * 16
T0 = 1_700_000_000.0


def ack(status=CRITICAL, sticky=False, expire=None, created=T0, ended=None, id_=1) -> Ack:
    return Ack(id_, acks.check_key(UUID, "load"), UUID, "load", status, created, "alice",
               "on it", sticky, True, expire, None, ended)


@pytest.mark.parametrize("the_ack, status, now, reason", [
    (ack(), CRITICAL, T0 + 10, None),                            # same problem: lasts
    (ack(), WARNING, T0 + 10, acks.CHANGED),                     # normal: any state change
    (ack(), OK, T0 + 10, acks.RECOVERED),
    (ack(sticky=True), WARNING, T0 + 10, None),                  # sticky: lasts over a change
    (ack(sticky=True), OK, T0 + 10, acks.RECOVERED),             # ... ends at recovery
    (ack(expire=T0 + 60), CRITICAL, T0 + 59.999, None),          # expiry: the boundary
    (ack(expire=T0 + 60), CRITICAL, T0 + 60, acks.EXPIRED),
    (ack(expire=T0 + 60), OK, T0 + 61, acks.EXPIRED),            # expiry first
    (ack(ended=T0 + 5), OK, T0 + 10, None),                      # already ended
])
def test_when_an_acknowledgement_ends(the_ack, status, now, reason):
    assert acks.ends(the_ack, status, now) == reason


@pytest.mark.parametrize("the_ack, now, active", [
    (ack(), T0, True),                          # from its creation
    (ack(), T0 - 1, False),
    (ack(expire=T0 + 60), T0 + 59.999, True),
    (ack(expire=T0 + 60), T0 + 60, False),      # until expire, exclusive: no tick needed
    (ack(ended=T0 + 5), T0 + 1, False),
])
def test_active(the_ack, now, active):
    assert the_ack.active(now) is active


@pytest.mark.parametrize("kind, action, held", [
    ("check", "trigger", True),          # first problem, change, reminder
    ("check", "resolve", False),         # a recovery is always told
    ("flapping", "trigger", False),
    ("host", "trigger", True),
    ("host", "resolve", False),
])
def test_what_is_held_back(kind, action, held):
    assert acks.holds(ack(), kind, action, T0 + 1) is held
    assert acks.holds(ack(expire=T0 + 1), kind, action, T0 + 1) is False
    assert acks.holds(None, kind, action, T0 + 1) is False


def test_summary_and_comment():
    assert acks.summary(ack()) == "acknowledged by alice: on it"
    assert acks.summary(replace(ack(), comment="")) == "acknowledged by alice"
    assert acks.check_comment("x" * 1000) == "x" * 1000
    for bad in ("x" * 1001, "two\nlines"):
        with pytest.raises(ValueError, match="--comment"):
            acks.check_comment(bad)


# ---------------------------------------------------------------- a check under an ack

POLICY = Policy(max_attempts=1, renotify_interval=600, flap_detection=False)


def run(stream, the_ack, clock: Clock, step=300.0):
    """Feed ``stream`` (one status per ``step`` seconds) through the check state machine
    with ``the_ack`` applied as the sink applies it; return the alerts told as
    (minute, action, reason), and the acknowledgement (None once ended) and why it ended."""
    state, told, reason = checks.CheckState(), [], None
    for status in stream:
        now = clock.advance(step)
        s = checks.evaluate(state, status, now, now, POLICY)
        state = s.state
        if the_ack is not None:
            reason = acks.ends(the_ack, state.status, now)
            if reason is not None:
                the_ack = None
        for alert in s.alerts:
            if acks.holds(the_ack, alert.kind, alert.action, now):
                continue
            state = checks.delivered(state, alert, now)
            told.append((round((now - T0) / 60), alert.action, alert.reason))
    return told, the_ack, reason


def test_no_reminders_while_acknowledged_until_it_expires_then_they_resume():
    clock = Clock(T0)
    # CRITICAL from minute 5; acknowledged at 0 (as if after the first alert) until minute 31
    told, left, reason = run([CRITICAL] * 10, ack(expire=T0 + 31 * 60), clock)
    # held: the first trigger (5) and reminders at 10..30; at 35 (past the expiry) told
    assert told == [(35, "trigger", "problem"), (45, "trigger", "reminder")]
    assert left is None and reason == acks.EXPIRED


def test_an_ack_made_after_the_trigger_holds_the_reminders_only():
    clock = Clock(T0)
    state = checks.CheckState()
    now = clock.advance(300)
    step = checks.evaluate(state, CRITICAL, now, now, POLICY)
    state = checks.delivered(step.state, step.alerts[0], now)        # told at minute 5
    the_ack = ack(created=now + 1)
    held = []
    for _ in range(6):                                               # 30 more minutes
        now = clock.advance(300)
        step = checks.evaluate(state, CRITICAL, now, now, POLICY)
        assert acks.ends(the_ack, step.state.status, now) is None
        held += [a.reason for a in step.alerts if acks.holds(the_ack, a.kind, a.action, now)]
        state = step.state
    assert held == ["reminder"] * 5 and state.notified == CRITICAL   # from minute 15 on


@pytest.mark.parametrize("sticky, told, reason", [
    # normal: the WARNING at 5 is held, the CRITICAL at 10 ends it (a change) and is told
    (False, [(10, "trigger", "problem"), (15, "resolve", "recovery"),
             (20, "trigger", "problem")], acks.CHANGED),
    # sticky: the CRITICAL is held too, the recovery ends it (nothing was told: no resolve)
    (True, [(20, "trigger", "problem")], acks.RECOVERED),
])
def test_a_change_ends_a_normal_ack_and_recovery_ends_any(sticky, told, reason):
    clock = Clock(T0)
    # WARNING acknowledged, then CRITICAL (a change), OK, CRITICAL again: the problem at
    # 20 is a new one, not acknowledged
    got = run([WARNING, CRITICAL, OK, CRITICAL], ack(WARNING, sticky), clock)
    assert got == (told, None, reason)


# ---------------------------------------------------------------- the notice on the channels

def test_the_notice_pages_acknowledge_with_the_problems_key():
    from sinks.alerting.acks import store as ackstore
    from sinks.alerting.delivery import channels
    from sinks.alerting.delivery.channeltypes import WebhookChannel
    from sinks.alerting.delivery.store import event_row
    event = ackstore.notice(ack(), "web-1", T0 + 5)
    assert (event["key"], event["action"], event["severity"]) == (
        acks.check_key(UUID, "load"), "acknowledge", "critical")
    payload = channels.webhook_payload(event, WebhookChannel(url="http://x/", routing_key="K"))
    assert payload["event_action"] == "acknowledge"
    assert payload["dedup_key"] == acks.check_key(UUID, "load")
    assert channels.subject(event) == \
        "[fleetwatch] ACKNOWLEDGED web-1/load: acknowledged by alice: on it"
    assert event_row(event, T0)["action"] == "acknowledge"
    host = replace(ack(), key=acks.host_key(UUID), check=None)
    assert channels.label(ackstore.notice(host, None, T0)) == "ACKNOWLEDGED"
    assert event_row({**event, "action": "bogus"}, T0)["action"] == "trigger"
