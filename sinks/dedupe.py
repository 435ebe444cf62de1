"""Recently written msg_ids, bounded: the cheap first line of exactly-once effect.

The database is the second line (unique msg_id); this set spares it most duplicates. Plain
logic, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class Dedupe:
    """A least-recently-used set of at most ``window`` msg_ids."""

    def __init__(self, window: int):
        if window < 0:
            raise ValueError("window must be >= 0")
        self.window = window
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, msg_id: str) -> bool:
        return msg_id in self._ids

    def seen(self, msg_id: str) -> bool:
        """True if ``msg_id`` was added and not yet evicted; refreshes it."""
        if msg_id in self._ids:
            self._ids.move_to_end(msg_id)
            return True
        return False

    def add(self, msg_ids: Iterable[str]) -> None:
        """Remember ``msg_ids`` (call only once they are committed)."""
        if not self.window:
            return
        for msg_id in msg_ids:
            self._ids[msg_id] = None
            self._ids.move_to_end(msg_id)
        while len(self._ids) > self.window:
            self._ids.popitem(last=False)
