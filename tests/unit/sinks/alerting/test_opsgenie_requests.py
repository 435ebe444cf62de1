"""What the ``opsgenie`` channel sends (sinks/alerting/delivery/services/opsgenie.py): the alias of a
key, the create, acknowledge and close requests within the Alert API's limits, no tag from
an agent. Pure: no server (the sends are tests/integration/test_opsgenie.py)."""

from __future__ import annotations

import pytest

from fleetwatch.cli.demo.receivers.opsgenie import _problems
from fleetwatch.config import ConfigError, build
from sinks.alerting.delivery.channeltypes import OpsgenieChannel
from sinks.alerting.delivery.config import DeliveryConfig
from sinks.alerting.delivery.services.opsgenie import alias, request

U1 = "3f0c2b1e-8d43-4a7e-9a57-1d2f8c3b4a5e"
CHANNEL = OpsgenieChannel(api_key_file="/k", responders=["ops"], tags=["fleet"])


def event(**more) -> dict:
    return {"key": f"{U1}/check/check_disk", "kind": "check", "action": "trigger",
            "severity": "critical", "uuid": U1, "hostname": "web-1", "check": "check_disk",
            "status": 2, "summary": "DISK CRITICAL - / 95%", "text": "/ 95% used",
            "created": 1_700_000_600.0, "since": 1_700_000_000.0,
            "link": f"https://fleet.example.com/hosts/{U1}", **more}


def test_an_alias_is_the_key_with_colons_and_a_hash_when_it_must():
    assert alias(f"{U1}/check/check_disk") == f"{U1}:check:check_disk"
    odd = alias(f"{U1}/check/disk usage ~ /var")
    assert "/" not in odd and " " not in odd and odd.count("~") == 1 and len(odd) < 100
    assert alias("a/b:c") != alias("a/b/c") and alias("a:b") != alias("a/b")
    long = alias("k/" + "x" * 600)
    assert len(long) == 512 and long != alias("k/" + "x" * 601)


def test_a_problem_creates_an_alert_within_the_limits():
    path, body = request(event(), CHANNEL)
    assert path == "/v2/alerts"
    assert body["message"] == "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
    assert (body["alias"], body["priority"], body["entity"], body["source"]) == (
        f"{U1}:check:check_disk", "P1", "web-1", "fleetwatch")
    assert body["responders"] == [{"name": "ops", "type": "team"}] and body["tags"] == ["fleet"]
    assert body["details"]["console"] == f"https://fleet.example.com/hosts/{U1}"
    assert _problems(body) == {}
    _, huge = request(event(summary="s" * 500, hostname="h" * 600,
                            text="\n".join("o" * 300 for _ in range(60))), CHANNEL)
    assert _problems(huge) == {} and len(huge["message"]) == 130


@pytest.mark.parametrize("action, verb", [("acknowledge", "acknowledge"), ("resolve", "close")])
def test_follow_ups_go_to_the_alias(action, verb):
    path, body = request(event(action=action, acknowledged_by="alice",
                               summary="acknowledged by alice: on it"), CHANNEL)
    assert path == f"/v2/alerts/{U1}%3Acheck%3Acheck_disk/{verb}?identifierType=alias"
    assert body["source"] == "fleetwatch" and _problems(body) == {}
    if verb == "acknowledge":
        assert (body["user"], body["note"]) == ("alice", "acknowledged by alice: on it")


@pytest.mark.parametrize("priority, severity", [("P2", "error"), ("P3", "warning"),
                                                ("P5", "info")])
def test_priorities(priority, severity):
    assert request(event(severity=severity), CHANNEL)[1]["priority"] == priority


def test_what_an_agent_wrote_makes_no_tag():
    _, body = request(event(hostname="<b>web</b>", summary="<a href='x'>y</a>",
                            text="<script>\x1b"), CHANNEL)
    said = body["message"] + body["description"] + body["entity"] + \
        "".join(body["details"].values())
    assert "<" not in said and ">" not in said and "\x1b" not in said
    assert "\u2039script\u203a\\x1b" in body["description"]


def test_tags_and_responders_opsgenie_would_refuse_are_refused_at_start():
    for bad in ({"tags": ["a b"]}, {"tags": [f"t{n}" for n in range(21)]},
                {"tags": ["x" * 51]}, {"responders": [""]}):
        with pytest.raises(ConfigError, match=r"channels\.og\.(tags|responders)"):
            build(DeliveryConfig, {"channels": {"og": {"type": "opsgenie",
                                                       "api_key_file": "/k", **bad}}},
                  "sink.yaml", "alerting.delivery")
