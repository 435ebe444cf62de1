"""The ``telegram`` channel (issue 34): the real deliverer against a local server that speaks
Telegram's Bot API as documented (fleetwatch/cli/demo/receivers/telegram.py ``Telegram``:
its HTML parsed as Telegram parses it, its limits, its errors, 429 with
``parameters.retry_after``).

A problem is a message; its acknowledgement and its recovery are replies to it, and it is
edited to say so; what an agent wrote mentions nobody, links nothing, formats nothing; a
revoked token fails the channel at once, its alerts reach the fallback, and the token (in
the URL's path) is in no log line and no recorded delivery; a 429 waits its retry_after; a
group is one message. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import time

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.cli.demo.receivers.telegram import Telegram, entity_text  # noqa: E402
from sinks.alerting.delivery.channels import SendError  # noqa: E402
from sinks.alerting.delivery.channeltypes import TelegramChannel  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from sinks.alerting.delivery.services.telegram import TelegramSender  # noqa: E402
from support.delivering import (U1, check_event, enqueue, fast, recorded,  # noqa: E402
                                secret_file, sent)

TOKEN = "7123456789:AAtest-token_for-fleetwatch"
CHAT = -1001234567890
CONSOLE = f"https://fleet.example.com/hosts/{U1}"
HOSTILE = ("@here @admin <script>alert(1)</script> <b>bold</b> <a href=\"http://evil.example\">"
           "x</a> http://evil.example #tag /start *md* _it_ `code` &amp; \x1b[31m")


def event(action: str = "trigger", text: str = "/ 95% used", **more) -> dict:
    """check_disk's event; an acknowledgement's summary says who acknowledged it."""
    if action == "acknowledge":
        more = {"summary": "acknowledged by alice: on it", **more}
    return check_event(action, text=text, **more)


@pytest.fixture
def telegram():
    server = Telegram(None, 0, tokens=(TOKEN,), chats=(CHAT,)).start()
    yield server
    server.stop()


@pytest.fixture
def token_file(tmp_path):
    return secret_file(tmp_path, "telegram-token", TOKEN)


@pytest.fixture
def deliver(deliverers, token_file):
    """``deliver(server, **extra)``: a deliverer thread with a ``telegram`` channel ``ops``
    (more channels in ``channels``), every check alert routed to it."""
    def start(server: Telegram, channels: dict | None = None, **extra) -> DeliveryConfig:
        ops = {"type": "telegram", "api_url": server.url, "token_file": token_file,
               "chat_id": str(CHAT), "timeout": 5, **extra.pop("ops", {})}
        config = fast({"ops": ops, **(channels or {})}, kinds=["check"],
                      console_url="https://fleet.example.com/", **extra)
        deliverers(config)
        return config
    return start


def kinds(message: dict) -> list[str]:
    return [e["type"] for e in message.get("entities", [])]


def test_a_problem_then_its_ack_and_recovery_as_replies(eng, telegram, deliver):
    config = deliver(telegram)
    enqueue(eng, config, event())
    wait_for(lambda: telegram.messages, 20, interval=0.05, what="the problem's message")
    problem = telegram.messages[0]
    assert problem["chat"]["id"] == CHAT and "reply_to_message" not in problem
    assert problem["text"].startswith("CRITICAL web-1 / check_disk\nDISK CRITICAL - / 95%\n"
                                      "State: CRITICAL (exit status 2)")
    assert kinds(problem) == ["bold", "code", "code", "code", "pre", "text_link"]
    link = problem["entities"][-1]
    assert (entity_text(problem, link), link["url"]) == ("Open in the console", CONSOLE)
    assert problem["previews"] is False
    (first,) = wait_for(lambda: sent(eng), 20, interval=0.05, what="its delivery recorded")
    assert (first["status"], first["message_id"]) == ("HTTP 200",
                                                      f"{CHAT}/{problem['message_id']}")
    for n, (action, mark) in enumerate((("acknowledge", "ACKNOWLEDGED"),
                                        ("resolve", "RESOLVED")), start=2):
        enqueue(eng, config, event(action))
        wait_for(lambda: len(telegram.messages) == n and len(problem["edits"]) == n - 1, 20,
                 interval=0.05, what=f"the {action} as a reply, the problem edited")
        reply = telegram.messages[-1]
        assert reply["reply_to_message"]["message_id"] == problem["message_id"]
        assert problem["text"].startswith(f"{mark} web-1 / check_disk")
        assert "strikethrough" in kinds(problem)
    assert telegram.messages[1]["text"].startswith("ACKNOWLEDGED web-1 / check_disk\n"
                                                   "acknowledged by alice: on it")
    assert telegram.messages[2]["text"].startswith("RECOVERY web-1 / check_disk")
    wait_for(lambda: len(sent(eng)) == 3, 20, interval=0.05, what="three deliveries")
    assert [e for _, e in telegram.requests if e != "ok"] == []


def test_what_an_agent_wrote_mentions_links_and_formats_nothing(eng, telegram, deliver):
    config = deliver(telegram)
    enqueue(eng, config, {**event(text=f"{HOSTILE}\n" + "y" * 9000),
                          "hostname": f"web-1 {HOSTILE}", "summary": HOSTILE,
                          "check": "check_disk @channel"})
    wait_for(lambda: telegram.messages, 20, interval=0.05, what="the message")
    (m,) = telegram.messages
    # Telegram parsed it (no "can't parse entities"), found no mention, URL, hashtag or
    # command, and the only link is the console's
    assert set(kinds(m)) <= {"bold", "code", "pre", "text_link"}
    assert [e["url"] for e in m["entities"] if e["type"] == "text_link"] == [CONSOLE]
    assert [entity_text(m, e) for e in m["entities"] if e["type"] == "bold"] == ["CRITICAL"]
    assert "<script>alert(1)</script> <b>bold</b>" in m["text"]      # shown as written
    assert "\x1b" not in m["text"] and "\\x1b[31m" in m["text"]
    assert len(m["text"].encode("utf-16-le")) // 2 <= 4096


def test_a_revoked_token_fails_the_channel_reaches_the_fallback_and_never_shows(
        eng, telegram, deliver, caplog):
    caplog.set_level(logging.DEBUG)
    backup = HttpReceiver().start()
    try:
        telegram.revoke(TOKEN)
        config = deliver(telegram, {"pager": {"type": "webhook", "url": backup.url,
                                              "timeout": 2}}, ops={"fallback": "pager"})
        enqueue(eng, config, event())
        wait_for(lambda: len(backup.posts) >= 2, 20, interval=0.05,
                 what="the failure and the alert at the fallback")
        assert {p["dedup_key"] for p in backup.posts} == {"channel/ops",
                                                          f"{U1}/check/check_disk"}
        (told,) = [p for p in backup.posts if p["dedup_key"] == "channel/ops"]
        assert "401 Unauthorized" in told["payload"]["summary"]
        (failed,) = [d for d in recorded(eng) if d["channel"] == "ops"]
        assert (failed["outcome"], failed["status"]) == ("failed", "HTTP 401")
        assert telegram.requests == [("sendMessage", "Unauthorized")]
        secret = TOKEN.partition(":")[2]
        assert not [d for d in recorded(eng) if secret in repr(d)]
        assert not [r for r in caplog.records if secret in r.getMessage()]
        assert told["payload"]["summary"].count(secret) == 0
    finally:
        backup.stop()


def test_a_429_waits_its_retry_after(eng, telegram, deliver):
    telegram.limited, telegram.retry_after = 1, 1
    config = deliver(telegram)
    enqueue(eng, config, event())
    retry, posted = wait_for(lambda: recorded(eng) if sent(eng) else None, 20, interval=0.05,
                             what="the message after the 429")
    assert (retry["outcome"], retry["status"]) == ("retry", "HTTP 429")
    assert "retry after 1" in retry["answer"]
    assert posted["outcome"] == "sent" and len(telegram.messages) == 1
    started = [time.mktime(time.strptime(d["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
               for d in (retry, posted)]
    assert started[1] - started[0] >= 0.5      # (whole seconds: retry_after is 1 s)


def test_a_group_is_one_message_listing_its_alerts(eng, telegram, deliver):
    config = deliver(telegram, ops={"group_wait": 0.5})
    for n in range(3):
        enqueue(eng, config, {**event(), "key": f"{U1}/check/check_{n}",
                              "check": f"check_{n} @here"})
    wait_for(lambda: telegram.messages, 20, interval=0.05, what="the group's message")
    wait_for(lambda: len(sent(eng)) == 3, 20, interval=0.05, what="three alerts recorded")
    (m,) = telegram.messages
    assert m["text"].startswith("3 alerts: 3 CRITICAL\n")
    assert kinds(m) == ["code", "pre", "text_link"]
    assert sorted(entity_text(m, m["entities"][1]).splitlines()) == [
        f"CRITICAL web-1/check_{n} @here: DISK CRITICAL - / 95%" for n in range(3)]
    assert {d["message_id"] for d in sent(eng)} == {f"{CHAT}/{m['message_id']}"}


def test_what_telegram_refuses_is_sorted_into_retry_and_for_good(telegram, token_file):
    """Without the deliverer: each of Telegram's answers as the sender takes it."""
    sender = TelegramSender("ops", TelegramChannel(api_url=telegram.url, token_file=token_file,
                                                   chat_id=str(CHAT), timeout=5))
    telegram.failing = 1
    with pytest.raises(SendError) as e:
        sender.send(event(), "1")
    assert (e.value.permanent, e.value.status) == (False, "HTTP 502")
    telegram.blocked.add(CHAT)
    with pytest.raises(SendError) as e:
        sender.send(event(), "1")
    assert e.value.permanent and "bot was kicked" in str(e.value)
    telegram.blocked.clear()
    other = TelegramSender("ops", TelegramChannel(api_url=telegram.url, token_file=token_file,
                                                  chat_id="-1009999", timeout=5))
    with pytest.raises(SendError, match="chat not found") as e:
        other.send(event(), "1")
    assert e.value.permanent
    # a follow-up whose problem's message is gone is sent all the same, not as a reply
    receipt = sender.send(event("resolve"), "2", thread=f"{CHAT}/999")
    assert receipt.message_id == f"{CHAT}/1" and telegram.messages[0]["text"].startswith(
        "RECOVERY")
    assert ("editMessageText", "Bad Request: message to edit not found") in telegram.requests
