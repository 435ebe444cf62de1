"""The resend schedule: delays that start at ``spool.ack_timeout`` and double up to
``spool.max_backoff``.

A message is due as soon as it is added; each send pushes its next time out by the delay
after that many sends, until every sink type it waits for has ACKed it (a partial ACK leaves
the schedule alone). The clock is wall time (the schedule is persisted): a next time further
ahead than the longest delay means the clock went back, and counts as due. Writes the spool
holds in memory (a full disk) are retried on the same doubling delays.
"""

from __future__ import annotations


class Backoff:
    """Delays from ``base`` seconds, doubling up to ``cap`` (at least ``base``)."""

    def __init__(self, base: float, cap: float):
        self.base = base
        self.cap = max(cap, base)

    def delay(self, n: int) -> float:
        """The wait after the ``n``-th attempt (``n`` >= 1): base, 2 base, 4 base ... cap."""
        return min(self.base * (2 ** min(n - 1, 40)), self.cap)

    def window(self, now: float) -> tuple[float, float]:
        """``(a, b)``: a next time ``<= a`` or ``> b`` is due at ``now`` (the latter only
        when the clock went back)."""
        return now, now + self.cap
