"""Escalation (sinks/alerting/escalation/rules.py, the rules' conditions in sinks/alerting/delivery/rules.py):
the conditions as configured, routing by notification number, when a problem is
unacknowledged since, which ``after`` rules are due at the boundaries, and a check's whole
story on a fake clock: the check state machine, an acknowledgement and the tiers applied as
the sink applies them (number what goes out, escalate at the tick)."""

from __future__ import annotations

import pytest

from support.clock import Clock
from fleetwatch.config import ConfigError, build
from sinks.alerting.acks import rules as acks
from sinks.alerting.checks import rules as checks
from sinks.alerting.delivery import events
from sinks.alerting.escalation import rules as tiers
from sinks.alerting.acks.rules import Ack
from sinks.alerting.checks.rules import CRITICAL, OK, WARNING, Policy
from sinks.alerting.delivery.config import DeliveryConfig
from sinks.alerting.delivery.rules import Rule, route

UUID = "a1" * 16
T0 = 1_700_000_000.0
KEY = f"{UUID}/check/load"
CHANNELS = {c: {"type": "webhook", "url": f"http://127.0.0.1:9/{c}"}
            for c in ("pager", "tier2", "lead")}


def delivery(*rules) -> DeliveryConfig:
    return build(DeliveryConfig, {"channels": CHANNELS, "rules": list(rules)}, "alerting.yaml",
                 "alerting.delivery")


# ---------------------------------------------------------------- the conditions

@pytest.mark.parametrize("after, seconds", [
    (None, None), ("30m", 1800.0), ("1h30m", 5400.0), ("90s", 90.0), (2, 2.0), (0.5, 0.5),
    ("45", 45.0),
])
def test_after_is_seconds_or_a_duration(after, seconds):
    (rule,) = delivery({"after": after, "channels": ["tier2"]}).rules
    assert rule.after_seconds == seconds


@pytest.mark.parametrize("rule, error", [
    ({"after": "soon"}, "rules[0].after: 'soon' is not a duration (like 90s, 30m"),
    ({"after": 0}, "rules[0].after: expected a positive number of seconds (or omit it)"),
    ({"after": -5}, "rules[0].after: expected a positive number"),
    ({"after": True}, "rules[0].after: expected seconds or a duration like 30m, got true"),
    ({"after": [1]}, "rules[0].after: expected seconds or a duration like 30m, got a list"),
    ({"after": "400d"}, "rules[0].after: a duration must be more than 0 and at most 366"),
    ({"from_notification": -1}, "rules[0].from_notification: expected 0 (any alert) or"),
    ({"from_notification": "3"}, "rules[0].from_notification: expected a whole number"),
    ({"after": "5m", "kind": ["notify"]}, "rules[0].kind: an `after` rule escalates check "
                                          "and host problems only"),
])
def test_bad_conditions_stop_the_sink_with_one_line(rule, error):
    with pytest.raises(ConfigError) as e:
        delivery({**rule, "channels": ["tier2"]})
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"alerting.yaml: alerting.delivery.{error}")


def trigger(n=None, severity="critical", kind="check", action="trigger") -> dict:
    event = {"key": KEY, "kind": kind, "action": action, "severity": severity, "uuid": UUID,
             "hostname": "web-1", "check": "load", "status": 2}
    if n is not None:
        event["notification"] = n
    return event


RULES = [{"severity": ["critical"], "channels": ["pager"]},
         {"from_notification": 3, "channels": ["lead"]},
         {"after": "30m", "channels": ["tier2"]}]


@pytest.mark.parametrize("event, channels", [
    (trigger(1), ["pager"]),                         # the first trigger
    (trigger(2), ["pager"]),                         # a reminder is notification 2
    (trigger(3), ["pager", "lead"]),                 # the 3rd and later
    (trigger(7, severity="warning"), ["lead"]),
    (trigger(), ["pager"]),                          # no number (e.g. a NOTIFY): not lead
    (trigger(action="resolve", severity="ok"), []),  # (the outbox adds the told channels)
    ({**trigger(3), "notification": True}, ["pager"]),
])
def test_route_by_notification_number_and_never_to_an_after_rule(event, channels):
    assert route(event, delivery(*RULES)) == channels


def test_the_tick_looks_only_when_some_rule_has_after():
    from sinks.alerting.escalation import store as escalation
    assert not escalation.wanted(delivery(*RULES[:2]))
    assert escalation.wanted(delivery(*RULES))


def test_a_rule_without_conditions_routes_as_before():
    plain = Rule(channels=["pager"])
    assert plain.after_seconds is None and plain.from_notification == 0
    assert route(trigger(), [plain]) == route(trigger(5), [plain]) == ["pager"]


# ---------------------------------------------------------------- unacknowledged since

def ack(created, ended=None, expire=None, id_=1) -> Ack:
    return Ack(id_, KEY, UUID, "load", CRITICAL, created, "alice", "", False, True, expire,
               None, ended)


def problem(opened=T0, notifications=1, escalated=None, severity="critical") -> tiers.Problem:
    return tiers.Problem(KEY, UUID, "load", "check", opened, notifications, severity,
                         CRITICAL, "LOAD CRITICAL", escalated or {})


@pytest.mark.parametrize("the_acks, now, since", [
    ([], T0 + 10, T0),                                        # from the first notification
    ([ack(T0 + 5)], T0 + 10, None),                           # an active ack: never
    ([ack(T0 + 5, ended=T0 + 60)], T0 + 100, T0 + 60),        # again from its end
    ([ack(T0 - 50, ended=T0 - 10)], T0 + 100, T0),            # an earlier problem's ack
    ([ack(T0 + 5, expire=T0 + 60)], T0 + 59.999, None),       # expiry: the boundary
    ([ack(T0 + 5, expire=T0 + 60)], T0 + 60, T0 + 60),        # expired, not ended by a tick
    ([ack(T0 + 5, ended=T0 + 30), ack(T0 + 40, ended=T0 + 90, id_=2)], T0 + 100, T0 + 90),
    ([ack(T0 + 5, ended=T0 + 30), ack(T0 + 40, id_=2)], T0 + 100, None),
])
def test_unacknowledged_since(the_acks, now, since):
    assert tiers.unacked_since(problem(), the_acks, now) == since


# ---------------------------------------------------------------- due at the tick

TIER2 = Rule(channels=["tier2"], after=1800)


@pytest.mark.parametrize("the_problem, rules, since, now, due", [
    (problem(), [TIER2], T0, T0 + 1799.999, []),               # just before
    (problem(), [TIER2], T0, T0 + 1800, [TIER2]),               # exactly at after: due
    (problem(), [TIER2], None, T0 + 9999, []),                  # acknowledged
    (problem(), [TIER2], T0 + 60, T0 + 1800, []),               # an ack ended at +60
    (problem(escalated={tiers.fingerprint(TIER2): T0 + 1800}), [TIER2], T0, T0 + 3600, []),
    (problem(), [Rule(channels=["tier2"])], T0, T0 + 9999, []),  # not an after rule
    (problem(severity="warning"), [Rule(channels=["tier2"], after=60, severity=["critical"])],
     T0, T0 + 60, []),                                           # its other conditions too
    (problem(notifications=2), [Rule(channels=["tier2"], after=60, from_notification=3)],
     T0, T0 + 600, []),
    (problem(notifications=3), [Rule(channels=["tier2"], after=60, from_notification=3)],
     T0, T0 + 600, [Rule(channels=["tier2"], after=60, from_notification=3)]),
    (problem(), [Rule(channels=["tier2"], after=60), TIER2], T0, T0 + 1800,
     [Rule(channels=["tier2"], after=60), TIER2]),               # each rule once
])
def test_which_after_rules_are_due(the_problem, rules, since, now, due):
    got = tiers.due(the_problem, [(r, tiers.fingerprint(r)) for r in rules], since, "web-1",
                    now)
    assert [rule for rule, _ in got] == due
    for rule, event in got:
        assert event["key"] == KEY and event["action"] == "trigger"
        assert event["escalated_after"] == rule.after_seconds
        assert not tiers.tracked(event)          # an escalation is no notification


def test_a_changed_rule_is_a_new_rule():
    assert tiers.fingerprint(TIER2) == tiers.fingerprint(Rule(channels=["tier2"], after="30m"))
    assert tiers.fingerprint(TIER2) != tiers.fingerprint(Rule(channels=["tier2"], after="31m"))


def test_the_escalation_event_says_what_and_since_when():
    event = tiers.event(problem(notifications=4), "web-1", 5400, T0 + 5400)
    assert event["summary"] == "LOAD CRITICAL (escalated: unacknowledged for 1h30m)"
    assert "4 notifications so far" in event["text"]
    assert (event["severity"], event["status"], event["notification"]) == ("critical", 2, 4)
    assert [tiers.span(s) for s in (2, 90, 1800, 86400 + 60)] == ["2s", "1m30s", "30m", "1d1m"]


# ---------------------------------------------------------------- a check's story

POLICY = Policy(max_attempts=1, renotify_interval=600, flap_detection=False)


def story(stream, rules, the_ack=None, step=300.0):
    """Feed ``stream`` (one status per ``step`` seconds, from minute 5) through the check
    state machine as the sink does (an acknowledgement holds back, what goes out is
    numbered by :func:`tiers.told`), and the tick's escalation after each result; return
    what went out as (minute, action, notification or channel)."""
    clock = Clock(T0)
    state, the_problem, out = checks.CheckState(), None, []
    ack_list = [] if the_ack is None else [the_ack]
    for status in stream:
        now = clock.advance(step)
        step_ = checks.evaluate(state, status, now, now, POLICY)
        state = step_.state
        if the_ack is not None and acks.ends(the_ack, state.status, now):
            the_ack = None
            ack_list = [ack(ack_list[0].created, ended=now)]
        for alert in step_.alerts:
            if acks.holds(the_ack, alert.kind, alert.action, now):
                continue
            event = events.check_event(alert, UUID, "web-1", "load", state, 1, "LOAD", "",
                                       now)
            the_problem = tiers.told(the_problem, event, now)
            state = checks.delivered(state, alert, now)
            out.append((round((now - T0) / 60), event["action"],
                        event.get("notification", the_problem and the_problem.notifications)))
        if the_problem is not None:
            since = tiers.unacked_since(the_problem, ack_list, now)
            pairs = [(r, tiers.fingerprint(r)) for r in rules]
            for rule, event in tiers.due(the_problem, pairs, since, "web-1", now):
                the_problem.escalated[tiers.fingerprint(rule)] = now
                out.append((round((now - T0) / 60), "escalate", rule.channels[0]))
    return out


def test_reminders_count_and_the_tier_is_paged_once_at_after():
    rules = [Rule(channels=["tier2"], after=900)]
    assert story([CRITICAL] * 6, rules) == [
        (5, "trigger", 1), (15, "trigger", 2), (20, "escalate", "tier2"),
        (25, "trigger", 3)]


def test_a_recovery_then_a_new_problem_restarts_the_count_and_the_escalation():
    rules = [Rule(channels=["tier2"], after=600)]
    assert story([CRITICAL, CRITICAL, CRITICAL, OK, WARNING, WARNING, WARNING], rules) == [
        (5, "trigger", 1), (15, "trigger", 2), (15, "escalate", "tier2"),
        (20, "resolve", None), (25, "trigger", 1), (35, "trigger", 2),
        (35, "escalate", "tier2")]


def test_an_ack_just_before_after_stops_the_escalation_and_its_end_restarts_the_clock():
    rules = [Rule(channels=["tier2"], after=900)]
    # acknowledged at minute 19 (before the tick at 20), normal: ends at the change at 30
    got = story([CRITICAL, CRITICAL, CRITICAL, CRITICAL, CRITICAL, WARNING, WARNING,
                 WARNING, WARNING], rules, ack(T0 + 19 * 60))
    assert got == [(5, "trigger", 1), (15, "trigger", 2), (30, "trigger", 3),
                   (40, "trigger", 4), (45, "escalate", "tier2")]


def test_a_change_counts_as_a_notification():
    assert story([WARNING, CRITICAL, CRITICAL, CRITICAL], []) == [
        (5, "trigger", 1), (10, "trigger", 2), (20, "trigger", 3)]


def test_told_opens_counts_and_ends_a_problem():
    first = tiers.told(None, trigger(severity="warning"), T0)
    assert (first.opened, first.notifications, first.severity) == (T0, 1, "warning")
    again = tiers.told(first, trigger(), T0 + 60)
    assert (again.opened, again.notifications, again.severity) == (T0, 2, "critical")
    assert tiers.told(again, trigger(action="resolve", severity="ok"), T0 + 99) is None
    marked = tiers.told(problem(escalated={"sent": T0 + 5, "unmatched": None}), trigger(),
                        T0 + 60)
    assert marked.escalated == {"sent": T0 + 5}        # judged again after a notification
    assert tiers.tracked(trigger()) and not tiers.tracked(trigger(kind="notify"))
    assert not tiers.tracked(trigger(kind="flapping"))
    assert not tiers.tracked(trigger(action="acknowledge"))
