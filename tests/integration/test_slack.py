"""The ``slack`` channel (issue 34): the real deliverer and slack-sdk's own client against a
local receiver that speaks Slack's Web API and incoming webhooks as documented
(fleetwatch/cli/demo/receivers.py ``Slack``: its errors, its limits, 429 with Retry-After).

A problem is posted; its acknowledgement and its recovery are posted in its thread and its
message updated; what an agent wrote mentions nobody, links nothing, formats nothing; a
revoked token fails the channel at once and its alerts reach the fallback; a 429 is waited
out; the incoming-webhook form posts one message per alert. On SQLite and PostgreSQL."""

from __future__ import annotations

import re
import time

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytest.importorskip("slack_sdk")
pytestmark = pytest.mark.timeout(90)

from fleetwatch.cli.demo.receivers import Slack  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import (U1, enqueue, fast, filled_in, recorded,  # noqa: E402
                                secret_file, sent)
from support.delivering import check_event as event  # noqa: E402

TOKEN = "xoxb-test-token"
HOSTILE = "<!here> <@U0123> <http://evil.example|click> http://evil.example ```x``` *b* &amp;"


@pytest.fixture
def slack():
    server = Slack(None, 0, tokens=(TOKEN,)).start()
    yield server
    server.stop()


@pytest.fixture
def deliver(deliverers, tmp_path):
    """``deliver(channels)``: a deliverer thread with those channels (a ``slack`` one
    reading its token from a file), every alert routed to the first."""
    def start(channels: dict, **extra) -> DeliveryConfig:
        token = secret_file(tmp_path, "slack-token", TOKEN)
        config = fast(filled_in(channels, "token_file", "TOKEN", token), kinds=["check"],
                      **extra)
        deliverers(config)
        return config
    return start


def test_a_problem_then_its_ack_and_recovery_in_its_thread(eng, slack, deliver):
    config = deliver({"ops": {"type": "slack", "token_file": "TOKEN", "channel": "#ops",
                              "api_url": slack.api_url, "timeout": 5}})
    enqueue(eng, config, event())
    wait_for(lambda: len(slack.messages) == 1, 20, interval=0.05, what="the problem posted")
    problem = slack.messages[0]
    assert problem["channel"].startswith("C") and problem["thread_ts"] is None
    wait_for(lambda: sent(eng), 20, interval=0.05, what="its delivery recorded")
    assert problem["text"] == ("*CRITICAL* `web-1` / `check_disk`: `DISK CRITICAL - / 95%`"
                               "\n```/ 95% used```")
    assert problem["unfurl_links"] is False
    (first,) = sent(eng)
    assert first["message_id"] == f"{problem['channel']}/{problem['ts']}"
    assert first["status"] == "HTTP 200"
    for n, action in enumerate(("acknowledge", "resolve"), start=2):
        enqueue(eng, config, event(action))
        wait_for(lambda: len(slack.messages) == n and len(problem["updates"]) == n - 1, 20,
                 interval=0.05, what=f"the {action} in the thread")
        follow = slack.messages[-1]
        assert follow["thread_ts"] == problem["ts"] and follow["channel"] == problem["channel"]
        assert problem["updates"][-1]["text"].startswith("~")
        assert ("ACKNOWLEDGED" if action == "acknowledge" else "RESOLVED") in \
            problem["updates"][-1]["text"]
    assert slack.messages[1]["text"].startswith("*ACKNOWLEDGED*")
    assert slack.messages[2]["text"].startswith("*RECOVERY*")
    assert [m for m, e in slack.requests if e != "ok"] == []


def test_a_message_links_to_the_host_in_the_console(eng, slack, deliver):
    config = deliver({"ops": {"type": "slack", "token_file": "TOKEN", "channel": "#ops",
                              "api_url": slack.api_url, "timeout": 5}},
                     console_url="https://fleet.example.com/")
    enqueue(eng, config, event())
    wait_for(lambda: slack.messages, 20, interval=0.05, what="the message")
    assert slack.messages[0]["text"].endswith(
        f"\n<https://fleet.example.com/hosts/{U1}|Open in the console>")


def test_what_an_agent_wrote_mentions_links_and_formats_nothing(eng, slack, deliver):
    config = deliver({"ops": {"type": "slack", "token_file": "TOKEN", "channel": "C0TEST",
                              "api_url": slack.api_url, "timeout": 5}})
    hostile = {**event(text=f"{HOSTILE}\n" + "y" * 9000), "hostname": f"web`1 {HOSTILE}",
               "summary": HOSTILE}
    enqueue(eng, config, hostile)
    wait_for(lambda: slack.messages, 20, interval=0.05, what="the message")
    m = slack.messages[0]
    section = m["blocks"][0]["text"]["text"]
    for said in (m["text"], section):
        assert "<" not in said and ">" not in said          # no <!here>, <@U..>, <url|..>
        assert "&lt;!here&gt;" in said and "&amp;amp;" in said
        outside = re.sub(r"`[^`]*`", "", "".join(said.split("```")[0::2]))
        assert "evil.example" not in outside, outside      # only in code: never a link
    assert len(section) <= 3000 and m["unfurl_links"] is False
    # the hostname's backtick cannot end its code span: the span holds it all
    assert "`web\u02cb1 &lt;!here&gt;" in section


def test_a_revoked_token_fails_the_channel_and_its_alerts_reach_the_fallback(eng, slack,
                                                                              deliver):
    backup = HttpReceiver().start()
    try:
        slack.revoke(TOKEN)
        config = deliver({"ops": {"type": "slack", "token_file": "TOKEN", "channel": "#ops",
                                  "api_url": slack.api_url, "timeout": 5,
                                  "fallback": "pager"},
                          "pager": {"type": "webhook", "url": backup.url, "timeout": 2}})
        enqueue(eng, config, event())
        wait_for(lambda: len(backup.posts) >= 2, 20, interval=0.05,
                 what="the failure and the alert at the fallback")
        assert {p["dedup_key"] for p in backup.posts} == {"channel/ops",
                                                          f"{U1}/check/check_disk"}
        (told,) = [p for p in backup.posts if p["dedup_key"] == "channel/ops"]
        assert "token_revoked" in told["payload"]["summary"]
        assert ("chat.postMessage", "token_revoked") in slack.requests
        assert len([r for r in slack.requests if r[0] == "chat.postMessage"]) == 1
    finally:
        backup.stop()


def test_a_429_is_waited_out_for_its_retry_after(eng, slack, deliver):
    slack.limited, slack.retry_after = 1, 1
    config = deliver({"ops": {"type": "slack", "token_file": "TOKEN", "channel": "#ops",
                              "api_url": slack.api_url, "timeout": 5}})
    enqueue(eng, config, event())
    retry, posted = wait_for(lambda: recorded(eng) if sent(eng) else None, 20, interval=0.05,
                             what="the message after the 429")
    assert (retry["outcome"], retry["status"]) == ("retry", "HTTP 429")
    assert posted["outcome"] == "sent"
    started = [time.mktime(time.strptime(d["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
               for d in (retry, posted)]
    assert started[1] - started[0] >= 0.5            # (whole seconds: Retry-After is 1 s)


def test_an_incoming_webhook_posts_each_alert_and_a_revoked_one_is_refused(eng, slack,
                                                                           deliver, tmp_path):
    hook = secret_file(tmp_path, "slack-webhook", slack.webhook_url())
    config = deliver({"ops": {"type": "slack", "webhook_url_file": hook, "timeout": 2}})
    enqueue(eng, config, event())
    wait_for(lambda: slack.messages, 20, interval=0.05, what="the webhook's message")
    (m,) = slack.messages
    assert m["text"].startswith("*CRITICAL*") and m["ts"] is None
    (first,) = wait_for(lambda: sent(eng), 20, interval=0.05, what="its delivery recorded")
    assert (first["status"], first["answer"]) == ("HTTP 200", "ok")
    slack.revoke("/services/T0001/B0001/demo")
    enqueue(eng, config, event("resolve"))
    wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"], 20,
             interval=0.05, what="the revoked webhook's refusal")
    (failed,) = [d for d in recorded(eng) if d["outcome"] == "failed"]
    assert failed["status"] == "HTTP 404" and "no_service" in failed["answer"]


def test_a_group_of_alerts_is_one_message_and_their_follow_ups_are_not_its_thread(
        eng, slack, deliver):
    """25 alerts within the channel's group_wait: one message listing 20 of them and
    "... and 5 more"; a recovery of one of them goes out on its own, never marking the
    group's message."""
    config = deliver({"ops": {"type": "slack", "token_file": "TOKEN", "channel": "#ops",
                              "api_url": slack.api_url, "group_wait": 0.3}})
    enqueue(eng, config, *({**event(), "key": f"{U1}/check/check_{i:02d}",
                            "check": f"check_{i:02d}", "hostname": f"<!here>web-{i}"}
                           for i in range(25)))
    (posted,) = wait_for(lambda: slack.messages, 20, interval=0.05, what="the group")
    lines = posted["text"].splitlines()
    assert lines[0] == "*25 alerts: 25 CRITICAL*"
    assert len(lines) == 22 and lines[-1] == "... and 5 more"
    assert "<!here>" not in posted["text"] and "&lt;!here&gt;web-0" in posted["text"]
    wait_for(lambda: len(sent(eng)) == 25, 20, interval=0.05, what="25 deliveries")
    assert {d["grouped"] for d in sent(eng)} == {25}
    enqueue(eng, config, {**event("resolve"), "key": f"{U1}/check/check_03",
                          "check": "check_03"})
    wait_for(lambda: len(slack.messages) == 2, 20, interval=0.05, what="the recovery")
    assert slack.messages[1]["thread_ts"] is None and posted["updates"] == []
