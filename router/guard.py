"""The router's limits and alarms: rate buckets, admission pacing, clone detection, event throttling.

Pure logic with an injected clock; :mod:`router.admission` calls these from the relay's slow
path and its periodic sweep. The per-agent token bucket itself lives on :class:`router.peers.Peer`
(``tokens``), because the hot path decrements it once per message; :func:`refill` tops the
buckets up from the sweep.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)

#: how long a cloned uuid's alternation is remembered, and how often it is reported
CLONE_WINDOW = 600.0
#: at most this many instances remembered per uuid (the most recent)
CLONE_INSTANCES = 4


def refill(peers, rate: float, burst: float, elapsed: float) -> None:
    """Add ``rate * elapsed`` tokens to every peer's bucket, up to ``burst``."""
    add = rate * elapsed
    for peer in peers:
        tokens = peer.tokens + add
        peer.tokens = burst if tokens > burst else tokens


class Pacer:
    """A global token bucket: at most ``per_second`` events per second, ``per_second`` burst.

    The relay asks :meth:`allow` before admitting a new agent and refills from its sweep,
    so a reconnect storm is admitted at a bounded pace while attached agents keep being
    served (SPEC 7.6).
    """

    def __init__(self, per_second: float, clock=time.monotonic):
        self.rate = float(per_second)
        self.clock = clock
        self.tokens = self.rate
        self.stamp = clock()
        self.deferred = 0

    def refill(self) -> None:
        now = self.clock()
        self.tokens = min(self.rate, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now

    def allow(self) -> bool:
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        self.deferred += 1
        return False


class CloneDetector:
    """Two live agent processes on one uuid: instances alternating (A, B, A) within a window.

    Every agent process picks a random ``instance`` at start and sends it in HELLO. Each
    clone's HELLO moves the uuid to its own connection (:meth:`router.peers.Peers.hello`);
    the other clone's next message gets 401 and it says HELLO again, so the router sees
    HELLOs whose instance goes back to one it saw before. A restart is a new instance after
    which the old one is never seen again: not reported.
    """

    def __init__(self, window: float = CLONE_WINDOW, clock=time.monotonic,
                 max_uuids: int = 100_000):
        self.window, self.clock, self.max_uuids = window, clock, max_uuids
        #: uuid -> {instance: last seen}, most recent last (dicts keep insertion order)
        self._seen: dict[str, dict[str, float]] = {}
        self._reported: dict[str, float] = {}

    def hello(self, uuid: str, instance: str | None) -> tuple[str, str] | None:
        """Note a HELLO; return (returning instance, other instance) when a clone is to be
        reported (at most once per uuid per window)."""
        if not instance:
            return None
        now = self.clock()
        seen = self._seen.get(uuid)
        if seen is None:
            if len(self._seen) >= self.max_uuids:
                self.prune(now)
                if len(self._seen) >= self.max_uuids:   # all recent: forget the oldest tenth
                    for old in list(self._seen)[:max(1, self.max_uuids // 10)]:
                        del self._seen[old]
            self._seen[uuid] = {instance: now}
            return None
        last = next(reversed(seen))
        found = None
        if instance != last:
            earlier = seen.get(instance)
            if earlier is not None and now - earlier <= self.window:
                found = (instance, last)
        seen.pop(instance, None)
        seen[instance] = now
        while len(seen) > CLONE_INSTANCES:
            del seen[next(iter(seen))]
        if found is None:
            return None
        reported = self._reported.get(uuid)
        if reported is not None and now - reported < self.window:
            return None
        self._reported[uuid] = now
        return found

    def prune(self, now: float | None = None) -> None:
        """Forget uuids and reports older than the window."""
        now = self.clock() if now is None else now
        self._seen = {u: s for u, s in self._seen.items()
                      if now - next(reversed(s.values())) <= self.window}
        self._reported = {u: t for u, t in self._reported.items() if now - t < self.window}

    def __len__(self) -> int:
        return len(self._seen)


class Once:
    """At most one event per key per ``period`` seconds (security events, 429 answers)."""

    def __init__(self, period: float, clock=time.monotonic, max_keys: int = 100_000):
        self.period, self.clock, self.max_keys = period, clock, max_keys
        self._last: dict[str, float] = {}

    def allow(self, key: str) -> bool:
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last < self.period:
            return False
        if last is None and len(self._last) >= self.max_keys:
            self.prune(now)
            if len(self._last) >= self.max_keys:
                return False
        self._last[key] = now
        return True

    def prune(self, now: float | None = None) -> None:
        now = self.clock() if now is None else now
        self._last = {k: t for k, t in self._last.items() if now - t < self.period}
