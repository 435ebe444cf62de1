"""Hosts gone silent: DOWN when no router has relayed a heartbeat for the host timeout.

Pure logic with the times passed in; no SQL. A host (an agent's own heartbeats; a local
process that heartbeats is tracked the same way under its name) is heard through one or
more routers. It is DOWN when it has been heard through *no* router for its timeout: one
``trigger``; UP again at its next heartbeat: one ``resolve``. A host still heard through one
router while another has not relayed it for the timeout was lost by that router, not by
us: no alert, the caller logs and counts it (:attr:`Heard.lost`).

Silence is judged by the rule checks share (:func:`sinks.alerting.freshness.rules.overdue`:
strictly past the timeout). The timeout is ``timeout`` when set, else ``intervals`` of the
host's own heartbeat interval (the HEARTBEAT's ``interval``), at least ``minimum``. A
local process that never said its interval is recorded but never timed out; one whose
agent went quiet too is held back by the caller, as a stale check is
(:meth:`sinks.alerting.evaluation.Evaluation.expire`).

A host can also be GONE (:func:`gone`): its agent deregistered (its DEREGISTER), or it is
ephemeral (``ephemeral: true`` in its agent's config, an autoscaled instance) and went
silent past its timeout. A GONE host is not timed and owes no alert: it never turns DOWN,
and its going pages nobody (the caller closes the problems it had told, logs it and counts
it). A heartbeat brings it back UP without an alert, unless it was sent before the
DEREGISTER (its ``ts`` is not after the DEREGISTER's: relayed late, it is ignored). The
DEREGISTER's ``ts`` is the sender's clock, so it is kept bounded by the receiver's: never
after the moment the host was judged GONE (:attr:`HostState.left`). A DEREGISTER dated in
the future (a wrong clock, or a forged one) so makes no later heartbeat "sent before it":
the host is back at its next heartbeat, and timed again. The caller forgets a host GONE for
``forget_after`` (:mod:`fleetwatch.store.forget`).

Like :mod:`sinks.alerting.checks.rules`, what the outside world was told (``notified``) is state:
an alert held back by a silence is not :func:`delivered`, ``pending`` stays true, and the
sink's tick raises it again until it goes out, so the pager ends up right.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from sinks.alerting.freshness.rules import overdue

#: heartbeat interval assumed when an agent's HEARTBEAT does not say
DEFAULT_INTERVAL = 2.0
#: the timeout of a local process that never said its interval: never DOWN (a nightly job
#: that heartbeats without ``interval`` must not page every night)
NEVER = 1e12


@dataclass(frozen=True)
class Policy:
    timeout: float = 0.0        # seconds; 0: intervals x interval, at least minimum
    intervals: float = 3.0
    minimum: float = 10.0
    #: whether per-router silence is told apart, and an interval assumed when none was
    #: said (False for local processes: their heartbeats take any one router, so a quiet
    #: router means nothing, and one that never said its interval is never timed out)
    per_router: bool = True

    def timeout_for(self, interval: float | None) -> float:
        if interval is None and not self.per_router:
            return NEVER
        if self.timeout > 0:
            return self.timeout
        return max(self.minimum, self.intervals * (interval or DEFAULT_INTERVAL))


@dataclass(frozen=True)
class HostState:
    up: bool = True
    last_heard: float = 0.0
    interval: float | None = None
    since: float = 0.0                   # when it last went UP or DOWN (or was first heard)
    routers: dict[str, float] = field(default_factory=dict)   # router -> last heard
    notified: bool = False               # a DOWN alert went out and no UP since
    #: the parent this silent host is UNREACHABLE behind (its DOWN is held, pages nobody);
    #: None when it is not (:mod:`sinks.alerting.dependencies.rules`)
    unreachable: str | None = None
    #: when it was judged GONE (:func:`gone`); None while it is not
    gone: float | None = None
    #: the ``ts`` of its DEREGISTER (the agent's clock), at most ``gone``; None if it did
    #: not deregister
    deregistered: float | None = None

    @property
    def left(self) -> float | None:
        """When the host deregistered, the sender's word bounded by the receiver's clock:
        its DEREGISTER's ``ts``, never after the moment it was judged GONE (a row written
        before that bound holds the ``ts`` as sent)."""
        if self.deregistered is None:
            return None
        return min(self.deregistered, self.gone) if self.gone is not None \
            else self.deregistered

    @property
    def pending(self) -> bool:
        """An alert is owed: DOWN not yet told, or UP not yet told (never while GONE)."""
        return self.gone is None and self.up == self.notified


@dataclass(frozen=True)
class Alert:
    action: str      # "trigger" (DOWN) or "resolve" (UP)
    reason: str      # "down" or "up"
    silent_for: float  # seconds without a heartbeat (when it went DOWN or came back)

    @property
    def severity(self) -> str:
        return "critical" if self.action == "trigger" else "ok"


@dataclass(frozen=True)
class Heard:
    state: HostState
    alerts: tuple[Alert, ...] = ()
    lost: tuple[str, ...] = ()       # routers that stopped relaying this host


def deadline(state: HostState, policy: Policy) -> float:
    """When the host turns DOWN if nothing is heard before."""
    return state.last_heard + policy.timeout_for(state.interval)


def gone(state: HostState | None, now: float, deregistered: float | None = None) -> HostState:
    """The host GONE at ``now``: deregistered (``deregistered``: its DEREGISTER's ``ts``,
    kept no later than the moment it went GONE: the sender's clock is not the receiver's),
    or ephemeral and silent past its timeout. Nothing is owed or told any more."""
    state = state or HostState(since=now)
    if state.gone is not None:
        if deregistered is not None:
            deregistered = min(deregistered, state.gone)
        return replace(state, deregistered=max(deregistered or 0.0,
                                               state.deregistered or 0.0) or None)
    if deregistered is not None:
        deregistered = min(deregistered, now)
    return replace(state, up=False, since=now, notified=False, unreachable=None, gone=now,
                   deregistered=deregistered)


def heard(state: HostState | None, router: str, now: float, interval: float | None,
          policy: Policy, sent: float | None = None) -> Heard:
    """A heartbeat through ``router`` at ``now`` (the sink's clock), ``sent`` at its
    sender's ``ts``: a heartbeat sent before the host deregistered (:attr:`HostState.left`)
    changes nothing."""
    if state is None:
        state = HostState(since=now)
    changes: dict = {}
    if state.gone is not None:
        left = state.left
        if left is not None and (sent is None or sent <= left):
            return Heard(state)
        changes.update(gone=None, deregistered=None, notified=False)
    if interval is not None and interval > 0 and interval != state.interval:
        changes["interval"] = float(interval)
    timeout = policy.timeout_for(changes.get("interval", state.interval))
    lost: list[str] = []
    routers = dict(state.routers)
    routers[router] = max(now, routers.get(router, 0.0))
    if policy.per_router:
        for other, last in list(routers.items()):
            if other != router and now - last > timeout:
                del routers[other]
                if state.up:        # (a host back from DOWN was lost by every router)
                    lost.append(other)
    else:
        routers = {router: routers[router]}
    silent_for = max(0.0, now - state.last_heard) if state.last_heard else 0.0
    if not state.up:
        changes.update(up=True, since=now)
    # one replace: a heartbeat is the alerting sink's most frequent message
    new = replace(state, routers=routers, last_heard=max(now, state.last_heard),
                  unreachable=None, **changes)
    alerts = (Alert("resolve", "up", silent_for),) if new.pending and new.up else ()
    return Heard(new, alerts, tuple(sorted(lost)))


def expire(state: HostState, now: float, policy: Policy,
           ephemeral: bool = False) -> tuple[HostState, tuple[Alert, ...]]:
    """The state at ``now`` with nothing heard: DOWN past the deadline (GONE if
    ``ephemeral``); the alerts owed."""
    if state.gone is not None:
        return state, ()
    if state.up and overdue(state.last_heard, policy.timeout_for(state.interval), now):
        if ephemeral:
            return gone(state, now), ()
        state = replace(state, up=False, since=now)
    if not state.pending:
        return state, ()
    silent_for = max(0.0, now - state.last_heard)
    if state.up:
        return state, (Alert("resolve", "up", silent_for),)
    return state, (Alert("trigger", "down", silent_for),)


def delivered(state: HostState, alert: Alert) -> HostState:
    """The state once ``alert`` went out."""
    return replace(state, notified=alert.action == "trigger")
