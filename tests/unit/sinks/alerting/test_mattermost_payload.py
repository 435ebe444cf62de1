"""The ``mattermost`` channel's posts (sinks/alerting/delivery/services/mattermost.py), pure: what
an agent wrote notifies no one by Mattermost's own reading of mentions (the receiver's
:func:`mentions`), shows as written, stays within the text limit; a group with its count;
the ``channel`` setting checked at start."""

from __future__ import annotations

import time

import pytest

from fleetwatch.cli.demo.receivers.mattermost import mentions
from fleetwatch.config import ConfigError, build
from sinks.alerting.delivery.services import mattermost
from sinks.alerting.delivery.config import DeliveryConfig

HOSTILE = "@channel @ALL @here: @ops-lead. ~town-square #tag **b** [l](http://evil.example)"


def event(host="web-1", action="trigger", severity="critical", text="/ 95% used") -> dict:
    return {"key": f"u/check/disk/{host}", "kind": "check", "action": action,
            "severity": severity, "uuid": "u", "hostname": host, "check": "check_disk",
            "status": 2, "summary": "DISK CRITICAL", "text": text, "created": time.time(),
            "link": "https://fleet.example.com/hosts/u"}


def said(out: dict) -> list[str]:
    """The texts Mattermost reads mentions in: the message, the attachments' fields."""
    return [out["text"], *(f["value"] for a in out.get("attachments", [])
                           for f in a.get("fields", []))]


def test_mentions_channel_links_and_hashtags_are_inert():
    out = mattermost.payload({**event(text=HOSTILE), "hostname": HOSTILE, "summary": HOSTILE})
    assert mentions(said(out), ("ops-lead",)) == []
    # without the word joiners, Mattermost would read them (the escapes alone do not stop it)
    plain = [s.replace(mattermost.JOINER, "") for s in said(out)]
    assert set(mentions(plain, ("ops-lead",))) == {"@channel", "@all", "@here", "@ops-lead"}
    assert "\\~\u2060town\\-square \\#\u2060tag" in out["text"]


def test_a_post_stays_within_the_text_limit():
    out = mattermost.payload({**event(text="\n".join(["@here " * 60] * 40)),
                              "summary": "*" * 5000})
    assert len(out["text"]) <= mattermost.TEXT_MAX
    assert out["text"].endswith("[Open in the console](https://fleet.example.com/hosts/u)")


@pytest.mark.parametrize("action, severity, colour", [
    ("trigger", "critical", "#E01E5A"), ("trigger", "warning", "#ECB22E"),
    ("acknowledge", "critical", "#1D9BD1"), ("resolve", "ok", "#2EB67D")])
def test_the_attachment_is_coloured_by_what_happened(action, severity, colour):
    out = mattermost.payload(event(action=action, severity=severity), "alerts")
    assert out["attachments"][0]["color"] == colour and out["channel"] == "alerts"


def test_a_group_lists_its_alerts_and_counts_the_rest():
    out = mattermost.group_payload([event(host=f"web-{i}") for i in range(120)], "host x")
    title, *lines = out["text"].split("\n")
    assert title == r"**120 alerts \(host x\)\: 120 CRITICAL**"
    assert len(lines) == mattermost.GROUP_LIST + 1 and lines[-1] == "... and 70 more"
    assert "channel" not in out


@pytest.mark.parametrize("channel, ok", [("ops", True), ("town-square", True),
                                         ("@ops-lead", True), ("#ops", True),
                                         ("Ops Room", False), ("ops;rm", False)])
def test_the_channel_setting_is_a_channel_name(channel, ok, tmp_path):
    raw = {"channels": {"mm": {"type": "mattermost", "webhook_url_file": "/x",
                               "channel": channel}}}
    if ok:
        build(DeliveryConfig, raw, "sink.yaml", "alerting.delivery")
    else:
        with pytest.raises(ConfigError, match=r"channels\.mm\.channel: expected a channel"):
            build(DeliveryConfig, raw, "sink.yaml", "alerting.delivery")
