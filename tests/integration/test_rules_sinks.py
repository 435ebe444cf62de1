"""Rules on series in alerting sinks on a real state database (SQLite, then PostgreSQL),
on a fake clock: what two sinks that see the same tails tell, and what a sink that
replaces a dead one tells.

Each sink is fed every STATS (``observe``, as its tail gives it) while the heartbeats and
results take the PUSH's round robin (``write`` of one sink or the other); both tick. The
rule's transitions are told once each, whichever sink evaluated first; a new sink that
starts while a problem is firing goes on with it (no false recovery, no second page); a
host that goes DOWN holds its rules (an ``absent`` rule does not page for it); a series
that stops while the host heartbeats is UNKNOWN (stale), never OK.
"""

from __future__ import annotations

import functools

import pytest

from support.clock import Clock
from support.threads import in_threads

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from support import alertsink  # noqa: E402
from support.alertsink import T0, WEB, beat, msg  # noqa: E402

RULES = [
    {"name": "disk_full", "expr": "avg(disk.root.used_percent, 30s)", "warning": "> 80",
     "critical": "> 90", "for": "20s", "stale_after": "30s"},
    {"name": "stats_gone", "expr": "absent(cpu.percent, 30s)", "critical": "== 1"},
]
sink = functools.partial(alertsink.sink, rules=RULES, rule_interval=5, rule_refresh=60,
                         renotify_interval=0, flap_detection=False, host_timeout=15)
KEY = f"{WEB}/check/rule:disk_full"


def stats(disk: float, cpu: bool = True):
    metrics = {"disk.root.used_percent": disk, "load.1": 0.5}
    if cpu:
        metrics["cpu.percent"] = 3.0
    return msg("STATS", metrics=metrics)


def told(url, key=KEY) -> list[tuple[str, str]]:
    return [(e["action"], e["severity"]) for e in alertsink.alert_events(url, key)]


def run(sinks, clock, seconds: int, disk, cpu: bool = True, beats: bool = True) -> None:
    """``seconds`` of a host sending STATS every second (``disk(t)`` its disk use) to every
    sink's tail and its heartbeats to one sink or the other; every sink ticks."""
    for _ in range(seconds):
        now = clock.advance(1)
        if disk is not None:
            for s in sinks:
                s.observe(stats(disk(now), cpu))
        if beats:
            sinks[int(now) % len(sinks)].write([beat()])
        in_threads(*(s.tick for s in sinks))


def test_two_sinks_tell_each_transition_once_and_a_new_sink_goes_on(url):
    alertsink.hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    try:
        run([a, b], clock, 40, lambda t: 50.0)                  # fine
        assert told(url) == []
        run([a, b], clock, 60, lambda t: 95.0)                  # full, for 20 s: CRITICAL
        assert told(url) == [("trigger", "critical")]
        a.close()                                               # one dies; c replaces it
        c = sink(url, clock)
        run([b, c], clock, 30, lambda t: 95.0)                  # c: no recovery, no page
        b.close()
        run([c], clock, 30, lambda t: 95.0)
        assert told(url) == [("trigger", "critical")]
        run([c], clock, 30, lambda t: 40.0)     # freed: the 30 s average passes through
        assert told(url) == [("trigger", "critical"), ("trigger", "warning"),  # the warning
                             ("resolve", "ok")]                                # band, once
    finally:
        for s in (a, b):
            s.close()
    c.close()
    (row,) = [r for r in alertsink.rows(url, "checks") if r["plugin"] == "rule:disk_full"]
    # the recovery's result (an OK one is written again only every rule_refresh)
    assert row["status"] == 0 and row["output"] == "avg(disk.root.used_percent, 30s) = 76.6667"


def test_a_series_that_stops_is_unknown_and_a_down_host_holds_its_rules(url):
    alertsink.hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    try:
        run([s], clock, 40, lambda t: 50.0)
        run([s], clock, 60, None)               # heartbeats, no STATS: stale, absent
        assert told(url) == [("trigger", "unknown")]
        assert told(url, f"{WEB}/check/rule:stats_gone") == [("trigger", "critical")]
        run([s], clock, 20, lambda t: 50.0)     # back
        assert told(url) == [("trigger", "unknown"), ("resolve", "ok")]
        run([s], clock, 60, None, beats=False)  # the host goes DOWN: its one alert
        host = [(e["action"], e["kind"]) for e in alertsink.alert_events(url, f"{WEB}/host")]
        assert host == [("trigger", "host")]
        assert told(url) == [("trigger", "unknown"), ("resolve", "ok")]
        assert told(url, f"{WEB}/check/rule:stats_gone") == [("trigger", "critical"),
                                                              ("resolve", "ok")]
    finally:
        s.close()
    assert s.counts["rule_held_host_down"] > 0


def test_a_rule_on_an_opentelemetry_series_fires_and_malformed_entries_pass(url):
    """An application's OTLP counter (a STATS ``series``) read by its plain Graphite path
    (SPEC 4.7): its rate fires the rule; other label sets and malformed entries change
    nothing."""
    alertsink.hello(url)
    clock = Clock(T0)
    path = "http.server.errors.http_route__cart.service_name_shop"
    s = alertsink.sink(url, clock, rules=[
        {"name": "errors", "expr": f"rate({path}, 30s)", "critical": "> 1"}],
        rule_interval=5, renotify_interval=0, flap_detection=False, host_timeout=15)
    key = f"{WEB}/check/rule:errors"

    def errors(per_second):
        for _ in range(40):
            now = clock.advance(1)
            s.observe(msg("STATS", metrics={}, series=[
                {"name": "http.server.errors", "value": per_second * (now - T0),
                 "kind": "counter", "labels": {"service.name": "shop", "http.route": "/cart"}},
                {"name": "http.server.errors", "value": 100 * (now - T0), "kind": "counter",
                 "labels": {"service.name": "shop", "http.route": "/"}},
                {"name": path, "value": "NaN"}, "junk"]))
            s.write([beat()])
            s.tick()
    try:
        errors(0.5)
        assert told(url, key) == []
        errors(3)
        assert told(url, key) == [("trigger", "critical")]
        assert s.counts["rules_point_bad"] == 0
    finally:
        s.close()


def test_rules_a_reload_adds_follow_the_tails_already_known(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    import zmq

    from fleetwatch.config import build
    from sinks.config import SinkConfig
    BASE = {"routers": ["tcp://127.0.0.1:9"]}
    clock = Clock(T0)
    s = alertsink.sink(url, clock)                      # no rules: no tail followed
    ctx = zmq.Context()
    try:
        s.welcomed("router-1", {"tail": "tcp://127.0.0.1:9"}, ctx, None)
        assert s.series is None
        s.reconfigure(build(SinkConfig, {**BASE, "alerting": {"rules": RULES}}, "sink.yaml"),
                      {"alerting.rules"})
        assert s.series.feed.connected == {"tcp://127.0.0.1:9"}
        s.reconfigure(build(SinkConfig, BASE, "sink.yaml"), {"alerting.rules"})
        assert s.series is None                         # rules gone: the tail left
    finally:
        s.close()
        ctx.term()


def test_a_host_in_a_downtime_holds_its_rules_and_what_outlives_it_is_told_at_its_end(url,
                                                                                        fleet):
    fleet.state_url = url
    op = fleet.operator_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])
    alertsink.hello(url)
    clock = Clock(T0)
    s = sink(url, clock)
    try:
        run([s], clock, 40, lambda t: 50.0)
        code, _ = alertsink.command("downtime", op, clock, "add", "web-1", "--for", "2m",
                                    "--force")
        assert code == 0
        run([s], clock, 60, lambda t: 95.0)             # CRITICAL in the downtime: held
        assert told(url) == []
        run([s], clock, 90, lambda t: 95.0)             # the downtime ends: told once
        assert told(url) == [("trigger", "critical")]
    finally:
        s.close()
