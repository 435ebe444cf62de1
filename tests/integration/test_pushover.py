"""The ``pushover`` channel (issue 34): the real deliverer against a local server that speaks
Pushover's messages API as documented (fleetwatch/cli/demo/receivers/pushover.py
``Pushover``: its fields and limits, its ``{"status": 0, "errors": [...]}`` answers, 429
past the monthly limit).

A problem is a priority-1 notification with the console's link, its acknowledgement and
recovery priority -1; the text is plain, its control characters escaped, cut to Pushover's
limits; the request's id is the delivery's message id; a revoked application token fails
the channel at once and neither it nor the user key is in a log line or a recorded
delivery; a 429 is waited out; a group is one notification. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import time

import pytest

from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.cli.demo.receivers.pushover import Pushover  # noqa: E402
from sinks.alerting.delivery.channels import SendError  # noqa: E402
from sinks.alerting.delivery.channeltypes import PushoverChannel  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from sinks.alerting.delivery.services.pushover import PushoverSender  # noqa: E402
from support.delivering import U1, enqueue, fast, recorded, secret_file, sent  # noqa: E402
from support.delivering import check_event as event  # noqa: E402

TOKEN, USER = "azGDORePK8gMaC0QOYAMyEEuzJnyUi", "uQiRzpo4DXghDmr9QzzfQu27cmVRsG"
HOSTILE = "@here <b>bold</b> <a href=\"http://evil.example\">x</a> *md* &amp; \x1b[31m"


@pytest.fixture
def pushover():
    server = Pushover(None, 0, tokens=(TOKEN,), users=(USER,)).start()
    yield server
    server.stop()


@pytest.fixture
def keys(tmp_path) -> dict:
    return {"token_file": secret_file(tmp_path, "pushover-token", TOKEN),
            "user_key_file": secret_file(tmp_path, "pushover-user", USER)}


@pytest.fixture
def deliver(deliverers, keys):
    """``deliver(server, **channel)``: a deliverer thread with one ``pushover`` channel."""
    def start(server: Pushover, **channel) -> DeliveryConfig:
        config = fast({"phone": {"type": "pushover", "api_url": api(server), "timeout": 5,
                                 **keys, **channel}},
                      console_url="https://fleet.example.com/")
        deliverers(config)
        return config
    return start


def api(server: Pushover) -> str:
    return f"{server.url}/1/messages.json"


def test_a_problem_then_its_ack_and_recovery(eng, pushover, deliver):
    config = deliver(pushover)
    enqueue(eng, config, event(text="/ 95% used\n" + "y" * 5000))
    wait_for(lambda: pushover.messages, 20, interval=0.05, what="the notification")
    (m,) = pushover.messages
    assert m["user"] == USER and "token" not in m
    assert m["title"] == "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
    assert m["message"].startswith("Host: web-1\nCheck: check_disk\n"
                                   "State: CRITICAL (exit status 2)\n\n/ 95% used\n")
    assert len(m["message"]) <= 1024 and m["priority"] == 1 and "html" not in m
    assert (m["url"], m["url_title"]) == (f"https://fleet.example.com/hosts/{U1}",
                                          "Open in the console")
    (first,) = wait_for(lambda: sent(eng), 20, interval=0.05, what="its delivery recorded")
    assert (first["status"], first["message_id"]) == ("HTTP 200", m["request"])
    for n, action in enumerate(("acknowledge", "resolve"), start=2):
        enqueue(eng, config, event(action))
        wait_for(lambda: len(pushover.messages) == n, 20, interval=0.05, what=action)
        assert pushover.messages[-1]["priority"] == -1
    assert pushover.messages[1]["title"].startswith("ACKNOWLEDGED web-1/check_disk")
    assert pushover.messages[2]["title"].startswith("RECOVERY web-1/check_disk")


def test_what_an_agent_wrote_arrives_as_plain_text(eng, pushover, deliver):
    config = deliver(pushover)
    enqueue(eng, config, {**event(text=HOSTILE), "hostname": f"web-1 {HOSTILE}",
                          "summary": HOSTILE})
    wait_for(lambda: pushover.messages, 20, interval=0.05, what="the notification")
    (m,) = pushover.messages
    assert "html" not in m and "monospace" not in m        # no markup is read
    assert "<b>bold</b>" in m["message"] and "<b>bold</b>" in m["title"]
    assert "\x1b" not in m["message"] + m["title"] and "\\x1b[31m" in m["message"]
    assert m["url"].startswith("https://fleet.example.com/")    # the only link sent


def test_a_revoked_token_fails_the_channel_at_once_and_no_key_shows(eng, pushover, deliver,
                                                                     caplog):
    caplog.set_level(logging.DEBUG)
    pushover.revoke(TOKEN)
    deliver_config = deliver(pushover)
    enqueue(eng, deliver_config, event())
    (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"],
                         20, interval=0.05, what="the refusal")
    assert failed["status"] == "HTTP 400" and "application token is invalid" in \
        failed["answer"]
    assert pushover.messages == [] and len(pushover.requests) == 1
    from fleetwatch.actions.channels import listed
    (phone,) = wait_for(lambda: [c for c in listed(eng.url.render_as_string(
        hide_password=False)) if c["state"] == "failing"], 20, interval=0.05,
        what="the channel failing")
    assert phone["last_status"] == "HTTP 400"
    for secret in (TOKEN, USER):
        assert not [d for d in recorded(eng) if secret in repr(d)]
        assert not [r for r in caplog.records if secret in r.getMessage()]
        assert secret not in repr(phone)


def test_a_429_is_waited_out(eng, pushover, deliver):
    pushover.limited, pushover.retry_after = 1, 1
    config = deliver(pushover)
    enqueue(eng, config, event())
    retry, posted = wait_for(lambda: recorded(eng) if sent(eng) else None, 20, interval=0.05,
                             what="the notification after the 429")
    assert (retry["outcome"], retry["status"]) == ("retry", "HTTP 429")
    assert "monthly message limit" in retry["answer"]
    assert posted["outcome"] == "sent" and len(pushover.messages) == 1
    started = [time.mktime(time.strptime(d["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
               for d in (retry, posted)]
    assert started[1] - started[0] >= 0.5      # (whole seconds: Retry-After is 1 s)


def test_a_group_is_one_notification_listing_its_alerts(eng, pushover, deliver):
    config = deliver(pushover, group_wait=0.5)
    for n in range(30):
        enqueue(eng, config, {**event(), "key": f"{U1}/check/check_{n:02d}",
                              "check": f"check_{n:02d}", "severity": "warning"})
    wait_for(lambda: len(sent(eng)) == 30, 20, interval=0.05, what="30 alerts recorded")
    (m,) = pushover.messages
    assert m["title"] == "30 alerts: 30 WARNING" and m["priority"] == 0
    lines = m["message"].splitlines()
    assert len(m["message"]) <= 1024 and lines[-1].startswith("... and ")
    assert int(lines[-1].split()[2]) + len(lines) - 1 == 30
    assert {d["message_id"] for d in sent(eng)} == {m["request"]}


def test_what_pushover_refuses_is_sorted_into_retry_and_for_good(pushover, keys):
    """Without the deliverer: each of Pushover's answers as the sender takes it."""
    sender = PushoverSender("phone", PushoverChannel(api_url=api(pushover), timeout=5, **keys))
    pushover.failing = 1
    with pytest.raises(SendError) as e:
        sender.send(event(), "1")
    assert (e.value.permanent, e.value.status) == (False, "HTTP 500")
    pushover.users.clear()
    with pytest.raises(SendError, match="user identifier is not a valid") as e:
        sender.send(event(), "1")
    assert e.value.permanent and USER not in str(e.value)
    wrong = PushoverSender("phone", PushoverChannel(api_url=pushover.url + "/1/nothing.json",
                                                    timeout=5, **keys))
    with pytest.raises(SendError) as e:
        wrong.send(event(), "1")
    assert e.value.permanent and e.value.status == "HTTP 404"
