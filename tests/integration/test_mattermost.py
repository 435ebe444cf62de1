"""The ``mattermost`` channel (issue 34): the real deliverer against a local receiver that
speaks a Mattermost incoming webhook as documented
(fleetwatch/cli/demo/receivers/mattermost.py ``Mattermost``: ``ok``, its AppError bodies,
its text limit, 403 for a locked channel, 429 with Retry-After, and whom a post notifies).

A problem is a post with its facts in a coloured attachment and a link to the console, its
acknowledgement and recovery posts of their own; what an agent wrote notifies no one
(``@channel``, ``@here``, ``@user``), links and formats nothing; a deleted webhook fails the
channel at once and its alerts reach the fallback; a channel the webhook may not post to is
refused; a 429 is waited out; a group is one post; the webhook's URL is never in a log line
or a recorded delivery. On SQLite and PostgreSQL."""

from __future__ import annotations

import logging
import re
import time

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.cli.demo.receivers.mattermost import Mattermost, mentions  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import (U1, enqueue, fast, filled_in, recorded,  # noqa: E402
                                secret_file, sent)
from support.delivering import host_check_event as event  # noqa: E402

HOOK = "q8xk3hook5secret7id9abcdef"
HOSTILE = "@channel @all @here @ops-lead ~town-square #tag **bold** [click](http://evil.example)" \
          " http://evil.example | table |"


@pytest.fixture
def mattermost():
    server = Mattermost(None, 0, hook=HOOK, channel="ops", locked=True).start()
    yield server
    server.stop()


@pytest.fixture
def deliver(deliverers, tmp_path):
    """``deliver(channels, url)``: a deliverer thread with those channels, a ``mattermost``
    one reading the webhook's ``url`` from a file, every check alert routed to the first."""
    def start(channels: dict, url: str = "", **extra) -> DeliveryConfig:
        hook = secret_file(tmp_path, "mattermost-webhook.url", url)
        config = fast(filled_in(channels, "webhook_url_file", "URL", hook), kinds=["check"],
                      **extra)
        deliverers(config)
        return config
    return start


def test_a_problem_its_acknowledgement_and_recovery_as_posts(eng, mattermost, deliver):
    config = deliver({"ops": {"type": "mattermost", "webhook_url_file": "URL", "timeout": 5}},
                     mattermost.webhook_url(), console_url="https://fleet.example.com/")
    enqueue(eng, config, event())
    wait_for(lambda: mattermost.posts, 20, interval=0.05, what="the problem's post")
    post = mattermost.posts[0]
    assert post["channel"] == "ops" and post["mentioned"] == []
    assert post["message"] == (r"**CRITICAL** web\-1 / check\_disk\: DISK CRITICAL \- / 95%"
                               "\n" r"/ 95% used" "\n"
                               f"[Open in the console](https://fleet.example.com/hosts/{U1})")
    (attachment,) = post["attachments"]
    assert attachment["color"] == "#E01E5A"
    assert {f["title"]: f["value"] for f in attachment["fields"]}["Host"] == r"web\-1"
    (first,) = wait_for(lambda: sent(eng), 20, interval=0.05, what="its delivery recorded")
    assert (first["status"], first["message_id"], first["answer"]) == ("HTTP 200", None, "ok")
    for n, action in enumerate(("acknowledge", "resolve"), start=2):
        enqueue(eng, config, event(action))
        wait_for(lambda: len(mattermost.posts) == n, 20, interval=0.05,
                 what=f"the {action}")
    assert mattermost.posts[1]["message"].startswith("**ACKNOWLEDGED**")
    assert mattermost.posts[2]["message"].startswith("**RECOVERY**")
    assert mattermost.posts[2]["attachments"][0]["color"] == "#2EB67D"
    assert mattermost.requests == [200, 200, 200]


def test_what_an_agent_wrote_notifies_links_and_formats_nothing(eng, mattermost, deliver):
    config = deliver({"ops": {"type": "mattermost", "webhook_url_file": "URL", "timeout": 5}},
                     mattermost.webhook_url())
    hostile = {**event(text=f"{HOSTILE}\x1b[31m\n" + "y" * 20000), "hostname": HOSTILE,
               "check": HOSTILE, "summary": HOSTILE}
    enqueue(eng, config, hostile)
    wait_for(lambda: mattermost.posts, 20, interval=0.05, what="the post")
    (post,) = mattermost.posts                       # within the text limit: not split
    assert post["mentioned"] == []
    said = [post["message"].removeprefix("**CRITICAL** "),
            *(f["value"] for f in post["attachments"][0]["fields"])]
    for s in said:
        assert "\x1b" not in s and "http://" not in s
        assert not re.search(r"(?<!\\)[<>\[\]()*_@|#~`:]", s), s
    assert "\\@\u2060channel" in post["message"] and "\\~\u2060town" in post["message"]
    # the receiver's own check: backslashes alone would still notify the whole channel
    assert mentions([r"\@channel \@ops-lead"], ("ops-lead",)) == ["@channel", "@ops-lead"]


def test_a_deleted_webhook_fails_the_channel_and_its_alerts_reach_the_fallback(
        eng, mattermost, deliver, caplog):
    caplog.set_level(logging.INFO)
    backup = HttpReceiver().start()
    try:
        mattermost.remove()
        config = deliver({"ops": {"type": "mattermost", "webhook_url_file": "URL",
                                  "timeout": 5, "fallback": "pager"},
                          "pager": {"type": "webhook", "url": backup.url, "timeout": 2}},
                         mattermost.webhook_url())
        enqueue(eng, config, event())
        wait_for(lambda: len(backup.posts) >= 2, 20, interval=0.05,
                 what="the failure and the alert at the fallback")
        assert {p["dedup_key"] for p in backup.posts} == {"channel/ops",
                                                          f"{U1}/check/check_disk/web-1"}
        (failed,) = [d for d in recorded(eng) if d["channel"] == "ops"]
        assert (failed["outcome"], failed["status"]) == ("failed", "HTTP 400")
        assert "web.incoming_webhook.invalid.app_error" in failed["answer"]
        assert mattermost.requests == [400] and mattermost.posts == []
        for said in (caplog.text, str(recorded(eng)), str(backup.posts)):
            assert HOOK not in said
    finally:
        backup.stop()


def test_a_channel_the_webhook_may_not_post_to_is_refused(eng, mattermost, deliver):
    config = deliver({"ops": {"type": "mattermost", "webhook_url_file": "URL", "timeout": 5,
                              "channel": "town-square"}}, mattermost.webhook_url())
    enqueue(eng, config, event())
    (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"], 20,
                         interval=0.05, what="the refusal")
    assert failed["status"] == "HTTP 403" and "channel_locked" in failed["answer"]


def test_a_429_is_waited_out_and_a_5xx_retried(eng, mattermost, deliver):
    mattermost.limited, mattermost.retry_after, mattermost.failing = 1, 1, 1
    config = deliver({"ops": {"type": "mattermost", "webhook_url_file": "URL", "timeout": 5}},
                     mattermost.webhook_url())
    enqueue(eng, config, event())
    tries = wait_for(lambda: (lambda r: r if r and r[-1]["outcome"] == "sent" else None)(
        recorded(eng)), 20, interval=0.05, what="the post after the 429 and 503")
    assert [(d["outcome"], d["status"]) for d in tries] == \
        [("retry", "HTTP 429"), ("retry", "HTTP 503"), ("sent", "HTTP 200")]
    started = [time.mktime(time.strptime(d["started_at"][:19], "%Y-%m-%dT%H:%M:%S"))
               for d in tries[:2]]
    assert started[1] - started[0] >= 0.5            # (whole seconds: Retry-After is 1 s)
    assert len(mattermost.posts) == 1


def test_a_group_is_one_post_listing_its_alerts(eng, mattermost, deliver):
    config = deliver({"ops": {"type": "mattermost", "webhook_url_file": "URL", "timeout": 5,
                              "group_wait": 0.5}}, mattermost.webhook_url())
    enqueue(eng, config, *(event(host=f"web-{i}") for i in range(3)))
    wait_for(lambda: len(sent(eng)) == 3, 20, interval=0.05, what="the group's deliveries")
    (post,) = mattermost.posts
    title, *lines = post["message"].split("\n")
    assert title.startswith("**3 alerts") and post["mentioned"] == []
    assert sorted(lines) == [rf"CRITICAL web\-{i}/check\_disk\: DISK CRITICAL \- / 95%"
                             for i in range(3)]
