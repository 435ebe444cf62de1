"""The history sink: landing files (rotation, fsync before ACK, crash recovery), and a real
fleet whose history sink is killed with SIGKILL mid-stream."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from support.clock import Clock
from support.fleet import intake_path, landed, wait_for, wait_intake
from fleetwatch import protocol
from fleetwatch.config import ConfigError, build
from sinks.base import WriteError
from sinks.config import SinkConfig
from sinks.history import landing as landing_mod
from sinks.history.landing import recover
from sinks.history.sink import HistorySink


def relayed(type_: str, n: int, uuid: str = "agent-1", router: str = "r1",
            **fields) -> protocol.Relayed:
    defaults = {"STATS": {"metrics": {"cpu": 1.5}, "hostname": "h"},
                "NOTIFY": {"severity": "info", "text": f"n{n}"},
                "HEARTBEAT": {}, "HELLO": {"hostname": "h", "heartbeat": 1.0},
                "REGISTER": {"name": "agent", "plugins": [{"name": "load", "interval": 60,
                                                           "timeout": 10}]},
                "RESULT": {"command_id": f"c{n}", "plugin": "load", "status": 0,
                           "output": "OK", "perfdata": []}}
    msg = protocol.make(type_, uuid, clock=lambda: 1_795_000_000.0 + n,
                        msg_id=f"{type_.lower()}-{n}", **{**defaults[type_], **fields})
    return protocol.Relayed(uuid, router, msg)


def files(directory: Path, suffix: str = ".jsonl") -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(suffix))


def read_lines(paths) -> list[dict]:
    return [json.loads(line) for p in paths for line in Path(p).read_text().splitlines()]


def make_sink(tmp_path, clock=None, **kw) -> HistorySink:
    sink = HistorySink(str(tmp_path / "lake"), "history@test", wall=lambda: 1_795_000_100.0,
                       clock=clock or Clock(1000.0), **kw)
    sink.start()
    return sink


# ---------------------------------------------------------------- landing files

def test_every_type_lands_as_one_line_with_envelope(tmp_path):
    sink = make_sink(tmp_path)
    # every agent type but DEREGISTER (routed to the registry and alerting only)
    assert sink.handles == frozenset(protocol.AGENT_TYPES) - {"DEREGISTER"}
    assert sink.acks == {"NOTIFY", "REGISTER"}
    batch = [relayed(t, i) for i, t in enumerate(sorted(sink.handles))]
    sink.write(batch)
    sink.close()
    (path,) = files(tmp_path / "lake" / "landing")
    assert path.name.startswith("20261118T110820-") and "history_test" in path.name
    lines = read_lines([path])
    assert [ln["type"] for ln in lines] == sorted(sink.handles)
    for line, r in zip(lines, batch):
        assert set(line) == {"type", "uuid", "router", "received", "msg"}
        assert (line["uuid"], line["router"], line["received"]) == ("agent-1", "r1",
                                                                    1_795_000_100.0)
        assert line["msg"] == r.message.body
    assert sink.counts["lines"] == 6 and sink.counts["files_closed"] == 1


def test_one_write_and_one_fsync_per_batch(tmp_path, monkeypatch):
    calls = {"write": 0, "fdatasync": 0, "open": 0}
    for name in calls:
        real = getattr(os, name)

        def counted(*a, _real=real, _name=name):
            calls[_name] += 1
            return _real(*a)
        monkeypatch.setattr(landing_mod.os, name, counted)
    sink = make_sink(tmp_path)
    for b in range(3):
        sink.write([relayed("STATS", b * 100 + i) for i in range(100)])
    assert calls["write"] == 3 and calls["fdatasync"] == 3
    assert calls["open"] == 2        # the landing file, and its directory once (fsync)


def test_rotation_by_size_and_by_age(tmp_path):
    clock = Clock(1000.0)
    sink = make_sink(tmp_path, clock, rotate_bytes=4096, rotate_seconds=60)
    landing = tmp_path / "lake" / "landing"
    sink.write([relayed("STATS", i) for i in range(40)])     # > 4096 bytes: closed at once
    assert len(files(landing)) == 1 and not files(landing, ".open")
    sink.write([relayed("STATS", 100)])
    assert len(files(landing, ".open")) == 1
    clock.now += 59
    sink.tick()
    assert len(files(landing, ".open")) == 1
    clock.now += 1
    sink.tick()                                             # 60 s after its first line
    assert len(files(landing)) == 2 and not files(landing, ".open")
    sink.tick()
    sink.close()                                            # nothing open: no empty file
    assert len(files(landing)) == 2
    assert len(read_lines(files(landing))) == 41
    assert sink.counts["files_closed"] == 2


def test_recover_closes_dead_writers_files_only(tmp_path):
    landing = tmp_path / "lake" / "landing"
    live = make_sink(tmp_path)
    live.write([relayed("NOTIFY", 1)])
    dead = landing / "20261119T000000-dead-00000000.jsonl.open"
    dead.write_text('{"type":"NOTIFY"}\n{"type":"NOT')       # cut short by a crash
    empty = landing / "20261119T000000-dead-11111111.jsonl.open"
    empty.write_text("")
    closed = recover(str(landing))
    assert closed == [str(dead)[:-len(".open")]]
    assert not empty.exists() and not dead.exists()
    assert Path(live.landing.path).exists()                 # locked by a live writer
    assert Path(closed[0]).read_text().endswith('{"type":"NOT')
    # a sink starting on the lake closes them the same way, and counts them
    dead.write_text('{"type":"STATS"}\n')
    other = HistorySink(str(tmp_path / "lake"), "other")
    other.start()
    assert other.counts["files_recovered"] == 1
    live.close()


def test_a_failed_write_is_cut_off_and_not_acked(tmp_path, monkeypatch):
    sink = make_sink(tmp_path)
    sink.write([relayed("NOTIFY", 1)])
    real = os.write

    def half_then_fail(fd, data):
        real(fd, bytes(data[:len(data) // 2]))
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(landing_mod.os, "write", half_then_fail)
    with pytest.raises(WriteError, match="No space left"):
        sink.write([relayed("NOTIFY", 2), relayed("NOTIFY", 3)])
    monkeypatch.setattr(landing_mod.os, "write", real)
    sink.write([relayed("NOTIFY", 4)])
    sink.close()
    lines = read_lines(files(tmp_path / "lake" / "landing"))
    assert [ln["msg"]["msg_id"] for ln in lines] == ["notify-1", "notify-4"]


def test_a_failed_fsync_abandons_the_file(tmp_path, monkeypatch):
    sink = make_sink(tmp_path)
    sink.write([relayed("NOTIFY", 1)])
    first = sink.landing.path

    def fail(fd):
        raise OSError(5, "Input/output error")
    monkeypatch.setattr(landing_mod.os, "fdatasync", fail)
    with pytest.raises(WriteError, match="Input/output error"):
        sink.write([relayed("NOTIFY", 2)])
    monkeypatch.undo()
    assert sink.landing.fd is None and Path(first[:-len(".open")]).exists()
    sink.write([relayed("NOTIFY", 3)])
    assert sink.landing.path != first
    sink.close()


def test_unusable_lake_is_a_clear_error_at_start(tmp_path):
    (tmp_path / "file").write_text("")
    sink = HistorySink(str(tmp_path / "file"), "h")
    with pytest.raises(WriteError, match="history lake .*file"):
        sink.start()


def test_config_section():
    cfg = build(SinkConfig, {"routers": ["tcp://r:1"], "history": {
        "lake": "/l", "rotate_bytes": 1 << 20, "rotate_seconds": 5}})
    sink = HistorySink.from_config(cfg)
    assert (sink.lake, sink.landing.rotate_bytes, sink.landing.rotate_seconds) == (
        "/l", 1 << 20, 5.0)
    assert sink.acks == {"NOTIFY", "REGISTER"}          # agents choose whether to count them
    no_acks = build(SinkConfig, {"routers": ["tcp://r:1"], "history": {"ack": False}})
    assert HistorySink.from_config(no_acks).acks == frozenset()
    with pytest.raises(ConfigError, match="history.rotate_seconds"):
        build(SinkConfig, {"routers": ["tcp://r:1"], "history": {"rotate_seconds": 0}})
    with pytest.raises(ConfigError, match="history.rotat"):
        build(SinkConfig, {"routers": ["tcp://r:1"], "history": {"rotate_every": 1}})


def test_sink_and_operator_config_never_import_pyspark():
    code = ("import sys, sinks, sinks.history, sinks.history.sink, fleetwatch.cli.operator, "
            "fleetwatch.cli.history, sinks.main; sinks.load_sink('history'); "
            "from sinks.history.sink import HistorySink; import fleetwatch.lake.settings; "
            "bad = [m for m in ('pyspark', 'py4j') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parents[2])
    assert res.returncode == 0, res.stdout + res.stderr


# ---------------------------------------------------------------- a real fleet

def spooled(state_dir: Path) -> int:
    db = sqlite3.connect(f"file:{state_dir / 'spool.db'}?mode=ro", uri=True)
    try:
        return db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
    finally:
        db.close()


def test_sink_killed_mid_stream_every_acked_notify_lands_and_compacts_once(fleet, spark,
                                                                           tmp_path):
    from agent.client import Client
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.settings import HistorySettings

    # the only sink: the fleet makes NOTIFY and REGISTER durable for it alone (SPEC 4.1)
    router = fleet.router(durable={"NOTIFY": ["history"], "REGISTER": ["history"]})
    lake = tmp_path / "lake"
    history = {"lake": str(lake), "rotate_seconds": 0.5, "ack": True}
    sink = fleet.sink("history", [router], history=history, batch=20)
    wait_for(lambda: "welcomed us" in sink.log(), 15, what="the sink connected")
    # started after the sink: its HELLO lands
    agent = fleet.agent([router], spool={"ack_timeout": 0.5, "max_backoff": 2.0})
    cfg = fleet.root / "agent.yaml"
    total, sent, errors = 300, [], []

    def send():
        try:
            with Client(config_path=str(cfg), timeout=10) as fw:
                for i in range(total):
                    sent.append(fw.notify(f"event {i}", severity="info", source="test"))
        except Exception as e:      # reported by the main thread
            errors.append(e)

    wait_intake(intake_path(fleet))
    sender = threading.Thread(target=send)
    sender.start()
    wait_for(lambda: sum(ln["type"] == "NOTIFY" for ln in landed(lake)) >= 60, 30,
             what="60 NOTIFYs landed")
    sink.kill()                                       # SIGKILL mid-stream
    assert len(sent) < total, "the stream ended before the kill"
    sink = fleet.sink("history", [router], history=history, batch=20)
    sender.join(60)
    assert not errors and len(sent) == total
    wait_for(lambda: spooled(fleet.root / "agent-state") == 0, 60,
             what="every NOTIFY acked (the agent's spool empty)")
    lines = landed(lake)
    ids = [ln["msg"]["msg_id"] for ln in lines if ln["type"] == "NOTIFY"]
    assert set(sent) <= set(ids)                      # every ACKed NOTIFY, once or more
    # heartbeats and stats land at their own pace (landing files close after rotate_seconds)
    wait_for(lambda: {ln["type"] for ln in landed(lake)} >= {
        "HELLO", "REGISTER", "STATS", "HEARTBEAT", "NOTIFY"}, 30, what="every type landed")
    sink.stop()
    assert sink.popen.returncode == 0
    agent.stop()

    summary = compact(spark, HistorySettings(lake=str(lake)), out=lambda line: None)
    assert summary.files >= 2
    got = spark.read.parquet(str(lake / "tables" / "notifications")).select("msg_id")
    got = sorted(r.msg_id for r in got.collect())
    assert got == sorted(sent)                        # exactly once
    assert not list((lake / "landing").glob("*.jsonl*"))
