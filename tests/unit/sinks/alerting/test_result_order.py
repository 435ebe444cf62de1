"""Which of two results of one check is the newer (sinks/alerting/checks/ordering.py), and the
check state machine going by it: a sender's clock that was fast, or stepped back within a
run, never hides a result; a late or repeated result of one agent run is still older."""

from __future__ import annotations

import pytest

from sinks.alerting.checks import rules as checkstate
from sinks.alerting.checks.ordering import Order, key, newer, of

T = 1_700_000_000.0
FAST = 7200.0                   # the agent's clock two hours ahead


@pytest.mark.parametrize("new, old, expected", [
    # one agent run: its sequence decides, whatever the wall clock says
    (Order(T - FAST, T + 10, "a", 3), Order(T, T, "a", 2), True),     # stepped back
    (Order(T + FAST, T + 10, "a", 2), Order(T, T, "a", 3), False),    # late: an older run
    (Order(T, T + 10, "a", 3), Order(T, T, "a", 3), False),           # repeated
    # two runs of the agent: the later arrival is newer
    (Order(T, T + 10, "b", 1), Order(T, T, "a", 900), True),          # restarted, clock fixed
    (Order(T - FAST, T + 10, "b", 1), Order(T, T, "a", 9), True),     # restarted slow
    (Order(T + 5, T, "b", 1), Order(T, T, "a", 9), True),             # one batch: sender's time
    (Order(T, T, "b", 1), Order(T + 5, T, "a", 9), False),
    # a sender that does not number its results: its time, bounded by arrival
    (Order(T + 1), Order(T), True),
    (Order(T), Order(T), False),
    (Order(T - 1, T + 10, "a", 1), Order(T, T, None, None), False),
    (Order(T + 1, T + 10, "a", 1), Order(T, T, None, None), True),
    (Order(T, T, "a", None), Order(T - 1, T, "a", 5), True),          # seq missing: time
])
def test_newer(new, old, expected):
    assert newer(new, old) is expected


def test_a_sender_time_is_never_past_its_arrival():
    fast = of(T + FAST, T, "a", 1)
    assert fast.at == T and fast.received == T
    assert of(T - 3, T).at == T - 3
    # so a result sent by a clock two hours fast is older than the next one sent after
    # the clock was corrected, a second later
    assert newer(of(T + 1, T + 1.1), of(T + FAST, T))


def test_one_batch_is_sorted_by_the_sender_time_then_its_sequence():
    batch = [of(T + 2, T + 9, "a", 5), of(T + 1, T + 9, "a", 7), of(T + 1, T + 9, "a", 6)]
    assert [o.seq for o in sorted(batch, key=key)] == [6, 7, 5]


QUICK = checkstate.Policy(max_attempts=1, flap_detection=False)


def apply(state, status, order, now):
    return checkstate.evaluate(state, status, order, now, QUICK)


def test_a_critical_after_the_agent_restarts_with_its_clock_corrected_alerts():
    """The issue: an agent run two hours fast, then started with the right clock: its
    CRITICAL was not newer than the fast run's OK and was dropped, no alert."""
    state = checkstate.CheckState()
    for i in range(5):                                   # 25 s of OKs from the fast run
        step = apply(state, checkstate.OK, of(T + FAST + 5 * i, T + 5 * i, "fast", i + 1),
                     T + 5 * i)
        assert step.applied
        state = step.state
    step = apply(state, checkstate.CRITICAL, of(T + 30, T + 30, "fixed", 1), T + 30)
    assert step.applied and step.state.status == checkstate.CRITICAL
    assert [(a.action, a.status) for a in step.alerts] == [("trigger", checkstate.CRITICAL)]
    assert (step.state.boot, step.state.seq, step.state.received) == ("fixed", 1, T + 30)


def test_a_recovery_after_the_clock_is_stepped_back_within_a_run_is_told():
    first = apply(checkstate.CheckState(), checkstate.CRITICAL, of(T + FAST, T, "a", 1), T)
    (alert,) = first.alerts
    state = checkstate.delivered(first.state, alert, T)                  # paged
    step = apply(state, checkstate.OK, of(T + 2, T + 2, "a", 2), T + 2)    # NTP stepped it
    assert step.applied and [a.action for a in step.alerts] == ["resolve"]
    late = apply(step.state, checkstate.CRITICAL, of(T + FAST, T + 3, "a", 1), T + 3)
    assert not late.applied                               # a repeat of the older run


def test_a_stale_result_keeps_the_order_of_the_last_real_one():
    """A stale result is placed by a bare time just after ``last_result``: it leaves the
    run and sequence as they were, so the agent's next result is still newer."""
    state = apply(checkstate.CheckState(), checkstate.OK, of(T, T, "a", 4), T).state
    stale = checkstate.evaluate(state, checkstate.UNKNOWN, T + 0.001, T + 60, QUICK)
    assert stale.applied and (stale.state.boot, stale.state.seq) == ("a", 4)
    assert apply(stale.state, checkstate.OK, of(T + 61, T + 61, "a", 5), T + 61).applied
