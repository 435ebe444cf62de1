"""SLOs on a real state database (sinks/alerting/slo/store.py, report.py): results and
rule states counted into their buckets, downtimes as the SLO says, burn rates judged at each
interval into a ticket, a page, and their resolve, each told once (two sinks), a silence
holding a page until it ends, hosts judged one by one, old buckets deleted, an SLO gone from
every config forgotten; and what ``slo report`` reads back. An alerting sink over SQLite on a
fake clock, its transactions' ports (sinks/alerting/transaction.py) handed to
:func:`store.count` and :func:`store.tick` directly, as the sink's results and tick do."""

from __future__ import annotations

from sqlalchemy import update

from fleetwatch.store import db, schema
from sinks.alerting.checks.rules import CRITICAL, OK, UNKNOWN, CheckState
from sinks.alerting.config import AlertingConfig
from sinks.alerting.downtimes import store as downtimestore
from sinks.alerting.downtimes.rules import Downtime
from sinks.alerting.silences import store as silencestore
from sinks.alerting.sink import AlertingSink
from sinks.alerting.slo import report, store
from sinks.alerting.slo.config import gap, parse
from support.slos import DB, T0, WEB, Slos, alerts

HTTP = {"name": "http", "objective": 99.0, "window": "30d", "checks": "http*"}


def test_results_are_counted_in_their_buckets(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [
        {**HTTP, "per_host": True}, {**HTTP, "name": "web_only", "hosts": "web*",
                                     "window": "7d"},
        {"name": "disks", "objective": 99.5, "window": "30d", "rules": "disk*"},
        {**HTTP, "name": "paris", "hosts": ["site:paris", "parent:sw-*"]}])
    with s.sink.engine.begin() as conn:
        conn.execute(update(schema.agents).where(schema.agents.c.uuid == DB)
                     .values(site="paris"))
        conn.execute(update(schema.agents).where(schema.agents.c.uuid == WEB)
                     .values(parents=["sw-3", "sw-3/ping"]))
    s.result(OK)
    s.result(CRITICAL, at=T0 + 1)
    s.result(OK, uuid=DB)
    s.result(OK, plugin="ping")                     # no SLO's check
    s.result(CRITICAL, plugin="rule:http_rule")     # a rule: not a checks SLO's
    day = T0 - T0 % 86400
    assert s.buckets() == {
        ("http", "", 60, T0): (2.0, 1.0, 0.0),
        ("http", "", 3600, T0 - T0 % 3600): (2.0, 1.0, 0.0),
        ("http", WEB, 86400, day): (1.0, 1.0, 0.0),     # a 30-day window: a host's by day
        ("http", DB, 86400, day): (1.0, 0.0, 0.0),
        ("http", WEB, 300, T0 - T0 % 300): (1.0, 1.0, 0.0),     # per host
        ("http", DB, 300, T0 - T0 % 300): (1.0, 0.0, 0.0),
        ("web_only", "", 60, T0): (1.0, 1.0, 0.0),
        ("web_only", "", 3600, T0 - T0 % 3600): (1.0, 1.0, 0.0),
        ("web_only", WEB, 3600, T0 - T0 % 3600): (1.0, 1.0, 0.0),  # 7 days: by the hour
        ("paris", "", 60, T0): (2.0, 1.0, 0.0),        # db-1 behind paris, web-1 behind sw-3
        ("paris", "", 3600, T0 - T0 % 3600): (2.0, 1.0, 0.0),
        ("paris", WEB, 86400, day): (1.0, 1.0, 0.0),
        ("paris", DB, 86400, day): (1.0, 0.0, 0.0),
    }
    s.close()


def test_a_rule_s_time_is_counted_in_the_state_it_was_in(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [
        {"name": "disks", "objective": 99.5, "window": "30d", "rules": "disk*"}])
    s.result(OK, plugin="rule:disk_full")            # the first: no span before it
    assert s.buckets() == {}
    s.now = T0 + 90
    s.result(CRITICAL, plugin="rule:disk_full")      # 90 s OK, cut at the minute
    s.now = T0 + 120
    s.result(OK, plugin="rule:disk_full")            # 30 s CRITICAL
    fine = {k[3]: v for k, v in s.buckets().items() if k[2] == 60}
    assert fine == {T0: (60.0, 0.0, 0.0), T0 + 60: (30.0, 30.0, 0.0)}
    s.now = T0 + 120 + 5000                          # no result for 5000 s: at most 1200
    s.result(OK, plugin="rule:disk_full")
    coarse = {k: v for k, v in s.buckets().items() if k[2] == 3600}
    assert sum(g for g, _, _ in coarse.values()) == 90.0 + gap(AlertingConfig())
    s.close()


def test_a_stale_result_counts_now_and_adds_no_time(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [
        HTTP, {**HTTP, "name": "uptime", "sli": "time"}])
    s.result(OK)
    s.now = T0 + 600                # no result since: the freshness rule's UNKNOWN
    before = s.states[(WEB, "http")]
    stale = CheckState(status=UNKNOWN, last_result=before.last_result)
    s.run(lambda port: store.count(port, [((WEB, "http"), "web-1", before, stale, None)],
                                   s.slos))
    fine = {(k[0], k[3]): v for k, v in s.buckets().items() if k[2] == 60}
    assert fine == {("http", T0): (1.0, 0.0, 0.0), ("http", T0 + 600): (0.0, 1.0, 0.0)}
    s.close()


def test_a_downtime_counts_as_the_slo_says(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [
        {**HTTP, "name": "good", "downtime_counts_as": "good"},
        {**HTTP, "name": "excluded", "downtime_counts_as": "excluded"},
        {**HTTP, "name": "bad"}])
    with s.sink.engine.begin() as conn:
        downtimestore.add(conn, Downtime(0, "web-*", None, T0 - 60, T0 + 3600,
                                         created=T0 - 60))
    s.result(CRITICAL)
    s.result(CRITICAL, uuid=DB)                     # not in the downtime
    fine = {k[0]: v for k, v in s.buckets().items() if k[1] == "" and k[2] == 60}
    assert fine == {"good": (1.0, 1.0, 0.0), "excluded": (0.0, 1.0, 1.0),
                    "bad": (0.0, 2.0, 0.0)}
    s.close()


def test_a_fast_burn_tickets_pages_and_resolves_each_once(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [HTTP])
    assert s.every(30, T0 + 3600, OK) == []             # an hour of good results
    burning = s.every(30, T0 + 3600 + 900, CRITICAL)    # then 15 minutes of bad ones
    assert alerts(burning) == [("slo/http", "trigger", "warning"),
                               ("slo/http", "trigger", "critical")]
    ticket, page = burning
    # ticket: 6h and 30m over 6x (the 4th bad result); page: 1h and 5m over 14.4x (the 9th)
    # ticket at the 8th bad result: 8 of 128 over 6h is 6.25% (7 of 127: 5.5%), 6.25x; page at
    # the 18th: 18 of 122 over 1h (the buckets overlapping it) is 14.75%, 14.75x
    assert ticket["created"] == T0 + 3600 + 240 and page["created"] == T0 + 3600 + 540
    assert ticket["hostname"] == "all hosts" and ticket["uuid"] == ""
    assert ticket["check_name"] == "slo:http" and page["status"] == 2
    calm = s.every(30, T0 + 3600 + 900 + 3 * 3600, OK)
    # the 5 minutes good: back to a ticket; the 30 minutes under 6x: resolved
    assert alerts(calm) == [("slo/http", "trigger", "warning"),
                            ("slo/http", "resolve", "ok")]
    # 5 min later one bad result of 11 is left in the 5-minute window (9.1x); 29 min
    # later 3 of 62 in the 30-minute one (4.8x)
    assert [e["created"] - (T0 + 4500) for e in calm] == [300.0, 1740.0]
    (state,) = s.rows(schema.slo_state)
    assert state["level"] == state["told"] == "ok"
    s.close()


def test_an_slo_is_judged_every_rule_interval_by_one_sink(tmp_path):
    url = f"sqlite:///{tmp_path / 'state.db'}"
    s = Slos(url, [HTTP])
    other = AlertingSink(db.engine(url), lambda: s.now, AlertingConfig(), deliver=False)
    other.start()

    def tick(sink):
        return s.tick(sink).counts["slo_judged"]
    assert s.tick().counts["slo_judged"] == 1
    assert tick(other) == 0                         # judged this interval already
    s.now += 29.9
    assert tick(other) == 0 and s.tick().counts["slo_judged"] == 0
    s.now += 0.1
    assert tick(other) == 1 and s.tick().counts["slo_judged"] == 0
    # a burn: both sinks tick at each step; each alert is told once
    for _ in range(20):
        s.now += 30
        s.result(CRITICAL)
        tick(other)
        tick(s.sink)
    assert alerts(s.events()) == [("slo/http", "trigger", "critical")]
    assert s.rows(schema.slos)[0] == {
        "name": "http", "objective": 99.0, "window_seconds": 2592000.0, "source": "checks",
        "sli": "results", "patterns": ["http*"], "hosts": ["*"], "per_host": False,
        "downtime": "bad", "configured": s.now}
    other.close()
    s.close()


def test_a_silence_holds_a_page_until_it_ends(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [HTTP])
    with s.sink.engine.begin() as conn:
        silence = silencestore.add_silence(conn, "*", "slo:*", T0, T0 + 600, "work", "ann")
    assert s.every(30, T0 + 580, CRITICAL) == []
    held = s.rows(schema.suppressed)
    assert [(h["silence_id"], h["key"], h["severity"]) for h in held] == [
        (silence, "slo/http", "critical")]
    told = s.every(30, T0 + 630, CRITICAL)
    assert alerts(told) == [("slo/http", "trigger", "critical")]
    assert told[0]["created"] == T0 + 600
    s.close()


def test_hosts_of_an_slo_per_host_alert_each_on_their_own(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [{**HTTP, "per_host": True}])
    for _ in range(20):                     # web-1 fails, db-1 is fine
        s.now += 30
        s.result(CRITICAL)
        s.result(OK, uuid=DB)
        s.tick()
    told = alerts(s.events())
    assert (f"{WEB}/slo/http", "trigger", "critical") in told
    assert ("slo/http", "trigger", "critical") in told
    assert not [t for t in told if t[0].startswith(DB)]
    host = next(e for e in s.events() if e["uuid"] == WEB)
    assert host["hostname"] == "web-1" and "on host web-1" in host["text"]
    assert {r["uuid"] for r in s.rows(schema.slo_state)} == {"", WEB}
    for _ in range(200):                    # web-1 recovers: its row goes once told
        s.now += 30
        s.result(OK)
        s.tick()
    assert (f"{WEB}/slo/http", "resolve", "ok") in alerts(s.events())
    assert {r["uuid"] for r in s.rows(schema.slo_state)} == {""}
    s.close()


def test_old_buckets_are_deleted(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [{**HTTP, "per_host": True}])
    s.every(30, T0 + 600, CRITICAL)
    assert sorted({(k[1] != "", k[2]) for k in s.buckets()}) == [
        (False, 60), (False, 3600), (True, 300), (True, 86400)]
    s.now += 6 * 3600 + 600
    s.tick()
    widths = sorted({(k[1] != "", k[2]) for k in s.buckets()})
    assert widths == [(False, 3600), (True, 86400)]         # the fine ones went
    s.slos = parse([{**HTTP, "per_host": True, "window": "2d"}])
    s.now += 30
    s.tick()
    assert sorted({k[2] for k in s.buckets()}) == [3600]    # a host's by the hour now
    s.now += 2 * 86400 + 3600
    s.tick()
    assert s.buckets() == {}
    s.close()


def test_an_slo_gone_from_every_config_is_resolved_and_forgotten(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [{**HTTP, "per_host": True}])
    s.every(30, T0 + 600, CRITICAL)
    assert alerts(s.events()) == [("slo/http", "trigger", "critical"),
                                  (f"{WEB}/slo/http", "trigger", "critical")]
    s.slos = parse([{**HTTP, "name": "other"}])
    s.now += store.FORGET_AFTER - 60
    s.tick()
    assert len(s.events()) == 2 and {r["name"] for r in s.rows(schema.slos)} == {
        "http", "other"}
    s.now += 90
    s.tick()
    closed = s.events()[2:]
    assert alerts(closed) == [("slo/http", "resolve", "ok"),
                              (f"{WEB}/slo/http", "resolve", "ok")]
    assert closed[0]["summary"] == "closed: the SLO is in no alerting sink's config any more"
    assert {r["name"] for r in s.rows(schema.slos)} == {"other"}
    assert {k[0] for k in s.buckets()} == set()
    assert {r["slo"] for r in s.rows(schema.slo_state)} == {"other"}
    s.close()


def test_the_report_reads_the_figures_now(tmp_path):
    s = Slos(f"sqlite:///{tmp_path / 'state.db'}", [{**HTTP, "per_host": True}])
    with s.sink.engine.connect() as conn:
        assert report.report(conn, s.now) == []             # nothing declared yet
    for i in range(40):
        s.now += 30
        s.result(OK if i < 30 else CRITICAL)
        s.result(OK, uuid=DB)
        s.tick()
    with s.sink.engine.connect() as conn:
        (found,) = report.report(conn, s.now, offenders=1)
        (listed,) = report.listed(conn)
    # 10 bad of 80 over 1h: 12.5x, a ticket; web-1 alone: 10 of 40, 25x, pages
    assert listed["state"] == found["state"] == "ticket" and listed["name"] == "http"
    assert (found["good"], found["bad"], found["excluded"]) == (70.0, 10.0, 0.0)
    assert found["sli"] == 87.5 and found["budget_left"] == -1150.0
    assert found["burn"] == {"5m": 45.4545, "30m": 12.5, "1h": 12.5, "6h": 12.5}
    assert found["checks"] == ["http*"] and found["window"] == "30d"
    assert found["page_at"] == 14.4 and found["ticket_at"] == 6.0
    assert found["offenders"] == [{"uuid": WEB, "hostname": "web-1", "good": 30.0,
                                   "bad": 10.0, "excluded": 0.0, "spent": 1250.0,
                                   "budget_left": -2400.0, "state": "page"}]
    assert found["alerting"] == 1
    s.close()
