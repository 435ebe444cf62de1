"""The rules engine (sinks/alerting/series/engine.py) on a given clock: which rule results
it submits, for ``for``, ``keep_firing_for``, staleness, series never seen, hosts chosen by
site and parent, a restart while a problem fires, and its bounds."""

from __future__ import annotations

import pytest

from fleetwatch.config import ConfigError, build
from sinks.alerting.config import AlertingConfig
from sinks.alerting.series.config import Host
from sinks.alerting.series.engine import Engine

OK, WARNING, CRITICAL, UNKNOWN = 0, 1, 2, 3


def engine(*rules, interval=10.0, refresh=300.0, started=0.0, **kw) -> Engine:
    config = build(AlertingConfig, {"rules": list(rules)}, "sink.yaml", "alerting")
    e = Engine([spec.compiled() for spec in config.rules], started=started,
               interval=interval, refresh=refresh, **kw)
    e.hosts({"u1": Host("web-1", "paris", ("sw-3",)), "u2": Host("db-1")})
    return e


def load(value: float, **more) -> dict:
    return {"metrics": {"load.1": value, **more}}


def step(e: Engine, t: float, value=None, uuid="u1") -> list[tuple[str, int, str]]:
    """Feed ``value`` (if any) at ``t``, evaluate at ``t``: (uuid, status, output) submitted."""
    if value is not None:
        e.feed(uuid, "STATS", load(value), t)
    rows = e.evaluate(t)
    e.submitted(rows)
    return [(r["uuid"], r["status"], r["output"]) for r in rows]


HIGH = {"name": "load_high", "hosts": "web-*", "expr": "avg(load.1, 30s)",
        "warning": "> 4", "critical": "> 8", "for": "20s"}


@pytest.mark.parametrize("values, expected", [
    # (value fed every 10 s from t=0) -> the statuses submitted, one list per evaluation;
    # an OK (pending or not) already told is written again only every ``refresh``
    ([1, 1, 1], [[OK], [], []]),
    ([9, 9, 9, 9], [[OK], [], [CRITICAL], [CRITICAL]]),     # met at 0: fires at 20
    ([9, 1, 1, 1], [[OK], [], [], []]),         # the 30 s average under 4 at 20: never fired
    ([5, 5, 5], [[OK], [], [WARNING]]),
    ([9, 9, 1, 1, 1], [[OK], [], [WARNING], [OK], []]),     # 6.3 at 20 (warning), 3.7 at 30
])
def test_for_holds_a_level_before_it_fires(values, expected):
    e = engine(HIGH)
    got = [[s for _, s, _ in step(e, 10.0 * i, v)] for i, v in enumerate(values)]
    assert got == expected


def test_pending_says_how_long_and_firing_says_the_level():
    e = engine(HIGH)
    assert step(e, 0, 9) == [("u1", OK, "avg(load.1, 30s) = 9 (critical > 8 for 0s, "
                                        "pending until 20s)")]
    step(e, 10, 9)
    assert step(e, 20, 9) == [("u1", CRITICAL, "avg(load.1, 30s) = 9 (critical > 8)")]


def test_keep_firing_for_holds_a_problem_after_its_level():
    e = engine({**HIGH, "for": 0, "keep_firing_for": "25s", "expr": "last(load.1, 30s)"})
    assert [s for _, s, _ in step(e, 0, 9)] == [CRITICAL]
    statuses = [[s for _, s, _ in step(e, t, 1)] for t in (10, 20, 30, 40)]
    assert statuses == [[CRITICAL], [CRITICAL], [OK], []]


def test_a_series_that_stops_is_unknown_never_ok():
    e = engine({**HIGH, "stale_after": "30s", "for": 0})
    step(e, 0, 1)
    assert step(e, 29) == []                            # 29 s old: still there (refresh)
    (row,) = step(e, 30)                                # 30 s: stale
    assert row[1] == UNKNOWN and "stale: no load.1 for 30s" in row[2]
    assert [s for _, s, _ in step(e, 40, 1)] == [OK]


def test_a_series_never_seen_matches_nothing_after_stale_after():
    e = engine({**HIGH, "expr": "avg(disk.data.used_percent, 1m)", "stale_after": "1m"})
    assert step(e, 0, 1) == [] and step(e, 50, 1) == []
    (row,) = step(e, 60, 1)
    assert row[1] == UNKNOWN
    assert row[2].endswith("matches no series: disk.data.used_percent has not come from "
                           "this host")


def test_absent_waits_its_window_then_fires():
    e = engine({"name": "gone", "expr": "absent(cpu.percent, 30s)", "critical": "== 1"})
    assert step(e, 0) == [] and step(e, 20) == []       # not known yet: undecided
    assert [(u, s) for u, s, _ in step(e, 30)] == [("u1", CRITICAL), ("u2", CRITICAL)]


@pytest.mark.parametrize("hosts, chosen", [
    ("web-*", ["u1"]), (["db-*", "nope"], ["u2"]), ("site:par*", ["u1"]),
    ("parent:sw-3", ["u1"]), ("*", ["u1", "u2"]), ("site:london", []),
])
def test_hosts_by_glob_site_and_parent(hosts, chosen):
    e = engine({**HIGH, "hosts": hosts, "for": 0})
    for uuid in ("u1", "u2"):
        e.feed(uuid, "STATS", load(1), 0)
    assert sorted(u for u, _, _ in step(e, 0)) == chosen


def test_a_restart_goes_on_with_a_problem_the_database_holds():
    e = engine(HIGH)
    e.told("u1", "load_high", CRITICAL, 0.0)            # what the state database says
    assert [s for _, s, _ in step(e, 10, 9)] == [CRITICAL]      # no ``for`` again, no OK


def test_two_engines_give_the_same_row_for_a_slot():
    a, b = engine(HIGH), engine(HIGH)
    for t in (0, 10, 20):
        for e in (a, b):
            e.feed("u1", "STATS", load(9), t)
    assert a.evaluate(21) == b.evaluate(27)             # one slot (20), one row: applied once


def test_perfdata_in_base_units_and_a_check_status():
    e = engine({"name": "slow", "expr": "max(checks.http-api.time, 1m)", "warning": "> 0.5"},
               {"name": "failing", "expr": "checks.http-api.status", "critical": ">= 2"})
    e.feed("u1", "RESULT", {"plugin": "http-api", "status": 2, "perfdata": [
        {"label": "time", "value": 800, "uom": "ms"}]}, 0)
    assert sorted((s, o) for u, s, o in step(e, 1) if u == "u1") == [
        (WARNING, "max(checks.http-api.time, 1m) = 0.8 (warning > 0.5)"),
        (CRITICAL, "checks.http-api.status = 2 (critical >= 2)")]


def test_an_opentelemetry_series_is_read_by_its_plain_graphite_path():
    """A STATS's labelled series (SPEC 4.7): one label set, named as the graphite sink
    names it without tags; the others, malformed entries and names no rule reads are not
    kept."""
    path = "http.server.requests.http_route__cart.service_name_shop"
    e = engine({"name": "errors", "expr": f"rate({path}, 1m)", "critical": "> 1"},
               {"name": "queue", "expr": "queue.depth", "warning": "> 10"})
    for t, count in ((0, 100), (30, 190)):
        e.feed("u1", "STATS", {"metrics": {}, "series": [
            {"name": "http.server.requests", "value": count, "kind": "counter",
             "labels": {"service.name": "shop", "http.route": "/cart"}},
            {"name": "http.server.requests", "value": 5, "kind": "counter",
             "labels": {"service.name": "shop", "http.route": "/"}},
            {"name": "queue.depth", "value": 12},                    # no labels: the metric
            {"name": "other", "value": 1, "labels": {"a": "b"}},
            "junk", {"name": "http.server.requests", "value": "x"}]}, t)
    assert {name: len(points) for name, points in e.series["u1"].items()} == {
        path: 2, "queue.depth": 2}
    assert sorted((s, o) for u, s, o in step(e, 30) if u == "u1") == [
        (WARNING, "queue.depth = 12 (warning > 10)"),
        (CRITICAL, f"rate({path}, 1m) = 3 (critical > 1)")]
    e.feed("u1", "STATS", {"metrics": {}, "series": "not a list"}, 40)    # nothing, no error


def test_a_host_has_a_bounded_number_of_series():
    e = engine({"name": "r", "expr": "last(a, 1m) + last(b, 1m)", "critical": "> 1"},
               max_series_per_host=1)
    e.feed("u1", "STATS", {"metrics": {"a": 1, "b": 2}}, 0)
    assert e.counts["series_refused"] == 1
    assert list(e.series["u1"]) == ["a"]


def test_only_what_rules_read_is_kept():
    e = engine(HIGH)
    e.feed("u1", "STATS", load(1, **{"cpu.percent": 3}), 0)
    e.feed("router-1", "STATS", load(1), 0)            # no rule applies: nothing kept
    assert {u: list(s) for u, s in e.series.items()} == {"u1": ["load.1"]}


@pytest.mark.parametrize("rule, says", [
    ({"name": "a b", "expr": "last(x, 1m)", "critical": "> 1"},
     "alerting.rules[0].name: 'a b': expected 1 to 64 letters"),
    ({"name": "r", "expr": "avgg(x, 1m)", "critical": "> 1"},
     "alerting.rules[0].expr: rule r: column 1: unknown function 'avgg'"),
    ({"name": "r", "expr": "avg(x, 1m)"},
     "alerting.rules[0].critical: rule r: give a warning or a critical level"),
    ({"name": "r", "expr": "avg(x, 1m)", "critical": "above 3"},
     "alerting.rules[0].critical: rule r: 'above 3': expected a level"),
    ({"name": "r", "expr": "avg(x, 1m)", "critical": "> 1", "for": "soon"},
     "alerting.rules[0].for: rule r: 'soon': expected a duration"),
    ({"name": "r", "expr": "avg(x, 1m)", "critical": "> 1", "hosts": []},
     "alerting.rules[0].hosts: rule r: expected a glob or a list of them"),
])
def test_a_bad_rule_is_one_line_naming_it(rule, says):
    with pytest.raises(ConfigError) as e:
        build(AlertingConfig, {"rules": [rule]}, "sink.yaml", "alerting")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_two_rules_of_one_name_are_refused():
    rule = {"name": "r", "expr": "avg(x, 1m)", "critical": "> 1"}
    with pytest.raises(ConfigError, match="rules: rule r: the name is given twice"):
        build(AlertingConfig, {"rules": [rule, rule]}, "sink.yaml", "alerting")
