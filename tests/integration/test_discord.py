"""The ``discord`` channel (issue 34): the real deliverer against a local receiver that speaks
Discord's webhooks as documented (fleetwatch/cli/demo/receivers/discord.py ``Discord``:
execute with ``wait=true``, edit, their limits and error bodies, 429 with Retry-After).

A problem is a message whose id is the delivery's message id; its acknowledgement and its
recovery are new messages, and the problem's message is edited to say so; no text an agent
wrote pings anyone (``allowed_mentions``), links, or formats; a refused edit is logged, not
retried; a revoked token fails the channel at once and its alerts reach the fallback; a 429
is waited out; a group is one message; the webhook's token is never in a log line or a
recorded delivery. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import re
import time

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.cli.demo.receivers.discord import Discord  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import (U1, enqueue, fast, filled_in, recorded,  # noqa: E402
                                secret_file, sent)
from support.delivering import host_check_event as event  # noqa: E402

TOKEN = "Xk2-webhook-token-9f8e7d"
HOSTILE = "@everyone @here <@123456789> <#987654321> **bold** ||spoiler|| " \
          "[click](http://evil.example) http://evil.example # heading"


@pytest.fixture
def discord():
    server = Discord(None, 0, token=TOKEN).start()
    yield server
    server.stop()


@pytest.fixture
def deliver(deliverers, tmp_path):
    """``deliver(channels, url)``: a deliverer thread with those channels, a ``discord`` one
    reading the webhook's ``url`` from a file, every check alert routed to the first."""
    def start(channels: dict, url: str = "", **extra) -> DeliveryConfig:
        hook = secret_file(tmp_path, "discord-webhook.url", url)
        config = fast(filled_in(channels, "webhook_url_file", "URL", hook), kinds=["check"],
                      **extra)
        deliverers(config)
        return config
    return start


def test_a_problem_then_its_follow_ups_and_the_problem_edited(eng, discord, deliver):
    config = deliver({"ops": {"type": "discord", "webhook_url_file": "URL", "timeout": 5}},
                     discord.webhook_url(), console_url="https://fleet.example.com/")
    enqueue(eng, config, event())
    wait_for(lambda: discord.messages, 20, interval=0.05, what="the problem's message")
    problem = discord.messages[0]
    assert problem["content"] == r"**CRITICAL** web\-1 / check\_disk"
    assert problem["allowed_mentions"] == {"parse": []} and problem["pinged"] == []
    (embed,) = problem["embeds"]
    assert embed["title"] == r"CRITICAL web\-1/check\_disk\: DISK CRITICAL \- / 95%"
    assert embed["url"] == f"https://fleet.example.com/hosts/{U1}"
    assert embed["description"] == (r"DISK CRITICAL \- / 95%" + "\n" + r"/ 95% used" + "\n"
                                    f"[Open in the console](https://fleet.example.com/hosts/"
                                    f"{U1})")
    assert {f["name"]: f["value"] for f in embed["fields"]}["Host"] == r"web\-1"
    (first,) = wait_for(lambda: sent(eng), 20, interval=0.05, what="its delivery recorded")
    assert (first["status"], first["message_id"]) == ("HTTP 200", problem["id"])
    for n, (action, done) in enumerate((("acknowledge", "ACKNOWLEDGED"),
                                        ("resolve", "RESOLVED")), start=2):
        enqueue(eng, config, event(action))
        wait_for(lambda: len(discord.messages) == n and len(problem["edits"]) == n - 1, 20,
                 interval=0.05, what=f"the {action} and the problem's edit")
        assert problem["content"] == rf"~~web\-1 / check\_disk~~ **{done}**"
        assert problem["embeds"] == [embed]                   # the edit keeps the embed
    assert discord.messages[1]["content"].startswith("**ACKNOWLEDGED**")
    assert discord.messages[2]["content"].startswith("**RECOVERY**")
    assert discord.messages[2]["embeds"][0]["color"] == 0x2EB67D
    assert [r for r in discord.requests if r[1] != 200] == []
    assert [r[0] for r in discord.requests] == ["POST", "POST", "PATCH", "POST", "PATCH"]


def test_what_an_agent_wrote_pings_links_and_formats_nothing(eng, discord, deliver):
    config = deliver({"ops": {"type": "discord", "webhook_url_file": "URL", "timeout": 5}},
                     discord.webhook_url())
    hostile = {**event(text=f"{HOSTILE}\x1b[31m\n" + "y" * 9000), "hostname": HOSTILE,
               "check": HOSTILE, "summary": HOSTILE}
    enqueue(eng, config, hostile)
    wait_for(lambda: discord.messages, 20, interval=0.05, what="the message")
    m = discord.messages[0]
    assert m["pinged"] == [] and m["allowed_mentions"] == {"parse": []}
    (embed,) = m["embeds"]
    assert m["content"].startswith("**CRITICAL** ")          # (ours: the only markup)
    said = [m["content"].removeprefix("**CRITICAL** "), embed["title"], embed["description"],
            *(f["value"] for f in embed["fields"])]
    for s in said:
        assert "\x1b" not in s and "http://" not in s
        assert not re.search(r"(?<!\\)[<>\[\]()*_@|#~`:]", s), s
    assert len(m["content"]) <= 2000 and len(embed["description"]) <= 4096
    # the receiver's own check: were the text unescaped and mentions allowed, it would ping
    from fleetwatch.cli.demo.receivers.discord import pinged
    assert pinged({"content": HOSTILE}) == ["@everyone", "@here", "<@123456789>"]


def test_a_refused_edit_is_logged_and_the_follow_up_not_sent_twice(eng, discord, deliver,
                                                                   caplog):
    caplog.set_level(logging.INFO)
    config = deliver({"ops": {"type": "discord", "webhook_url_file": "URL", "timeout": 5}},
                     discord.webhook_url())
    enqueue(eng, config, event())
    wait_for(lambda: sent(eng), 20, interval=0.05, what="the problem sent")
    discord.delete(discord.messages[0]["id"])
    enqueue(eng, config, event("resolve"))
    wait_for(lambda: len(sent(eng)) == 2, 20, interval=0.05, what="the recovery sent")
    wait_for(lambda: "not updated" in caplog.text, 20, interval=0.05, what="the edit's log")
    assert [r for r in discord.requests] == [("POST", 200), ("POST", 200), ("PATCH", 404)]
    assert "Unknown Message" in caplog.text and TOKEN not in caplog.text


def test_a_revoked_token_fails_the_channel_and_its_alerts_reach_the_fallback(
        eng, discord, deliver, caplog):
    caplog.set_level(logging.INFO)
    backup = HttpReceiver().start()
    try:
        url = discord.webhook_url()
        discord.revoke()
        config = deliver({"ops": {"type": "discord", "webhook_url_file": "URL", "timeout": 5,
                                  "fallback": "pager"},
                          "pager": {"type": "webhook", "url": backup.url, "timeout": 2}}, url)
        enqueue(eng, config, event())
        wait_for(lambda: len(backup.posts) >= 2, 20, interval=0.05,
                 what="the failure and the alert at the fallback")
        assert {p["dedup_key"] for p in backup.posts} == {"channel/ops",
                                                          f"{U1}/check/check_disk/web-1"}
        (failed,) = [d for d in recorded(eng) if d["channel"] == "ops"]
        assert (failed["outcome"], failed["status"]) == ("failed", "HTTP 401")
        assert "Invalid Webhook Token" in failed["answer"]
        assert discord.requests == [("POST", 401)] and discord.messages == []
        for said in (caplog.text, str(recorded(eng)), str(backup.posts)):
            assert TOKEN not in said
    finally:
        backup.stop()


def test_a_deleted_webhook_and_a_refused_connection_keep_the_token_secret(eng, discord,
                                                                          deliver, caplog):
    caplog.set_level(logging.INFO)
    url = discord.webhook_url()
    discord.remove()
    config = deliver({"ops": {"type": "discord", "webhook_url_file": "URL", "timeout": 5}},
                     url)
    enqueue(eng, config, event())
    (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"], 20,
                         interval=0.05, what="the refusal")
    assert failed["status"] == "HTTP 404" and "Unknown Webhook" in failed["answer"]
    # a server that is gone: the retried error names the host, never the token's path
    from sinks.alerting.delivery.channels import SendError
    from sinks.alerting.delivery.channeltypes import DiscordChannel
    from sinks.alerting.delivery.services.discord import DiscordSender
    discord.stop()
    hook = config.parsed_channels()["ops"].webhook_url_file
    sender = DiscordSender("ops", DiscordChannel(webhook_url_file=hook, timeout=2))
    with pytest.raises(SendError) as refused:
        sender.send(event(), "1")
    assert not refused.value.permanent and f"127.0.0.1:{discord.port}" in str(refused.value)
    assert TOKEN not in str(refused.value) and "webhooks" not in str(refused.value)
    assert TOKEN not in caplog.text


def test_a_429_is_waited_out_for_its_retry_after(eng, discord, deliver):
    discord.limited, discord.retry_after = 1, 1
    config = deliver({"ops": {"type": "discord", "webhook_url_file": "URL", "timeout": 5}},
                     discord.webhook_url())
    enqueue(eng, config, event())
    retry, posted = wait_for(lambda: recorded(eng) if sent(eng) else None, 20, interval=0.05,
                             what="the message after the 429")
    assert (retry["outcome"], retry["status"]) == ("retry", "HTTP 429")
    assert "You are being rate limited" in retry["answer"] and posted["outcome"] == "sent"
    started = [time.mktime(time.strptime(d["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
               for d in (retry, posted)]
    assert started[1] - started[0] >= 0.5            # (whole seconds: Retry-After is 1 s)


def test_a_group_is_one_message_listing_its_alerts(eng, discord, deliver):
    config = deliver({"ops": {"type": "discord", "webhook_url_file": "URL", "timeout": 5,
                              "group_wait": 0.5}}, discord.webhook_url())
    enqueue(eng, config, *(event(host=f"web-{i}") for i in range(3)))
    wait_for(lambda: len(sent(eng)) == 3, 20, interval=0.05, what="the group's deliveries")
    (m,) = discord.messages
    assert m["content"].startswith("3 alerts") and m["pinged"] == []
    lines = m["embeds"][0]["description"].split("\n")
    assert sorted(lines) == [rf"CRITICAL web\-{i}/check\_disk\: DISK CRITICAL \- / 95%"
                             for i in range(3)]
    assert {d["message_id"] for d in sent(eng)} == {m["id"]}
