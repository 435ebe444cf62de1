"""The lake's compaction lock (fleetwatch/lake/lock.py): a run that finds it held waits for it
when asked, saying once whom it waits for, and gets it when its holder is done; or gives up
after its wait; or refuses at once. Fake clock and sleep; the lock is a real flock."""

from __future__ import annotations

import contextlib
import os

import pytest

from fleetwatch.lake.lock import Busy, locked
from fleetwatch.lake.manifest import Lake
from support.clock import Clock

NOON = 1_796_212_800.0          # 2026-12-02 12:00:00 UTC


def test_a_waiting_run_says_whom_it_waits_for_once_then_takes_the_lock(tmp_path):
    lake, clock, told = Lake(str(tmp_path)), Clock(0.0), []
    holder = contextlib.ExitStack()
    holder.enter_context(locked(lake, wall=lambda: NOON))

    def sleep(seconds):
        clock.advance(seconds)
        if clock() >= 2:                 # the running compaction ends after 2 s
            holder.close()

    with locked(lake, wait=60, tell=told.append, clock=clock, sleep=sleep,
                wall=lambda: NOON + 30):
        assert told == [f"waiting for the compaction running since 2026-12-02 12:00:00 UTC "
                        f"(30 s ago, pid {os.getpid()}) on {tmp_path} (up to 60 s; "
                        f"--no-wait refuses instead)"]
        assert 2 <= clock() < 3
        with pytest.raises(Busy, match=r"another compaction is running on .* since "
                                       r"2026-12-02 12:00:30 UTC"):
            with locked(lake, wall=lambda: NOON + 31):
                pass


def test_a_wait_ends_and_no_wait_refuses_at_once(tmp_path):
    lake, clock, told = Lake(str(tmp_path)), Clock(0.0), []
    with locked(lake, "expiry", wall=lambda: NOON):
        with pytest.raises(Busy, match=r"the expiry running on .* is still running after 5 s"):
            with locked(lake, wait=5, tell=told.append, clock=clock, sleep=clock.advance):
                pass
        assert len(told) == 1 and 5 <= clock() < 6
        with pytest.raises(Busy, match="another expiry is running"):
            with locked(lake, tell=told.append, clock=clock, sleep=clock.advance):
                pass
        assert len(told) == 1
