"""Sink logic without sockets: dedupe, intake, registry and alerting writes on SQLite."""

from __future__ import annotations

import sqlite3
from collections import Counter

import pytest

from fleetwatch import protocol
from fleetwatch.config import ConfigError

pytest.importorskip("sqlalchemy")

from support.clock import Clock
from support.fakerouter import relayed  # noqa: E402
from support.zmqio import recv  # noqa: E402
from fleetwatch.optional import MissingDependency  # noqa: E402
from sinks import SINKS, UnknownSink, load_sink
from fleetwatch.store import db, reads  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402
from sinks.base import WriteError  # noqa: E402
from sinks.dedupe import Dedupe  # noqa: E402
from sinks.intake import Intake  # noqa: E402
from sinks.main import resolve_type  # noqa: E402
from sinks.registry import RegistrySink, plugin_rows  # noqa: E402

pytestmark = pytest.mark.timeout(30)

UUID = "a" * 32


def rows(path, sql):
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def decoded(frames):
    return protocol.decode_relayed(frames)


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'sub' / 'state.db'}"


# ---------------------------------------------------------------- registry of sink types

def test_every_registered_sink_loads():
    for name in SINKS:
        cls = load_sink(name)
        assert cls.type == name
        assert cls.acks <= cls.handles


def test_unknown_sink_lists_the_known_ones():
    from sinks import SINKS
    with pytest.raises(UnknownSink, match="known: " + ", ".join(sorted(SINKS))):
        load_sink("carrier-pigeon")


def test_missing_dependency_names_the_extra(monkeypatch):
    import sys
    import sinks
    for name in ("sinks.alerting.sink", "fleetwatch.store.db"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delattr(sinks, "db", raising=False)
    for name in [m for m in sys.modules if m.split(".")[0] == "sqlalchemy"]:
        monkeypatch.setitem(sys.modules, name, None)  # imports fail like a missing package
    with pytest.raises(MissingDependency, match=r"pip install 'fleetwatch\[sinks\]'"):
        load_sink("alerting")


def test_command_line_type_wins_but_must_agree():
    assert resolve_type("alerting", "", "x.yaml") == "alerting"
    assert resolve_type(None, "registry", "x.yaml") == "registry"
    with pytest.raises(ConfigError, match="x.yaml: type"):
        resolve_type("alerting", "registry", "x.yaml")
    with pytest.raises(ConfigError):
        resolve_type(None, "", "x.yaml")


# ---------------------------------------------------------------- dedupe and intake

def test_dedupe_is_a_bounded_lru():
    d = Dedupe(3)
    d.add(["a", "b", "c"])
    assert d.seen("a")          # refreshes a: b is now the oldest
    d.add(["d"])
    assert len(d) == 3
    assert "b" not in d and {"a", "c", "d"} <= {x for x in "abcd" if x in d}
    assert not d.seen("zz")
    zero = Dedupe(0)
    zero.add(["a"])
    assert not zero.seen("a")


def test_intake_filters_dedupes_and_groups_acks():
    counts = Counter()
    dedupe = Dedupe(100)
    intake = Intake(frozenset({"NOTIFY", "HEARTBEAT"}), frozenset({"NOTIFY"}), dedupe, counts)
    n1, f1 = relayed("NOTIFY", UUID, "r1", severity="error", text="one")
    n2, f2 = relayed("NOTIFY", UUID, "r2", severity="error", text="two")
    other, f3 = relayed("NOTIFY", "b" * 32, "r1", severity="info", text="three")
    _, hb = relayed("HEARTBEAT", UUID, "r1")
    _, stats = relayed("STATS", UUID, "r1", metrics={"x": 1})
    assert f1 == [protocol.SIGNATURE, f"NOTIFY/{UUID}/r1".encode(), protocol.encode_body(n1)]
    junk_body = [protocol.SIGNATURE, b"NOTIFY/u/r", b"{"]
    # n1's frames in the five-frame layout of before the ENVELOPE, and in tail order
    old_layout = [protocol.SIGNATURE, b"NOTIFY", UUID.encode(), b"r1", f1[2]]
    tail_order = [f1[1], f1[0], f1[2]]
    raw = [f1, f2, f1, f3, hb, stats, [b"junk"], junk_body, old_layout, tail_order]
    batch = intake.prepare(raw)
    assert [r.message.msg_id for r in batch.fresh] == [n1.msg_id, n2.msg_id, other.msg_id,
                                                       batch.fresh[3].message.msg_id]
    assert [(r.router, r.uuid) for r in batch.fresh] == [("r1", UUID), ("r2", UUID),
                                                         ("r1", "b" * 32), ("r1", UUID)]
    assert batch.acks == {("r1", UUID): [n1.msg_id], ("r2", UUID): [n2.msg_id],
                          ("r1", "b" * 32): [other.msg_id]}
    assert counts["duplicate"] == 1 and counts["unhandled"] == 1 and counts["bad_400"] == 4
    assert counts["received"] == len(raw)
    # Not committed: nothing is remembered, a resend is fresh again.
    assert not dedupe.seen(n1.msg_id)
    intake.committed(batch)
    again = intake.prepare([f1])
    assert again.fresh == [] and again.acks == {("r1", UUID): [n1.msg_id]}


def test_intake_refuses_a_body_uuid_that_is_not_the_stamp():
    counts = Counter()
    intake = Intake(frozenset({"NOTIFY"}), frozenset({"NOTIFY"}), Dedupe(10), counts)
    msg = protocol.make("NOTIFY", "someone-else", severity="info", text="x")
    batch = intake.prepare([protocol.encode_relayed(msg, UUID, "r1")])
    assert batch.fresh == [] and batch.acks == {} and counts["bad_403"] == 1


@pytest.mark.parametrize("envelope, body_uuid, status", [
    (b"NOTIFY/" + UUID.encode(), UUID, 400),                  # 2 parts
    (b"NOTIFY/" + UUID.encode() + b"/r1/x", UUID, 400),       # 4 parts
    (b"NOTIFY//r1", UUID, 400),                               # empty uuid
    (b"NOTIFY/" + UUID.encode() + b"/", UUID, 400),           # empty router
    (b"/" + UUID.encode() + b"/r1", UUID, 400),               # empty type
    (b"BOGUS/" + UUID.encode() + b"/r1", UUID, 400),          # unknown type
    (("NOTIFY/" + UUID + "/r\u00e9").encode(), UUID, 400),     # non-ASCII router
    (b"NOTIFY/a b/r1", "a b", 400),                           # space in uuid
    (b"NOTIFY/a/b/r1", "a/b", 400),                           # slash in uuid: 4 parts
    (b"NOTIFY/" + UUID.encode() + b"/r 1", UUID, 400),        # space in router
    (b"NOTIFY/" + UUID.encode() + b"/r1", "a b", 400),        # bad body uuid, good stamp
])
def test_intake_refuses_a_bad_envelope(envelope, body_uuid, status):
    counts = Counter()
    intake = Intake(frozenset({"NOTIFY"}), frozenset({"NOTIFY"}), Dedupe(10), counts)
    msg = protocol.make("NOTIFY", body_uuid, severity="info", text="x")
    batch = intake.prepare([[protocol.SIGNATURE, envelope, protocol.encode_body(msg)]])
    assert batch.fresh == [] and batch.acks == {}
    assert counts[f"bad_{status}"] == 1 and counts["received"] == 1


# ---------------------------------------------------------------- the loop's ACK rules

class FlakySink:
    """An alerting-like sink whose first write fails."""
    type = "alerting"
    handles = frozenset({"NOTIFY"})
    acks = frozenset({"NOTIFY"})

    def __init__(self):
        self.counts, self.written, self.fail = Counter(), [], 1

    def write(self, batch):
        if self.fail:
            self.fail -= 1
            raise WriteError("database is locked")
        self.written.extend(r.message.msg_id for r in batch)


def test_loop_acks_only_what_was_committed(tmp_path):
    import zmq
    from sinks.config import SinkConfig
    from sinks.loop import SinkLoop
    ctx = zmq.Context()
    control = ctx.socket(zmq.ROUTER)
    control.linger = 0
    control.bind("inproc://control")
    push = ctx.socket(zmq.PUSH)
    push.linger = 0
    push.bind("inproc://sink")
    sink = FlakySink()
    loop = SinkLoop(sink, SinkConfig(routers=["inproc://control"], batch=10), ctx=ctx,
                    hostname="test")
    loop.open()
    try:
        loop.pull.connect("inproc://sink")
        loop.by_router["r1"] = loop.links[0].socket     # as a WELCOME from "r1" would
        m1, f1 = relayed("NOTIFY", UUID, "r1", severity="error", text="one")
        m2, f2 = relayed("NOTIFY", UUID, "r1", severity="error", text="two")
        m3, f3 = relayed("NOTIFY", "b" * 32, "r-unknown", severity="error", text="three")

        def drain(*frames):
            for f in frames:
                push.send_multipart(f)
            assert loop.pull.poll(2000)
            while loop.pull.poll(0):
                loop.drain()

        drain(f1, f2)                                   # the write fails: no ACK at all
        assert loop.counts["write_failed"] == 2 and not control.poll(0)
        drain(f1, f2, f1, f3)                           # resent: written once each, ACKed once
        assert sink.written == [m1.msg_id, m2.msg_id, m3.msg_id]
        ident, sig, type_, target, body = recv(control, 2.0)
        ack = protocol.decode_body("ACK", body)
        assert (type_, target) == (b"ACK", UUID.encode())
        assert ack.body["msg_ids"] == [m1.msg_id, m2.msg_id] and ack.body["sink"] == "alerting"
        assert loop.counts["ack_unroutable"] == 1       # no control link to "r-unknown"
        drain(f2)                                       # a duplicate: not written, ACKed again
        assert sink.written == [m1.msg_id, m2.msg_id, m3.msg_id]
        assert protocol.decode_body("ACK", recv(control, 2.0)[-1]).body["msg_ids"] == [
            m2.msg_id]
    finally:
        loop.close()
        push.close(0)
        control.close(0)
        ctx.term()


class BatchesSink:
    """Records the size of each batch it is given."""
    type = "alerting"
    handles = frozenset({"HEARTBEAT"})
    acks = frozenset()

    def __init__(self):
        self.counts, self.batches = Counter(), []

    def write(self, batch):
        self.batches.append(len(batch))


class NotifyBatchesSink(BatchesSink):
    """A :class:`BatchesSink` that ACKs NOTIFY, as the alerting sink does."""
    handles = frozenset({"HEARTBEAT", "NOTIFY"})
    acks = frozenset({"NOTIFY"})


@pytest.fixture
def batches_loop():
    """``make(batch, batch_wait)``: a sink loop over a :class:`BatchesSink`, its PULL fed
    by the PUSH it returns with it, on inproc sockets."""
    import zmq
    from sinks.config import SinkConfig
    from sinks.loop import SinkLoop
    ctx = zmq.Context()
    made = []

    def make(batch: int, batch_wait: float, sink: BatchesSink | None = None):
        push = ctx.socket(zmq.PUSH)
        push.linger = 0
        push.bind("inproc://sink-batches")
        loop = SinkLoop(sink or BatchesSink(), SinkConfig(routers=["inproc://control-batches"],
                                                  batch=batch, batch_wait=batch_wait),
                        ctx=ctx, hostname="test")
        loop.open()
        loop.pull.connect("inproc://sink-batches")
        made.append((loop, push))
        return loop, push
    yield make
    for loop, push in made:
        loop.close()
        push.close(0)
    ctx.term()


def heartbeat_frames():
    return relayed("HEARTBEAT", UUID, "r1", interval=1.0)[1]


@pytest.mark.parametrize("batch_wait, expected", [(0.5, [3]), (0.0, [2, 1])])
def test_loop_waits_batch_wait_for_more_messages(batches_loop, batch_wait, expected):
    """Messages arriving within ``batch_wait`` join the batch (one transaction for all
    three); with 0, each wake-up writes what is there."""
    import threading
    loop, push = batches_loop(10, batch_wait)
    push.send_multipart(heartbeat_frames())
    push.send_multipart(heartbeat_frames())
    assert loop.pull.poll(2000)
    late = threading.Timer(0.1, push.send_multipart, (heartbeat_frames(),))
    late.start()
    loop.drain()                    # the third arrives 0.1 s later
    while sum(loop.sink.batches) < 3 and loop.pull.poll(2000):
        loop.drain()
    late.join()
    assert loop.sink.batches == expected and not loop.backlog


def test_a_message_the_sink_acks_ends_the_wait(batches_loop):
    """An agent's spool waits on a NOTIFY's ACK: the batch holding it is written when it
    arrives, not ``batch_wait`` later; a HEARTBEAT arriving after is in the next batch."""
    import threading
    loop, push = batches_loop(10, 5.0, NotifyBatchesSink())
    push.send_multipart(heartbeat_frames())
    assert loop.pull.poll(2000)
    notify = threading.Timer(0.1, push.send_multipart,
                             (relayed("NOTIFY", UUID, "r1", severity="error", text="x")[1],))
    late = threading.Timer(2.0, push.send_multipart, (heartbeat_frames(),))
    notify.start()
    late.start()
    loop.drain()
    notify.join()
    late.join()
    while sum(loop.sink.batches) < 3 and loop.pull.poll(2000):
        loop.drain()
    assert loop.sink.batches == [2, 1]


def test_loop_writes_a_full_batch_at_once_and_says_it_is_behind(batches_loop):
    loop, push = batches_loop(2, 5.0)
    for _ in range(3):
        push.send_multipart(heartbeat_frames())
    assert loop.pull.poll(2000)
    loop.drain()                    # two were waiting: written without waiting 5 s
    assert loop.sink.batches == [2] and loop.backlog


def test_batch_wait_is_bounded():
    from sinks.config import SinkConfig
    with pytest.raises(ValueError, match="batch_wait"):
        SinkConfig(routers=["tcp://r:1"], batch_wait=-1).validate()
    with pytest.raises(ValueError, match="batch_wait"):
        SinkConfig(routers=["tcp://r:1"], batch_wait=60).validate()


# ---------------------------------------------------------------- alerting

def test_alerting_records_each_notification_once(url, tmp_path):
    clock = Clock()
    sink = AlertingSink(db.engine(url), clock)
    sink.start()
    n1, f1 = relayed("NOTIFY", UUID, "r1", severity="error", text="disk full", source="df",
                     hostname="web-1")
    _, hb = relayed("HEARTBEAT", UUID, "r1")
    sink.write([decoded(f1), decoded(hb)])
    sink.write([decoded(f1)])            # a duplicate insert is not an error
    sink.write([decoded(protocol.encode_relayed(n1, UUID, "r2"))])
    path = tmp_path / "sub" / "state.db"
    assert rows(path, "SELECT msg_id, uuid, hostname, severity, text, source, router, "
                      "received_at FROM notifications") == [
        (n1.msg_id, UUID, "web-1", "error", "disk full", "df", "r1", clock.now)]
    assert sink.counts["notify_recorded"] == 1 and sink.counts["notify_already_recorded"] == 2
    assert sink.counts["heartbeat"] == 1
    assert rows(path, "PRAGMA journal_mode") == [("wal",)]
    sink.close()


def test_alerting_write_failure_is_a_write_error(url, tmp_path):
    sink = AlertingSink(db.engine(url))
    sink.start()
    lock = sqlite3.connect(tmp_path / "sub" / "state.db", timeout=0)
    lock.execute("BEGIN IMMEDIATE")
    db.SQLITE_BUSY_MS, saved = 50, db.SQLITE_BUSY_MS
    try:
        quick = AlertingSink(db.engine(url))
        _, f1 = relayed("NOTIFY", UUID, "r1", severity="error", text="x")
        with pytest.raises(WriteError, match="alerting write failed"):
            quick.write([decoded(f1)])
    finally:
        db.SQLITE_BUSY_MS = saved
        lock.rollback()
        lock.close()
    sink.close()


# ---------------------------------------------------------------- registry

def test_registry_upserts_agents_routers_and_plugins(url, tmp_path):
    clock = Clock()
    sink = RegistrySink(db.engine(url), clock)
    sink.start()
    _, hello = relayed("HELLO", UUID, "r1", hostname="web-1", heartbeat=2.0, version="0.1.0")
    _, reg = relayed("REGISTER", UUID, "r1", name="agent",
                     plugins=["check_disk", {"name": "check_load", "interval": 60}, 42])
    sink.write([decoded(hello), decoded(reg)])
    first = clock.now
    clock.now += 10
    _, reg2 = relayed("REGISTER", UUID, "r2", name="agent", plugins=["check_load"])
    _, reg_proc = relayed("REGISTER", UUID, "r2", name="backup", plugins=["check_backup"])
    sink.write([decoded(reg2), decoded(reg_proc), decoded(reg_proc)])
    path = tmp_path / "sub" / "state.db"
    assert rows(path, "SELECT uuid, hostname, version, first_seen, last_seen FROM agents") == [
        (UUID, "web-1", "0.1.0", first, clock.now)]
    assert rows(path, "SELECT router, last_seen FROM agent_routers ORDER BY router") == [
        ("r1", first), ("r2", clock.now)]
    assert rows(path, "SELECT source, name, spec FROM plugins ORDER BY source, name") == [
        ("agent", "check_load", "{}"), ("backup", "check_backup", "{}")]
    assert sink.counts["bad_plugin"] == 1 and sink.counts["register"] == 4
    sink.close()


def test_register_before_hello_creates_the_agent(url, tmp_path):
    sink = RegistrySink(db.engine(url), Clock())
    sink.start()
    _, reg = relayed("REGISTER", UUID, "r1", name="agent")
    sink.write([decoded(reg)])
    _, hello = relayed("HELLO", UUID, "r1", hostname="late", heartbeat=1.0)
    sink.write([decoded(hello)])
    assert rows(tmp_path / "sub" / "state.db", "SELECT hostname FROM agents") == [("late",)]


def test_agent_register_carries_hostname_when_the_hello_was_missed(url, tmp_path):
    """A registry started after the agent never sees its HELLO; the REGISTER is enough."""
    sink = RegistrySink(db.engine(url), Clock())
    sink.start()
    _, reg = relayed("REGISTER", UUID, "r1", name="agent", hostname="web-2", version="0.1.0")
    _, proc = relayed("REGISTER", UUID, "r1", name="backup", plugins=["check_backup"])
    sink.write([decoded(reg), decoded(proc)])
    assert rows(tmp_path / "sub" / "state.db", "SELECT hostname, version FROM agents") == [
        ("web-2", "0.1.0")]


def test_a_batch_is_written_as_its_messages_one_by_one_in_a_few_statements(tmp_path):
    """The registry gathers a batch's writes (sinks.registry.Writes): the tables end as
    they would after each message alone, a DEREGISTER in the middle included, and 200
    agents' HELLOs and REGISTERs cost a handful of statements, not a few hundred."""
    from sqlalchemy import event
    others = [f"{n:032x}" for n in range(1, 4)]
    t0 = 1000.0
    batch = [
        relayed("HELLO", UUID, "r1", hostname="web-1", heartbeat=1.0, version="1.0")[1],
        relayed("REGISTER", UUID, "r1", name="agent", plugins=["a", "b"])[1],
        relayed("HELLO", others[0], "r1", hostname="db-1", heartbeat=1.0,
                parents=["web-1"])[1],
        relayed("REGISTER", others[0], "r2", name="agent", plugins=["x"], hostname="db-1b")[1],
        relayed("REGISTER", others[0], "r2", name="backup", plugins=["y"])[1],
        relayed("REGISTER", UUID, "r1", name="agent", plugins=["c"])[1],
        relayed("HELLO", others[1], "r1", hostname="gone-1", heartbeat=1.0)[1],
        relayed("DEREGISTER", others[1], "r1", reason="stop")[1],
        relayed("HELLO", others[2], "r2", hostname="late-1", heartbeat=2.0, ephemeral=True)[1],
    ]
    tables = ("SELECT uuid, hostname, version, parents, ephemeral, gone IS NULL FROM agents "
              "ORDER BY uuid", "SELECT uuid, router FROM agent_routers ORDER BY uuid, router",
              "SELECT uuid, source, name FROM plugins ORDER BY uuid, source, name")

    def written(name, batches):
        clock = Clock(t0)
        sink = RegistrySink(db.engine(f"sqlite:///{tmp_path / name / 'state.db'}"), clock)
        sink.start()
        for frames in batches:
            sink.write([decoded(f) for f in frames])
        sink.close()
        return [rows(tmp_path / name / "state.db", sql) for sql in tables]

    together = written("together", [batch])
    assert together == written("alone", [[f] for f in batch])
    assert set(together[2]) == {(UUID, "agent", "c"), (others[0], "agent", "x"),
                                (others[0], "backup", "y")}
    assert {(r[0], r[5]) for r in together[0]} == {
        (UUID, 1), (others[0], 1), (others[1], 0), (others[2], 1)}

    engine = db.engine(f"sqlite:///{tmp_path / 'many' / 'state.db'}")
    sink = RegistrySink(engine, Clock(t0))
    sink.start()
    statements = []
    event.listen(engine, "before_cursor_execute",
                 lambda *args, **kw: statements.append(args[2]))
    uuids = [f"{n:032x}" for n in range(100, 300)]
    sink.write([decoded(relayed(kind, u, "r1", hostname=u, heartbeat=1.0, name="agent",
                                plugins=["p1", "p2"])[1])
                for u in uuids for kind in ("HELLO", "REGISTER")])
    sink.close()
    assert len(statements) <= 8, statements
    assert rows(tmp_path / "many" / "state.db", "SELECT count(*) FROM plugins") == [(400,)]


def test_plugin_rows_keep_the_spec():
    got, bad = plugin_rows(UUID, "agent", [{"name": "p", "interval": 5}, {"nope": 1}, ""], 1.0)
    assert got == [{"uuid": UUID, "source": "agent", "name": "p", "spec": {"interval": 5},
                    "declared_at": 1.0}]
    assert bad == 2


# ---------------------------------------------------------------- readers

def test_readers_tolerate_a_fresh_database(url, tmp_path):
    assert not db.exists(url)
    eng = db.engine(url)
    with eng.connect() as conn:
        assert reads.agents(conn) == [] and reads.alerts(conn) == []


def test_read_alerts_fills_hostname_from_the_registry(url):
    clock = Clock()
    eng = db.engine(url)
    alerting, registry = AlertingSink(eng, clock), RegistrySink(eng, clock)
    alerting.start()
    registry.start()
    _, hello = relayed("HELLO", UUID, "r1", hostname="web-1", heartbeat=1.0)
    registry.write([decoded(hello)])
    ids = []
    for i, severity in enumerate(["info", "error", "critical"]):
        clock.now += 1
        msg, frames = relayed("NOTIFY", UUID, "r1", severity=severity, text=f"n{i}")
        ids.append(msg.msg_id)
        alerting.write([decoded(frames)])
    with eng.connect() as conn:
        latest = reads.alerts(conn, limit=2)
        serious = reads.alerts(conn, severities=["error", "critical"])
    assert [a["msg_id"] for a in latest] == [ids[2], ids[1]]
    assert {a["hostname"] for a in latest} == {"web-1"}
    assert [a["severity"] for a in serious] == ["critical", "error"]


# ---------------------------------------------------------------- checks (alerting, RESULT)

def result(uuid=UUID, router="r1", ts=None, **fields):
    body = {"command_id": "cli:" + "0" * 24, "plugin": "load", "status": 0, "output": "OK",
            **fields}
    clock = (lambda: ts) if ts is not None else Clock()
    msg = protocol.make("RESULT", uuid, clock=clock, **body)
    return decoded(protocol.encode_relayed(msg, uuid, router))


def checks_of(eng):
    with eng.connect() as conn:
        return {(r["uuid"], r["plugin"]): r for r in reads.checks(conn)}


def record_results(url):
    """Write RESULTs in a hostile order; return the sink and what the table holds."""
    eng = db.engine(url)
    sink = AlertingSink(eng, Clock())
    sink.start()
    perf = [{"label": "load1", "value": 0.5, "uom": "", "warn": "4", "crit": "8", "min": 0.0,
             "max": None}]
    new = result(started=200.0, status=2, output="CRITICAL - load 9", long_output="l2\nl3",
                 perfdata=perf, command_id="s:" + "a" * 24, slot=180.0, duration=0.25)
    old = result(started=100.0, status=0, output="OK - load 0.1", command_id="s:" + "b" * 24)
    sink.write([new])
    sink.write([old])                        # late: older than the stored one
    sink.write([new, new])                   # again (another router, a repeated command id)
    # several runs in one batch: the newest wins, whatever the order
    sink.write([result(plugin="disk", started=5.0, output="second"),
                result(plugin="disk", started=4.0, output="first")])
    # no started: ordered by ts; a bad plugin name is counted, not written
    sink.write([result(plugin="users", ts=50.0, output="ts 50"),
                result(plugin="x" * 256, output="bad")])
    sink.write([result(plugin="users", ts=40.0, output="ts 40")])
    # the names the sinks judge themselves: no agent speaks for them (SPEC 4.5)
    sink.write([result(plugin="rule:disk_full", output="OK"),
                result(plugin="prom:DiskFull", output="OK")])
    return sink, checks_of(eng)


def test_checks_keep_the_newest_result_per_agent_and_plugin(url):
    sink, got = record_results(url)
    assert set(got) == {(UUID, "load"), (UUID, "disk"), (UUID, "users")}
    load = got[(UUID, "load")]
    assert {k: load[k] for k in ("status", "output", "long_output", "command_id", "slot",
                                 "started", "duration", "router")} == {
        "status": 2, "output": "CRITICAL - load 9", "long_output": "l2\nl3",
        "command_id": "s:" + "a" * 24, "slot": 180.0, "started": 200.0, "duration": 0.25,
        "router": "r1"}
    assert load["perfdata"][0]["label"] == "load1" and load["perfdata"][0]["max"] is None
    assert got[(UUID, "disk")]["output"] == "second"
    assert got[(UUID, "users")]["output"] == "ts 50" and got[(UUID, "users")]["started"] is None
    assert sink.counts["result"] == 11 and sink.counts["result_bad"] == 1
    assert sink.counts["result_reserved"] == 2
    # stored: new, the newer disk, users at 50; not newer: old, new twice, the older disk
    # (its batch twin won), users at 40
    assert sink.counts["result_recorded"] == 3 and sink.counts["result_not_newer"] == 5
    sink.close()


def test_results_are_not_acked():
    assert "RESULT" in AlertingSink.handles and "RESULT" not in AlertingSink.acks


def test_checks_on_postgresql(pg_url):
    """The same statement on PostgreSQL (ON CONFLICT ... WHERE, JSON perfdata)."""
    pytest.importorskip("psycopg")
    sink, got = record_results(pg_url)
    assert got[(UUID, "load")]["output"] == "CRITICAL - load 9"
    assert got[(UUID, "load")]["perfdata"][0]["warn"] == "4"
    assert got[(UUID, "disk")]["output"] == "second" and got[(UUID, "users")]["output"] == "ts 50"
    sink.close()


def test_checks_with_the_portable_fallback(url, monkeypatch):
    """A database without ON CONFLICT takes the select-then-write path, with the same order."""
    eng = db.engine(url)
    sink = AlertingSink(eng, Clock())
    sink.start()
    real = db.record_checks

    def portable(conn, rows):
        monkeypatch.setattr(conn.dialect, "name", "other")
        try:
            return real(conn, rows)
        finally:
            monkeypatch.setattr(conn.dialect, "name", "sqlite")
    monkeypatch.setattr(db, "record_checks", portable)
    sink.write([result(started=2.0, output="new")])
    sink.write([result(started=1.0, output="old"), result(plugin="p2", ts=9.0, output="p2")])
    got = checks_of(eng)
    assert got[(UUID, "load")]["output"] == "new" and got[(UUID, "p2")]["output"] == "p2"
    assert sink.counts["result_recorded"] == 2 and sink.counts["result_not_newer"] == 1
    sink.close()


def test_a_fast_clock_hides_no_result_and_its_skew_is_kept_while_it_lasts(url):
    """An agent two hours fast, then started again with its clock right (another ``boot``):
    its CRITICAL is recorded (it was "not newer" than the fast OK); a late result of that
    run is not. The skew is counted, and kept for ``status`` while it lasts."""
    clock = Clock()
    sink = AlertingSink(db.engine(url), clock)
    sink.start()
    fast = clock.now + 7200

    def beat(ts):
        msg = protocol.make("HEARTBEAT", UUID, clock=lambda: ts, interval=1.0)
        return decoded(protocol.encode_relayed(msg, UUID, "r1"))

    def skew():
        from sqlalchemy import text
        with sink.engine.connect() as conn:
            return conn.execute(text("SELECT clock_skew FROM host_state")).scalar_one()
    sink.write([beat(fast), result(ts=fast, started=fast, status=0, output="OK", boot="b1",
                                   seq=1)])
    assert skew() == 7200 and sink.counts["clock_skewed"] == 2
    clock.advance(5)
    sink.write([beat(clock.now), result(ts=clock.now, started=clock.now, status=2,
                                        output="CRITICAL", boot="b2", seq=2)])
    sink.write([result(ts=clock.now, started=clock.now, status=0, output="late", boot="b2",
                       seq=1)])                           # late: an earlier run of b2
    assert checks_of(sink.engine)[(UUID, "load")]["output"] == "CRITICAL"
    assert skew() is None and sink.counts["clock_skewed"] == 2        # no more
    assert sink.counts["result_recorded"] == 2 and sink.counts["result_not_newer"] == 1
    sink.close()


def test_sinks_opening_one_new_sqlite_file_at_once_all_start(tmp_path):
    """Several writers creating their tables in one new SQLite file at the same moment: the
    switch to WAL could refuse one at once ("database is locked") before the busy timeout
    applied (seen as a sink exiting at start in the two-sinks test)."""
    import multiprocessing as mp

    from support.sqliterace import create_each_at_once
    ctx = mp.get_context("spawn")  # not fork: this process runs threads (Spark's, servers')
    urls = [f"sqlite:///{tmp_path / f'state-{attempt}.db'}" for attempt in range(40)]
    start = ctx.Barrier(4)          # before the fix: about one attempt in ten failed
    procs = [ctx.Process(target=create_each_at_once, args=(urls, owner, start))
             for owner in ("alerting", "registry", "alerting", "registry")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0] * 4
