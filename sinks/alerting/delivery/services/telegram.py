"""The ``telegram`` channel: alerts as messages from a Telegram bot to a chat, a group or a
channel, through the Bot API (``POST {api_url}/bot{TOKEN}/sendMessage``), a small
documented HTTP call written here.

What is sent is built here and pure (:func:`text`, :func:`group_text`,
:func:`payload`): Telegram's HTML (``parse_mode: HTML``) with the label in bold, and
everything an agent wrote (the host, the check, the summary, the parent, the output's
first lines) escaped (``& < > "``, :func:`sinks.alerting.delivery.message.html`) inside
``<code>`` and ``<pre>``, where Telegram finds no mention (``@name``), link, hashtag or
command: no agent can mention anyone, link anything or format the message. The console's
link (the operator's config, never an agent's) is an ``<a href>`` "Open in the console";
link previews are off. Telegram's limit is kept: a message is at most 4,096 characters
once its tags are parsed (counted as Telegram counts, in UTF-16 units), the output (or a
group's list) cut to fit.

A problem's message id, ``CHAT/MESSAGE`` (the chat's number as the answer gives it), is the
receipt's ``message_id``; the deliverer hands it back for the problem's acknowledgement and
recovery (``threads``), which are sent as replies to it (``reply_parameters``, sent
without the reply when the problem's message is gone); the problem's message is then
edited (``editMessageText``) to say so, and an edit Telegram refuses is logged, not retried
(the reply went out). A group of alerts (``group_wait``) is one message listing them.

Answers: ``{"ok": true, "result": {"message_id": ...}}`` is sent; 401 (the token revoked),
403 (the bot blocked or kicked), 404 (no such bot) and 400 (``chat not found``, a message
Telegram cannot take) refuse the alert for good, which fails the channel (a group upgraded
to a supergroup names its new chat id); 429 waits for its ``parameters.retry_after``; a 5xx,
a time-out or a refused connection is retried.

The bot's token is in the URL's path: it is read from ``token_file`` when sending and never
reaches an error, a log line or the recorded delivery (an error names only the API's host).
"""

from __future__ import annotations

import http.client
import json
import logging
import re
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from fleetwatch import __version__
from sinks.alerting.delivery import message as messages
from sinks.alerting.delivery.channels import (Receipt, SendError, _NoRedirect, _retry_after,
                                              read_secret)
from sinks.alerting.delivery.channeltypes import TelegramChannel

log = logging.getLogger(__name__)

#: Telegram's limit on a message's text once its entities are parsed (UTF-16 units)
TEXT_MAX = 4096
#: alerts a group's message lists at most (the rest counted)
GROUP_LIST = 40
#: what an action makes of the problem's first message
DONE = {"acknowledge": "ACKNOWLEDGED", "resolve": "RESOLVED"}
#: a bot token, as BotFather gives it
TOKEN = re.compile(r"\d{1,20}:[A-Za-z0-9_-]{1,100}")


# ---------------------------------------------------------------- what is sent (pure)

def units(text: str) -> int:
    """How long Telegram counts ``text``: in UTF-16 code units."""
    return len(text.encode("utf-16-le")) // 2


def _cut(text: str, room: int) -> str:
    """``text`` cut to at most ``room`` UTF-16 units (never within a character)."""
    if units(text) <= room:
        return text
    out, used = [], 0
    for c in text:
        used += 2 if ord(c) > 0xFFFF else 1
        if used > room:
            break
        out.append(c)
    return "".join(out)


class _Text:
    """Telegram HTML built piece by piece, counting what it shows (the parsed text)."""

    def __init__(self):
        self.html: list[str] = []
        self.shown = 0

    def add(self, raw: str, tag: str = "", href: str = "") -> "_Text":
        """``raw`` escaped, in ``<tag>`` (``a`` with ``href``) if given."""
        body = messages.html(raw)
        if tag == "a":
            body = f'<a href="{messages.html(href)}">{body}</a>'
        elif tag:
            body = f"<{tag}>{body}</{tag}>"
        self.html.append(body)
        self.shown += units(raw)
        return self

    def __str__(self) -> str:
        return "".join(self.html)


#: the console link's text
OPEN = "Open in the console"


def _link(url: str | None) -> str:
    """The console's address where Telegram takes it (http or https, no space), else
    nothing."""
    url = url or ""
    return url if url.startswith(("http://", "https://")) and \
        not any(c.isspace() for c in url) else ""


def _room(t: _Text, url: str | None) -> int:
    """What is left for the rest (after a line break) once the console's link is added."""
    return TEXT_MAX - t.shown - 1 - (units(f"\n\n{OPEN}") if _link(url) else 0)


def _finish(t: _Text, url: str | None) -> str:
    if _link(url):
        t.add("\n\n").add(OPEN, "a", _link(url))
    return str(t)


def text(m: messages.Message) -> str:
    """The message of one alert in Telegram's HTML: ``<b>CRITICAL</b> <code>web-1</code>
    / <code>check_disk</code>``, the summary, the state, since when, the parent, the
    output's first lines in ``<pre>``, the console's link; at most :data:`TEXT_MAX` units
    shown (the output cut to fit)."""
    t = _Text().add(m.label, "b").add(" ").add(m.host, "code")
    if m.check:
        t.add(" / ").add(m.check, "code")
    if m.summary:
        t.add("\n").add(m.summary, "code")
    for name, value in m.facts():
        if name in ("Host", "Check"):
            continue
        t.add(f"\n{name}: ").add(value, "code" if name == "Parent" else "")
    if m.output:
        shown = _cut("\n".join(m.output), _room(t, m.link))
        if shown:
            t.add("\n").add(shown, "pre")
    return _finish(t, m.link)


def done_text(m: messages.Message) -> str:
    """The problem's first message once its acknowledgement or recovery was sent: struck,
    and what ended it (``<b>RESOLVED</b> <s>...web-1 / check_disk</s>``)."""
    t = _Text().add(DONE.get(m.action, m.label), "b").add(" ")
    t.html.append("<s>")
    t.add(m.host, "code")
    if m.check:
        t.add(" / ").add(m.check, "code")
    t.html.append("</s>")
    return _finish(t, m.link)


def group_text(group: messages.Group, link: str | None = None) -> str:
    """A group's one message: its title, then one line per alert in ``<pre>`` (as many as
    fit in :data:`TEXT_MAX`; the rest counted, "... and N more"), then the console's link
    when the group's alerts share one."""
    t = _Text().add(group.title, "code")
    room = _room(t, link)
    titles = [_cut(m.title, room) for m in group.messages]
    more = group.more
    while True:
        lines = titles + ([f"... and {more} more"] if more else [])
        if units("\n".join(lines)) <= room or not titles:
            break
        titles.pop()
        more += 1
    t.add("\n").add(_cut("\n".join(lines), room), "pre")
    return _finish(t, link)


def chat(value: str):
    """A ``chat_id`` as the Bot API takes it: a number, or ``@channelname``."""
    return int(value) if re.fullmatch(r"-?\d+", value) else value


def payload(chat_id, html_text: str, reply_to: int | None = None) -> dict:
    """The ``sendMessage`` request: the HTML text, link previews off, and for a follow-up
    a reply to the problem's message (sent all the same if that message is gone)."""
    out = {"chat_id": chat_id, "text": html_text, "parse_mode": "HTML",
           "link_preview_options": {"is_disabled": True}}
    if reply_to is not None:
        out["reply_parameters"] = {"message_id": reply_to, "allow_sending_without_reply": True}
    return out


def thread_of(thread: str | None) -> tuple[int | str, int] | None:
    """(chat, message id) of a problem's ``CHAT/MESSAGE``, None if it is not one."""
    where, _, number = (thread or "").rpartition("/")
    if not where or not number.isdigit():
        return None
    return chat(where), int(number)


def refusal(code: int, answer, retry_after: str | None = None) -> SendError:
    """The Bot API's refusal (HTTP ``code``, its JSON ``answer``) as a SendError: 408, 429
    (after ``parameters.retry_after``, else the Retry-After header) and 5xx retried,
    anything else (400, 401, 403, 404, a redirect) for good."""
    found = answer if isinstance(answer, dict) else {}
    said = " ".join(str(found.get("description") or "").split())[:200] or "no description"
    params = found.get("parameters") if isinstance(found.get("parameters"), dict) else {}
    wait = params.get("retry_after")
    wait = float(wait) if isinstance(wait, (int, float)) and wait >= 0 else \
        _retry_after(retry_after)
    moved = params.get("migrate_to_chat_id")
    if isinstance(moved, int):
        said += f" (the group is now the supergroup {moved}: set chat_id to it)"
    retry = code in (408, 429) or code >= 500
    return SendError(f"HTTP {code} {said}", permanent=not retry,
                     retry_after=wait if code == 429 else None, status=f"HTTP {code}")


# ---------------------------------------------------------------- talking to Telegram

class TelegramSender:
    #: the deliverer hands a follow-up the message of its problem (``thread``)
    threads = True

    def __init__(self, name: str, channel: TelegramChannel, opener=None):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        self.opener = opener or urllib.request.build_opener(_NoRedirect)
        self.host = urlsplit(channel.api_url).hostname

    def send(self, event: dict, ref: str, thread: str | None = None) -> Receipt:
        m = messages.of(event)
        problem = thread_of(thread) if m.action in DONE else None
        if problem is None:
            return self._post(payload(chat(self.channel.chat_id), text(m)))
        where, number = problem
        receipt = self._post(payload(where, text(m), number), number)
        try:
            self._call("editMessageText", {"chat_id": where, "message_id": number,
                                           "text": done_text(m), "parse_mode": "HTML",
                                           "link_preview_options": {"is_disabled": True}})
        except SendError as e:      # the reply went out: a second one would be a duplicate
            log.warning("channel %s: the problem's message %s not marked %s: %s", self.name,
                        thread, DONE[m.action], e)
        return receipt

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """One message listing ``events`` (a group, :mod:`sinks.alerting.delivery.grouping`)."""
        group = messages.of_group(events, GROUP_LIST, title)
        links = {e.get("link") for e in events}
        link = links.pop() if len(links) == 1 else None
        return self._post(payload(chat(self.channel.chat_id), group_text(group, link)))

    def _post(self, request: dict, reply_to: int | None = None) -> Receipt:
        code, answer = self._call("sendMessage", request)
        result = answer.get("result") if isinstance(answer.get("result"), dict) else {}
        number, where = result.get("message_id"), (result.get("chat") or {}).get("id")
        posted = f"{where}/{number}" if isinstance(number, int) and where is not None \
            else None
        said = f"ok: message {number} in chat {where}" + \
            (f", a reply to {reply_to}" if reply_to is not None else "")
        return Receipt.of(f"HTTP {code}", posted, said)

    def _token(self) -> str:
        token = read_secret(self.channel.token_file, "token_file")
        if not TOKEN.fullmatch(token):
            raise SendError(f"token_file {self.channel.token_file}: not a bot token "
                            f"(NUMBER:LETTERS, as BotFather gives it)", permanent=True)
        return token

    def _call(self, method: str, request: dict) -> tuple[int, dict]:
        """POST ``request`` to the Bot API's ``method``; (its status, its JSON) when
        Telegram took it, else a :class:`SendError` (:func:`refusal`) naming the API's
        host only (the token is in the path)."""
        token = self._token()
        url = f"{self.channel.api_url.rstrip('/')}/bot{token}/{method}"
        req = urllib.request.Request(
            url, data=json.dumps(request, ensure_ascii=False).encode(), method="POST",
            headers={"Content-Type": "application/json",
                     "User-Agent": f"fleetwatch/{__version__}"})
        header = None
        try:
            with self.opener.open(req, timeout=self.timeout) as resp:
                code, raw = resp.status, resp.read(65536)
        except urllib.error.HTTPError as e:
            code, header = e.code, e.headers.get("Retry-After") if e.headers else None
            raw = e.read(65536) if e.fp else b""
            e.close()
        except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as e:
            reason = str(getattr(e, "reason", None) or e).replace(token, "<token>")
            raise SendError(f"Telegram {self.host} {method}: {reason}") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            answer = None
        if 200 <= code < 300 and isinstance(answer, dict) and answer.get("ok") is True:
            return code, answer
        if 200 <= code < 300:       # not the Bot API's answer: a wrong api_url
            refused = SendError(f"HTTP {code}: not the Bot API's answer (api_url?)",
                                permanent=True, status=f"HTTP {code}")
        else:
            refused = refusal(code, answer, header)
        raise SendError(str(refused).replace(token, "<token>"), permanent=refused.permanent,
                        retry_after=refused.retry_after, status=refused.status)
