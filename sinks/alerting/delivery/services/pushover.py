"""The ``pushover`` channel: alerts as push notifications through Pushover's messages API
(``POST https://api.pushover.net/1/messages.json`` with ``token``, ``user``, ``title``,
``message``, ``priority``, ``url``, ``url_title``, ``timestamp``), a small documented HTTP
call written here, sent as JSON.

What is sent is built here and pure (:func:`notification`, :func:`group_notification`):
the title is the alert's headline, the message its host, check, state, since when, parent
and the output's first lines, in plain text (no ``html``: nothing an agent wrote is markup),
control characters shown as escapes. Pushover's limits are kept: a title of at most 250
characters, a message of 1,024 (the output cut to fit), the console's link (``url``) at
most 512 (a longer one is left out) with its title "Open in the console". A group of alerts
(``group_wait``) is one notification listing them ("... and N more").

Priorities: a critical problem is 1 (high: it sounds through the user's quiet hours),
other problems 0, an acknowledgement, a recovery or an informational alert -1 (quiet).
Pushover's emergency priority (2, repeated until someone acknowledges it in Pushover) is
not used: fleetwatch has its own acknowledgements, which Pushover's would not reach.
Pushover has no threads: each alert is a notification of its own.

Answers: ``{"status": 1, "request": "UUID"}`` is sent, the request's id the receipt's
``message_id``; a 4xx (``{"status": 0, "errors": ["application token is invalid"]}``, an
invalid user key, a message Pushover cannot take) refuses the alert for good, which fails
the channel; 429 (the application's monthly limit reached) is retried after its
``Retry-After`` if it gives one, else the channel's backoff, until the alert's ``max_age``;
a 5xx, a time-out or a refused connection is retried. The application token and the user
key are read from their files when sending; they travel in the request's body, never in a
URL, a log line or an error.
"""

from __future__ import annotations

import json
import urllib.request

from sinks.alerting.delivery import message as messages
from sinks.alerting.delivery.channels import (Receipt, SendError, _NoRedirect, post_json,
                                              read_secret)
from sinks.alerting.delivery.channeltypes import PushoverChannel

#: Pushover's limits: a message, a title, a supplementary URL and its title (characters)
MESSAGE_MAX, TITLE_MAX, URL_MAX, URL_TITLE_MAX = 1024, 250, 512, 100
#: a problem's priority by severity (acknowledgements and recoveries: -1)
PRIORITY = {"critical": 1, "error": 0, "unknown": 0, "warning": 0, "info": -1, "ok": -1,
            "debug": -1}
#: alerts a group's notification lists at most (the rest counted)
GROUP_LIST = 20


# ---------------------------------------------------------------- what is sent (pure)

def priority(m: messages.Message) -> int:
    """A problem's priority by its severity; -1 for an acknowledgement or a recovery."""
    return PRIORITY.get(m.severity, 0) if m.problem else -1


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _link(link: str | None) -> dict:
    url = link or ""
    if not url.startswith(("http://", "https://")) or len(url) > URL_MAX:
        return {}
    return {"url": url, "url_title": "Open in the console"}


def notification(m: messages.Message, created=None) -> dict:
    """What Pushover gets for one alert (without the token and the user key): ``title``,
    ``message`` (plain text), ``priority``, ``timestamp`` (when the alert was raised) and
    the console's link."""
    lines = [f"{name}: {value}" for name, value in m.facts()]
    if m.output:
        lines += ["", *m.output]
    out = {"title": _cut(m.title, TITLE_MAX), "message": _cut("\n".join(lines), MESSAGE_MAX),
           "priority": priority(m), **_link(m.link)}
    if isinstance(created, (int, float)) and created > 0:
        out["timestamp"] = int(created)
    return out


def group_notification(group: messages.Group, link: str | None = None,
                       level: int = 0) -> dict:
    """What Pushover gets for a group: its title, one line per alert (as many as fit in
    :data:`MESSAGE_MAX`; the rest counted), priority ``level``."""
    titles = [_cut(m.title, MESSAGE_MAX // 2) for m in group.messages]
    more = group.more
    while True:
        lines = titles + ([f"... and {more} more"] if more else [])
        if len("\n".join(lines)) <= MESSAGE_MAX or not titles:
            break
        titles.pop()
        more += 1
    return {"title": _cut(group.title, TITLE_MAX),
            "message": _cut("\n".join(lines), MESSAGE_MAX), "priority": level,
            **_link(link)}


def _secret(path: str, what: str) -> str:
    value = read_secret(path, what)
    if not value or any(c.isspace() or not c.isprintable() for c in value):
        raise SendError(f"{what} {path}: expected one word, Pushover's key", permanent=True)
    return value


# ---------------------------------------------------------------- talking to Pushover

class PushoverSender:
    def __init__(self, name: str, channel: PushoverChannel, opener=None):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        self.opener = opener or urllib.request.build_opener(_NoRedirect)

    def send(self, event: dict, ref: str) -> Receipt:
        return self._post(notification(messages.of(event), event.get("created")))

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """One notification listing ``events`` (a group,
        :mod:`sinks.alerting.delivery.grouping`), at the highest priority among them."""
        group = messages.of_group(events, GROUP_LIST, title)
        links = {e.get("link") for e in events}
        level = max(priority(messages.of(e)) for e in events)
        return self._post(group_notification(group, links.pop() if len(links) == 1
                                             else None, level))

    def _post(self, body: dict) -> Receipt:
        c = self.channel
        request = {"token": _secret(c.token_file, "token_file"),
                   "user": _secret(c.user_key_file, "user_key_file"), **body}
        code, answer = post_json(self.opener, c.api_url, request, {}, c.timeout)
        try:
            found = json.loads(answer)
        except ValueError:
            found = None
        if not isinstance(found, dict) or found.get("status") != 1:
            raise SendError(f"HTTP {code}: not Pushover's answer (api_url?): {answer[:200]}",
                            permanent=True, status=f"HTTP {code}")
        request_id = found.get("request")
        return Receipt.of(f"HTTP {code}", request_id if isinstance(request_id, str) else None,
                          answer)
