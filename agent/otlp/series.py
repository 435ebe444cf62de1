"""The series an agent's OTLP intake holds (SPEC.md 4.4.1): bounded, with the state DELTA
temporality needs, and the latest value of each to send. Plain logic, an injected clock.

A series is ``(name, labels)``. At most ``limit`` are held: a data point that would need a
new one past it is refused whole (all its samples: a histogram is kept entire or not at
all), and the caller counts it (``agent.otlp.series_refused``). A series not written for
``forget_after`` seconds (a day) gives its place back, as the intake's metric names do
(:mod:`fleetwatch.cardinality`): an application whose series change is not refused forever,
and one that floods gets at most ``limit`` new series a day.

Values go out cumulative. A DELTA point's value is added to what its series had (from 0 for
a series new or forgotten: a counter reset to consumers); a DELTA point whose time is not
after the last one added for its series is a resend or out of order, and is refused
(``points_invalid``) rather than counted twice. A CUMULATIVE point or a gauge is kept as it
comes. What was written since the last :meth:`Series.take` waits there, latest value per
series: a flood of exports costs the fleet one value per series per send.
"""

from __future__ import annotations

import time

from fleetwatch.cardinality import FORGET_AFTER, SWEEPS

#: Why a point was refused here (the caller's counters)
FULL, STALE = "series", "stale"

#: An entry: [the period it was last written in, the DELTA total or None, the DELTA time]
_PERIOD, _TOTAL, _TIME = 0, 1, 2


class Series:
    """At most ``limit`` series, each with its DELTA state; what changed since the last take."""

    def __init__(self, limit: int, forget_after: float = FORGET_AFTER, clock=time.monotonic):
        self.limit, self.forget_after, self.clock = limit, forget_after, clock
        self.step = forget_after / SWEEPS
        #: (name, labels) -> entry (see _PERIOD, _TOTAL, _TIME)
        self.entries: dict[tuple, list] = {}
        #: (name, labels) -> (value, kind): written since the last take
        self.pending: dict[tuple, tuple] = {}
        self._swept = -1

    def __len__(self) -> int:
        return len(self.entries)

    def write(self, point) -> str | None:
        """Take ``point`` (an :class:`agent.otlp.points.Point`); None, or why it was refused
        (:data:`FULL`, :data:`STALE`)."""
        period = int(self.clock() // self.step)
        entries = self.entries
        keys = [(name, labels) for name, labels, _, _ in point.samples]
        new = 0
        for key in keys:
            if key not in entries:
                new += 1
        if new and len(entries) + new > self.limit and not self._forget(period, new):
            return FULL
        if point.delta:
            first = entries.get(keys[0])
            if first is not None and first[_TOTAL] is not None and point.time <= first[_TIME]:
                return STALE
        pending = self.pending
        for key, (_, _, value, kind) in zip(keys, point.samples):
            entry = entries.get(key)
            if entry is None:
                entry = entries[key] = [period, None, 0]
            else:
                entry[_PERIOD] = period
            if point.delta:
                value = entry[_TOTAL] = (entry[_TOTAL] or 0) + value
                entry[_TIME] = point.time
            else:
                entry[_TOTAL] = None
            pending[key] = (value, kind)
        return None

    def _forget(self, period: int, needed: int) -> bool:
        """Drop the series unwritten for ``forget_after`` (looked for once a period);
        whether ``needed`` new ones fit now."""
        if self._swept != period:
            self._swept = period
            oldest = period - SWEEPS
            for key in [k for k, e in self.entries.items() if e[_PERIOD] < oldest]:
                del self.entries[key]
                self.pending.pop(key, None)
        return len(self.entries) + needed <= self.limit

    def take(self) -> list[dict]:
        """What was written since the last take, as the wire's ``series`` items (SPEC.md 4,
        STATS), and forget it."""
        out = [{"name": name, "labels": dict(labels), "value": value, "kind": kind}
               for (name, labels), (value, kind) in self.pending.items()]
        self.pending = {}
        return out
