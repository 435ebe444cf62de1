"""Replay from the lake's landing files (fleetwatch/lake/landed.py, follow.py), without Spark or
sockets: the lake's order, one copy of each message, the since-point forms, resuming from a
msg_id, which files and when the tables are read."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetwatch.lake import synth
from fleetwatch.lake.follow import Follower, NotFound, Point, check_since, follow
from fleetwatch.lake.landed import END_SLACK, Files, Reader, ends, file_name, order, parse
from support import ROOT

T0 = 1_795_000_000.0


def line(n: int, received: float, router: str = "r1", type_: str = "NOTIFY",
         uuid: str = "u1", ts: float | None = None, **body) -> str:
    msg = {"msg_id": f"m{n:04d}", "uuid": uuid, "ts": T0 + n if ts is None else ts,
           "severity": "info", "text": f"event {n}", **body}
    return json.dumps({"msg": msg, "type": type_, "uuid": uuid, "router": router,
                       "received": received}) + "\n"


def landing_file(lake: Path, name: str, lines, done: bool = False) -> Path:
    directory = lake / "landing" / ("done" if done else "")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text("".join(lines))
    return path


def stamp(t: float) -> str:
    import time
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(t))


def ids(events) -> list[str]:
    return [e.msg_id for e in events]


@pytest.fixture
def lake(tmp_path) -> Path:
    """Messages 0..29 landed at T0+n+0.5 over three files of two sinks: one moved to done/
    by compaction, one closed, one still open (its last line cut short); 5..9 landed again
    later through router r2 (a resend after a sink crash) and 12 again in the same file."""
    lake = tmp_path / "lake"
    landing_file(lake, f"{stamp(T0)}-history_a-00000001.jsonl",
                 [line(n, T0 + n + 0.5) for n in range(0, 10)], done=True)
    landing_file(lake, f"{stamp(T0 + 10)}-history_a-00000002.jsonl",
                 [line(n, T0 + n + 0.5) for n in range(10, 20)]
                 + [line(12, T0 + 19.7, dup=True, retry=1)])
    open_file = landing_file(lake, f"{stamp(T0 + 20)}-history_b-00000003.jsonl.open",
                             [line(n, T0 + n + 0.5, "r2") for n in range(20, 30)]
                             + [line(n, T0 + 29.9, "r2", dup=True, retry=1)
                                for n in range(5, 10)])
    with open(open_file, "a") as f:
        f.write(line(30, T0 + 30.5)[:25])               # a batch being written
    return lake


def test_landing_lines_in_landed_order_once_each(lake):
    events = list(follow(str(lake), T0))
    assert ids(events) == [f"m{n:04d}" for n in range(30)]
    assert [e.received for e in events] == [T0 + n + 0.5 for n in range(30)]
    assert events[7].router == "r1"                     # the first copy, not the resend
    assert events[0].type == "NOTIFY" and events[0].body["text"] == "event 0"
    assert not any(e.live for e in events)


def test_a_spooled_message_resent_late_comes_when_it_landed(tmp_path):
    lake = tmp_path / "lake"
    # m0099 was sent an hour ago (old ts) and landed after m0001
    landing_file(lake, f"{stamp(T0)}-h-00000001.jsonl",
                 [line(0, T0 + 1), line(1, T0 + 2), line(99, T0 + 3, ts=T0 - 3600),
                  line(2, T0 + 4)])
    assert ids(follow(str(lake), T0 + 1.5)) == ["m0001", "m0099", "m0002"]


def test_the_since_forms(lake):
    every = [f"m{n:04d}" for n in range(30)]
    assert ids(follow(str(lake), T0 + 12.5)) == every[12:]          # at or after
    assert ids(follow(str(lake), str(T0 + 12.5))) == every[12:]
    iso = "2026-11-18T11:06:52.5Z"                                   # T0 + 12.5
    assert ids(follow(str(lake), iso)) == every[12:]
    got = Follower(str(lake), "10s", now=lambda: T0 + 30.0).events()  # duration back
    assert ids(got) == every[20:]
    assert ids(follow(str(lake), "m0012")) == every[13:]              # after it
    assert ids(follow(str(lake), "m0007")) == every[8:]               # its first copy
    with pytest.raises(NotFound, match="'nope': neither a time nor a msg_id in the history"):
        list(follow(str(lake), "nope"))
    for bad in ("two words", "x" * 300, ""):
        with pytest.raises(ValueError, match="neither a time"):
            check_since(bad)


def test_resumed_from_the_last_msg_id_misses_nothing_repeats_nothing(lake):
    everything = ids(follow(str(lake), T0))
    first, got = follow(str(lake), T0), []
    for event in first:
        got.append(event.msg_id)
        if len(got) == 11:
            break
    first.close()
    while len(got) < len(everything):            # resumed again and again, 7 at a time
        part = follow(str(lake), got[-1])
        for event in part:
            got.append(event.msg_id)
            if len(got) % 7 == 0:
                break
        part.close()
    assert got == everything


def test_filters(tmp_path):
    lake = tmp_path / "lake"
    landing_file(lake, f"{stamp(T0)}-h-00000001.jsonl", [
        line(0, T0 + 1), line(1, T0 + 2, uuid="u2"),
        line(2, T0 + 3, type_="HEARTBEAT"), line(3, T0 + 4, type_="DEREGISTER")])
    assert ids(follow(str(lake), T0)) == ["m0000", "m0001", "m0002"]   # no table: not landed
    assert ids(follow(str(lake), T0, types=["NOTIFY"])) == ["m0000", "m0001"]
    assert ids(follow(str(lake), T0, agents=["u2"])) == ["m0001"]


def test_bad_lines_are_skipped_and_counted(tmp_path):
    lake = tmp_path / "lake"
    good = json.loads(line(0, T0 + 1))
    forged = {**good, "uuid": "intruder"}                       # body claims u1
    far = {**good, "msg": {**good["msg"], "ts": 1e15}}
    no_id = {**good, "msg": {k: v for k, v in good["msg"].items() if k != "msg_id"}}
    landing_file(lake, f"{stamp(T0)}-h-00000001.jsonl", [
        "not json\n", json.dumps(forged) + "\n", json.dumps(far) + "\n",
        json.dumps(no_id) + "\n", "[1]\n", line(1, T0 + 2)])
    follower = Follower(str(lake), T0)
    assert ids(follower.events()) == ["m0001"]
    assert follower.bad == [5]
    assert parse(b'{"type":"NOTIFY"}') is None


def test_the_reader_follows_files_by_inode(tmp_path):
    lake = tmp_path / "lake"
    path = landing_file(lake, f"{stamp(T0)}-h-00000001.jsonl.open", [line(0, T0 + 1)])
    reader = Reader(Files(str(lake)))
    assert ids(reader.read()) == ["m0000"]
    with open(path, "a") as f:
        f.write(line(1, T0 + 2) + line(2, T0 + 3)[:10])
    assert ids(reader.read()) == ["m0001"]
    with open(path, "a") as f:
        f.write(line(2, T0 + 3)[10:])
    closed = Path(str(path)[:-len(".open")])
    os.rename(path, closed)                                   # closed by its sink
    assert ids(reader.read()) == ["m0002"]
    (lake / "landing" / "done").mkdir()
    os.rename(closed, lake / "landing" / "done" / closed.name)   # compacted, moved
    assert reader.read() == []


def test_a_file_ends_where_the_next_of_its_sink_starts(tmp_path):
    names = [f"{stamp(T0)}-history_a-1.jsonl", f"{stamp(T0 + 60)}-history_a-2.jsonl",
             f"{stamp(T0 + 120)}-history_a-3.jsonl.open", f"{stamp(T0 + 30)}-b-x-1.jsonl",
             "something-else.jsonl"]
    assert file_name(names[3]).sink == "b-x" and file_name(names[3]).start == T0 + 30
    assert ends(names) == {names[0]: T0 + 60 + END_SLACK, names[1]: T0 + 120 + END_SLACK,
                           names[2]: math.inf, names[3]: math.inf, names[4]: math.inf}
    lake = tmp_path / "lake"
    for name in names[:3]:
        landing_file(lake, name, [])
    files = Files(str(lake))
    assert [Path(p).name for p in files.to_read(T0 + 100)] == names[1:3]


def test_the_tables_are_read_only_when_they_alone_may_hold_the_point(tmp_path):
    lake = tmp_path / "lake"
    files = Files(str(lake))
    old, new = f"{stamp(T0)}-h-1.jsonl", f"{stamp(T0 + 60)}-h-2.jsonl"
    landing_file(lake, new, [line(0, T0 + 61)])
    assert not files.needs_tables(0)                         # never compacted: no tables
    (lake / "tables" / "notifications").mkdir(parents=True)
    # a lake without manifests: before its oldest landing file
    assert files.needs_tables(T0) and not files.needs_tables(T0 + 70)
    settled = lake / "_compaction" / "manifest" / "settled"
    settled.mkdir(parents=True)
    (settled / "run1.json").write_text(json.dumps({"landing": [old]}))
    # old was compacted and deleted (processed: delete): its lines ended before new began
    assert files.needs_tables(T0 + 30) and files.needs_tables(T0 + 60)
    assert not files.needs_tables(T0 + 70)
    landing_file(lake, old, [], done=True)                   # processed: move keeps it
    assert not files.needs_tables(T0)


def test_point_order():
    from fleetwatch.lake.landed import Event
    e = Event("b", "NOTIFY", "u", "r", T0, {"ts": 1.0})
    old = Event("a", "NOTIFY", "u", "r", None, {"ts": T0 - 5})
    assert order(e) == (T0, 1.0, "b") and order(old) == (T0 - 5, T0 - 5, "a")
    assert Point(T0).passed(e) and not Point(T0, 1.0, "b").passed(e)
    assert Point(T0, 1.0, "a").passed(e) and Point(T0, 0.5, "c").passed(e)
    assert not Point(T0, 2.0, "a").passed(e)


def test_synthetic_landing_files_of_three_sinks_replay_merged_in_order(tmp_path):
    lake = tmp_path / "lake"
    for sink in range(3):           # each sink's lines over the same day
        synth.write_files(str(lake / "landing"), 100, name=f"sink{sink}", first=100 * sink,
                          hosts=4, seed=sink)
    events = list(follow(str(lake), 0))
    assert len(events) == 300 and events == sorted(events, key=order)
    assert {e.router for e in events} == {"r0", "r1"}


def test_replay_imports_no_spark():
    code = ("import sys, fleetwatch.lake.follow, fleetwatch.cli.tail; "
            "bad = [m for m in ('pyspark', 'py4j') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr


# ---------------------------------------------------------------- the seam, without sockets

class FakeLive:
    """The live tail as :class:`fleetwatch.lake.follow.Follower` uses it: what ``arrive``
    put in is buffered until the handover, then handed out by ``get``."""

    def __init__(self, clock):
        self.clock, self.waiting, self.bad, self.handed = clock, [], 0, False

    def __call__(self, endpoints, topics, keys):
        self.topics = topics
        return self

    def start(self, clock):
        self.started = clock()
        return self

    def arrive(self, *relayed):
        self.waiting.extend(relayed)

    def buffered(self):
        out, self.waiting = self.waiting, []
        return out

    def handover(self):
        self.handed = True

    def get(self, timeout):
        self.clock.now += timeout
        return self.waiting.pop(0) if self.waiting else None

    def close(self):
        pass


def relayed(n: int, router: str = "r1", seq: int | None = None):
    from fleetwatch import protocol
    body = json.loads(line(n, 0.0, router))["msg"]
    return protocol.Relayed("u1", router, protocol.Message("NOTIFY", body),
                            None if seq is None else (seq, seq))


class Seam:
    """A lake whose sink lands ``landing`` lines as the follower sleeps, a fake clock and a
    fake live tail."""

    def __init__(self, lake: Path, **options):
        from support.clock import Clock
        self.clock = Clock(100.0)
        self.live = FakeLive(self.clock)
        self.path = landing_file(lake, f"{stamp(T0)}-h-00000001.jsonl.open", [])
        self.later: list[list[str]] = []           # lines landed at each sleep, in turn
        self.follower = Follower(str(lake), T0, tail=["tcp://127.0.0.1:1"], settle=1.0,
                                 catch_up=5.0, clock=self.clock, now=lambda: T0 + 100,
                                 sleep=self.sleep, live_tail=self.live, **options)

    def land(self, *ns, router="r1"):
        with open(self.path, "a") as f:
            f.write("".join(line(n, T0 + n + 0.5, router) for n in ns))

    def sleep(self, seconds):
        self.clock.now += seconds
        if self.later:
            with open(self.path, "a") as f:
                f.write("".join(self.later.pop(0)))


def test_the_seam_waits_for_each_routers_live_messages_to_land(tmp_path):
    seam = Seam(tmp_path / "lake")
    seam.land(*range(0, 10))
    # live since the subscription: 8 and 9 landed already, 10 and 11 land a little later
    seam.live.arrive(*(relayed(n) for n in range(8, 12)))
    seam.later = [[], [], [line(10, T0 + 10.5), line(11, T0 + 11.5)]]
    events = seam.follower.events()
    got = [next(events) for _ in range(12)]
    assert ids(got) == [f"m{n:04d}" for n in range(12)] and not any(e.live for e in got)
    seam.live.arrive(relayed(11), relayed(12))          # 11 relayed twice near the seam
    twelve = next(events)
    assert (twelve.msg_id, twelve.live, seam.live.handed, seam.live.waiting) == \
        ("m0012", True, True, [])
    events.close()


def test_what_landed_after_the_seam_comes_live_once(tmp_path):
    seam = Seam(tmp_path / "lake")
    seam.land(*range(0, 5))
    seam.live.arrive(*(relayed(n) for n in range(4, 8)))      # 4 landed, 5..7 not yet
    got = [e for _, e in zip(range(8), seam.follower.events())]
    assert ids(got) == [f"m{n:04d}" for n in range(8)]
    assert [e.live for e in got] == [False] * 5 + [True] * 3


def test_a_router_whose_live_messages_never_land_is_named(tmp_path):
    from fleetwatch.lake.follow import LakeBehind
    seam = Seam(tmp_path / "lake")
    seam.land(0, 1)
    seam.live.arrive(relayed(1), relayed(50, "r2"))
    with pytest.raises(LakeBehind, match="router r2 after 5s"):
        next(seam.follower.events())


def test_live_losses_are_told_in_the_buffer_and_after(tmp_path):
    lost = []
    seam = Seam(tmp_path / "lake", on_lost=lost.append)
    seam.land(0, 1)
    seam.live.arrive(relayed(1, seq=5), relayed(2, seq=8))      # 6 and 7 lost
    events = seam.follower.events()
    assert ids(next(events) for _ in range(3)) == ["m0000", "m0001", "m0002"]
    assert [(x.router, x.count) for x in lost] == [("r1", 2)]
    seam.live.arrive(relayed(3, seq=9), relayed(4, seq=12))
    assert ids(next(events) for _ in range(2)) == ["m0003", "m0004"]
    assert [(x.router, x.count) for x in lost] == [("r1", 2), ("r1", 2)]
    events.close()
