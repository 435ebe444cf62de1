"""The graphite sink against a real carbon-cache (fleetwatch/cli/demo/carbon.py) on 127.0.0.1.

Whisper files are read back with the whisper module (retrying while carbon creates them).
Agents are a real ``fleetwatch agent`` or a raw DEALER speaking the agent protocol through a
real router; the sink is a real ``fleetwatch sink graphite`` process.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
import zmq

from fleetwatch import protocol
from support.fleet import wait_for
from support.graphite import PREFIX, DealerAgent, graphite_sink, points, value_at, warm_up

pytest.importorskip("graphyte")
pytest.importorskip("whisper")
carbon_mod = pytest.importorskip("fleetwatch.cli.demo.carbon")
try:
    carbon_mod.carbon_script()
except carbon_mod.CarbonError as e:  # pragma: no cover - the test extra installs carbon
    pytest.skip(str(e), allow_module_level=True)

from fleetwatch.cli.demo.carbon import Carbon, read_points  # noqa: E402
from fleetwatch.cli.demo.ports import free_port  # noqa: E402

pytestmark = pytest.mark.timeout(90)


# ---------------------------------------------------------------- a real agent

def test_agent_stats_through_a_router_land_as_whisper_files(carbon, fleet, zctx):
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port)
    sub = zctx.socket(zmq.SUB)
    sub.linger = 0
    sub.subscribe(protocol.topic("STATS"))
    sub.connect(router["endpoints"]["tail"])
    fleet.agent([router])

    def agent_stats():
        while sub.poll(100):
            relayed = protocol.decode_tail(sub.recv_multipart())
            if relayed.message.get("hostname") == "agent-host" and \
                    "cpu.percent" in relayed.message.get("metrics"):
                return relayed.message
        return None
    msg = wait_for(agent_stats, 20, 0, "a STATS of the agent with cpu.percent")
    second = int(msg.ts // 1)
    metrics = msg.get("metrics")
    for name in ("cpu.percent", "memory.available", "load.1", "agent.uptime"):
        value = value_at(carbon, f"{PREFIX}.agent-host.{name}", second)
        assert value == pytest.approx(metrics[name]), name
    # the router's own counters and the sink's own, under fleetwatch.<id>
    # (a first report may come before anything was counted: wait for one that counted)
    def counted(metric):
        wait_for(lambda: max(points(carbon, f"{PREFIX}.fleetwatch.{metric}").values()) > 0,
                 30, 0.2, f"a point of {metric} above 0")
    counted("router-1.router.agents")
    counted("sink-graphite.graphite.sent")
    # and the loop's counters, sent as STATS through the router's control socket
    counted("sink-graphite.sink.received")


# ---------------------------------------------------------------- check perfdata

def test_result_perfdata_lands_under_checks(carbon, fleet, zctx):
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port)
    agent = DealerAgent(zctx, router, "db1.example.com")
    warm_up(carbon, agent)
    started = time.time() - 3
    agent.send("RESULT", command_id="cli:" + "0" * 24, plugin="check_disk", status=1,
               output="DISK WARNING", long_output="", started=started, duration=0.2,
               perfdata=[{"label": "/", "value": 25.5, "uom": "GB", "warn": "20", "crit": None,
                          "min": 0, "max": None},
                         {"label": "time", "value": 120, "uom": "ms", "warn": None,
                          "crit": None, "min": None, "max": None},
                         {"label": "inodes used", "value": None, "uom": "%", "warn": None,
                          "crit": None, "min": None, "max": None}])
    second = int(started // 1)
    base = f"{PREFIX}.db1_example_com.checks.check_disk"
    assert points(carbon, f"{base}.status") == {second: 1.0}
    assert points(carbon, f"{base}._") == {second: 25.5 * 1024 ** 3}
    assert points(carbon, f"{base}.time") == {second: pytest.approx(0.12)}
    assert not carbon.path_of(f"{base}.inodes_used").exists()   # U: skipped


def test_a_check_run_by_the_agent_lands_under_checks(carbon, fleet, zctx):
    """The real path: RUN from the CLI, the agent's plugin runner, RESULT through the router."""
    from support.fleet import agent_uuid_for
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port)
    uuid = agent_uuid_for(fleet)
    check = {"name": "load", "command": "check_load", "args": ["-w", "99,99,99", "-c",
                                                                  "99,99,99"],
             "interval": 3600, "timeout": 10}
    fleet.agent([router], plugins={"dirs": ["/usr/lib/nagios/plugins"], "checks": [check]})
    sub = zctx.socket(zmq.SUB)
    sub.linger = 0
    sub.subscribe(protocol.topic("RESULT", uuid))
    sub.connect(router["endpoints"]["tail"])
    # the agent's hostname reaches the sink with its first STATS (every second here)
    wait_for(lambda: carbon.path_of(f"{PREFIX}.agent-host.load.1").exists(), 20,
             what="the agent's first STATS in carbon")
    op = fleet.operator_config([router])

    def result():
        fleet.cli("run", uuid, "load", "--config", str(op), check=False, timeout=30)
        if sub.poll(5000):
            return protocol.decode_tail(sub.recv_multipart()).message
        return None
    msg = wait_for(result, 40, 0, "a RESULT of check_load")
    perf = {p["label"]: p["value"] for p in msg.get("perfdata")}
    second = int(msg.get("started") // 1)
    assert msg.get("status") == 0 and "load1" in perf
    base = f"{PREFIX}.agent-host.checks.load"
    assert value_at(carbon, f"{base}.status", second) == 0.0
    assert value_at(carbon, f"{base}.load1", second) == pytest.approx(perf["load1"])


def test_tagged_series(carbon, fleet, zctx):
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port, tags=True)
    agent = DealerAgent(zctx, router, "web1.example.com")
    path = carbon.tagged_path_of(f"{PREFIX}.load.1;host=web1.example.com")
    second = int(time.time()) - 5

    def landed():
        agent.stats({"load.1": 0.75}, ts=second)
        return path.exists() and read_points(path).get(second) == 0.75
    wait_for(landed, 20, 0.2, "the tagged series")


# ---------------------------------------------------------------- labelled series

SERIES = [{"name": "http.server.duration_bucket", "value": 3, "kind": "counter",
           "labels": {"le": "0.005", "service.name": "shop"}},
          {"name": "http.server.duration_bucket", "value": 9, "kind": "counter",
           "labels": {"le": "+Inf", "service.name": "shop"}},
          {"name": "queue.depth", "value": 4, "labels": {"host": "victim", "q": "mail"}},
          {"name": "bad", "value": "4"}]


@pytest.mark.parametrize("tags", [False, True])
def test_labelled_series_land_as_paths_or_tagged_series(carbon, fleet, zctx, tags):
    """An application's OTLP points (STATS ``series``, SPEC 4.7): a node per label, or
    tags beside ``host``; a label ``host`` never names another host."""
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port, tags=tags)
    agent = DealerAgent(zctx, router, "web1.example.com")
    second = int(time.time()) - 5
    if tags:
        names = {f"{PREFIX}.http.server.duration_bucket;host=web1.example.com;le=0.005;"
                 "service.name=shop": 3.0,
                 f"{PREFIX}.http.server.duration_bucket;host=web1.example.com;le=_Inf;"
                 "service.name=shop": 9.0,
                 f"{PREFIX}.queue.depth;exported_host=victim;host=web1.example.com;q=mail": 4.0}
    else:
        base = f"{PREFIX}.web1_example_com"
        names = {f"{base}.http.server.duration_bucket.le_0_005.service_name_shop": 3.0,
                 f"{base}.http.server.duration_bucket.le__Inf.service_name_shop": 9.0,
                 f"{base}.queue.depth.exported_host_victim.q_mail": 4.0}
    path = carbon.tagged_path_of if tags else carbon.path_of

    def landed():
        agent.send("STATS", ts=second, hostname=agent.hostname, metrics={}, series=SERIES)
        return all(path(n).exists() and read_points(path(n)).get(second) == v
                   for n, v in names.items())
    wait_for(landed, 20, 0.2, "the labelled series in carbon")
    assert not (carbon.whisper_dir / PREFIX / "victim").exists()
    bad = (f"{PREFIX}.fleetwatch.graphite.series_bad;id=sink-graphite" if tags else
           f"{PREFIX}.fleetwatch.sink-graphite.graphite.series_bad")
    wait_for(lambda: max(points(carbon, bad).values()) > 0, 30, 0.2,
             "the malformed entry counted")


def test_ten_thousand_label_sets_of_one_host_make_at_most_the_cap_of_files(carbon, fleet,
                                                                          zctx):
    """One host's application flooding label sets (and control characters, huge labels):
    100 whisper files (``max_names_per_host``), the rest counted for the host; another
    host's series still land."""
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port, max_names_per_host=100)
    warm_up(carbon, DealerAgent(zctx, router, "warm"))
    flood = DealerAgent(zctx, router, "flood")
    second = int(time.time()) - 5
    hostile = [{"name": "ctl\x1b[2J\n", "value": 1, "labels": {"k\r": "v\x00 x"}},
               {"name": "big", "value": 2, "labels": {f"k{i}": "v" * 255 for i in range(64)}}]
    for start in range(0, 10_000, 2000):
        flood.send("STATS", ts=second, hostname="flood", metrics={}, series=(
            hostile if not start else []) + [
            {"name": "req", "value": i, "kind": "counter", "labels": {"id": str(i)}}
            for i in range(start, start + 2000)])
    counter = f"{PREFIX}.fleetwatch.sink-graphite.graphite.names_refused_by_host.flood"
    wait_for(lambda: max(points(carbon, counter).values()) == 10_000 - 99, 30, 0.2,
             "the refused label sets counted under the host")
    host = carbon.whisper_dir / PREFIX / "flood"
    wait_for(lambda: len(list(host.rglob("*.wsp"))) == 100, 15, 0.1, "the 100 files admitted")
    assert carbon.path_of(f"{PREFIX}.flood.ctl_2J_.k__v_x").exists()
    assert max(points(carbon, f"{PREFIX}.fleetwatch.sink-graphite.graphite."
                              "bad_name").values()) >= 1               # 64 labels of 255
    web = DealerAgent(zctx, router, "web1")
    web.send("STATS", ts=second, hostname="web1", metrics={}, series=[
        {"name": "req", "value": 5, "kind": "counter", "labels": {"id": "1"}}])
    assert value_at(carbon, f"{PREFIX}.web1.req.id_1", second) == 5.0


# ---------------------------------------------------------------- a flood of names

def test_a_flood_of_names_makes_at_most_the_cap_of_whisper_files(carbon, fleet, zctx):
    """One STATS of 300 names from one host: 100 whisper files (``max_names_per_host``), the
    other 200 names never sent and counted for that host (issue 31: 200 files, 119 MB)."""
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port, max_names_per_host=100)
    warm_up(carbon, DealerAgent(zctx, router, "warm"))
    flood = DealerAgent(zctx, router, "flood.example.com")
    second = int(time.time()) - 5
    flood.stats({f"flood.m{i:03d}": float(i) for i in range(300)}, ts=second)
    counter = f"{PREFIX}.fleetwatch.sink-graphite.graphite.names_refused_by_host." \
              "flood_example_com"
    wait_for(lambda: max(points(carbon, counter).values()) == 200, 30, 0.2,
             "200 names refused for the host, in carbon")
    assert max(points(carbon, f"{PREFIX}.fleetwatch.sink-graphite.graphite."
                              "names_refused").values()) >= 200
    host = carbon.whisper_dir / PREFIX / "flood_example_com"
    wait_for(lambda: len(list(host.rglob("*.wsp"))) == 100, 15, 0.1, "the 100 files admitted")
    assert sorted(p.stem for p in host.rglob("*.wsp")) == [f"m{i:03d}" for i in range(100)]
    assert value_at(carbon, f"{PREFIX}.flood_example_com.flood.m099", second) == 99.0


# ---------------------------------------------------------------- carbon down

def test_carbon_stopped_and_restarted_mid_stream_loses_nothing(carbon, fleet, zctx):
    router = fleet.router()
    sink = graphite_sink(fleet, [router], carbon.port)
    agent = DealerAgent(zctx, router, "chaos")
    warm_up(carbon, agent)
    total, base = 150, int(time.time()) - 900
    sent = [0]
    lock = threading.Lock()

    def stream():
        for i in range(total):
            agent.stats({"seq": i, "twice": 2 * i}, ts=base + i + 0.5)
            with lock:
                sent[0] = i + 1
            time.sleep(0.02)
    # one thread owns the DEALER from here on (zmq sockets are not thread-safe)
    t = threading.Thread(target=stream)
    t.start()
    wait_for(lambda: sent[0] >= 40, 10, what="first 40 STATS sent")
    carbon.stop()
    wait_for(lambda: sent[0] >= 100, 10, what="40 to 100 sent while carbon is down")
    wait_for(lambda: re.search(r"carbon 127\.0\.0\.1:\d+: .*buffered", sink.log()), 10,
             what="the sink noticing carbon is down")
    carbon.start()
    t.join(20)
    for name, factor in (("seq", 1), ("twice", 2)):
        got = points(carbon, f"{PREFIX}.chaos.{name}", want=total, timeout=30)
        assert got == {base + i: float(factor * i) for i in range(total)}


def test_buffer_overflow_drops_the_oldest_and_counts(fleet, tmp_path, monkeypatch):
    import support.fakerouter as fakerouter
    monkeypatch.setattr(fakerouter, "SINK_TYPES", ("graphite",))
    router = fakerouter.BackendFacingRouter()
    try:
        port = free_port()                       # carbon is not there yet
        sink = graphite_sink(fleet, [router.info], port, buffer=100, batch=100,
                             stats_interval=60.0)  # no own counters in the buffer meanwhile
        wait_for(lambda: router.pullers("graphite") >= 1, 15, what="the sink's PULL connected")
        second = int(time.time()) - 10
        router.push("graphite", fakerouter.relayed(
            "STATS", "f" * 32, hostname="flood", metrics={f"m{i:03d}": i for i in range(150)},
            clock=lambda: second)[1])
        wait_for(lambda: "carbon buffer full" in sink.log(), 10, what="the overflow warning")
        carbon = Carbon(tmp_path / "late-carbon", port=port, retentions="1s:1h").start()
        try:
            for i in (50, 99, 149):
                assert value_at(carbon, f"{PREFIX}.flood.m{i:03d}", second) == float(i)
            sink.stop()
            for i in (0, 49):
                assert not carbon.path_of(f"{PREFIX}.flood.m{i:03d}").exists()
            assert re.search(r"graphite\.dropped_overflow=50\b", sink.log())
            assert re.search(r"graphite\.sent=100\b", sink.log())
        finally:
            carbon.stop()
    finally:
        router.close()
