"""Graphite sink logic without carbon: names, units, the bounded buffer, the sender's retries,
the sink's translation of relayed messages, its config section and the sink registry."""

from __future__ import annotations

import re
import threading
import time
from collections import Counter

import pytest

from fleetwatch import protocol
from fleetwatch.config import ConfigError, build
from sinks import SINKS, load_sink
from fleetwatch.optional import MissingDependency
from sinks.graphite.sender import CarbonSender, LineBuffer
from sinks.config import SinkConfig
from sinks.graphite.config import GraphiteSettings
from sinks.graphite.paths import MAX_NODE, Namer, Point, dotted, node, normalise, tag_value
from fleetwatch.cardinality import NameCap
from fleetwatch.series import entries

pytestmark = pytest.mark.timeout(30)

TS = 1_700_000_000.75


# ---------------------------------------------------------------- names

@pytest.mark.parametrize("text, expected", [
    ("cpu", "cpu"),
    ("web1.example.com", "web1_example_com"),      # a hostname is one node
    ("/", "_"),                                      # check_disk's root label
    ("/var/lib", "_var_lib"),
    ("load avg", "load_avg"),
    ("a  b\tc", "a_b_c"),                            # a run of odd characters: one _
    ("time;host=x", "time_host_x"),                  # no tag injection
    ("héllo", "h_llo"),
    ("ok_-09AZ", "ok_-09AZ"),
    ("", ""),
])
def test_node(text, expected):
    assert node(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("cpu.percent", "cpu.percent"),
    ("disk.root.free", "disk.root.free"),
    ("a..b.", "a.b"),                                # empty nodes dropped
    (".lead", "lead"),
    ("net io.bytes/s", "net_io.bytes_s"),
    ("...", ""),
])
def test_dotted(text, expected):
    assert dotted(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("web1.example.com", "web1.example.com"),        # tag values keep their dots
    ("a b;c", "a_b_c"),
    ("~x", "_x"),                                    # Graphite: no leading ~
])
def test_tag_value(text, expected):
    assert tag_value(text) == expected


@pytest.mark.parametrize("value, uom, expected, known", [
    (5, "", 5, True),
    (12.5, "%", 12.5, True),
    (1234, "c", 1234, True),
    (100, "B", 100, True),
    (2, "KB", 2048, True),
    (3, "MB", 3 * 1024 ** 2, True),
    (1.5, "GB", 1.5 * 1024 ** 3, True),
    (2, "TB", 2 * 1024 ** 4, True),
    (2, "MiB", 2 * 1024 ** 2, True),
    (0.25, "s", 0.25, True),
    (250, "ms", 0.25, True),
    (250, "us", 0.00025, True),
    (7, "widgets", 7, False),                         # passed through, counted
])
def test_units(value, uom, expected, known):
    got, ok = normalise(value, uom)
    assert got == pytest.approx(expected) and ok is known


def test_stats_paths_and_floored_timestamps():
    points, counts = Namer().stats({"cpu.percent": 12.5, "disk.root.free": 10, "x y": 1},
                                   TS, "web1.example.com")
    assert points == [Point("web1_example_com.cpu.percent", 12.5, 1_700_000_000),
                      Point("web1_example_com.disk.root.free", 10, 1_700_000_000),
                      Point("web1_example_com.x_y", 1, 1_700_000_000)]
    assert not counts


def test_internal_counters_go_under_fleetwatch():
    points, _ = Namer().stats({"router.received.STATS": 3}, TS, "router-1", internal=True)
    assert points == [Point("fleetwatch.router-1.router.received.STATS", 3, 1_700_000_000)]


def test_tagged_series():
    namer = Namer(tagged=True)
    points, _ = namer.stats({"cpu.percent": 1}, TS, "web1.example.com")
    assert points == [Point("cpu.percent", 1, 1_700_000_000, (("host", "web1.example.com"),))]
    points, _ = namer.stats({"router.agents": 2}, TS, "r1", internal=True)
    assert points == [Point("fleetwatch.router.agents", 2, 1_700_000_000, (("id", "r1"),))]
    points, _ = namer.result("check_disk", 0, [], TS, "h")
    assert points == [Point("checks.check_disk.status", 0, 1_700_000_000, (("host", "h"),))]


def perf(label, value, uom="", **extra):
    return {"label": label, "value": value, "uom": uom, "warn": None, "crit": None,
            "min": None, "max": None, **extra}


def test_result_status_and_perfdata():
    perfdata = [perf("/", 25079840768, "B"), perf("time", 111, "ms"), perf("load1", 1.26),
                perf("swap", None, "B"), perf("odd", 3, "furlongs"), perf("", 1), "junk",
                perf("bad", "12")]
    points, counts = Namer().result("check.disk", 2, perfdata, TS, "db-1")
    assert [(p.name, p.value) for p in points] == [
        ("db-1.checks.check_disk.status", 2),
        ("db-1.checks.check_disk._", 25079840768),
        ("db-1.checks.check_disk.time", pytest.approx(0.111)),
        ("db-1.checks.check_disk.load1", 1.26),
        ("db-1.checks.check_disk.odd", 3),
    ]
    assert counts == Counter(perfdata_unknown=1, unit_unknown=1, perfdata_bad=3)


def test_too_long_names_are_counted_not_sent():
    points, counts = Namer().stats({"x" * (MAX_NODE + 1): 1, "ok": 2}, TS, "h")
    assert [p.name for p in points] == ["h.ok"] and counts == Counter(bad_name=1)


def test_owner_and_name_are_judged_apart_and_memories_stay_bounded():
    namer = Namer(cache_size=3)
    long_owner = "h" * (MAX_NODE + 1)
    points, counts = namer.stats({"ok": 1}, TS, long_owner)
    assert points == [] and counts == Counter(bad_name=1)
    # a name longer than MAX_NAME only once joined to its owner
    metric = ".".join(["m" * 100] * 9)
    assert [p.name for p in namer.stats({metric: 1}, TS, "h")[0]] == [f"h.{metric}"]
    assert namer.stats({metric: 1}, TS, "h" * 100)[1] == Counter(bad_name=1)
    for host in range(10):          # more owners and names than the memories hold
        points, _ = namer.stats({"a.b": 1, f"n{host}": 2}, TS, f"web{host}")
        assert [p.name for p in points] == [f"web{host}.a.b", f"web{host}.n{host}"]
    assert len(namer._owners) <= 3 and len(namer._metrics) <= 3

# ---------------------------------------------------------------- labelled series

def series(name_, value=1, kind="gauge", **labels):
    return {"name": name_, "labels": labels, "value": value, "kind": kind}


def labelled(*items):
    return entries(list(items), Counter())


def test_labelled_series_paths_a_node_per_label_in_key_order():
    got, counts = Namer().stats({}, TS, "web1.example.com", series=labelled(
        series("http.server.duration_bucket", 3, "counter",
               **{"service.name": "shop", "le": "0.005"}),
        series("http.server.duration_bucket", 9, "counter",
               **{"service.name": "shop", "le": "+Inf"}),
        series("queue", 4, host="other", instance="i", uuid="u", site="s", name="n"),
        series("merged", 5, **{"a.b": "1", "a_b": "2", "empty": ""}),
        series("bare", 6)))
    assert [(p.name, p.value, p.ts, p.tags) for p in got] == [
        ("web1_example_com.http.server.duration_bucket.le_0_005.service_name_shop", 3,
         1_700_000_000, ()),
        ("web1_example_com.http.server.duration_bucket.le__Inf.service_name_shop", 9,
         1_700_000_000, ()),
        # the fleet's keys and Graphite's name: never the series' own
        ("web1_example_com.queue.exported_host_other.exported_instance_i.exported_name_n."
         "exported_site_s.exported_uuid_u", 4, 1_700_000_000, ()),
        ("web1_example_com.merged.a_b_1_2", 5, 1_700_000_000, ()),   # a.b and a_b joined
        ("web1_example_com.bare", 6, 1_700_000_000, ()),              # no labels: the metric
    ]
    assert counts == Counter()


def test_labelled_series_tagged():
    got, _ = Namer(tagged=True).stats({"load.1": 0.5}, TS, "web1.example.com",
                                      series=labelled(
        series("http.server.duration_count", 7, "counter",
               **{"service.name": "shop", "http.route": "/cart;x=1", "host": "evil"}),
        series("bare", 6)))
    assert [(p.name, p.tags) for p in got] == [
        ("load.1", (("host", "web1.example.com"),)),
        ("http.server.duration_count", (("exported_host", "evil"), ("host", "web1.example.com"),
                                        ("http.route", "_cart_x_1"),
                                        ("service.name", "shop"))),
        ("bare", (("host", "web1.example.com"),)),
    ]


def test_labelled_series_are_names_of_the_host_under_the_cap():
    """Every label set is a path (a whisper file): a host's series and its metrics share
    ``max_names_per_host``."""
    for tagged in (False, True):
        namer = Namer(tagged, cap=NameCap(5))
        got, counts = namer.stats({"a": 1, "b": 2}, TS, "h", series=labelled(
            *(series("req", i, "counter", code=str(200 + i)) for i in range(6))))
        assert len(got) == 5 and counts == Counter(names_refused=3)
        again, counts = namer.stats({"a": 1}, TS, "h", series=labelled(
            series("req", 1, "counter", code="200")))
        assert len(again) == 2 and counts == Counter()     # held paths keep updating


def test_labelled_series_too_long_for_a_node_or_a_tagged_line():
    long_value = {"k": "v" * 250}                          # a node of 252 characters
    got, counts = Namer().stats(None, TS, "h", series=labelled(
        series("a", 1, **long_value), series("b", 2)))
    assert [p.name for p in got] == ["h.b"] and counts == Counter(bad_name=1)
    many = {f"key{i:02d}": "v" * 200 for i in range(30)}  # 6,000 characters of tags
    got, counts = Namer(tagged=True).stats(None, TS, "h", series=labelled(
        series("a", 1, **long_value), series("c", 3, **many)))
    assert [p.name for p in got] == ["a"] and counts == Counter(bad_name=1)


# ---------------------------------------------------------------- the sink's translation

def relayed(type_, uuid="a" * 32, router="r1", **fields):
    msg = protocol.make(type_, uuid, **fields)
    return protocol.Relayed(uuid, router, msg)


@pytest.fixture
def sink():
    from sinks.graphite.sink import GraphiteSink
    s = GraphiteSink(GraphiteSettings(prefix="fleet", port=9), "graphite@test")
    yield s
    s.buffer.close()


def queued(sink) -> list[bytes]:
    return list(sink.buffer.lines)


def test_sink_builds_graphyte_lines_with_prefix(sink):
    sink.write([relayed("STATS", hostname="web1.example.com", metrics={"cpu.percent": 12.5},
                        clock=lambda: TS)])
    assert queued(sink) == [b"fleet.web1_example_com.cpu.percent 12.5 1700000000\n"]


def test_result_uses_the_hostname_learnt_else_the_uuid(sink):
    result = dict(command_id="c1", plugin="check_load", status=1, output="LOAD WARNING",
                  perfdata=[perf("load1", 4.2)], started=TS - 5)
    sink.write([relayed("RESULT", uuid="b" * 32, clock=lambda: TS, **result)])
    sink.write([relayed("HELLO", uuid="b" * 32, hostname="app.local", heartbeat=1.0),
                relayed("RESULT", uuid="b" * 32, clock=lambda: TS, **result)])
    assert queued(sink) == [
        b"fleet." + b"b" * 32 + b".checks.check_load.status 1 1699999995\n",
        b"fleet." + b"b" * 32 + b".checks.check_load.load1 4.2 1699999995\n",
        b"fleet.app_local.checks.check_load.status 1 1699999995\n",
        b"fleet.app_local.checks.check_load.load1 4.2 1699999995\n",
    ]
    assert sink.counts["result_no_host"] == 1 and sink.counts["hellos"] == 1


def test_router_stats_under_fleetwatch(sink):
    sink.write([relayed("STATS", uuid="r1", router="r1", source="router", hostname="box",
                        metrics={"router.agents": 3}, clock=lambda: TS)])
    assert queued(sink) == [b"fleet.fleetwatch.r1.router.agents 3 1700000000\n"]


def test_an_agent_s_stats_is_filed_under_its_host_whatever_its_source(sink):
    """Issue 31 item 6: the router's stamp says whose counters a STATS carries; an agent's
    saying source router or sink is the agent's host's; a sink's, from control (its id
    ends the path), is under fleetwatch."""
    sink.write([relayed("HELLO", hostname="web1", heartbeat=1.0)])
    for source in ("router", "sink", "scheduler"):
        sink.write([relayed("STATS", source=source, metrics={"x": 1}, clock=lambda: TS)])
    sink.write([protocol.Relayed("sink-a", "r1", protocol.make(
        "STATS", "sink-a", metrics={"sink.y": 2}, source="sink", clock=lambda: TS),
        path=("r1", "sink-a"))])
    assert queued(sink) == [b"fleet.web1.x 1 1700000000\n"] * 3 + [
        b"fleet.fleetwatch.sink-a.sink.y 2 1700000000\n"]


def test_tagged_lines():
    from sinks.graphite.sink import GraphiteSink
    s = GraphiteSink(GraphiteSettings(prefix="fleet", tags=True), "g")
    s.write([relayed("STATS", hostname="web1.example.com", metrics={"load.1": 0.5},
                     clock=lambda: TS)])
    assert list(s.buffer.lines) == [b"fleet.load.1;host=web1.example.com 0.5 1700000000\n"]


def test_a_stats_with_series_gives_a_line_per_series_and_counts_the_malformed(sink):
    sink.write([relayed("STATS", hostname="web1", metrics={}, clock=lambda: TS, series=[
        series("http.requests", 12, "counter", **{"service.name": "shop"}),
        {"name": "bad", "value": "12"}, "junk", {"name": "", "value": 1}])])
    assert queued(sink) == [b"fleet.web1.http.requests.service_name_shop 12 1700000000\n"]
    assert sink.counts["series_bad"] == 3 and sink.counts["datapoints"] == 1
    sink.write([relayed("STATS", hostname="web1", metrics={"a": 1}, series="not a list",
                        clock=lambda: TS)])
    assert sink.counts["series_bad"] == 4 and queued(sink)[-1] == b"fleet.web1.a 1 1700000000\n"


def test_tagged_lines_of_series():
    from sinks.graphite.sink import GraphiteSink
    s = GraphiteSink(GraphiteSettings(prefix="fleet", tags=True), "g")
    s.write([relayed("STATS", hostname="web1.example.com", metrics={}, clock=lambda: TS,
                     series=[series("http.server.duration_bucket", 3, "counter",
                                    le="0.005", **{"service.name": "shop"})])])
    assert list(s.buffer.lines) == [
        b"fleet.http.server.duration_bucket;host=web1.example.com;le=0.005;service.name=shop"
        b" 3 1700000000\n"]


def test_hostile_series_are_inert_bounded_and_counted():
    """Control characters, huge labels and 10,000 label sets from one host: every line is
    one line of carbon's protocol, the host gets its ``max_names_per_host`` paths, the rest
    is counted, and the sink goes on."""
    from sinks.graphite.sink import GraphiteSink
    for tags in (False, True):
        s = GraphiteSink(GraphiteSettings(prefix="fleet", tags=tags, max_names_per_host=100,
                                          buffer=1_000_000), "g")
        try:
            hostile = [series("a\nb c\x00", 1, **{"k\x1b[2J": "v\r\n x;y=z", "host": "victim"}),
                       series("big", 2, **{f"k{i}": "v" * 255 for i in range(64)}),
                       series("ok", 3, k="x" * 256)]                   # past 255: malformed
            flood = [series("flood", i, "counter", id=str(i)) for i in range(10_000)]
            for start in range(0, len(flood), 2000):                    # STATS of 2,000
                part = (hostile if not start else []) + flood[start:start + 2000]
                s.write([relayed("STATS", hostname="web1", metrics={}, clock=lambda: TS,
                                 series=part)])
            lines = list(s.buffer.lines)
            assert len(lines) == 100                        # the host's paths, no more
            for line in lines:
                assert line.endswith(b"\n") and line.count(b" ") == 2
                assert not any(c in line[:-1] for c in b"\r\n\x00\x1b\t")
                assert not re.search(rb"^fleet\.victim\.|;host=victim", line)
            assert lines[0] == (
                b"fleet.a_b_c_;exported_host=victim;host=web1;k_2J=v_x_y_z 1 1700000000\n"
                if tags else b"fleet.web1.a_b_c_.exported_host_victim.k_2J_v_x_y_z 1 "
                             b"1700000000\n")
            # 64 labels of 255 characters: a node past 200, or tags past 4,000
            assert s.counts["bad_name"] == 1 and s.counts["series_bad"] == 1
            assert s.counts["names_refused"] == 10_000 - 99
            assert s.counts["names_refused_by_host.web1"] == 10_000 - 99
        finally:
            s.buffer.close()


def test_own_counters_are_queued(sink):
    sink.write([relayed("STATS", hostname="h", metrics={"a": 1}, clock=lambda: TS)])
    sink.report_own()
    own = [line for line in queued(sink) if line.startswith(b"fleet.fleetwatch.graphite_test.")]
    names = {line.split()[0].decode() for line in own}
    assert "fleet.fleetwatch.graphite_test.graphite.stats" in names
    assert "fleet.fleetwatch.graphite_test.graphite.dropped_overflow" in names


def test_hostnames_are_bounded():
    from sinks.graphite.sink import HostNames
    hosts = HostNames(2)
    hosts.hello("u1", "h1")
    hosts.hello("u2", "h2")
    hosts.get("u1")
    hosts.hello("u3", "h3")
    assert (hosts.get("u1"), hosts.get("u2"), hosts.get("u3")) == ("h1", None, "h3")


# ---------------------------------------------------------------- buffer and sender

def test_buffer_drops_oldest_and_counts():
    buf = LineBuffer(5, 2)
    assert buf.put([b"1", b"2", b"3"]) == 0
    chunk = buf.take(0)                            # 2 in flight still count
    assert chunk == [b"1", b"2"]
    assert buf.put([b"4", b"5", b"6"]) == 1        # 2 in flight + 4 queued > 5
    assert list(buf.lines) == [b"4", b"5", b"6"] and buf.dropped == 1
    buf.done(2)
    assert len(buf) == 3


class FakeCarbon:
    """deliver() stand-in: refuses while ``down``, records what it accepts."""

    def __init__(self):
        self.down = False
        self.got: list[bytes] = []
        self.calls = 0

    def __call__(self, data, host, port, timeout):
        self.calls += 1
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        self.got.extend(data.splitlines(keepends=True))


def wait(pred, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_sender_retries_until_carbon_is_back_and_loses_nothing():
    buf, carbon = LineBuffer(1000, 10), FakeCarbon()
    carbon.down = True
    sender = CarbonSender(buf, "x", 1, flush_interval=0.01, backoff_min=0.01,
                          backoff_max=0.02, deliver=carbon)
    sender.start()
    lines = [b"m %d 1\n" % i for i in range(95)]
    buf.put(lines)
    wait(lambda: carbon.calls >= 3)
    assert carbon.got == [] and len(buf) == 95
    carbon.down = False
    wait(lambda: len(carbon.got) == 95)
    assert carbon.got == lines                       # in order, each once
    assert sender.stop(1.0) == 0
    snap = sender.snapshot()
    assert snap["sent"] == 95 and snap["send_failures"] >= 3


def test_sender_gives_up_at_stop_and_counts():
    buf, carbon = LineBuffer(100, 10), FakeCarbon()
    carbon.down = True
    sender = CarbonSender(buf, "x", 1, flush_interval=0.01, backoff_min=0.01,
                          backoff_max=0.01, deliver=carbon)
    sender.start()
    buf.put([b"m 1 1\n"] * 15)
    t0 = time.monotonic()
    assert sender.stop(0.2) == 15
    assert time.monotonic() - t0 < 2.0
    assert sender.snapshot()["dropped_at_exit"] == 15


def test_sender_flushes_at_stop():
    buf, carbon = LineBuffer(100, 50), FakeCarbon()
    sender = CarbonSender(buf, "x", 1, flush_interval=60.0, deliver=carbon)
    sender.start()
    buf.put([b"m 1 1\n"] * 7)                       # less than a batch: waits for the flush
    assert sender.stop(2.0) == 0 and len(carbon.got) == 7


def test_put_never_blocks_while_carbon_hangs():
    release = threading.Event()

    def hanging(data, host, port, timeout):
        release.wait(5)

    buf = LineBuffer(10, 5)
    sender = CarbonSender(buf, "x", 1, flush_interval=0.01, deliver=hanging)
    sender.start()
    t0 = time.monotonic()
    for _ in range(100):
        buf.put([b"m 1 1\n"] * 5)
    assert time.monotonic() - t0 < 0.5 and buf.dropped > 0
    release.set()
    sender.stop(1.0)


# ---------------------------------------------------------------- config and registry

def test_graphite_section_defaults_and_errors():
    cfg = build(SinkConfig, {"routers": ["tcp://r:1"], "graphite": {"port": 2103,
                                                                    "prefix": "dc1.fleet"}})
    assert cfg.graphite.port == 2103 and cfg.graphite.buffer == 100000
    for bad, key in [({"port": 0}, "graphite.port"), ({"prefix": "a..b"}, "graphite.prefix"),
                     ({"tags": "yes"}, "graphite.tags"), ({"buffr": 1}, "graphite.buffr"),
                     ({"reconnect_max": 0.1}, "graphite.reconnect_max")]:
        with pytest.raises(ConfigError) as e:
            build(SinkConfig, {"routers": ["tcp://r:1"], "graphite": bad}, "s.yaml")
        assert e.value.key == key


def test_every_registered_sink_loads_or_names_its_extra():
    """Each type imports, or fails with the documented "pip install 'fleetwatch[EXTRA]'"."""
    for name in SINKS:
        try:
            cls = load_sink(name)
        except MissingDependency as e:
            assert "pip install 'fleetwatch[" in str(e), e
            continue
        assert cls.type == name and cls.acks <= cls.handles
        assert callable(getattr(cls, "from_config"))


def test_graphite_without_graphyte_names_the_extra(monkeypatch):
    import sys
    monkeypatch.delitem(sys.modules, "sinks.graphite.sink", raising=False)
    monkeypatch.setitem(sys.modules, "graphyte", None)
    with pytest.raises(MissingDependency, match=r"pip install 'fleetwatch\[graphite\]'"):
        load_sink("graphite")
