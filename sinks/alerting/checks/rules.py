"""The Nagios check state machine: SOFT and HARD states, recovery, reminders and flapping.

Pure logic fed one result at a time with the times it needs; no SQL, no clock of its own.
The semantics are Nagios Core's ("State Types", "Flapping Detection", "Notifications"):

- A non-OK result after OK starts a SOFT problem (attempt 1); each further non-OK result
  counts an attempt, and at ``max_attempts`` the state becomes HARD. A HARD state change
  alerts (``trigger``, severity by status); so does a change between non-OK statuses while
  HARD (WARNING -> CRITICAL). OK after a HARD problem is a recovery (``resolve``); OK after
  a SOFT problem alerts nobody. OK states are always HARD here (Nagios shows one "SOFT
  recovery" check; nothing is notified either way).
- While a HARD problem lasts, a reminder (``trigger`` again) goes out at the first result
  ``renotify_interval`` seconds or more after the last one sent (0: never).
- Flapping: the weighted percent state change over the last 21 results (20 transitions,
  the oldest weighing 0.8 and the newest 1.2) starts flapping above ``flap_high`` and stops
  below ``flap_low``. While flapping no state alerts go out, only one "flapping started" and
  one "flapping stopped" (``kind`` ``flapping``).

What the outside world was told is part of the state (``notified``, ``flap_notified``,
``last_notified``), and :func:`evaluate` alerts whenever what should be known differs from
it. :func:`delivered` records an alert that went out; an alert held back by a silence is not
recorded, so it is raised again at the next result and goes out once the silence is over:
the pager ends up knowing the true state.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sinks.alerting.checks.ordering import Order, newer

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3
NAMES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")
SEVERITY = ("ok", "warning", "critical", "unknown")
#: results kept for flap detection (Nagios: 21)
HISTORY = 21
LOW_WEIGHT, HIGH_WEIGHT = 0.8, 1.2


@dataclass(frozen=True)
class Policy:
    """How one check is judged (from :class:`sinks.alerting.config.AlertingConfig`)."""

    max_attempts: int = 3
    renotify_interval: float = 3600.0
    flap_detection: bool = True
    flap_low: float = 25.0
    flap_high: float = 50.0


@dataclass(frozen=True)
class CheckState:
    """One check's state; the default is Nagios' initial state (OK, HARD, nothing told)."""

    status: int = OK              # the latest result's status
    hard: bool = True             # state type of the latest result
    attempt: int = 1              # current attempt (1..max_attempts)
    hard_status: int = OK         # status of the last HARD state
    since: float | None = None    # when the HARD state last changed
    last_change: float | None = None  # when the status last changed (SOFT or HARD)
    last_result: float | None = None  # the newest result applied: its time (Order.at)
    received: float | None = None     # ... when it arrived (the receiver's clock)
    boot: str | None = None           # ... its agent run, and its place in that run
    seq: float | None = None          #     (sinks.alerting.checks.ordering)
    history: str = ""             # last HISTORY statuses as digits, oldest first
    percent: float = 0.0          # weighted percent state change over ``history``
    flapping: bool = False
    notified: int = OK            # the problem status last sent (OK: nothing open)
    last_notified: float | None = None  # when a problem alert last went out
    flap_notified: bool = False   # "flapping started" sent and not yet stopped
    #: the parent whose problem holds this check's problem alerts back (its host UNREACHABLE
    #: behind it, or a parent check in a HARD problem); None when none does
    unreachable: str | None = None


@dataclass(frozen=True)
class Alert:
    """What should be sent; the sink turns it into an alert event."""

    kind: str        # "check" or "flapping"
    action: str      # "trigger" or "resolve"
    status: int      # the check's status the alert is about
    reason: str      # problem, change, reminder, recovery, flapping started/stopped

    @property
    def severity(self) -> str:
        if self.kind == "flapping":
            return "warning" if self.action == "trigger" else "ok"
        return "ok" if self.action == "resolve" else SEVERITY[self.status]


@dataclass(frozen=True)
class Step:
    state: CheckState
    alerts: tuple[Alert, ...] = ()
    applied: bool = True          # False: the result was older than the state (ignored)


def percent_change(history: str) -> float:
    """Nagios' weighted percent state change of a history (oldest first), 0..100.

    Transitions are weighted linearly from 0.8 (the oldest of the 20 a full history holds)
    to 1.2 (the newest); a short history has fewer, so it reads low until it fills up.
    """
    slots = HISTORY - 1
    changes = 0.0
    transitions = len(history) - 1
    for i in range(1, len(history)):
        if history[i] != history[i - 1]:
            position = slots - (transitions - i) - 1      # 0 = oldest slot, 19 = newest
            changes += LOW_WEIGHT + (HIGH_WEIGHT - LOW_WEIGHT) * position / (slots - 1)
    return changes * 100.0 / slots


def evaluate(state: CheckState, status: int, at: float | Order, now: float,
             policy: Policy) -> Step:
    """Apply one result (``status`` of the run ordered by ``at``) seen at ``now``; one not
    newer than the state's (:func:`sinks.alerting.checks.ordering.newer`) is not applied. A bare
    time (a stale result's) is compared with ``last_result`` alone and leaves the rest of
    the state's order as it was."""
    if isinstance(at, Order):
        if state.last_result is not None and not newer(at, order_of(state)):
            return Step(state, applied=False)
        placed = {"received": at.received, "boot": at.boot, "seq": at.seq}
        at = at.at
    else:
        if state.last_result is not None and at <= state.last_result:
            return Step(state, applied=False)
        placed = {}
    status = status if status in (OK, WARNING, CRITICAL, UNKNOWN) else UNKNOWN
    if status == OK:
        hard, attempt = True, 1
    elif state.status == OK:
        attempt = 1
        hard = attempt >= policy.max_attempts
    elif state.hard:                                     # already a HARD problem: stays HARD
        hard, attempt = True, state.attempt
    else:
        attempt = min(state.attempt + 1, policy.max_attempts)
        hard = attempt >= policy.max_attempts
    hard_status = status if hard else state.hard_status
    history = (state.history + str(status))[-HISTORY:]
    new = replace(
        state, status=status, hard=hard, attempt=attempt, hard_status=hard_status,
        since=now if hard and hard_status != state.hard_status else state.since,
        last_change=now if status != state.status else state.last_change,
        last_result=at, history=history, percent=round(percent_change(history), 2),
        **placed)
    alerts: list[Alert] = []
    if policy.flap_detection:
        if not new.flapping and new.percent > policy.flap_high:
            new = replace(new, flapping=True)
        elif new.flapping and new.percent < policy.flap_low:
            new = replace(new, flapping=False)
    elif new.flapping:
        new = replace(new, flapping=False)
    if new.flapping != new.flap_notified:
        alerts.append(Alert("flapping", "trigger" if new.flapping else "resolve", status,
                            "flapping started" if new.flapping else "flapping stopped"))
    if not new.flapping:
        alerts.extend(_state_alerts(new, now, policy))
    return Step(new, tuple(alerts))


def order_of(state: CheckState) -> Order:
    """The order of the newest result ``state`` applied (its ``last_result`` set)."""
    return Order(state.last_result, state.received, state.boot, state.seq)


def _state_alerts(state: CheckState, now: float, policy: Policy) -> list[Alert]:
    target = state.hard_status if state.hard else state.notified
    if target != state.notified:
        if target == OK:
            return [Alert("check", "resolve", OK, "recovery")]
        return [Alert("check", "trigger", target,
                      "problem" if state.notified == OK else "change")]
    if target != OK and policy.renotify_interval > 0 and (
            state.last_notified is None
            or now - state.last_notified >= policy.renotify_interval):
        return [Alert("check", "trigger", target, "reminder")]
    return []


def owed(state: CheckState) -> tuple[Alert, ...]:
    """The alerts ``state`` is owed without a new result: what was held back (by a silence
    or a downtime) and is still true; not a reminder (that waits for its result)."""
    alerts = []
    if state.flapping != state.flap_notified:
        alerts.append(Alert("flapping", "trigger" if state.flapping else "resolve",
                            state.status,
                            "flapping started" if state.flapping else "flapping stopped"))
    if not state.flapping:
        alerts.extend(_state_alerts(state, 0.0, Policy(renotify_interval=0)))
    return tuple(alerts)


def delivered(state: CheckState, alert: Alert, now: float) -> CheckState:
    """The state once ``alert`` went out (was not held back by a silence)."""
    if alert.kind == "flapping":
        return replace(state, flap_notified=alert.action == "trigger")
    if alert.action == "resolve":
        return replace(state, notified=OK, last_notified=None)
    return replace(state, notified=alert.status, last_notified=now)


def state_type(state: CheckState) -> str:
    return "HARD" if state.hard else "SOFT"


def problem_since(state: CheckState) -> float | None:
    """When a check's problem began, as a flexible downtime sees it: its HARD problem's
    start (or last change of status while HARD); None while it has none."""
    return state.since if state.hard and state.hard_status != OK else None
