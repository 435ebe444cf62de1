"""The console as an on-call screen (issue 33), in a real headless Chromium at the sizes
people use: a laptop's 1440x900 and a phone's 390x844. The overview shows its tactical
summary and at least 25 unhandled problems without scrolling (counted by the rows' boxes),
each row's state said in words as well as colour, its age relative with the time on
hover; a router that does not answer is a problem on it; no page scrolls sideways on the
phone, where acknowledging is one tap (and an optional comment). Screenshots of each page
at both sizes are saved as test artifacts.

A real ``fleetwatch web`` over a state database as 1,000 agents with 8 checks each leave it
(bench/webfill.py: about 130 unhandled problems), its one router not answering."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path

import pytest

from support.browser import Browser
from support.console import PASSWORD, serve
from support.fleet import Fleet
from support.webcli import web

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(180)
sys.path.append(str(Path(__file__).parents[2] / "bench"))   # last: bench/web.py is not web/

LAPTOP, PHONE = (1440, 900), (390, 844)
DEAD_ROUTER = "tcp://127.0.0.1:9"
PAGES = ("/", "/problems", "/hosts", "/hosts?group=parent", "/hosts?group=site", "/checks",
         "/alerts", "/acks", "/downtimes", "/health", "/dashboard")


@pytest.fixture(scope="module")
def oncall(tmp_path_factory):
    """(the console's URL, an API token of alice, an operator, the fleet)."""
    import webfill
    fleet = Fleet(tmp_path_factory.mktemp("oncall"))
    try:
        webfill.fill(fleet.state_url, 1000, 8, time.time())
        op = fleet.write("fleetwatch.yaml", {"routers": [DEAD_ROUTER],
                                             "state_url": fleet.state_url, "timeout": 0.3})
        url = serve(fleet, op, users=(("alice", "operator"), ("bob", "viewer")))
        token = web(fleet, "token", "add", "alice", "--label", "t", "--config",
                    str(op)).stdout.strip()
        yield url, token, fleet
    finally:
        fleet.stop_all()


@pytest.fixture(scope="module")
def driver(oncall):
    """A Chromium logged in as alice (``login_audit``: axe-core's violations on the login
    page, at 1440x900, before)."""
    from selenium.webdriver.common.by import By

    from support.browser import audit, browser, click_through
    url = oncall[0]
    with browser(logs=True) as d:
        at(d, LAPTOP)
        d.get(url + "/login")
        d.login_audit = audit(d)
        d.find_element(By.ID, "user").send_keys("alice")
        d.find_element(By.ID, "password").send_keys(PASSWORD)
        click_through(d, d.find_element(By.ID, "login"))
        yield d


def at(driver, size: tuple[int, int]) -> None:
    """The page's viewport at ``size`` (CSS pixels), as a device of that size has it."""
    width, height = size
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600})


def api(url: str, path: str, token: str):
    status, _, body = Browser(url).request(path, headers={"Authorization": f"Bearer {token}"})
    assert status == 200, (path, status, body)
    return json.loads(body)


def test_the_overview_at_1440x900_shows_the_summary_and_25_problems(oncall, driver, request):
    from support.browser import screenshot
    url, token, _ = oncall
    at(driver, LAPTOP)
    driver.get(url + "/")
    seen = driver.execute_script("""
        const rows = Array.from(document.querySelectorAll('#unhandled tr.problem'));
        return {height: window.innerHeight,
                visible: rows.filter(r => r.getBoundingClientRect().bottom <= innerHeight).length,
                rows: rows.map(r => ({cls: r.className, state: r.querySelector('td.st').innerText,
                                      since: r.querySelector('td.since').textContent.trim(),
                                      hover: (r.querySelector('td.since time') || {}).title}))};""")
    screenshot(driver, request.node.name)
    assert seen["height"] == 900
    assert seen["visible"] >= 25, seen["visible"]
    for row in seen["rows"]:
        # the state in words in its first cell, the colour of the row from the same state
        assert f"row-{row['state']}" in row["cls"].split(), row
        assert re.fullmatch(r"\d+[smhd] ago", row["since"]), row
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", row["hover"]), row

    # the summary: each problem state split into unhandled and handled, as the API counts
    def critical(path: str) -> int:
        return sum(1 for p in api(url, path, token)["items"]
                   if p["kind"] == "check" and p["state"] == "CRITICAL")
    every = critical("/api/v1/problems?limit=1000")
    unhandled = critical("/api/v1/problems?limit=1000&unhandled=true")
    tiles = driver.execute_script("""
        return Array.from(document.querySelectorAll('#check-counts a.tile'), t => t.innerText);""")
    assert any(t.split()[:2] == ["CRITICAL", str(every)]
               and f"{unhandled} unhandled, {every - unhandled} handled" in t
               for t in tiles), (tiles, every, unhandled)
    # the router that does not answer: a fault of the fleet, above the hosts' problems
    fleet_rows = driver.execute_script("""
        return Array.from(document.querySelectorAll('#fleet tr.problem'), r => r.innerText);""")
    assert len(fleet_rows) == 1 and fleet_rows[0].split()[:3] == ["DOWN", "router", DEAD_ROUTER]
    routers = driver.execute_script("""
        return Array.from(document.querySelectorAll('#fleet-counts a.tile'), t => t.innerText)
            .filter(t => t.includes('Routers'));""")
    assert routers and routers[0].split() == ["DOWN", "Routers", "0", "of", "1", "answering"]
    severe = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert severe == []


@pytest.mark.parametrize("size", [LAPTOP, PHONE], ids=["1440x900", "390x844"])
def test_no_page_scrolls_sideways_and_every_one_passes_the_accessibility_audit(
        oncall, driver, request, size):
    """Each page loaded once at each size: its width, its screenshot, and axe-core's audit
    (WCAG 2 A and AA rules: contrast, names of controls, landmarks, tables) with no serious
    or critical violation, the login page's included."""
    from support.browser import audit, screenshot, serious
    url, _, fleet = oncall
    uuid = fleet.db_rows("SELECT uuid FROM agents ORDER BY hostname LIMIT 1")[0][0]
    at(driver, size)
    violations = {"/login": serious(driver.login_audit)}
    for path in PAGES + (f"/hosts/{uuid}",):
        driver.get(url + path)
        widths = driver.execute_script(
            "return [document.documentElement.scrollWidth, window.innerWidth]")
        screenshot(driver, f"{request.node.name}-{path.strip('/') or 'overview'}")
        assert widths[0] <= widths[1], (path, widths)
        violations[path] = serious(audit(driver))
    assert {path: lines for path, lines in violations.items() if lines} == {}


def test_30_problems_acknowledged_in_one_form_each_with_its_audit_record(oncall, driver,
                                                                        request):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from support.browser import audit, click_through, screenshot, serious
    url, token, fleet = oncall
    at(driver, LAPTOP)
    driver.get(url + "/problems")
    before = api(url, "/api/v1/problems?limit=1&unhandled=true", token)["total"]
    boxes = driver.find_elements(By.CSS_SELECTOR, "#unhandled td.pick input[name=target]")
    assert len(boxes) >= 30
    picked = [b.get_attribute("value") for b in boxes[:30]]
    for box in boxes[:30]:
        box.click()
    form = driver.find_element(By.ID, "bulk-unhandled")
    Select(form.find_element(By.NAME, "action")).select_by_visible_text("Acknowledge")
    form.find_element(By.NAME, "comment").send_keys("one change for 30")
    screenshot(driver, request.node.name)
    click_through(driver, form.find_element(By.TAG_NAME, "button"))
    assert driver.current_url.endswith("/problems")            # all done: back to the list
    after = api(url, "/api/v1/problems?limit=1&unhandled=true", token)["total"]
    assert after == before - 30
    records = fleet.db_rows(
        "SELECT who, target, details FROM web_audit WHERE action = 'ack.add'")
    assert len(records) == 30 and {who for who, _, _ in records} == {"alice"}
    assert sorted(t.split()[0] for _, t, _ in records) == sorted(p.split("/")[0] for p in picked)
    assert all(json.loads(d)["comment"] == "one change for 30" for _, _, d in records)

    # the header box ticks every row; removing acknowledgements of rows that have none is
    # refused row by row, and said
    driver.find_element(By.CSS_SELECTOR, "#unhandled th.pick input").click()
    ticked = driver.find_elements(By.CSS_SELECTOR, "#unhandled td.pick input:checked")
    assert len(ticked) == len(driver.find_elements(By.CSS_SELECTOR,
                                                   "#unhandled td.pick input[name=target]"))
    form = driver.find_element(By.ID, "bulk-unhandled")
    Select(form.find_element(By.NAME, "action")).select_by_value("unack")
    click_through(driver, form.find_element(By.TAG_NAME, "button"))
    assert driver.find_element(By.ID, "bulk-done").text == (
        f"0 of {len(ticked)} no longer acknowledged; {len(ticked)} not:")
    assert {e.text for e in driver.find_elements(By.CSS_SELECTOR, "#bulk-refused td.text")} \
        == {"not acknowledged"}
    assert serious(audit(driver)) == []


def test_a_bulk_form_is_refused_whole_for_a_role_csrf_or_rows_it_cannot_take(oncall):
    url, _, fleet = oncall
    uuid = fleet.db_rows("SELECT uuid FROM agents ORDER BY hostname LIMIT 1")[0][0]
    bob, alice = Browser(url), Browser(url)
    bob.login("bob", PASSWORD)
    alice.login("alice", PASSWORD)

    def post(who: Browser, pairs: list, csrf: str | None = None):
        form = [("csrf", csrf or who.csrf("/problems")), ("back", "/problems"), *pairs]
        status, _, page = who.request("/bulk", form)
        error = re.search(r'id="form-error" role="alert">([^<]*)<', page)
        return status, error.group(1) if error else page
    ack = [("action", "ack"), ("target", f"{uuid}/check_load")]
    assert post(bob, ack) == (403, "viewer may not acknowledge")
    assert post(alice, ack, csrf="forged")[0] == 403
    assert post(alice, [("action", "ack")]) == (422, "tick the rows to change first")
    assert post(alice, [("action", "reboot"), *ack[1:]]) == (
        422, "choose what to do with the rows ticked")
    assert post(alice, [("action", "ack"), ("target", "no slash")]) == (
        422, "not a problem of a list: &#39;no slash&#39;")
    assert post(alice, [("action", "downtime"), *ack[1:]]) == (
        422, "a downtime needs how long (2h, 30m, 1d)")
    many = [("action", "ack")] + [("target", f"{uuid}/c{i}") for i in range(1001)]
    assert post(alice, many) == (413, "1001 rows ticked: at most 1000 at once")
    assert fleet.db_rows("SELECT count(*) FROM web_audit WHERE target LIKE ?",
                         (f"{uuid}%",)) == [(0,)]


def test_a_filtered_sorted_grouped_list_is_kept_in_the_url_and_acknowledged_whole(
        oncall, driver, request):
    """The problems page's filter, order and grouping live in its URL: they survive a
    reload, the API answers the same list for the same query, and "all matching" changes
    every problem the filter matches, the rows of other pages included."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    from support.browser import click_through, screenshot
    url, token, fleet = oncall
    at(driver, LAPTOP)
    driver.get(url + "/problems")
    form = driver.find_element(By.ID, "problem-filter")
    form.find_element(By.CSS_SELECTOR, "input[name=state][value=CRITICAL]").click()
    form.find_element(By.ID, "filter-host").send_keys("WEB00[0-4]*")
    Select(form.find_element(By.ID, "filter-group")).select_by_value("host")
    click_through(driver, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
    query = "state=CRITICAL&host=WEB00%5B0-4%5D%2A&group=host"
    assert driver.current_url.endswith("/problems?" + query), driver.current_url

    def shown() -> dict:
        return driver.execute_script("""
            const q = s => Array.from(document.querySelectorAll(s));
            return {rows: q('#unhandled tr.problem').map(r => [
                        r.querySelector('td.st').innerText,
                        r.querySelector('td.hostname').innerText,
                        r.querySelector('td.what').innerText]),
                    groups: q('#unhandled tr.group th').map(t => t.innerText),
                    heading: document.querySelector('#unhandled-section h2').innerText,
                    host: document.getElementById('filter-host').value,
                    critical: document.querySelector(
                        '#problem-filter input[value=CRITICAL]').checked,
                    group: document.getElementById('filter-group').value,
                    sorted: q('#unhandled th[aria-sort]').map(
                        t => [t.innerText, t.getAttribute('aria-sort')])};""")
    first = shown()
    listed = api(url, "/api/v1/problems?handled=no&limit=1000&" + query, token)
    assert first["heading"] == f"Unhandled ({listed['total']})" and 0 < listed["total"] < 100
    assert [r[1] for r in first["rows"]] == [p["hostname"] for p in listed["items"]]
    assert {r[0] for r in first["rows"]} == {"CRITICAL"}
    assert all(r[1][:6] in ("web000", "web001", "web002", "web003", "web004")
               for r in first["rows"])
    hosts = [r[1] for r in first["rows"]]
    assert hosts == sorted(hosts)                       # grouped by host: in its order
    assert [g.split()[0] for g in first["groups"]] == sorted(set(hosts))
    assert sum(int(g.split()[1].strip("()")) for g in first["groups"]) == len(hosts)

    # a heading sorts; the order joins the filter in the URL
    click_through(driver, driver.find_element(By.CSS_SELECTOR,
                                              "#unhandled th a.sort[href*=since]"))
    since = "state=CRITICAL&host=WEB00%5B0-4%5D%2A&sort=since&group=host"
    assert driver.current_url.endswith(f"/problems?{since}"), driver.current_url
    by_since = shown()
    assert by_since["sorted"] == [["since ▲", "ascending"]]
    # the same view after a reload: the filter's fields, the order, the rows
    driver.refresh()                                    # (it returns once loaded)
    again = shown()
    assert again == by_since
    assert (again["host"], again["critical"], again["group"]) == ("WEB00[0-4]*", True, "host")
    screenshot(driver, request.node.name)

    # all matching: every problem of the filter acknowledged in one form, one record each
    recorded = len(fleet.db_rows("SELECT id FROM web_audit WHERE action = 'ack.add'"))
    form = driver.find_element(By.ID, "bulk-unhandled")
    Select(form.find_element(By.NAME, "action")).select_by_value("ack")
    form.find_element(By.NAME, "comment").send_keys("rack B")
    form.find_element(By.ID, "bulk-unhandled-all").click()
    click_through(driver, form.find_element(By.TAG_NAME, "button"))
    assert driver.current_url.endswith(f"/problems?{since}")   # back to the view
    assert shown()["heading"] == "Unhandled (0)"
    assert api(url, "/api/v1/problems?handled=no&" + query, token)["total"] == 0
    assert api(url, "/api/v1/problems?handled=yes&limit=1000&" + query, token)["total"] \
        >= listed["total"]
    records = fleet.db_rows("SELECT details FROM web_audit WHERE action = 'ack.add' "
                            "ORDER BY id")[recorded:]
    assert len(records) == listed["total"]
    assert {json.loads(d)["comment"] for d, in records} == {"rack B"}


def test_a_filter_that_is_not_one_is_said_and_the_api_refuses_it(oncall):
    url, token, _ = oncall
    b = Browser(url)
    b.login("bob", PASSWORD)
    status, _, page = b.request("/problems?state=BROKEN&sort=uuid")
    assert status == 200 and "Filter not applied: state &#39;BROKEN&#39;: expected one of" in page
    status, _, body = Browser(url).request("/api/v1/problems?group=rack",
                                           headers={"Authorization": f"Bearer {token}"})
    assert status == 422 and json.loads(body)["error"].startswith("group 'rack': expected")


def test_the_checks_list_filters_sorts_and_groups_every_check_as_the_api_does(oncall):
    """The checks page lists every declared check, OK ones too (8,000 here), worst first;
    its filter is the problems' (in the URL, the form's empty fields dropped), and the
    API answers the same rows for the same query. Without a filter the API's checks stay
    the cursor list in (uuid, plugin) order."""
    url, token, _ = oncall
    b = Browser(url)
    b.login("bob", PASSWORD)
    status, _, page = b.request("/checks")
    assert status == 200
    assert re.search(r"<h2>Checks \(8000\)</h2>", page), page[:3000]
    status, headers, _ = b.request("/checks?state=OK&host=&check=check_d%2A&parent=&site="
                                   "&q=&handled=all&group=host")
    assert status == 303
    here = "/checks?state=OK&check=check_d%2A&group=host"
    assert headers["location"] == here
    status, _, page = b.request(here)
    listed = api(url, "/api/v1/checks?limit=1000&state=OK&check=check_d*&group=host", token)
    assert listed["total"] == sum(listed["groups"].values()) and 900 < listed["total"] < 1000
    rows = re.findall(r'<tr class="problem row-(\w+)">.*?<td class="hostname"><a [^>]*>'
                      r'([^<]+)</a></td>\s*<td class="what">([^<]+)</td>', page, re.S)
    assert rows == [("OK", c["hostname"], "check_disk") for c in listed["items"][:100]]
    assert f"Checks matching the filter ({listed['total']})" in page
    worst = api(url, "/api/v1/checks?sort=state&limit=20", token)["items"]
    assert worst[0]["state"] == "CRITICAL" and worst[-1]["state"] != "OK"
    cursor = api(url, "/api/v1/checks?limit=5", token)
    assert [c["uuid"] + "/" + c["plugin"] for c in cursor["items"]] == sorted(
        c["uuid"] + "/" + c["plugin"] for c in cursor["items"])
    assert "/" in cursor["next"] and "total" not in cursor
    status, _, body = Browser(url).request("/api/v1/checks?state=DOWN,OK",
                                           headers={"Authorization": f"Bearer {token}"})
    assert status == 422 and json.loads(body)["error"].startswith("state 'DOWN': expected")


def test_the_alerts_list_filters_sorts_and_pages_as_the_api_does(oncall):
    """The alerts page's filter (severity, host and check globs, text) and order are in
    its URL, and the API answers the same alerts for the same query, page by page."""
    url, token, _ = oncall
    b = Browser(url)
    b.login("bob", PASSWORD)
    status, headers, _ = b.request("/alerts?severity=critical&host=WEB00%2A&check=&q="
                                   "&sort=severity")
    here = "/alerts?severity=critical&host=WEB00%2A&sort=severity"
    assert status == 303 and headers["location"] == here
    status, _, page = b.request(here)
    listed = api(url, "/api/v1/alerts?limit=100&severity=critical&host=WEB00*&sort=severity",
                 token)
    assert 0 < len(listed["alerts"]) <= listed["total"]
    assert {a["severity"] for a in listed["alerts"]} == {"critical"}
    assert all(a["hostname"].startswith("web00") for a in listed["alerts"])
    hosts = re.findall(r'<tr class="alert">.*?<td class="hostname"><a [^>]*>([^<]+)</a>', page,
                       re.S)
    assert hosts == [a["hostname"] for a in listed["alerts"]]
    assert f"{listed['total']} alert" in page and "match the filter" in page
    # pages of 7 make the whole list
    seen, after = [], ""
    for _ in range(100):
        found = api(url, "/api/v1/alerts?limit=7&severity=critical&host=WEB00*&sort=severity"
                    + (f"&after={after}" if after else ""), token)
        seen += [(a["key"], a["received_at"]) for a in found["alerts"]]
        after = found["next"]
        if after is None:
            break
    assert len(seen) == listed["total"] and len(set(seen)) == len(seen)
    assert seen[:len(listed["alerts"])] == [(a["key"], a["received_at"])
                                            for a in listed["alerts"]]
    status, _, body = Browser(url).request("/api/v1/alerts?severity=fatal",
                                           headers={"Authorization": f"Bearer {token}"})
    assert status == 422 and json.loads(body)["error"].startswith("severity 'fatal'")


def test_on_a_phone_a_problem_is_acknowledged_in_one_tap(oncall, driver, request):
    """Last of the module: it changes what the others read."""
    from selenium.webdriver.common.by import By

    from support.browser import click_through, screenshot
    url, _, fleet = oncall
    at(driver, PHONE)
    driver.get(url + "/")
    first = driver.find_element(By.CSS_SELECTOR, "#unhandled tr.problem")
    uuid = first.find_element(By.CSS_SELECTOR, "td.hostname a").get_attribute(
        "href").rpartition("/")[2]
    before = driver.find_element(By.CSS_SELECTOR, "#problems h2").text
    recorded = len(fleet.db_rows("SELECT id FROM web_audit WHERE action = 'ack.add'"))
    first.find_element(By.CSS_SELECTOR, "details.act summary").click()
    button = first.find_element(By.CSS_SELECTOR, "form.ack button")
    assert button.is_displayed() and button.size["height"] >= 24        # a finger's target
    screenshot(driver, request.node.name)
    click_through(driver, button)                       # no comment: it is optional
    count = int(re.match(r"Unhandled problems \((\d+),", before).group(1))
    assert driver.find_element(By.CSS_SELECTOR, "#problems h2").text.startswith(
        f"Unhandled problems ({count - 1}, ")
    records = fleet.db_rows(
        "SELECT who, action, target FROM web_audit WHERE action = 'ack.add' ORDER BY id")
    assert len(records) == recorded + 1 and records[-1][0] == "alice" and uuid in records[-1][2]
