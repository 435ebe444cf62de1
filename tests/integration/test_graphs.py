"""The console's graphs from a real Graphite: a real carbon-cache (the ``carbon`` fixture), the
real graphite sink behind a real router writing what a raw agent sends, and a real
graphite-web (the ``graphite_web`` fixture, the demo's) answering fleetwatch/graphs' render
client and host page helper."""

from __future__ import annotations

import time

import pytest

from fleetwatch.graphs import GraphError, Graphite, GraphiteWebSettings, host_graphs
from support.fleet import wait_for
from support.graphite import PREFIX, DealerAgent, graphite_sink, points, warm_up

pytest.importorskip("graphyte")
pytestmark = pytest.mark.timeout(120)


def test_find_and_render_answer_what_the_sink_wrote(carbon, graphite_web, fleet, zctx):
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port)
    agent = DealerAgent(zctx, router, "web1.example.com")
    warm_up(carbon, agent)
    now = int(time.time())
    sent = {now - 30 + i: {"cpu.percent": 10.0 + i, "load.1": 0.25 * i} for i in range(0, 20, 2)}
    for ts, metrics in sent.items():
        agent.stats(metrics, ts=ts)
    started = now - 5
    agent.send("RESULT", command_id="cli:" + "0" * 24, plugin="check_disk", status=1,
               output="DISK WARNING", long_output="", started=started, duration=0.2,
               perfdata=[{"label": "/", "value": 25.5, "uom": "GB", "warn": "20",
                          "crit": None, "min": 0, "max": None}])
    base = f"{PREFIX}.web1_example_com"
    points(carbon, f"{base}.cpu.percent", want=len(sent))
    points(carbon, f"{base}.checks.check_disk._")

    client = Graphite(graphite_web.url, timeout=5, prefix=PREFIX)
    found = client.metrics("web1.example.com")
    assert found == [f"{base}.checks.check_disk._", f"{base}.checks.check_disk.status",
                     f"{base}.cpu.percent", f"{base}.load.1", f"{base}.warmup"]

    series = client.render([f"{base}.cpu.percent", f"{base}.load.1"], now - 60, now)
    assert not isinstance(series, GraphError), series
    by_name = {s.name: dict((ts, v) for v, ts in s.points if v is not None) for s in series}
    assert by_name[f"{base}.cpu.percent"] == {ts: m["cpu.percent"] for ts, m in sent.items()}
    assert by_name[f"{base}.load.1"] == {ts: m["load.1"] for ts, m in sent.items()}
    # every second of the range is there (1 s retention), the ones not sent as gaps
    cpu = next(s for s in series if s.name == f"{base}.cpu.percent")
    assert [ts for _, ts in cpu.points] == list(range(cpu.points[0][1], cpu.points[-1][1] + 1))

    # what a host page gets: graphs per group, drawn from the same values
    page = host_graphs(GraphiteWebSettings(url=graphite_web.url, prefix=PREFIX),
                       "web1.example.com", 120)
    assert page.status == "ok", page
    titles = [g.title for g in page.graphs]
    assert titles == ["cpu", "load", "warmup", "checks.check_disk",
                      "checks.check_disk.status"]
    disk = page.graphs[3]
    assert [(v, ts) for s in disk.series for v, ts in s.points if v is not None] == \
        [(25.5 * 1024 ** 3, started)]
    assert ">_ (last 27.4G)<" in disk.svg
    status = page.graphs[4]
    assert [v for s in status.series for v, _ in s.points if v is not None] == [1.0]

    assert isinstance(client.metrics("db9"), GraphError)
    assert client.metrics("db9").kind == "unknown host"
    assert host_graphs(GraphiteWebSettings(url=graphite_web.url, prefix=PREFIX),
                       "db9").status == "unknown host"


def test_a_point_sent_by_hand_is_found_and_rendered(carbon, graphite_web):
    """One plaintext line to carbon, then find and render through graphite-web (which reads
    the whisper file, and carbon's cache for what is not written yet)."""
    import socket
    client = Graphite(graphite_web.url, prefix="test")
    now = int(time.time())
    with socket.create_connection(("127.0.0.1", carbon.port)) as s:
        s.sendall(b"test.h1.m %d %d\n" % (7, now - 2))
    wait_for(lambda: client.metrics("h1") == ["test.h1.m"], 20, 0.1, "test.h1.m in find")
    got = wait_for(lambda: [s for s in client.render(["test.h1.m"], now - 10, now)
                            if any(v is not None for v, _ in s.points)] or None, 20, 0.1,
                   "the point rendered")
    assert [(v, ts) for v, ts in got[0].points if v is not None] == [(7.0, now - 2)]


def test_graphite_web_gone_is_an_error_value(carbon, graphite_web):
    settings = GraphiteWebSettings(url=graphite_web.url, timeout=2)
    graphite_web.stop()
    page = host_graphs(settings, "web1")
    assert page.status == "error" and page.graphs == ()
    assert page.message == f"Graphite at {graphite_web.url} is unreachable: Connection refused"
