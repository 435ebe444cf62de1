"""Bookkeeping held in memory while the spool file cannot be written (a full disk).

A failed write never stops delivery: what the spool holds is still sent and resent, and the
bookkeeping that cannot be written (the resend schedule, ACKs, the deletion of complete
messages) is kept in the TEMP table ``held``, read through the ``spooled`` view. :meth:`retry`
writes it all at :meth:`next_retry`, after ``ack_timeout`` doubling up to ``max_backoff``,
until it succeeds (a successful write elsewhere brings the retry forward). While anything is
held no write is tried between retries: the caller waits for the next message due, it does
not spin. The first failure of an episode is logged once (WARNING) and counted in
``write_errors`` with every failed retry; ``unsaved`` is how many messages have bookkeeping
only in memory (lost at a crash: those messages are then resent, which sinks drop as
duplicates). After a restart everything is held first (due at once), then written.
"""

from __future__ import annotations

import logging
import sqlite3

from agent.spool.schedule import Backoff
from agent.spool.store import Transaction

log = logging.getLogger(__name__)


class Held:
    """The in-memory side of the spool's bookkeeping, and the retries that write it."""

    def __init__(self, db: sqlite3.Connection, path: str, backoff: Backoff):
        self.db, self.path, self.backoff = db, path, backoff
        #: failed writes (each failed add, write and retry); the episode is logged once
        self.write_errors = 0
        #: messages whose bookkeeping is held in memory, not yet written
        self.unsaved = 0
        self._failures = 0          # in this episode: the retry delay doubles with them
        self._retry_at = 0.0

    @property
    def table(self) -> str:
        """Where the spool is read: the view when bookkeeping is held in memory."""
        return "spooled" if self.unsaved else "messages"

    def _count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM held").fetchone()[0]

    def hold_all(self, done) -> None:
        """At open: every message due at once, those in ``done`` (``[(seq,)]``) deleted, all
        of it held until :meth:`retry` writes it."""
        self.db.execute("INSERT INTO held (seq, sends, next_at, acked) "
                        "SELECT seq, sends, 0, acked FROM messages")
        self.db.executemany("UPDATE held SET done = 1 WHERE seq = ?", done)
        self.unsaved = self._count()

    def write(self, gone, changes, columns: str, now: float) -> None:
        """Delete the rows ``gone`` (``[(seq,)]``) and set ``columns`` (names, space separated;
        ``changes`` are ``(values..., seq)``) in the database; in memory instead while
        anything is held there, or when the write fails."""
        sets = ", ".join(f"{c} = ?" for c in columns.split())
        if not self.unsaved and not self._failures:
            try:
                with Transaction(self.db):
                    self.db.executemany("DELETE FROM messages WHERE seq = ?", gone)
                    self.db.executemany(f"UPDATE messages SET {sets} WHERE seq = ?", changes)
                return
            except sqlite3.Error as e:
                self.failed(e, now)
        with Transaction(self.db, "BEGIN"):
            seqs = [row[-1:] for row in changes] + list(gone)
            self.db.executemany("INSERT OR IGNORE INTO held (seq, sends, next_at, acked) "
                                "SELECT seq, sends, next_at, acked FROM messages "
                                "WHERE seq = ?", seqs)
            self.db.executemany("UPDATE held SET done = 1 WHERE seq = ?", gone)
            self.db.executemany(f"UPDATE held SET {sets} WHERE seq = ?", changes)
        self.unsaved = self._count()

    def failed(self, error: sqlite3.Error, now: float) -> None:
        """A write failed: count it, schedule the next retry, log the episode's first."""
        self.write_errors += 1
        self._failures += 1
        self._retry_at = now + self.backoff.delay(self._failures)
        if self._failures == 1:
            log.warning("cannot write to the spool %s (%s: %s): new messages are refused, "
                        "those spooled are still sent, their bookkeeping kept in memory and "
                        "written once it can be (tried every %g s at most)", self.path,
                        type(error).__name__, error, self.backoff.cap)

    def succeeded(self, now: float) -> None:
        """A write went through: write what is held at the next :meth:`retry`."""
        if self.unsaved:
            self._retry_at = now
        elif self._failures:
            self._recovered(0)

    def _recovered(self, written: int) -> None:
        if self._failures:
            log.info("spool writable again (%s): bookkeeping of %d messages written",
                     self.path, written)
        self._failures = 0

    def next_retry(self) -> float | None:
        """The wall time at which :meth:`retry` writes what is held (None: nothing held)."""
        return self._retry_at if self.unsaved else None

    def retry(self, now: float) -> bool:
        """Write what is held, if the time has come: first the deletions (they free space),
        then the schedule and ACKs. True when it was all written now."""
        if not self.unsaved or now < self._retry_at:
            return False
        written = self.unsaved
        try:
            with Transaction(self.db):
                self.db.execute("DELETE FROM messages WHERE seq IN "
                                "(SELECT seq FROM held WHERE done = 1)")
            self.db.execute("DELETE FROM held WHERE done = 1")
            with Transaction(self.db):
                self.db.execute("UPDATE messages SET (sends, next_at, acked) = (SELECT "
                                "sends, next_at, acked FROM held WHERE held.seq = messages.seq) "
                                "WHERE seq IN (SELECT seq FROM held)")
            self.db.execute("DELETE FROM held")
        except sqlite3.Error as e:
            self.unsaved = self._count()
            self.failed(e, now)
            return False
        self.unsaved = 0
        self._recovered(written)
        return True
