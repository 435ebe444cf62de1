"""The ``mattermost`` channel: alerts posted to a Mattermost channel through an incoming
webhook (``POST https://mattermost.example.com/hooks/ID``), a small documented HTTP call
written here.

What is sent (:func:`payload`, :func:`group_payload`, pure): ``text``, in Mattermost's
Markdown: ``**CRITICAL** web-1 / check_disk: DISK CRITICAL - / 95%``, the output's first
lines below it, and with ``alerting.delivery.console_url`` an "Open in the console" link;
and one Slack-compatible attachment, coloured by severity, whose fields are the alert's
facts (host, check, state, since, parent). ``channel`` is sent when the channel's config
names one (the webhook must be allowed to post there). A group of alerts (``group_wait``) is
one post: its title and one line per alert, "... and N more".

Escaping: every field but the link is Markdown-escaped
(:func:`sinks.alerting.delivery.message.markdown`: ``*``, ``_``, ``~``, ``#``, ``[``,
``<``, ``@``, ``:`` and the rest backslash-escaped), so what an agent wrote makes no link,
emphasis, heading or table; and since Mattermost finds mentions in the text *after* Markdown
(``\\@channel`` still notifies the channel), a word joiner (U+2060, invisible) follows every
``@``, ``~`` and ``#``: ``@channel``, ``@all``, ``@here``, ``@someone``, ``~town-square`` and
``#tag`` show as written and notify or link nothing. Control characters are shown as escapes.
The text is kept within Mattermost's 16,383 characters (``MaxPostSize``; past it Mattermost
would split the post in several).

Answers: Mattermost answers 200 with the text ``ok`` and no id for the post (the receipt has
none, and there are no threads). A 400 (``web.incoming_webhook.invalid.app_error``: the
webhook was deleted, or ``parse``/``text``: a payload refused), a 401, a 403
(``channel_locked``: the webhook may not post to ``channel``), a 404 (the channel is gone)
or a 413 refuse the alert for good, which fails the channel; 429 waits for its Retry-After;
a 5xx, a time-out or a refused connection is retried. The webhook's URL is its secret (its
path is the hook's id): it is read from ``webhook_url_file`` when sending and never shown;
errors name its host only.
"""

from __future__ import annotations

import urllib.request
from urllib.parse import urlsplit

from sinks.alerting.delivery import message
from sinks.alerting.delivery.channels import (Receipt, _NoRedirect, post_json, read_secret)
from sinks.alerting.delivery.channeltypes import MattermostChannel

#: Mattermost's limit on a post's text (runes; longer ones are split in several posts)
TEXT_MAX = 16383
#: alerts a group's post lists one per line; the rest are counted
GROUP_LIST = 50
COLOURS = {"critical": "#E01E5A", "error": "#E01E5A", "unknown": "#E01E5A",
           "warning": "#ECB22E", "ok": "#2EB67D", "info": "#1D9BD1", "debug": "#1D9BD1",
           "acknowledge": "#1D9BD1"}
#: follows each character that would start a mention, a channel link or a hashtag
JOINER = "\u2060"


# ---------------------------------------------------------------- what is sent (pure)

def text(value: str) -> str:
    """``value`` as Mattermost shows it literally and notifies no one of: Markdown-escaped,
    a word joiner after each ``@``, ``~`` and ``#``."""
    escaped = message.markdown(value)
    for c in "@~#":
        escaped = escaped.replace(c, c + JOINER)
    return escaped


def colour(m: message.Message) -> str:
    return COLOURS.get(m.tone, COLOURS["critical"])


def _link(link: str | None) -> str:
    """The console's link line (its address is the operator's config, never an agent's),
    where Markdown takes it: an http(s) URL without parentheses, angle brackets or spaces."""
    if not link or urlsplit(link).scheme not in ("http", "https") or \
            any(c in link for c in "()<> \n"):
        return ""
    return f"\n[Open in the console]({link})"


def _text(m: message.Message, output: tuple[str, ...]) -> str:
    first = f"**{text(m.label)}** " + text(m.host + (f" / {m.check}" if m.check else "") +
                                          (f": {m.summary}" if m.summary else ""))
    return "\n".join([first, *(text(line) for line in output)]) + _link(m.link)


def payload(event: dict, channel: str = "") -> dict:
    """What is POSTed for ``event`` (to ``channel``, when not the webhook's own)."""
    m = message.of(event)
    output = m.output
    body = _text(m, output)
    while len(body) > TEXT_MAX and output:        # (never with the message's own caps)
        output = output[:-1]
        body = _text(m, output)
    out = {"text": body[:TEXT_MAX],
           "attachments": [{"fallback": m.title, "color": colour(m),
                            "fields": [{"title": name, "value": text(value) or "-",
                                        "short": True} for name, value in m.facts()]}]}
    if channel:
        out["channel"] = channel
    return out


def group_payload(events: list[dict], title: str = "", channel: str = "",
                  cap: int = GROUP_LIST) -> dict:
    """One post for a group of alerts: its title, one line per alert listed, "... and N
    more"; lines dropped into the count while the text is over :data:`TEXT_MAX`."""
    group = message.of_group(events, cap, title)
    shown, more = list(group.messages), group.more
    while True:
        lines = [f"**{text(group.title)}**", *(text(m.title) for m in shown)]
        if more:
            lines.append(f"... and {more} more")
        body = "\n".join(lines)
        if len(body) <= TEXT_MAX or not shown:
            break
        shown.pop()
        more += 1
    out = {"text": body[:TEXT_MAX]}
    if channel:
        out["channel"] = channel
    return out


# ---------------------------------------------------------------- talking to Mattermost

class MattermostSender:
    def __init__(self, name: str, channel: MattermostChannel, opener=None):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        self.opener = opener or urllib.request.build_opener(_NoRedirect)

    def send(self, event: dict, ref: str) -> Receipt:
        return self._post(payload(event, self.channel.channel))

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """One post listing ``events`` (a group, :mod:`sinks.alerting.delivery.grouping`)."""
        return self._post(group_payload(events, title, self.channel.channel))

    def _post(self, data: dict) -> Receipt:
        url = read_secret(self.channel.webhook_url_file, "webhook_url_file")
        code, answer = post_json(self.opener, url, data, {}, self.timeout,
                                 secret_url=True)
        return Receipt.of(f"HTTP {code}", None, answer)

