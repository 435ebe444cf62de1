"""The router's drops per agent, until the history lake has them (SPEC 4.1, "Drops").

The relay counts every message it could not hand to a sink type (``router.dropped.TYPE.SINK``);
this ledger also remembers whose it was: per (agent uuid, type, sink type) a count and the
times of the first and the last drop. The router's STATS carry the entries in ``drops``
(:meth:`DropLedger.oldest`, at most :data:`PER_MESSAGE` a body, :data:`MESSAGES` bodies a
report), and an entry leaves the ledger only once a history sink's queue took the STATS
that carries it (:meth:`DropLedger.reported`): while the lake is away, its own drops wait
here, and one entry then spans the outage. So a query of the lake can tell "nothing was
sent" from "it was dropped" for a host and an hour.

At most :data:`MAX_ENTRIES` entries: a drop that would make a new one beyond is only counted
(``router.drops_unledgered``), never a reason to grow. Pure logic, the clock passed in.
"""

from __future__ import annotations

from typing import NamedTuple

#: entries kept at most (about 200 bytes each)
MAX_ENTRIES = 100_000
#: entries per STATS body (about 130 bytes each: well within the 256 KiB body limit)
PER_MESSAGE = 500
#: STATS bodies one report may carry drops in (20,000 entries per stats interval)
MESSAGES = 40


class Key(NamedTuple):
    uuid: str
    type: str
    sink: str


class DropLedger:
    def __init__(self, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        #: Key -> [count, first, last], oldest first (a dict keeps insertion order)
        self.entries: dict[Key, list] = {}
        #: drops that found the ledger full
        self.unledgered = 0
        #: entries handed to a history sink
        self.reported_entries = 0

    def __len__(self) -> int:
        return len(self.entries)

    def add(self, uuid: str, type_: str, sink: str, now: float) -> None:
        key = Key(uuid, type_, sink)
        entry = self.entries.get(key)
        if entry is not None:
            entry[0] += 1
            entry[2] = now
        elif len(self.entries) < self.max_entries:
            self.entries[key] = [1, now, now]
        else:
            self.unledgered += 1

    def oldest(self, limit: int) -> list[tuple[Key, dict]]:
        """Up to ``limit`` entries, oldest first, as (key, the ``drops`` item)."""
        out = []
        for key, (count, first, last) in self.entries.items():
            if len(out) >= limit:
                break
            out.append((key, {"uuid": key.uuid, "type": key.type, "sink": key.sink,
                              "count": count, "first": first, "last": last}))
        return out

    def reported(self, items: list[tuple[Key, dict]]) -> None:
        """A history sink took these: what they counted leaves the ledger (drops since
        are kept, in an entry of their own)."""
        for key, item in items:
            entry = self.entries.get(key)
            if entry is None:
                continue
            if entry[0] <= item["count"]:
                del self.entries[key]
            else:               # (not in one loop turn, but cheap to be exact)
                entry[0] -= item["count"]
                entry[1] = item["last"]
            self.reported_entries += 1

    def chunks(self) -> list[list[tuple[Key, dict]]]:
        """What one report sends: up to :data:`MESSAGES` bodies of :data:`PER_MESSAGE`."""
        items = self.oldest(PER_MESSAGE * MESSAGES)
        return [items[i:i + PER_MESSAGE] for i in range(0, len(items), PER_MESSAGE)]
