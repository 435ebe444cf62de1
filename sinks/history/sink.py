"""The history sink: every message a router relays to it, as one JSON line in the landing area.

It takes every type an agent sends (the default routing table sends all of them here,
SPEC 4.1) and opts into the common loop's raw hook (:mod:`sinks.loop`, ``raw = True``): the
loop hands it each batch's frames undecoded, :class:`sinks.history.lines.Sorter` checks the
envelopes and turns the bodies into lines as they are, except NOTIFY and REGISTER (the types
it ACKs), which the loop decodes, deduplicates and ACKs as for any sink. Each batch is one
``write`` through :class:`sinks.history.landing.Landing`, fsynced before
:meth:`HistorySink.write_raw` returns when it holds something the loop then ACKs (other
lines: within ``SYNC_SECONDS``). A line (docs/concepts/lake.md "Landing files")::

    {"msg": BODY, "type": "STATS", "uuid": STAMPED UUID, "router": ROUTER, "received": EPOCH}

No PySpark here: turning lines into tables is ``fleetwatch history compact``'s job.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import Counter

from fleetwatch import protocol, sinktypes
from fleetwatch.logs import Throttle
from fleetwatch.protocol import Relayed
from sinks.base import WriteError
from sinks.history.landing import STALE_SECONDS, Landing, recover
from sinks.history.lines import Sorter, landing_data

log = logging.getLogger(__name__)


class HistorySink:
    type = "history"
    #: every agent type but DEREGISTER (not routed here: the lake has no table for it)
    handles = sinktypes.BY_NAME["history"].handles
    acks = sinktypes.BY_NAME["history"].acks
    #: the loop's raw hook: :meth:`sort_raw` and :meth:`write_raw` (sinks/base.py)
    raw = True

    def __init__(self, lake: str, name: str, rotate_bytes: int = 64 << 20,
                 rotate_seconds: float = 60.0, ack: bool = True, wall=time.time,
                 clock=time.monotonic):
        self.lake, self.name, self.wall = lake, name, wall
        self.directory = os.path.join(lake, "landing")
        self.landing = Landing(self.directory, name, rotate_bytes, rotate_seconds, clock, wall)
        if not ack:
            self.acks = frozenset()
        #: the loop calls tick() this often between batches: closes a file that is due
        self.tick_interval = min(1.0, rotate_seconds / 4)
        self._counts: Counter = Counter()
        #: decodes nothing it does not ACK (with ``ack: false``, nothing at all)
        self.sorter = Sorter(self.handles, self.acks, self._counts, Throttle(log))

    @property
    def counts(self) -> Counter:
        """Lines, bytes and batches written; messages refused (``refused_*``, see
        :mod:`sinks.history.lines`); landing files closed and recovered."""
        merged = Counter(self._counts)
        merged["files_closed"] = self.landing.closed
        return merged

    @classmethod
    def from_config(cls, config) -> "HistorySink":
        s = config.history
        name = (config.name or f"history@{socket.gethostname()}")[:protocol.MAX_ID]
        return cls(s.lake, name, s.rotate_bytes, s.rotate_seconds, s.ack)

    def start(self) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
            closed = recover(self.directory)
        except OSError as e:
            raise WriteError(f"history lake {self.lake}: cannot use {self.directory}: "
                             f"{e.strerror or e}") from None
        self._counts["files_recovered"] += len(closed)
        for path in closed:
            log.warning("closed %s left open by a stopped sink (its last line may be cut "
                        "short; compaction counts it)", path)
        log.info("landing in %s (rotate at %d bytes or %g s)%s", self.directory,
                 self.landing.rotate_bytes, self.landing.rotate_seconds,
                 "" if self.acks else "; not ACKing")

    def sort_raw(self, raw: list[list[bytes]]) -> tuple[list[bytes], list[list[bytes]]]:
        """``(kept, to_decode)`` for the loop: see :meth:`sinks.history.lines.Sorter.sort`."""
        return self.sorter.sort(raw)

    def write_raw(self, kept: list[bytes], fresh: list[Relayed]) -> None:
        """Land ``kept`` (from :meth:`sort_raw`) and the decoded ``fresh`` with one write,
        or raise :class:`WriteError` having landed none of them. ``fresh`` (what the loop
        ACKs once this returns) is fsynced first; ``kept`` alone is fsynced within
        ``SYNC_SECONDS`` (sinks/history/landing.py)."""
        data = landing_data(kept, fresh, self.wall())
        try:
            self.landing.append(data, sync=bool(fresh))
        except OSError as e:
            raise WriteError(f"landing file in {self.directory}: {e.strerror or e}") from None
        self._counts["lines"] += len(kept) + len(fresh)
        self._counts["bytes"] += len(data)
        self._counts["batches"] += 1

    def write(self, batch: list[Relayed]) -> None:
        """Decoded messages only (the loop's default path, and tools)."""
        self.write_raw([], batch)

    def tick(self) -> None:
        try:
            self.landing.tick()
        except OSError as e:
            raise WriteError(f"closing {self.landing.path}: {e.strerror or e}") from None

    def close(self) -> None:
        try:
            self.landing.close()
        except OSError as e:
            log.error("cannot close %s: %s (closed at the next start)", self.landing.path, e)


def recover_stale(lake: str) -> list[str]:
    """For compaction: close ``.open`` files of sinks that died and did not come back."""
    return recover(os.path.join(lake, "landing"), STALE_SECONDS)
