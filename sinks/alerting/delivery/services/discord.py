"""The ``discord`` channel: alerts posted to a Discord channel through a webhook (Discord's
"Execute Webhook", ``POST WEBHOOK_URL?wait=true``), a small documented HTTP call written
here.

What is sent (:func:`payload`, :func:`group_payload`, pure): ``content``, the line a
notification shows (``**CRITICAL** web-1 / check_disk``), and one embed: the alert's title,
its summary and output's first lines, its facts as inline fields (host, check, state, since,
parent), a colour by severity, the time, and with ``alerting.delivery.console_url`` the
console's page as the title's link and an "Open in the console" line. A group of alerts
(``group_wait``) is one message: its title and one line per alert, "... and N more".
``allowed_mentions`` is always ``{"parse": []}``: whatever the text says, Discord pings no
one.

Escaping: every field but the link is Markdown-escaped
(:func:`sinks.alerting.delivery.message.markdown`: ``*``, ``_``, ``~``, ``|``, ``#``,
``[``, ``<``, ``@``, ``:`` and the rest backslash-escaped), so that what an agent wrote
shows as written: no ``@everyone``, ``<@id>`` or ``<#channel>``, no masked or bare link
(``http\\://`` is not one), no heading or spoiler; control characters are shown as escapes.
Discord's limits are kept: content 2,000 characters; an embed's title 256, description
4,096, 25 fields of name 256 and value 1,024, and 6,000 in all (a cut never leaves half an
escape).

Follow-ups (``threads``): the deliverer hands an acknowledgement or a recovery the id of its
problem's message (``thread``); the follow-up is a new message (a webhook cannot reply), and
the problem's message is edited (``PATCH WEBHOOK_URL/messages/ID``) to read struck through,
"ACKNOWLEDGED" or "RESOLVED". That edit is logged when refused, never retried: the
follow-up was posted, and retrying would post it twice.

Answers: with ``wait=true`` Discord answers 200 with the message, whose ``id`` is the
receipt's message id. A 401 (``50027`` Invalid Webhook Token), a 404 (``10015`` Unknown
Webhook: it was deleted), a 400 (``50035`` Invalid Form Body) or a 403 refuse the alert for
good, which fails the channel; 429 waits for its Retry-After; a 5xx, a time-out or a refused
connection is retried. The webhook's URL carries its token in its path: it is read from
``webhook_url_file`` when sending and never shown; errors name its host only.
"""

from __future__ import annotations

import http.client
import json
import logging
import urllib.error
import urllib.request
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from fleetwatch import __version__
from fleetwatch.display import iso
from sinks.alerting.delivery import message
from sinks.alerting.delivery.channels import (Receipt, _NoRedirect, post_json, read_secret)
from sinks.alerting.delivery.channeltypes import DiscordChannel

log = logging.getLogger(__name__)

#: Discord's limits: a message's content; an embed's title, description, fields, a field's
#: name and value, and all its text together
CONTENT_MAX, TITLE_MAX, DESCRIPTION_MAX = 2000, 256, 4096
FIELDS_MAX, NAME_MAX, VALUE_MAX, EMBED_MAX = 25, 256, 1024, 6000
#: alerts a group's message lists one per line; the rest are counted
GROUP_LIST = 30
COLOURS = {"critical": 0xE01E5A, "error": 0xE01E5A, "unknown": 0xE01E5A,
           "warning": 0xECB22E, "ok": 0x2EB67D, "info": 0x1D9BD1, "debug": 0x1D9BD1,
           "acknowledge": 0x1D9BD1}
#: what an action does to the problem's message
DONE = {"acknowledge": "ACKNOWLEDGED", "resolve": "RESOLVED"}
#: no mention ever notifies anyone, whatever the text holds
NO_MENTIONS = {"parse": []}


# ---------------------------------------------------------------- what is sent (pure)

def text(value: str, limit: int) -> str:
    """``value`` Markdown-escaped and cut to ``limit`` characters, never through an escape
    (a lone trailing backslash would escape what follows)."""
    return cut(message.markdown(value), limit)


def cut(escaped: str, limit: int) -> str:
    """``escaped`` (already escaped) at most ``limit`` characters, without half an escape."""
    if len(escaped) <= limit:
        return escaped
    out = escaped[:limit]
    trailing = len(out) - len(out.rstrip("\\"))
    return out[:-1] if trailing % 2 else out


def colour(m: message.Message) -> int:
    return COLOURS.get(m.tone, COLOURS["critical"])


def _where(m: message.Message) -> str:
    """``web-1 / check_disk`` (escaped)."""
    return message.markdown(m.host) + (f" / {message.markdown(m.check)}" if m.check else "")


def embed_size(embed: dict) -> int:
    """The characters Discord counts against an embed's 6,000: title, description, field
    names and values, footer and author."""
    return sum(len(embed.get(k) or "") for k in ("title", "description")) + \
        sum(len(f["name"]) + len(f["value"]) for f in embed.get("fields", ())) + \
        len((embed.get("footer") or {}).get("text") or "") + \
        len((embed.get("author") or {}).get("name") or "")


def _safe_link(link: str | None) -> str | None:
    """The console's link where Discord takes it (an http(s) URL), for the title and the
    line (a Markdown link's target: no parenthesis, angle bracket or space in it)."""
    if not link or urlsplit(link).scheme not in ("http", "https") or \
            any(c in link for c in "()<> \n"):
        return None
    return link


def embed(m: message.Message) -> dict:
    """The embed of one alert, within Discord's limits: the description gets what the
    title and fields leave of the 6,000, the console's line kept whole."""
    link = _safe_link(m.link)
    out = {"title": text(m.title, TITLE_MAX), "color": colour(m),
           "fields": [{"name": text(name, NAME_MAX), "value": text(value, VALUE_MAX) or "-",
                       "inline": True} for name, value in m.facts()[:FIELDS_MAX]]}
    tail = f"\n[Open in the console]({link})" if link else ""
    room = min(DESCRIPTION_MAX, EMBED_MAX - embed_size(out)) - len(tail)
    lines = [text(m.summary, 1024)] if m.summary else []
    lines += [text(line, 1024) for line in m.output]
    description = (cut("\n".join(lines), max(0, room)) + tail).strip("\n")
    if description:
        out["description"] = description
    if link:
        out["url"] = link
    return out


def headline(m: message.Message, done: str | None = None) -> str:
    """The message's content: ``**CRITICAL** web-1 / check_disk``, or once its problem was
    acknowledged or resolved, ``~~CRITICAL web-1 / check_disk~~ **RESOLVED**``."""
    if done:
        return cut(f"~~{_where(m)}~~ **{done}**", CONTENT_MAX)
    return cut(f"**{message.markdown(m.label)}** {_where(m)}", CONTENT_MAX)


def payload(event: dict) -> dict:
    """What is POSTed for ``event``."""
    m = message.of(event)
    out = {"content": headline(m), "embeds": [embed(m)], "allowed_mentions": NO_MENTIONS}
    if isinstance(event.get("created"), (int, float)):
        out["embeds"][0]["timestamp"] = iso(event["created"])
    return out


def edit(event: dict) -> dict:
    """The problem's message once ``event`` (its acknowledgement or recovery) was posted:
    its content struck and marked; its embed left as it was."""
    return {"content": headline(message.of(event), DONE[event["action"]]),
            "allowed_mentions": NO_MENTIONS}


def group_payload(events: list[dict], title: str = "", cap: int = GROUP_LIST) -> dict:
    """One message for a group of alerts: the title as content, one line per alert listed
    in the embed's description, "... and N more"; lines dropped into the count while the
    description is over 4,096 characters."""
    group = message.of_group(events, cap, title)
    shown, more = list(group.messages), group.more
    worst = next((m for m in shown if m.problem), shown[0] if shown else None)
    while True:
        lines = [text(m.title, 300) for m in shown] + ([f"... and {more} more"] if more else [])
        description = "\n".join(lines)
        if len(description) <= DESCRIPTION_MAX or not shown:
            break
        shown.pop()
        more += 1
    return {"content": text(group.title, CONTENT_MAX),
            "embeds": [{"title": text(group.title, TITLE_MAX),
                        "description": cut(description, DESCRIPTION_MAX) or "-",
                        "color": colour(worst) if worst else COLOURS["info"]}],
            "allowed_mentions": NO_MENTIONS}


def execute_url(url: str) -> str:
    """The webhook's URL with ``wait=true`` (Discord then answers with the message), its
    other parameters (``thread_id``) kept."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "wait"] + [("wait", "true")]
    return urlunsplit(parts._replace(query=urlencode(query)))


def message_url(url: str, message_id: str) -> str:
    """``WEBHOOK_URL/messages/ID`` (its ``thread_id`` kept), where a message is edited."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k == "thread_id"]
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + f"/messages/{message_id}",
                                     query=urlencode(query)))


# ---------------------------------------------------------------- talking to Discord

class DiscordSender:
    #: the deliverer hands a follow-up the message id of its problem (``thread``)
    threads = True

    def __init__(self, name: str, channel: DiscordChannel, opener=None):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        self.opener = opener or urllib.request.build_opener(_NoRedirect)

    def send(self, event: dict, ref: str, thread: str | None = None) -> Receipt:
        url = read_secret(self.channel.webhook_url_file, "webhook_url_file")
        receipt = self._post(url, payload(event))
        if event.get("action") in DONE and thread and thread.isdigit():
            self._edit(url, thread, event)
        return receipt

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """One message listing ``events`` (a group, :mod:`sinks.alerting.delivery.grouping`)."""
        url = read_secret(self.channel.webhook_url_file, "webhook_url_file")
        return self._post(url, group_payload(events, title))

    def _post(self, url: str, data: dict) -> Receipt:
        code, answer = post_json(self.opener, execute_url(url), data, {}, self.timeout,
                                 secret_url=True)
        try:
            found = json.loads(answer)
        except ValueError:
            found = {}
        message_id = found.get("id") if isinstance(found, dict) else None
        message_id = str(message_id) if isinstance(message_id, (str, int)) else None
        return Receipt.of(f"HTTP {code}", message_id, answer)

    def _edit(self, url: str, message_id: str, event: dict) -> None:
        """The problem's message, struck and marked: its follow-up was posted, so a refusal
        here is logged, not retried (it would post the follow-up again)."""
        data = json.dumps(edit(event), ensure_ascii=False).encode()
        req = urllib.request.Request(message_url(url, message_id), data=data, method="PATCH",
                                     headers={"Content-Type": "application/json",
                                              "User-Agent": f"fleetwatch/{__version__}"})
        try:
            with self.opener.open(req, timeout=self.timeout) as resp:
                resp.read(65536)
        except urllib.error.HTTPError as e:
            detail = e.read(300).decode(errors="replace") if e.fp else ""
            e.close()
            log.warning("channel %s: the problem's message %s not updated: HTTP %d %s",
                        self.name, message_id, e.code, " ".join(detail.split())[:200])
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            log.warning("channel %s: the problem's message %s not updated: %s", self.name,
                        message_id, e.__class__.__name__)

