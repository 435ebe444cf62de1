"""SLOs, the pure parts (sinks/alerting/slo/config.py, rules.py): a config refused with one
line naming the SLO and the setting, the burn-rate factors of a window, the levels at their
thresholds (both windows of a pair, a bare miss), the budget arithmetic, spans cut at the
buckets' edges, the state machine's told/owed, and the alert events' shape."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from fleetwatch.config import ConfigError, build, setting
from sinks.alerting.series.config import Host
from sinks.alerting.slo import rules
from sinks.alerting.slo.config import Slo, SloSpec, check_slos, gap, interval, of, parse
from sinks.alerting.slo.rules import PAGE, TICKET, OK, Tally

T0 = 1_700_000_000.0
HTTP = {"name": "http_availability", "objective": 99.9, "window": "30d", "checks": "http*"}


#: a setting left out of an item
DROP = object()


def item(**changes) -> dict:
    return {k: v for k, v in {**HTTP, **changes}.items() if v is not DROP}


def one(**changes) -> Slo:
    (slo,) = parse([item(**changes)])
    return slo


# ---------------------------------------------------------------- the config

def test_an_slo_is_parsed_with_its_defaults():
    slo = one()
    assert slo == Slo("http_availability", 99.9, 30 * 86400.0, "checks", ("http*",))
    assert slo.check == "slo:http_availability" and slo.sli == "results"
    assert slo.downtime == "bad" and not slo.per_host and slo.hosts.terms == ("*",)
    assert slo.allowed == pytest.approx(0.001)
    rule = one(checks=DROP, rules=["disk_full*", "load"], per_host=True,
               downtime_counts_as="good", hosts=["web*", "site:paris"], window=604800)
    assert rule.patterns == ("rule:disk_full*", "rule:load") and rule.sli == "time"
    assert rule.window == 604800.0 and rule.per_host and rule.downtime == "good"
    assert rule.spec()["patterns"] == ["disk_full*", "load"]


def test_which_checks_and_hosts_count():
    slo = one(hosts=["web*", "site:paris", "parent:sw-3"])
    rule = one(checks=DROP, rules="disk*")
    assert slo.counts("http") and slo.counts("https_api") and not slo.counts("ping")
    assert not slo.counts("rule:http_rule")          # a rule's results are a rule SLO's
    assert rule.counts("rule:disk_full") and not rule.counts("disk_full")
    assert slo.covers(Host("web-1")) and slo.covers(Host("db-1", site="paris"))
    assert slo.covers(Host("db-2", parents=("sw-3",))) and not slo.covers(Host("db-3"))
    assert slo.where == "hosts web*,site:paris,parent:sw-3" and one().where == "all hosts"


@pytest.mark.parametrize("changes, error", [
    ({"objective": 100}, "objective: expected 0 < objective < 100 (a percent: 99.9)"),
    ({"objective": 0}, "objective: expected 0 < objective < 100"),
    ({"objective": True}, "objective: expected 0 < objective < 100"),
    ({"objective": "99.9"}, "objective: expected 0 < objective < 100"),
    ({"window": "12h"}, "window: expected a duration of 1d to 366d (30d)"),
    ({"window": "400d"}, "window: a duration must be more than 0 and at most 366 days"),
    ({"window": "soon"}, "window: 'soon' is not a duration"),
    ({"window": [1]}, "window: expected a duration"),
    ({"window": DROP}, "window: required setting missing"),
    ({"checks": None}, "checks: expected a glob or a list of them"),
    ({"checks": DROP}, "checks: give checks (globs on check names) or rules"),
    ({"rules": "x"}, "checks: give checks (globs on check names) or rules"),
    ({"checks": []}, "checks: expected a glob or a list of them"),
    ({"checks": "rule:x"}, "checks: rule:NAME is a rule's: say rules: NAME instead"),
    ({"hosts": "site:"}, "hosts: 'site:': site: needs a glob after it"),
    ({"per_host": "yes"}, "per_host: expected true or false"),
    ({"downtime_counts_as": "allowed"}, "downtime_counts_as: expected good, bad, excluded"),
    ({"sli": "latency"}, "sli: expected results or time"),
    ({"budget": 1}, "budget: unknown setting (known here: checks, downtime_counts_as, hosts"),
])
def test_a_bad_slo_is_refused_with_one_line_naming_it(changes, error):
    fine = {"name": "fine", "objective": 99, "window": "7d", "checks": "*"}
    with pytest.raises(ValueError) as e:
        parse([fine, item(**changes)])
    assert str(e.value).startswith("slos[1] (http_availability): " + error)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("items, error", [
    ([{"objective": 99}], "slos[0]: name: expected 1 to 64 letters, digits, _ . -"),
    ([{**HTTP, "name": "a b"}], "slos[0]: name: 'a b': expected 1 to 64 letters"),
    (["http"], "slos[0]: name: expected"),
    ([HTTP, HTTP], "slos[1] (http_availability): name: given twice"),
    ([{"name": "x", "window": "30d", "checks": "*"}], "slos[0] (x): objective: required"),
    ({"name": "x"}, "slos: expected a list of SLOs"),
    ([{**HTTP, "name": f"s{i}"} for i in range(201)], "slos: 201 SLOs; at most 200"),
])
def test_the_list_is_refused_naming_the_item(items, error):
    with pytest.raises(ValueError, match=None) as e:
        parse(items)
    assert error in str(e.value)


def test_a_config_s_slos_are_parsed_once_and_its_intervals_read():
    class Config:
        slos = [HTTP]
        rule_interval = 15.0
        rule_refresh = 300.0
    config = Config()
    first = of(config)
    assert first == [one()] and of(config) is first
    assert interval(config) == 15.0 and gap(config) == 600.0
    assert interval(object()) == 30.0 and gap(object()) == 1200.0 and of(object()) == []


# ---------------------------------------------------------------- burn rates and levels

def test_the_factors_are_the_workbook_s_for_30_days_and_scale_with_the_window():
    assert rules.factors(one()) == {PAGE: pytest.approx(14.4), TICKET: pytest.approx(6.0)}
    assert rules.factors(one(window="7d")) == {PAGE: pytest.approx(3.36),
                                              TICKET: pytest.approx(1.4)}


def burns(**values) -> dict:
    return {w: values.get(f"b{w}") for w in rules.WINDOWS}


@pytest.mark.parametrize("values, level", [
    ({"b1h": 14.4, "b5m": 14.4}, PAGE),                    # exactly at the factor
    ({"b1h": 14.39, "b5m": 100.0, "b6h": 6, "b30m": 6}, TICKET),
    ({"b1h": 100.0, "b5m": 14.39}, OK),                   # the short window recovered
    ({"b1h": 20.0, "b5m": None}, OK),                     # no event in 5 min: not burning
    ({"b6h": 6.0, "b30m": 6.0}, TICKET),
    ({"b6h": 5.99, "b30m": 50.0}, OK),
    ({"b6h": 50.0, "b30m": 5.99}, OK),
    ({"b6h": 50.0, "b30m": 50.0, "b1h": 50.0, "b5m": 50.0}, PAGE),
    ({}, OK),
])
def test_a_level_needs_both_windows_of_its_pair(values, level):
    assert rules.judge(burns(**values), one()) == level


def test_budget_sli_burn_and_share():
    slo = one(objective=99.0)
    t = Tally(good=990, bad=10, excluded=7)
    assert t.total == 1000 and rules.sli(t) == pytest.approx(99.0)
    assert rules.burn(t, slo) == pytest.approx(1.0)
    assert rules.budget_left(t, slo) == pytest.approx(0.0)
    assert rules.budget_left(Tally(999, 1), slo) == pytest.approx(90.0)
    assert rules.budget_left(Tally(900, 100), slo) == pytest.approx(-900.0)
    assert rules.spent_share(5, t, slo) == pytest.approx(50.0)
    assert rules.sli(Tally()) is None and rules.burn(Tally(excluded=5), slo) is None
    assert rules.budget_left(Tally(), slo) is None and rules.spent_share(1, Tally(), slo) is None
    assert Tally(1, 2, 3) + Tally(1, 1, 1) == Tally(2, 3, 4)


# ---------------------------------------------------------------- buckets

@pytest.mark.parametrize("t0, t1, width, expected", [
    (0, 60, 60, [(0, 60)]),
    (30, 150, 60, [(0, 30), (60, 60), (120, 30)]),
    (59.5, 60, 60, [(0, 0.5)]),
    (60, 60, 60, []),
    (100, 400, 300, [(0, 200), (300, 100)]),
])
def test_a_span_is_cut_at_the_buckets(t0, t1, width, expected):
    assert rules.spans(t0, t1, width) == expected
    assert sum(s for _, s in rules.spans(t0, t1, width)) == pytest.approx(t1 - t0)


def test_a_window_reads_the_buckets_that_overlap_it():
    # (now - 300, now] with 60 s buckets: those starting after now - 360
    now = T0 + 30
    after = rules.since(now, 300, 60)
    starts = [rules.start_of(now - k * 60, 60) for k in range(8)]
    assert [s for s in starts if s > after] == starts[:6]   # 5 to 6 minutes of buckets
    assert rules.start_of(T0, 60) == T0 - 20 and rules.start_of(T0 + 39.9, 60) == T0 - 20
    assert rules.start_of(T0 + 40, 60) == T0 + 40


# ---------------------------------------------------------------- state and events

def test_a_change_is_owed_until_told_and_its_time_kept():
    s = rules.State(since=T0)
    assert rules.step(s, OK, T0 + 30) is s and not rules.owed(s)
    burning = rules.step(s, PAGE, T0 + 30)
    assert burning == rules.State(PAGE, T0 + 30, OK, None) and rules.owed(burning)
    assert rules.step(burning, PAGE, T0 + 60) is burning        # since stays
    told = rules.told(burning, T0 + 60)
    assert told == rules.State(PAGE, T0 + 30, PAGE, T0 + 60) and not rules.owed(told)
    back = rules.step(told, OK, T0 + 90)
    assert rules.owed(back) and back.since == T0 + 90


def test_the_alert_events():
    slo = one()
    b = {"5m": 20.0, "30m": 16.0, "1h": 15.0, "6h": 4.0}
    page = rules.event(slo, rules.State(PAGE, T0, OK), b, T0 + 60, left=71.25)
    assert {k: page[k] for k in ("key", "kind", "action", "severity", "uuid", "hostname",
                                 "check", "status", "since", "created")} == {
        "key": "slo/http_availability", "kind": "slo", "action": "trigger",
        "severity": "critical", "uuid": "", "hostname": "all hosts",
        "check": "slo:http_availability", "status": 2, "since": T0, "created": T0 + 60}
    assert page["summary"] == ("error budget burning 15.0x over 1h and 20.0x over 5m (page "
                               "at 14.4x); at this rate the 30d budget lasts 2d")
    assert "Error budget left over 30d: 71.2%." in page["text"]
    assert "Burn rates: 5m 20.0x, 30m 16.0x, 1h 15.0x, 6h 4.0x" in page["text"]
    ticket = rules.event(slo, rules.State(TICKET, T0, PAGE), b, T0, "u1", "web-1")
    assert ticket["key"] == "u1/slo/http_availability" and ticket["hostname"] == "web-1"
    assert ticket["severity"] == "warning" and ticket["status"] == 1
    assert "on host web-1" in ticket["text"]
    assert ticket["summary"].startswith("error budget burning 4.0x over 6h and 16.0x over 30m")
    ok = rules.event(slo, rules.State(OK, T0, PAGE), {w: None for w in rules.WINDOWS}, T0)
    assert ok["action"] == "resolve" and ok["severity"] == "ok" and "since" not in ok
    assert ok["summary"] == ("error budget no longer burning fast (5m -, 30m -, 1h -, 6h -)")


@pytest.mark.parametrize("seconds, text", [
    (30 * 86400, "30d"), (50 * 3600, "2d 2h"), (86400 + 60, "1d"), (3600, "1h"),
    (4 * 3600 + 600, "4h 10m"), (90, "1m 30s"), (59.9, "59s"), (0, "0s"), (-5, "0s"),
])
def test_durations(seconds, text):
    assert rules.duration(seconds) == text


@dataclass(frozen=True)
class Config:
    """An alerting config's slos, typed as SloSpec items."""

    slos: list[SloSpec] = setting(factory=list, help="the SLOs")

    def validate(self):
        check_slos(self.slos)


def test_an_slo_as_a_config_dataclass_is_checked_by_the_config_s_build():
    """(the alerting config may type its slos as SloSpec items, as its rules are RuleSpec)"""
    config = build(Config, {"slos": [item(per_host=True)]}, "sink.yaml", "alerting")
    assert of(config) == [one(per_host=True)] and config.slos[0].compiled() == of(config)[0]
    for changes, error in (
            ({"objective": 100}, "alerting.slos[0].objective: slo http_availability: "
                                 "expected 0 < objective < 100"),
            ({"objective": "x"}, "alerting.slos[0].objective: expected a number, got "
                                 "string 'x'"),
            ({"checks": DROP}, "alerting.slos[0].checks: slo http_availability: give "
                               "checks"),
            ({"name": "a b"}, "alerting.slos[0].name: 'a b': expected 1 to 64"),
            ({"budget": 1}, "alerting.slos[0].budget: unknown setting")):
        with pytest.raises(ConfigError) as e:
            build(Config, {"slos": [item(**changes)]}, "sink.yaml", "alerting")
        assert str(e.value).startswith("sink.yaml: " + error), str(e.value)
    with pytest.raises(ConfigError, match="alerting.slos: slo http_availability: the name "
                                          "is given twice"):
        build(Config, {"slos": [item(), item()]}, "sink.yaml", "alerting")
