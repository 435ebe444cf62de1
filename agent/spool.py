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

A full disk (or any failed write) never stops delivery. :meth:`add` raises (the intake answers
500), but what the spool holds is still sent and resent: bookkeeping that cannot be written
(the resend schedule, ACKs, the deletion of complete messages) is kept in memory, in a TEMP
table (``temp_store=MEMORY``) read through the ``spooled`` view, and :meth:`retry` writes it
all at :meth:`next_retry`, after ``ack_timeout`` doubling up to ``max_backoff``, until it
succeeds (a successful :meth:`add` brings the retry forward). While anything is held no write
is tried between retries: the caller waits for the next message due, it does not spin. The
first failure of an episode is logged once (WARNING) and counted in ``write_errors`` with
every failed retry; ``unsaved`` is how many messages have bookkeeping only in memory (lost at
a crash: those messages are then resent, which sinks drop as duplicates). The WAL is
checkpointed every ``WAL_PAGES`` pages and truncated to ``WAL_LIMIT`` bytes after, so that it
does not take a small disk for itself (SQLite's default lets it grow to 4 MiB first).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from typing import Iterable, NamedTuple

from fleetwatch import private, protocol

from agent.config import ACK_OWNERS

log = logging.getLogger(__name__)

#: msg_ids looked up per statement (SQLite allows 32766 parameters since 3.32, 999 before)
_CHUNK = 500
#: WAL checkpoint interval (pages) and size kept after a checkpoint (bytes)
WAL_PAGES = 100
WAL_LIMIT = 1 << 20

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

#: Bookkeeping not yet written (in memory), and the spool as it stands with it.
HELD = """
CREATE TEMP TABLE held (
    seq     INTEGER PRIMARY KEY,
    sends   INTEGER NOT NULL,
    next_at REAL NOT NULL,
    acked   TEXT NOT NULL,
    done    INTEGER NOT NULL DEFAULT 0
);
CREATE TEMP VIEW spooled AS
    SELECT m.seq, m.msg_id, m.type, m.body, COALESCE(h.sends, m.sends) AS sends,
           COALESCE(h.next_at, m.next_at) AS next_at, COALESCE(h.acked, m.acked) AS acked
    FROM main.messages AS m LEFT JOIN held AS h ON h.seq = m.seq
    WHERE h.done IS NOT 1;
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
        if path != ":memory:":      # 0640 from the start; SQLite gives -wal and -shm its mode
            if not private.create(path, private.GROUP):
                os.chmod(path, private.GROUP)
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
        self.db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
        self.db.execute("PRAGMA temp_store=MEMORY")
        self.db.executescript(SCHEMA)
        self.db.executescript(HELD)
        #: failed writes (each failed add, write and retry); the episode is logged once
        self.write_errors = 0
        #: messages whose bookkeeping is held in memory, not yet written
        self.unsaved = 0
        self._failing = False
        self._retry_at = 0.0
        self._retry_delay = self.ack_timeout
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(messages)")}
        if "acked" not in columns:          # a spool written before per-sink ACKs
            self.db.execute("ALTER TABLE messages ADD COLUMN acked TEXT NOT NULL DEFAULT ''")
        # ``ack_from`` may have changed: what it no longer waits for is complete.
        done = [(seq,) for seq, type_, acked in self.db.execute(
                    "SELECT seq, type, acked FROM messages WHERE acked != ''")
                if self._complete(type_, acked.split())]
        # After a restart, everything not yet acknowledged is due at once: written by
        # retry(), or kept in memory when the disk is full (the agent starts all the same).
        self.db.execute("INSERT INTO held (seq, sends, next_at, acked) "
                        "SELECT seq, sends, 0, acked FROM messages")
        self.db.executemany("UPDATE held SET done = 1 WHERE seq = ?", done)
        self.unsaved = self.db.execute("SELECT COUNT(*) FROM held").fetchone()[0]
        self.retry(clock())
        self._size = self.db.execute(f"SELECT COUNT(*) FROM {self._table}").fetchone()[0]
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

    @property
    def _table(self) -> str:
        """Where the spool is read: the view when bookkeeping is held in memory."""
        return "spooled" if self.unsaved else "messages"

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
        try:
            added, superseded, excess = self._add(rows, registers)
        except sqlite3.Error as e:
            self._failed(e, now)
            raise
        self._succeeded(now)
        self._size += added - superseded - excess
        self.superseded += superseded
        self.dropped += excess
        return excess

    def _add(self, rows, registers) -> tuple[int, int, int]:
        """(added, superseded, dropped), counted once the transaction is committed."""
        superseded = 0
        with self._tx():
            before = self.db.total_changes
            self.db.executemany(
                "INSERT OR IGNORE INTO messages (msg_id, type, body, next_at) VALUES (?,?,?,?)",
                rows)
            added = self.db.total_changes - before
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
            excess = max(0, self._size + added - superseded - self.max_messages)
            if excess > 0:
                self.db.execute("DELETE FROM messages WHERE seq IN "
                                f"(SELECT seq FROM {self._table} ORDER BY seq LIMIT ?)",
                                (excess,))
                self.db.execute(
                    "INSERT INTO counters (name, value) VALUES ('dropped', ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = value + excluded.value",
                    (excess,))
        return added, superseded, excess

    def ack(self, msg_ids, sink: str | None = None) -> Acked:
        """Record an ACK from sink type ``sink`` (None: each message's owning type) for
        ``msg_ids``; delete the messages it completes. Unknown msg_ids change nothing."""
        ids = [m for m in msg_ids if isinstance(m, str)] if msg_ids else []
        if not ids:
            return Acked([], 0)
        if sink is not None and sink not in self._wanted:
            return Acked([], len(ids))      # e.g. history's ACKs while only alerting counts
        removed, partial, ignored = [], [], 0
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            rows = self.db.execute(
                f"SELECT seq, msg_id, type, acked FROM {self._table} WHERE msg_id IN "
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
        gone = [(seq,) for seq, _ in removed]
        if gone or partial:
            self._write(gone, partial, "acked", self.clock())
        self._size -= len(removed)
        return Acked([msg_id for _, msg_id in removed], ignored)

    def acked_by(self, msg_id: str) -> list[str] | None:
        """The sink types that ACKed ``msg_id`` so far, or None if it is not in the spool."""
        row = self.db.execute(f"SELECT acked FROM {self._table} WHERE msg_id = ?",
                              (msg_id,)).fetchone()
        return None if row is None else row[0].split()

    # ---------------------------------------------------------------- writing, or holding
    def _write(self, gone, changes, columns: str, now: float) -> None:
        """Delete the rows ``gone`` (``[(seq,)]``) and set ``columns`` (names, space separated;
        ``changes`` are ``(values..., seq)``) in the database; in memory instead while
        anything is held there, or when the write fails."""
        sets = ", ".join(f"{c} = ?" for c in columns.split())
        if not self.unsaved and not self._failing:
            try:
                with self._tx():
                    self.db.executemany("DELETE FROM messages WHERE seq = ?", gone)
                    self.db.executemany(f"UPDATE messages SET {sets} WHERE seq = ?", changes)
                return
            except sqlite3.Error as e:
                self._failed(e, now)
        with _Transaction(self.db, "BEGIN"):
            seqs = [row[-1:] for row in changes] + list(gone)
            self.db.executemany("INSERT OR IGNORE INTO held (seq, sends, next_at, acked) "
                                "SELECT seq, sends, next_at, acked FROM messages "
                                "WHERE seq = ?", seqs)
            self.db.executemany("UPDATE held SET done = 1 WHERE seq = ?", gone)
            self.db.executemany(f"UPDATE held SET {sets} WHERE seq = ?", changes)
        self.unsaved = self.db.execute("SELECT COUNT(*) FROM held").fetchone()[0]

    def _failed(self, error: sqlite3.Error, now: float) -> None:
        self.write_errors += 1
        self._retry_at = now + self._retry_delay
        self._retry_delay = min(self._retry_delay * 2, self.max_backoff)
        if not self._failing:
            self._failing = True
            log.warning("cannot write to the spool %s (%s: %s): new messages are refused, "
                        "those spooled are still sent, their bookkeeping kept in memory and "
                        "written once it can be (tried every %g s at most)", self.path,
                        type(error).__name__, error, self.max_backoff)

    def _succeeded(self, now: float) -> None:
        """A write went through: write what is held at the next :meth:`retry`."""
        if self.unsaved:
            self._retry_at = now
        elif self._failing:
            self._recovered(0)

    def _recovered(self, written: int) -> None:
        if self._failing:
            log.info("spool writable again (%s): bookkeeping of %d messages written",
                     self.path, written)
        self._failing = False
        self._retry_delay = self.ack_timeout

    def next_retry(self) -> float | None:
        """The wall time at which :meth:`retry` writes what is held (None: nothing held)."""
        return self._retry_at if self.unsaved else None

    def retry(self, now: float | None = None) -> None:
        """Write the bookkeeping held in memory, if the time has come: first the deletions
        (they free space), then the schedule and ACKs."""
        now = self.clock() if now is None else now
        if not self.unsaved or now < self._retry_at:
            return
        written = self.unsaved
        try:
            with self._tx():
                self.db.execute("DELETE FROM messages WHERE seq IN "
                                "(SELECT seq FROM held WHERE done = 1)")
            self.db.execute("DELETE FROM held WHERE done = 1")
            with self._tx():
                self.db.execute("UPDATE messages SET (sends, next_at, acked) = (SELECT "
                                "sends, next_at, acked FROM held WHERE held.seq = messages.seq) "
                                "WHERE seq IN (SELECT seq FROM held)")
            self.db.execute("DELETE FROM held")
        except sqlite3.Error as e:
            self.unsaved = self.db.execute("SELECT COUNT(*) FROM held").fetchone()[0]
            self._failed(e, now)
            return
        self.unsaved = 0
        self._size = self.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        self._recovered(written)

    # ---------------------------------------------------------------- reading
    def _delay(self, sends: int) -> float:
        return min(self.ack_timeout * (2 ** min(sends - 1, 40)), self.max_backoff)

    def due(self, now: float | None = None, limit: int = 256) -> list[protocol.Message]:
        """Messages to send now (marked as resends after the first), rescheduled."""
        now = self.clock() if now is None else now
        rows = self.db.execute(
            f"SELECT seq, type, body, sends FROM {self._table} "
            "WHERE next_at <= ? OR next_at > ? ORDER BY seq LIMIT ?",
            (now, now + self.max_backoff, limit)).fetchall()
        out, updates = [], []
        for seq, type_, body, sends in rows:
            msg = protocol.Message(type_, json.loads(body))
            out.append(protocol.resend(msg, sends) if sends else msg)
            updates.append((sends + 1, now + self._delay(sends + 1), seq))
        if updates:
            self._write([], updates, "sends next_at", now)
        return out

    def next_due(self) -> float | None:
        """The wall time at which the next message is due, or None if the spool is empty."""
        if not self._size:
            return None
        row = self.db.execute(f"SELECT MIN(next_at) FROM {self._table}").fetchone()
        return row[0]

    def pending(self) -> list[str]:
        """The msg_ids in the spool, oldest first (for tests and diagnostics)."""
        return [r[0] for r in self.db.execute(f"SELECT msg_id FROM {self._table} ORDER BY seq")]


class _Transaction:
    """``with`` block around BEGIN IMMEDIATE ... COMMIT (ROLLBACK on error, a failed COMMIT
    included: SQLite may or may not have rolled back already)."""

    def __init__(self, db: sqlite3.Connection, begin: str = "BEGIN IMMEDIATE"):
        self.db, self.begin = db, begin

    def __enter__(self):
        self.db.execute(self.begin)
        return self.db

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            try:
                self.db.execute("COMMIT")
                return False
            except sqlite3.Error:
                self._rollback()
                raise
        self._rollback()
        return False

    def _rollback(self) -> None:
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
