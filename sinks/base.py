"""What the common loop (:mod:`sinks.loop`) expects of a sink type."""

from __future__ import annotations

from collections import Counter
from typing import Protocol

from fleetwatch.protocol import Relayed


class WriteError(Exception):
    """A batch could not be made durable (database locked or gone...): nothing is ACKed."""


class Sink(Protocol):
    #: the sink type, as in ``SINKS`` and the routers' ``endpoints.sinks``
    type: str
    #: message types this sink takes; others are dropped (and counted) by the loop
    handles: frozenset[str]
    #: message types ACKed once committed (SPEC 4.2)
    acks: frozenset[str]
    #: the sink's own counters, logged with the loop's
    counts: Counter

    @classmethod
    def from_config(cls, config) -> "Sink":
        """The sink a :class:`sinks.config.SinkConfig` describes (used by ``sinks.main``)."""

    def start(self) -> None:
        """Prepare storage (create owned tables); called once before the loop runs."""

    def write(self, batch: list[Relayed]) -> None:
        """Make ``batch`` durable in one transaction, or raise :class:`WriteError`."""

    def close(self) -> None:
        """Release storage."""

    # Optional: ``tick_interval`` (seconds) and ``tick()``, called by the loop that often
    # between batches for time-driven work (the alerting sink's silent hosts); it may
    # raise :class:`WriteError` like :meth:`write`.

    # Optional: ``drops``, a ledger of what the sink itself dropped per agent (``chunks()``,
    # ``reported(chunk)``; the remote_write sink's queue): the loop sends its entries in the
    # sink's own STATS, as a router does its own (SPEC 4.1, 4.7.2).

    # Optional, the raw hook (sinks/loop.py): ``raw = True`` with
    # ``sort_raw(raw: list[list[bytes]]) -> (kept: list, to_decode: list[list[bytes]])``
    # (keep what it writes undecoded, count and drop what it refuses, return the frames the
    # loop decodes, dedupes and ACKs) and ``write_raw(kept, fresh: list[Relayed])``, called
    # instead of :meth:`write`, same contract. The history sink uses it.
