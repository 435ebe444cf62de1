"""The spool's SQLite file: its schema, how it is opened, and transactions.

STATE_DIR/spool.db, mode 0640 from creation (SQLite gives ``-wal`` and ``-shm`` its mode), WAL
journal, ``synchronous=FULL``: a committed transaction is on the disk. The WAL is checkpointed
every ``WAL_PAGES`` pages and truncated to ``WAL_LIMIT`` bytes after, so that it does not take
a small disk for itself (SQLite's default lets it grow to 4 MiB first). ``messages`` holds the
spool, ``counters`` what must survive a restart (``dropped``), ``settings`` what the
routers told that must too (``durable``: the sink types each spooled type waits for); the TEMP table ``held`` and the
view ``spooled`` are in memory (``temp_store=MEMORY``), for :mod:`agent.spool.held`. A file
from before the ``acked`` column gets it (empty) at open and keeps its messages.
"""

from __future__ import annotations

import os
import sqlite3

from fleetwatch import private

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
CREATE TABLE IF NOT EXISTS settings (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
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


def connect(path: str) -> sqlite3.Connection:
    """Open (or create) the spool file at ``path`` (``:memory:`` for tests), schema included."""
    if path != ":memory:":      # 0640 from the start; SQLite gives -wal and -shm its mode
        if not private.create(path, private.GROUP):
            os.chmod(path, private.GROUP)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
    db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
    db.execute("PRAGMA temp_store=MEMORY")
    db.executescript(SCHEMA)
    db.executescript(HELD)
    columns = {row[1] for row in db.execute("PRAGMA table_info(messages)")}
    if "acked" not in columns:          # a spool written before per-sink ACKs
        db.execute("ALTER TABLE messages ADD COLUMN acked TEXT NOT NULL DEFAULT ''")
    return db


class Transaction:
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
