"""The ``discord`` channel's messages (sinks/alerting/delivery/services/discord.py), pure: within
Discord's limits whatever an agent wrote (checked by the receiver's own validation), never
cut through an escape, pinging no one; a group within the description's 4,096 with its
count; the follow-up's edit; the webhook URLs with ``wait`` and ``thread_id``."""

from __future__ import annotations

import time

import pytest

from fleetwatch.cli.demo.receivers.discord import message_problem, pinged
from sinks.alerting.delivery.services import discord

HOSTILE = "@everyone <@1234> <#5678> **b** ||s|| [l](http://evil.example) # h `c` > q"


def event(host="web-1", action="trigger", severity="critical", text="/ 95% used") -> dict:
    return {"key": f"u/check/disk/{host}", "kind": "check", "action": action,
            "severity": severity, "uuid": "u", "hostname": host, "check": "check_disk",
            "status": 2, "summary": "DISK CRITICAL", "text": text, "created": time.time(),
            "since": time.time() - 60, "link": "https://fleet.example.com/hosts/u"}


@pytest.mark.parametrize("escaped, limit, expected", [
    ("abc", 5, "abc"), (r"ab\*cd", 3, "ab"), (r"ab\*cd", 4, r"ab\*"),
    ("a\\\\\\\\b", 3, "a\\\\"), ("a\\\\\\\\b", 4, "a\\\\")])
def test_a_cut_never_leaves_half_an_escape(escaped, limit, expected):
    assert discord.cut(escaped, limit) == expected


def test_a_hostile_alert_is_within_every_limit_and_pings_no_one():
    ev = {**event(host=HOSTILE * 30, text="\n".join([HOSTILE * 60] * 40)),
          "summary": HOSTILE * 30, "check": HOSTILE * 30, "parent": HOSTILE * 30}
    out = discord.payload(ev)
    assert message_problem(out) is None and pinged(out) == []
    (embed,) = out["embeds"]
    assert discord.embed_size(embed) <= discord.EMBED_MAX
    assert len(embed["description"]) <= discord.DESCRIPTION_MAX
    assert embed["description"].endswith("\n[Open in the console](https://fleet.example.com"
                                         "/hosts/u)")
    for text in (out["content"], embed["title"], embed["description"],
                 *(f["value"] for f in embed["fields"])):
        assert not text.endswith("\\") or text.endswith("\\\\")
    assert out["allowed_mentions"] == {"parse": []}


def test_a_link_discord_would_not_take_is_left_out():
    out = discord.payload({**event(), "link": "https://fleet.example.com/a (b)"})
    assert "url" not in out["embeds"][0] and "[Open" not in out["embeds"][0]["description"]


def test_the_follow_ups_edit_strikes_the_problem_and_pings_no_one():
    assert discord.edit(event(action="resolve", severity="ok")) == {
        "content": r"~~web\-1 / check\_disk~~ **RESOLVED**", "allowed_mentions": {"parse": []}}
    assert discord.edit({**event(action="acknowledge"), "hostname": "@everyone"})[
        "content"] == r"~~\@everyone / check\_disk~~ **ACKNOWLEDGED**"


def test_a_group_lists_its_alerts_and_counts_the_rest_within_the_limits():
    events = [event(host=f"web-{i}-{'x' * 250}") for i in range(500)]
    out = discord.group_payload(events, "severity critical")
    assert message_problem(out) is None
    lines = out["embeds"][0]["description"].split("\n")
    assert lines[-1] == f"... and {500 - (len(lines) - 1)} more"
    assert 0 < len(lines) - 1 <= discord.GROUP_LIST
    assert out["content"].startswith(r"500 alerts \(severity critical\)")


def test_the_webhook_urls_keep_the_thread_and_wait_for_the_message():
    url = "https://discord.com/api/webhooks/123/TOKEN?thread_id=77&wait=false"
    assert discord.execute_url(url) == \
        "https://discord.com/api/webhooks/123/TOKEN?thread_id=77&wait=true"
    assert discord.message_url(url, "999") == \
        "https://discord.com/api/webhooks/123/TOKEN/messages/999?thread_id=77"
