"""The console and the API as a user meets them: a real ``fleetwatch web`` over a real fleet
(router, registry and alerting sinks, an agent whose hostname is hostile), users and tokens
made with the CLI, HTTP through urllib with a cookie jar: the login (CSRF, wrong password,
the lockout), the overview with the hostile name inert, the API with a token, the
OpenAPI document, and the console killed under load losing nothing and holding up no
sink."""

from __future__ import annotations

import functools
import http.client
import json
import re
import urllib.error
import urllib.request

import pytest

from support.alertsink import failing_plugins
from support.browser import Browser
from support.console import PASSWORD, api_post, start_console
from support.fleet import module_fleet, wait_for
from support.webcli import web

pytest.importorskip("fastapi")
pytestmark = pytest.mark.timeout(120)

HOSTILE = "web<script>alert(1)</script>\x1b[2J"


@pytest.fixture(scope="module")
def console(tmp_path_factory):
    """One console for the module's tests that read it or add what no other one counts."""
    with module_fleet(tmp_path_factory, "web") as fleet:
        yield start_console(fleet, hostname=HOSTILE)


@pytest.fixture(scope="module")
def flaky(tmp_path_factory):
    """A console over a fleet whose scheduler runs check_flaky every second, failing (each
    failure a problem at once): (fleet, operator config, URL, ``flags`` of
    :func:`failing_plugins`). Acknowledged in the browser first, then the console killed
    (the module's last test: it ends the failure and starts another console)."""
    with module_fleet(tmp_path_factory, "flaky") as fleet:
        folder, flags = failing_plugins(fleet, ["flaky"])
        yield (*start_console(
            fleet, alerting={"max_check_attempts": 1, "flap_detection": False},
            scheduler=True, plugins={"dirs": [str(folder)], "checks": [
                {"name": "check_flaky", "command": "check_flaky", "interval": 1,
                 "timeout": 5}]}), flags)


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium for the module's tests in a browser (a start each cost about a
    core-second)."""
    from support.browser import browser
    with browser() as driver:
        yield driver


@pytest.fixture
def driver(chromium):
    """The module's Chromium, without the cookies of the tests before (of any console: a
    cookie is the host's, whatever the port)."""
    chromium.execute_cdp_cmd("Network.clearBrowserCookies", {})
    return chromium


class From(Browser):
    """A :class:`Browser` whose connections come from ``source`` (any of 127/8 reaches the
    console on 127.0.0.1): what a test does to that address (a lockout) stays its own."""

    def __init__(self, base: str, source: str):
        super().__init__(base)

        class Handler(urllib.request.HTTPHandler):
            def http_open(self, req):
                return self.do_open(functools.partial(http.client.HTTPConnection,
                                                      source_address=(source, 0)), req)
        kept = [h for h in self.opener.handlers
                if not isinstance(h, urllib.request.HTTPHandler)]
        self.opener = urllib.request.build_opener(*kept, Handler)


def test_login_overview_and_logout(console):
    fleet, op, url = console
    b = Browser(url)
    status, headers, _ = b.request("/")
    assert status == 303 and headers["location"].endswith("/login")
    assert b.login("alice", "wrong password!")[0] == 401
    status, headers, _ = b.login("alice", PASSWORD)
    assert status == 303 and headers["location"].endswith("/")
    assert "samesite=strict" in headers["set-cookie"].lower()
    status, headers, page = b.request("/")
    assert status == 200 and "default-src 'self'" in headers["content-security-policy"]
    assert "alice (operator)" in page
    assert re.search(r'id="host-counts".*?>UP</span> <b>1</b>', page, re.S)
    # the hosts page lists the agent's hostname, inert: markup escaped, the control
    # character visible
    status, _, page = b.request("/hosts")
    assert status == 200 and 'id="host-total">1 host<' in page
    assert "web&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J" in page
    assert "<script>" not in page and "\x1b" not in page
    # logging out needs the page's CSRF token
    csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
    assert b.request("/logout", {"csrf": "forged"})[0] == 403
    assert b.request("/logout", {"csrf": csrf})[0] == 303
    assert b.request("/")[0] == 303
    trail = fleet.db_rows("SELECT who, action FROM web_audit ORDER BY id")
    assert ("alice", "login.failed") in trail and ("alice", "login") in trail


def test_a_login_without_the_csrf_token_is_refused(console):
    _, _, url = console
    b = Browser(url)
    b.csrf()                                     # a session, but a forged form
    assert b.login("alice", PASSWORD, csrf="forged")[0] == 403
    other = Browser(url)                         # no session at all
    assert other.request("/login", {"user": "alice", "password": PASSWORD})[0] == 403


def test_failed_logins_lock_the_user_out_from_that_address(console):
    _, _, url = console
    b = From(url, "127.0.5.1")
    for _ in range(5):
        assert b.login("bob", "not his password")[0] == 401
    status, _, page = b.login("bob", PASSWORD)   # the right one, too late
    assert status == 429 and "too many failed logins" in page
    other = From(url, "127.0.5.1")               # another user is not locked
    assert other.login("alice", PASSWORD)[0] == 303


def test_the_api_with_a_token_and_its_openapi_document(console):
    fleet, op, url = console
    b = Browser(url)
    assert b.request("/api/v1/hosts")[0] == 401
    token = web(fleet, "token", "add", "bob", "--label", "dashboards",
                "--config", str(op)).stdout.strip()
    auth = {"Authorization": f"Bearer {token}"}
    status, _, body = b.request("/api/v1/hosts", headers=auth)
    assert status == 200
    (host,) = json.loads(body)["items"]
    assert host["hostname"] == HOSTILE             # exact in JSON, which escapes it
    assert b.request("/api/v1/hosts", headers={"Authorization": "Bearer fwt_nope"})[0] == 401
    assert b.request("/api/v1/hosts?limit=0", headers=auth)[0] == 422
    routers = json.loads(b.request("/api/v1/routers", headers=auth)[2])
    assert routers["routers"][0]["reachable"] is True
    assert b.request("/api/v1/openapi.json")[0] == 401      # behind the API's login
    status, _, body = b.request("/api/v1/openapi.json", headers=auth)
    paths = json.loads(body)["paths"]
    assert {"/api/v1/hosts", "/api/v1/problems", "/api/v1/routers"} <= set(paths)
    listed = [t for t in json.loads(web(fleet, "token", "list", "--json", "--config",
                                        str(op)).stdout)
              if t["label"] == "dashboards"]     # (the module's other tests make their own)
    assert [(t["user"], t["role"], t["label"]) for t in listed] == [
        ("bob", "viewer", "dashboards")]
    assert listed[0]["last_used"] is not None


def test_in_a_real_browser_log_in_and_see_the_host(console, driver, request):
    from selenium.webdriver.common.by import By

    from support.browser import click_through, screenshot
    _, _, url = console
    driver.get(url + "/")
    assert driver.current_url.endswith("/login")
    driver.find_element(By.ID, "user").send_keys("alice")
    driver.find_element(By.ID, "password").send_keys("wrong password!")
    click_through(driver, driver.find_element(By.ID, "login"))
    assert "wrong user name or password" in driver.find_element(By.ID, "error").text
    driver.find_element(By.ID, "user").send_keys("alice")
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    click_through(driver, driver.find_element(By.ID, "login"))
    assert driver.find_element(By.ID, "who").text == "alice (operator)"
    click_through(driver, driver.find_element(By.CSS_SELECTOR, "#host-counts a"))
    # the hostile hostname is text on the page, its markup never run or parsed
    names = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#hosts td.hostname")]
    assert names == ["web<script>alert(1)</script>\\x1b[2J"]
    assert driver.execute_script(           # the console's own scripts only
        "return [...document.scripts].every("
        "s => s.src.startsWith(location.origin + '/static/'))")
    screenshot(driver, request.node.name)


def test_an_operator_acknowledges_in_the_browser_a_viewer_cannot(flaky, driver, request):
    from selenium.webdriver.common.by import By

    from support.browser import click_through, screenshot
    fleet, op, url, _ = flaky
    tokens = {name: web(fleet, "token", "add", name, "--label", "test", "--config",
                        str(op)).stdout.strip() for name in ("alice", "bob")}

    def problems(name="bob"):
        status, _, body = Browser(url).request(
            "/api/v1/problems", headers={"Authorization": f"Bearer {tokens[name]}"})
        return json.loads(body)["items"]
    wait_for(lambda: [p for p in problems() if p["check"] == "check_flaky"], 40, 0.2,
             what="the failing check a problem")
    # a viewer may read but not acknowledge, by token or by form
    bob = Browser(url)
    bob.login("bob", PASSWORD)
    csrf = bob.csrf("/")
    assert bob.request("/ack", {"csrf": csrf, "host": "agent-host",
                                "check": "check_flaky"})[0] == 403
    assert api_post(url, "/api/v1/acks", tokens["bob"],
                    {"host": "agent-host", "check": "check_flaky"})[0] == 403
    status, answer = api_post(url, "/api/v1/acks", tokens["alice"],
                              {"host": "agent-host", "check": "check_flaki"})
    assert status == 422 and "closest known: check_flaky" in answer["error"]   # never seen
    assert api_post(url, "/api/v1/runs", tokens["bob"],
                    {"host": "agent-host", "plugin": "check_flaky"})[0] == 403
    # the alert, on the alerts page and in the API, as `fleetwatch alerts` lists it
    status, _, page = bob.request("/alerts")
    assert status == 200 and "check_flaky" in page and "flaky CRITICAL - on fire" in page
    status, _, body = bob.request("/api/v1/alerts?limit=10",
                                  headers={"Authorization": f"Bearer {tokens['bob']}"})
    listed = json.loads(body)
    assert any(a["check"] == "check_flaky" and a["action"] == "trigger"
               for a in listed["alerts"]) and listed["total"] >= 1
    driver.get(url + "/login")
    driver.find_element(By.ID, "user").send_keys("alice")
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    click_through(driver, driver.find_element(By.ID, "login"))
    # the row's Ack opens its form (folded until then: a row stays one line)
    driver.find_element(By.CSS_SELECTOR, "#problems details.act summary").click()
    form = driver.find_element(By.CSS_SELECTOR, "#problems form.ack")
    form.find_element(By.NAME, "comment").send_keys("on it <b>now</b>")
    click_through(driver, form.find_element(By.TAG_NAME, "button"))
    heading = driver.find_element(By.CSS_SELECTOR, "#problems h2").text
    assert heading == "Unhandled problems (0, 1 handled)"
    screenshot(driver, request.node.name)
    # run the check now from its host's page (through the hosts page), and see what it
    # printed
    click_through(driver, driver.find_element(By.CSS_SELECTOR, "#host-counts a"))
    click_through(driver, driver.find_element(By.CSS_SELECTOR, "#hosts td.hostname a"))
    assert driver.find_element(By.ID, "hostname").text == "agent-host"
    click_through(driver, driver.find_element(By.CSS_SELECTOR, "#checks form.run button"))
    ran = driver.find_element(By.CSS_SELECTOR, "#run-state, #run-error").text
    assert ran.startswith("CRITICAL (exit 2)"), ran
    assert driver.find_element(By.ID, "run-output").text == "flaky CRITICAL - on fire"
    screenshot(driver, request.node.name + "-run")
    (handled,) = [p for p in problems() if p["check"] == "check_flaky"]
    assert handled["handled"]["ack"]["by"] == "alice"
    assert handled["handled"]["ack"]["comment"] == "on it <b>now</b>"
    assert ("alice", "ack.add") in fleet.db_rows("SELECT who, action FROM web_audit")


def test_a_host_page_without_graphite_says_so(console):
    fleet, _, url = console
    b = Browser(url)
    b.login("bob", PASSWORD)
    (uuid,) = [r[0] for r in fleet.db_rows("SELECT uuid FROM agents")]
    status, _, page = b.request(f"/hosts/{uuid}")
    assert status == 200
    assert '<h1 id="hostname">web&lt;script&gt;alert(1)&lt;/script&gt;\\x1b[2J</h1>' in page
    assert "Graphite is not configured: set graphite.url" in page
    assert "<form method=\"post\" action=\"/ack\"" not in page        # a viewer's page
    status, _, page = b.request("/hosts/no-such-host")
    assert status == 404 and "no host no-such-host in the fleet" in page


def test_schedule_and_remove_a_downtime_in_the_browser(console, driver, request):
    """A downtime scheduled in the browser: a bad value or a host the fleet has never seen
    is said in the page, beside the form, with what was typed kept; "a host not deployed
    yet" (force) takes the new host. The API refuses the same, in its ``{"error": ...}``."""
    from selenium.webdriver.common.by import By

    from support.browser import click_through, screenshot
    fleet, op, url = console
    tokens = {name: web(fleet, "token", "add", name, "--label", "t", "--config",
                        str(op)).stdout.strip() for name in ("alice", "bob")}
    assert api_post(url, "/api/v1/downtimes", tokens["bob"],
                    {"host": "db-1", "duration": "1h"})[0] == 403
    assert api_post(url, "/api/v1/downtimes", tokens["alice"],
                    {"host": "db-1", "duration": "forever"})[0] == 422
    # a host never seen: refused, naming the closest known (the agent's hostile name)
    status, answer = api_post(url, "/api/v1/downtimes", tokens["alice"],
                              {"host": "web<script>alert(1)</script>", "duration": "1h"})
    assert status == 422 and answer["error"].startswith(
        "HOST web<script>alert(1)</script>: no host of that name has been seen in the fleet "
        "(closest known: "
        "web<script>alert(1)</script>") and "force for a host not deployed yet" in \
        answer["error"]
    # a body FastAPI cannot validate: the API's own error shape, not {"detail": [...]}
    status, answer = api_post(url, "/api/v1/downtimes", tokens["alice"], {"host": "db-1"})
    assert (status, answer) == (422, {"error": "body.duration: Field required"})
    # the role is asked before the body is validated: a viewer's invalid change is refused
    # (403) and learns nothing of what the body lacks
    assert api_post(url, "/api/v1/downtimes", tokens["bob"], {"host": "db-1"}) == \
        (403, {"error": "viewer may not downtime"})
    driver.get(url + "/login")
    driver.find_element(By.ID, "user").send_keys("alice")
    driver.find_element(By.ID, "password").send_keys(PASSWORD)
    click_through(driver, driver.find_element(By.ID, "login"))
    driver.get(url + "/downtimes")

    def typed() -> tuple:
        return tuple(driver.find_element(By.ID, f"dt-{name}").get_attribute("value")
                     for name in ("host", "check", "duration", "comment"))

    driver.find_element(By.ID, "dt-host").send_keys("agent-host")
    driver.find_element(By.ID, "dt-duration").send_keys("2 hours")
    driver.find_element(By.ID, "dt-comment").send_keys("kernel update")
    click_through(driver, driver.find_element(By.ID, "dt-add"))
    assert "'2 hours' is not a duration" in driver.find_element(By.ID, "dt-error").text
    assert typed() == ("agent-host", "", "2 hours", "kernel update")
    field = driver.find_element(By.ID, "dt-duration")
    field.clear()
    field.send_keys("2h")
    click_through(driver, driver.find_element(By.ID, "dt-add"))
    assert driver.find_element(By.ID, "dt-error").text.startswith(
        "HOST agent-host: no host of that name has been seen in the fleet")
    assert typed() == ("agent-host", "", "2h", "kernel update")
    assert driver.find_elements(By.CSS_SELECTOR, "#downtimes tr.downtime") == []
    driver.find_element(By.ID, "dt-force").click()
    click_through(driver, driver.find_element(By.ID, "dt-add"))
    assert driver.find_elements(By.ID, "dt-error") == []
    (row,) = driver.find_elements(By.CSS_SELECTOR, "#downtimes tr.downtime")
    assert "agent-host" in row.text and "active" in row.text and "kernel update" in row.text
    # its window in the tables' format, UTC with the zone, as everywhere else
    assert re.search(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC - \d{4}-\d\d-\d\d "
                     r"\d\d:\d\d:\d\d UTC", row.text), row.text
    screenshot(driver, request.node.name)
    listed = json.loads(fleet.command("downtime", "list", "--json", "--config",
                                  str(op)).stdout)["downtimes"]
    assert [(d["host"], d["by"], d["comment"]) for d in listed] == [
        ("agent-host", "alice", "kernel update")]
    click_through(driver, row.find_element(By.CSS_SELECTOR, "form.remove button"))
    assert driver.find_elements(By.CSS_SELECTOR, "#downtimes tr.downtime") == []
    actions = [a for _, a in fleet.db_rows("SELECT who, action FROM web_audit")]
    assert actions.count("downtime.add") == 1 and "downtime.remove" in actions
    # removed again: nothing running by that id, from the form (a page saying so) as from
    # the API (and as an acknowledgement's removal answers)
    (gone,) = [d[0] for d in fleet.db_rows("SELECT id FROM downtimes")]
    b = Browser(url)
    b.login("alice", PASSWORD)
    csrf = re.search(r'name="csrf" value="([^"]+)"', b.request("/downtimes")[2]).group(1)
    status, headers, body = b.request("/downtimes", {"csrf": csrf, "remove": str(gone)})
    assert status == 404 and headers["content-type"].startswith("text/html")
    assert f'role="alert">no running or planned downtime {gone}</p>' in body
    assert b.request("/downtimes", {"csrf": csrf, "remove": "soon"})[0] == 422
    req = urllib.request.Request(f"{url}/api/v1/downtimes/{gone}", method="DELETE",
                                 headers={"Authorization": f"Bearer {tokens['alice']}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=10)
    assert refused.value.code == 404


def test_user_and_token_commands_say_what_is_wrong(fleet):
    op = fleet.operator_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])

    def said(*args, input="", process=False):
        """(exit status, standard error) of ``fleetwatch web ARGS``; with ``process``, run as
        a process of its own (else in this one: 0.8 core-seconds less each)."""
        if process:
            res = fleet.cli("web", *args, "--config", str(op), check=False, input=input)
        else:
            res = web(fleet, *args, "--config", str(op), check=False, input=input)
        return res.returncode, res.stderr.strip()
    assert said("user", "add", "bad name", process=True) == (
        2, "fleetwatch web: a user name is 1 to 64 letters, digits or ._@- (starting with a "
           "letter or digit)")
    assert said("user", "add", "carol", input="") == (
        2, "fleetwatch web: user add: no terminal to ask the password on: give it on "
           "standard input with --password-stdin")
    assert said("user", "add", "carol", "--role", "root", "--password-stdin",
                input="long enough pw\n") == (
        2, "fleetwatch web: a role is one of viewer, operator, admin")
    assert said("user", "add", "carol", "--password-stdin", input="short\n") == (
        2, "fleetwatch web: a password has at least 10 characters")
    assert said("user", "add", "carol", "--password-stdin", input="long enough pw\n")[0] == 0
    assert said("user", "add", "carol", "--password-stdin", input="long enough pw\n") == (
        2, "fleetwatch web: user carol exists (remove it first)")
    assert said("token", "add", "carol")[1] == \
        "fleetwatch web: a token needs a label (what it is for)"
    assert said("token", "add", "nobody", "--label", "x") == (
        2, "fleetwatch web: no user nobody")
    assert said("token", "remove", "abc")[1] == \
        "fleetwatch web: token remove: a token's id is a number (token list shows them)"
    assert said("serve", "--listen", "nonsense", process=True)[1] == \
        "fleetwatch web: --listen: listen: expected HOST:PORT, got 'nonsense'"
    assert said("user", "remove", "ghost") == (2, "fleetwatch web: no user ghost")
    users = json.loads(web(fleet, "user", "list", "--json", "--config", str(op)).stdout)
    assert [(u["name"], u["role"], u["tokens"]) for u in users] == [("carol", "viewer", 0)]


def test_killing_the_console_loses_nothing_and_holds_up_no_sink(flaky):
    """The console is one more process: killed (SIGKILL) while it serves an operator's
    changes and reads, every acknowledgement and downtime it answered 201 for is in the
    state database (listed by the commands), the sinks record the fleet all along and
    after, and started again it serves what it had."""
    import signal
    import threading
    import urllib.error

    fleet, op, url, flags = flaky
    (console,) = [p for p in fleet.procs if p.name == "web"]
    token = web(fleet, "token", "add", "alice", "--label", "t", "--config",
                str(op)).stdout.strip()

    def last_result() -> float:
        rows = fleet.db_rows("SELECT last_result FROM checks WHERE plugin = 'check_flaky'")
        return rows[0][0] if rows and rows[0][0] is not None else 0.0
    wait_for(last_result, 30, 0.1, what="the check's first result recorded")
    assert api_post(url, "/api/v1/acks", token, {"host": "agent-host", "check": "check_flaky",
                                                 "comment": "before the kill"})[0] == 201

    # the console busy with changes and reads from three clients, then killed among them
    answered: list[int] = []
    stop = threading.Event()

    def client(n: int) -> None:
        reader = Browser(url)
        for i in range(10_000):                 # until stopped, or the console is gone
            if stop.is_set():
                return
            try:
                status, body = api_post(url, "/api/v1/downtimes", token,
                                        {"host": f"db-{n}-{i}", "duration": "1h",
                                         "force": True})
                if status == 201:
                    answered.append(body["id"])
                reader.request("/api/v1/hosts", headers={"Authorization": f"Bearer {token}"})
            except (OSError, urllib.error.URLError):
                return
    clients = [threading.Thread(target=client, args=(n,)) for n in range(3)]
    for t in clients:
        t.start()
    try:
        before = last_result()
        wait_for(lambda: len(answered) >= 30 and last_result() > before, 60, 0.05,
                 what="the console answering and the sink recording meanwhile")
        console.signal(signal.SIGKILL)
        console.popen.wait(10)
    finally:
        stop.set()
        for t in clients:
            t.join(30)

    # nothing it answered for is lost; the database is whole; the sinks go on
    listed = json.loads(fleet.command("downtime", "list", "--json", "--config",
                                  str(op)).stdout)["downtimes"]
    assert set(answered) <= {d["id"] for d in listed}
    # and each one kept has its audit row: one transaction, a kill leaves both or neither
    audited = {json.loads(details)["id"] for (details,) in fleet.db_rows(
        "SELECT details FROM web_audit WHERE action = 'downtime.add'")}
    assert audited == {d["id"] for d in listed}
    (ack,) = json.loads(fleet.command("ack", "list", "--json", "--config",
                                      str(op)).stdout)["acks"]
    assert ack["comment"] == "before the kill"
    assert fleet.db_rows("PRAGMA integrity_check") == [("ok",)]
    flags["flaky"].write_text("OK")
    wait_for(lambda: fleet.db_rows("SELECT status FROM checks WHERE plugin = 'check_flaky'")
             == [(0,)], 30, 0.1, what="the recovery recorded after the kill")

    # started again, it serves what it had
    again = fleet.start("web", "web", "--config", str(op))
    found = wait_for(lambda: re.findall(r"at (http://127\.0\.0\.1:\d+)/", again.log())[1:],
                     20, what="the console's address again")
    b = Browser(found[-1])
    b.login("alice", PASSWORD)
    assert "db-0-0" in b.request("/downtimes")[2]
    assert len(json.loads(b.request("/api/v1/downtimes", headers={
        "Authorization": f"Bearer {token}"})[2])["downtimes"]) == len(listed)
