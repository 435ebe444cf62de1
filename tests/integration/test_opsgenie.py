"""The ``opsgenie`` channel (issue 34): the real deliverer against a local server that speaks
Opsgenie's Alert API v2 as documented (fleetwatch/cli/demo/receivers/opsgenie.py
``Opsgenie``: create, acknowledge and close by alias, its limits, its 401, 404, 422 and 429
answers, one open alert per alias), under Opsgenie's base and Jira Service Management's.

A problem creates one alert, its acknowledgement acknowledges it and its recovery closes
it, by alias; a resend counts the same alert again; an acknowledgement of an alert
Opsgenie no longer has is sent with a note and fails nothing; a revoked key fails the
channel at once and is in no log line and no recorded delivery; a 429 is waited out; what an
agent wrote makes no tag. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import time

import pytest

from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.cli.demo.receivers.opsgenie import Opsgenie  # noqa: E402
from sinks.alerting.delivery.channeltypes import OpsgenieChannel  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from sinks.alerting.delivery.services.opsgenie import OpsgenieSender  # noqa: E402
from support.delivering import (U1, check_event, enqueue, fast, recorded,  # noqa: E402
                                secret_file, sent)

KEY = "eb243592-faa2-4ba2-a551-1afdf565c889"
ALIAS = f"{U1}:check:check_disk"
JSM = "/jsm/ops/integration"


def event(action: str = "trigger", text: str = "/ 95% used") -> dict:
    """check_disk's event; an acknowledgement says who acknowledged it, and why."""
    acked = {"summary": "acknowledged by alice: on it", "acknowledged_by": "alice"}
    return check_event(action, text=text, **(acked if action == "acknowledge" else {}))


@pytest.fixture
def opsgenie():
    server = Opsgenie(None, 0, keys=(KEY,)).start()
    yield server
    server.stop()


@pytest.fixture
def key_file(tmp_path) -> str:
    return secret_file(tmp_path, "opsgenie-key", KEY)


@pytest.fixture
def deliver(deliverers, key_file):
    """``deliver(server, base, **channel)``: a deliverer thread with one ``opsgenie``
    channel to ``server`` under ``base``."""
    def start(server: Opsgenie, base: str = "", **channel) -> DeliveryConfig:
        config = fast({"pager": {"type": "opsgenie", "api_url": server.url + base,
                                 "api_key_file": key_file, "responders": ["ops"],
                                 "tags": ["fleetwatch", "disk"], "timeout": 5, **channel}},
                      console_url="https://fleet.example.com/")
        deliverers(config)
        return config
    return start


@pytest.mark.parametrize("base", ["", JSM], ids=["opsgenie", "jsm"])
def test_one_alert_created_acknowledged_then_closed_by_alias(eng, opsgenie, deliver, base):
    config = deliver(opsgenie, base)
    enqueue(eng, config, event())
    wait_for(lambda: opsgenie.alerts, 20, interval=0.05, what="the alert")
    (alert,) = opsgenie.alerts
    assert (alert["alias"], alert["status"], alert["priority"]) == (ALIAS, "open", "P1")
    assert alert["message"] == "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
    assert alert["responders"] == [{"name": "ops", "type": "team"}]
    assert alert["tags"] == ["fleetwatch", "disk"] and alert["entity"] == "web-1"
    assert alert["source"] == "fleetwatch"
    assert alert["description"].endswith(
        f"\n\n/ 95% used\n\nIn the console: https://fleet.example.com/hosts/{U1}")
    assert alert["details"]["check"] == "check_disk"
    (first,) = wait_for(lambda: sent(eng), 20, interval=0.05, what="its delivery recorded")
    assert first["status"] == "HTTP 202" and first["message_id"] in first["answer"]
    enqueue(eng, config, event("acknowledge"))
    wait_for(lambda: alert["status"] == "acked", 20, interval=0.05, what="the acknowledgement")
    assert alert["log"][-1] == {"action": "acknowledge", "user": "alice",
                                "source": "fleetwatch", "note": "acknowledged by alice: on it"}
    enqueue(eng, config, event("resolve"))
    wait_for(lambda: alert["status"] == "closed", 20, interval=0.05, what="the close")
    assert alert["acknowledged"] and alert["count"] == 1 and len(opsgenie.alerts) == 1
    assert [(b, what, which, code) for b, what, which, code in opsgenie.requests] == [
        (base, "create", ALIAS, 202), (base, "acknowledge", ALIAS, 202),
        (base, "close", ALIAS, 202)]
    wait_for(lambda: len(sent(eng)) == 3, 20, interval=0.05, what="three deliveries")


def test_an_ack_of_an_alert_opsgenie_no_longer_has_fails_nothing(eng, opsgenie, deliver):
    config = deliver(opsgenie)
    enqueue(eng, config, event("acknowledge"))
    (noted,) = wait_for(lambda: sent(eng), 20, interval=0.05, what="the acknowledgement")
    assert noted["status"] == "HTTP 404" and "nothing to acknowledge" in noted["answer"]
    from fleetwatch.actions.channels import listed
    (pager,) = listed(eng.url.render_as_string(hide_password=False))
    assert pager["state"] != "failing"


def test_a_revoked_key_fails_the_channel_at_once_and_never_shows(eng, opsgenie, deliver,
                                                                 caplog):
    caplog.set_level(logging.DEBUG)
    opsgenie.revoke(KEY)
    config = deliver(opsgenie, JSM)
    enqueue(eng, config, event())
    (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"],
                         20, interval=0.05, what="the refusal")
    assert failed["status"] == "HTTP 401" and "Could not authenticate" in failed["answer"]
    from fleetwatch.actions.channels import listed
    (pager,) = wait_for(lambda: [c for c in listed(eng.url.render_as_string(
        hide_password=False)) if c["state"] == "failing"], 20, interval=0.05,
        what="the channel failing")
    assert pager["last_status"] == "HTTP 401" and opsgenie.alerts == []
    assert not [d for d in recorded(eng) if KEY in repr(d)] and KEY not in repr(pager)
    assert not [r for r in caplog.records if KEY in r.getMessage()]


def test_a_429_is_waited_out(eng, opsgenie, deliver):
    opsgenie.limited, opsgenie.retry_after = 1, 1
    config = deliver(opsgenie)
    enqueue(eng, config, event())
    retry, created = wait_for(lambda: recorded(eng) if sent(eng) else None, 20,
                              interval=0.05, what="the alert after the 429")
    assert (retry["outcome"], retry["status"]) == ("retry", "HTTP 429")
    assert created["outcome"] == "sent" and len(opsgenie.alerts) == 1
    started = [time.mktime(time.strptime(d["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
               for d in (retry, created)]
    assert started[1] - started[0] >= 0.5      # (whole seconds: Retry-After is 1 s)


def test_what_an_agent_wrote_makes_no_tag_and_stays_in_the_limits(eng, opsgenie, deliver):
    config = deliver(opsgenie)
    hostile = "<b>x</b> <a href=\"http://evil.example\">y</a> @here \x1b[31m"
    enqueue(eng, config, {**event(text=f"{hostile}\n" + "z" * 40000),
                          "hostname": f"web-1 {hostile}" + "h" * 900, "summary": hostile})
    wait_for(lambda: opsgenie.alerts, 20, interval=0.05, what="the alert")
    (alert,) = opsgenie.alerts
    said = alert["message"] + alert["description"] + alert["entity"] + \
        "".join(alert["details"].values())
    assert "<" not in said and ">" not in said and "\x1b" not in said
    assert "\u2039b\u203ax\u2039/b\u203a" in alert["description"]
    assert len(alert["message"]) <= 130 and len(alert["entity"]) <= 512
    assert opsgenie.requests[-1][3] == 202          # within every limit: no 422


def test_a_resend_counts_the_same_alert_and_a_close_of_none_is_noted(opsgenie, key_file):
    """Without the deliverer: a create sent twice (a sink killed mid-send) is one alert,
    counted twice, as Opsgenie de-duplicates by alias."""
    sender = OpsgenieSender("pager", OpsgenieChannel(api_url=opsgenie.url,
                                                     api_key_file=key_file, timeout=5))
    first, again = sender.send(event(), "1"), sender.send(event(), "1")
    assert first.message_id != again.message_id
    (alert,) = opsgenie.alerts
    assert alert["count"] == 2 and alert["status"] == "open"
    assert sender.send(event("resolve"), "2").status == "HTTP 202"
    late = sender.send(event("resolve"), "2")
    assert late.status == "HTTP 404" and "nothing to close" in late.answer
    assert [code for *_, code in opsgenie.requests] == [202, 202, 202, 404]
