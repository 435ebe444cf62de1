"""Prometheus sink logic without a socket: names and labels, the series table (an injected
clock: staleness, the series limit, snapshots), the collector's exposition in both formats,
the sink's translation of relayed messages and its config section."""

from __future__ import annotations

from collections import Counter

import pytest

from fleetwatch import protocol
from fleetwatch.config import ConfigError, build
from sinks.config import SinkConfig
from sinks.prometheus.config import PrometheusSettings, split_listen
from sinks.prometheus.names import (MAX_LABEL, MAX_NAME, Namer, Sample, label_value,
                                    metric_name, series_family, series_labels)
from fleetwatch.series import entries
from sinks.prometheus.table import SeriesTable
from support.clock import Clock

prometheus_client = pytest.importorskip("prometheus_client")

pytestmark = pytest.mark.timeout(30)

UUID = "a" * 32


# ---------------------------------------------------------------- names

@pytest.mark.parametrize("raw, expected", [
    ("cpu.percent", "cpu_percent"),
    ("load.1", "load_1"),
    ("disk.root.free", "disk_root_free"),
    ("net io.bytes/s", "net_io_bytes_s"),        # a run of odd characters: one _
    ("router.dropped.STATS.history", "router_dropped_STATS_history"),
    ("1min", "_1min"),                          # never starts with a digit
    ("..x..", "x"),
    ("a:b", "a_b"),                             # colons are for recording rules
    ("héllo", "h_llo"),
    ("<script>", "script"),
    ("", ""),
    ("...", ""),
    (7, ""),
])
def test_metric_name(raw, expected):
    assert metric_name(raw) == expected


@pytest.mark.parametrize("raw, expected", [
    ("web1.example.com", "web1.example.com"),   # label values keep what they can
    ('a"b\\c', 'a"b\\c'),                        # prometheus_client escapes these
    ("line\nbreak\r\x00\x1b[31m", "line\ufffdbreak\ufffd\ufffd\ufffd[31m"),
    ("\ud800lone", "\ufffdlone"),                # would not encode as UTF-8
    ("<b>bold</b>", "<b>bold</b>"),              # text, inert in the exposition
    ("x" * MAX_LABEL, "x" * MAX_LABEL),
    ("x" * (MAX_LABEL + 1), None),
    (None, None),
])
def test_label_value(raw, expected):
    assert label_value(raw) == expected


def test_stats_samples_and_defects():
    namer = Namer("fw_")
    samples, counts = namer.stats({"cpu.percent": 12.5, "load.1": 1, "x" * (MAX_NAME + 1): 1,
                                   "...": 3, "check.status": 1, "check_perfdata": 2,
                                   "prometheus.sink.series": 4, "bad": "text",
                                   "flag": True}, "web1", UUID)
    assert samples == [Sample("fw_cpu_percent", ("web1", UUID), 12.5),
                       Sample("fw_load_1", ("web1", UUID), 1)]
    # too long, and the sink's own families: bad_name; empty or not a number: bad_metric
    assert counts == Counter(bad_name=4, bad_metric=3)


def test_a_huge_or_missing_host_drops_the_message_counted():
    namer = Namer()
    assert namer.stats({"a": 1}, "h" * (MAX_LABEL + 1), UUID) == ([], Counter(bad_label=1))
    assert namer.stats("not a dict", "h", UUID) == ([], Counter(bad_metric=1))


def test_result_samples_units_and_defects():
    namer = Namer()
    perfdata = [
        {"label": "/", "value": 25.5, "uom": "GB"},
        {"label": "time", "value": 120, "uom": "ms"},
        {"label": "inodes used", "value": None, "uom": "%"},          # U
        {"label": "odd", "value": 3, "uom": "widgets"},               # passed, counted
        {"label": "", "value": 1},                                    # no label
        {"label": "x", "value": "NaN"},                               # no number
        {"label": "l" * (MAX_LABEL + 1), "value": 1},                 # huge label
        "garbage",
    ]
    samples, counts = namer.result("check_disk", 2, perfdata, "db1", UUID)
    labels = ("db1", UUID, "check_disk")
    assert samples == [
        Sample("fleetwatch_check_status", labels, 2),
        Sample("fleetwatch_check_perfdata", labels + ("/",), 25.5 * 1024 ** 3),
        Sample("fleetwatch_check_perfdata", labels + ("time",), pytest.approx(0.12)),
        Sample("fleetwatch_check_perfdata", labels + ("odd",), 3),
    ]
    assert counts == Counter(perfdata_unknown=1, unit_unknown=1, perfdata_bad=3, bad_label=1)


def test_namer_memories_stay_bounded():
    namer = Namer(cache_size=3)
    for i in range(10):
        samples, _ = namer.stats({"a.b": 1, f"n{i}": 2}, f"web{i}", UUID)
        assert [s.family for s in samples] == ["fleetwatch_a_b", f"fleetwatch_n{i}"]
    assert len(namer._names) <= 3 and len(namer._values) <= 3


# ---------------------------------------------------------------- labelled series

def entry(name_, value=1, kind="gauge", **labels):
    return {"name": name_, "labels": labels, "value": value, "kind": kind}


@pytest.mark.parametrize("raw, counter, expected", [
    ("http.server.requests", True, ("http_server_requests", "counter")),
    ("requests_total", True, ("requests", "counter")),          # served requests_total once
    ("http.server.duration_bucket", True, ("http_server_duration_bucket", "unknown")),
    ("rpc.duration_sum", True, ("rpc_duration_sum", "unknown")),
    ("rpc.duration_count", True, ("rpc_duration_count", "unknown")),
    ("queue.depth", False, ("queue_depth", "gauge")),
    ("memory_total", False, ("memory_total", "gauge")),
    ("_total", True, ("total", "counter")),
    ("...", False, "bad_metric"),
    ("check.status", False, "bad_name"),
    ("prometheus.sink.x", True, "bad_name"),
    ("n" * (MAX_NAME + 1), False, "bad_name"),
])
def test_series_family(raw, counter, expected):
    assert series_family(raw, counter) == expected


@pytest.mark.parametrize("labels, expected", [
    ((("service.name", "shop"), ("le", "0.005")), (("le", "0.005"), ("service_name", "shop"))),
    ((("1st", "a"), ("__name__", "x")), (("_1st", "a"), ("name", "x"))),     # never __
    ((("host", "evil"), ("instance", "i"), ("uuid", "u"), ("site", "s")),
     (("exported_host", "evil"), ("exported_instance", "i"), ("exported_site", "s"),
      ("exported_uuid", "u"))),
    ((("a.b", "1"), ("a_b", "2")), (("a_b", "1;2"),)),           # Prometheus' OTLP rule
    ((("k", "line\nbreak\x1b"),), (("k", "line\ufffdbreak\ufffd"),)),
    ((("...", "x"),), None),                                     # an empty label name
    ((("k", "v" * 200), ("j", "w" * 100)), (("j", "w" * 100), ("k", "v" * 200))),
])
def test_series_labels(labels, expected):
    assert series_labels(labels) == expected


def test_stats_with_series_samples_defects_and_kinds():
    namer = Namer("fw_")
    taken = entries([entry("http.requests", 7, "counter", **{"service.name": "shop"}),
                     entry("http.requests", 8, "counter", **{"service.name": "cart"}),
                     entry("http.duration_bucket", 3, "counter", le="+Inf"),
                     entry("queue", 2), entry("cpu.percent", 9),
                     entry("x", 1, k="v" * 255, **{"k.": "w"}),     # joined: past 255
                     entry("...", 1), entry("check_status", 1),
                     {"name": "bad"}], Counter())
    samples, counts = namer.stats(None, "web1", UUID, taken)
    assert samples == [
        Sample("fw_http_requests", ("web1", UUID, (("service_name", "shop"),)), 7),
        Sample("fw_http_requests", ("web1", UUID, (("service_name", "cart"),)), 8),
        Sample("fw_http_duration_bucket", ("web1", UUID, (("le", "+Inf"),)), 3),
        Sample("fw_queue", ("web1", UUID), 2),       # no labels: the STATS metric's series
        Sample("fw_cpu_percent", ("web1", UUID), 9),
    ]
    assert counts == Counter(bad_label=1, bad_metric=1, bad_name=1)
    assert namer.kinds == {"fw_http_requests": "counter", "fw_http_duration_bucket": "unknown",
                           "fw_queue": "gauge", "fw_cpu_percent": "gauge"}
    assert namer.stats(None, "web1", UUID) == ([], Counter(bad_metric=1))   # neither


def test_series_are_served_with_their_labels_and_types(sink):
    sink.write([relayed("HELLO", hostname="web1", heartbeat=2.0, role="agent"),
                relayed("STATS", hostname="web1", metrics={"cpu.percent": 5}, series=[
                    entry("http.server.requests", 7, "counter", **{"service.name": "shop"}),
                    entry("http.server.duration_bucket", 3, "counter", le="0.005"),
                    entry("http.server.duration_bucket", 5, "counter", le="+Inf"),
                    entry("queue.depth", 2, host="container-7", q="mail"),
                    entry("router.agents", 3, "counter", x="y"),       # fleetwatch's name
                    {"name": "bad", "value": True}])])
    assert sink.counts["series_bad"] == 1 and sink.counts["samples"] == 6
    for openmetrics in (False, True):
        text = scrape(sink, openmetrics)
        got = series(text.replace("# EOF\n", ""))
        base = f'host="web1",instance="{UUID}"'
        assert got[f'fleetwatch_http_server_requests_total{{{base},service_name="shop"}}'] == 7
        assert got[f'fleetwatch_http_server_duration_bucket{{{base},le="0.005"}}'] == 3
        assert got[f'fleetwatch_http_server_duration_bucket{{{base},le="+Inf"}}'] == 5
        assert got[f'fleetwatch_queue_depth{{exported_host="container-7",{base},q="mail"}}'] == 2
        assert got[f'fleetwatch_router_agents{{{base},x="y"}}'] == 3
        types = dict(line.split()[2:4] for line in text.splitlines()
                     if line.startswith("# TYPE"))
        family = "fleetwatch_http_server_requests" + ("" if openmetrics else "_total")
        assert types[family] == "counter"
        assert types["fleetwatch_http_server_duration_bucket"] == (
            "unknown" if openmetrics else "untyped")
        assert types["fleetwatch_queue_depth"] == "gauge"
        assert types["fleetwatch_router_agents"] == "gauge"      # the catalogue's word wins
    assert "histogram or summary http_server_duration" in scrape(sink)


def test_series_count_in_the_host_s_share(sink):
    """10,000 label sets from one host: its max_series_per_host series, the rest refused
    under its name; the other hosts keep their room."""
    flood = [entry("flood", i, "counter", id=str(i)) for i in range(10_000)]
    for start in range(0, len(flood), 2000):
        sink.write([relayed("STATS", hostname="flood", metrics={"up": 1},
                            series=flood[start:start + 2000])])
    sink.write([relayed("STATS", uuid="b" * 32, hostname="web1", metrics={"up": 1})])
    assert sink.counts["series"] == 1000 + 1
    assert sink.counts["dropped_max_series_per_host"] == 10_000 + 1 - 1000
    assert sink.counts["dropped_by_host.flood"] == 10_000 + 1 - 1000
    got = series(scrape(sink))
    assert got[f'fleetwatch_up{{host="web1",instance="{"b" * 32}"}}'] == 1


# ---------------------------------------------------------------- the table

def test_latest_value_wins_and_stale_series_go():
    clock = Clock(1000.0)
    table = SeriesTable(max_series=10, stale_after=60, clock=clock)
    table.write([Sample("m", ("h1", "u1"), 1.0), Sample("m", ("h2", "u2"), 2.0)])
    clock.now += 30
    table.write([Sample("m", ("h1", "u1"), 1.5)])
    families, oldest = table.snapshot()
    assert {k: v for k, (v, _) in families["m"].items()} == {("h1", "u1"): 1.5,
                                                              ("h2", "u2"): 2.0}
    clock.now += 31                         # h2: 61 s without a value, h1: 31 s
    families, oldest = table.snapshot()
    served = [k for k, (_, when) in families["m"].items() if when >= oldest]
    assert served == [("h1", "u1")]         # stale ones are left out before the sweep
    assert table.expire() == 1 and len(table) == 1
    clock.now += 30
    assert table.expire() == 1 and len(table) == 0 and table.families == {}
    assert table.counts["expired"] == 2


def test_max_series_refuses_new_series_but_updates_known_ones():
    clock = Clock(1000.0)
    table = SeriesTable(max_series=2, stale_after=60, clock=clock)
    assert table.write([Sample("a", ("h", "u"), 1), Sample("b", ("h", "u"), 1),
                        Sample("c", ("h", "u"), 1), Sample("a", ("h2", "u2"), 1)]) == 2
    assert table.write([Sample("a", ("h", "u"), 5)]) == 0
    families, _ = table.snapshot()
    assert {f: {k: v for k, (v, _) in s.items()} for f, s in families.items()} == {
        "a": {("h", "u"): 5}, "b": {("h", "u"): 1}}
    assert table.counts["dropped_max_series"] == 2
    clock.now += 61                         # room again once the stale ones are forgotten
    table.expire()
    assert table.write([Sample("c", ("h", "u"), 1)]) == 0 and len(table) == 1


def test_a_snapshot_is_a_copy():
    table = SeriesTable(10, 60, Clock(1000.0))
    table.write([Sample("a", ("h", "u"), 1)])
    families, _ = table.snapshot()
    table.write([Sample("a", ("h", "u"), 2), Sample("a", ("h2", "u"), 3)])
    assert {k: v for k, (v, _) in families["a"].items()} == {("h", "u"): 1}


# ---------------------------------------------------------------- the sink and its exposition

def relayed(type_, uuid=UUID, router="r1", **fields):
    return protocol.Relayed(uuid, router, protocol.make(type_, uuid, **fields))


@pytest.fixture
def sink():
    from sinks.prometheus.sink import PrometheusSink
    clock = Clock(1000.0)
    s = PrometheusSink(PrometheusSettings(listen="127.0.0.1:0", stale_after=60), "prom@test",
                       clock=clock)
    s.test_clock = clock
    yield s
    s.close()


def scrape(sink, openmetrics: bool = False) -> str:
    from prometheus_client import exposition
    from prometheus_client.openmetrics import exposition as om
    registry = sink.server.registry
    return (om.generate_latest(registry) if openmetrics
            else exposition.generate_latest(registry)).decode()


def series(text: str) -> dict[str, float]:
    """Sample lines (name and labels) -> value, comments left out."""
    return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line and not line.startswith("#")}


def test_hello_names_the_host_and_a_stats_claim_is_overruled(sink):
    sink.write([relayed("HELLO", hostname="web1", heartbeat=2.0, role="agent"),
                relayed("STATS", hostname="evil", metrics={"cpu.percent": 5})])
    got = series(scrape(sink))
    assert got[f'fleetwatch_cpu_percent{{host="web1",instance="{UUID}"}}'] == 5
    assert sink.counts["hostname_mismatch"] == 1


def test_results_checks_and_own_counters_in_both_formats(sink):
    sink.write([relayed("STATS", hostname="db1", metrics={"load.1": 0.5}),
                relayed("RESULT", command_id="c" * 24, plugin="check_disk", status=1,
                        output="", long_output="", started=1.0, duration=0.1,
                        perfdata=[{"label": "/", "value": 2, "uom": "KB"}]),
                relayed("STATS", uuid="router-1", source="router", hostname="rbox",
                        metrics={"router.agents": 3})])
    text = scrape(sink)
    got = series(text)
    assert got[f'fleetwatch_check_status{{check="check_disk",host="db1",instance="{UUID}"}}'] == 1
    assert got[f'fleetwatch_check_perfdata{{check="check_disk",host="db1",instance="{UUID}",'
               f'label="/"}}'] == 2048
    assert got['fleetwatch_router_agents{host="rbox",instance="router-1"}'] == 3
    assert got['fleetwatch_prometheus_sink_stats_total{instance="prom@test"}'] == 2
    assert got['fleetwatch_prometheus_sink_series{instance="prom@test"}'] == 4
    assert "# TYPE fleetwatch_load_1 gauge" in text
    assert "# TYPE fleetwatch_check_status gauge" in text
    om = scrape(sink, openmetrics=True)
    assert om.endswith("# EOF\n") and "# TYPE fleetwatch_load_1 gauge" in om
    assert series(om.replace("# EOF\n", "")) == {k: v for k, v in got.items()
                                                 if "prometheus_sink_scrapes" not in k} | {
        'fleetwatch_prometheus_sink_scrapes_total{instance="prom@test"}': 2.0}


def test_hostile_names_and_values_stay_inert(sink):
    from prometheus_client.parser import text_string_to_metric_families
    hostile = 'web"1\n# EOF\r\x00<script>alert(1)</script>\\'
    sink.write([relayed("HELLO", hostname=hostile, heartbeat=2.0, role="agent"),
                relayed("STATS", hostname=hostile, metrics={
                    "x\ny": 1, '"}{a="b': 2, "<img src=x>": 3, "\ud800": 4, "y" * 10000: 5}),
                relayed("RESULT", command_id="c" * 24, plugin='p"\n', status=0, output="",
                        long_output="", started=1.0, duration=0.1,
                        perfdata=[{"label": "\x1b]0;t\x07", "value": 1, "uom": ""}])])
    text = scrape(sink)
    lines = text.splitlines()
    assert all(line.startswith(("# HELP fleetwatch_", "# TYPE fleetwatch_", "fleetwatch_"))
               for line in lines), text
    assert not any(c in text for c in "\r\x00\x1b\x07")
    parsed = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for f in text_string_to_metric_families(text) for s in f.samples}
    host = 'web"1\ufffd# EOF\ufffd\ufffd<script>alert(1)</script>\\'
    assert parsed[("fleetwatch_x_y", (("host", host), ("instance", UUID)))] == 1
    assert parsed[("fleetwatch_a_b", (("host", host), ("instance", UUID)))] == 2
    assert parsed[("fleetwatch_img_src_x", (("host", host), ("instance", UUID)))] == 3
    assert parsed[("fleetwatch_check_perfdata", (("check", 'p"\ufffd'), ("host", host),
                                                 ("instance", UUID),
                                                 ("label", "\ufffd]0;t\ufffd")))] == 1
    assert sink.counts["bad_metric"] == 1 and sink.counts["bad_name"] == 1


def test_stale_series_leave_the_scrape_then_the_table(sink):
    sink.write([relayed("STATS", hostname="h1", metrics={"a": 1})])
    sink.test_clock.now += 30
    sink.write([relayed("STATS", uuid="b" * 32, hostname="h2", metrics={"a": 2})])
    sink.test_clock.now += 31
    got = series(scrape(sink))
    assert [k for k in got if k.startswith("fleetwatch_a{")] == [
        f'fleetwatch_a{{host="h2",instance="{"b" * 32}"}}']
    sink.tick()
    assert sink.counts["series"] == 1 and sink.counts["expired"] == 1


def test_the_endpoint_serves_over_http(sink):
    import urllib.request
    sink.start()
    sink.write([relayed("STATS", hostname="h1", metrics={"a": 1})])
    with urllib.request.urlopen(sink.server.url(), timeout=5) as r:
        assert r.headers["Content-Type"].startswith("text/plain")
        assert f'fleetwatch_a{{host="h1",instance="{UUID}"}} 1.0' in r.read().decode()
    req = urllib.request.Request(sink.server.url(), headers={
        "Accept": "application/openmetrics-text; version=1.0.0"})
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.headers["Content-Type"].startswith("application/openmetrics-text")
        assert r.read().decode().endswith("# EOF\n")


# ---------------------------------------------------------------- config

def test_prometheus_section_defaults_and_errors():
    cfg = build(SinkConfig, {"routers": ["tcp://r:1"]})
    assert cfg.prometheus == PrometheusSettings()
    assert split_listen(cfg.prometheus.listen) == ("127.0.0.1", 9464)
    assert split_listen("[::1]:0") == ("::1", 0)
    for bad, key in [({"listen": "9464"}, "prometheus.listen"),
                     ({"listen": "h:99999"}, "prometheus.listen"),
                     ({"listen": "a b:1"}, "prometheus.listen"),
                     ({"prefix": "1x"}, "prometheus.prefix"),
                     ({"prefix": "a.b"}, "prometheus.prefix"),
                     ({"stale_after": 0}, "prometheus.stale_after"),
                     ({"max_series": 0}, "prometheus.max_series"),
                     ({"maxseries": 1}, "prometheus.maxseries")]:
        with pytest.raises(ConfigError) as e:
            build(SinkConfig, {"routers": ["tcp://r:1"], "prometheus": bad}, "s.yaml")
        assert e.value.key == key


def test_without_prometheus_client_the_extra_is_named(monkeypatch):
    import sys
    from fleetwatch.optional import MissingDependency
    from sinks import load_sink
    for name in [m for m in sys.modules if m.startswith("sinks.prometheus.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingDependency, match=r"pip install 'fleetwatch\[prometheus\]'"):
        load_sink("prometheus")


def test_default_routes_reach_prometheus_only_where_bound():
    from router.config import DEFAULT_ROUTES, RouterBind, RouterConfig
    assert RouterConfig().routes == DEFAULT_ROUTES
    assert "prometheus" in DEFAULT_ROUTES["STATS"] and "prometheus" in DEFAULT_ROUTES["RESULT"]
    older = build(RouterConfig, {"bind": {"sinks": {"registry": "tcp://*:1",
                                                    "alerting": "tcp://*:2"}}})
    assert older.routes["RESULT"] == ["alerting"] and older.routes["STATS"] == []
    assert older.durable_routes() == {"NOTIFY": ["alerting"], "REGISTER": ["registry"]}
    assert RouterConfig().durable_routes() == RouterConfig(
        bind=RouterBind(sinks={t: "tcp://*:1" for t in ("registry", "alerting", "graphite",
                                                           "history")})).durable_routes()
