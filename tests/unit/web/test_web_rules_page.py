"""The rules' pages (``/rules``, ``/rules/NAME``), ``GET /api/v1/rules`` and a draft's
backtest run from a rule's page, in Starlette's TestClient over a real SQLite state
database that real alerting sinks filled (a rule CRITICAL on web-1, OK on a host with a
hostile name, PENDING on a silent host); graphite-web is a small HTTP server of the test's,
and ``fleetwatch`` a fake command that records what it was given and answers a backtest's
JSON. Hostile names, globs and outputs are text, never markup; a bad draft is one line in
the page and runs nothing; a running backtest's progress is shown, one at a time, and its
pages are drawn on the graph as bands."""

from __future__ import annotations

import itertools
import json
import re
import sys
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytestmark = pytest.mark.timeout(60)

from fastapi.testclient import TestClient  # noqa: E402

from fleetwatch.actions.console import Actions  # noqa: E402
from fleetwatch.cli.operator import OperatorConfig  # noqa: E402
from fleetwatch.graphs.settings import GraphiteWebSettings  # noqa: E402
from fleetwatch.metricpath import node  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from support.alertsink import T0  # noqa: E402
from support.rulepages import (FAKE, GLOB, HOSTILE, ODD, SILENT, WEB, Graphite,  # noqa: E402
                               answer, fill)

PASSWORD = "correct horse battery"
#: the users' names, one each console made (a module's state database)
USERS = itertools.count()


@pytest.fixture(scope="module")
def filled(tmp_path_factory):
    """(the URL of a state database :func:`support.rulepages.fill` filled, its time)"""
    url = f"sqlite:///{tmp_path_factory.mktemp('rules') / 'state.db'}"
    return url, fill(url)


@pytest.fixture(scope="module")
def graphite():
    server = Graphite().start()
    yield server
    server.stop()


@pytest.fixture
def console(filled, graphite, tmp_path):
    """(a function making a logged-in TestClient of the console as ``role``, whose
    backtests run the fake command; the fake's files)"""
    from web import store as webstore
    from web.app import create_app
    from web.backtests import Backtests
    from web.console import Console
    url, now = filled
    engine = db.engine(url)
    webstore.create(engine)
    fake = tmp_path / "fleetwatch.py"
    fake.write_text(FAKE)
    doc = tmp_path / "answer.json"
    doc.write_text(json.dumps(answer(now)))
    files = {"release": tmp_path / "release", "record": tmp_path / "record.json",
             "doc": doc}
    clients = []

    def serve(role: str = "operator", release: str | None = None, doc_path: str | None = None,
              timeout: float = 20.0) -> TestClient:
        name = f"{role}-{next(USERS)}"
        webstore.add_user(engine, name, role, PASSWORD, "test")
        config = OperatorConfig(routers=["tcp://127.0.0.1:9"], state_url=url,
                                graphite=GraphiteWebSettings(
                                    url=graphite.url()))
        console = Console(config, engine, lambda: [], Actions(url, clock=lambda: now),
                          clock=lambda: now)
        console.routers = lambda: {"routers": [], "durability": None, "router_faults": []}
        app = create_app(console, "k" * 48)
        app.state.backtests = Backtests(
            command=[sys.executable, str(fake), release or str(files["release"]),
                     str(files["record"]), doc_path or str(doc)], timeout=timeout,
            clock=lambda: now)
        client = TestClient(app)
        clients.append(client)
        page = client.get("/login").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page).group(1)
        assert client.post("/login", data={"user": name, "password": PASSWORD, "csrf": csrf},
                           follow_redirects=False).status_code == 303
        client.token = webstore.add_token(engine, name, "t", None, "test")
        client.backtests = app.state.backtests
        return client
    yield serve, files
    for client in clients:
        client.close()
    engine.dispose()


def csrf_of(text: str) -> str:
    return re.search(r'name="csrf" value="([^"]+)"', text).group(1)


def finished(client, job_id: int, deadline: float = 20.0):
    """The job once it is no longer running (polled, with a deadline)."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        job = client.backtests.get(job_id)
        if not job.running:
            return job
        time.sleep(0.02)
    raise AssertionError(f"backtest {job_id} still running after {deadline} s")


def inert(text: str) -> None:
    """Hostile values are text: their markup escaped, their control characters visible."""
    assert "<img" not in text and "\x1b" not in text and "<script>alert" not in text
    assert "window.__pwned" not in text or "&lt;img src=x onerror=&#34;window.__pwned" in text


# ---------------------------------------------------------------- the list and the API

def test_the_list_counts_each_rule_s_hosts_by_state_and_links_to_its_page(console):
    serve, _ = console
    c = serve("viewer")
    page = c.get("/rules")
    assert page.status_code == 200
    text = page.text
    assert '<a href="/rules">Rules</a>' in text                        # in the menu
    rows = text.split('<table id="rules">')[1].split("</table>")[0].split('<tr class="rule ')
    disk, soon = rows[1], rows[2]
    assert disk.startswith("row-CRITICAL") and '<a href="/rules/disk_full">disk_full' in disk
    assert "avg(disk.root.used_percent, 30s)" in disk
    assert "warning &gt; 80, critical &gt; 90" in disk and "for 20s" in disk
    assert re.search(r">CRITICAL</span> 1, .*>OK</span> 1", disk)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;*" in disk              # a hostile glob
    assert soon.startswith("row-PENDING") and "no host judged yet" in soon
    inert(text)

    found = c.get("/api/v1/rules", headers={"Authorization": f"Bearer {c.token}"}).json()
    by_name = {r["name"]: r for r in found["rules"]}
    assert by_name["disk_full"]["states"] == {"CRITICAL": 1, "OK": 1}
    assert by_name["disk_full"]["hosts"] == ["web*", "<img*", GLOB]
    assert by_name["disk_full"]["for"] == 20.0 and by_name["disk_full"]["critical"] == "> 90"
    assert by_name["disk_full"]["configured"].endswith("Z")
    assert by_name["disk_full_soon"]["states"] == {}
    one = c.get("/api/v1/rules?name=disk_full_soon",
                headers={"Authorization": f"Bearer {c.token}"}).json()["rules"]
    assert [r["name"] for r in one] == ["disk_full_soon"]
    detail = c.get("/api/v1/rules/disk_full",
                   headers={"Authorization": f"Bearer {c.token}"}).json()
    assert [(h["hostname"], h["state"]) for h in detail["host_states"]] == [
        ("web-1", "CRITICAL"), (HOSTILE, "OK"), ("web-2", "PENDING")]
    assert detail["host_states"][1]["output"] == HOSTILE + "\nsecond line"   # exact, in JSON
    assert c.get("/api/v1/rules/nope",
                 headers={"Authorization": f"Bearer {c.token}"}).status_code == 404


# ---------------------------------------------------------------- one rule

def test_a_rule_s_page_lists_its_hosts_problems_first_and_graphs_the_worst(console,
                                                                           graphite):
    serve, _ = console
    c = serve("viewer")
    graphite.asked.clear()
    page = c.get("/rules/disk_full")
    assert page.status_code == 200
    text = page.text
    assert '<code id="rule-expr">avg(disk.root.used_percent, 30s)</code>' in text
    table = text.split('id="rule-host-table"')[1].split("</table>")[0]
    rows = table.split('<tr class="problem ')[1:]
    assert [r.split('"')[0] for r in rows] == ["row-CRITICAL", "row-OK", "row-PENDING"]
    assert f'href="/hosts/{WEB}">web-1</a>' in rows[0]
    assert "avg(disk.root.used_percent, 30s) = 95" in rows[0]
    assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;\\x1b[31m" in rows[1]
    assert "no result yet" in rows[2] and f'href="/hosts/{SILENT}"' in rows[2]
    inert(text)
    # the worst host's series, its levels across as dashed lines
    assert graphite.asked == [["fleet.web-1.disk.root.used_percent"]]
    graph = text.split('id="graph-rule">')[1].split("</figure>")[0]
    assert "<polyline" in graph and graph.count('stroke-dasharray="6 3"') == 2
    assert "warning &gt; 80" in graph and "critical &gt; 90" in graph
    assert "Series of web-1" in text
    # another host's graph, by uuid; an update of the open page does not ask Graphite
    other = c.get(f"/rules/disk_full?host={ODD}&range=6h").text
    assert graphite.asked[-1] == [f"fleet.{node(HOSTILE)}.disk.root.used_percent"]
    assert 'aria-current="page">6h' in other
    asked = len(graphite.asked)
    assert c.get("/rules/disk_full", headers={"HX-Request": "true"}).status_code == 200
    assert len(graphite.asked) == asked
    # a viewer sees no draft form; a rule nobody declared is not found
    assert 'id="draft-role"' in text and 'id="draft-form"' not in text
    assert c.get("/rules/nope").status_code == 404


def test_a_rule_whose_value_is_not_in_its_series_unit_draws_no_levels(console, graphite):
    serve, _ = console
    c = serve("viewer")
    text = c.get("/rules/disk_full_soon").text
    assert 'id="no-hosts"' in text and "No host has this rule yet" in text
    assert "without its levels" in text


# ---------------------------------------------------------------- a draft's backtest

def test_a_bad_draft_is_said_in_one_line_and_runs_nothing(console):
    serve, files = console
    c = serve("operator")
    page = c.get("/rules/disk_full").text
    assert 'id="draft-form"' in page
    sent = c.post("/rules/disk_full/backtest", data={
        "csrf": csrf_of(page), "expr": "avgg(disk.root.used_percent, 30s)",
        "warning": "> 80", "critical": "> 90", "for": "10m", "keep_firing_for": "0",
        "hosts": "web*", "since": "7d"})
    assert sent.status_code == 422
    error = sent.text.split('id="draft-error"')[1].split("</p>")[0]
    assert "expr: rule disk_full: column 1: unknown function &#39;avgg&#39;" in error
    assert 'value="avgg(disk.root.used_percent, 30s)"' in sent.text       # kept as typed
    for field, value, said in (("critical", ">> 90", "critical: rule disk_full:"),
                               ("for", "ten minutes", "for: rule disk_full:"),
                               ("since", "1y", "since: ")):
        form = {"csrf": csrf_of(page), "expr": "avg(disk.root.used_percent, 30s)",
                "critical": "> 90", "for": "10m", "since": "7d", field: value}
        sent = c.post("/rules/disk_full/backtest", data=form)
        assert sent.status_code == 422 and said in sent.text, (field, sent.text[-2000:])
    assert c.backtests.running() is None and not files["record"].exists()
    # no CSRF token: refused; a viewer: refused
    assert c.post("/rules/disk_full/backtest", data={"expr": "x"}).status_code == 403
    v = serve("viewer")
    assert v.post("/rules/disk_full/backtest", data={
        "csrf": csrf_of(v.get("/rules/disk_full").text), "expr": "x"}).status_code == 403


def test_a_draft_s_backtest_runs_one_at_a_time_and_shows_its_pages_on_the_graph(console):
    serve, files = console
    c = serve("operator")
    page = c.get("/rules/disk_full").text
    draft = {"csrf": csrf_of(page), "expr": "max(disk.root.used_percent, 1m)",
             "warning": "", "critical": "> 92", "for": "15m", "keep_firing_for": "5m",
             "hosts": "web*, site:paris", "since": "7d", "host": WEB}
    sent = c.post("/rules/disk_full/backtest", data=draft, follow_redirects=False)
    assert sent.status_code == 303
    where = sent.headers["location"]
    job_id = int(re.search(r"backtest=(\d+)", where).group(1))
    assert where == f"/rules/disk_full?backtest={job_id}&host={WEB}&running=1"
    clean = f"/rules/disk_full?backtest={job_id}&host={WEB}"
    # running: its progress, escaped; one at a time
    end = time.monotonic() + 20
    while not c.backtests.get(job_id).progress and time.monotonic() < end:
        time.sleep(0.02)
    running = c.get(where).text
    assert 'id="backtest-running"' in running and "reading the lake &lt;b&gt;from" in running
    assert f'hx-get="/rules/disk_full/backtests/{job_id}"' in running
    moved = c.get(clean, follow_redirects=False)       # a page showing a run says so
    assert moved.status_code == 303 and moved.headers["location"] == where
    again = c.post("/rules/disk_full/backtest", data=draft)
    assert again.status_code == 409 and "a backtest is running already" in again.text
    other = c.post("/rules/disk_full_soon/backtest", data={
        **draft, "expr": "timeleft(disk.root.used_percent, 1h, 100)", "critical": "< 4h"})
    assert other.status_code == 409
    assert f'of rule <a href="/rules/disk_full?backtest={job_id}&amp;running=1">' in other.text
    assert f'hx-get="/rules/disk_full/backtests/{job_id}"' in other.text
    section = c.get(f"/rules/disk_full/backtests/{job_id}", headers={"HX-Request": "true"})
    assert section.status_code == 200 and "HX-Redirect" not in section.headers
    assert section.text.lstrip().startswith('<div id="backtest"')
    assert "HX-Redirect" not in c.get(where, headers={"HX-Request": "true"}).headers
    files["release"].touch()
    job = finished(c, job_id)
    assert job.state == "done", job.error
    # once over, the page's first update (the section's, or its own) loads it without
    # running=1, its graph with the run's bands
    done = c.get(f"/rules/disk_full/backtests/{job_id}", headers={"HX-Request": "true"})
    assert done.headers.get("HX-Redirect") == clean
    assert c.get(where, headers={"HX-Request": "true"}).headers.get("HX-Redirect") == clean
    moved = c.get(where, follow_redirects=False)
    assert moved.status_code == 303 and moved.headers["location"] == clean

    # what it was given: the declared rules, the draft in place of disk_full's
    record = json.loads(files["record"].read_text())
    assert record["args"][:3] == ["rules", "backtest", "--json"]
    assert record["args"][record["args"].index("--since") + 1] == "7d"
    import yaml
    policy = yaml.safe_load(record["policy"])["alerting"]
    assert [r["name"] for r in policy["rules"]] == ["disk_full", "disk_full_soon"]
    assert policy["rules"][0] == {"name": "disk_full", "expr": "max(disk.root.used_percent, 1m)",
                                  "hosts": ["web*", "site:paris"], "warning": "",
                                  "critical": "> 92", "for": "15m", "keep_firing_for": "5m",
                                  "stale_after": 300.0}
    assert yaml.safe_load(record["operator"])["routers"] == ["tcp://127.0.0.1:9"]

    # done: the would-be pages against the real ones, and both on web-1's graph
    text = c.get(where).text
    summary = " ".join(text.split('id="backtest-summary">')[1].split("</p>")[0].split())
    assert "would have paged 2 times on 1 host" in summary
    assert "really paged 2 times" in summary and "1 added, 1 avoided" in summary
    assert "other rules and checks paged 1 time" in text
    # the form shows the draft tried, to go on from
    assert 'id="draft-critical" value="&gt; 92"' in text and 'value="web*, site:paris"' in text
    assert "over the past 7d" in text
    pages = text.split('id="backtest-pages"')[1].split("</table>")[0]
    assert pages.count('<tr class="page') == 2
    assert "for 30m" in pages and "still open at the end" in pages
    assert "paged for real too" in pages and "added: nothing paged then" in pages
    real = text.split('id="backtest-real"')[1].split("</table>")[0]
    assert "avoided by the rule&#39;s levels or `for`" in real
    assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;\\x1b[31m" in real
    inert(text)
    graph = text.split('id="graph-rule">')[1].split("</figure>")[0]
    assert graph.count('fill-opacity="0.25"') == 3           # two would-be, one real
    assert "would page (the draft) (2)" in graph and "paged (for real) (1)" in graph
    assert "would page critical from" in graph and "still open" in graph
    # another backtest may run now
    assert c.backtests.running() is None


def test_a_backtest_that_fails_or_takes_too_long_says_so(console, tmp_path):
    serve, files = console
    c = serve("operator", release="-", doc_path="fail")
    page = c.get("/rules/disk_full").text
    form = {"csrf": csrf_of(page), "expr": "avg(disk.root.used_percent, 30s)",
            "critical": "> 90", "since": "1d"}
    where = c.post("/rules/disk_full/backtest", data=form, follow_redirects=False)
    job = finished(c, int(re.search(r"backtest=(\d+)", where.headers["location"]).group(1)))
    assert job.state == "failed"
    assert job.error == "fleetwatch rules backtest: no Java: install a JRE (exit status 69)"
    text = c.get(where.headers["location"]).text
    assert "no Java: install a JRE (exit status 69)" in text.split('id="backtest-error"')[1]

    slow = serve("operator", release=str(tmp_path / "never"), timeout=0.3)
    page = slow.get("/rules/disk_full").text
    where = slow.post("/rules/disk_full/backtest", data={**form, "csrf": csrf_of(page)},
                      follow_redirects=False)
    job = finished(slow, int(re.search(r"backtest=(\d+)", where.headers["location"]).group(1)))
    assert job.state == "stopped" and "stopped after 0.3 s" in job.error
    assert job.progress[0].startswith("fleetwatch rules backtest: reading the lake")


@pytest.mark.parametrize("expr, series, same", [
    ("avg(disk.root.used_percent, 10m)", [("disk.root.used_percent", False)], True),
    ("load.5", [("load.5", False)], True),
    ("rate(netio.bytes_recv, 5m) * 8", [("netio.bytes_recv", True)], False),
    ("rate(netio.bytes_recv, 5m)", [("netio.bytes_recv", True)], True),
    ("timeleft(disk.root.used_percent, 1h, 100)", [("disk.root.used_percent", False)], False),
    ("avg(memory.used_percent, 5m) - avg(memory.used_percent, 1h)",
     [("memory.used_percent", False)], False),
    ("avgg(x, 1m)", [], False),
])
def test_what_a_rule_s_graph_draws(expr, series, same):
    from fleetwatch.actions.rules import graphed
    assert graphed(expr) == (series, same)


def test_the_answer_is_cut_to_the_draft_s_rule():
    from fleetwatch.actions.rules import of_host, would_be
    found = would_be(answer(T0), "disk_full")
    assert found["since"] == T0 - 7 * 86400 and found["until"] == T0
    assert [(p["start"], p["added"]) for p in found["pages"]] == [
        (T0 - 3 * 86400, False), (T0 - 86400, True)]
    assert [(p["hostname"], p["avoided"], p["by"]) for p in found["real"]] == [
        ("web-1", False, None), (HOSTILE, True, "the rule's levels or `for`")]
    assert found["others"] == 1
    assert [(h["hostname"], h["pages"], h["real"]) for h in found["hosts"]] == [
        (HOSTILE, 0, 1), ("web-1", 2, 1)]
    mine = of_host(found, WEB, "web-1")
    assert len(mine["pages"]) == 2 and len(mine["real"]) == 1
    with pytest.raises(ValueError, match="not what was expected"):
        would_be({"since": "yesterday"}, "disk_full")

