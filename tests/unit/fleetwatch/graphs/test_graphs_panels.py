"""A host page's graphs (fleetwatch/graphs/panels.py): what matters first, one unit a graph,
counters as rates, the rest (and the agent's own counters) behind the fold."""

from __future__ import annotations

from fleetwatch.graphs import panels
from fleetwatch.graphs.svg import chart, with_unit

# every series the agent's collectors send, a check's perfdata in three units, its status,
# the agent's own counters and a name the catalogue does not know
NAMES = ["agent.collectors.errors", "agent.config.reloads", "agent.spool.size", "cpu.iowait",
         "cpu.percent", "cpu.system", "cpu.user", "disk.boot.free", "disk.boot.used_percent",
         "disk.root.free", "disk.root.used_percent", "diskio.read_bytes", "diskio.reads",
         "diskio.write_bytes", "diskio.writes", "load.1", "load.15", "load.5",
         "memory.available", "memory.total", "memory.used_percent", "netio.bytes_recv",
         "netio.bytes_sent", "netio.dropin", "netio.errin", "netio.packets_recv",
         "netio.packets_sent", "procs.count", "swap.used_percent", "uptime.seconds",
         "checks.http.time", "checks.http.size", "checks.http.status", "checks.http.hits",
         "checks.disk_root._", "webapp.sessions"]
UNITS = {"checks.http.time": "ms", "checks.http.size": "KB", "checks.http.hits": "c",
         "checks.disk_root._": "GB"}


def test_the_graphs_that_matter_come_first_each_in_one_unit():
    graphs = panels.arrange({n: n for n in NAMES}, UNITS)
    assert [(g.key, g.section, g.unit) for g in graphs] == [
        ("cpu", "host", "%"), ("load", "host", ""), ("memory", "host", "%"),
        ("disk", "host", "%"), ("network", "host", "B/s"), ("diskio", "host", "B/s"),
        ("procs", "host", ""),
        ("packets", "more", "/s"), ("net-errors", "more", "/s"), ("diskops", "more", "/s"),
        ("disk-free", "more", "B"), ("memory-bytes", "more", "B"), ("uptime", "more", "s"),
        ("check-disk_root-B", "checks", "B"), ("check-http-B", "checks", "B"),
        ("check-http-per-s", "checks", "/s"), ("check-http-s", "checks", "s"),
        ("check-http-status", "more", ""),
        ("series-webapp", "more", ""), ("series-agent-collectors", "more", ""),
        ("series-agent-config", "more", ""), ("series-agent-spool", "more", "")]
    by_key = {g.key: g for g in graphs}
    # every series in exactly one graph, named in its legend by what sets it apart
    assert sorted(n for g in graphs for _, n in g.series) == sorted(NAMES)
    assert [name for name, _ in by_key["disk"].series] == ["boot", "root"]
    assert [name for name, _ in by_key["cpu"].series] == ["iowait", "percent", "system",
                                                          "user"]
    assert by_key["network"].rate and by_key["check-http-per-s"].rate  # counters: rates
    assert not by_key["memory"].rate
    assert by_key["check-http-s"].title == "http (s)"


def test_a_counter_is_drawn_as_its_rate_a_reset_or_a_gap_breaking_it():
    points = [(100, 0), (200, 10), (None, 20), (250, 30), (300, 40), (10, 50), (30, 60)]
    assert panels.rates(points) == [(10.0, 10), (None, 20), (5.0, 40), (None, 50), (2.0, 60)]


def test_the_axis_and_the_legend_say_the_unit_and_hovering_says_the_values():
    svg = chart([("recv", [(1.5e6, 0), (2.5e6, 60)]), ("sent", [(1e3, 0), (2e3, 60)])],
                title="Network in and out", start=0, end=60, unit="B/s")
    assert ">2.5 MB/s<" in svg and ">0 B/s<" in svg          # from zero, in its unit
    assert "recv (last 2.5 MB/s)" in svg and "sent (last 2 KB/s)" in svg
    assert "<title>1970-01-01 00:00 UTC&#10;recv: 1.5 MB/s&#10;sent: 1 KB/s</title>" in svg
    assert with_unit(34.5, "%") == "34.5 %" and with_unit(12, "") == "12"
    assert with_unit(0.25, "s") == "0.25 s"
