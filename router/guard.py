"""The router's limits and alarms: rate buckets, admission pacing by load, clone detection,
event throttling.

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
#: admission pacing: the pace never goes below this many HELLOs per second (nor above the
#: ceiling), it falls while the loop works more than this share of the time, and the bucket
#: holds this many seconds of the current pace
PACE_FLOOR = 500.0
PACE_TARGET = 0.7
PACE_BURST = 0.05
PACE_MIN_BURST = 16.0


def refill(peers, rate: float, burst: float, elapsed: float) -> None:
    """Add ``rate * elapsed`` tokens to every peer's bucket, up to ``burst``."""
    add = rate * elapsed
    for peer in peers:
        tokens = peer.tokens + add
        peer.tokens = burst if tokens > burst else tokens


class Pacer:
    """Admission pacing (SPEC 7.6): a global token bucket whose rate follows the relay's load.

    The relay asks :meth:`allow` before admitting a new agent and, from its sweep, calls
    :meth:`refill` with the share of the last period its loop spent working rather than
    waiting for messages (:class:`Busy`). After a period it worked at most ``target`` of
    the time the pace doubles, up to ``ceiling`` (``limits.hellos_per_second``), where an
    idle router stays: it has time to spare, so a reconnect storm is over sooner. After one
    above ``target`` it halves, down to ``floor``: the attached agents' traffic comes first,
    yet a storm always moves on. Tokens accrue continuously and the bucket holds ``burst``
    seconds of the pace (at least PACE_MIN_BURST, or the whole pace when lower): admissions
    are spread over time, never a sweep period's worth at once (each costs the loop a few
    hundred microseconds, which the attached agents' answers wait for).
    """

    def __init__(self, ceiling: float, clock=time.monotonic, floor: float = PACE_FLOOR,
                 target: float = PACE_TARGET, burst: float = PACE_BURST):
        self.ceiling = float(ceiling)
        self.floor = min(float(floor), self.ceiling)
        self.target, self.burst = target, burst
        self.clock = clock
        #: the current pace (HELLOs per second), between floor and ceiling
        self.rate = self.ceiling
        self._sizes()
        self.tokens = self.capacity
        self.stamp = clock()
        self.deferred = 0

    def _sizes(self) -> None:
        self.capacity = max(min(self.rate, PACE_MIN_BURST), self.rate * self.burst)

    def _accrue(self) -> float:
        now = self.clock()
        self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        return self.tokens

    def refill(self, busy: float | None = None) -> None:
        """Add the tokens of the time since the last call; with ``busy`` (0 to 1, the loop's
        working share since the previous sweep) then move the pace."""
        self._accrue()
        if busy is not None:
            if busy > self.target:
                self.rate = max(self.floor, self.rate / 2)
            else:
                self.rate = min(self.ceiling, self.rate * 2)
            self._sizes()
            self.tokens = min(self.tokens, self.capacity)

    def set_ceiling(self, ceiling: float) -> None:
        """A new ``limits.hellos_per_second`` (a reload): applies at once."""
        self._accrue()
        self.ceiling = float(ceiling)
        self.floor = min(PACE_FLOOR, self.ceiling)
        self.rate = min(max(self.rate, self.floor), self.ceiling)
        self._sizes()
        self.tokens = min(self.tokens, self.capacity)

    def allow(self) -> bool:
        if self.take():
            return True
        self.deferred += 1
        return False

    def take(self) -> bool:
        """A token if there is one (:meth:`allow` without counting a refusal)."""
        if self.tokens >= 1.0 or self._accrue() >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class Busy:
    """The share of wall time a loop spends working rather than waiting in its poll.

    The loop adds each wait (:meth:`waited`); :meth:`share` gives the share of the time
    since its previous call that was not waiting (0 to 1) and starts a new period.
    """

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        self.since = clock()
        self.idle = 0.0

    def waited(self, seconds: float) -> None:
        self.idle += seconds

    def share(self) -> float:
        now = self.clock()
        elapsed, idle = now - self.since, self.idle
        self.since, self.idle = now, 0.0
        if elapsed <= 0.0:
            return 0.0
        return min(1.0, max(0.0, 1.0 - idle / elapsed))


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
