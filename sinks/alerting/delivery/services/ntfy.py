"""The ``ntfy`` channel: alerts as push notifications through an ntfy server (ntfy.sh or
one's own), published as JSON (ntfy's "publish as JSON": ``POST /`` with ``topic``,
``title``, ``message``, ``priority``, ``tags``, ``actions``), a small documented HTTP call
written here.

A problem is priority 5 (critical) or 4, its acknowledgement and recovery 3 (tags ``eyes``,
``white_check_mark``); with ``alerting.delivery.console_url`` each carries a "view" action,
a button that opens the problem in the console. The text is plain (ntfy renders Markdown
only when asked, and is not asked), control characters shown as escapes, the message cut to
ntfy's 4,096 bytes; a group (``group_wait``) is one notification listing its alerts.
The answer's ``id`` is the receipt's message id. A 401 or 403 (a token refused), a 400 or a
413 refuse the alert for good, which fails the channel; 429 waits for its Retry-After; a
5xx, a time-out or a refused connection is retried.
"""

from __future__ import annotations

import json
import urllib.request

from fleetwatch.display import escape
from sinks.alerting.delivery.channels import (Receipt, _NoRedirect, headline, label,
                                              post_json, read_secret)
from sinks.alerting.delivery.channeltypes import NtfyChannel
from sinks.alerting.delivery.message import of_group

#: ntfy's limit on a message (larger ones become attachments)
MESSAGE_MAX = 4096
PRIORITY = {"critical": 5, "error": 4, "unknown": 4, "warning": 4, "info": 3, "ok": 3,
            "debug": 2}
#: alerts a grouped notification lists
GROUP_LISTED = 20
TAGS = {"trigger": "rotating_light", "acknowledge": "eyes", "resolve": "white_check_mark"}


def publication(event: dict, topic: str) -> dict:
    """What is published for ``event`` (pure)."""
    lines = [escape(line) for line in str(event.get("text") or "").splitlines()
             if line.strip()][:10]
    where = event.get("hostname") or event.get("uuid") or "-"
    parent = [f"Parent: {escape(str(event['parent']))}"] if event.get("parent") else []
    body = "\n".join([f"{label(event)} on {escape(str(where))}"
                      + (f", check {escape(str(event['check']))}" if event.get("check")
                         else ""), *parent, *lines])
    data = body.encode()[:MESSAGE_MAX].decode(errors="ignore")
    action = event.get("action")
    out = {"topic": topic, "title": headline(event, 250), "message": data,
           "priority": 3 if action in ("acknowledge", "resolve")
           else PRIORITY.get(event.get("severity"), 4),
           "tags": [TAGS.get(action, "bell")]}
    if event.get("link"):
        out["actions"] = [{"action": "view", "label": "Open in the console",
                           "url": event["link"], "clear": True}]
    return out


def group_publication(events: list[dict], topic: str, title: str = "",
                      cap: int = GROUP_LISTED) -> dict:
    """One notification for a group of alerts: its title ("12 alerts: 10 DOWN, 2
    CRITICAL"), one line per alert, at most ``cap``, then "... and N more"; the priority of
    its most urgent alert."""
    group = of_group(events, cap, title)
    data = "\n".join(group.lines()).encode()[:MESSAGE_MAX].decode(errors="ignore")
    problems = [e for e in events if e.get("action") not in ("acknowledge", "resolve")]
    out = {"topic": topic, "title": group.title[:250], "message": data,
           "priority": max((PRIORITY.get(e.get("severity"), 4) for e in problems),
                           default=3),
           "tags": ["rotating_light" if problems else "white_check_mark"]}
    links = {m.link for m in group.messages if m.link}
    if len(links) == 1:
        out["actions"] = [{"action": "view", "label": "Open in the console",
                           "url": links.pop(), "clear": True}]
    return out


class NtfySender:
    def __init__(self, name: str, channel: NtfyChannel, opener=None):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        self.opener = opener or urllib.request.build_opener(_NoRedirect)

    def send(self, event: dict, ref: str) -> Receipt:
        return self._publish(publication(event, self.channel.topic))

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """A group of alerts (the channel's ``group_wait``) as one notification."""
        return self._publish(group_publication(events, self.channel.topic, title))

    def _publish(self, data: dict) -> Receipt:
        c = self.channel
        headers = {"Authorization": f"Bearer {read_secret(c.token_file, 'token_file')}"} \
            if c.token_file else {}
        code, answer = post_json(self.opener, c.url.rstrip("/") + "/", data, headers,
                                 c.timeout)
        try:
            found = json.loads(answer)
        except ValueError:
            found = {}
        message_id = found.get("id") if isinstance(found, dict) else None
        return Receipt.of(f"HTTP {code}", message_id if isinstance(message_id, str) else None,
                          answer)
