"""The spool when its writes fail (a full disk), without sockets: a fake clock, and real SQLite
refusing every write to the spool file (an authorizer denying them), until the disk is
"freed". tests/integration/test_agent_disk_full.py does the same for real on a full tmpfs."""

from __future__ import annotations

import logging
import sqlite3

import pytest

from support.clock import Clock
from agent.spool import Spool
from fleetwatch import protocol

FULL = "cannot write to the spool"
AGAIN = "spool writable again"


class Disk:
    """Every write to the spool file fails, as on a full disk, between :meth:`fill` and
    :meth:`free` (reads, and the spool's in-memory TEMP table, still work)."""

    def __init__(self, spool: Spool):
        self.spool = spool

    @staticmethod
    def _deny(action, _arg1, _arg2, database, _trigger):
        writes = (sqlite3.SQLITE_INSERT, sqlite3.SQLITE_UPDATE, sqlite3.SQLITE_DELETE)
        return sqlite3.SQLITE_DENY if action in writes and database == "main" else \
            sqlite3.SQLITE_OK

    def fill(self) -> None:
        self.spool.db.set_authorizer(self._deny)

    def free(self) -> None:
        self.spool.db.set_authorizer(None)


def notify(text: str, clock) -> protocol.Message:
    return protocol.make("NOTIFY", "agent-uuid", clock=clock, severity="error", text=text)


def on_file(path) -> dict[str, tuple[int, str]]:
    """What the spool file holds, read by another connection: msg_id -> (sends, acked)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {m: (s, a) for m, s, a in db.execute("SELECT msg_id, sends, acked FROM messages")}
    finally:
        db.close()


@pytest.fixture
def clock():
    return Clock(1000.0)


@pytest.fixture
def path(tmp_path):
    return tmp_path / "spool.db"


@pytest.fixture
def spool(path, clock):
    s = Spool(str(path), max_messages=100, ack_timeout=2.0, max_backoff=10.0, clock=clock)
    yield s
    s.close()


def test_sends_go_on_with_the_schedule_in_memory(spool, clock, caplog):
    caplog.set_level(logging.INFO, "agent.spool")
    a, b = notify("a", clock), notify("b", clock)
    spool.add([a, b])
    Disk(spool).fill()

    first = spool.due()
    assert [m.msg_id for m in first] == [a.msg_id, b.msg_id]
    assert not any(m.get("dup") for m in first)
    assert spool.write_errors == 1 and spool.unsaved == 2
    # not due again at once: the schedule the file could not take is kept in memory
    assert spool.due() == []
    assert spool.next_due() == clock.now + 2.0
    clock.now += 2.0
    again = spool.due()
    assert [(m.msg_id, m.get("dup"), m.get("retry")) for m in again] == \
        [(a.msg_id, True, 1), (b.msg_id, True, 1)]
    assert spool.next_due() == clock.now + 4.0
    # no write tried between retries: one failure, one warning
    assert spool.write_errors == 1
    assert caplog.text.count(FULL) == 1


def test_acks_while_full_end_the_resends_and_are_written_later(spool, path, clock, caplog):
    caplog.set_level(logging.INFO, "agent.spool")
    a, b = notify("a", clock), notify("b", clock)
    spool.add([a, b])
    disk = Disk(spool)
    disk.fill()
    spool.due()
    assert spool.ack([a.msg_id]).removed == [a.msg_id]
    assert len(spool) == 1 and spool.pending() == [b.msg_id]
    assert spool.ack([a.msg_id]).removed == []            # a resend's ACK: already done
    clock.now += 100
    assert [m.msg_id for m in spool.due()] == [b.msg_id]
    assert set(on_file(path)) == {a.msg_id, b.msg_id}      # nothing written yet

    disk.free()
    retry = spool.next_retry()
    assert retry is not None
    spool.retry(retry - 0.01)
    assert spool.unsaved == 2                              # not yet
    spool.retry(retry)
    assert spool.unsaved == 0 and spool.next_retry() is None
    assert on_file(path) == {b.msg_id: (2, "")}            # a deleted, b's two sends kept
    assert caplog.text.count(FULL) == 1 and caplog.text.count(AGAIN) == 1

    spool.close()
    reopened = Spool(str(path), ack_timeout=2.0, max_backoff=10.0, clock=clock)
    (resent,) = reopened.due()
    assert resent.msg_id == b.msg_id and resent.get("retry") == 2
    reopened.close()


def test_partial_acks_while_full_are_kept(path, clock):
    spool = Spool(str(path), ack_timeout=2.0, max_backoff=10.0, clock=clock,
                  required={"NOTIFY": ("alerting", "history")})
    a = notify("a", clock)
    spool.add([a])
    disk = Disk(spool)
    disk.fill()
    assert spool.ack([a.msg_id], "history").removed == []
    assert spool.acked_by(a.msg_id) == ["history"]
    assert spool.ack([a.msg_id], "alerting").removed == [a.msg_id]
    assert spool.acked_by(a.msg_id) is None and len(spool) == 0
    disk.free()
    spool.retry(spool.next_retry())
    assert on_file(path) == {}
    spool.close()


def test_retries_back_off_and_a_successful_add_brings_them_forward(spool, clock, caplog):
    caplog.set_level(logging.INFO, "agent.spool")
    spool.add([notify("a", clock)])
    disk = Disk(spool)
    disk.fill()
    start = clock.now
    spool.due()
    waits = []
    for _ in range(5):
        retry = spool.next_retry()
        spool.retry(retry - 0.01)                          # too early: nothing tried
        errors = spool.write_errors
        spool.retry(retry)
        assert spool.write_errors == errors + 1
        waits.append(retry - start)
        start = retry
    assert waits == [2.0, 4.0, 8.0, 10.0, 10.0]
    with pytest.raises(sqlite3.Error):                     # the intake answers 500
        spool.add([notify("b", clock)])
    assert spool.write_errors == 7
    assert caplog.text.count(FULL) == 1

    disk.free()
    clock.now += 1
    spool.add([notify("c", clock)])
    assert spool.next_retry() == clock.now                 # at once, not at the backoff
    spool.retry()
    assert spool.unsaved == 0 and len(spool) == 2
    assert caplog.text.count(AGAIN) == 1
    # and the next failure is a new episode, reported again
    disk.fill()
    clock.now += 1
    spool.due()
    assert caplog.text.count(FULL) == 2


def test_a_failed_add_alone_is_over_with_the_next_successful_one(spool, clock, caplog):
    caplog.set_level(logging.INFO, "agent.spool")
    disk = Disk(spool)
    disk.fill()
    with pytest.raises(sqlite3.Error):
        spool.add([notify("a", clock)])
    assert spool.unsaved == 0 and spool.next_retry() is None and len(spool) == 0
    disk.free()
    spool.add([notify("b", clock)])
    assert caplog.text.count(FULL) == 1 and caplog.text.count(AGAIN) == 1
    assert len(spool.due()) == 1 and spool.unsaved == 0
