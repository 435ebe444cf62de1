"""Distinct metric names per host, bounded: the rule a local process, an agent or a
fleetwatch process meets wherever a name becomes a series (the agent's intake, the graphite
sink, the prometheus sink). Plain logic, an injected clock, no sockets.

A series costs wherever it lands (a whisper file of hundreds of KB, a family in every
Prometheus scrape), and a name costs its sender nothing: one STATS of 256 KiB holds about
8,000 of them. So each owner (a host, or a fleetwatch process for its own counters) has at
most ``limit`` distinct names. A name already held is always taken; a new one past the limit
is refused, and the caller counts it for that owner (:class:`Refusals`). A name not seen for
``forget_after`` seconds (a day by default) gives its place back: a host whose names change
(a disk replaced, a check renamed) is not refused forever, and an owner that floods gets at
most ``limit`` new names a day.

:class:`NameCap` is for those that keep no series of their own (the agent's intake, the
graphite sink, whose series live in carbon); the prometheus sink counts the series of its
table per owner instead (:mod:`sinks.prometheus.table`), and forgets them with the table.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Hashable

from fleetwatch.metricpath import node

#: seconds a name may go unseen before it no longer holds its place
FORGET_AFTER = 86400.0
#: owners remembered at most (the oldest forgotten first; a sink names at most 100,000 hosts)
MAX_OWNERS = 100_000
#: owners whose refusals a process reports by name (the most refused first)
REPORTED = 10
#: an owner's names are looked over for old ones at most this often (in ``forget_after``)
SWEEPS = 24


class NameCap:
    """At most ``limit`` distinct names per owner; a name unseen for ``forget_after``
    seconds frees its place.

    Each name keeps the period (``forget_after / SWEEPS`` seconds) it was last seen in, the
    same int object for every name of a period, so a name costs a dictionary slot. A full
    owner is looked over for forgotten names at most once a period, so a flood past the
    limit costs a lookup a name.
    """

    def __init__(self, limit: int, forget_after: float = FORGET_AFTER, clock=time.monotonic,
                 max_owners: int = MAX_OWNERS):
        self.limit, self.forget_after, self.clock = limit, forget_after, clock
        self.max_owners = max_owners
        self.step = forget_after / SWEEPS
        #: owner -> {name: the period it was last seen in}
        self.owners: dict[Hashable, dict[Hashable, int]] = {}
        #: owner -> the period it was last looked over in
        self.swept: dict[Hashable, int] = {}
        #: names held, all owners together
        self.size = 0
        self._period = 0

    def __len__(self) -> int:
        return self.size

    def held(self, owner: Hashable) -> int:
        return len(self.owners.get(owner, ()))

    def period(self) -> int:
        """The current period, as one shared int object while it lasts."""
        now = int(self.clock() // self.step)
        if now != self._period:
            self._period = now
        return self._period

    def admit(self, owner: Hashable, name: Hashable) -> bool:
        """Whether ``owner`` may have ``name`` (held already, or room for it)."""
        period = self.period()
        names = self.owners.get(owner)
        if names is None:
            if len(self.owners) >= self.max_owners:
                oldest = next(iter(self.owners))
                self.size -= len(self.owners.pop(oldest))
                self.swept.pop(oldest, None)
            names = self.owners[owner] = {}
        if name in names:
            names[name] = period
            return True
        if len(names) >= self.limit and not self._forget(owner, names, period):
            return False
        names[name] = period
        self.size += 1
        return True

    def _forget(self, owner: Hashable, names: dict, period: int) -> bool:
        """Drop the names of ``owner`` unseen for ``forget_after``; whether room was made."""
        if self.swept.get(owner) == period:
            return False
        self.swept[owner] = period
        oldest = period - SWEEPS
        gone = [n for n, seen in names.items() if seen < oldest]
        for name in gone:
            del names[name]
        self.size -= len(gone)
        return len(names) < self.limit


class Refusals:
    """What was refused, per owner: the total, and a count per owner for at most ``size``
    owners (beyond, a new owner's refusals count in the total only)."""

    def __init__(self, size: int = MAX_OWNERS):
        self.size = size
        self.total = 0
        self.per_owner: Counter = Counter()

    def add(self, owner: str, n: int = 1) -> None:
        self.total += n
        if owner in self.per_owner or len(self.per_owner) < self.size:
            self.per_owner[owner] += n

    def worst(self, n: int = REPORTED) -> list[tuple[str, int]]:
        """(owner, refused) of the ``n`` most refused owners, the most first."""
        return self.per_owner.most_common(n)

    def counters(self, stem: str, n: int = REPORTED) -> dict[str, int]:
        """:func:`counters` of the ``n`` most refused owners."""
        return counters(stem, self.worst(n))


def counters(stem: str, worst: list[tuple[str, int]]) -> dict[str, int]:
    """``{stem.OWNER: refused}`` for a process's STATS, each OWNER made one node of a
    metric name (:func:`fleetwatch.metricpath.node`: ``web1.example.com`` ->
    ``web1_example_com``; owners named alike add up)."""
    out: Counter = Counter()
    for owner, count in worst:
        out[f"{stem}.{node(str(owner))[:100] or '_'}"] += count
    return dict(out)
