"""The rules' pages in a real headless Chromium, at a laptop's and a phone's size: the list
and a rule's page pass axe-core's audit (nothing serious), scroll nothing sideways, keep a
hostile hostname, glob and output inert; a draft tried from the rule's page runs (a fake
``fleetwatch`` command), its progress followed by htmx until the page loads again with the
would-be pages in a table and as bands on the rule's graph.

The console is the real application served by uvicorn in this process (so that its
backtests run the fake command), over a state database real alerting sinks filled
(tests/support/rulepages.py), its graphs from a small graphite-web of the test's."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time

import pytest

from fleetwatch.store import db
from support.rulepages import FAKE, Graphite, answer, fill

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.timeout(180)

PASSWORD = "correct horse battery"
LAPTOP, PHONE = (1440, 900), (390, 844)
#: what the hostile values would make if the page let them be markup
MADE = """
const made = [];
for (const e of document.querySelectorAll('*'))
  for (const a of e.attributes)
    if (/^on/i.test(a.name)) made.push(e.tagName + ' ' + a.name);
for (const e of document.querySelectorAll('img[src=x], script:not([src])'))
  made.push(e.outerHTML.slice(0, 60));
return {pwned: typeof window.__pwned, made: made, text: document.body.innerText,
        widths: [document.documentElement.scrollWidth, window.innerWidth]};
"""


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """(the console's URL, the file whose making lets its backtests end): alice (operator)
    may try drafts, whose backtests run the fake command."""
    import uvicorn

    from fleetwatch.actions.console import Actions
    from fleetwatch.cli.operator import OperatorConfig
    from fleetwatch.graphs.settings import GraphiteWebSettings
    from web import store as webstore
    from web.app import create_app
    from web.backtests import Backtests
    from web.console import Console
    root = tmp_path_factory.mktemp("rule-pages")
    url = f"sqlite:///{root / 'state.db'}"
    now = fill(url, time.time() - 120)
    graphite = Graphite().start()
    engine = db.engine(url)
    webstore.create(engine)
    webstore.add_user(engine, "alice", "operator", PASSWORD, "test")
    (root / "fleetwatch.py").write_text(FAKE)
    (root / "answer.json").write_text(json.dumps(answer(now)))
    config = OperatorConfig(routers=["tcp://127.0.0.1:9"], state_url=url,
                            graphite=GraphiteWebSettings(url=graphite.url()))
    console = Console(config, engine, lambda: [], Actions(url))
    console.routers = lambda: {"routers": [], "durability": None, "router_faults": []}
    app = create_app(console, "k" * 48)
    app.state.backtests = Backtests(command=[sys.executable, str(root / "fleetwatch.py"),
                                             str(root / "release"),
                                             str(root / "record.json"),
                                             str(root / "answer.json")])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{sock.getsockname()[1]}", root / "release"
    server.should_exit = True
    thread.join(10)
    sock.close()
    graphite.stop()
    engine.dispose()


def seen(d, size) -> dict:
    """The page as shown at ``size``: hostile values inert, nothing wider than the screen,
    axe-core's serious findings none."""
    from support.browser import audit, serious
    found = d.execute_script(MADE)
    assert found["pwned"] == "undefined" and found["made"] == [], found["made"]
    assert "\x1b" not in found["text"]
    assert found["widths"][0] <= found["widths"][1], (size, found["widths"])
    assert serious(audit(d)) == []
    return found


def test_the_rule_pages_are_accessible_and_a_draft_s_pages_come_onto_the_graph(
        console, request):
    console, release = console
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from support.browser import browser, click_through, screenshot
    with browser() as d:
        d.execute_cdp_cmd("Page.setBypassCSP", {"enabled": True})   # the escaping is tested
        d.get(console + "/login")
        d.find_element(By.ID, "user").send_keys("alice")
        d.find_element(By.ID, "password").send_keys(PASSWORD)
        click_through(d, d.find_element(By.ID, "login"))
        for width, height in (LAPTOP, PHONE):
            d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
                "width": width, "height": height, "deviceScaleFactor": 1,
                "mobile": width < 600})
            d.get(console + "/rules")
            found = seen(d, (width, height))
            assert '<script>alert(1)</script>*' in found["text"]        # shown as text
            screenshot(d, f"{request.node.name}-list-{width}")
            d.get(console + "/rules/disk_full")
            found = seen(d, (width, height))
            assert '<img src=x onerror="window.__pwned=1">\\x1b[31m' in found["text"]
            assert d.find_elements(By.CSS_SELECTOR, "#graph-rule svg polyline")
            screenshot(d, f"{request.node.name}-rule-{width}")
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": LAPTOP[0], "height": LAPTOP[1], "deviceScaleFactor": 1, "mobile": False})
        d.get(console + "/rules/disk_full")
        critical = d.find_element(By.ID, "draft-critical")
        critical.clear()
        critical.send_keys("> 92")
        click_through(d, d.find_element(By.ID, "draft-run"))
        # the section follows the run (its progress), then the page is loaded again with
        # its results
        WebDriverWait(d, 30).until(
            lambda _: "reading the lake" in d.find_element(By.ID, "backtest-progress").text)
        assert not d.find_elements(By.ID, "backtest-summary")
        assert "running=1" in d.current_url
        seen(d, LAPTOP)
        d.execute_script("document.getElementById('draft').scrollIntoView()")
        screenshot(d, f"{request.node.name}-running")
        release.touch()
        WebDriverWait(d, 30).until(
            lambda _: d.find_elements(By.ID, "backtest-summary"))
        assert "running=1" not in d.current_url
        bands = d.find_elements(By.CSS_SELECTOR, '#graph-rule rect[fill-opacity="0.25"]')
        assert len(bands) == 3
        assert "1 added, 1 avoided" in d.find_element(By.ID, "backtest-summary").text
        seen(d, LAPTOP)
        screenshot(d, f"{request.node.name}-backtest")
        d.execute_script("document.getElementById('backtest').scrollIntoView()")
        screenshot(d, f"{request.node.name}-backtest-tables")
        d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": PHONE[0], "height": PHONE[1], "deviceScaleFactor": 1, "mobile": True})
        d.refresh()
        seen(d, PHONE)
