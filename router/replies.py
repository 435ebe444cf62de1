"""Per-peer reply throttling: at most one ERROR per ``period`` seconds to one peer.

A flood of bad frames from one peer must not become a flood of answers (SPEC.md, section 6).
Pure logic with an injected monotonic clock; the relay's :class:`router.port.RelayPort`
calls :meth:`ReplyLimiter.allow` before answering an error and the relay calls
:meth:`ReplyLimiter.prune` from its periodic sweep so the map of peers
stays bounded however many routing ids send garbage. :func:`answerable` says whether a
refused message may be answered at all.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class ReplyLimiter:
    def __init__(self, period: float = 1.0, clock=time.monotonic, max_peers: int = 100_000):
        self.period, self.clock, self.max_peers = period, clock, max_peers
        self._last: dict[bytes, float] = {}
        self.suppressed = 0

    def allow(self, peer: bytes) -> bool:
        """True if ``peer`` may be answered now (and note that it was)."""
        now = self.clock()
        last = self._last.get(peer)
        if last is not None and now - last < self.period:
            self.suppressed += 1
            return False
        if last is None and len(self._last) >= self.max_peers:
            self.prune(now)
            if len(self._last) >= self.max_peers:
                self.suppressed += 1
                return False
        self._last[peer] = now
        return True

    def prune(self, now: float | None = None) -> None:
        """Forget peers answered more than ``period`` ago."""
        now = self.clock() if now is None else now
        self._last = {p: t for p, t in self._last.items() if now - t < self.period}

    def __len__(self) -> int:
        return len(self._last)


def answerable(parts: list[bytes]) -> bool:
    """Never answer an ERROR (SPEC.md, section 6)."""
    return not (len(parts) >= 2 and parts[1] == b"ERROR")
