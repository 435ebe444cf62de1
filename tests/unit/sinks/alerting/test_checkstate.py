"""The Nagios check state machine (sinks/alerting/checks/rules.py) with a fake clock,
table-driven."""

from __future__ import annotations

import pytest

from sinks.alerting.checks.rules import (CRITICAL, HISTORY, OK, UNKNOWN, WARNING, Alert, CheckState,
                              Policy, delivered, evaluate, percent_change, state_type)

O, W, C, U = OK, WARNING, CRITICAL, UNKNOWN
QUIET = Policy(renotify_interval=0, flap_detection=False)


def run(statuses, policy=QUIET, step=60.0, silenced=lambda i: False, state=None):
    """Feed ``statuses`` one per ``step`` seconds; return (state, [(index, reason, status)])
    of the alerts that went out (those ``silenced(i)`` holds back are not delivered)."""
    state = state or CheckState()
    out = []
    for i, status in enumerate(statuses):
        now = 1000.0 + i * step
        result = evaluate(state, status, at=now, now=now, policy=policy)
        state = result.state
        for alert in result.alerts:
            if not silenced(i):
                state = delivered(state, alert, now)
                out.append((i, alert.reason, alert.status))
    return state, out


@pytest.mark.parametrize("statuses, alerts", [
    ([O, O, O], []),
    # SOFT 1, SOFT 2, HARD at the third attempt
    ([O, C, C, C], [(3, "problem", C)]),
    ([C, C, C], [(2, "problem", C)]),
    # a SOFT problem that clears: no alert at all
    ([O, C, C, O, C, C, O], []),
    # status changes while SOFT keep counting attempts; HARD with the latest status
    ([O, W, C, W], [(3, "problem", W)]),
    # recovery from HARD
    ([C, C, C, C, O, O], [(2, "problem", C), (4, "recovery", O)]),
    # HARD change between problem statuses alerts again, staying HARD
    ([W, W, W, C, C, W, O], [(2, "problem", W), (3, "change", C), (5, "change", W),
                             (6, "recovery", O)]),
    ([U, U, U], [(2, "problem", U)]),
])
def test_soft_hard_and_recovery(statuses, alerts):
    assert run(statuses)[1] == alerts


@pytest.mark.parametrize("attempts, statuses, alerts", [
    (1, [O, C, O], [(1, "problem", C), (2, "recovery", O)]),
    (2, [O, W, W, O], [(2, "problem", W), (3, "recovery", O)]),
    (5, [C, C, C, C, O], []),
])
def test_max_attempts(attempts, statuses, alerts):
    policy = Policy(max_attempts=attempts, renotify_interval=0, flap_detection=False)
    assert run(statuses, policy)[1] == alerts


def test_state_types_and_attempts():
    state = CheckState()
    seen = []
    for i, status in enumerate([O, C, C, C, C, O]):
        state = evaluate(state, status, i, i, QUIET).state
        seen.append((state_type(state), state.attempt, state.status, state.hard_status))
    assert seen == [("HARD", 1, O, O), ("SOFT", 1, C, O), ("SOFT", 2, C, O), ("HARD", 3, C, C),
                    ("HARD", 3, C, C), ("HARD", 1, O, O)]


def test_since_is_the_last_hard_change():
    state, _ = run([O, C, C, C, C])
    assert state.since == 1000.0 + 3 * 60
    assert state.last_change == 1000.0 + 1 * 60


def test_reminders_while_a_hard_problem_lasts():
    policy = Policy(renotify_interval=3600, flap_detection=False)
    # one result every 10 minutes: HARD at 20 min, reminders at 80 and 140 min
    _, alerts = run([C] * 16, policy, step=600)
    assert alerts == [(2, "problem", C), (8, "reminder", C), (14, "reminder", C)]


def test_no_reminder_when_the_interval_is_zero():
    assert run([C] * 30, QUIET, step=600)[1] == [(2, "problem", C)]


def test_a_status_change_restarts_the_reminder_clock():
    policy = Policy(renotify_interval=3600, flap_detection=False)
    _, alerts = run([W, W, W, W, W, C, C, C, C, C, C, C, C], policy, step=600)
    assert alerts == [(2, "problem", W), (5, "change", C), (11, "reminder", C)]


def test_out_of_order_and_duplicate_results_are_ignored():
    state = evaluate(CheckState(), C, at=100, now=100, policy=QUIET).state
    late = evaluate(state, O, at=50, now=101, policy=QUIET)
    same = evaluate(state, C, at=100, now=102, policy=QUIET)
    assert not late.applied and late.state == state and late.alerts == ()
    assert not same.applied and same.state.attempt == 1


def test_an_out_of_range_status_is_unknown():
    state, alerts = run([7, 7, 7])
    assert state.status == UNKNOWN and alerts == [(2, "problem", U)]


# ---------------------------------------------------------------- flapping

@pytest.mark.parametrize("history, percent", [
    ("", 0.0), ("0", 0.0), ("0" * 21, 0.0),
    ("01" * 10 + "0", 100.0),                       # every transition a change
    ("0" * 20 + "2", 6.0),                          # one change, the newest: weight 1.2
    ("02" + "2" * 19, 4.0),                          # one change, the oldest: weight 0.8
    ("0" * 10 + "2" * 11, 4.947),                   # the 10th: (0.8 + 0.4 * 9/19) / 20
])
def test_percent_state_change(history, percent):
    assert percent_change(history) == pytest.approx(percent, abs=0.03)


def test_history_keeps_21_results():
    state, _ = run([O, C] * 20)
    assert len(state.history) == HISTORY and state.history.endswith("202")


def test_flapping_starts_and_stops_with_one_alert_each():
    policy = Policy(max_attempts=1, renotify_interval=0, flap_low=25, flap_high=50)
    statuses = [O] * 5 + [C, O] * 8 + [O] * 25
    state, alerts = run(statuses, policy)
    reasons = [a[1] for a in alerts]
    assert reasons.count("flapping started") == 1 and reasons.count("flapping stopped") == 1
    start = reasons.index("flapping started")
    stop = reasons.index("flapping stopped")
    # problem/recovery pairs before flapping is detected, none while it lasts
    assert set(reasons[:start]) <= {"problem", "recovery"}
    assert all(r.startswith("flapping") for r in reasons[start:stop + 1])
    assert not state.flapping and state.percent < 25
    # it was OK when flapping started and when it stopped... unless a problem was open
    assert state.notified == OK


def test_flapping_hysteresis_between_low_and_high():
    policy = Policy(max_attempts=1, renotify_interval=0, flap_low=20, flap_high=60)
    state = CheckState(history="0" * 21)
    flags = []
    for i, status in enumerate([C, O] * 8 + [O] * 20):
        state = evaluate(state, status, i, i, policy).state
        flags.append((state.percent, state.flapping))
    started = next(i for i, (_, f) in enumerate(flags) if f)
    assert flags[started][0] > 60 and flags[started - 1][0] <= 60
    stopped = next(i for i, (_, f) in enumerate(flags) if i > started and not f)
    # between the two it stays flapping though the percentage falls below high
    assert any(p < 60 for p, f in flags[started:stopped] if f)
    assert flags[stopped][0] < 20


def test_a_problem_that_outlasts_flapping_is_alerted_when_flapping_stops():
    policy = Policy(max_attempts=1, renotify_interval=0, flap_low=25, flap_high=50)
    _, alerts = run([O, C] * 9 + [C] * 25, policy)
    tail = [a[1:] for a in alerts[-2:]]
    assert tail == [("flapping stopped", C), ("problem", C)]


def test_flap_detection_off_clears_flapping():
    state = CheckState(history="01" * 10 + "0", flapping=True, flap_notified=True)
    step = evaluate(state, O, 1, 1, QUIET)
    assert not step.state.flapping
    assert step.alerts == (Alert("flapping", "resolve", O, "flapping stopped"),)


# ---------------------------------------------------------------- silences

def test_a_problem_silenced_then_still_there_is_alerted_when_the_silence_ends():
    _, alerts = run([C, C, C, C, C, C], silenced=lambda i: i < 4)
    assert alerts == [(4, "problem", C)]


def test_a_problem_that_recovers_during_a_silence_is_never_alerted():
    _, alerts = run([C, C, C, C, O, O, O], silenced=lambda i: i < 6)
    assert alerts == []


def test_a_recovery_held_back_by_a_silence_goes_out_after_it():
    _, alerts = run([C, C, C, O, O, O], silenced=lambda i: 3 <= i < 5)
    assert alerts == [(2, "problem", C), (5, "recovery", O)]


def test_silenced_alerts_are_raised_again_at_each_result():
    state = CheckState()
    raised = []
    for i, status in enumerate([C, C, C, C, C]):
        step = evaluate(state, status, i, i, QUIET)
        state = step.state                      # never delivered: all silenced
        raised.append([a.reason for a in step.alerts])
    assert raised == [[], [], ["problem"], ["problem"], ["problem"]]


@pytest.mark.parametrize("alert, severity", [
    (Alert("check", "trigger", C, "problem"), "critical"),
    (Alert("check", "trigger", W, "problem"), "warning"),
    (Alert("check", "trigger", U, "problem"), "unknown"),
    (Alert("check", "resolve", O, "recovery"), "ok"),
    (Alert("flapping", "trigger", C, "flapping started"), "warning"),
    (Alert("flapping", "resolve", O, "flapping stopped"), "ok"),
])
def test_severities(alert, severity):
    assert alert.severity == severity
