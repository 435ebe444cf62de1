"""The ``teams`` channel's card (sinks/alerting/delivery/services/teams.py), pure: what a Workflows
webhook is sent for an alert and a group, valid by the Adaptive Card rules the receiver
checks, within Teams' 28 KB, Markdown-escaped; a retired connector URL and a connector's
answer are refused; an error never shows the workflow's URL."""

from __future__ import annotations

import io
import urllib.error

import pytest

from fleetwatch.cli.demo.receivers.teams import card_problem
from sinks.alerting.delivery.services import teams
from sinks.alerting.delivery.channels import SendError
from sinks.alerting.delivery.channeltypes import TeamsChannel

NOW = 1_800_000_000.0
HOSTILE = "@here <at>x</at> **b** [l](http://evil.example) _i_ # h `c`"


def event(host="web-1", action="trigger", severity="critical", text="/ 95% used") -> dict:
    return {"key": f"u/check/disk/{host}", "kind": "check", "action": action,
            "severity": severity, "uuid": "u", "hostname": host, "check": "check_disk",
            "status": 2, "summary": "DISK CRITICAL", "text": text, "created": NOW,
            "since": NOW - 720, "link": "https://fleet.example.com/hosts/u"}


def test_the_card_of_a_hostile_alert_is_valid_escaped_and_within_28_kb():
    ev = {**event(host=HOSTILE * 20, text="\n".join([HOSTILE * 50] * 40)),
          "summary": HOSTILE * 20, "check": HOSTILE * 20, "parent": HOSTILE}
    out = teams.payload(ev)
    assert card_problem(out) is None and teams.size(out) <= teams.PAYLOAD_MAX
    card = out["attachments"][0]["content"]
    assert card["version"] == "1.4" and card["body"][0]["color"] == "attention"
    facts = dict((f["title"], f["value"]) for f in card["body"][1]["facts"])
    assert set(facts) == {"Host", "Check", "State", "Since", "Parent"}
    assert facts["Parent"] == r"\@here \<at\>x\</at\> \*\*b\*\* \[l\]\(http\://evil\.example\) " \
                              r"\_i\_ \# h \`c\`"
    assert facts["Since"].endswith(r"\(12m\)")
    assert card["actions"][0]["url"] == "https://fleet.example.com/hosts/u"


@pytest.mark.parametrize("action, severity, colour", [
    ("trigger", "critical", "attention"), ("trigger", "warning", "warning"),
    ("trigger", "unknown", "attention"), ("acknowledge", "critical", "accent"),
    ("resolve", "ok", "good")])
def test_the_title_is_coloured_by_what_happened(action, severity, colour):
    card = teams.payload(event(action=action, severity=severity))["attachments"][0]["content"]
    assert card["body"][0]["color"] == colour


def test_no_console_link_no_button():
    card = teams.payload({**event(), "link": None})["attachments"][0]["content"]
    assert "actions" not in card and card_problem(teams.envelope(card)) is None


def test_a_group_lists_its_alerts_and_counts_the_rest_within_28_kb():
    events = [event(host=f"web-{i}-{'x' * 250}") for i in range(500)]
    out = teams.group_payload(events, "severity critical")
    assert card_problem(out) is None and teams.size(out) <= teams.PAYLOAD_MAX
    body = out["attachments"][0]["content"]["body"]
    assert body[0]["text"].startswith(r"500 alerts \(severity critical\)")
    listed = len(body) - 2
    assert 0 < listed <= teams.GROUP_LIST
    assert body[-1]["text"] == f"... and {500 - listed} more"


@pytest.mark.parametrize("url, gone", [
    ("https://acme.webhook.office.com/webhookb2/a@b/IncomingWebhook/c/d", True),
    ("https://outlook.office.com/webhook/a@b/IncomingWebhook/c/d", True),
    ("https://proxy.example.com/webhookb2/a@b/IncomingWebhook/c/d", True),
    ("https://prod-12.westeurope.logic.azure.com:443/workflows/abc/triggers/manual/paths/"
     "invoke?api-version=2016-06-01&sig=x", False),
    ("https://default123.environment.api.powerplatform.com/powerautomate/automations/direct/"
     "workflows/abc/triggers/manual/paths/invoke?api-version=1&sig=x", False)])
def test_a_retired_connector_url_is_known(url, gone):
    assert teams.retired(url) is gone


class Answer(io.BytesIO):
    def __init__(self, status: int, body: bytes):
        super().__init__(body)
        self.status = status


class Opener:
    """Answers each request with ``answer`` (a status and body, or an exception)."""

    def __init__(self, answer):
        self.answer, self.urls = answer, []

    def open(self, req, timeout=None):
        self.urls.append(req.full_url)
        if isinstance(self.answer, Exception):
            raise self.answer
        return Answer(*self.answer)


def sender(tmp_path, url: str, answer) -> teams.TeamsSender:
    hook = tmp_path / "hook"
    hook.write_text(url + "\n")
    return teams.TeamsSender("ops", TeamsChannel(webhook_url_file=str(hook)), Opener(answer))


URL = "https://prod-1.example.logic.azure.com/workflows/f10w/triggers/manual/paths/invoke" \
      "?api-version=2016-06-01&sig=SECRETSIG"


def test_a_202_is_a_receipt_without_a_message_id(tmp_path):
    receipt = sender(tmp_path, URL, (202, b"")).send(event(), "1")
    assert (receipt.status, receipt.message_id, receipt.answer) == ("HTTP 202", None, "")


def test_a_connectors_answer_is_refused_for_good(tmp_path):
    with pytest.raises(SendError, match="retired Office 365 connector") as e:
        sender(tmp_path, URL, (200, b"1")).send(event(), "1")
    assert e.value.permanent


def test_a_retired_url_is_refused_before_sending(tmp_path):
    s = sender(tmp_path, "https://acme.webhook.office.com/webhookb2/a@b/IncomingWebhook/c/d",
               (200, b"1"))
    with pytest.raises(SendError, match="acme.webhook.office.com") as e:
        s.send(event(), "1")
    assert e.value.permanent and s.opener.urls == []


def test_an_error_names_the_host_never_the_url(tmp_path):
    s = sender(tmp_path, URL, urllib.error.URLError(ConnectionRefusedError(111, "refused")))
    with pytest.raises(SendError) as e:
        s.send(event(), "1")
    assert not e.value.permanent and "prod-1.example.logic.azure.com" in str(e.value)
    assert "f10w" not in str(e.value) and "SECRETSIG" not in str(e.value)
