"""The SLO page (``/slo``) and ``GET /api/v1/slos``: what ``fleetwatch slo report`` reads,
an SLO's state in words, its budget, burn rates and worst offenders; a hostile hostname
and hostile globs from a sink's config shown as text, never markup; no SLOs said as such.
A real SQLite state database filled by an alerting sink's SLO passes (support/slos.py),
the console in Starlette's TestClient."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from fleetwatch.actions.console import Actions  # noqa: E402
from fleetwatch.cli.operator import OperatorConfig  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from support.slos import T0, WEB, fill  # noqa: E402

HOSTILE = '<img src=x onerror="window.__pwned=1">\x1b[31m'
GLOB = "<script>alert(1)</script>*"


@pytest.fixture
def console(tmp_path):
    from fastapi.testclient import TestClient

    from web import store as webstore
    from web.app import create_app
    from web.console import Console
    url = f"sqlite:///{tmp_path / 'state.db'}"
    engine = db.engine(url)
    db.create(engine, "alerting")
    webstore.create(engine)
    webstore.add_user(engine, "ann", "viewer", "correct horse battery", "test")

    def serve(now: float):
        console = Console(OperatorConfig(routers=["tcp://127.0.0.1:9"], state_url=url),
                          engine, lambda: [], Actions(url, clock=lambda: now),
                          clock=lambda: now)
        console.routers = lambda: {"routers": [], "durability": None, "router_faults": []}
        client = TestClient(create_app(console, "k" * 48))
        token = webstore.add_token(engine, "ann", "t", None, "test")
        client.headers["Authorization"] = f"Bearer {token}"
        return client
    yield url, serve
    engine.dispose()


def test_no_slos_is_said(console):
    _, serve = console
    with serve(T0) as c:
        page = c.get("/slo")
        assert page.status_code == 200 and 'id="no-slos"' in page.text
        assert c.get("/api/v1/slos").json() == {"slos": [], "alerting": 0}
        assert '<a href="/slo">SLOs</a>' in c.get("/").text         # in the menu


def test_the_page_shows_each_slo_its_budget_and_offenders_as_text(console):
    url, serve = console
    now = fill(url, HOSTILE, ("http*", GLOB))
    with serve(now) as c:
        page = c.get("/slo")
        assert page.status_code == 200
        text = page.text
        rows = text.split('<table id="slos">')[1].split("</table>")[0]
        http, quiet = rows.split('<tr class="slo ')[1:]
        assert http.startswith("row-CRITICAL") and ">page</span>" in http
        assert "99.9% over 30d" in http and "of the budget left" in http
        assert "5m " in http and "6h " in http
        assert quiet.startswith("row-OK") and ">ok</span>" in quiet and "SLI -" in quiet
        section = text.split('id="slo-http_availability"')[1].split("</section>")[0]
        assert "and on each host" in section
        offenders = section.split('class="offender"')[1:]
        assert len(offenders) == 2 and f'href="/hosts/{WEB}"' in offenders[0]
        assert ">page</span>" in offenders[0] and ">ok</span>" in offenders[1]
        # hostile values: text, their control characters visible, never markup
        assert "<img" not in text and "\x1b" not in text and "<script>alert" not in text
        assert "&lt;img src=x onerror=&#34;window.__pwned=1&#34;&gt;\\x1b[31m" in text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;*" in text

        found = c.get("/api/v1/slos").json()
        assert found["alerting"] == 1
        http = found["slos"][0]
        assert http["name"] == "http_availability" and http["state"] == "page"
        assert http["checks"] == ["http*", GLOB] and http["offenders"][0]["hostname"] == HOSTILE
        assert set(http["burn"]) == {"5m", "30m", "1h", "6h"}
        assert http["since"].endswith("Z") and http["per_host"] is True
        one = c.get("/api/v1/slos?name=quiet&offenders=0").json()["slos"]
        assert [s["name"] for s in one] == ["quiet"] and one[0]["offenders"] == []
        assert c.get("/api/v1/slos?offenders=-1").status_code == 422
