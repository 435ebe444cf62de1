"""Distinct metric names per host, without a socket (issue 31, item 5): the cap itself
(:mod:`fleetwatch.cardinality`, an injected clock), the agent's intake, the graphite sink's
paths and the prometheus sink's table and exposition, each refusing one host's flood while
the other hosts go on, and counting what it refused per host."""

from __future__ import annotations

import pytest

from fleetwatch import protocol
from fleetwatch.cardinality import FORGET_AFTER, NameCap, Refusals

from support.clock import Clock

pytestmark = pytest.mark.timeout(30)

FLOOD = {f"flood.m{i}": float(i) for i in range(200)}


# ---------------------------------------------------------------- the cap

def test_a_full_owner_keeps_its_names_and_is_refused_new_ones():
    cap = NameCap(3, clock=Clock(0.0))
    assert [cap.admit("web1", n) for n in "abcde"] == [True, True, True, False, False]
    assert cap.admit("web1", "a") and cap.admit("web1", "c")       # held: always taken
    assert all(cap.admit("db1", n) for n in "xyz")                  # another owner: its own
    assert (len(cap), cap.held("web1"), cap.held("db1")) == (6, 3, 3)


def test_a_name_unseen_for_a_day_frees_its_place():
    clock = Clock(0.0)
    cap = NameCap(2, clock=clock)
    assert cap.admit("h", "old") and cap.admit("h", "kept")
    clock.advance(FORGET_AFTER / 2)
    assert cap.admit("h", "kept") and not cap.admit("h", "new")
    clock.advance(FORGET_AFTER / 2 + FORGET_AFTER / 12)
    assert cap.admit("h", "new")                        # "old" forgotten, "kept" seen since
    assert not cap.admit("h", "newer") and cap.admit("h", "kept")
    assert len(cap) == 2


def test_a_flood_past_the_cap_looks_the_owner_over_once_a_period():
    clock = Clock(0.0)
    cap = NameCap(100, clock=clock)
    for i in range(100):
        cap.admit("h", i)
    swept = []
    cap.owners["h"] = Watched(cap.owners["h"], swept)
    assert not any(cap.admit("h", f"new{i}") for i in range(10_000))
    assert len(swept) == 1 and cap.held("h") == 100     # one look in the period, not 10,000
    clock.advance(FORGET_AFTER + FORGET_AFTER / 24)     # a day, and the period it was in
    assert cap.admit("h", "after a day") and len(swept) == 2


class Watched(dict):
    """An owner's names that note each time they are looked over."""

    def __init__(self, names: dict, looks: list):
        super().__init__(names)
        self.looks = looks

    def items(self):
        self.looks.append(1)
        return super().items()


def test_owners_are_bounded_oldest_first():
    cap = NameCap(5, clock=Clock(0.0), max_owners=2)
    for owner in ("a", "b", "c"):
        cap.admit(owner, "x")
        cap.admit(owner, "y")
    assert list(cap.owners) == ["b", "c"] and len(cap) == 4


def test_refusals_per_owner_are_bounded_and_reported_worst_first():
    refusals = Refusals(size=2)
    refusals.add("web1.example.com", 5)
    refusals.add("db1", 9)
    refusals.add("third", 1)                            # past size: in the total only
    refusals.add("web1.example.com", 1)
    assert refusals.total == 16
    assert refusals.worst() == [("db1", 9), ("web1.example.com", 6)]
    assert refusals.counters("names_refused_by_host") == {
        "names_refused_by_host.db1": 9, "names_refused_by_host.web1_example_com": 6}


# ---------------------------------------------------------------- the agent's intake

def test_the_intake_refuses_names_past_the_cap_and_queues_the_rest():
    from agent.intake import Intake
    intake = Intake("agent-uuid", "web-1", max_metric_names=20, clock=Clock(0.0))
    first = protocol.make("STATS", "local", metrics=dict(list(FLOOD.items())[:5]))
    msg, err = intake.accept(protocol.encode(first))
    assert err is None and len(msg.get("metrics")) == 5
    flood = protocol.make("STATS", "local", metrics=FLOOD)
    msg, err = intake.accept(protocol.encode(flood))
    assert list(msg.get("metrics")) == list(FLOOD)[:20]             # the first 20 names
    assert (err.type, err.get("status"), err.get("ref")) == ("ERROR", 429, flood.msg_id)
    assert err.get("reason") == ("180 of 200 metric names refused: local processes have "
                                 "their 20 distinct names (local.max_metric_names); the "
                                 "others were queued")
    # only new names: nothing queued, the same answer
    msg, err = intake.accept(protocol.encode(protocol.make("STATS", "local",
                                                           metrics={"other": 1})))
    assert msg is None and err.get("status") == 429
    # names it holds go on, answered ACK by the daemon
    msg, err = intake.accept(protocol.encode(protocol.make("STATS", "local",
                                                           metrics={"flood.m3": 1})))
    assert err is None and msg.get("metrics") == {"flood.m3": 1}
    assert (intake.names_refused, len(intake.metric_names)) == (181, 20)
    # a STATS with no metrics at all is not a refusal
    msg, err = intake.accept(protocol.encode(protocol.make("STATS", "local", metrics={})))
    assert err is None and msg.get("metrics") == {}


def test_max_metric_names_is_a_local_setting():
    from agent.config import AgentConfig, MAX_METRIC_NAMES
    from fleetwatch.config import ConfigError, build
    cfg = build(AgentConfig, {"routers": ["tcp://r:1"]}, "agent.yaml")
    assert cfg.local.max_metric_names == MAX_METRIC_NAMES == 500
    with pytest.raises(ConfigError, match="local.max_metric_names: expected at least 1"):
        build(AgentConfig, {"routers": ["tcp://r:1"], "local": {"max_metric_names": 0}},
              "agent.yaml")


# ---------------------------------------------------------------- the graphite sink

def stats(uuid: str, hostname: str, metrics: dict, source: str | None = None):
    extra = {"source": source} if source else {}
    msg = protocol.make("STATS", uuid, hostname=hostname, metrics=metrics,
                        clock=lambda: 1_700_000_000.0, **extra)
    return protocol.Relayed(uuid, "r1", msg)


def test_graphite_sends_at_most_the_cap_of_paths_a_host_and_counts_the_rest():
    from sinks.graphite.config import GraphiteSettings
    from sinks.graphite.sink import GraphiteSink
    sink = GraphiteSink(GraphiteSettings(prefix="fleet", max_names_per_host=10), "g")
    try:
        sink.write([stats("a" * 32, "flood.example.com", FLOOD),
                    stats("b" * 32, "web1", {"cpu.percent": 5, "load.1": 1})])
        paths = {line.split()[0].decode() for line in sink.buffer.lines}
        flooded = {p for p in paths if p.startswith("fleet.flood_example_com.")}
        assert flooded == {f"fleet.flood_example_com.flood.m{i}" for i in range(10)}
        assert {"fleet.web1.cpu.percent", "fleet.web1.load.1"} <= paths
        counts = sink.counts
        assert counts["names_refused"] == 190
        assert counts["names_refused_by_host.flood_example_com"] == 190
        assert counts["names"] == 12
        # its own counters are never refused, and say it
        sink.report_own()
        own = {line.split()[0].decode() for line in sink.buffer.lines} - paths
        assert "fleet.fleetwatch.g.graphite.names_refused_by_host.flood_example_com" in own
        assert len(own) > 10
    finally:
        sink.buffer.close()


def test_graphite_caps_a_process_and_a_check_too():
    from sinks.graphite.paths import Namer
    namer = Namer(cap=NameCap(3, clock=Clock(0.0)))
    points, counts = namer.result("check_x", 0, [{"label": f"l{i}", "value": i, "uom": ""}
                                                 for i in range(5)], 0, "web1")
    assert [p.name for p in points] == ["web1.checks.check_x.status",
                                        "web1.checks.check_x.l0", "web1.checks.check_x.l1"]
    assert counts["names_refused"] == 3
    points, counts = namer.stats({f"router.m{i}": i for i in range(5)}, 0, "web1",
                                 internal=True)                 # router "web1": its own
    assert len(points) == 3 and counts["names_refused"] == 2


def test_max_names_per_host_is_a_graphite_setting():
    from fleetwatch.config import ConfigError, build
    from sinks.graphite.config import GraphiteSettings
    assert GraphiteSettings().max_names_per_host == 1000
    with pytest.raises(ConfigError, match="max_names_per_host: expected at least 1"):
        build(GraphiteSettings, {"max_names_per_host": 0}, "sink.yaml")


# ---------------------------------------------------------------- the prometheus sink

def test_one_host_flooding_leaves_the_others_room_in_the_table():
    from sinks.prometheus.names import Sample
    from sinks.prometheus.table import SeriesTable
    clock = Clock(0.0)
    table = SeriesTable(max_series=30, stale_after=60, clock=clock, max_per_owner=20)
    assert table.write([Sample(f"m{i}", ("flood", "u1"), i) for i in range(200)]) == 180
    assert table.write([Sample(f"m{i}", ("web1", "u2"), i) for i in range(5)]) == 0
    assert table.write([Sample("m0", ("flood", "u1"), 7)]) == 0          # held: updated
    assert (len(table), table.owned["u1"], table.owned["u2"]) == (25, 20, 5)
    assert table.counts["dropped_max_series_per_host"] == 180
    assert table.counts["dropped_max_series"] == 0
    assert table.refused_hosts(10) == [("flood", 180)]
    clock.advance(61)                                   # its share comes back when stale
    table.expire()
    assert table.owned == {} and table.write([Sample("new", ("flood", "u1"), 1)]) == 0


def test_prometheus_counts_a_hosts_refused_series_in_stats_and_on_its_endpoint():
    pytest.importorskip("prometheus_client")
    from prometheus_client import exposition
    from sinks.prometheus.config import PrometheusSettings
    from sinks.prometheus.sink import PrometheusSink
    sink = PrometheusSink(PrometheusSettings(listen="127.0.0.1:0", max_series=30,
                                             max_series_per_host=20), "prom@test")
    sink.write([stats("a" * 32, "flood.example.com", FLOOD),
                stats("b" * 32, "web1", {"cpu.percent": 5})])
    counts = sink.counts
    assert counts["dropped_max_series_per_host"] == 180
    assert counts["dropped_by_host.flood_example_com"] == 180
    assert counts["series"] == 21 and counts["dropped_max_series"] == 0
    text = exposition.generate_latest(sink.server.registry).decode()
    assert 'fleetwatch_cpu_percent{host="web1",instance="' + "b" * 32 + '"} 5.0' in text
    assert ('fleetwatch_prometheus_sink_dropped_by_host_total{host="flood.example.com",'
            'instance="prom@test"} 180.0') in text
    assert ('fleetwatch_prometheus_sink_dropped_max_series_per_host_total'
            '{instance="prom@test"} 180.0') in text
    assert sum(1 for line in text.splitlines() if line.startswith("fleetwatch_flood_m")) == 20


def test_max_series_per_host_is_a_prometheus_setting():
    from fleetwatch.config import ConfigError, build
    from sinks.prometheus.config import PrometheusSettings
    assert PrometheusSettings().max_series_per_host == 1000
    with pytest.raises(ConfigError, match="max_series_per_host: expected at least 1"):
        build(PrometheusSettings, {"max_series_per_host": 0}, "sink.yaml")


# ---------------------------------------------------------------- where it shows

def test_the_health_page_keeps_an_agent_whose_local_names_were_refused():
    pytest.importorskip("zmq")
    from web.health import Health, quiet

    def tail(metrics: dict) -> list[bytes]:
        return protocol.encode_tail(protocol.make("STATS", "a1", metrics=metrics), "a1", "r1")
    assert not quiet(tail({"agent.intake.names_refused": 180})[2])
    health = Health(lambda: [], clock=Clock(1000.0))
    health.take(tail({"agent.intake.names_refused": 180, "agent.spool.dropped": 0}))
    assert [(a["uuid"], a["drops"]) for a in health.snapshot()["agents"]] == [
        ("a1", {"agent.intake.names_refused": 180})]
