"""``fleetwatch tail --since`` and the replay generator (fleetwatch/lake/follow.py) over a real
router and a real history sink landing in a lake in tmp: a FakeAgent sends NOTIFYs numbered
1, 2, 3... in a stream; a replay started in the middle of it prints every number from its
point on exactly once, in order, across the lake-to-live seam; the generator stopped and
resumed from the last msg_id it yielded misses nothing and repeats nothing. With a real
compaction (PySpark), a point older than the landing files is replayed from the tables, then
the landing files.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import zmq

from fleetwatch import protocol
from fleetwatch.display import iso
from support.fleet import landed, wait_for
from support.routerclients import FakeAgent

pytestmark = pytest.mark.timeout(180)


class Stream:
    """A FakeAgent sending NOTIFY ``n1``, ``n2``... every ``every`` seconds (a thread) until
    :meth:`stop`."""

    def __init__(self, ctx, router: dict, every: float = 0.02, ready=None):
        self.agent = FakeAgent(ctx, router["endpoints"]["agents"])
        if ready is None:
            self.agent.hello()
        else:
            ready(self.agent)
        self.sent = 0
        self.every = every
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.sent < 20_000:
            self.agent.notify(f"n{self.sent + 1}")
            self.sent += 1
            self._stop.wait(self.every)          # the stream's pace, not a synchronisation

    def stop(self) -> int:
        self._stop.set()
        self.thread.join(5)
        return self.sent


def number(body: dict) -> int:
    return int(body["text"][1:])


def notify_lines(lake: Path) -> list[dict]:
    return [ln for ln in landed(lake) if ln["type"] == "NOTIFY"]


def start(fleet, tmp_path, router: dict | None = None) -> tuple[dict, Path, Path]:
    """A router (``router``, else a new one for history), a history sink on a lake in tmp,
    and an operator config naming both."""
    router = router or fleet.router(sink_types=("history",))
    lake = tmp_path / "lake"
    sink = fleet.sink("history", [router], history={"lake": str(lake), "rotate_seconds": 2})
    wait_for(lambda: "welcomed us" in sink.log(), 15, what="the history sink connected")
    config = fleet.write("fleetwatch.yaml", {
        "routers": [router["endpoints"]["control"]], "state_url": fleet.state_url,
        "timeout": 1.0, "history": {"lake": str(lake)}})
    return router, lake, config


def point_in(lake: Path, after: int) -> tuple[float, int]:
    """A time among the landed NOTIFYs (when n``after`` landed) and the first number landed
    at or after it (its batch may hold earlier ones)."""
    lines = notify_lines(lake)
    at = next(ln["received"] for ln in lines if number(ln["msg"]) == after)
    return at, min(number(ln["msg"]) for ln in lines if ln["received"] >= at)


def test_tail_since_a_time_prints_every_number_once_across_the_seam(fleet, tmp_path, zctx):
    router, lake, config = start(fleet, tmp_path)
    stream = Stream(zctx, router)
    wait_for(lambda: len(notify_lines(lake)) >= 80, 30, what="80 NOTIFYs landed")
    at, first = point_in(lake, 40)
    tail = subprocess.Popen(
        [sys.executable, "-m", "fleetwatch", "tail", "--config", str(config), "--since",
         repr(at), "--type", "NOTIFY", "--json", "--timeout", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    printed: list[dict] = []
    reader = threading.Thread(target=lambda: printed.extend(map(json.loads, tail.stdout)),
                              daemon=True)
    reader.start()
    try:
        # well past the seam: live lines (received null) printed, and more after them
        wait_for(lambda: sum(p["received"] is None for p in printed) >= 20, 60,
                 what="20 live lines printed")
        last = stream.stop()
        wait_for(lambda: printed and number(printed[-1]["body"]) == last, 30,
                 what=f"n{last} printed")
    finally:
        stream.stop()
        tail.send_signal(signal.SIGINT)
        try:
            _, err = tail.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            tail.kill()
            _, err = tail.communicate()
    reader.join(5)
    numbers = [number(p["body"]) for p in printed]
    assert numbers == list(range(first, last + 1)), err
    from_lake = [p for p in printed if p["received"] is not None]
    assert from_lake and from_lake == printed[:len(from_lake)]       # the lake, then live
    assert all(p["received"] >= iso(at) for p in from_lake)          # ISO 8601 texts
    assert tail.returncode == 0, err


def text_number(printed: str) -> int:
    """The number of a NOTIFY as ``tail`` prints it (no --json)."""
    return int(re.search(r'"text":"n(\d+)"', printed).group(1))


def tail_lines(args: list[str]) -> tuple[subprocess.Popen, list[str], threading.Thread]:
    """``fleetwatch tail ARGS`` running, the lines it prints gathered by a thread."""
    proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", "tail", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    printed: list[str] = []
    reader = threading.Thread(target=lambda: printed.extend(ln.rstrip("\n") for ln in
                                                            proc.stdout), daemon=True)
    reader.start()
    return proc, printed, reader


def interrupted(proc: subprocess.Popen) -> str:
    """Stop a ``tail`` as a person does (SIGINT); its stderr."""
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    return err


def test_a_site_agents_messages_print_the_same_replayed_and_live(fleet, tmp_path, zctx):
    """A site router (SPEC 4.10) relays an agent's NOTIFY stream to a central router with a
    history sink. A plain ``tail`` (live only) runs first; then ``tail --since`` from a
    point in the lake: it prints every number once across its seam, each with the whole
    path ``central-1,site-1``, and each line it prints (from the lake: the messages the
    live tail printed before it started; from its own live part: the later ones) is the
    very line the live tail printed for that message."""
    from support.sites import central, site
    centre, lake, config = start(fleet, tmp_path, central(fleet, sink_types=("history",)))
    edge = site(fleet, "site-1", [centre["endpoints"]["sites"]])

    def through_the_site(agent):
        def told():
            msg = agent.hello(heartbeat=5.0)
            return msg if "history" in msg.get("durable", {}).get("NOTIFY", []) else None
        wait_for(told, 15, interval=0.2, what="the centre's durable routes told by the site")
    stream = Stream(zctx, edge, ready=through_the_site)
    common = ["--config", str(config), "--type", "NOTIFY", "--timeout", "120"]
    live = replay = None
    try:
        wait_for(lambda: len(notify_lines(lake)) >= 40, 30, what="40 NOTIFYs landed")
        assert {ln.get("path") for ln in notify_lines(lake)} == {"central-1,site-1"}
        at, first = point_in(lake, 20)
        live, heard, _ = tail_lines(common)
        wait_for(lambda: len(heard) >= 10, 30, what="the live tail printing")
        before = {text_number(ln) for ln in heard}        # relayed before the replay began
        replay, replayed, reader = tail_lines([*common, "--since", repr(at)])
        wait_for(lambda: replayed and text_number(replayed[-1]) > max(before) + 30, 60,
                 what="the replay 30 messages past the live tail's start")
        last = stream.stop()
        wait_for(lambda: replayed and text_number(replayed[-1]) == last, 30,
                 what=f"n{last} replayed")
        wait_for(lambda: heard and text_number(heard[-1]) == last, 30,
                 what=f"n{last} heard live")
    finally:
        stream.stop()
        errors = [interrupted(p) for p in (live, replay) if p is not None]
    reader.join(5)
    numbers = [text_number(ln) for ln in replayed]
    assert numbers == list(range(first, last + 1)), errors
    assert all(ln.split(" ")[3] == "central-1,site-1" for ln in replayed), replayed[:3]
    heard_by_number = {text_number(ln): ln for ln in heard}
    both = [ln for ln in replayed if text_number(ln) in heard_by_number]
    assert before <= {text_number(ln) for ln in both}            # from the lake, and later
    assert len(both) > len(before) + 20                          # live ones too
    assert both == [heard_by_number[text_number(ln)] for ln in both]
    assert live.returncode == replay.returncode == 0, errors


def test_the_generator_resumed_from_its_last_msg_id_misses_and_repeats_nothing(fleet,
                                                                               tmp_path, zctx):
    from fleetwatch.lake.follow import follow
    router, lake, _ = start(fleet, tmp_path)
    tail = [router["endpoints"]["tail"]]
    stream = Stream(zctx, router)
    wait_for(lambda: len(notify_lines(lake)) >= 60, 30, what="60 NOTIFYs landed")
    at, first = point_in(lake, 30)
    got, live = [], 0
    events = follow(str(lake), at, types=["NOTIFY"], tail=tail)
    for event in events:                  # stopped well into the live part
        got.append(event)
        live += event.live
        if live >= 10:
            break
    events.close()
    assert got[0].received is not None and got[-1].live and got[-1].received is None
    # resumed twice: once from a message it yielded live, once right away again
    for _ in range(2):
        events = follow(str(lake), got[-1].msg_id, types=["NOTIFY"], tail=tail)
        for event in events:
            got.append(event)
            if len(got) % 25 == 0:
                break
        events.close()
    last = stream.stop()
    events = follow(str(lake), got[-1].msg_id, types=["NOTIFY"], tail=tail,
                    deadline=time.monotonic() + 60)
    for event in events:
        got.append(event)
        if number(event.body) == last:
            break
    events.close()
    assert [number(e.body) for e in got] == list(range(first, last + 1))
    assert len({e.msg_id for e in got}) == len(got)


def test_a_lake_that_does_not_catch_up_is_named_not_waited_for_forever(fleet, tmp_path,
                                                                       zctx):
    """No history sink takes the router's messages: the live ones never land."""
    from fleetwatch.lake.follow import LakeBehind, follow
    router = fleet.router(sink_types=("history",))
    lake = tmp_path / "lake"
    (lake / "landing").mkdir(parents=True)
    stream = Stream(zctx, router)
    events = follow(str(lake), "1m", tail=[router["endpoints"]["tail"]], catch_up=2.0)
    try:
        with pytest.raises(LakeBehind, match="not caught up with router router-1 after 2s"):
            next(events)
    finally:
        stream.stop()
    assert stream.sent > 0


def test_tail_since_bad_input_is_one_line(fleet, tmp_path):
    router, lake, config = start(fleet, tmp_path)
    zctx = zmq.Context()
    try:
        stream = Stream(zctx, router)
        wait_for(lambda: notify_lines(lake), 30, what="a NOTIFY landed")
        stream.stop()
    finally:
        zctx.destroy(linger=0)

    def tail(*args):
        return fleet.cli("tail", "--config", str(config), "--type", "NOTIFY", "--timeout",
                         "3", *args, check=False)
    res = tail("--since", "not a time")
    assert res.returncode == 2 and res.stderr.count("\n") == 1, res.stderr
    assert "neither a time" in res.stderr
    res = tail("--since", "no-such-msg-id")
    assert res.returncode == 66 and "neither a time nor a msg_id in the history lake" \
        in res.stderr and "Traceback" not in res.stderr
    gone = fleet.write("gone.yaml", {"routers": [router["endpoints"]["control"]],
                                     "history": {"lake": str(tmp_path / "nowhere")}})
    res = fleet.cli("tail", "--config", str(gone), "--since", "15m", check=False)
    assert res.returncode == 66 and res.stderr == \
        f"fleetwatch tail: no history lake at {tmp_path / 'nowhere'} (the operator " \
        f"config's history.lake)\n"


# ---------------------------------------------------------------- from the tables

T0 = 1_795_000_000.0


def body_of(n: int) -> tuple[str, dict, dict]:
    """Message ``n``: its type, the body sent, and the body the tables give back (what they
    keep: no HELLO ``heartbeat``, no ``retry``, a STATS's numeric metrics)."""
    common = {"msg_id": f"m{n:04d}", "uuid": "u1", "ts": T0 + n}
    kind = ("NOTIFY", "STATS", "HEARTBEAT", "RESULT", "HELLO", "REGISTER")[n % 6]
    sent = {"NOTIFY": {"severity": "info", "text": f"n{n}", "retry": 0},
            "STATS": {"metrics": {"cpu": 1.5, "name": "x"}, "hostname": "h", "source": "agent"},
            "HEARTBEAT": {"interval": 2.0},
            "RESULT": {"command_id": f"s:{n}", "plugin": "load", "status": 1, "output": "W",
                       "perfdata": [{"label": "l", "value": 0.5}], "started": T0 + n - 1,
                       "duration": 0.25},
            "HELLO": {"hostname": "h", "heartbeat": 2.0, "version": "1"},
            "REGISTER": {"name": "agent", "hostname": "h",
                         "plugins": [{"name": "load", "interval": 60}]}}[kind]
    kept = {k: v for k, v in sent.items() if k not in ("retry", "heartbeat")}
    if kind == "STATS":
        kept["metrics"] = {"cpu": 1.5}
    return kind, {**common, **sent}, {**common, **kept}


def landing_line(n: int) -> str:
    kind, body, _ = body_of(n)
    return json.dumps({"msg": body, "type": kind, "uuid": "u1", "router": "r1",
                       "received": T0 + n + 0.5}) + "\n"


@pytest.mark.timeout(240)
def test_a_point_older_than_the_landing_files_is_replayed_from_the_tables(spark, tmp_path):
    """Compaction (processed: delete) took messages 0..59; 60..99 are in a landing file
    still. A replay from message 20's time reads 20..59 from the tables (their bodies as
    the tables keep them, ``received`` kept), then 60..99 from the landing file."""
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.settings import HistorySettings
    from fleetwatch.lake.follow import follow

    def stamp(t):
        return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t))
    lake = tmp_path / "lake"
    (lake / "landing").mkdir(parents=True)
    compacted = lake / "landing" / f"{stamp(T0)}-history_a-00000001.jsonl"
    compacted.write_text("".join(landing_line(n) for n in range(60)))
    compact(spark, HistorySettings(lake=str(lake), processed="delete"), out=lambda line: None)
    assert not compacted.exists()
    (lake / "landing" / f"{stamp(T0 + 60)}-history_a-00000002.jsonl.open").write_text(
        "".join(landing_line(n) for n in range(60, 100)))
    progress = []
    events = list(follow(str(lake), T0 + 20.5, spark=spark, progress=progress.append))
    assert [e.msg_id for e in events] == [f"m{n:04d}" for n in range(20, 100)]
    assert [e.received for e in events] == [T0 + n + 0.5 for n in range(20, 100)]
    assert [(e.type, e.body) for e in events] == [body_of(n)[::2] for n in range(20, 60)] + \
        [body_of(n)[:2] for n in range(60, 100)]
    assert progress == ["reading the history tables (Spark)..."]
    # resumed from a msg_id the tables hold; a time past the compacted file: no Spark
    assert [e.msg_id for e in follow(str(lake), "m0057", spark=spark)] == \
        [f"m{n:04d}" for n in range(58, 100)]
    assert [e.msg_id for e in follow(str(lake), T0 + 65, spark="never used")] == \
        [f"m{n:04d}" for n in range(65, 100)]


def test_tail_since_strict_stops_at_the_first_live_loss(fleet, tmp_path):
    """A fake router's tail skips SEQ 9 and 10 after two messages that landed: ``tail
    --since --strict`` prints what the lake holds and the live part up to the gap, then
    exits 75 naming the router."""
    from support.fakerouter import BackendFacingRouter, tailed
    agent = "a" * 32
    fake = BackendFacingRouter("fake-1", agents=[])
    lake = tmp_path / "lake"
    (lake / "landing").mkdir(parents=True)
    path = lake / "landing" / f"{time.strftime('%Y%m%dT%H%M%S')}-h-00000001.jsonl.open"

    def land(msg):
        with open(path, "a") as f:
            f.write(json.dumps({"msg": msg.body, "type": msg.type, "uuid": agent,
                                "router": "fake-1", "received": time.time()}) + "\n")
    old, _ = tailed("NOTIFY", agent, severity="info", text="old")
    land(old)
    config = fleet.write("fleetwatch.yaml", {
        "routers": [fake.control_endpoint], "state_url": fleet.state_url, "timeout": 1.0,
        "history": {"lake": str(lake)}})
    result = []
    runner = threading.Thread(target=lambda: result.append(fleet.cli(
        "tail", "--config", str(config), "--since", "1h", "--type", "NOTIFY", "--strict",
        "--timeout", "30", check=False, timeout=40)))
    runner.start()
    try:
        fake.xpub.rcvtimeo = 15000
        assert fake.xpub.recv() == b"\x01" + b"NOTIFY/"
        for n, text in ((7, "first"), (8, "second"), (11, "after a gap")):
            msg, frames = tailed("NOTIFY", agent, severity="info", text=text)
            fake.xpub.send_multipart(frames + [protocol.TAIL_SEQ.pack(n, n - 6)])
            if n < 11:
                land(msg)
    finally:
        runner.join(45)
        fake.close()
    res = result[0]
    assert res.returncode == 75, res.stderr
    assert [ln.split()[-1] for ln in res.stdout.splitlines()] == \
        ['{"severity":"info","text":"old"}', '{"severity":"info","text":"first"}',
         '{"severity":"info","text":"second"}']
    assert "fleetwatch tail: lost 2 NOTIFY messages from router fake-1" in res.stderr


def test_tail_since_without_the_history_extra_when_the_tables_are_needed(fleet, tmp_path):
    """Compaction deleted a landing file since the point: the tables must be read, and
    without PySpark that is one line, exit 69; a point after it needs no PySpark."""
    router = fleet.router(sink_types=("history",))
    lake = tmp_path / "lake"
    (lake / "tables" / "notifications").mkdir(parents=True)
    (lake / "landing").mkdir()
    settled = lake / "_compaction" / "manifest" / "settled"
    settled.mkdir(parents=True)
    gone = time.strftime("%Y%m%dT%H%M%S", time.gmtime(time.time() - 600))
    (settled / "run.json").write_text(json.dumps({"landing": [f"{gone}-h-00000001.jsonl"]}))
    now = time.strftime("%Y%m%dT%H%M%S", time.gmtime(time.time() - 300))
    (lake / "landing" / f"{now}-h-00000002.jsonl.open").write_text("")
    config = fleet.write("fleetwatch.yaml", {
        "routers": [router["endpoints"]["control"]], "history": {"lake": str(lake)}})
    fakes = tmp_path / "fakes" / "pyspark"
    fakes.mkdir(parents=True)
    (fakes / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'pyspark'\", name='pyspark')\n")
    env = {**os.environ, "PYTHONPATH": f"{fakes.parent}:{os.environ.get('PYTHONPATH', '')}"}

    def tail(since):
        return subprocess.run([sys.executable, "-m", "fleetwatch", "tail", "--config",
                               str(config), "--since", since, "--timeout", "3"],
                              capture_output=True, text=True, env=env, timeout=60)
    res = tail("1h")
    assert res.returncode == 69, res.stderr
    assert res.stderr.splitlines()[-1] == (
        "fleetwatch tail: the lake's tables must be read: fleetwatch tail --since (reading "
        "the history tables) needs the Python package 'pyspark': pip install "
        "'fleetwatch[history]'") and "Traceback" not in res.stderr
    res = tail("1m")            # after the deleted file was followed by the open one
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr
