"""The lake's compaction lock, ``_compaction/lock``: one run that changes the tables at a time
(compaction, :mod:`fleetwatch.lake.compact`; expiry, :mod:`fleetwatch.lake.expire`).

An ``flock``, which the kernel releases when its holder exits, however it exits. The holder
writes into the file its pid, since when it holds the lock and what it is, so that a run
that finds the lock taken can say whom it waits for (``fleetwatch history compact`` while
the demo's periodic compaction runs). No Spark here: a command takes the lock before it
starts one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Callable

from fleetwatch.display import human

#: exit status when another run holds the lock (EX_TEMPFAIL)
#: how often a waiting run tries the lock again (seconds)
POLL = 0.25


class Busy(Exception):
    """Another run holds the lake's lock (still, after waiting for it)."""


@contextlib.contextmanager
def locked(lake, what: str = "compaction", wait: float = 0.0,
           tell: Callable[[str], None] | None = None, clock=time.monotonic,
           sleep=time.sleep, wall=time.time):
    """Hold ``lake``'s lock (a :class:`fleetwatch.lake.manifest.Lake`) for a run of ``what``.

    Held by another run: :class:`Busy` at once, or, with ``wait`` seconds, one line to
    ``tell`` (whom it waits for, and how long at most), then the lock tried again every
    :data:`POLL` seconds until it is free, or :class:`Busy` once ``wait`` has passed."""
    os.makedirs(lake.work, exist_ok=True)
    fd = os.open(lake.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o640)
    try:
        _take(fd, lake.root, wait, tell, clock, sleep, wall)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {wall():.3f} {what}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _take(fd: int, root: str, wait: float, tell, clock, sleep, wall) -> None:
    deadline = clock() + max(0.0, wait)
    told = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        what, since = holder(fd, wall)
        if clock() >= deadline:
            if told:
                raise Busy(f"the {what} running on {root}{since} is still running after "
                           f"{wait:g} s")
            raise Busy(f"another {what} is running on {root}{since}")
        if not told and tell is not None:
            tell(f"waiting for the {what} running{since} on {root} (up to {wait:g} s; "
                 f"--no-wait refuses instead)")
            told = True
        sleep(min(POLL, max(0.0, deadline - clock())))


def holder(fd: int, wall=time.time) -> tuple[str, str]:
    """What holds the lock and since when, as its holder wrote it: ``("compaction",
    " since 2026-12-02 01:02:03 UTC (12 s ago, pid 42)")``; ``("compaction", "")`` where
    it wrote nothing yet."""
    try:
        pid, since, what = os.pread(fd, 200, 0).decode("ascii").split(maxsplit=2)
        since_ts = float(since)
        int(pid)
    except (OSError, UnicodeDecodeError, ValueError):
        return "compaction", ""
    age = max(0, int(wall() - since_ts))
    return what.strip(), f" since {human(since_ts)} ({age} s ago, pid {pid})"
