"""The console's pages as a browser loads them: their CSS and JavaScript from the console
itself (built from npm packages by ``make assets``, web/assets.py), nothing from elsewhere,
no Content-Security-Policy violation, and a page left open that updates itself (short
polling, ``web.refresh``): a downtime scheduled through the API appears on the open
downtimes page without a reload, not while the user types in its form, and a session that
ends sends the page to the login form; over a real fleet, a host page, the overview, the
alerts and the problems follow a check that fails, recovers, fails again and is
acknowledged, each without a reload. Without the built files every page is served all
the same, and the console says once how to build them.

A real ``fleetwatch web`` (no routers for the first: these pages read the state database;
a router, sinks, a scheduler and an agent running a real plugin for the fleet's), Debian's
headless Chromium driven by Selenium."""

from __future__ import annotations

import hashlib
import json
import re
import urllib.request

import pytest
import yaml

from support.browser import Browser
from support.fleet import wait_for

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(120)

PASSWORD = "correct horse battery"


def start(fleet, **web):
    """``fleetwatch web`` with ``web`` settings and an operator, alice: (config, its
    process, its URL, alice's API token)."""
    op = fleet.operator_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])
    settings = {"listen": "127.0.0.1:0", "secret_file": str(fleet.root / "secret"), **web}
    op.write_text(op.read_text() + yaml.safe_dump({"web": settings}))
    fleet.cli("web", "user", "add", "alice", "--role", "operator", "--password-stdin",
              "--config", str(op), input=PASSWORD + "\n")
    token = fleet.cli("web", "token", "add", "alice", "--label", "test", "--config",
                      str(op)).stdout.strip()
    proc = fleet.start("web", "web", "--config", str(op))
    found = wait_for(lambda: re.search(r"at (http://127\.0\.0\.1:\d+)/", proc.log()), 20,
                     what="the console's address")
    return op, proc, found.group(1), token


def schedule(url: str, token: str, host: str) -> int:
    """A downtime of ``host`` scheduled through the API: its id."""
    req = urllib.request.Request(url + "/api/v1/downtimes", method="POST",
                                 data=json.dumps({"host": host, "duration": "2h",
                                                  "force": True}).encode(),
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as res:
        assert res.status == 201
        return json.loads(res.read())["id"]


def rows(driver) -> list[str]:
    """The downtimes the open page lists (read in one go: the page may swap meanwhile)."""
    return driver.execute_script("return Array.from(document.querySelectorAll("
                                 "'#downtimes tr.downtime'), r => r.innerText)")


def text(driver, selector: str) -> str:
    return driver.execute_script("return document.querySelector(arguments[0]).innerText",
                                 selector)


def until(driver, condition, what: str, timeout: float = 20.0):
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait
    return WebDriverWait(driver, timeout, 0.1, (StaleElementReferenceException,)).until(
        lambda d: condition(), message=what)


@pytest.fixture
def built():
    from web import assets
    missing = assets.Assets(assets.BUILT).missing()
    if missing:
        pytest.skip(f"the console's assets are not built ({', '.join(missing)}): "
                    f"{assets.HOW}")
    return assets.BUILT


def test_an_open_page_updates_itself_from_the_console_alone(fleet, built, request):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    from support.browser import browser, click_through, screenshot
    op, _, url, token = start(fleet, refresh=1)
    with browser(logs=True) as driver:
        driver.get(url + "/login")
        driver.find_element(By.ID, "user").send_keys("alice")
        driver.find_element(By.ID, "password").send_keys(PASSWORD)
        click_through(driver, driver.find_element(By.ID, "login"))
        driver.get(url + "/downtimes")
        assert rows(driver) == []
        driver.execute_script("window.sameDocument = true")   # gone if the page reloads

        # a downtime scheduled elsewhere appears on the open page, without a reload
        schedule(url, token, "db-1")
        until(driver, lambda: any("db-1" in r for r in rows(driver)), "the downtime shown")
        assert driver.execute_script("return window.sameDocument") is True
        # when, in the console's one time format: 24-hour UTC with the zone said
        assert re.fullmatch(r"Updated \d\d:\d\d:\d\d UTC", text(driver, "#live"))

        # its CSS and JavaScript came from the console, and nothing else did
        names = driver.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert names and all(n.startswith(url + "/") for n in names), names
        loaded = {re.sub(r"\?v=[0-9a-f]+$", "", n).removeprefix(url) for n in names}
        assert {"/static/pico.classless.min.css", "/static/fleetwatch.css",
                "/static/htmx.min.js", "/static/console.js"} <= loaded
        assert driver.execute_script(
            "return getComputedStyle(document.querySelector('#downtimes thead th')).position"
        ) == "sticky"                                         # fleetwatch.css applied
        screenshot(driver, request.node.name)

        # no update while the user types: what they typed stays, the page waits
        # (the page may swap its <main> between finding the field and typing: again then)
        until(driver, lambda: driver.find_element(By.ID, "dt-host").send_keys("half-typed")
              or True, "typing in the form")
        schedule(url, token, "db-2")
        until(driver, lambda: text(driver, "#live").startswith("Not updating while you edit"),
              "the update held")
        assert not any("db-2" in r for r in rows(driver))
        field = driver.find_element(By.ID, "dt-host")
        assert field.get_attribute("value") == "half-typed"
        field.send_keys(Keys.CONTROL, "a", Keys.DELETE)
        driver.find_element(By.CSS_SELECTOR, "header strong").click()   # the form as it was
        until(driver, lambda: any("db-2" in r for r in rows(driver)), "the update resumed")
        assert driver.execute_script("return window.sameDocument") is True

        # the session ends (the user removed): the next update loads the login form as a
        # page of its own, never inside this one
        fleet.cli("web", "user", "remove", "alice", "--config", str(op))
        until(driver, lambda: driver.current_url.endswith("/login"), "the login page")
        assert driver.find_elements(By.CSS_SELECTOR, "main main") == []
        assert driver.find_element(By.ID, "login")

        problems = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"
                    or "Content Security Policy" in e["message"]]
        assert problems == []


def test_a_host_the_overview_alerts_and_problems_follow_the_fleet_while_open(fleet, built,
                                                                             request):
    from selenium.webdriver.common.by import By

    from support.alertsink import failing_plugins
    from support.browser import browser, click_through, screenshot
    from support.console import PASSWORD as ALICE
    from support.console import api_post, start_console
    folder, flags = failing_plugins(fleet, ["flaky"])
    flag = flags["flaky"]
    flag.write_text("OK")
    fleet, op, url = start_console(
        fleet, alerting={"max_check_attempts": 1, "flap_detection": False}, scheduler=True,
        web="  refresh: 1\n", plugins={"dirs": [str(folder)], "checks": [
            {"name": "check_flaky", "command": "check_flaky", "interval": 1, "timeout": 5}]})
    token = fleet.cli("web", "token", "add", "alice", "--label", "t", "--config",
                      str(op)).stdout.strip()
    (uuid,) = [r[0] for r in fleet.db_rows("SELECT uuid FROM agents")]

    def opened(path: str, ready, what: str) -> None:
        """``path`` loaded, once ``ready()``; then marked, to tell a reload from an update."""
        driver.get(url + path)
        until(driver, ready, what)
        driver.execute_script("window.sameDocument = true")

    def same_document() -> bool:
        return driver.execute_script("return window.sameDocument") is True

    def alerts_on_fire() -> int:
        return sum("on fire" in r for r in driver.execute_script(
            "return Array.from(document.querySelectorAll('#alerts tr.alert'), r => r.innerText)"))

    with browser(logs=True) as driver:
        driver.get(url + "/login")
        driver.find_element(By.ID, "user").send_keys("alice")
        driver.find_element(By.ID, "password").send_keys(ALICE)
        click_through(driver, driver.find_element(By.ID, "login"))

        # a host page: its check turns CRITICAL while it is open
        opened(f"/hosts/{uuid}", lambda: "flaky OK" in text(driver, "#checks"), "the check OK")
        flag.write_text("CRITICAL")
        until(driver, lambda: "flaky CRITICAL - on fire" in text(driver, "#checks"),
              "the check CRITICAL on the open host page")
        assert same_document()
        screenshot(driver, request.node.name + "-host")

        # the overview: the problem listed, then gone when the check recovers
        opened("/", lambda: "check_flaky" in text(driver, "#problems"), "the problem listed")
        flag.write_text("OK")
        until(driver, lambda: "check_flaky" not in text(driver, "#problems"),
              "the problem gone from the open overview")
        assert "None." in text(driver, "#problems") and same_document()

        # the alerts: the check fails again, and its new alert appears
        opened("/alerts", lambda: alerts_on_fire() == 1, "the first alert listed")
        flag.write_text("CRITICAL")
        until(driver, lambda: alerts_on_fire() == 2, "the new alert on the open alerts page")
        assert same_document()

        # the problems: acknowledged elsewhere (the API), it moves to its own section
        opened("/problems", lambda: "check_flaky" in text(driver, "#unhandled-section"),
               "the problem unhandled")
        assert api_post(url, "/api/v1/acks", token,
                        {"host": "agent-host", "check": "check_flaky",
                         "comment": "on it"})[0] == 201
        until(driver, lambda: "check_flaky" in text(driver, "#acknowledged-section"),
              "the problem acknowledged on the open problems page")
        assert "check_flaky" not in text(driver, "#unhandled-section") and same_document()
        screenshot(driver, request.node.name + "-problems")

        problems = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"
                    or "Content Security Policy" in e["message"]]
        assert problems == []


def test_the_built_files_are_versioned_and_kept_by_browsers(fleet, built):
    _, _, url, _ = start(fleet)
    b = Browser(url)
    b.login("alice", PASSWORD)
    status, _, page = b.request("/alerts")
    assert status == 200
    (href,) = re.findall(r'href="(/static/fleetwatch\.css\?v=[0-9a-f]+)"', page)
    digest = hashlib.sha256((built / "fleetwatch.css").read_bytes()).hexdigest()[:16]
    assert href.endswith(f"?v={digest}")
    status, headers, body = b.request(href)
    assert status == 200 and headers["cache-control"] == "public, max-age=31536000, immutable"
    assert "default-src 'self'" in headers["content-security-policy"]
    assert body == (built / "fleetwatch.css").read_text()
    status, headers, _ = b.request("/static/fleetwatch.css")
    assert status == 200 and headers["cache-control"] == "no-cache"
    # scripts only where a page updates itself; and none from anywhere but /static/
    assert re.findall(r'<script src="([^"?]+)', page) == ["/static/htmx.min.js",
                                                          "/static/console.js"]
    assert 'hx-get="/alerts"' in page and 'hx-trigger="every 10s, live-refresh"' in page
    status, _, page = b.request("/login")
    assert "<script" not in page and "/static/pico.classless.min.css" in page


def test_without_the_built_files_every_page_is_served_and_the_log_says_why(fleet, tmp_path):
    op, proc, url, _ = start(fleet, assets=str(tmp_path / "not-built"))
    b = Browser(url)
    assert b.login("alice", PASSWORD)[0] == 303
    for path in ("/login", "/alerts", "/downtimes", "/downtimes"):
        status, _, page = b.request(path)
        assert status == 200, (path, page)
        assert "<script" not in page and "<link" not in page and "hx-get" not in page
    # a form works without JavaScript
    csrf = b.csrf("/downtimes")
    status, headers, _ = b.request("/downtimes", {"csrf": csrf, "host": "db-1",
                                                  "duration": "1h", "comment": "no js",
                                                  "force": "1"})
    assert status == 303 and headers["location"] == "/downtimes"
    assert "no js" in b.request("/downtimes")[2]
    assert b.request("/static/htmx.min.js")[0] == 404
    said = [line for line in proc.log().splitlines() if "are not built" in line]
    assert said == [
        f"the console's CSS and JavaScript are not built (pico.classless.min.css, "
        f"fleetwatch.css, htmx.min.js, console.js, favicon.svg missing in {tmp_path / 'not-built'}): pages "
        f"are served unstyled and do not update while open; build them with make assets "
        f"(or: npm ci in web/assets, then python -m web.assets)"]
