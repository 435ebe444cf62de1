"""The console's graphs from a real Graphite: a real carbon-cache (the ``carbon`` fixture), the
real graphite sink behind a real router writing what a raw agent sends, and a real
graphite-web (the ``graphite_web`` fixture, the demo's) answering fleetwatch/graphs' render
client and host page helper. With the sink's ``tags: true``, the ``tagged_graphite`` fixture:
the demo's carbon told to register tagged series with the demo's graphite-web, whose tag
database the client asks."""

from __future__ import annotations

import socket
import time

import pytest

from fleetwatch.cli.demo.carbon import Carbon
from fleetwatch.cli.demo.ports import free_port
from fleetwatch.graphs import GraphError, Graphite, GraphiteWebSettings, host_graphs
from support.fleet import wait_for
from support.graphite import PREFIX, DealerAgent, graphite_sink, points, warm_up

pytest.importorskip("graphyte")
pytestmark = pytest.mark.timeout(120)


def send_stats_and_a_check(agent: DealerAgent) -> tuple[int, dict, int]:
    """Ten STATS (cpu.percent, load.1) over the last 30 s, every other second, and a
    WARNING of check_disk with 25.5 GB of perfdata: (now, {ts: metrics}, the check's start)."""
    now = int(time.time())
    sent = {now - 30 + i: {"cpu.percent": 10.0 + i, "load.1": 0.25 * i} for i in range(0, 20, 2)}
    for ts, metrics in sent.items():
        agent.stats(metrics, ts=ts)
    started = now - 5
    agent.send("RESULT", command_id="cli:" + "0" * 24, plugin="check_disk", status=1,
               output="DISK WARNING", long_output="", started=started, duration=0.2,
               perfdata=[{"label": "/", "value": 25.5, "uom": "GB", "warn": "20",
                          "crit": None, "min": 0, "max": None}])
    return now, sent, started


def check_host_page(page, started: int) -> None:
    """The host page's graphs of what send_stats_and_a_check sent (after a warm-up)."""
    assert page.status == "ok", page
    # the catalogue's first (CPU, load), the check's perfdata in its unit, then the rest
    assert [(g.key, g.section) for g in page.graphs] == [
        ("cpu", "host"), ("load", "host"), ("check-check_disk-B", "checks"),
        ("check-check_disk-status", "more"), ("series-warmup", "more")]
    disk = page.graphs[2]
    assert disk.title == "check_disk (B)" and disk.unit == "B"
    assert [(v, ts) for s in disk.series for v, ts in s.points if v is not None] == \
        [(25.5 * 1024 ** 3, started)]
    assert ">_ (last 27.4 GB)<" in disk.svg and ">27.4 GB<" in disk.svg     # the axis too
    assert [v for s in page.graphs[3].series for v, _ in s.points if v is not None] == [1.0]


def test_find_and_render_answer_what_the_sink_wrote(carbon, graphite_web, fleet, zctx):
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port)
    agent = DealerAgent(zctx, router, "web1.example.com")
    warm_up(carbon, agent)
    now, sent, started = send_stats_and_a_check(agent)
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
                       "web1.example.com", 120, units={"checks.check_disk._": "GB"})
    check_host_page(page, started)

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


# ---------------------------------------------------------------- tagged series

@pytest.fixture
def tagged_graphite(tmp_path):
    """(carbon, graphite-web): carbon registers tagged series with graphite-web's tag
    database (``ENABLE_TAGS``, ``GRAPHITE_URL``), graphite-web started first."""
    from fleetwatch.cli.demo.graphiteweb import GraphiteWeb, missing
    if missing():
        pytest.skip(missing())
    port = free_port()
    carbon = Carbon(tmp_path / "carbon", retentions="1s:1h", tagdb=f"http://127.0.0.1:{port}")
    web = GraphiteWeb.over(tmp_path / "graphite-web", carbon, port)
    try:
        web.start()
        carbon.start()
        yield carbon, web
    finally:
        carbon.stop()
        web.stop()


def listed(client: Graphite, host: str) -> list:
    """The series ``client`` finds for ``host``; none while graphite-web answers an error."""
    found = client.metrics(host)
    return [] if isinstance(found, GraphError) else found


def test_tagged_series_are_found_in_the_tag_database_and_rendered(tagged_graphite, fleet,
                                                                  zctx):
    carbon, web = tagged_graphite
    assert "ENABLE_TAGS = True" in carbon.config_path.read_text()
    assert f"GRAPHITE_URL = {web.url}\n" in carbon.config_path.read_text()
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port, tags=True)
    agent = DealerAgent(zctx, router, "web1.example.com")
    warm_up(carbon, agent, tagged=True)
    now, sent, started = send_stats_and_a_check(agent)
    # the same host under another prefix, by hand: not this fleet's
    with socket.create_connection(("127.0.0.1", carbon.port)) as s:
        s.sendall(b"%s_other.cpu.percent;host=web1.example.com 1 %d\n" % (PREFIX.encode(), now))
    host = "host=web1.example.com"
    names = [f"{PREFIX}.checks.check_disk._;{host}", f"{PREFIX}.checks.check_disk.status;{host}",
             f"{PREFIX}.cpu.percent;{host}", f"{PREFIX}.load.1;{host}",
             f"{PREFIX}.warmup;{host}"]
    points(carbon, names[2], want=len(sent))
    points(carbon, names[0])

    client = Graphite(web.url, timeout=5, prefix=PREFIX, tags=True)
    everything = Graphite(web.url, prefix="", tags=True)
    # carbon's tag writer posts new series to graphite-web every 0.2 s
    # (graphite-web slow to answer under load is a GraphError: asked again, not a crash)
    wait_for(lambda: len(listed(everything, "web1.example.com")) == len(names) + 1, 20, 0.1,
             "every series in the tag database")
    assert client.metrics("web1.example.com") == names

    series = client.render([names[2], names[3]], now - 60, now)
    assert not isinstance(series, GraphError), series
    by_name = {s.name: dict((ts, v) for v, ts in s.points if v is not None) for s in series}
    assert by_name[names[2]] == {ts: m["cpu.percent"] for ts, m in sent.items()}
    assert by_name[names[3]] == {ts: m["load.1"] for ts, m in sent.items()}

    # what a host page gets: the same graphs as with host paths
    settings = GraphiteWebSettings(url=web.url, prefix=PREFIX, tags=True)
    page = host_graphs(settings, "web1.example.com", 120, units={"checks.check_disk._": "GB"})
    check_host_page(page, started)

    unknown = host_graphs(settings, "db9")
    assert unknown.status == "unknown host" and "host=db9" in unknown.message
    # the operator config saying host paths for a tagged fleet: a hint, not a blank page
    untagged = host_graphs(GraphiteWebSettings(url=web.url, prefix=PREFIX),
                           "web1.example.com")
    assert untagged.status == "unknown host"
    assert "set graphite.tags: true" in untagged.message

    # a series new while graphite-web is down: carbon registers it once graphite-web is back
    web.stop()
    with socket.create_connection(("127.0.0.1", carbon.port)) as s:
        s.sendall(b"%s.late;%s 1 %d\n" % (PREFIX.encode(), host.encode(), now))
    wait_for(lambda: "tagged series failed" in carbon.output(), 20, 0.1,
             "carbon's registration refused")
    web.start()
    wait_for(lambda: f"{PREFIX}.late;{host}" in listed(client, "web1.example.com"), 30, 0.2,
             "the series registered once graphite-web is back")
    assert "carbon: registered " in carbon.output()           # the recovery said


def test_carbon_without_a_tag_database_does_not_post_tags(tmp_path):
    """carbon 1.1.10 turns ENABLE_TAGS on by default, posting to http://127.0.0.1:80."""
    carbon = Carbon(tmp_path / "carbon")
    carbon.write_config()
    assert "ENABLE_TAGS = False" in carbon.config_path.read_text()
    assert "GRAPHITE_URL" not in carbon.config_path.read_text()
