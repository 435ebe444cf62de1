"""The prometheus sink's table: the latest value of each series, bounded and forgetting.

Plain logic with an injected clock (``time.monotonic`` in production). The sink's loop thread
writes (:meth:`SeriesTable.put`, a batch at a time under :attr:`SeriesTable.lock`) and forgets
(:meth:`SeriesTable.expire`); the scrape thread takes a :meth:`SeriesTable.snapshot`: a
shallow copy of each family's dict under the lock (values are immutable tuples, so the copy
is consistent), a few milliseconds for hundreds of thousands of series, formatted after the
lock is released. The loop never waits for a scrape's formatting, nor a scrape for a batch
longer than that batch.

A series is ``(family, label values)`` -> ``(value, when)``, ``when`` the sink's clock when
the value arrived (not the agent's: clocks of a fleet differ, and no sample timestamp is
exposed, so Prometheus stamps the scrape). A series with no new value for ``stale_after``
seconds is no longer in snapshots and is forgotten at the next :meth:`expire`. At most
``max_series`` series: a new one beyond is refused and counted (``dropped_max_series``);
known series keep updating. At most ``max_per_owner`` of them per owner, the ``instance``
label (an agent's stamped uuid, a process's id): a new one beyond is refused and counted
(``dropped_max_series_per_host``, and per host in :attr:`SeriesTable.refusals`), so one host
that floods fills its own share, never the others' room; its share comes back as its stale
series are forgotten.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Iterable

from fleetwatch.cardinality import Refusals
from sinks.prometheus.names import Sample

#: the position of the owner (``instance``) and of ``host`` in every family's label values
OWNER, HOST = 1, 0


class SeriesTable:
    def __init__(self, max_series: int, stale_after: float, clock=time.monotonic,
                 max_per_owner: int | None = None):
        self.max_series, self.stale_after, self.clock = max_series, stale_after, clock
        self.max_per_owner = max_series if max_per_owner is None else max_per_owner
        #: family -> {label values: (value, when)}
        self.families: dict[str, dict[tuple, tuple[float, float]]] = {}
        self.size = 0
        #: owner (instance label) -> its series in the table
        self.owned: Counter = Counter()
        #: series refused per host (label value) for ``max_per_owner``
        self.refusals = Refusals()
        self.lock = threading.Lock()
        self.counts: Counter = Counter({"dropped_max_series": 0,
                                        "dropped_max_series_per_host": 0, "expired": 0})

    def __len__(self) -> int:
        return self.size

    def put(self, samples: Iterable[Sample], now: float | None = None) -> int:
        """Store the samples (the caller holds :attr:`lock`); returns how many were refused
        for ``max_series`` or ``max_per_owner``."""
        now = self.clock() if now is None else now
        families, owned, refused, over = self.families, self.owned, 0, 0
        for family, labels, value in samples:
            series = families.get(family)
            if series is None or labels not in series:
                if self.size >= self.max_series:
                    refused += 1
                    continue
                if owned[labels[OWNER]] >= self.max_per_owner:
                    over += 1
                    self.refusals.add(labels[HOST])
                    continue
                if series is None:
                    series = families[family] = {}
                owned[labels[OWNER]] += 1
                self.size += 1
            series[labels] = (value, now)
        self.counts["dropped_max_series"] += refused
        self.counts["dropped_max_series_per_host"] += over
        return refused + over

    def refused_hosts(self, n: int) -> list[tuple[str, int]]:
        """(host, series refused) of the ``n`` hosts most refused for ``max_per_owner``
        (any thread)."""
        with self.lock:
            return self.refusals.worst(n)

    def write(self, samples: Iterable[Sample]) -> int:
        """:meth:`put` under the lock."""
        with self.lock:
            return self.put(samples)

    def expire(self, now: float | None = None) -> int:
        """Forget the series with no value for ``stale_after``; returns how many."""
        now = self.clock() if now is None else now
        cutoff = now - self.stale_after
        gone = 0
        with self.lock:
            for family in list(self.families):
                series = self.families[family]
                stale = [labels for labels, (_, when) in series.items() if when < cutoff]
                for labels in stale:
                    del series[labels]
                    owner = labels[OWNER]
                    self.owned[owner] -= 1
                    if not self.owned[owner]:
                        del self.owned[owner]
                gone += len(stale)
                if not series:
                    del self.families[family]
            self.size -= gone
        self.counts["expired"] += gone
        return gone

    def snapshot(self, now: float | None = None) -> tuple[dict[str, dict], float]:
        """(a copy of the families, the oldest ``when`` still served): series older than
        that are stale and left out by the reader."""
        now = self.clock() if now is None else now
        with self.lock:
            copy = {family: series.copy() for family, series in self.families.items()}
        return copy, now - self.stale_after
