"""The remote_write sender (sinks/remote_write/sender.py) against a fake receiver: what each
answer means, retries with backoff and jitter (and Retry-After), refusals dropped and
counted once, shards that keep each series in order, a stop that leaves the round queued;
the drops ledger (sinks/remote_write/drops.py) the sink's STATS carry."""

from __future__ import annotations

import threading
from collections import deque

import pytest

from sinks.remote_write import wire
from sinks.remote_write.client import Answer, SendError, retry_after
from sinks.remote_write.config import RemoteWriteSettings
from sinks.remote_write.drops import Drops
from sinks.remote_write.queue import Header, SpillQueue, record
from sinks.remote_write.sender import (REFUSED, RETRY, SENT, Backoff, Sender, shards_for,
                                       split, verdict)

pytestmark = pytest.mark.timeout(30)


class Receiver:
    """Answers from a script (then 204), keeps every request's samples (series, value)."""

    def __init__(self, answers=()):
        self.answers = deque(answers)
        self.got: list[list[tuple[str, float]]] = []
        self.lock = threading.Lock()

    def client(self, shard):
        receiver = self

        class Fake:
            def post(self, body):
                request = wire.WriteRequest.FromString(wire.decompress(body))
                with receiver.lock:
                    answer = receiver.answers.popleft() if receiver.answers else \
                        Answer(204, None, b"")
                    if isinstance(answer, Exception):
                        raise answer
                    receiver.got.append([(ts.labels[0].value, ts.samples[0].value)
                                         for ts in request.timeseries])
                return answer

            def close(self):
                pass
        return Fake()


def settings(tmp_path, **kw) -> RemoteWriteSettings:
    return RemoteWriteSettings(queue_dir=str(tmp_path / "q"), min_backoff=0.001,
                               max_backoff=0.002, batch_wait=0.0, **kw)


def queued(tmp_path, messages: int, series: int = 4, **kw):
    """A queue of ``messages`` records, each one sample of each of ``series`` series
    (value: the message's number)."""
    queue = SpillQueue(str(tmp_path / "q"), 1 << 20, 1 << 20)
    queue.open()
    for i in range(messages):
        encoded = [(hash(f"s{k}") & 0xFFFFFFFF,
                    wire.series(wire.head((("__name__", f"s{k}"),)), float(i), i))
                   for k in range(series)]
        queue.put(record("u", "STATS", i, encoded), Header("u", "STATS", i, series))
    return queue


def run(tmp_path, receiver, messages=10, series=4, flush=10.0, **kw):
    """Send a queue of ``messages`` to ``receiver``, stopping once it is empty or after
    ``flush`` seconds."""
    queue = queued(tmp_path, messages, series)
    sender = Sender(queue, settings(tmp_path, **kw), client=receiver.client,
                    rand=lambda: 0.5)
    sender.start()
    sender.stop(flush)
    return sender, queue


@pytest.mark.parametrize("status,kind", [
    (200, SENT), (204, SENT), (None, RETRY), (500, RETRY), (503, RETRY), (429, RETRY),
    (400, REFUSED), (401, REFUSED), (404, REFUSED), (413, REFUSED), (301, REFUSED)])
def test_what_an_answer_means(status, kind):
    assert verdict(status) == kind


def test_shards_follow_the_full_requests_waiting():
    assert [shards_for(n, 100, 4) for n in (0, 1, 100, 101, 250, 10_000)] == \
        [1, 1, 1, 2, 3, 4]


def test_backoff_doubles_with_jitter_and_honours_retry_after():
    low = Backoff(1.0, 8.0, rand=lambda: 0.0)
    assert [low.next() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    high = Backoff(1.0, 8.0, rand=lambda: 1.0)
    assert [high.next() for _ in range(5)] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert Backoff(1.0, 8.0, rand=lambda: 0.0).next(retry_after=30) == 30
    assert Backoff(1.0, 8.0, rand=lambda: 0.0).next(retry_after=10_000) == 300


def test_retry_after_is_seconds_or_a_date():
    assert retry_after("7", 0) == 7 and retry_after(None, 0) is None
    assert retry_after("Thu, 01 Jan 1970 00:01:40 GMT", 40.0) == 60
    assert retry_after("soon", 0) is None


def test_failures_are_retried_until_the_receiver_takes_them(tmp_path):
    receiver = Receiver([SendError("refused"), Answer(503, None, b""),
                         Answer(429, 0.001, b"slow down")])
    sender, queue = run(tmp_path, receiver)
    counts = sender.snapshot()
    assert counts["samples_sent"] == 40 and counts["retries"] == 3
    assert counts["requests"] == 3 + len(receiver.got) - 2
    assert sum(len(r) for r in receiver.got) == 40 + 2 * 40     # the two answered failures
    assert queue.sizes()["queue_samples"] == 0


def test_a_refusal_is_dropped_and_counted_once(tmp_path, caplog):
    receiver = Receiver([Answer(400, None, b"out of order sample\x1b[2J")])
    sender, queue = run(tmp_path, receiver, max_samples_per_send=8)
    counts = sender.snapshot()
    assert counts["samples_dropped_4xx"] == 8 and counts["http_400"] == 1
    assert counts["samples_sent"] == 32 and counts["retries"] == 0
    assert "out of order sample\\x1b[2J" in caplog.text and "\x1b" not in caplog.text
    assert queue.sizes()["queue_samples"] == 0


def test_shards_keep_each_series_in_order(tmp_path):
    receiver = Receiver()
    queue = queued(tmp_path, 200, series=16)
    sender = Sender(queue, settings(tmp_path, max_samples_per_send=50, max_shards=4),
                    client=receiver.client)
    sender.start()
    sender.stop(10)
    assert sender.snapshot()["samples_sent"] == 3200
    per_series: dict[str, list[float]] = {}
    for request in receiver.got:
        assert len(request) <= 50
        for name, value in request:
            per_series.setdefault(name, []).append(value)
    assert all(values == [float(i) for i in range(200)] for values in per_series.values())
    assert len(per_series) == 16 and sender.snapshot()["rounds"] < 200


def test_split_sends_a_series_to_one_shard():
    recs = [record("u", "STATS", i, [(k, f"{k}:{i}".encode()) for k in range(10)])
            for i in range(3)]
    parts = split(recs, 4)
    for shard, part in enumerate(parts):
        assert part == [f"{k}:{i}".encode() for i in range(3) for k in range(10)
                        if k % 4 == shard]


def test_a_stop_while_the_receiver_is_down_keeps_the_round_queued(tmp_path):
    receiver = Receiver([SendError("refused")] * 10_000)
    sender, queue = run(tmp_path, receiver, flush=0.2)
    assert sender.snapshot()["samples_sent"] == 0 and sender.snapshot()["retries"] > 1
    assert queue.close() == 40                  # every sample kept for the next start


def test_the_drops_ledger_gives_router_shaped_entries():
    drops = Drops()
    drops.add([Header("u1", "STATS", 1_795_000_000_500, 3),
               Header("u1", "STATS", 1_795_000_009_000, 3),
               Header("u2", "RESULT", 1_795_000_001_000, 2)])
    [chunk] = drops.chunks()
    assert chunk == [
        {"uuid": "u1", "type": "STATS", "sink": "remote_write", "count": 2,
         "first": 1_795_000_000.5, "last": 1_795_000_009.0},
        {"uuid": "u2", "type": "RESULT", "sink": "remote_write", "count": 1,
         "first": 1_795_000_001.0, "last": 1_795_000_001.0}]
    # the fields of a router's entries (fleetwatch/lake/drops.py), which compaction takes
    assert all(set(entry) == {"uuid", "type", "sink", "count", "first", "last"}
               for entry in chunk)
    drops.add([Header("u1", "STATS", 1_795_000_010_000, 3)])     # after the report was made
    drops.reported(chunk)
    assert drops.chunks() == [[{"uuid": "u1", "type": "STATS", "sink": "remote_write",
                                "count": 1, "first": 1_795_000_000.5,
                                "last": 1_795_000_010.0}]]
    small = Drops(max_entries=1)
    small.add([Header("a", "STATS", 1, 1), Header("b", "STATS", 1, 1)])
    assert len(small) == 1 and small.counts["drops_unledgered"] == 1
