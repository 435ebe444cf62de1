"""SLOs end to end (issue 35, docs/operating/slo.md).

- Two alerting sinks on one state database, SQLite and PostgreSQL, judging at the same
  instant in two threads: each SLO judged by one of them, each change of level told once.
- A real alerting sink with ``alerting.slos`` in its config, fed RESULTs as a router
  relays them on a fake clock: a fast burn tickets, pages and resolves, a downtime counted
  as good, ``fleetwatch slo report --json`` reading it back.
- Real processes: a fleet whose agent runs a failing ``check_http``, its alerting sink
  judging an SLO every second: the page is an alert of kind ``slo``, in ``fleetwatch slo``
  and ``alerts``.
- The console's SLO page in a real Chromium at a laptop's and a phone's size, over a state
  database an SLO's passes filled (a hostile hostname and globs): axe-core's audit finds
  nothing serious, nothing scrolls sideways, the hostile values are inert text.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from fleetwatch.store import db
from sinks.alerting.checks.rules import CRITICAL, OK
from sinks.alerting.config import AlertingConfig
from sinks.alerting.sink import AlertingSink
from support.fleet import module_fleet, wait_for
from support.slos import DB, T0, WEB, Slos, alerts, fill

pytestmark = pytest.mark.timeout(180)

HTTP = {"name": "http", "objective": 99.0, "window": "30d", "checks": "http*",
        "per_host": True}


# ---------------------------------------------------------------- two sinks at once

def test_two_sinks_judging_at_once_tell_each_change_once(url):
    s = Slos(url, [HTTP, {**HTTP, "name": "all", "checks": "*", "per_host": False}])
    other = AlertingSink(db.engine(url), lambda: s.now, AlertingConfig(), deliver=False)
    other.start()
    judged = []

    def both() -> None:
        """Both sinks tick at the same instant, each in its thread."""
        start = threading.Barrier(2)
        errors: list = []

        def tick(sink):
            try:
                start.wait(10)
                judged.append(s.tick(sink).counts["slo_judged"])
            except Exception as e:         # (reported below, in the test's thread)
                errors.append(e)
        threads = [threading.Thread(target=tick, args=(sink,)) for sink in (s.sink, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors and not any(t.is_alive() for t in threads)

    for i in range(60):             # web-1 fails from the 20th minute, db-1 is fine
        s.now += 30
        s.results((OK if i < 40 else CRITICAL, "http", WEB), (OK, "http", DB))
        both()
    for _ in range(80):             # and recovers
        s.now += 30
        s.results((OK, "http", WEB), (OK, "http", DB))
        both()
    # each SLO judged once a step, by one sink or the other
    assert sum(judged) == 2 * 140 and len(judged) == 2 * 140
    told = alerts(s.events())
    for key in ("slo/http", f"{WEB}/slo/http", "slo/all"):
        mine = [t for t in told if t[0] == key]
        # a page (after a ticket, or not), then its resolve: never one change told twice
        assert ("trigger", "critical") in [t[1:] for t in mine] and mine[-1][1] == "resolve"
        assert all(a != b for a, b in zip(mine, mine[1:])), mine
    assert not [t for t in told if t[0].startswith(DB)]
    other.close()
    s.close()


# ---------------------------------------------------------------- a sink's own config

def test_an_alerting_sink_with_slos_pages_and_resolves(url, tmp_path):
    from sinks.alerting.downtimes import store as downtimestore
    from sinks.alerting.downtimes.rules import Downtime
    from support.alertsink import QUICK, command, hello, result, rows, sink
    now = [T0]
    hello(url, {WEB: "web-1", DB: "db-1"}, clock=lambda: now[0])
    s = sink(url, lambda: now[0], **QUICK, rule_interval=30, slos=[
        HTTP, {**HTTP, "name": "planned", "per_host": False,
               "downtime_counts_as": "good"}])
    with s.engine.begin() as conn:              # db-1's planned work: allowed by planned
        downtimestore.add(conn, Downtime(0, "db-*", None, T0, T0 + 86400, created=T0))
    for i in range(50):
        now[0] += 30
        s.write([result(OK if i < 30 else CRITICAL, now[0], "http", WEB),
                 result(CRITICAL, now[0], "http", DB)])
        s.tick()
    for i in range(80):
        now[0] += 30
        s.write([result(OK, now[0], "http", WEB), result(OK, now[0], "http", DB)])
        s.tick()
    events = [e for e in rows(url, "alert_events") if e["kind"] == "slo"]
    told = alerts(events)
    assert told[0] == ("slo/http", "trigger", "critical")   # db-1 failed from the start
    assert (f"{WEB}/slo/http", "trigger", "critical") in told
    assert ("slo/planned", "trigger", "critical") in told   # web-1's failures
    # db-1's own page: held by its downtime (the SLO of all hosts is no host's)
    assert not [t for t in told if t[0].startswith(DB)]
    held = {(r["key"], r["severity"]) for r in rows(url, "downtime_suppressed")}
    assert (f"{DB}/slo/http", "critical") in held and (f"{DB}/check/http", "critical") in held
    assert {t[0] for t in told if t[1] == "resolve"} == {
        "slo/http", f"{WEB}/slo/http", "slo/planned"}
    for key in {t[0] for t in told}:
        assert [t for t in told if t[0] == key][-1][1] == "resolve"
    op = tmp_path / "fleetwatch.yaml"
    op.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: {url}\n")
    code, out = command("slo", op, lambda: now[0], "report", "--json")
    found = {x["name"]: x for x in json.loads(out)["slos"]}
    assert code == 0 and found["http"]["state"] == "ok" and found["http"]["bad"] == 70.0
    assert found["http"]["good"] == 190.0
    assert found["planned"]["bad"] == 20.0          # db-1's failures were planned
    assert found["planned"]["good"] == 240.0
    assert {r["name"] for r in rows(url, "slos")} == {"http", "planned"}
    s.close()


def test_an_slo_over_a_rule_counts_its_time_in_each_state(url, tmp_path):
    from support.alertsink import command, hello, msg, sink
    now = [T0]
    hello(url, {WEB: "web-1"}, clock=lambda: now[0])
    s = sink(url, lambda: now[0], rule_interval=5, rule_refresh=60, flap_detection=False,
             renotify_interval=0, host_timeout=3600, rules=[
                 {"name": "disk_full", "expr": "avg(disk.root.used_percent, 30s)",
                  "critical": "> 90", "stale_after": "30s"}],
             slos=[{"name": "disks", "objective": 99.0, "window": "30d",
                    "rules": "disk*"}])

    def run(seconds: int, disk: float) -> None:
        for _ in range(seconds // 5):       # a STATS and a heartbeat every 5 s, each ticked
            now[0] += 5
            s.observe(msg("STATS", metrics={"disk.root.used_percent": disk}))
            s.write([msg("HEARTBEAT", interval=5.0)])
            s.tick()
    run(1800, 50.0)                     # 30 minutes fine
    run(600, 95.0)                      # 10 minutes full
    told = [(e["key"], e["action"], e["severity"]) for e in
            (e for e in _events(url) if e["kind"] == "slo")]
    # a ticket (6% of 6h: 2 min of 32), then a page (14.4% of 1h: 5 min of 35)
    assert told == [("slo/disks", "trigger", "warning"), ("slo/disks", "trigger", "critical")]
    op = tmp_path / "fleetwatch.yaml"
    op.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: {url}\n")
    code, out = command("slo", op, lambda: now[0], "report", "--json")
    (disks,) = json.loads(out)["slos"]
    assert code == 0 and disks["measures"] == "time" and disks["rules"] == ["disk*"]
    # the rule's seconds OK and CRITICAL (its first result, and its "for", aside)
    assert 1700 <= disks["good"] <= 1830 and 560 <= disks["bad"] <= 600, disks
    assert disks["state"] == "page" and disks["offenders"][0]["uuid"] == WEB
    s.close()


def _events(url) -> list[dict]:
    from support.alertsink import rows
    return rows(url, "alert_events")


# ---------------------------------------------------------------- real processes

def test_a_failing_check_s_slo_pages_through_a_real_fleet(fleet):
    from support.alertsink import failing_plugins
    from support.console import start_console
    folder, flags = failing_plugins(fleet, ["http"])
    fleet, op, _ = start_console(
        fleet, alerting={"max_check_attempts": 1, "flap_detection": False,
                         "rule_interval": 1, "slos": [
                             {"name": "web", "objective": 99.0, "window": "30d",
                              "checks": "check_http", "per_host": True}]},
        scheduler=True, plugins={"dirs": [str(folder)], "checks": [
            {"name": "check_http", "command": "check_http", "interval": 1, "timeout": 5}]})
    (uuid,) = [r[0] for r in fleet.db_rows("SELECT uuid FROM agents")]

    def slo_alerts():
        return [a for a in fleet.alerts(op) if a["kind"] == "slo"]
    wait_for(lambda: {a["key"] for a in slo_alerts()} >= {"slo/web", f"{uuid}/slo/web"}, 60,
             0.5, what="the SLO's pages")
    page = next(a for a in slo_alerts() if a["key"] == "slo/web")
    assert page["severity"] == "critical" and page["check"] == "slo:web"
    assert page["hostname"] == "all hosts"
    report = json.loads(fleet.cli("slo", "report", "--json", "--config", str(op)).stdout)
    (web,) = report["slos"]
    assert web["state"] == "page" and report["alerting"] == 1 and web["bad"] >= 1
    assert web["offenders"][0]["uuid"] == uuid and web["offenders"][0]["state"] == "page"
    listed = fleet.cli("slo", "--config", str(op)).stdout
    assert listed.splitlines()[1].split()[:3] == ["web", "99%", "30d"]


# ---------------------------------------------------------------- the page in a browser

HOSTILE = '<img src=x onerror="window.__pwned=1">\x1b[31m\u202eweb'
GLOB = '"><svg onload="window.__pwned=2">*'
LAPTOP, PHONE = (1440, 900), (390, 844)
#: what the hostile values would make if the page let them be markup
MADE = """
const made = [];
for (const e of document.querySelectorAll('*'))
  for (const a of e.attributes)
    if (/^on/i.test(a.name)) made.push(e.tagName + ' ' + a.name);
for (const e of document.querySelectorAll('img[src=x], svg')) made.push(e.outerHTML.slice(0, 60));
return {pwned: typeof window.__pwned, made: made, text: document.body.innerText,
        widths: [document.documentElement.scrollWidth, window.innerWidth]};
"""


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """``fleetwatch web`` over a state database the SLO passes filled (ending now), its
    router not answering: its URL."""
    from support.console import serve
    with module_fleet(tmp_path_factory, "slo-page") as fleet:
        start = time.time() - 1800.0
        fill(fleet.state_url, HOSTILE, ("http*", GLOB), now=start - start % 60)
        op = fleet.write("fleetwatch.yaml", {"routers": ["tcp://127.0.0.1:9"],
                                             "state_url": fleet.state_url, "timeout": 0.3})
        yield serve(fleet, op)


@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1440x900", "390x844"])
def test_the_slo_page_is_accessible_fits_a_phone_and_keeps_hostile_values_inert(
        console, size, request):
    from selenium.webdriver.common.by import By

    from support.browser import audit, browser, click_through, screenshot, serious
    from support.console import PASSWORD
    with browser() as d:
        d.execute_cdp_cmd("Page.setBypassCSP", {"enabled": True})   # the escaping is tested
        d.get(console + "/login")
        d.find_element(By.ID, "user").send_keys("alice")
        d.find_element(By.ID, "password").send_keys(PASSWORD)
        click_through(d, d.find_element(By.ID, "login"))
        width, height = size
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})
        d.get(console + "/slo")
        seen = d.execute_script(MADE)
        screenshot(d, request.node.name)
        assert seen["pwned"] == "undefined" and seen["made"] == []
        assert "\x1b" not in seen["text"] and "\u202e" not in seen["text"]
        assert "\\x1b[31m\\u202eweb" in seen["text"]          # shown, its controls visible
        assert '"><svg onload="window.__pwned=2">*' in seen["text"]
        assert seen["widths"][0] <= seen["widths"][1], seen["widths"]
        states = [e.text for e in d.find_elements(By.CSS_SELECTOR, "#slos .state")]
        assert states == ["page", "ok"]
        assert serious(audit(d)) == []
