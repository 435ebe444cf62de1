"""The ``teams`` channel: alerts posted to a Microsoft Teams channel as Adaptive Cards through
a Workflows (Power Automate) webhook ("Post to a channel when a webhook request is
received"), a small documented HTTP call written here.

What is sent (:func:`payload`, :func:`group_payload`, pure): the message envelope the
workflow's template takes, ``{"type": "message", "attachments": [{"contentType":
"application/vnd.microsoft.card.adaptive", "contentUrl": null, "content": CARD}]}``, whose
card (Adaptive Card 1.4, what Teams renders on desktop and mobile alike) has a bold title
coloured by severity (``attention`` for a problem, ``warning``, ``good`` for a recovery,
``accent`` for an acknowledgement), a FactSet of the alert's facts (host, check, state,
since, parent), the output's first lines, and with ``alerting.delivery.console_url`` an
``Action.OpenUrl`` "Open in the console". A group of alerts (``group_wait``) is one card:
its title and one line per alert, "... and N more".

Escaping: TextBlocks and facts render a subset of Markdown, so every field but the link is
Markdown-escaped (:func:`sinks.alerting.delivery.message.markdown`: ``*``, ``_``, ``[``,
``<``, ``@``, ``:`` and the rest backslash-escaped), so that what an agent wrote makes no
link, no emphasis and no list; control characters are shown as escapes. A Teams mention needs
``msteams.entities``, which is never sent: no agent can mention anyone. The payload is kept
under Teams' 28 KB message limit (:data:`PAYLOAD_MAX`).

Answers: the workflow answers 202 Accepted with an empty body: no id for the message (the
receipt has none, and there are no threads). A 401 (``DirectApiAuthorizationRequired``,
``DirectApiInvalidAuthorizationSignature``: the URL's ``sig`` revoked or wrong) or 403, a
404 (``WorkflowNotFound``: the flow was removed), a 400 or a 413 refuse the alert for good,
which fails the channel; 429 waits for its Retry-After; a 5xx, a time-out or a refused
connection is retried. A retired Office 365 connector URL (``*.webhook.office.com``,
``.../IncomingWebhook/...``) is refused before anything is sent, and so is an answer shaped
like one (``1``): Microsoft retired those connectors, and a channel that still points at one
must fail where an operator sees it, not page nobody.

The workflow's URL carries its signature (``sig``): it is read from ``webhook_url_file``
when sending and never shown; errors name its host only.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import replace
from urllib.parse import urlsplit

from sinks.alerting.delivery import message
from sinks.alerting.delivery.channels import (Receipt, SendError, _NoRedirect, post_json,
                                              read_secret)
from sinks.alerting.delivery.channeltypes import TeamsChannel

#: Teams' limit on a message (the envelope and its card), in bytes
PAYLOAD_MAX = 28 * 1024
#: the Adaptive Card version sent (Teams renders up to 1.5 on desktop, 1.4 everywhere)
VERSION = "1.4"
#: alerts a group's card lists one per line; the rest are counted
GROUP_LIST = 30
CARD_TYPE = "application/vnd.microsoft.card.adaptive"
SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
COLOURS = {"critical": "attention", "error": "attention", "unknown": "attention",
           "warning": "warning", "ok": "good", "info": "default", "debug": "default",
           "acknowledge": "accent"}


# ---------------------------------------------------------------- what is sent (pure)

def colour(m: message.Message) -> str:
    """A TextBlock's colour for ``m``: ``good`` for a recovery, ``accent`` for an
    acknowledgement, else by severity."""
    return COLOURS.get(m.tone, "attention")


def text(value: str) -> str:
    """``value`` as a TextBlock shows it literally (Markdown-escaped)."""
    return message.markdown(value)


def _block(value: str, **style) -> dict:
    return {"type": "TextBlock", "text": value, "wrap": True, **style}


def envelope(card: dict) -> dict:
    """The message a Workflows webhook takes: one Adaptive Card attachment."""
    return {"type": "message", "attachments": [
        {"contentType": CARD_TYPE, "contentUrl": None, "content": card}]}


def _card(body: list[dict], link: str | None) -> dict:
    card = {"$schema": SCHEMA, "type": "AdaptiveCard", "version": VERSION, "body": body}
    if link and urlsplit(link).scheme in ("http", "https"):
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open in the console",
                            "url": link}]
    return card


def card(m: message.Message) -> dict:
    """The Adaptive Card of one alert: its title (bold, coloured), its facts, the output's
    first lines (monospace), the console's button."""
    body = [_block(text(m.title), weight="Bolder", size="Medium", color=colour(m)),
            {"type": "FactSet", "facts": [{"title": name, "value": text(value) or "-"}
                                          for name, value in m.facts()]}]
    body += [_block(text(line), fontType="Monospace", spacing="None", isSubtle=True)
             for line in m.output]
    return _card(body, m.link)


def size(payload: dict) -> int:
    """The bytes Teams counts: the JSON as sent (UTF-8)."""
    return len(json.dumps(payload, ensure_ascii=False).encode())


def payload(event: dict) -> dict:
    """What is POSTed for ``event``: its card in the envelope, output lines dropped from
    the end while it is over :data:`PAYLOAD_MAX` (never the case with the message's own
    caps, kept anyway)."""
    m = message.of(event)
    out = envelope(card(m))
    while size(out) > PAYLOAD_MAX and m.output:
        m = replace(m, output=m.output[:-1])
        out = envelope(card(m))
    return out


def group_payload(events: list[dict], title: str = "", cap: int = GROUP_LIST) -> dict:
    """One card for a group of alerts: its title, one line per alert listed, "... and N
    more"; alerts dropped into the count while it is over :data:`PAYLOAD_MAX`."""
    group = message.of_group(events, cap, title)
    shown, more = list(group.messages), group.more
    worst = next((m for m in shown if m.problem), shown[0] if shown else None)
    while True:
        body = [_block(text(group.title), weight="Bolder", size="Medium",
                       color=colour(worst) if worst else "default")]
        body += [_block(text(m.title), spacing="None") for m in shown]
        if more:
            body.append(_block(f"... and {more} more", isSubtle=True))
        out = envelope(_card(body, None))
        if size(out) <= PAYLOAD_MAX or not shown:
            return out
        shown.pop()
        more += 1


def retired(url: str) -> bool:
    """Whether ``url`` is an Office 365 connector's (``https://ORG.webhook.office.com/
    webhookb2/.../IncomingWebhook/...``, ``outlook.office.com/webhook/...``), which
    Microsoft retired: it no longer posts, and may not say so."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    return host.endswith("webhook.office.com") or "/IncomingWebhook/" in parts.path or \
        (host in ("outlook.office.com", "outlook.office365.com")
         and parts.path.startswith("/webhook"))


# ---------------------------------------------------------------- talking to the workflow

class TeamsSender:
    def __init__(self, name: str, channel: TeamsChannel, opener=None):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        self.opener = opener or urllib.request.build_opener(_NoRedirect)

    def send(self, event: dict, ref: str) -> Receipt:
        return self._post(payload(event))

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """One card listing ``events`` (a group, :mod:`sinks.alerting.delivery.grouping`)."""
        return self._post(group_payload(events, title))

    def _post(self, data: dict) -> Receipt:
        url = read_secret(self.channel.webhook_url_file, "webhook_url_file")
        if retired(url):
            raise SendError(f"webhook_url_file holds a retired Office 365 connector's URL "
                            f"({urlsplit(url).hostname}): Teams no longer posts through it; "
                            f"make a Workflows webhook (\"Post to a channel when a webhook "
                            f"request is received\") and put its URL there", permanent=True)
        code, answer = post_json(self.opener, url, data, {}, self.timeout,
                                 secret_url=True)
        if answer.strip() == "1":
            raise SendError(f"HTTP {code} 1: answered as a retired Office 365 connector "
                            f"does, not as a workflow (202, empty): the card was not posted",
                            permanent=True, status=f"HTTP {code}")
        return Receipt.of(f"HTTP {code}", None, answer)

