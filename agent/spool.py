"""The durable spool: every NOTIFY and REGISTER until each sink type it needs ACKed it (SPEC 4.2).

SQLite (stdlib) in STATE_DIR/spool.db, WAL journal, ``synchronous=FULL``: :meth:`Spool.add`
returns only once its whole batch is committed, so the intake may ACK a local process.

Which ACKs a message waits for: ``required`` maps each spooled type to the sink types that
must all ACK it (config ``spool.ack_from``; default the owning type, NOTIFY: alerting,
REGISTER: registry). An ACK names its sink type in ``sink``: the spool records it in the
message's ``acked`` column and deletes the message once every required type is there. An ACK
from a type the message does not need is counted (``ignored``) and changes nothing, so a
history sink ACKing a NOTIFY it fsynced never ends the resends an alerting sink still needs.
An ACK without ``sink`` (sinks older than the field) counts as one from the message type's
owner, which is what those sinks were. An ACK from a type no message type needs is not even
looked up (no write: the history sink's ACKs cost nothing by default). Which required types
ACKed is kept, not which are missing, so that a changed ``ack_from`` applies to messages
already spooled: one complete under the new setting leaves at open (an ignored ACK was not
kept, so it does not count then).

Schedule: a message is due as soon as it is added; each send pushes its next time out by
``ack_timeout``, doubling up to ``max_backoff``, until the message is complete (a partial
ACK leaves the schedule alone). The first send is the message as created; later ones are
``protocol.resend(msg, retry)`` (``retry`` = sends before this one, ``dup``).
After a restart every message is due at once. Past ``max_messages`` the oldest are deleted;
the number deleted is kept in the database and returned to the caller, which reports it.
The clock is wall time (the schedule is persisted); a ``next_at`` further ahead than
``max_backoff`` (the clock went back) counts as due. A spool file from before ``acked``
existed gets the column (empty) at open and keeps its messages.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from typing import Iterable, NamedTuple

from fleetwatch import protocol

from agent.config import ACK_OWNERS

log = logging.getLogger(__name__)

#: msg_ids looked up per statement (SQLite allows 32766 parameters since 3.32, 999 before)
_CHUNK = 500

SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq     INTEGER PRIMARY KEY AUTOINCREMENT,
    msg_id  TEXT NOT NULL UNIQUE,
    type    TEXT NOT NULL,
    body    TEXT NOT NULL,
    sends   INTEGER NOT NULL DEFAULT 0,
    next_at REAL NOT NULL,
    acked   TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS messages_next_at ON messages (next_at);
CREATE TABLE IF NOT EXISTS counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
);
"""


class Acked(NamedTuple):
    """What one ACK did: the msg_ids it completed (deleted), and how many of its msg_ids
    came from a sink type their message does not wait for."""

    removed: list[str]
    ignored: int


class Spool:
    """Unacknowledged messages on disk, with their resend schedule."""

    def __init__(self, path: str, max_messages: int = 100000, ack_timeout: float = 2.0,
                 max_backoff: float = 60.0, clock=time.time,
                 required: dict[str, Iterable[str]] | None = None):
        self.path = path
        self.max_messages = max(1, max_messages)
        self.ack_timeout = ack_timeout
        self.max_backoff = max(max_backoff, ack_timeout)
        self.clock = clock
        if required is None:
            required = {t: (owner,) for t, owner in ACK_OWNERS.items()}
        #: spooled type -> the sink types that must all ACK a message of it
        self.required = {t: frozenset(sinks) for t, sinks in required.items()}
        self._wanted = frozenset().union(*self.required.values())
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        if path != ":memory:":
            os.chmod(path, 0o640)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        with self._tx():
            columns = {row[1] for row in self.db.execute("PRAGMA table_info(messages)")}
            if "acked" not in columns:      # a spool written before per-sink ACKs
                self.db.execute("ALTER TABLE messages ADD COLUMN acked TEXT NOT NULL DEFAULT ''")
            # After a restart, everything not yet acknowledged is due at once.
            self.db.execute("UPDATE messages SET next_at = 0")
            # ``ack_from`` may have changed: what it no longer waits for is complete.
            done = [(seq,) for seq, type_, acked in self.db.execute(
                        "SELECT seq, type, acked FROM messages WHERE acked != ''")
                    if self._complete(type_, acked.split())]
            self.db.executemany("DELETE FROM messages WHERE seq = ?", done)
        self._size = self.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        row = self.db.execute("SELECT value FROM counters WHERE name = 'dropped'").fetchone()
        self.dropped = row[0] if row else 0
        #: older REGISTERs of a source replaced by a newer one before they were ACKed
        self.superseded = 0
        if done:
            log.info("spool %s: %d messages complete under the current ack_from removed",
                     path, len(done))
        if self._size:
            log.info("spool %s holds %d unacknowledged messages", path, self._size)

    def _complete(self, type_: str, acked) -> bool:
        """Whether sink types ``acked`` are all a message of ``type_`` waits for (a type with
        no requirement, which the agent does not spool, takes any ACK)."""
        need = self.required.get(type_)
        return need is None or need.issubset(acked)

    def _tx(self):
        return _Transaction(self.db)

    def __len__(self) -> int:
        return self._size

    def close(self) -> None:
        self.db.close()

    # ---------------------------------------------------------------- writing
    def add(self, messages) -> int:
        """Store ``messages`` in one transaction; return how many old ones were dropped.

        A msg_id already in the spool is kept as it is (a local process's retry). A REGISTER
        with ``plugins`` supersedes the older ones of its source (``name``) still spooled: it
        replaces what its source declared (SPEC 4.5), so resending an older one could only
        make a registry that missed both apply the old list after the new one.
        """
        now = self.clock()
        rows = [(m.msg_id, m.type, protocol.encode_body(m).decode(), now) for m in messages]
        if not rows:
            return 0
        registers = [(m.msg_id,) for m in messages if m.type == "REGISTER"]
        with self._tx():
            before = self.db.total_changes
            self.db.executemany(
                "INSERT OR IGNORE INTO messages (msg_id, type, body, next_at) VALUES (?,?,?,?)",
                rows)
            self._size += self.db.total_changes - before
            if registers:
                before = self.db.total_changes
                self.db.executemany(
                    "DELETE FROM messages WHERE type = 'REGISTER' AND EXISTS ("
                    "SELECT 1 FROM messages AS new WHERE new.msg_id = ? "
                    "AND new.type = 'REGISTER' AND messages.seq < new.seq "
                    "AND json_type(new.body, '$.plugins') IS NOT NULL "
                    "AND json_extract(messages.body, '$.name') = "
                    "json_extract(new.body, '$.name'))", registers)
                superseded = self.db.total_changes - before
                self._size -= superseded
                self.superseded += superseded
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

    def ack(self, msg_ids, sink: str | None = None) -> Acked:
        """Record an ACK from sink type ``sink`` (None: each message's owning type) for
        ``msg_ids``; delete the messages it completes. Unknown msg_ids change nothing."""
        ids = [m for m in msg_ids if isinstance(m, str)] if msg_ids else []
        if not ids:
            return Acked([], 0)
        if sink is not None and sink not in self._wanted:
            return Acked([], len(ids))      # e.g. history's ACKs while only alerting counts
        removed, partial, ignored = [], [], 0
        with self._tx():
            for start in range(0, len(ids), _CHUNK):
                chunk = ids[start:start + _CHUNK]
                rows = self.db.execute(
                    "SELECT seq, msg_id, type, acked FROM messages WHERE msg_id IN "
                    f"({','.join('?' * len(chunk))})", chunk).fetchall()
                for seq, msg_id, type_, acked in rows:
                    by = sink if sink is not None else ACK_OWNERS.get(type_)
                    need = self.required.get(type_)
                    if need is not None and by not in need:
                        ignored += 1
                        continue
                    have = acked.split()
                    if by in have:
                        continue                # the same sink type again (a resend's ACK)
                    have.append(by)
                    if self._complete(type_, have):
                        removed.append((seq, msg_id))
                    else:
                        partial.append((" ".join(have), seq))
            if removed:
                self.db.executemany("DELETE FROM messages WHERE seq = ?",
                                    [(seq,) for seq, _ in removed])
            if partial:
                self.db.executemany("UPDATE messages SET acked = ? WHERE seq = ?", partial)
        self._size -= len(removed)
        return Acked([msg_id for _, msg_id in removed], ignored)

    def acked_by(self, msg_id: str) -> list[str] | None:
        """The sink types that ACKed ``msg_id`` so far, or None if it is not in the spool."""
        row = self.db.execute("SELECT acked FROM messages WHERE msg_id = ?", (msg_id,)).fetchone()
        return None if row is None else row[0].split()

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
