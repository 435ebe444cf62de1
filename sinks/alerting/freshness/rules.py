"""Freshness: a scheduled check that stopped reporting is UNKNOWN "stale", not green.

Pure logic with the times passed in; no SQL (the tick's side is
:mod:`sinks.alerting.freshness.store`). The semantics are Icinga 2's check freshness: a check
declared with an ``interval`` is expected to report; with no result for its **threshold**
(twice its interval plus its timeout, or its own declared ``freshness`` seconds) it gets an
UNKNOWN result "stale: no result for N s", which goes through the check state machine
(:mod:`sinks.alerting.checks.rules`) like any result: SOFT, then HARD after ``max_attempts``
(one stale result per interval while it lasts), and a real result that arrives later
recovers it the usual way. An agent whose heartbeats keep coming while a check of its
stopped reporting is exactly the case to catch: a green keepalive over a silent check.

One rule for everything that must be heard from (:func:`overdue`): an agent's heartbeats
and a local process's (:mod:`sinks.alerting.hosts.rules`), and a check's results. Silence is
counted from the latest of: the last time it was heard, when it was declared, and when this
sink started (results may be on their way to a sink that just started); it is a problem
strictly past its threshold.

A check is not judged stale while its host is held (:func:`held`): DOWN (or UNREACHABLE),
or not heard since the check's deadline (the agent went quiet, which is the host rule's
business: it pages once as DOWN, not once per check), or in a downtime of the whole host
(:mod:`sinks.alerting.downtimes.rules`: planned work, whose end the check is judged after).

The same rule judges a host gone silent against its parents (:func:`blocking`,
:mod:`sinks.alerting.dependencies.rules`): a parent DOWN makes the child UNREACHABLE (it pages
nobody); a parent not heard since the child's deadline, or a parent check in a SOFT
problem, is undecided, and holds the child until the parent is decided. A parent check is
seen as a host (:meth:`Host.of_check`): a HARD problem is down, a SOFT one undecided.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: the output of a stale result (N: whole seconds without a result)
STALE_TEXT = "stale: no result for {seconds} s"


def overdue(last: float, limit: float, now: float) -> bool:
    """Silent for more than ``limit`` seconds since ``last``: the one rule of silence."""
    return now - last > limit


def threshold(interval: float, timeout: float | None, setting: float | None = None) -> float:
    """Seconds without a result before a check is stale: ``setting`` when positive, else
    twice the interval plus the timeout."""
    if setting is not None and setting > 0:
        return float(setting)
    return 2.0 * interval + (timeout or 0.0)


#: the reasons of :func:`held`: the host is decided DOWN; it is not decided yet; planned
DOWN = "host down"
QUIET = "host not heard since the deadline"
DOWNTIME = "host in a downtime"


@dataclass(frozen=True)
class Host:
    """What the freshness rule needs of a check's host (its ``host_state`` row), or of a
    child host's parent."""

    up: bool = True
    heard: float = 0.0          # its last heartbeat
    downtime: bool = False      # a downtime of the whole host covers it now
    since: float = 0.0          # when it last went UP (or DOWN)

    @classmethod
    def of_check(cls, problem: bool, hard: bool) -> Host:
        """A parent check as the rule sees it: a HARD problem is down, a SOFT one is not
        decided (never heard since any deadline), OK is heard all along."""
        if not problem:
            return cls(True, math.inf)
        return cls(False, 0.0) if hard else cls(True, 0.0)


def held(host: Host | None, deadline: float) -> str | None:
    """Why a check of ``host`` past ``deadline`` is not judged stale now (None: it is)."""
    if host is None:
        return None             # not timed by heartbeats: nothing holds the check back
    if host.downtime:
        return DOWNTIME
    if not host.up:
        return DOWN
    if host.heard <= deadline:
        return QUIET
    return None


def returned(parents: dict[str, Host | None], silent_since: float, timeout: float,
             now: float) -> str | None:
    """The parent (first by reference) that came back UP after a child fell silent at
    ``silent_since``, less than the child's ``timeout`` ago: the child is not judged yet.
    Its heartbeats come through that parent (a site router, a switch), so they resume when
    it does, a moment later: judged at once, it would be DOWN, and page, for that moment."""
    for ref, host in sorted(parents.items()):
        if host is not None and host.up and not host.downtime \
                and host.since > silent_since and now < host.since + timeout:
            return ref
    return None


def blocking(parents: dict[str, Host | None], deadline: float) -> tuple[str, str] | None:
    """What holds a child silent past ``deadline``: ``(parent, reason)``, a parent
    DOWN before one not decided (by reference order among each), or None (it is DOWN)."""
    reasons = {ref: held(host, deadline) for ref, host in sorted(parents.items())}
    for wanted in (DOWN, QUIET):
        for ref, reason in reasons.items():
            if reason == wanted:
                return ref, reason
    return None


@dataclass(frozen=True)
class Watch:
    """One scheduled check as the freshness rule sees it."""

    interval: float
    timeout: float | None = None
    setting: float | None = None        # the declared ``freshness``, if any
    declared: float = 0.0               # when its plugin was (last) declared
    heard: float | None = None          # its last result, on the sink's clock
    stale_at: float | None = None       # its last stale result (None: not stale)

    @property
    def limit(self) -> float:
        return threshold(self.interval, self.timeout, self.setting)

    def since(self, floor: float = 0.0) -> float:
        """When its silence started: the latest of its result, its declaration, ``floor``."""
        return max(self.declared, self.heard or 0.0, floor)

    def stale(self) -> bool:
        """Marked stale and not heard since."""
        return self.stale_at is not None and self.stale_at >= self.since()


def due(watch: Watch, now: float, host: Host | None = None, floor: float = 0.0) -> bool:
    """Whether ``watch`` gets a stale result at ``now``: past its threshold and its host not
    held; once stale, again each interval while nothing is heard."""
    since = watch.since(floor)
    if not overdue(since, watch.limit, now):
        return False
    if held(host, since + watch.limit) is not None:
        return False
    if watch.stale():
        return now - watch.stale_at >= watch.interval      # the next attempt
    return True


def silent_for(watch: Watch, now: float) -> int:
    """Whole seconds without a result (from its declaration when it never reported)."""
    return max(0, int(now - watch.since()))


def stale_text(watch: Watch, now: float) -> str:
    return STALE_TEXT.format(seconds=silent_for(watch, now))


def stale_order(last_result: float | None) -> float:
    """The order key a stale result is applied with: just after the last real result, so a
    real result, however late, is newer (the caller keeps ``last_result`` unchanged)."""
    return math.nextafter(last_result or 0.0, math.inf)
