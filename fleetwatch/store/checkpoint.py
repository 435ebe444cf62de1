"""A SQLite state database's checkpoints, on a thread of their own instead of in a commit.

In WAL mode SQLite copies the log back into the database file (a checkpoint) in the commit
that takes the log past ``wal_autocheckpoint`` pages (1,000 by default). The alerting sink
commits once per NOTIFY, about 7 pages each: at 1,000 NOTIFYs a second that was a
checkpoint every 0.15 s, 5 to 9 ms each (the pages written into the database file, then
its fsync), while the NOTIFYs behind it waited for their ACK: the p99 of
``bench/notify_rtt.py`` (bench/RESULTS.md, 2026-12-03).

A writer with a :class:`Checkpointer` raises its connections' threshold to
:data:`FALLBACK_PAGES` and tells it after each commit (:meth:`Checkpointer.wrote`); the
thread runs a PASSIVE checkpoint on a connection of its own, at most every
:data:`INTERVAL`. WAL lets a checkpoint and a writer run at once (the checkpoint copies
the frames committed when it began, the writer goes on appending; the sqlite3 module
releases the GIL while SQLite works), but not for free: both end on the same disk, and a
commit's fsync waits for the checkpoint's. Short and frequent checkpoints keep that wait
short (1 to 2 ms each every 20 ms, where one of 5 ms every 100 ms put a p99 of 4 to 5 ms).
The checkpoint syncs as the writers' commits do (``synchronous=FULL``): what was committed
stays on the disk.

The log starts again from its beginning only after a checkpoint that found no commit
after it, which, at a steady rate, is the writer's own at :data:`FALLBACK_PAGES` (small:
the thread has copied nearly everything by then). So the log file grows to about that
size (16 MiB) where it stayed under 4 MiB. A failed checkpoint is counted and logged, never
fatal: the next commit asks again, and the writer's own checkpoints bound the log
meanwhile.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections import Counter
from pathlib import Path

from fleetwatch.logs import Throttle

log = logging.getLogger(__name__)

#: the writer's own threshold (pages, 4 KiB each) with this thread on: where the log
#: starts again, and its bound should the thread be stuck
FALLBACK_PAGES = 4_000
#: seconds between two checkpoints at least (each copies what the commits before it wrote)
INTERVAL = 0.02
#: how long the thread's connection waits for a lock SQLite's checkpoint needs (ms)
BUSY_MS = 10_000


class Checkpointer:
    """Checkpoints of the SQLite database ``path`` after commits, on a daemon thread.

    ``counts`` gets ``checkpoints`` (each run), ``checkpoint_failed``; :meth:`stop` ends the
    thread (one last checkpoint first, so a clean stop leaves a short log)."""

    def __init__(self, path: str, counts: Counter, interval: float = INTERVAL):
        self.path, self.counts, self.interval = path, counts, interval
        for key in ("checkpoints", "checkpoint_failed"):
            # there before the thread counts: a reader iterating ``counts`` on another
            # thread never sees the dict grow
            counts.setdefault(key, 0)
        self.throttle = Throttle(log)
        self._due = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="sqlite-checkpoint",
                                        daemon=True)
        self._thread.start()

    def wrote(self) -> None:
        """A transaction was committed: a checkpoint is due (cheap: sets an event)."""
        self._due.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping.set()
        self._due.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    # ---------------------------------------------------------------- the thread
    def _run(self) -> None:
        conn = None
        while True:
            self._due.wait()
            self._due.clear()
            stopping = self._stopping.is_set()
            try:
                if conn is None:
                    conn = connect(self.path)
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                self.counts["checkpoints"] += 1
            except sqlite3.Error as e:
                self.counts["checkpoint_failed"] += 1
                self.throttle.warning("checkpoint", "checkpoint of %s failed: %s (the next "
                                      "commit asks again)", self.path, e)
                if conn is not None:
                    conn.close()
                    conn = None
            if stopping:
                break
            self._stopping.wait(self.interval)     # at most one checkpoint an interval
        if conn is not None:
            conn.close()


def connect(path: str) -> sqlite3.Connection:
    """The thread's connection: no transaction of its own, syncing as the writers do; the
    file must be there (``mode=rw``: a database removed under the sink is a failed
    checkpoint, not a new empty file with the umask's mode)."""
    uri = Path(os.path.abspath(path)).as_uri() + "?mode=rw"
    conn = sqlite3.connect(uri, uri=True, timeout=BUSY_MS / 1000, isolation_level=None,
                           check_same_thread=False)
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA mmap_size=0")
    return conn
