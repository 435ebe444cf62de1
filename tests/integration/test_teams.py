"""The ``teams`` channel (issue 34): the real deliverer against a local receiver that speaks a
Teams Workflows webhook as documented (fleetwatch/cli/demo/receivers/teams.py ``Teams``: the
message envelope and the Adaptive Card validated, 202 Accepted, 401 for a revoked
signature, 404 for a removed flow, 429 with Retry-After).

A problem is a card coloured ``attention`` with its facts and a button to the console, its
acknowledgement and recovery cards of their own; what an agent wrote is Markdown-escaped,
so it links, mentions and formats nothing; a revoked signature fails the alert and the
channel at once and the alerts reach the fallback; a retired Office 365 connector URL is a
channel failure, never a silent success; a 429 is waited out; a group is one card; the
workflow's URL (its signature) is never in a log line or a recorded delivery. On SQLite and
PostgreSQL."""

from __future__ import annotations

import logging
import re
import time

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.cli.demo.receivers.teams import Teams, card_problem  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import (U1, enqueue, fast, filled_in, recorded,  # noqa: E402
                                secret_file)
from support.delivering import host_check_event as event  # noqa: E402

SIG = "s3cr3t-signature-Zq9"
HOSTILE = "@here <at>Ops</at> <script>alert(1)</script> **bold** [click](http://evil.example)"


@pytest.fixture
def teams():
    server = Teams(None, 0, flow="ops-flow", sig=SIG).start()
    yield server
    server.stop()


@pytest.fixture
def deliver(deliverers, tmp_path):
    """``deliver(channels, url=...)``: a deliverer thread with those channels, a ``teams``
    one reading the workflow's ``url`` from a file, every check alert routed to the
    first."""
    def start(channels: dict, url: str = "", **extra) -> DeliveryConfig:
        hook = secret_file(tmp_path, "teams-webhook.url", url)
        config = fast(filled_in(channels, "webhook_url_file", "URL", hook), kinds=["check"],
                      **extra)
        deliverers(config)
        return config
    return start


def texts(card: dict) -> list[str]:
    """Every text a card shows: its TextBlocks' and its facts' values."""
    out = []
    for e in card["body"]:
        out += [e["text"]] if e["type"] == "TextBlock" else \
            [f["value"] for f in e.get("facts", [])]
    return out


def test_a_problem_its_acknowledgement_and_recovery_as_cards(eng, teams, deliver):
    config = deliver({"ops": {"type": "teams", "webhook_url_file": "URL", "timeout": 5}},
                     teams.webhook_url(), console_url="https://fleet.example.com/")
    enqueue(eng, config, event())
    wait_for(lambda: teams.cards, 20, interval=0.05, what="the problem's card")
    card = teams.cards[0]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card_problem({"type": "message", "attachments": [
        {"contentType": "application/vnd.microsoft.card.adaptive", "content": card}]}) is None
    title = card["body"][0]
    assert title["color"] == "attention" and title["weight"] == "Bolder"
    assert title["text"] == r"CRITICAL web\-1/check\_disk\: DISK CRITICAL \- / 95%"
    facts = {f["title"]: f["value"] for f in card["body"][1]["facts"]}
    assert facts["Host"] == r"web\-1" and facts["State"] == r"CRITICAL \(exit status 2\)"
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open in the console",
                                "url": f"https://fleet.example.com/hosts/{U1}"}]
    (first,) = wait_for(lambda: recorded(eng), 20, interval=0.05, what="its delivery")
    assert (first["outcome"], first["status"], first["message_id"]) == \
        ("sent", "HTTP 202", None)
    for n, (action, colour) in enumerate((("acknowledge", "accent"), ("resolve", "good")),
                                         start=2):
        enqueue(eng, config, event(action))
        wait_for(lambda: len(teams.cards) == n, 20, interval=0.05, what=f"the {action}")
        assert teams.cards[-1]["body"][0]["color"] == colour
    assert teams.cards[1]["body"][0]["text"].startswith("ACKNOWLEDGED ")
    assert teams.cards[2]["body"][0]["text"].startswith("RECOVERY ")
    assert [code for _, code in teams.requests] == [202, 202, 202]


def test_what_an_agent_wrote_links_mentions_and_formats_nothing(eng, teams, deliver):
    config = deliver({"ops": {"type": "teams", "webhook_url_file": "URL", "timeout": 5}},
                     teams.webhook_url())
    hostile = {**event(text=f"{HOSTILE}\x1b[31m\n" + "y" * 9000), "hostname": HOSTILE,
               "summary": HOSTILE}
    enqueue(eng, config, hostile)
    wait_for(lambda: teams.cards, 20, interval=0.05, what="the card")
    shown = texts(teams.cards[0])
    assert "msteams" not in teams.cards[0]                 # no mention entities, ever
    for said in shown:
        assert "\x1b" not in said and "http://" not in said
        # every character Markdown (or Teams' <at>) gives a meaning is backslash-escaped
        assert not re.search(r"(?<!\\)[<>\[\]()*_@`]", said), said
    assert r"\[click\]\(http\://evil\.example\)" in shown[0]
    assert any(r"\\x1b" in s for s in shown)
    assert sum(len(s) for s in shown) < 28 * 1024


def test_a_revoked_signature_fails_the_channel_and_its_alerts_reach_the_fallback(
        eng, teams, deliver, caplog):
    caplog.set_level(logging.INFO)
    backup = HttpReceiver().start()
    try:
        teams.revoke()
        config = deliver({"ops": {"type": "teams", "webhook_url_file": "URL", "timeout": 5,
                                  "fallback": "pager"},
                          "pager": {"type": "webhook", "url": backup.url, "timeout": 2}},
                         teams.webhook_url().replace("regenerated", SIG))
        enqueue(eng, config, event())
        wait_for(lambda: len(backup.posts) >= 2, 20, interval=0.05,
                 what="the failure and the alert at the fallback")
        assert {p["dedup_key"] for p in backup.posts} == {"channel/ops",
                                                          f"{U1}/check/check_disk/web-1"}
        (told,) = [p for p in backup.posts if p["dedup_key"] == "channel/ops"]
        assert "401" in told["payload"]["summary"]
        (failed,) = [d for d in recorded(eng) if d["channel"] == "ops"]
        assert (failed["outcome"], failed["status"]) == ("failed", "HTTP 401")
        assert "DirectApiInvalidAuthorizationSignature" in failed["answer"]
        assert teams.requests == [("ops-flow", 401)] and teams.cards == []
        for said in (caplog.text, str(recorded(eng)), str(backup.posts)):
            assert SIG not in said and "sig=" not in said and "ops-flow" not in said
    finally:
        backup.stop()


def test_a_retired_connector_url_is_a_channel_failure_not_a_silent_success(eng, teams,
                                                                            deliver):
    config = deliver({"ops": {"type": "teams", "webhook_url_file": "URL", "timeout": 5}},
                     teams.connector_url())
    enqueue(eng, config, event())
    (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"], 20,
                         interval=0.05, what="the refusal")
    assert "retired Office 365 connector" in failed["answer"]
    assert teams.requests == []                        # refused before anything was sent
    from fleetwatch.actions.channels import listed
    (ops,) = listed(eng.url.render_as_string(hide_password=False))
    assert ops["state"] == "failing" and "retired" in ops["last_error"]


def test_a_removed_flow_fails_the_alert_at_once(eng, teams, deliver):
    teams.remove()
    config = deliver({"ops": {"type": "teams", "webhook_url_file": "URL", "timeout": 5}},
                     teams.webhook_url())
    enqueue(eng, config, event())
    (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"], 20,
                         interval=0.05, what="the refusal")
    assert failed["status"] == "HTTP 404" and "WorkflowNotFound" in failed["answer"]


def test_a_429_is_waited_out_and_a_5xx_retried(eng, teams, deliver):
    teams.limited, teams.retry_after, teams.failing = 1, 1, 1
    config = deliver({"ops": {"type": "teams", "webhook_url_file": "URL", "timeout": 5}},
                     teams.webhook_url())
    enqueue(eng, config, event())
    wait_for(lambda: teams.cards, 20, interval=0.05, what="the card after the 429 and 503")
    tries = wait_for(lambda: (lambda r: r if r and r[-1]["outcome"] == "sent" else None)(
        recorded(eng)), 20, interval=0.05, what="the send recorded")
    assert [(d["outcome"], d["status"]) for d in tries] == \
        [("retry", "HTTP 429"), ("retry", "HTTP 503"), ("sent", "HTTP 202")]
    waited = [time.mktime(time.strptime(d["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
              for d in tries[:2]]
    assert waited[1] - waited[0] >= 0.5              # (whole seconds: Retry-After is 1 s)


def test_a_group_is_one_card_listing_its_alerts(eng, teams, deliver):
    config = deliver({"ops": {"type": "teams", "webhook_url_file": "URL", "timeout": 5,
                              "group_wait": 0.5}}, teams.webhook_url())
    enqueue(eng, config, *(event(host=f"web-{i}") for i in range(3)))
    wait_for(lambda: teams.cards, 20, interval=0.05, what="the group's card")
    wait_for(lambda: len([d for d in recorded(eng) if d["outcome"] == "sent"]) == 3, 20,
             interval=0.05, what="its three deliveries")
    (card,) = teams.cards
    lines = [e["text"] for e in card["body"]]
    assert lines[0].startswith("3 alerts") and len(lines) == 4
    assert sorted(lines[1:]) == [rf"CRITICAL web\-{i}/check\_disk\: DISK CRITICAL \- / 95%"
                                 for i in range(3)]
