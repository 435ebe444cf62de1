"""The tests' one fake clock: pass it where code takes ``time.time`` or ``time.monotonic``."""

from __future__ import annotations


class Clock:
    """A clock the test sets and moves: ``clock()`` is its time, ``clock.now = t`` sets it,
    ``clock.advance(s)`` moves it on (and returns the new time)."""

    def __init__(self, now: float = 1_700_000_000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> float:
        self.now += seconds
        return self.now
