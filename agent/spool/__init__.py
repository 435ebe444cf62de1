"""The durable spool: every NOTIFY and REGISTER until each sink type it needs ACKed it (SPEC 4.2).

:class:`Spool` is what the agent calls: :meth:`Spool.add` returns only once its whole batch
is committed, so the intake may ACK a local process; :meth:`Spool.due` gives what to send
now, :meth:`Spool.ack` records an ACK. The parts it is made of:

- :mod:`agent.spool.store`: the SQLite file (STATE_DIR/spool.db, WAL, ``synchronous=FULL``),
  its schema and transactions;
- :mod:`agent.spool.acks`: which sink types' ACKs each message waits for (the routers'
  durable routes, told in WELCOME and kept in the file's ``settings``; else ``spool.ack_from``),
  recorded in the message's ``acked`` column until it is complete and deleted;
- :mod:`agent.spool.schedule`: the resend schedule (``ack_timeout`` doubling up to
  ``max_backoff``); the first send is the message as created, later ones are
  ``protocol.resend(msg, retry)`` (``retry`` = sends before this one, ``dup``);
- :mod:`agent.spool.held`: the bookkeeping held in memory while the file cannot be written
  (a full disk): :meth:`add` then raises (the intake answers 500), but what the spool holds
  is still sent and resent.

After a restart every message is due at once, and one complete under the current
requirement leaves at open. Past ``max_messages`` the oldest are deleted; the number deleted
is kept in the database and returned to the caller, which reports it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from typing import Iterable, NamedTuple

from fleetwatch import protocol

from agent.spool import store
from agent.spool.acks import AckRule
from agent.spool.held import Held
from agent.spool.schedule import Backoff

log = logging.getLogger(__name__)

#: msg_ids looked up per statement (SQLite allows 32766 parameters since 3.32, 999 before)
_CHUNK = 500


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
        self.backoff = Backoff(ack_timeout, max_backoff)
        self.ack_timeout, self.max_backoff = self.backoff.base, self.backoff.cap
        self.clock = clock
        self.db = store.connect(path)
        #: what to wait for when no router says (the config's ``spool.ack_from``)
        self.fallback = AckRule(required).required
        # what the routers last said (WELCOME's ``durable``), else that
        told = self._told()
        self.acks = AckRule(told if told is not None else required)
        #: spooled type -> the sink types that must all ACK a message of it
        self.required = self.acks.required
        self.held = Held(self.db, path, self.backoff)
        # the requirement may have changed: what it no longer waits for is complete.
        done = [(seq,) for seq, type_, acked in self.db.execute(
                    "SELECT seq, type, acked FROM messages WHERE acked != ''")
                if self.acks.complete(type_, acked.split())]
        # After a restart, everything not yet acknowledged is due at once: written by
        # retry(), or kept in memory when the disk is full (the agent starts all the same).
        self.held.hold_all(done)
        self.retry(clock())
        self._size = self.db.execute(
            f"SELECT COUNT(*) FROM {self.held.table}").fetchone()[0]
        row = self.db.execute("SELECT value FROM counters WHERE name = 'dropped'").fetchone()
        self.dropped = row[0] if row else 0
        #: older REGISTERs of a source replaced by a newer one before they were ACKed
        self.superseded = 0
        if done:
            log.info("spool %s: %d messages complete under the current requirement removed",
                     path, len(done))
        if self._size:
            log.info("spool %s holds %d unacknowledged messages", path, self._size)

    def _told(self) -> dict[str, list[str]] | None:
        """The requirement the routers last set (:meth:`retarget`), if the file has one."""
        row = self.db.execute("SELECT value FROM settings WHERE name = 'durable'").fetchone()
        try:
            told = json.loads(row[0]) if row else None
        except ValueError:
            return None
        if not isinstance(told, dict) or not all(
                isinstance(v, list) and all(isinstance(x, str) for x in v)
                for v in told.values()):
            return None
        return told

    def retarget(self, required: dict[str, Iterable[str]]) -> int:
        """From now on each spooled type waits for the sink types ``required`` names (the
        routers' durable routes, SPEC 4.1), kept on disk for the next start; the messages
        this completes leave the spool. Returns how many left."""
        rule = AckRule(required)
        if rule.required == self.acks.required:
            return 0
        self.acks, self.required = rule, rule.required
        try:
            with store.Transaction(self.db):
                self.db.execute(
                    "INSERT INTO settings (name, value) VALUES ('durable', ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (json.dumps({t: sorted(s) for t, s in sorted(rule.required.items())}),))
        except sqlite3.Error as e:       # (a full disk: it holds in memory all the same)
            log.warning("spool %s: cannot keep the routers' durable routes on disk: %s",
                        self.path, e)
        done = [(seq,) for seq, type_, acked in self.db.execute(
                    f"SELECT seq, type, acked FROM {self.held.table}")
                if rule.complete(type_, acked.split())]
        if done:
            self.held.write(done, [], "acked", self.clock())
            self._size -= len(done)
            log.info("spool %s: %d messages complete under the routers' durable routes "
                     "removed", self.path, len(done))
        return len(done)

    def needs_none(self, type_: str) -> bool:
        """Whether no sink type's ACK is wanted for ``type_`` (no durable route takes it)."""
        return self.acks.needs_none(type_)

    @property
    def write_errors(self) -> int:
        """Failed writes (each failed add, write and retry)."""
        return self.held.write_errors

    @property
    def unsaved(self) -> int:
        """Messages whose bookkeeping is held in memory, not yet written."""
        return self.held.unsaved

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
            self.held.failed(e, now)
            raise
        self.held.succeeded(now)
        self._size += added - superseded - excess
        self.superseded += superseded
        self.dropped += excess
        return excess

    def _add(self, rows, registers) -> tuple[int, int, int]:
        """(added, superseded, dropped), counted once the transaction is committed."""
        superseded = 0
        with store.Transaction(self.db):
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
                                f"(SELECT seq FROM {self.held.table} ORDER BY seq LIMIT ?)",
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
        if not self.acks.looked_up(sink):
            return Acked([], len(ids))      # e.g. history's ACKs while only alerting counts
        removed, partial, ignored = [], [], 0
        for start in range(0, len(ids), _CHUNK):
            chunk = ids[start:start + _CHUNK]
            rows = self.db.execute(
                f"SELECT seq, msg_id, type, acked FROM {self.held.table} WHERE msg_id IN "
                f"({','.join('?' * len(chunk))})", chunk).fetchall()
            for seq, msg_id, type_, acked in rows:
                by = self.acks.sender(type_, sink)
                if not self.acks.waits_for(type_, by):
                    ignored += 1            # not needed now; noted if it is a type that
                    if not self.acks.acks(type_, by):   # ACKs it (the routes may change)
                        continue
                have = acked.split()
                if by in have:
                    continue                # the same sink type again (a resend's ACK)
                have.append(by)
                if self.acks.complete(type_, have):
                    removed.append((seq, msg_id))
                else:
                    partial.append((" ".join(have), seq))
        gone = [(seq,) for seq, _ in removed]
        if gone or partial:
            self.held.write(gone, partial, "acked", self.clock())
        self._size -= len(removed)
        return Acked([msg_id for _, msg_id in removed], ignored)

    def acked_by(self, msg_id: str) -> list[str] | None:
        """The sink types that ACKed ``msg_id`` so far, or None if it is not in the spool."""
        row = self.db.execute(f"SELECT acked FROM {self.held.table} WHERE msg_id = ?",
                              (msg_id,)).fetchone()
        return None if row is None else row[0].split()

    # ---------------------------------------------------------------- held in memory
    def next_retry(self) -> float | None:
        """The wall time at which :meth:`retry` writes what is held (None: nothing held)."""
        return self.held.next_retry()

    def retry(self, now: float | None = None) -> None:
        """Write the bookkeeping held in memory, if the time has come (:mod:`agent.spool.held`)."""
        if self.held.retry(self.clock() if now is None else now):
            self._size = self.db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]

    # ---------------------------------------------------------------- reading
    def due(self, now: float | None = None, limit: int = 256) -> list[protocol.Message]:
        """Messages to send now (marked as resends after the first), rescheduled."""
        now = self.clock() if now is None else now
        rows = self.db.execute(
            f"SELECT seq, type, body, sends FROM {self.held.table} "
            "WHERE next_at <= ? OR next_at > ? ORDER BY seq LIMIT ?",
            (*self.backoff.window(now), limit)).fetchall()
        out, updates = [], []
        for seq, type_, body, sends in rows:
            msg = protocol.Message(type_, json.loads(body))
            out.append(protocol.resend(msg, sends) if sends else msg)
            updates.append((sends + 1, now + self.backoff.delay(sends + 1), seq))
        if updates:
            self.held.write([], updates, "sends next_at", now)
        return out

    def next_due(self) -> float | None:
        """The wall time at which the next message is due, or None if the spool is empty."""
        if not self._size:
            return None
        row = self.db.execute(f"SELECT MIN(next_at) FROM {self.held.table}").fetchone()
        return row[0]

    def pending(self) -> list[str]:
        """The msg_ids in the spool, oldest first (for tests and diagnostics)."""
        return [r[0] for r in self.db.execute(
            f"SELECT msg_id FROM {self.held.table} ORDER BY seq")]
