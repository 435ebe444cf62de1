"""The heap trimmer (fleetwatch/heap.py) with a fake clock and a recording trim."""

from __future__ import annotations

from fleetwatch.heap import Trimmer, malloc_trim
from support.clock import Clock


def test_it_trims_after_enough_churn_at_most_once_a_period():
    clock, calls = Clock(100.0), []
    t = Trimmer(period=30.0, churn=1000, monotonic=clock, trim=lambda: calls.append(clock()))
    assert not t.maybe(5000)                    # churn, but the first period has not passed
    clock.advance(30.0)
    assert t.maybe(5000) and calls == [130.0] and t.trims == 1
    clock.advance(60.0)
    assert not t.maybe(5999)                    # not enough since the last trim
    assert t.maybe(6000) and t.trims == 2
    assert not t.maybe(9000)                    # within the period
    clock.advance(30.0)
    assert t.maybe(9000) and t.trims == 3 and len(calls) == 3


def test_without_malloc_trim_it_does_nothing():
    t = Trimmer(trim=None)
    assert t.trim is None and not t.maybe(10**9) and t.trims == 0


def test_glibc_has_it_here():
    """This machine's C library is glibc (Debian): the router trims for real."""
    trim = malloc_trim()
    assert trim is not None and trim() in (0, 1)
