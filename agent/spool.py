"""The durable spool: every NOTIFY and REGISTER until an ACK names it (SPEC.md 4.2).

SQLite (stdlib) in STATE_DIR/spool.db, WAL journal, ``synchronous=FULL``: :meth:`Spool.add`
returns only once its whole batch is committed, so the intake may ACK a local process.

Schedule: a message is due as soon as it is added; each send pushes its next time out by
``ack_timeout``, doubling up to ``max_backoff``. The first send is the message as created;
later ones are ``protocol.resend(msg, retry)`` (``retry`` = sends before this one, ``dup``).
After a restart every message is due at once. Past ``max_messages`` the oldest are deleted;
the number deleted is kept in the database and returned to the caller, which reports it.
The clock is wall time (the schedule is persisted); a ``next_at`` further ahead than
``max_backoff`` (the clock went back) counts as due.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time

from fleetwatch import protocol

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id  TEXT NOT NULL UNIQUE,
    type    TEXT NOT NULL,
    body    TEXT NOT NULL,
    sends   INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_next_at ON messages (next_at);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


class Spool:
    """Unacknowledged messages on disk, with their resend schedule."""

    def __init__(self, path: str, max_messages: int = 100000, ack_timeout: float = 2.0,
                 max_backoff: float = 60.0, clock=time.time):
        self.path = path
        self.max_messages = max(1, max_messages)
        self.ack_timeout = ack_timeout
        self.max_backoff = max(max_backoff, ack_timeout)
        self.clock = clock
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if path != ":memory:":
            os.chmod(path, 0o640)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        with self._tx():
            # After a restart, everything not yet acknowledged is due at once.
            self.db.execute("UPDATE messages SET next_at = 0")
        self._size = self.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        row = self.db.execute("SELECT value FROM counters WHERE name = 'dropped'").fetchone()
        self.dropped = row[0] if row else 0
        if self._size:
            log.info("spool %s holds %d unacknowledged messages", path, self._size)

    def _tx(self):
        return _Transaction(self.db)

    def __len__(self) -> int:
        return self._size

    def close(self) -> None:
        self.db.close()

    # ---------------------------------------------------------------- writing
    def add(self, messages) -> int:
        """Store ``messages`` in one transaction; return how many old ones were dropped.

        A msg_id already in the spool is kept as it is (a local process's retry).
        """
        now = self.clock()
        rows = [(m.msg_id, m.type, protocol.encode_body(m).decode(), now) for m in messages]
        if not rows:
            return 0
        with self._tx():
            before = self.db.total_changes
            self.db.executemany(
                "INSERT OR IGNORE INTO messages (msg_id, type, body, next_at) VALUES (?,?,?,?)",
                rows)
            self._size += self.db.total_changes - before
            excess = self._size - self.max_messages
            if excess > 0:
                self.db.execute("DELETE FROM messages WHERE seq IN "
                                "(SELECT seq FROM messages ORDER BY seq LIMIT ?)", (excess,))
                self.db.execute(
                    "INSERT INTO counters (name, value) VALUES ('dropped', ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                    (excess,))
        if excess > 0:
            self._size -= excess
            self.dropped += excess
            return excess
        return 0

    def ack(self, msg_ids) -> int:
        """Forget the messages named by an ACK; return how many were in the spool."""
        ids = [(m,) for m in msg_ids if isinstance(m, str)]
        if not ids:
            return 0
        with self._tx():
            before = self.db.total_changes
            self.db.executemany("DELETE FROM messages WHERE msg_id = ?", ids)
            removed = self.db.total_changes - before
        self._size -= removed
        return removed

    # ---------------------------------------------------------------- reading
    def _delay(self, sends: int) -> float:
        return min(self.ack_timeout * (2 ** min(sends - 1, 40)), self.max_backoff)

    def due(self, now: float | None = None, limit: int = 256) -> list[protocol.Message]:
        """Messages to send now (marked as resends after the first), rescheduled."""
        now = self.clock() if now is None else now
        rows = self.db.execute(
            "SELECT seq, type, body, sends FROM messages WHERE next_at <= ? OR next_at > ? "
            "ORDER BY seq LIMIT ?", (now, now + self.max_backoff, limit)).fetchall()
        out, updates = [], []
        for seq, type_, body, sends in rows:
            msg = protocol.Message(type_, json.loads(body))
            out.append(protocol.resend(msg, sends) if sends else msg)
            updates.append((sends + 1, now + self._delay(sends + 1), seq))
        if updates:
            with self._tx():
                self.db.executemany("UPDATE messages SET sends = ?, next_at = ? WHERE seq = ?",
                                    updates)
        return out

    def next_due(self) -> float | None:
        """The wall time at which the next message is due, or None if the spool is empty."""
        if not self._size:
            return None
        row = self.db.execute("SELECT MIN(next_at) FROM messages").fetchone()
        return row[0]

    def pending(self) -> list[str]:
        """The msg_ids in the spool, oldest first (for tests and diagnostics)."""
        return [r[0] for r in self.db.execute("SELECT msg_id FROM messages ORDER BY seq")]


class _Transaction:
    """``with`` block around BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error)."""

    def __init__(self, db: sqlite3.Connection):
        self.db = db

    def __enter__(self):
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, exc_type, exc, tb):
        self.db.execute("ROLLBACK" if exc_type else "COMMIT")
        return False
