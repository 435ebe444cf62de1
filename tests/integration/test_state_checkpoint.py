"""fleetwatch.store.checkpoint: a sink's SQLite checkpoints run on its own thread, not in the
commits its ACKs wait for (issue 31, item 14: bench/notify_rtt.py's p99), on real SQLite
files. What is checkpointed is read where a user would find it after a crash that lost the
log: in the database file alone."""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from pathlib import Path

from sqlalchemy import text

from fleetwatch.store import db
from fleetwatch.store.checkpoint import FALLBACK_PAGES, Checkpointer
from sinks.database import DatabaseSink
from support.fleet import wait_for

NOTE = text("INSERT INTO notifications (msg_id, uuid, hostname, severity, text, sent_at, "
            "received_at, router) VALUES (:id, 'u', 'web-1', 'error', 'disk full', 1.0, 1.0, "
            "'router-1')")


def started(path: Path) -> DatabaseSink:
    sink = DatabaseSink(db.engine(f"sqlite:///{path}"))
    sink.type = "alerting"
    sink.start()
    return sink


def write(sink: DatabaseSink, first: int, n: int) -> None:
    for i in range(first, first + n):             # one transaction each, as NOTIFYs come
        with sink.transaction() as conn:
            conn.execute(NOTE, {"id": f"m{i:04d}"})


def in_the_file_alone(path: Path, tmp: Path) -> int:
    """Notifications in the database file without its log: what checkpoints copied there."""
    copy = tmp / "alone.db"
    shutil.copyfile(path, copy)
    conn = sqlite3.connect(copy)
    try:
        return conn.execute("SELECT count(*) FROM notifications").fetchone()[0]
    finally:
        conn.close()


def threads(before: set) -> list[str]:
    """The checkpoint threads started since ``before`` (``threading.enumerate()`` then):
    other tests' sinks left open keep theirs."""
    return [t.name for t in set(threading.enumerate()) - before
            if t.name == "sqlite-checkpoint"]


def test_a_sinks_commits_leave_the_checkpoints_to_its_thread(tmp_path):
    path = tmp_path / "state.db"
    before = set(threading.enumerate())
    sink = started(path)
    try:
        with sink.transaction() as conn:
            assert conn.execute(text("PRAGMA wal_autocheckpoint")).scalar() == FALLBACK_PAGES
        write(sink, 0, 50)       # about 350 pages: far below the commits' own threshold
        wait_for(lambda: in_the_file_alone(path, tmp_path) == 50, 10,
                 what="the thread's checkpoints")
        assert sink.counts["checkpoints"] >= 1 and sink.counts["checkpoint_failed"] == 0
        assert threads(before) == ["sqlite-checkpoint"]
    finally:
        sink.close()
    assert threads(before) == []


def test_close_checkpoints_what_was_committed_last_then_ends_the_thread(tmp_path):
    """The console (here a reader) still has the database open, so the sink's connections
    closing are not the last, which SQLite would checkpoint: the thread's last one does."""
    path = tmp_path / "state.db"
    before = set(threading.enumerate())
    sink = started(path)
    write(sink, 0, 20)
    wait_for(lambda: in_the_file_alone(path, tmp_path) == 20, 10, what="a checkpoint")
    sink.checkpointer.interval = 3600             # no more checkpoints but the last one
    write(sink, 20, 1)
    write(sink, 21, 5)
    console = sqlite3.connect(path)
    try:
        assert console.execute("SELECT count(*) FROM notifications").fetchone()[0] == 26
        sink.close()
        assert threads(before) == []
        assert in_the_file_alone(path, tmp_path) == 26
    finally:
        console.close()


def test_a_postgresql_sink_has_no_checkpointer(pg_url):
    before = set(threading.enumerate())
    sink = DatabaseSink(db.engine(pg_url))
    sink.type = "alerting"
    sink.start()
    try:
        assert sink.checkpointer is None and threads(before) == []
    finally:
        sink.close()


def test_a_failed_checkpoint_is_counted_and_logged_and_the_next_one_runs(tmp_path, caplog):
    path = tmp_path / "state.db"
    path.write_bytes(b"not a database, yet" * 300)
    counts: dict = {}
    before = set(threading.enumerate())
    caplog.set_level(logging.WARNING, logger="fleetwatch.store.checkpoint")
    ckpt = Checkpointer(str(path), counts, interval=0.01)
    ckpt.start()
    try:
        ckpt.wrote()
        wait_for(lambda: counts["checkpoint_failed"] >= 1, 10, what="the failed checkpoint")
        assert f"checkpoint of {path} failed: file is not a database" in caplog.text
        path.unlink()
        made = sqlite3.connect(path)
        made.execute("PRAGMA journal_mode=WAL")
        made.execute("CREATE TABLE t (x)")
        made.execute("INSERT INTO t VALUES (1)")
        made.close()
        ckpt.wrote()
        wait_for(lambda: counts["checkpoints"] >= 1, 10, what="the next checkpoint")
    finally:
        ckpt.stop()
    assert threads(before) == []


def test_a_database_that_is_not_there_is_a_failed_checkpoint_not_a_new_file(tmp_path):
    path = tmp_path / "state.db"                    # (removed, or never made)
    counts: dict = {}
    ckpt = Checkpointer(str(path), counts, interval=0.01)
    ckpt.start()
    try:
        ckpt.wrote()
        wait_for(lambda: counts["checkpoint_failed"] >= 1, 10, what="the failed checkpoint")
    finally:
        ckpt.stop()
    assert not path.exists() and counts["checkpoints"] == 0
