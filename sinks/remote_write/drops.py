"""What the remote_write sink's queue dropped, per agent, until the lake has it (SPEC 4.7.2).

When the queue's bound drops a segment (:mod:`sinks.remote_write.queue`), each of its records
is one message of an agent (its stamped uuid; a process's id for its own counters) whose
samples will never reach the receiver. :class:`Drops` counts them per (uuid, message type)
with the first and the last of their times (the samples' time, seconds: the message's ``ts``
as the sink bounded it), and the sink's own STATS carry the entries as ``drops`` (the
common loop's hook, :mod:`sinks.loop`), in the shape a router's have (fleetwatch/lake/
drops.py), ``sink`` being ``remote_write``. Compaction takes them because the STATS is a
sink's own (its stamped id ends its path, SPEC 4.3) and files them under that id, so
``fleetwatch history gaps HOST`` shows the hours the receiver will lack, and whose queue
lost them.

An entry leaves once a router took the STATS carrying it (a report the router could not
relay to a history sink is then a router's drop of the sink's STATS, in the router's own
ledger). At most :data:`MAX_ENTRIES` entries; a drop that would need another is only counted
(``drops_unledgered``). Plain logic, the loop's thread only.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from sinks.remote_write.queue import Header

#: entries kept at most
MAX_ENTRIES = 100_000
#: entries per STATS body, and bodies per report (as a router's: router/drops.py)
PER_MESSAGE, MESSAGES = 500, 40


class Drops:
    def __init__(self, sink: str = "remote_write", max_entries: int = MAX_ENTRIES,
                 counts: Counter | None = None):
        self.sink, self.max_entries = sink, max_entries
        self.counts = counts if counts is not None else Counter()
        for key in ("drops_unledgered", "drops_reported"):
            self.counts.setdefault(key, 0)
        #: (uuid, type) -> [count, first, last] (seconds), oldest first
        self.entries: dict[tuple[str, str], list] = {}

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, heads: Iterable[Header]) -> None:
        """The records of a dropped segment."""
        for h in heads:
            key, at = (h.uuid, h.type), h.ts_ms / 1000
            entry = self.entries.get(key)
            if entry is not None:
                entry[0] += 1
                entry[1], entry[2] = min(entry[1], at), max(entry[2], at)
            elif len(self.entries) < self.max_entries:
                self.entries[key] = [1, at, at]
            else:
                self.counts["drops_unledgered"] += 1

    def chunks(self) -> list[list[dict]]:
        """What one report sends: up to :data:`MESSAGES` bodies of :data:`PER_MESSAGE`
        entries, the oldest first."""
        items = []
        for (uuid, type_), (count, first, last) in self.entries.items():
            if len(items) >= PER_MESSAGE * MESSAGES:
                break
            items.append({"uuid": uuid, "type": type_, "sink": self.sink, "count": count,
                          "first": first, "last": last})
        return [items[i:i + PER_MESSAGE] for i in range(0, len(items), PER_MESSAGE)]

    def reported(self, chunk: list[dict]) -> None:
        """A router took the STATS carrying ``chunk``: what it counted leaves."""
        for item in chunk:
            key = (item["uuid"], item["type"])
            entry = self.entries.get(key)
            if entry is None:
                continue
            if entry[0] <= item["count"]:
                del self.entries[key]
            else:
                entry[0] -= item["count"]
            self.counts["drops_reported"] += 1
