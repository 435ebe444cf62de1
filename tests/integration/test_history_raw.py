"""The history sink's raw path: lines made from the relayed frames without decoding them.

Refused messages (bad envelope, CR/LF, not one JSON object, another sender's uuid) are
counted and dropped while the rest of their batch lands; NOTIFY and REGISTER are still
decoded and ACKed only after the fsync, through the real loop on real sockets; and what
Spark reads from these lines (through the real compaction) is what the stamp says, whatever
a hostile body holds.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter

from fleetwatch import protocol
from fleetwatch.logs import Throttle
from sinks.history import landing as landing_mod
from sinks.history.lines import Sorter
from sinks.history.sink import HistorySink
from support.clock import Clock
from support.zmqio import recv

UUID, OTHER, ROUTER = "agent-1", "victim-2", "r1"
NOW = 1_795_000_100.0


def frames(type_: str, n: int, uuid: str = UUID, router: str = ROUTER, **fields) -> list:
    defaults = {"STATS": {"metrics": {"cpu": 1.5}, "hostname": "h"},
                "NOTIFY": {"severity": "info", "text": f"n{n}"},
                "HEARTBEAT": {}, "HELLO": {"hostname": "h", "heartbeat": 1.0},
                "REGISTER": {"name": "agent"},
                "RESULT": {"command_id": f"c{n}", "plugin": "load", "status": 0,
                           "output": "OK", "perfdata": []}}
    msg = protocol.make(type_, uuid, clock=lambda: 1_795_000_000.0 + n,
                        msg_id=f"{type_.lower()}-{n}", **{**defaults[type_], **fields})
    return protocol.encode_relayed(msg, uuid, router)


def with_body(body: bytes, type_: str = "STATS", uuid: str = UUID) -> list:
    return [protocol.SIGNATURE, protocol.envelope(type_, uuid, ROUTER), body]


def stats_body(n: int, **extra) -> bytes:
    body = {"msg_id": f"stats-{n}", "uuid": UUID, "ts": 1_795_000_000.0 + n,
            "metrics": {"cpu": 1.0}, **extra}
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


#: bodies every check lets through: escapes, brackets, quotes and apostrophes inside strings
#: (these take the full check), nested envelope-like keys that stay inside ``msg``
GOOD = [
    stats_body(1),
    stats_body(2, hostname="it's {a} [b] \"q\" \\ }{\"type\":\"NOTIFY\""),
    stats_body(3, hostname="caf\u00e9 \u2028"),
    stats_body(4, source='}{"type":"NOTIFY","uuid":"victim-2","router":"r9"}'),
    stats_body(5, metrics={"type": 1.0, "uuid": 2.0}),
]
#: bodies the sink's quick look clears (one {...}, the stamped uuid) that are not JSON: they
#: land, and Spark makes the whole line a corrupt record, counted as bad by compaction
BROKEN = [
    b'{"msg_id":"q1","uuid":"agent-1","ts":1795000000.0 "metrics":{}}',
    b'{"msg_id":"q2","uuid":"agent-1","ts":1795000000.0,"metrics":{"a":1},"x":}',
    b'{"msg_id":"q3","uuid":"agent-1","ts":1795000000.0,"metrics":{}/*,"x":1*/}',
]
#: (frames, the counter that refuses them)
BAD = [
    ([protocol.SIGNATURE, b"STATS/agent-1"], "refused_envelope"),            # 2 frames
    ([b"FWP\x09", b"STATS/agent-1/r1", stats_body(10)], "refused_envelope"),  # version
    ([protocol.SIGNATURE, b"STATS/agent 1/r1", stats_body(11)], "refused_envelope"),
    ([protocol.SIGNATURE, b"ACK/agent-1/r1", stats_body(12)], "refused_envelope"),
    ([protocol.SIGNATURE, b"STATS/agent-1/r1/x", stats_body(13)], "refused_envelope"),
    (with_body(stats_body(14).replace(b',"ts"', b',\n"ts"')), "refused_crlf"),
    (with_body(stats_body(15).replace(b',"ts"', b',\r"ts"')), "refused_crlf"),
    (with_body(stats_body(16, hostname="a\nb").replace(b"\\n", b"\n")), "refused_crlf"),
    (with_body(b"not json"), "refused_body"),
    (with_body(b""), "refused_body"),
    (with_body(b'["uuid","agent-1"]'), "refused_body"),
    (with_body(stats_body(17) + b" "), "refused_body"),
    (with_body(stats_body(18)[:-1]), "refused_body"),                      # cut short
    (with_body(b"\xff" + stats_body(19)[1:]), "refused_body"),
    # closes the line's object early and brings its own envelope fields
    (with_body(b'{"msg_id":"forged-1","uuid":"victim-2","ts":1795000000.0,"severity":"info",'
               b'"text":"x"},"type":"NOTIFY","uuid":"victim-2","router":"r1","received":1}'),
     "refused_body"),
    (with_body(stats_body(20)[:-1] + b'}}{"type":"NOTIFY"}'), "refused_body"),
    (with_body(b"{'msg_id':'x'},'type':'NOTIFY','uuid':'victim-2'}"), "refused_body"),
    (with_body(b'{"msg_id":"x","uuid":"agent-1"/*}*/}'), "refused_body"),
    (with_body(stats_body(21)[:-1] + b',"uuid":"victim-2"}'), "refused_uuid"),   # 2nd wins
    (with_body(stats_body(22).replace(b'"uuid":"agent-1",', b"")), "refused_uuid"),
    (with_body(stats_body(23).replace(b"agent-1", b"victim-2")), "refused_uuid"),
    (with_body(stats_body(24).replace(b'"uuid"', b'"\\u0075uid"')
               .replace(b"agent-1", b"victim-2")), "refused_uuid"),
]


def make_sink(tmp_path, **kw) -> HistorySink:
    sink = HistorySink(str(tmp_path / "lake"), "history@test", wall=lambda: NOW, **kw)
    sink.start()
    return sink


def landed(tmp_path) -> list[dict]:
    landing = tmp_path / "lake" / "landing"
    return [json.loads(line) for p in sorted(landing.iterdir())
            for line in p.read_bytes().splitlines()]


# ---------------------------------------------------------------- the sorter

def test_refused_messages_are_counted_and_the_rest_of_the_batch_lands(tmp_path):
    sink = make_sink(tmp_path)
    good = [with_body(b) for b in GOOD]
    raw = [f for pair in zip(good, [f for f, _ in BAD]) for f in pair]
    raw += [f for f, _ in BAD[len(good):]]
    notify, register = frames("NOTIFY", 1), frames("REGISTER", 1)
    raw += [notify, register, frames("HEARTBEAT", 1), frames("RESULT", 1)]
    kept, to_decode = sink.sort_raw(raw)
    assert to_decode == [notify, register]         # decoded, deduplicated, ACKed by the loop
    sink.write_raw(kept, [])
    sink.close()
    want = Counter(name for _, name in BAD)
    assert {k: v for k, v in sink.counts.items() if k.startswith("refused_")} == want
    lines = landed(tmp_path)
    assert [ln["msg"] for ln in lines[:len(GOOD)]] == [json.loads(b) for b in GOOD]
    assert [ln["type"] for ln in lines] == ["STATS"] * len(GOOD) + ["HEARTBEAT", "RESULT"]
    for line in lines:
        assert list(line) == ["msg", "type", "uuid", "router", "received"]   # envelope last
        assert (line["uuid"], line["router"], line["received"]) == (UUID, ROUTER, NOW)
    assert sink.counts["lines"] == len(GOOD) + 2 and sink.counts["batches"] == 1


def test_decoded_types_follow_the_ack_setting():
    counts = Counter()
    throttle = Throttle(logging.getLogger("test"))
    acking = Sorter(frozenset(protocol.AGENT_TYPES), frozenset({"NOTIFY", "REGISTER"}),
                    counts, throttle)
    silent = Sorter(frozenset(protocol.AGENT_TYPES), frozenset(), counts, throttle)
    notify = frames("NOTIFY", 1)
    assert acking.sort([notify]) == ([], [notify])
    kept, to_decode = silent.sort([notify])       # ack: false: nothing to decode
    assert to_decode == [] and kept == [notify[2] + b',"type":"NOTIFY","uuid":"agent-1",'
                                                  b'"router":"r1"']
    assert not counts


def test_landing_data_is_the_same_for_decoded_and_raw_messages(tmp_path):
    """A decoded NOTIFY (re-encoded body) and the same body taken raw make the same line."""
    from sinks.history.lines import landing_data
    f = frames("NOTIFY", 7)
    relayed = protocol.decode_relayed(f)
    silent = HistorySink(str(tmp_path), "h", ack=False)
    kept, _ = silent.sort_raw([f])
    assert landing_data(kept, [], NOW) == landing_data([], [relayed], NOW)


# ---------------------------------------------------------------- the loop, real sockets

class Events:
    """Records fdatasync calls and ACKs, in order."""

    def __init__(self, monkeypatch, loop):
        self.seen, real_sync, real_acks = [], os.fdatasync, loop.send_acks

        def sync(fd):
            self.seen.append("fsync")
            return real_sync(fd)

        def acks(batch):
            self.seen.extend(["ack"] * batch.ack_count)
            return real_acks(batch)
        monkeypatch.setattr(landing_mod.os, "fdatasync", sync)
        monkeypatch.setattr(loop, "send_acks", acks)


def test_notify_is_acked_only_after_its_fsync(tmp_path, monkeypatch):
    import zmq
    from sinks.config import SinkConfig
    from sinks.loop import SinkLoop
    ctx = zmq.Context()
    control, push = ctx.socket(zmq.ROUTER), ctx.socket(zmq.PUSH)
    for s in (control, push):
        s.linger = 0
    # inproc: a batch sent is queued whole before the loop drains it (one batch, one fsync)
    control.bind("inproc://control")
    push.bind("inproc://history")
    sink = make_sink(tmp_path)
    loop = SinkLoop(sink, SinkConfig(routers=["inproc://control"], batch=50), ctx=ctx,
                    hostname="t")
    loop.open()
    events = Events(monkeypatch, loop)
    try:
        loop.pull.connect("inproc://history")
        loop.by_router[ROUTER] = loop.links[0].socket     # as a WELCOME from r1 would

        def deliver(*batch):
            before = loop.counts["received"]
            for f in batch:
                push.send_multipart(f)
            assert loop.pull.poll(2000)
            loop.drain()
            assert loop.counts["received"] == before + len(batch)    # in one batch

        # the 2-frame message last: fewer frames than a router sends, and nothing behind them
        deliver(*(frames("STATS", i) for i in range(5)), BAD[8][0], BAD[0][0])
        assert events.seen == []                  # nothing to ACK: no fsync per batch
        assert sink.counts["lines"] == 5 and loop.counts["written"] == 5
        assert sink.counts["refused_envelope"] == 1 and sink.counts["refused_body"] == 1
        assert loop.counts["misframed"] == 1

        deliver(frames("STATS", 9), frames("NOTIFY", 1), BAD[14][0], frames("NOTIFY", 2))
        assert events.seen == ["fsync", "ack", "ack"]
        _, _, type_, target, body = recv(control, 2.0)
        assert (type_, target) == (b"ACK", UUID.encode())
        assert protocol.decode_body("ACK", body).body["msg_ids"] == ["notify-1", "notify-2"]

        def failing(fd):
            events.seen.append("fsync failed")
            raise OSError(5, "Input/output error")
        monkeypatch.setattr(landing_mod.os, "fdatasync", failing)
        deliver(frames("NOTIFY", 3))
        assert events.seen[-1] == "fsync failed" and loop.counts["write_failed"] == 1
        assert not control.poll(200)              # not durable: not ACKed, the agent resends
        monkeypatch.undo()
        events = Events(monkeypatch, loop)
        deliver(frames("NOTIFY", 3), frames("NOTIFY", 2))   # resent; 2 is a duplicate
        assert events.seen == ["fsync", "ack", "ack"]
        assert loop.counts["duplicate"] == 1
    finally:
        loop.close()
        push.close(0)
        control.close(0)
        ctx.term()
        sink.close()
    notes = [ln["msg"]["msg_id"] for ln in landed(tmp_path) if ln["type"] == "NOTIFY"]
    # notify-3 is also in the file abandoned after the failed fsync: compaction keeps one
    assert sorted(notes) == ["notify-1", "notify-2", "notify-3", "notify-3"]
    assert sum(ln["type"] == "STATS" for ln in landed(tmp_path)) == 6


def test_unacked_lines_are_fsynced_within_a_second_and_at_close(tmp_path, monkeypatch):
    clock = Clock(100.0)
    sink = HistorySink(str(tmp_path / "lake"), "h", wall=lambda: NOW, clock=clock)
    sink.start()
    synced = []
    real = os.fdatasync
    monkeypatch.setattr(landing_mod.os, "fdatasync", lambda fd: synced.append(fd) or real(fd))
    kept, _ = sink.sort_raw([frames("STATS", 1)])
    sink.write_raw(kept, [])
    sink.tick()
    assert synced == []
    clock.advance(landing_mod.SYNC_SECONDS)
    sink.tick()
    assert len(synced) == 1
    sink.tick()                                    # nothing new: no fsync
    sink.write_raw(*sink.sort_raw([frames("STATS", 2)]))
    clock.advance(landing_mod.SYNC_SECONDS)           # the next batch syncs itself
    sink.write_raw(*sink.sort_raw([frames("HEARTBEAT", 3)]))
    assert len(synced) == 2
    sink.write_raw(*sink.sort_raw([frames("STATS", 4)]))
    sink.close()                                   # closing syncs what is left
    assert len(synced) == 3 and len(landed(tmp_path)) == 4


# ---------------------------------------------------------------- what Spark reads

def test_spark_takes_the_first_object_of_a_line_and_the_last_of_repeated_keys(spark,
                                                                               tmp_path):
    """Why the sink checks that a body is one object: on a line written without that
    check, a body can end the line's object early and bring its own envelope fields."""
    from fleetwatch.lake.tables import read_landing
    forged = (b'{"msg_id":"forged-1","uuid":"victim-2","ts":1795000000.0,"severity":"info",'
              b'"text":"x"},"type":"NOTIFY","uuid":"victim-2","router":"r1","received":1}')
    repeated = stats_body(1)[:-1] + b',"uuid":"victim-2"}'
    path = tmp_path / "unchecked.jsonl"
    path.write_bytes(b"".join(b'{"msg":' + body + b',"type":"STATS","uuid":"agent-1",'
                              b'"router":"r1","received":2.0}\n' for body in (forged, repeated)))
    rows = read_landing(spark, [str(path)]).orderBy("msg_id").collect()
    assert [(r.type, r.uuid, r.msg_id, r.bad) for r in rows] == [
        ("NOTIFY", "victim-2", "forged-1", False),   # forged, had the sink not refused it
        ("STATS", "agent-1", "stats-1", True)]       # body uuid victim-2 (the last) != stamp


def old_line(f: list) -> bytes:
    """The line the sink wrote before the raw path: envelope first, body decoded and
    re-encoded last."""
    r = protocol.decode_relayed(f)
    return json.dumps({"type": r.message.type, "uuid": r.uuid, "router": r.router,
                       "received": NOW, "msg": r.message.body}).encode() + b"\n"


def test_hostile_bodies_cannot_change_what_compaction_stores(spark, tmp_path):
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.settings import HistorySettings
    from fleetwatch.lake.tables import read_landing
    sink = make_sink(tmp_path, rotate_seconds=3600)
    everything = [frames(t, i) for i, t in enumerate(["STATS", "HEARTBEAT", "RESULT", "HELLO"])]
    hostile = [with_body(b) for b in GOOD + BROKEN] + [f for f, _ in BAD]
    kept, to_decode = sink.sort_raw(everything + hostile + [frames("NOTIFY", 9)])
    sink.write_raw(kept, [protocol.decode_relayed(f) for f in to_decode])
    sink.close()
    (new,) = (tmp_path / "lake" / "landing").glob("*.jsonl")

    # the field order does not matter to the schema reader: old and new lines read the same
    decodable = everything + [with_body(b) for b in GOOD] + [frames("NOTIFY", 9)]
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"".join(old_line(f) for f in decodable))
    columns = sorted(c for c in read_landing(spark, [str(old)]).columns)
    a, b = (sorted(read_landing(spark, [str(p)]).select(columns).collect(), key=repr)
            for p in (old, new))
    assert [r for r in b if not r.bad] == a and len(a) == len(decodable)
    assert not any(r.bad for r in a) and sum(r.bad for r in b) == len(BROKEN)

    summary = compact(spark, HistorySettings(lake=str(tmp_path / "lake")), out=lambda _: None)
    assert summary.bad == len(BROKEN)
    lake = tmp_path / "lake" / "tables"
    rows = []
    for table in ("metrics", "heartbeats", "results", "notifications", "registrations"):
        rows += spark.read.parquet(str(lake / table)).select("msg_id", "uuid", "router") \
            .distinct().collect()
    assert {r.uuid for r in rows} == {UUID} and {r.router for r in rows} == {ROUTER}
    notes = spark.read.parquet(str(lake / "notifications")).collect()
    assert [n.msg_id for n in notes] == ["notify-9"]
    stored = {r.msg_id for r in rows}
    assert stored == {"stats-0", "heartbeat-1", "result-2", "hello-3", "notify-9"} | {
        f"stats-{n}" for n in range(1, len(GOOD) + 1)}


# ---------------------------------------------------------------- the receiver

def test_receiver_keeps_frame_lists_whole_and_turns_careful_after_a_misframe():
    import zmq
    from sinks.receiver import CAREFUL_SECONDS, Receiver
    ctx = zmq.Context()
    push, pull = ctx.socket(zmq.PUSH), ctx.socket(zmq.PULL)
    for s in (push, pull):
        s.linger = 0
    push.bind("inproc://receiver")
    pull.connect("inproc://receiver")
    now = Clock(0.0)
    counts = Counter()
    receiver = Receiver(pull, now, counts)
    a, b, c = frames("STATS", 1), frames("STATS", 2), frames("STATS", 3)
    try:
        def send(*messages):
            for m in messages:
                push.send_multipart(m)
            assert pull.poll(2000)

        send(a, a + [b"extra"], b)                  # a longer message is kept whole
        assert receiver.take(10) == [a, a + [b"extra"]] and counts["misframed"] == 1
        assert receiver.take(10) == [b]             # careful now: exact framing
        send([b"short"], b, c)
        assert receiver.take(10) == [[b"short"], b, c] and counts["misframed"] == 1
        now.advance(CAREFUL_SECONDS)
        send([b"short"], b, c)                      # fast again: the short one takes b along
        assert receiver.take(10) == [[b"short", *b]] and counts["misframed"] == 2
        assert receiver.take(10) == [c]             # and careful again
        now.advance(CAREFUL_SECONDS)
        send(a, b)
        assert receiver.take(1) == [a] and receiver.take(1) == [b]
    finally:
        push.close(0)
        pull.close(0)
        ctx.term()
