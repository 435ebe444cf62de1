"""An alert's own page (``/alerts/ID``) and ``/api/v1/deliveries``: every attempt to send it,
with what the service answered, as the deliverer recorded it (issue 34, proof of delivery);
a service's answer is text on the page, never markup. A real SQLite state database, the
console in Starlette's TestClient."""

from __future__ import annotations

import time

import pytest

pytest.importorskip("fastapi")

from fleetwatch.actions.console import Actions  # noqa: E402
from fleetwatch.cli.operator import OperatorConfig  # noqa: E402
from fleetwatch.config import build  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from sinks.alerting.delivery import store as outbox  # noqa: E402
from sinks.alerting.delivery.channels import Receipt, SendError  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from sinks.alerting.delivery.deliverer import Tried  # noqa: E402

NOW = time.time()
HOSTILE = '<img src=x onerror="window.__pwned=1">\x1b[31m'
EVENT = {"key": "u1/check/check_disk", "kind": "check", "action": "trigger",
         "severity": "critical", "uuid": "u1", "hostname": "web-1", "check": "check_disk",
         "status": 2, "summary": "DISK CRITICAL", "text": "/ 95%", "created": NOW}


@pytest.fixture
def client(tmp_path):
    from fastapi.testclient import TestClient

    from web import store
    from web.app import create_app
    from web.console import Console
    url = f"sqlite:///{tmp_path / 'state.db'}"
    engine = db.engine(url)
    db.create(engine, "alerting")
    store.create(engine)
    config = build(DeliveryConfig, {
        "channels": {"pager": {"type": "webhook", "url": "http://127.0.0.1:9/hook"}},
        "rules": [{"channels": ["pager"]}]})
    with engine.begin() as conn:
        outbox.enqueue(conn, EVENT, config, NOW)
        (row,) = outbox.claim(conn, "w", NOW, 60, 10, ["pager"])
        outbox.mark(conn, row["id"], "w", NOW, outbox.PENDING, error="HTTP 503",
                    next_attempt=NOW + 5)
        outbox.record(conn, [row], "w", "retry",
                      Tried.of(NOW, time.monotonic(), SendError("HTTP 503 busy",
                                                                status="HTTP 503")))
        (row,) = outbox.claim(conn, "w", NOW + 5, 60, 10, ["pager"])
        outbox.mark(conn, row["id"], "w", NOW + 5, outbox.SENT)
        outbox.record(conn, [row], "w", "sent", Tried.of(
            NOW + 5, time.monotonic(), Receipt.of("HTTP 202", "u1/check/check_disk", HOSTILE)))
    store.add_user(engine, "ann", "viewer", "correct horse battery", "test")
    console = Console(OperatorConfig(routers=["tcp://127.0.0.1:9"], state_url=url), engine,
                      lambda: [], Actions(url))
    console.routers = lambda: {"routers": [], "durability": None, "router_faults": []}
    try:
        with TestClient(create_app(console, "k" * 48)) as c:
            token = store.add_token(engine, "ann", "t", None, "test")
            c.headers["Authorization"] = f"Bearer {token}"
            yield c
    finally:
        engine.dispose()


def test_an_alert_s_page_lists_every_attempt_with_the_service_s_answer(client):
    listing = client.get("/alerts").text
    assert 'href="/alerts/1"' in listing                # the list's time opens the alert
    page = client.get("/alerts/1")
    assert page.status_code == 200
    rows = page.text.split('id="deliveries"')[1]
    assert rows.count('class="delivery outcome-') == 2
    sent, retried = rows.split('class="delivery outcome-')[1:]
    assert sent.startswith("sent") and "HTTP 202" in sent and "u1/check/check_disk" in sent
    assert retried.startswith("retry") and "HTTP 503" in retried and "busy" in retried
    assert "<img" not in page.text and "\x1b" not in page.text
    assert "&lt;img src=x" in sent and "\\x1b[31m" in sent        # text, its ESC visible
    assert "<td>pager</td><td>sent</td><td>2</td>" in page.text    # the outbox's row


def test_an_alert_that_is_not_there_is_a_404_that_says_how_long_alerts_are_kept(client):
    page = client.get("/alerts/99")
    assert page.status_code == 404 and "alerting.delivery.keep" in page.text


def test_the_api_lists_the_deliveries_newest_first(client):
    found = client.get("/api/v1/deliveries").json()
    assert found["total"] == 2 and not found["truncated"]
    assert [d["outcome"] for d in found["deliveries"]] == ["sent", "retry"]
    assert [d["attempt"] for d in found["deliveries"]] == [2, 1]
    assert found["deliveries"][0]["answer"] == '<img src=x onerror="window.__pwned=1">\\x1b[31m'
    one = client.get("/api/v1/deliveries?limit=1&channel=pager").json()
    assert one["truncated"] and len(one["deliveries"]) == 1
    assert client.get("/api/v1/deliveries?channel=mail").json()["deliveries"] == []
