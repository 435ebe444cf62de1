"""The remote_write sink's queue (sinks/remote_write/queue.py): order, spilling past the
memory bound, dropping the oldest past the disk bound (reported with each record's agent and
time), what the sender holds never dropped, and a restart resuming what was queued."""

from __future__ import annotations

import os

import pytest

from sinks.remote_write import queue as q
from sinks.remote_write.queue import Header, SpillQueue, record

pytestmark = pytest.mark.timeout(60)

#: a sample's TimeSeries stand-in: 100 bytes
DATA = b"x" * 100


def put(queue: SpillQueue, n: int, uuid: str = "u1", samples: int = 5, start: int = 0):
    """``n`` records of ``samples`` samples each, record i at ts i (ms)."""
    for i in range(start, start + n):
        rec = record(uuid, "STATS", i, [(i, DATA + str(i).encode())] * samples)
        queue.put(rec, Header(uuid, "STATS", i, samples))


def drain(queue: SpillQueue, limit: int = 50) -> list[int]:
    """Every record's ts, taking ``limit`` samples at a time."""
    out = []
    while True:
        got = queue.take(limit)
        if not got:
            return out
        out += [q.header(r).ts_ms for r in got]
        queue.done()


def make(tmp_path, memory=16 * 1024, disk=64 * 1024, dropped=None, **kw) -> SpillQueue:
    queue = SpillQueue(str(tmp_path / "queue"), memory, disk,
                       dropped or (lambda heads: None), **kw)
    queue.open()
    return queue


def segment_files(tmp_path) -> list[str]:
    return sorted(n for n in os.listdir(tmp_path / "queue") if n.endswith(".seg"))


def test_a_record_keeps_its_agent_time_and_samples():
    rec = record("agent-1", "RESULT", 1_795_000_000_123, [(7, b"ab"), (2 ** 32 + 1, b"c")])
    assert q.header(rec) == Header("agent-1", "RESULT", 1_795_000_000_123, 2)
    assert list(q.samples(rec)) == [(7, b"ab"), (1, b"c")]


def test_records_come_out_in_order_and_leave_once_done(tmp_path):
    queue = make(tmp_path, memory=1 << 20)
    put(queue, 30)
    assert queue.sizes()["queue_samples"] == 150
    first = queue.take(12)
    assert [q.header(r).ts_ms for r in first] == [0, 1, 2]     # whole records, 15 samples
    assert queue.waiting() == 135 and queue.sizes()["queue_samples"] == 150
    queue.done()
    assert queue.sizes()["queue_samples"] == 135
    assert drain(queue) == list(range(3, 30))
    assert queue.sizes() == {"queue_samples": 0, "queue_bytes": 0, "queue_memory_bytes": 0,
                             "queue_disk_bytes": 0, "queue_segments": 0}


def test_a_record_larger_than_the_limit_is_taken_whole(tmp_path):
    queue = make(tmp_path)
    put(queue, 2, samples=40)
    assert len(queue.take(10)) == 1


def test_past_the_memory_bound_the_oldest_segments_spill_to_disk_and_come_back(tmp_path):
    queue = make(tmp_path, memory=64 * 1024, disk=1 << 30)
    put(queue, 400)                             # about 230 KB of records
    sizes = queue.sizes()
    assert sizes["queue_memory_bytes"] <= 64 * 1024
    assert sizes["queue_disk_bytes"] > 100 * 1024 and segment_files(tmp_path)
    assert queue.counts["segments_spilled"] >= 5 and queue.counts["samples_dropped_full"] == 0
    assert drain(queue, 200) == list(range(400))
    assert segment_files(tmp_path) == []        # each file deleted once all of it was sent


def test_past_the_disk_bound_the_oldest_are_dropped_counted_and_reported(tmp_path):
    reported = []
    queue = make(tmp_path, memory=64 * 1024, disk=128 * 1024, dropped=reported.extend)
    put(queue, 1000)
    dropped = queue.counts["samples_dropped_full"]
    assert dropped > 0 and queue.counts["segments_dropped"] > 0
    assert queue.sizes()["queue_disk_bytes"] <= 128 * 1024
    # what was dropped is the oldest records, each reported with its agent and time
    assert [h.ts_ms for h in reported] == list(range(len(reported)))
    assert {(h.uuid, h.type, h.samples) for h in reported} == {("u1", "STATS", 5)}
    assert sum(h.samples for h in reported) == dropped
    # the rest is sent, in order: nothing lost within the bound
    assert drain(queue, 500) == list(range(len(reported), 1000))


def test_without_disk_the_oldest_in_memory_are_dropped(tmp_path):
    reported = []
    queue = make(tmp_path, memory=64 * 1024, disk=0, dropped=reported.extend)
    put(queue, 500)
    assert segment_files(tmp_path) == []
    assert queue.sizes()["queue_memory_bytes"] <= 64 * 1024
    assert reported and drain(queue, 500) == list(range(len(reported), 500))


def test_what_the_sender_holds_is_never_dropped(tmp_path):
    reported = []
    queue = make(tmp_path, memory=64 * 1024, disk=64 * 1024, dropped=reported.extend)
    put(queue, 10)
    held = [q.header(r).ts_ms for r in queue.take(25)]
    assert held == [0, 1, 2, 3, 4]
    put(queue, 2000, start=10)                  # far past both bounds while it is held
    assert reported and all(h.ts_ms >= 10 for h in reported)
    queue.done()
    rest = drain(queue, 500)
    assert rest == sorted(rest) and rest[0] == 5 and rest[-1] == 2009


def test_a_spill_the_disk_refuses_drops_that_segment(tmp_path, monkeypatch):
    reported = []
    queue = make(tmp_path, memory=64 * 1024, disk=1 << 30, dropped=reported.extend)

    def full(*_args, **_kw):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(q, "_write", full)
    put(queue, 400)
    assert queue.counts["spill_failed"] > 0
    assert queue.counts["samples_dropped_full"] == sum(h.samples for h in reported) > 0
    assert queue.sizes()["queue_memory_bytes"] <= 64 * 1024


def test_a_restart_resumes_what_was_queued_in_order(tmp_path):
    queue = make(tmp_path, memory=64 * 1024, disk=1 << 30)
    put(queue, 300)                             # on disk and in memory
    assert drain_some(queue, 3) == [0, 1, 2]    # sent
    held = [q.header(r).ts_ms for r in queue.take(10)]    # in the sender's hands, not done
    assert held == [3, 4]
    assert queue.close() == (300 - 3) * 5       # every sample not done kept
    again = make(tmp_path, memory=64 * 1024, disk=1 << 30)
    assert again.counts["segments_resumed"] >= 2
    assert again.sizes()["queue_samples"] == (300 - 3) * 5
    put(again, 5, start=300)                    # new records go after the resumed ones
    assert drain(again, 200) == list(range(3, 305))
    again.close()
    assert segment_files(tmp_path) == []


def drain_some(queue: SpillQueue, records: int) -> list[int]:
    got = queue.take(records * 5)
    queue.done()
    return [q.header(r).ts_ms for r in got]


def test_a_restart_with_a_smaller_disk_bound_drops_the_oldest(tmp_path):
    queue = make(tmp_path, memory=64 * 1024, disk=1 << 30)
    put(queue, 600)
    queue.close()
    reported = []
    again = make(tmp_path, memory=64 * 1024, disk=128 * 1024, dropped=reported.extend)
    assert again.sizes()["queue_disk_bytes"] <= 128 * 1024
    assert reported and [h.ts_ms for h in reported] == list(range(len(reported)))
    assert drain(again, 500) == list(range(len(reported), 600))


def test_a_damaged_segment_keeps_its_readable_records(tmp_path):
    queue = make(tmp_path, memory=64 * 1024, disk=1 << 30)
    put(queue, 300)
    queue.close()
    first = tmp_path / "queue" / segment_files(tmp_path)[0]
    data = first.read_bytes()
    first.write_bytes(data[:len(data) - 50])    # the last record cut short
    again = make(tmp_path, memory=64 * 1024, disk=1 << 30)
    assert again.counts["segments_damaged"] == 1
    got = drain(again, 500)
    assert got == sorted(got) and got[-1] == 299 and len(got) == 299    # one record lost


def test_one_directory_one_queue(tmp_path):
    make(tmp_path)
    with pytest.raises(OSError, match="in use by another remote_write sink"):
        make(tmp_path)


def test_leftover_partial_files_are_removed(tmp_path):
    (tmp_path / "queue").mkdir()
    (tmp_path / "queue" / "00000000000000000007.tmp").write_bytes(b"half")
    make(tmp_path)
    assert os.listdir(tmp_path / "queue") == ["lock"]
