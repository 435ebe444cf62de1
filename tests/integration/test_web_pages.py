"""The console's pages beyond the overview, as an operator uses them: the problems page
(unhandled, then acknowledged), the hosts page (search, filter by state, pages, grouped by
parent), the fleet's own health (router and sink counters from the routers' tails), and the
API's cursors. A real fleet and a real ``fleetwatch web`` for the first; a real state
database filled as 250 agents leave it (bench/webfill.py), with a console whose router does
not answer, for the pages of many hosts."""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from urllib.parse import quote

import pytest

from fleetwatch import __version__
from support.alertsink import failing_plugins
from support.browser import Browser
from support.console import PASSWORD, api_post, serve, start_console
from support.fleet import wait_for
from support.graphite import DealerAgent
from support.zmqio import recv

pytest.importorskip("fastapi")
import zmq  # noqa: E402

from fleetwatch import protocol  # noqa: E402
pytestmark = pytest.mark.timeout(120)
sys.path.append(str(Path(__file__).parents[2] / "bench"))   # last: bench/web.py is not web/


def api(url: str, path: str, token: str):
    status, _, body = Browser(url).request(path, headers={"Authorization": f"Bearer {token}"})
    assert status == 200, (path, status, body)
    return json.loads(body)


def test_problems_hosts_and_the_fleet_s_health(fleet, zctx):
    folder, _ = failing_plugins(fleet, ["flaky"])
    fleet, op, url = start_console(
        fleet, alerting={"max_check_attempts": 1, "flap_detection": False}, scheduler=True,
        sinks={"stats_interval": 1.0},
        plugins={"dirs": [str(folder)], "checks": [
            {"name": "check_flaky", "command": "check_flaky", "interval": 1, "timeout": 5}]})
    token = fleet.cli("web", "token", "add", "alice", "--label", "t", "--config",
                      str(op)).stdout.strip()
    b = Browser(url)
    b.login("alice", PASSWORD)

    # the problem, unhandled; acknowledged, it moves to its own section
    def section(page, name):
        return re.search(rf'<section id="{name}-section">(.*?)</section>', page, re.S).group(1)
    wait_for(lambda: "check_flaky" in section(b.request("/problems")[2], "unhandled"), 40,
             0.2, what="the failing check on the problems page")
    assert api_post(url, "/api/v1/acks", token,
                    {"host": "agent-host", "check": "check_flaky", "comment": "on it"})[0] == 201
    page = b.request("/problems")[2]
    assert "check_flaky" not in section(page, "unhandled")
    assert "check_flaky" in section(page, "acknowledged") and "ACK alice/t: on it" in page     # the token speaks for alice
    listed = api(url, "/api/v1/problems?unhandled=true", token)
    assert [p["check"] for p in listed["items"]] == [] and listed["next"] is None
    # listed on the acknowledgements page, removed there: the problem is unhandled again
    (ack,) = api(url, "/api/v1/acknowledgements", token)["acknowledgements"]
    assert (ack["hostname"], ack["check"], ack["by"]) == ("agent-host", "check_flaky", "alice/t")
    page = b.request("/acks")[2]
    assert "check_flaky" in page and "on it" in page
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    assert b.request("/acks", {"csrf": csrf, "remove": str(ack["id"])})[0] == 303
    assert b.request("/acks", {"csrf": csrf, "remove": str(ack["id"])})[0] == 404
    assert "check_flaky" in section(b.request("/problems")[2], "unhandled")
    assert api(url, "/api/v1/acknowledgements", token)["acknowledgements"] == []
    assert ("alice", "ack.remove") in fleet.db_rows("SELECT who, action FROM web_audit")

    # the host page lists its recent alerts; the API by host too
    (uuid,) = [r[0] for r in fleet.db_rows("SELECT uuid FROM agents")]
    alerts = re.search(r'<section id="host-alerts">(.*?)</section>',
                       b.request(f"/hosts/{uuid}")[2], re.S).group(1)
    assert "check_flaky" in alerts and "flaky CRITICAL - on fire" in alerts
    # an open page's update (htmx) keeps its graphs: Graphite is not asked again
    assert "Graphite is not configured" in b.request(f"/hosts/{uuid}")[2]
    update = b.request(f"/hosts/{uuid}", headers={"HX-Request": "true"})[2]
    assert '<section id="graphs" hx-preserve="true">' in update
    assert "Graphite is not configured" not in update
    mine = api(url, f"/api/v1/alerts?host={uuid}", token)
    assert mine["alerts"] and {a["uuid"] for a in mine["alerts"]} == {uuid}
    assert api(url, "/api/v1/alerts?host=nobody", token)["alerts"] == []

    # the hosts page: search, state, no match
    assert 'id="host-total">1 host<' in b.request("/hosts?q=AGENT-h")[2]
    assert 'id="host-total">1 host<' in b.request("/hosts?state=UP")[2]
    assert 'id="host-total">0 hosts<' in b.request("/hosts?q=nobody")[2]
    assert 'id="host-total">0 hosts<' in b.request("/hosts?state=DOWN")[2]

    # the fleet's health: the router's and the sinks' counters, from the tail
    def health():
        return b.request("/health")[2]
    wait_for(lambda: all(name in health() for name in
                         ("sink-alerting", "sink-registry", "router.agents")), 30, 0.3,
             what="the router's and the sinks' counters on the health page")
    page = health()
    counters = re.search(r'<section id="router-counters">(.*?)</section>', page, re.S).group(1)
    assert "router-1" in counters and "router.agents" in counters
    # each router's, sink's and scheduler's fleetwatch version (docs/operating/upgrading.md)
    assert f'<td class="version">{__version__}</td>' in counters
    routers = re.search(r'<section id="routers">(.*?)</section>', page, re.S).group(1)
    assert f'<td class="version">{__version__}</td>' in routers
    found = api(url, "/api/v1/health", token)
    assert [r["id"] for r in found["router_stats"]] == ["router-1"]
    assert {s["version"] for s in found["sinks"]} == {__version__}
    assert found["router_stats"][0]["metrics"]["router.agents"] == 1
    assert {s["id"] for s in found["sinks"]} == {"sink-alerting", "sink-registry"}
    # graphite and history have no sink: the router drops what it routes there, and says so
    assert any(k.startswith("router.dropped.") for k in found["router_stats"][0]["problems"])
    # the scheduler reports its counters as the sinks do (issue 31 item 12)
    found = wait_for(lambda: (h := api(url, "/api/v1/health", token))["schedulers"] and h,
                     30, 0.3, what="the scheduler's counters on the health page")
    assert [s["id"] for s in found["schedulers"]] == ["scheduler"]
    assert found["schedulers"][0]["metrics"]["scheduler.jobs"] == 1
    # the RUNs sent to the router for its own agent are forwarded, none is a problem
    assert found["router_stats"][0]["metrics"]["router.forwarded.RUN"] >= 1

    # nobody passes for a router, a sink or a scheduler by saying so (issue 31 item 6): a
    # local process is refused at the intake, an agent's STATS stays an agent's
    spoof = {"agent.spool.dropped": 1}
    drops = [{"uuid": uuid, "type": "STATS", "sink": "history", "count": 987654321}]
    local = zctx.socket(zmq.DEALER)
    local.linger = 0
    local.connect(f"ipc://{fleet.root / 'agent-state' / 'intake.sock'}")
    for source in ("router", "sink", "scheduler"):
        local.send_multipart(protocol.encode(protocol.make(
            "STATS", "local", metrics=spoof, source=source, drops=drops)))
        answer = protocol.decode(recv(local, 10.0))
        assert (answer.type, answer.get("status")) == ("ERROR", 403), answer.body
    router = json.loads((fleet.root / "router-1.ready.json").read_text())
    liar = DealerAgent(zctx, router, "liar-host")

    def liar_seen():
        for source in ("router", "sink", "scheduler"):
            liar.send("STATS", metrics=spoof, source=source, drops=drops)
        h = api(url, "/api/v1/health", token)
        return h if any(a["uuid"] == liar.uuid for a in h["agents"]) else None
    found = wait_for(liar_seen, 30, 0.5, what="the liar's STATS read as an agent's")
    assert [r["id"] for r in found["router_stats"]] == ["router-1"]
    assert {s["id"] for s in found["sinks"]} == {"sink-alerting", "sink-registry"}
    assert [s["id"] for s in found["schedulers"]] == ["scheduler"]
    # (the router's own drops are real: this fleet has no history sink)
    assert all(d["count"] < 987654321 for d in found["router_drops"]), found["router_drops"]
    page = health()
    assert "987654321" not in page
    for name in ("router-counters", "sinks", "schedulers"):
        shown = re.search(rf'<section id="{name}">(.*?)</section>', page, re.S).group(1)
        assert liar.uuid not in shown and "liar-host" not in shown, name


@pytest.fixture(scope="module")
def many(tmp_path_factory):
    """A console over a state database of 250 agents (bench/webfill.py), its one router
    not answering: (url, token, the agents' uuids)."""
    import subprocess

    import webfill
    root = tmp_path_factory.mktemp("many")
    url_db = f"sqlite:///{root / 'state.db'}"
    uuids = webfill.fill(url_db, 250, 4, time.time())
    op = root / "fleetwatch.yaml"
    op.write_text(f"routers: [tcp://127.0.0.1:9]\nstate_url: {url_db}\ntimeout: 0.3\n"
                  f"web:\n  listen: 127.0.0.1:0\n  secret_file: {root}/secret\n")
    env_cmd = [sys.executable, "-m", "fleetwatch"]
    subprocess.run(env_cmd + ["web", "user", "add", "carol", "--role", "viewer",
                              "--password-stdin", "--config", str(op)],
                   input=PASSWORD + "\n", text=True, check=True, capture_output=True)
    token = subprocess.run(env_cmd + ["web", "token", "add", "carol", "--label", "t",
                                      "--config", str(op)],
                           text=True, check=True, capture_output=True).stdout.strip()
    log = open(root / "web.log", "w+")
    proc = subprocess.Popen(env_cmd + ["web", "--config", str(op)], stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        found = wait_for(lambda: re.search(r"at (http://127\.0\.0\.1:\d+)/",
                                           (root / "web.log").read_text()), 20,
                         what="the console's address")
        yield found.group(1), token, uuids
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_hosts_in_pages_by_name_and_by_parent(many):
    url, _, _ = many
    b = Browser(url)
    b.login("carol", PASSWORD)
    page = b.request("/hosts")[2]
    assert 'id="host-total">250 hosts, page 1 of 3<' in page
    names = re.findall(r'<td class="hostname"><a href="[^"]+">([^<]+)</a>', page)
    assert names == [f"web{i:05d}" for i in range(100)]
    page = b.request(re.search(r'rel="next" href="([^"]+)"', page).group(1).replace("&amp;", "&"))[2]
    assert re.findall(r'<td class="hostname"><a href="[^"]+">([^<]+)</a>', page)[0] == "web00100"
    assert 'id="host-total">10 hosts, ' not in page
    assert 'id="host-total">10 hosts<' in b.request("/hosts?q=web0001")[2]
    # a glob matches the whole name (ignoring case); the handled filter stays in the links
    assert 'id="host-total">10 hosts<' in b.request("/hosts?q=WEB0001?")[2]
    assert 'id="host-total">0 hosts<' in b.request("/hosts?q=eb0001*")[2]
    page = b.request("/hosts?handled=no&sort=-hostname")[2]
    unhandled = int(re.search(r'id="host-total">(\d+) hosts not handled, page 1 of 3', page)[1])
    assert '<option value="no" selected>not handled</option>' in page
    assert "handled=no" in re.search(r'rel="next" href="([^"]+)"', page).group(1)
    page = b.request("/hosts?handled=yes")[2]
    handled = int(re.search(r'id="host-total">(\d+) hosts? down and handled<', page)[1])
    assert handled + unhandled == 250        # (which: tests/unit/query/test_query_pages.py)
    # grouped by parent: every host not a multiple of 100 is behind one
    page = b.request("/hosts?group=parent")[2]
    parents = re.findall(r'<td class="parent-name"><a href="([^"]+)">([^<]+)</a>', page)
    assert [name for _, name in parents] == ["web00000", "web00100", "web00200"]
    page = b.request(parents[1][0].replace("&amp;", "&"))[2]
    assert 'id="host-total">99 hosts behind web00100<' in page
    # grouped by site: none here, every host attached to a central router
    page = b.request("/hosts?group=site")[2]
    sites = re.findall(r'<td class="site-name"><a href="([^"]+)">([^<]+)</a></td>\s*<td>(\d+)',
                       page)
    assert [(name, n) for _, name, n in sites] == [("(central: no site)", "250")]
    page = b.request(sites[0][0].replace("&amp;", "&"))[2]
    assert 'id="host-total">250 hosts attached to a central router, page 1 of 3<' in page
    assert 'id="host-total">0 hosts behind the site paris<' in b.request("/hosts?site=paris")[2]
    # the routers did not answer: the overview says so and still counts the fleet
    page = b.request("/")[2]
    assert re.search(r'id="host-counts".*?>UP</span> <b>\d+</b>', page, re.S) and ">no<" in page


def test_hosts_sorted_by_a_column_in_sql_the_order_kept_in_the_url(many):
    """A column's heading sorts by it, again the other way; the order stays in the links
    to the next page and in the search form, and the database gives it (page 2 continues
    page 1)."""
    url, _, _ = many
    b = Browser(url)
    b.login("carol", PASSWORD)

    def names(page):
        return re.findall(r'<td class="hostname"><a href="[^"]+">([^<]+)</a>', page)

    def states(page):
        return re.findall(r'<tr class="host">.*?<span class="state state-(\w+)"', page, re.S)
    page = b.request("/hosts")[2]
    assert 'href="/hosts?q=&amp;state=&amp;parent=&amp;handled=all&amp;sort=-hostname"' in page
    page = b.request("/hosts?sort=-hostname")[2]
    assert names(page)[:3] == ["web00249", "web00248", "web00247"]
    assert 'aria-sort="descending"' in page and 'name="sort" value="-hostname"' in page
    following = re.search(r'rel="next" href="([^"]+)"', page).group(1).replace("&amp;", "&")
    assert "sort=-hostname" in following
    assert names(b.request(following)[2])[0] == "web00149"
    # worst first: the DOWN hosts, then the UNREACHABLE ones behind them, then UP
    shown = states(b.request("/hosts?sort=state")[2])
    order = ["DOWN", "UNREACHABLE", "UP", "UNKNOWN", "GONE"]
    assert shown == sorted(shown, key=order.index) and shown[0] != "UP", shown[:5]
    backwards = states(b.request("/hosts?sort=-state")[2])
    assert backwards == sorted(backwards, key=order.index, reverse=True)
    # an order it does not know is the hostname's, not an error
    assert names(b.request("/hosts?sort=uuid;drop")[2])[0] == "web00000"


def test_the_api_s_cursors_list_every_host_and_check_once(many):
    url, token, uuids = many
    seen, after = [], ""
    while True:
        page = api(url, f"/api/v1/hosts?limit=64&after={quote(after)}", token)
        seen += [h["uuid"] for h in page["items"]]
        if page["next"] is None:
            break
        after = page["next"]
    assert seen == sorted(uuids)
    checks, after = [], ""
    while True:
        page = api(url, f"/api/v1/checks?limit=333&after={quote(after)}", token)
        checks += [(c["uuid"], c["plugin"]) for c in page["items"]]
        if page["next"] is None:
            break
        after = page["next"]
    assert len(checks) == 250 * 4 and len(set(checks)) == len(checks) and checks == sorted(checks)
    critical = api(url, "/api/v1/checks?state=CRITICAL&limit=1000", token)["items"]
    assert critical and {c["state"] for c in critical} == {"CRITICAL"}
    one = api(url, f"/api/v1/hosts/{uuids[0]}", token)
    assert one["agent"]["uuid"] == uuids[0] and len(one["checks"]) == 4
    status, _, body = Browser(url).request("/api/v1/hosts/nope",
                                           headers={"Authorization": f"Bearer {token}"})
    assert status == 404 and json.loads(body) == {"error": "no such host in the fleet"}
    acks = api(url, "/api/v1/acknowledgements", token)["acknowledgements"]
    assert acks and all(a["ended"] is None for a in acks)
    assert api(url, "/api/v1/silences", token) == {"silences": []}


def test_the_console_over_tls_with_a_certificate_in_the_config(fleet, tmp_path):
    """web.tls_cert and web.tls_key: HTTPS, the session cookie Secure; plain HTTP is not
    answered as a page."""
    import ssl
    import subprocess
    cert, key = tmp_path / "console.pem", tmp_path / "console.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    router = fleet.router()
    op = fleet.operator_config([router])
    url = serve(fleet, op, web=f"  tls_cert: {cert}\n  tls_key: {key}\n")
    assert url.startswith("https://")
    b = Browser(url, ssl.create_default_context(cafile=str(cert)))
    status, headers, _ = b.login("alice", PASSWORD)
    assert status == 303 and "secure" in headers["set-cookie"].lower()
    status, _, page = b.request("/")
    assert status == 200 and "alice (viewer)" in page
    with pytest.raises(Exception):
        Browser(url.replace("https:", "http:")).request("/login")


def test_in_a_real_browser_a_host_page_draws_graphite_s_data(carbon, graphite_web, fleet,
                                                             zctx, request):
    """A real carbon and graphite-web, the real graphite sink, an agent's STATS: its host
    page in Chromium draws its metrics as lines from the render API's data, in a grid at
    1440 px with what matters first (CPU, load, memory, network as a rate in B/s), the
    agent's own counters behind the fold, and a custom range shared by the grid."""
    from selenium.webdriver.common.by import By

    from support.browser import browser, click_through, screenshot
    from support.graphite import PREFIX, DealerAgent, graphite_sink, points, warm_up
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port)
    fleet.sink("registry", [router])
    agent = DealerAgent(zctx, router, "web1.example.com")
    warm_up(carbon, agent)
    now = int(time.time())
    for i in range(0, 20, 2):
        agent.stats({"cpu.percent": 10.0 + i, "load.1": 0.25 * i,
                     "memory.used_percent": 40.0 + i, "netio.bytes_recv": 1000 * i * i,
                     "agent.spool.size": i}, ts=now - 30 + i)
    points(carbon, f"{PREFIX}.web1_example_com.cpu.percent", want=10)
    points(carbon, f"{PREFIX}.web1_example_com.agent.spool.size", want=10)
    op = fleet.operator_config([router])
    url = serve(fleet, op, config=f"graphite:\n  url: {graphite_web.url}\n  prefix: {PREFIX}\n")

    def registered():                     # (its first HELLO may have found no registry yet)
        agent.send("HELLO", hostname=agent.hostname, heartbeat=30.0, role="agent")
        return fleet.db_rows("SELECT uuid FROM agents WHERE hostname = 'web1.example.com'")
    (uuid,), = wait_for(registered, 20, 0.5, what="the agent registered")
    with browser() as driver:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 1440, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        driver.get(url + "/login")
        driver.find_element(By.ID, "user").send_keys("alice")
        driver.find_element(By.ID, "password").send_keys(PASSWORD)
        click_through(driver, driver.find_element(By.ID, "login"))
        driver.get(f"{url}/hosts/{uuid}")
        grid = driver.execute_script("""
            return Array.from(document.querySelectorAll('#graph-grid > figure'), f => {
                const r = f.getBoundingClientRect();
                return [f.id, Math.round(r.top), Math.round(r.left), Math.round(r.width)]; });""")
        assert [g[0] for g in grid] == ["graph-cpu", "graph-load", "graph-memory",
                                        "graph-network"], grid
        assert grid[0][1] == grid[1][1] and grid[1][2] > grid[0][2]      # side by side
        cpu = driver.find_element(By.ID, "graph-cpu")
        lines = cpu.find_elements(By.XPATH, ".//*[local-name()='polyline']")
        drawn = [p for line in lines for p in line.get_attribute("points").split()]
        assert len(drawn) >= 4, drawn          # the values, as lines (gaps split them)
        assert cpu.size["height"] > 50 and cpu.size["width"] > 200   # drawn, not text
        # one unit a graph, on its axis: the counter as its rate
        network = driver.find_element(By.ID, "graph-network").get_attribute("innerHTML")
        assert " B/s<" in network and "bytes_recv (last " in network
        assert "%<" in driver.find_element(By.ID, "graph-memory").get_attribute("innerHTML")
        # the agent's own counters behind the fold, closed
        more = driver.find_element(By.ID, "graphs-more")
        assert more.get_attribute("open") is None
        assert not driver.find_element(By.ID, "graph-series-agent-spool").is_displayed()
        screenshot(driver, request.node.name)
        # one range for the grid: from and until, in the URL
        start = time.strftime("%Y-%m-%dT%H:%M", time.gmtime(now - 3600))
        form = driver.find_element(By.ID, "graph-range-form")
        driver.execute_script("arguments[0].value = arguments[1]",
                              form.find_element(By.ID, "graph-from"), start)
        click_through(driver, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
        assert "from=" + start.replace(":", "%3A") in driver.current_url
        span = driver.find_element(By.ID, "graph-span").text
        assert span.startswith(start.replace("T", " ") + ":00 UTC to "), span
        assert driver.find_elements(By.ID, "graph-cpu")

        # pinned to alice's dashboard, which draws it again, named by its host
        for key in ("cpu", "network"):
            click_through(driver, driver.find_element(By.CSS_SELECTOR,
                                                      f"#graph-{key} form.pin button"))
            assert driver.current_url.endswith(f"/hosts/{uuid}")
        # and any of its series, by a glob over their paths below the host
        form = driver.find_element(By.ID, "pin-series")
        form.find_element(By.ID, "pin-series-pattern").send_keys("agent.spool.*")
        click_through(driver, form.find_element(By.CSS_SELECTOR, "button[type=submit]"))
        assert driver.current_url.endswith(f"/hosts/{uuid}")
        driver.get(url + "/dashboard")
        pinned = driver.find_elements(By.CSS_SELECTOR, "#dashboard-grid figure.pinned")
        assert [f.find_element(By.TAG_NAME, "figcaption").text.split("\n")[0]
                for f in pinned] == ["web1.example.com"] * 3
        assert "CPU" in pinned[0].get_attribute("innerHTML")
        assert " B/s<" in pinned[1].get_attribute("innerHTML")
        picked = pinned[2].get_attribute("innerHTML")
        assert "agent.spool.*" in picked and "agent.spool.size (last " in picked
        assert pinned[2].find_elements(By.XPATH, ".//*[local-name()='polyline']")
        share = driver.find_element(By.CSS_SELECTOR, "#dashboard-share a").get_attribute("href")
        assert share == url + "/dashboard?user=alice"
        screenshot(driver, request.node.name + "-dashboard")
        click_through(driver, pinned[0].find_element(By.CSS_SELECTOR, "form.unpin button"))
        assert len(driver.find_elements(By.CSS_SELECTOR, "#dashboard-grid figure")) == 2
    audit = fleet.db_rows("SELECT who, action, target FROM web_audit WHERE action LIKE 'pin.%' "
                          "ORDER BY id")
    assert audit == [("alice", "pin.add", f"{uuid} cpu"), ("alice", "pin.add", f"{uuid} network"),
                     ("alice", "pin.add", f"{uuid} series:agent.spool.*"),
                     ("alice", "pin.remove", f"{uuid} cpu")]
    # shared by its URL, read by anyone logged in, changed by its owner only; bounded
    other = Browser(url)                  # (another session of alice's: the form's CSRF)
    other.login("alice", PASSWORD)
    status, _, page = other.request("/dashboard?user=alice")
    assert status == 200 and page.count('class="graph pinned"') == 2
    csrf = other.csrf("/dashboard")
    assert other.request("/pins", [("csrf", "forged"), ("uuid", uuid),
                                   ("graph", "cpu")])[0] == 403
    assert other.request("/pins", [("csrf", csrf), ("uuid", uuid), ("graph", "<x>")])[0] == 422
    status, _, page = other.request("/pins", [("csrf", csrf), ("uuid", uuid),
                                              ("series", "load.*<script>")])
    assert status == 422 and "a series is a glob over the path below the host" in page
    for i in range(46):
        assert other.request("/pins", [("csrf", csrf), ("uuid", uuid),
                                       ("graph", f"series-{i}")])[0] == 303
    status, _, page = other.request("/pins", [("csrf", csrf), ("uuid", uuid),
                                              ("graph", "load")])
    assert status == 409 and "a dashboard holds at most 48 graphs" in page
