"""``fleetwatch history replay --to graphite``: the same lines the live graphite sink sends,
and a real carbon-cache whose whisper files end up holding the lake's historical points."""

import json
from collections import Counter

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
# the first test also waits for the shared Spark session and the generated lake
pytestmark = pytest.mark.timeout(240)

from fleetwatch import cli, protocol  # noqa: E402
from fleetwatch.cli.demo.carbon import Carbon, read_points  # noqa: E402
from fleetwatch.cli.demo.ports import free_port  # noqa: E402
from support.clock import Clock  # noqa: E402
from support.lakegen import DAY, rows  # noqa: E402
from sinks.graphite.config import GraphiteSettings  # noqa: E402
from sinks.graphite.sink import GraphiteSink  # noqa: E402
from fleetwatch.lake.query import History  # noqa: E402
from fleetwatch.lake.replay import CarbonGone, Replay, Target  # noqa: E402


@pytest.fixture(scope="module")
def h(spark, history_lake):
    return History(spark, str(history_lake.path))


class Capture:
    """A ``send`` that keeps the lines instead of talking to carbon."""

    def __init__(self):
        self.lines, self.batches = [], 0

    def __call__(self, data, host, port, timeout):
        self.batches += 1
        self.lines += data.splitlines(keepends=True)


def replayed(h, target=Target(), **kw) -> tuple[list[bytes], Counter]:
    capture = Capture()
    counts = Replay(h, target, out=lambda line: None, send=capture).run(**kw)
    return capture.lines, counts


def live_sink_lines(base: float, tags: bool) -> list[bytes]:
    """What the graphite sink sends for the lake's messages, fed to it in time order."""
    tables = rows(base)
    relayed = []
    for r in tables["registrations"]:
        if r["kind"] == "HELLO":
            relayed.append(("HELLO", r, {"hostname": r["hostname"], "heartbeat": 2}))
    for r in tables["metrics"]:
        body = {"metrics": {r["metric"]: r["value"]}, "hostname": r["hostname"],
                "source": r["source"]}
        relayed.append(("STATS", r, {k: v for k, v in body.items() if v is not None}))
    for r in tables["results"]:
        body = {"command_id": r["command_id"], "plugin": r["plugin"], "status": r["status"],
                "output": r["output"], "started": r["started"],
                "perfdata": json.loads(r["perfdata"]) if r["perfdata"] else None}
        relayed.append(("RESULT", r, {k: v for k, v in body.items() if v is not None}))
    relayed.sort(key=lambda item: item[1]["ts"])
    sink = GraphiteSink(GraphiteSettings(prefix="fleet", tags=tags))
    lines = []
    for type_, r, fields in relayed:
        msg = protocol.make(type_, r["uuid"], clock=lambda: r["ts"].timestamp(), **fields)
        # as the lake's row was stamped: a router's own STATS with its own id (STATS/ID/ID,
        # SPEC 4.3), db1's that claims source router through router-a (an agent's)
        lines += sink.encode(sink.points(protocol.Relayed(r["uuid"], r["router"], msg)))
    return lines


@pytest.mark.parametrize("tags", [False, True])
def test_lines_are_the_live_sinks(h, history_lake, tags):
    lines, counts = replayed(h, Target(prefix="fleet", tags=tags, batch=7))
    assert sorted(lines) == sorted(live_sink_lines(history_lake.base, tags))
    # 57 STATS metrics; 7 load results (status + load1), http and 2 disk results (status)
    assert counts["rows"] == 57 + 10 and counts["datapoints"] == 57 + 14 + 1 + 2
    assert counts["batches"] == -(-counts["datapoints"] // 7)


def test_window_host_and_dry_run(h, history_lake):
    at = history_lake.at
    lines, _ = replayed(h, host="web1", since=at(DAY))
    assert lines == [f"fleet.web1.mem.used 123.0 {at(DAY + 3600):.0f}\n".encode()]
    lines, _ = replayed(h, host="u-db1")
    assert sorted(line.split()[0] for line in lines) == (
        [b"fleet.db1.checks.disk.status"] * 2 + [b"fleet.db1.cpu.user"] * 5)
    lines, _ = replayed(h, since=at(100), until=at(101))
    assert lines == [f"fleet.web2-old.checks.http.status 2 {at(100):.0f}\n".encode()]
    # u-web2's STATS claim web2, its HELLO said web2-old: no line is filed under the claim
    assert replayed(h, host="web2")[0] == []
    assert len(replayed(h, host="web2-old")[0]) == 10 + 1
    capture = Capture()
    counts = Replay(h, Target(), out=lambda line: None, send=capture).run(dry_run=True)
    assert capture.batches == 0 and counts["datapoints"] == 74


def test_carbon_down_gives_up(h):
    now = Clock(0.0)
    replay = Replay(h, Target(port=free_port()), out=lambda line: None, retry_for=5.0,
                    clock=now, sleep=now.advance)
    with pytest.raises(CarbonGone, match="gave up after 5s"):
        replay.run(host="web2-old")
    assert replay.counts["send_failures"] >= 3 and replay.counts["batches"] == 0


def test_replay_into_carbon(h, history_lake, tmp_path, capsys):
    """The CLI into a real carbon-cache: whisper holds the historical timestamps."""
    at = history_lake.at
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:5556]\nhistory:\n  lake: {history_lake.path}\n"
                      f"  master: local[2]\n")
    carbon = Carbon(tmp_path / "carbon", retentions="1m:30d").start()
    try:
        assert cli.main(["history", "replay", "--to", "graphite", "--config", str(config),
                         "--carbon", f"127.0.0.1:{carbon.port}", "--prefix", "fleet",
                         "--batch", "10"]) == 0
    finally:
        carbon.stop()                 # writes carbon's cache to whisper
    assert "replayed 74 datapoints from 67 rows in 8 batches" in capsys.readouterr().out

    def points(metric):
        return read_points(carbon.path_of(metric), since=at(-7200))
    web1 = {at(60 * i): float(i + 1 if i < 20 else 10 * (i - 19)) for i in range(40)}
    assert points("fleet.web1.cpu.user") == web1
    assert points("fleet.web2-old.cpu.user") == {at(60 * i): 50.0 for i in range(10)}
    assert points("fleet.db1.cpu.user") == {at(DAY + 60 * i): 7.0 for i in range(5)}
    assert points("fleet.web1.mem.used") == {at(DAY + 3600): 123.0}
    assert points("fleet.fleetwatch.r-1.cpu.user") == {at(0): 1000.0}   # 00:00:30
    # results at their `started` (1 s before ts: the minute before)
    load = ((0, 0), (600, 0), (1200, 1), (1800, 2), (2400, 2), (3000, 0), (3600, 0))
    assert points("fleet.web1.checks.load.status") == {at(t - 60): float(s) for t, s in load}
    assert points("fleet.web1.checks.load.load1") == {at(t - 60): s / 2 + 0.25
                                                       for t, s in load}
    assert points("fleet.web2-old.checks.http.status") == {at(60): 2.0}  # ts 00:01:40
    assert points("fleet.db1.checks.disk.status") == {at(DAY): 0.0, at(DAY + 600): 3.0}


def test_replay_usage_errors(history_lake, tmp_path, capsys):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:5556]\nhistory:\n  lake: {history_lake.path}\n")
    base = ["history", "replay", "--to", "graphite", "--config", str(config)]
    assert cli.main(base + ["--since", "last tuesday"]) == 2
    assert "expected a time" in capsys.readouterr().err
    assert cli.main(base + ["--carbon", "nohost"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(["history", "replay", "--to", "influx", "--config", str(config)])
