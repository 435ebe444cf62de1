"""Hostile values from an agent, inert on every console page and in every API answer (issue 19).

One real fleet for the module (router, registry and alerting sinks, a scheduler, an agent)
whose agent says a hostile hostname, runs a plugin printing hostile output, long output and
perfdata labels (two checks), and is handed a hostile notification by ``fleetwatch send``;
a local process with a hostile name sends it a heartbeat (``fleetwatch send`` too); an
operator schedules a downtime and acknowledges one check through the API, and adds a
silence with ``fleetwatch silence``, each with a hostile comment; ``fleetwatch web`` serves
it.

Each page of :data:`PAGES` is opened in a real browser (Debian's headless Chromium, with the
page's Content-Security-Policy bypassed, so that what is checked is the escaping and not the
policy that would block an inline script anyway): nothing the values would have made exists
(no script, img, svg, event handler attribute or ``javascript:`` link), ``window.__pwned`` is
undefined, no alert dialog is open, and the values are shown as text with their control
characters visible (:func:`fleetwatch.display.escape`); the same page fetched without the
browser holds none of them raw; a page that updates itself is checked again after an
update; a screenshot of each is kept in test-artifacts/. Each API answer is JSON
(``application/json``, ``nosniff``) with the exact strings, and inert when a browser opens
it. An error that repeats a hostile name is JSON from the API, escaped on a page (the host
page of a name no host has, a form's refusal with what was typed).

A page added to the console goes in :data:`PAGES`, an API answer in :data:`API`.
"""

from __future__ import annotations

import html.parser
import json
import re
import stat
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

import pytest

from fleetwatch.display import escape
from support.alertsink import QUICK
from support.browser import Browser
from support.console import PASSWORD, start_console
from support.fleet import Fleet, module_fleet, wait_for

pytest.importorskip("fastapi")
markupsafe = pytest.importorskip("markupsafe")
pytestmark = pytest.mark.timeout(180)

SCRIPT = "<script>window.__pwned=1</script>"
IMG = '<img src=x onerror="window.__pwned=2">'
SVG = '"><svg onload="window.__pwned=3">'
JS = "javascript:window.__pwned=4"
ANSI = "\x1b[31m"
TITLE = "\x1b]0;title\x07"
#: C0 (SOH, BS, VT), DEL and C1 (NEL, CSI) controls
CONTROLS = "\x01\x08\x0b\x7f\x85\x9b"
RLO = "\u202e"
LONG = "long:" + "x" * 2500 + ":end"
MARKUP = (SCRIPT, IMG, SVG)

HOSTNAME = f"{SCRIPT}{IMG}{SVG}{ANSI}{TITLE}{CONTROLS}{RLO}host"
#: (a plugin may print NUL; an argument, a YAML value cannot hold it)
OUTPUT = f"HOSTILE {SCRIPT} {IMG} {SVG} {JS} {ANSI}red {TITLE} \x00{CONTROLS} {RLO}evil {LONG}"
LONG_OUTPUT = f"{SCRIPT}\n{SVG}{ANSI}\n{RLO}{CONTROLS}{TITLE}\n{LONG}"
LABELS = (JS, IMG, f"{SCRIPT}{RLO}")
NOTE = f"note {SCRIPT} {IMG} {SVG} {JS} {ANSI}{TITLE}{CONTROLS}{RLO} {LONG}"
COMMENT = f"{SCRIPT}{IMG}{SVG}{JS}{ANSI}{TITLE}{CONTROLS}{RLO}" + "c" * 600
#: a downtime's host is a glob of printable characters: markup, not matching the agent
DT_HOST = f"{IMG}{SVG}db-*"
#: an acknowledgement's comment and a silence's reason: one line each
ACK_COMMENT = f"ack {SCRIPT}{IMG}{SVG}{JS}{ANSI}{TITLE}\x01\x7f\x9b{RLO}"
REASON = f"silence {SCRIPT}{IMG}{SVG}{ANSI}{TITLE}\x01\x7f\x9b{RLO}"
#: a local process's name, heard in its heartbeat (a LF would forge a row in a table)
PROCESS = f"backup {SCRIPT}{IMG}{ANSI}{TITLE}\x01\x7f\x9b{RLO}\nforged"
PLUGIN = "check_hostile"
#: the same plugin as a second check, acknowledged with ACK_COMMENT
ACKED = "check_acked"

#: a hostile name no host has, as a path segment and in requests: echoed by error answers
UNKNOWN = f"<img src=x onerror=window.__pwned=5>{ANSI}{RLO}"
#: what must never reach a page raw: controls (but tab and line ends) and bidi overrides
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069]")
#: the console's own scripts (web/assets.py), the only ones a page may load
STATIC_SCRIPT = re.compile(r'<script src="/static/[^"<>]*"( defer)?></script>')
#: what the hostile values would make if a page let them be markup
MADE = """
const made = [];
for (const e of document.querySelectorAll('*')) {
  for (const a of e.attributes) {
    if (/^on/i.test(a.name) || /^\\s*javascript:/i.test(a.value))
      made.push(e.tagName + ' ' + a.name + '=' + a.value.slice(0, 60));
  }
}
for (const s of document.scripts)
  if (s.text.trim() || !new URL(s.src).pathname.startsWith('/static/'))
    made.push('SCRIPT ' + (s.src || s.text).slice(0, 60));
for (const e of document.querySelectorAll('img[src=x], svg[onload], iframe, object, embed'))
  made.push(e.outerHTML.slice(0, 60));
return {pwned: typeof window.__pwned, made: made, title: document.title,
        type: document.contentType, text: document.body ? document.body.innerText : ''};
"""

#: a page that updates itself (``#live``, htmx) asked to update now: its <main> marked, to
#: know when the answer's has replaced it; false for a page that does not
UPDATE = """
const live = document.getElementById('live');
if (!live || !window.htmx) return false;
document.querySelector('main').old = true;
htmx.trigger(live, 'live-refresh');
return true;
"""
#: "new" once the update asked for has replaced the page's <main>, "held" when the page
#: holds it back (a form being edited: test_web_live.py tests that), else null
UPDATED = """
if (!document.querySelector('main').old) return 'new';
return document.getElementById('live').innerText.startsWith('Not updating') ? 'held' : null;
"""

#: forms whose refusal repeats what was sent: (their action, the fields, hostile)
REFUSING_FORMS = [
    pytest.param("/ack", {"host": UNKNOWN, "check": PLUGIN}, id="ack"),
    pytest.param("/downtimes", {"host": "db-1", "duration": UNKNOWN}, id="downtime"),
]
#: a form posted from the open page with its CSRF token (as a page's own form, or one the
#: user changed, would post it)
POST = """
const form = document.createElement('form');
form.method = 'post';
form.action = arguments[0];
const fields = Object.assign({csrf: document.querySelector('input[name=csrf]').value},
                             arguments[1]);
for (const [name, value] of Object.entries(fields)) {
  const input = document.createElement('input');
  input.type = 'hidden';
  input.name = name;
  input.value = value;
  form.appendChild(input);
}
document.body.appendChild(form);
form.submit();
"""


@dataclass
class Hostile:
    """The fleet, its console's URL, the agent's uuid, an operator's token and a logged-in
    :class:`Browser`."""

    fleet: Fleet
    url: str
    uuid: str
    token: str
    http: Browser


@dataclass(frozen=True)
class Page:
    """A console page: its path (a function of :class:`Hostile`), and, for a page a form
    leads to, the class of that form on the page at ``path``; the hostile values it must
    show (as text, their control characters visible)."""

    name: str
    path: Callable[[Hostile], str]
    form: str | None = None
    shows: tuple[str, ...] = field(default=())


PAGES = [
    pytest.param(Page("overview", lambda h: "/", shows=(HOSTNAME, OUTPUT)), id="overview"),
    pytest.param(Page("host", lambda h: f"/hosts/{h.uuid}",
                      shows=(HOSTNAME, OUTPUT, *LABELS, ACK_COMMENT, PROCESS)), id="host"),
    pytest.param(Page("alerts", lambda h: "/alerts", shows=(HOSTNAME, NOTE)), id="alerts"),
    pytest.param(Page("alert", lambda h: f"/alerts/{note_id(h)}", shows=(HOSTNAME, NOTE)),
                 id="alert"),
    pytest.param(Page("downtimes", lambda h: "/downtimes", shows=(DT_HOST, COMMENT)),
                 id="downtimes"),
    pytest.param(Page("acks", lambda h: "/acks", shows=(HOSTNAME, ACK_COMMENT)), id="acks"),
    pytest.param(Page("run-now", lambda h: f"/hosts/{h.uuid}", form="run",
                      shows=(HOSTNAME, OUTPUT, *LONG_OUTPUT.split("\n"))), id="run-now"),
    pytest.param(Page("problems", lambda h: "/problems",
                      shows=(HOSTNAME, OUTPUT, ACK_COMMENT)), id="problems"),
    pytest.param(Page("hosts", lambda h: "/hosts", shows=(HOSTNAME,)), id="hosts"),
    pytest.param(Page("hosts-search", lambda h: "/hosts?q=" + urllib.parse.quote(SCRIPT),
                      shows=(HOSTNAME, SCRIPT)), id="hosts-search"),
    # (the health page names agents that dropped messages only: none here)
    pytest.param(Page("health", lambda h: "/health"), id="health"),
]


@dataclass(frozen=True)
class Read:
    """An API answer that carries hostile values: its path (a function of :class:`Hostile`),
    where it lists them (``key``, or ``items`` in a paged answer), and the tuples of
    ``fields`` of its entries it must hold."""

    name: str
    path: Callable[[Hostile], str]
    key: str
    fields: Callable[[dict], tuple]
    carries: frozenset[tuple]


def labels(entry: dict) -> tuple:
    """The labels of an entry's perfdata, in order."""
    return tuple(p["label"] for p in entry.get("perfdata") or [])


API = [
    pytest.param(Read("hosts", lambda h: "/api/v1/hosts", "items",
                      lambda e: (e["hostname"],), frozenset({(HOSTNAME,)})), id="hosts"),
    pytest.param(Read("problems", lambda h: "/api/v1/problems", "problems",
                      lambda e: (e["hostname"], e["check"], e["output"]),
                      frozenset({(HOSTNAME, PLUGIN, OUTPUT)})), id="problems"),
    pytest.param(Read("alerts", lambda h: "/api/v1/alerts", "alerts",
                      lambda e: (e["hostname"], e["kind"], e["text"]),
                      frozenset({(HOSTNAME, "notify", NOTE)})), id="alerts"),
    pytest.param(Read("downtimes", lambda h: "/api/v1/downtimes", "downtimes",
                      lambda e: (e["host"], e["comment"]), frozenset({(DT_HOST, COMMENT)})),
                 id="downtimes"),
    pytest.param(Read("acknowledgements", lambda h: "/api/v1/acknowledgements",
                      "acknowledgements", lambda e: (e["check"], e["comment"]),
                      frozenset({(ACKED, ACK_COMMENT)})), id="acknowledgements"),
    pytest.param(Read("silences", lambda h: "/api/v1/silences", "silences",
                      lambda e: (e["host"], e["reason"]), frozenset({(DT_HOST, REASON)})),
                 id="silences"),
    pytest.param(Read("health", lambda h: "/api/v1/health", "routers", lambda e: (e["id"],),
                      frozenset({("router-1",)})), id="health"),
    pytest.param(Read("host", lambda h: f"/api/v1/hosts/{h.uuid}", "agent",
                      lambda e: (e["hostname"], tuple(p["name"] for p in e["processes"])),
                      frozenset({(HOSTNAME, (PROCESS,))})), id="host"),
    pytest.param(Read("checks", lambda h: "/api/v1/checks", "checks",
                      lambda e: (e["plugin"], e["output"], labels(e)),
                      frozenset({(PLUGIN, OUTPUT, LABELS)})), id="checks"),
]


def note_id(h: Hostile) -> int:
    """The id of the hostile notification's alert (its own page: ``/alerts/ID``)."""
    (found,) = [a["id"] for a in rows(call(h, "/api/v1/alerts")[1], "alerts")
                if a["text"] == NOTE]
    return found


def plugin(fleet: Fleet):
    """A plugin folder with ``check_hostile`` and ``check_acked``: CRITICAL, printing the
    hostile text, perfdata labels and long output."""
    folder = fleet.root / "plugins"
    folder.mkdir()
    printed = fleet.root / "printed"
    perf = " ".join(f"'{label}'={n}" for n, label in enumerate(LABELS, 1))
    printed.write_bytes(f"{OUTPUT} | {perf}\n{LONG_OUTPUT}\n".encode())
    for name in (PLUGIN, ACKED):
        script = folder / name
        script.write_text(f"#!/bin/sh\ncat '{printed}'\nexit 2\n")
        script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    with module_fleet(tmp_path_factory, "web-hostile") as fleet:
        checks = [{"name": name, "command": name, "interval": 1, "timeout": 5}
                  for name in (PLUGIN, ACKED)]
        fleet, op, url = start_console(fleet, alerting=QUICK, scheduler=True,
                                       hostname=HOSTNAME,
                                       plugins={"dirs": [str(plugin(fleet))], "checks": checks})
        fleet.cli("send", "notify", "--severity", "critical", NOTE,
                  "--config", str(fleet.root / "agent.yaml"))
        token = fleet.cli("web", "token", "add", "alice", "--label", "hostile", "--config",
                          str(op)).stdout.strip()
        (uuid,) = [r[0] for r in fleet.db_rows("SELECT uuid FROM agents")]
        h = Hostile(fleet, url, uuid, token, Browser(url))
        status, made = call(h, "/api/v1/downtimes",
                            {"host": DT_HOST, "duration": "2h", "comment": COMMENT,
                             "force": True})
        assert status == 201, made
        assert h.http.login("alice", PASSWORD)[0] == 303
        wait_for(lambda: {p["check"] for p in rows(call(h, "/api/v1/problems")[1],
                                                   "problems")} >= {PLUGIN, ACKED}, 40, 0.2,
                 what="the hostile checks problems")
        status, made = call(h, "/api/v1/acks", {"host": uuid, "check": ACKED,
                                                "comment": ACK_COMMENT})
        assert status == 201, made
        fleet.cli("silence", "add", DT_HOST, "--for", "2h", "--reason", REASON,
                  "--force", "--config", str(op))
        # (a heartbeat is not spooled: sent once the alerting sink has heard the agent)
        fleet.cli("send", "heartbeat", PROCESS, "--interval", "3600",
                  "--config", str(fleet.root / "agent.yaml"))
        wait_for(lambda: [a for a in rows(call(h, "/api/v1/alerts")[1], "alerts")
                          if a["text"] == NOTE], 20, 0.2, what="the hostile notification")
        wait_for(lambda: fleet.db_rows("SELECT 1 FROM host_state WHERE name = ?", (PROCESS,)),
                 20, 0.2, what="the hostile process heard")
        yield h


class Forms(html.parser.HTMLParser):
    """The forms of a page: [(their attributes, {input name: value})]."""

    def __init__(self, page: str):
        super().__init__()
        self.forms: list[tuple[dict, dict]] = []
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append((attrs, {}))
        elif tag == "input" and self.forms and attrs.get("name"):
            self.forms[-1][1][attrs["name"]] = attrs.get("value", "")

    def first(self, css_class: str) -> tuple[str, dict]:
        """The action and the inputs of the first form of class ``css_class``."""
        return next((attrs["action"], inputs) for attrs, inputs in self.forms
                    if css_class in attrs.get("class", "").split())


def call(h: Hostile, path: str, body: dict | None = None):
    """The API's answer to a GET (or a POST of ``body``) with the operator's token:
    (status, its JSON); the answer is JSON, never HTML."""
    headers = {"Authorization": f"Bearer {h.token}"}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    req = urllib.request.Request(h.url + path, data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=90) as res:
            status, answer, raw = res.status, res.headers, res.read()
    except urllib.error.HTTPError as e:
        status, answer, raw = e.code, e.headers, e.read()
    assert answer["Content-Type"] == "application/json", (path, answer["Content-Type"])
    assert answer["X-Content-Type-Options"] == "nosniff"
    assert not re.search("[\x00-\x1f]", raw.decode()), raw[:200]   # escaped
    return status, json.loads(raw)


def rows(answer: dict, key: str) -> list[dict]:
    """What an API answer lists: under ``key``, or under ``items`` when it comes in pages;
    one object (a host's) as a list of it."""
    found = answer[key] if key in answer else answer["items"]
    return found if isinstance(found, list) else [found]


@pytest.fixture(scope="module")
def driver(hostile):
    """Chromium, logged in as alice, ignoring the console's Content-Security-Policy."""
    from selenium.webdriver.common.by import By

    from support.browser import browser, click_through
    with browser() as d:
        d.execute_cdp_cmd("Page.setBypassCSP", {"enabled": True})
        d.get(hostile.url + "/login")
        d.find_element(By.ID, "user").send_keys("alice")
        d.find_element(By.ID, "password").send_keys(PASSWORD)
        click_through(d, d.find_element(By.ID, "login"))
        assert d.find_element(By.ID, "who").text == "alice (operator)"
        yield d


def shown(driver) -> dict:
    """What the page in ``driver`` made of its values, once no alert dialog is open (an
    open one fails the test: a value ran)."""
    from selenium.common.exceptions import NoAlertPresentException
    try:
        text = driver.switch_to.alert.text
    except NoAlertPresentException:
        return driver.execute_script(MADE)
    raise AssertionError(f"an alert dialog is open: {text!r}")


def assert_inert(seen: dict) -> None:
    assert seen["pwned"] == "undefined"
    assert seen["made"] == []
    assert not RAW_CONTROL.search(seen["text"] + seen["title"])


def visible(value: str) -> str:
    """``value`` as a page shows it: its control characters as escapes."""
    return escape(value)


def markup(value: str) -> str:
    """``value`` as a page's HTML holds it: visible, then HTML-escaped (as Jinja2 does)."""
    return str(markupsafe.escape(escape(value)))


def open_page(driver, h: Hostile, page: Page) -> None:
    from selenium.webdriver.common.by import By

    from support.browser import click_through
    driver.get(h.url + page.path(h))
    if page.form:
        form = driver.find_element(By.CSS_SELECTOR, f"form.{page.form}")
        click_through(driver, form.find_element(By.CSS_SELECTOR, "button"))


def fetch(h: Hostile, page: Page) -> tuple[dict, str]:
    """The page's headers and HTML, without a browser (a form posted as the browser would
    post it)."""
    status, headers, body = h.http.request(page.path(h))
    assert status == 200, (page.path(h), status, body[:300])
    if page.form:
        action, inputs = Forms(body).first(page.form)
        status, headers, body = h.http.request(action, inputs)
        assert status == 200, (action, status, body[:300])
    return headers, body


@pytest.mark.parametrize("page", PAGES)
def test_a_page_shows_hostile_values_as_text_in_a_real_browser(hostile, driver, page):
    assert hostile.http.request(page.path(hostile))[0] == 200
    open_page(driver, hostile, page)
    seen = shown(driver)
    assert_inert(seen)
    for value in page.shows:
        assert visible(value) in seen["text"], f"{page.name} does not show {value[:50]!r}"
    if driver.execute_script(UPDATE) and wait_for(lambda: driver.execute_script(UPDATED),
                                                  20, 0.05, what="the page's update") == "new":
        seen = shown(driver)                    # a page that updated itself: once more
        assert_inert(seen)
        for value in page.shows:
            assert visible(value) in seen["text"], f"{page.name} no longer shows {value[:50]!r}"
    from support.browser import screenshot
    screenshot(driver, f"web-hostile-{page.name}")


@pytest.mark.parametrize("page", PAGES)
def test_a_page_holds_no_hostile_value_raw(hostile, page):
    headers, body = fetch(hostile, page)
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert headers["x-content-type-options"] == "nosniff"
    assert "default-src 'self'" in headers["content-security-policy"]
    for value in MARKUP:
        assert value not in body
    lowered = STATIC_SCRIPT.sub("", body).lower()
    assert "<script" not in lowered and "<img" not in lowered and "<svg" not in lowered
    assert not re.search(r"""=\s*["']?\s*javascript:""", lowered)
    assert not RAW_CONTROL.search(body)
    for value in page.shows:
        assert markup(value) in body, f"{page.name} does not hold {value[:50]!r} escaped once"


def test_the_harness_sees_a_value_that_runs(hostile, driver):
    """The browser checks can fail: markup put in the page runs (the policy is bypassed)
    and is found."""
    driver.get(hostile.url + "/")
    driver.execute_script(
        "document.body.insertAdjacentHTML('beforeend', arguments[0])", IMG)
    wait_for(lambda: shown(driver)["pwned"] == "number", 10, 0.05,
             what="the injected handler run")
    assert shown(driver)["made"]


@pytest.mark.parametrize("read", API)
def test_an_api_answer_carries_the_exact_strings_as_json(hostile, read):
    status, answer = call(hostile, read.path(hostile))
    assert status == 200, answer
    found = {read.fields(row) for row in rows(answer, read.key)}
    assert read.carries <= found, found


def test_a_check_run_through_the_api_answers_the_exact_strings(hostile):
    status, ran = call(hostile, "/api/v1/runs", {"host": hostile.uuid, "plugin": PLUGIN})
    assert status == 200, ran
    assert (ran["hostname"], ran["output"], ran["long_output"]) == (HOSTNAME, OUTPUT,
                                                                    LONG_OUTPUT)
    assert [p["label"] for p in ran["perfdata"]] == list(LABELS)


@pytest.mark.parametrize("read", API)
def test_an_api_answer_opened_in_a_browser_is_inert(hostile, driver, read):
    driver.get(hostile.url + read.path(hostile))
    seen = shown(driver)
    assert seen["type"] == "application/json"
    assert seen["pwned"] == "undefined" and seen["made"] == []


def test_errors_that_repeat_a_hostile_name_are_json_or_escaped(hostile, driver):
    h = hostile
    status, answer = call(h, "/api/v1/acks", {"host": UNKNOWN, "check": PLUGIN})
    assert status == 422 and UNKNOWN in answer["error"]             # (never seen)
    status, answer = call(h, "/api/v1/runs", {"host": UNKNOWN, "plugin": PLUGIN})
    assert status in (404, 422) and isinstance(answer["error"], str)
    status, answer = call(h, "/api/v1/downtimes", {"host": "db-1", "duration": UNKNOWN})
    assert status == 422
    status, answer = call(h, "/api/v1/hosts/" + urllib.parse.quote(UNKNOWN))
    assert status == 404
    # "run now" of a name no host has: the result page says so, escaped
    status, headers, body = h.http.request("/run", {"csrf": h.http.csrf("/"), "host": UNKNOWN,
                                                    "plugin": PLUGIN})
    assert status == 200 and "<img" not in body and not RAW_CONTROL.search(body)
    # the host page of a name no host has: a page, the name escaped
    path = "/hosts/" + urllib.parse.quote(UNKNOWN)
    status, headers, body = h.http.request(path)
    assert status == 404 and headers["content-type"] == "text/html; charset=utf-8"
    assert markup(UNKNOWN) in body and "<img" not in body
    driver.get(h.url + path)
    seen = shown(driver)
    assert_inert(seen)
    assert visible(UNKNOWN) in seen["text"]


@pytest.mark.parametrize("action, fields", REFUSING_FORMS)
def test_a_form_error_that_repeats_a_hostile_value_is_escaped_in_its_page(hostile, driver,
                                                                         action, fields):
    """A form's refusal (an ack of a host the fleet never saw, a downtime of no duration)
    says what was refused in a page, what was typed kept in the form: escaped, inert."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait
    h = hostile
    driver.get(h.url + "/downtimes")
    old = driver.find_element(By.TAG_NAME, "html")
    driver.execute_script(POST, action, fields)
    WebDriverWait(driver, 20).until(expected_conditions.staleness_of(old))
    seen = shown(driver)
    assert_inert(seen)
    assert seen["type"] == "text/html", seen
    status, headers, body = h.http.request(action, {"csrf": h.http.csrf("/downtimes"),
                                                    **fields})
    assert status in (404, 422) and 'role="alert"' in body, (status, body)
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert "<img" not in body and not RAW_CONTROL.search(body)
    assert markup(UNKNOWN)[:20] in body
    assert headers["x-content-type-options"] == "nosniff"
