"""Each family the prometheus sink serves has its type and its own help
(sinks/prometheus/catalogue.py): the STATS names fleetwatch's own parts send (an agent's
collectors over this machine, its own counters, a router's, a sink's, a scheduler's) are
gauges or counters (counters served as ``NAME_total``), a name fleetwatch does not know
stays untyped; the exposition text holds that, and ``promtool check metrics`` (Debian's
prometheus, when installed) finds nothing but the two names agents send that Prometheus'
naming lint dislikes. The real sink, router and agent: tests/integration/test_prometheus.py."""

from __future__ import annotations

import shutil
import subprocess

import pytest

pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.openmetrics.exposition import generate_latest as openmetrics  # noqa: E402,E501

from agent import runner, selfstats  # noqa: E402
from agent.collectors import Collectors  # noqa: E402
from agent.config import COLLECTORS  # noqa: E402
from router.counters import Counters  # noqa: E402
from sinks.prometheus.catalogue import kind  # noqa: E402
from sinks.prometheus.exposition import TableCollector  # noqa: E402
from sinks.prometheus.names import Namer  # noqa: E402
from sinks.prometheus.table import SeriesTable  # noqa: E402

#: what promtool's lint says of names the agents send (kept as Graphite has them)
NAMING_LINT = {"fleetwatch_memory_total", "fleetwatch_swap_total", "fleetwatch_procs_count"}


def own_names() -> dict[str, str]:
    """STATS name -> who sends it, from the parts that send them."""
    names = {}
    host = Collectors(COLLECTORS)
    host.prime()
    names.update(dict.fromkeys(host.collect(), "agent host"))
    names.update(dict.fromkeys(selfstats.COUNTERS + runner.COUNTERS, "agent"))
    names.update(dict.fromkeys(("agent.spool.size", "agent.routers.alive", "agent.uptime",
                                "agent.runs.running", "agent.plugins.declared"), "agent"))
    counters = Counters(("NOTIFY", "STATS"))
    for type_, sink in (("NOTIFY", "alerting"), ("STATS", "history")):
        counters.slot(type_, sink)
    counters.count_bad(404)
    counters.refused["unknown_key"] += 1
    names.update(dict.fromkeys(counters.metrics(3, 1), "router"))
    names.update(dict.fromkeys(("sink.received", "sink.prometheus.series",
                                "sink.graphite.buffered", "sink.alerting.result_bad",
                                "scheduler.fired", "scheduler.jobs"), "process"))
    return names


def test_fleetwatch_s_own_names_are_typed_each_with_its_own_help():
    namer = Namer()
    found = {}
    for raw, who in own_names().items():
        family = namer.family(raw)[len(namer.prefix):]
        found[family] = kind(family)
        assert found[family][0] in ("gauge", "counter"), (raw, who, found[family])
    helps = [h for _, h in found.values()]
    assert len(set(helps)) == len(helps), "two families with one help"
    assert kind("cpu_percent")[0] == "gauge" and kind("netio_bytes_sent")[0] == "counter"
    assert kind("disk_var_lib_free") == ("gauge", "space free on the filesystem mounted at "
                                                  "var_lib, bytes")
    assert kind("router_relayed_NOTIFY_alerting") == (
        "counter", "NOTIFY messages the router relayed to alerting sinks")
    assert kind("router_agents")[0] == kind("sink_prometheus_series")[0] == "gauge"
    assert kind("scheduler_jobs")[0] == "gauge" and kind("scheduler_fired")[0] == "counter"
    assert kind("backup_seconds") == ("unknown", "latest value of the STATS metric "
                                                 "backup_seconds (not one of fleetwatch's own: "
                                                 "its sender knows what it is)")


def exposition(stats: dict) -> tuple[str, str]:
    """The text format and OpenMetrics of a sink's table holding ``stats`` of one agent
    and a check's status."""
    namer, table = Namer(), SeriesTable(1000, 300.0, clock=lambda: 0.0)
    samples, _ = namer.stats(stats, "web-1", "uuid-1")
    samples += namer.result("load", 0, [], "web-1", "uuid-1")[0]
    table.write(samples)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TableCollector(table, namer.prefix, "sink-1",
                                     own=lambda: {"stats": 1, "series": 3}))
    return generate_latest(registry).decode(), openmetrics(registry).decode()


def test_the_exposition_types_gauges_and_counters_and_leaves_only_the_unknown_untyped():
    text, om = exposition({"cpu.percent": 12.5, "netio.bytes_sent": 1e6,
                           "router.relayed.NOTIFY.alerting": 7, "backup.seconds": 312.5})
    assert "# TYPE fleetwatch_cpu_percent gauge\nfleetwatch_cpu_percent{" in text
    assert "# TYPE fleetwatch_netio_bytes_sent_total counter\n" \
           "fleetwatch_netio_bytes_sent_total{" in text
    assert "# TYPE fleetwatch_router_relayed_NOTIFY_alerting counter\n" \
           "fleetwatch_router_relayed_NOTIFY_alerting_total{" in om
    assert "# TYPE fleetwatch_check_status gauge" in text
    untyped = [line for line in text.splitlines() if line.startswith("# TYPE")
               and line.endswith(" untyped")]
    assert untyped == ["# TYPE fleetwatch_backup_seconds untyped"]
    assert "# HELP fleetwatch_cpu_percent CPU busy, percent of all CPUs" in text


@pytest.mark.skipif(not shutil.which("promtool"), reason="no promtool (Debian's prometheus)")
def test_promtool_finds_nothing_but_the_names_agents_send():
    stats = {name: 1 for name in own_names()}
    text, _ = exposition(stats)
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=30)
    problems = {line.split()[0] for line in (res.stdout + res.stderr).splitlines()
                if line.strip()}
    assert problems <= NAMING_LINT, res.stdout + res.stderr
