"""Giving the C heap's free memory back to the system after connection churn.

Every connection a router accepts costs libzmq buffers allocated in its I/O threads' malloc
arenas; when the connection closes they are freed, but glibc keeps the pages unless they sit
at the top of a heap, so a router that saw a reconnect storm keeps its peak size long after
(issue 31, 13: three rounds of 3,000 agents connecting, attaching and leaving left a router
at 206 MiB, 36 MiB after ``malloc_trim(0)``). :class:`Trimmer` calls glibc's
``malloc_trim(0)`` (which also releases free pages in the middle of every arena) at most
once per period, and only after enough churn since the last call to be worth the pause.

Elsewhere than glibc (musl, macOS) there is no ``malloc_trim``: the trimmer does nothing.
Pure logic with an injected clock and trim function; the router's sweep feeds it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time

log = logging.getLogger(__name__)

#: seconds between two trims at most
PERIOD = 30.0
#: connections opened (HELLOs) since the last trim before another is worth it
CHURN = 100


def malloc_trim():
    """glibc's ``malloc_trim(0)`` as a function of no argument, or None where there is none."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0)


class Trimmer:
    """Trims the heap when :meth:`maybe` is given a churn total (a counter that only grows,
    such as the HELLOs a router took) at least ``churn`` above the last trim's, no more
    often than every ``period`` seconds. ``trims`` and ``seconds`` say how often and how
    long (STATS)."""

    def __init__(self, period: float = PERIOD, churn: int = CHURN, monotonic=time.monotonic,
                 trim=malloc_trim):
        self.period, self.churn, self.monotonic = period, churn, monotonic
        self.trim = trim() if trim is malloc_trim else trim
        self.last_total = 0
        self.next_at = monotonic() + period
        self.trims = 0
        self.seconds = 0.0

    def maybe(self, total: int) -> bool:
        """Trim if ``total`` grew by ``churn`` since the last trim and the period passed."""
        if self.trim is None or total - self.last_total < self.churn:
            return False
        now = self.monotonic()
        if now < self.next_at:
            return False
        self.trim()
        took = self.monotonic() - now
        self.last_total, self.next_at = total, now + self.period
        self.trims += 1
        self.seconds += took
        log.debug("heap trimmed in %.1f ms after %d connections", took * 1000, total)
        return True
