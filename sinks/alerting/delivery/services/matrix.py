"""The ``matrix`` channel: alerts as messages in a Matrix room, sent with the client-server
API by hand (one documented call): ``PUT {homeserver}/_matrix/client/v3/rooms/{room}/send/
m.room.message/{txnId}`` with the user's access token (``Authorization: Bearer``).

What is sent is built here and pure (:func:`content`, :func:`group_content`,
:func:`edit_content`, :func:`txn_id`): an ``m.text`` message with a plain ``body`` and an
HTML ``formatted_body`` (``org.matrix.custom.html``) of the alert's
:class:`sinks.alerting.delivery.message.Message`: the label, the host, check and summary,
the state, since when, the parent, the output's first lines, the console's link. What
agents wrote is HTML-escaped (:func:`sinks.alerting.delivery.message.html`) and sits in
``<code>`` and ``<pre>``, where Element makes no link; a word joiner (U+2060, invisible)
follows each ``@`` and splits each ``://`` of it, in the body and the HTML alike, so no
``@room``, ``@user:server`` or URL of an agent is recognised; and every message says it
mentions nobody (``"m.mentions": {}``: with it, Synapse and Element apply the
intentional-mentions push rules, never the old ones that read ``@room`` or a user's name in
the body). The console's link is the only link.

A problem's acknowledgement and recovery are replies to its message (``m.relates_to`` ->
``m.in_reply_to``: its event id, the receipt's ``message_id`` of the problem's delivery,
which the deliverer hands back as ``thread``); the problem's message is then edited
(``m.replace``) to say ACKNOWLEDGED or RESOLVED above its struck text; a failed edit is
logged, not retried (the reply was sent). A group (``group_wait``) is one message listing
its alerts, at most :data:`GROUP_LIST`, "... and N more".

The transaction id is the outbox's reference of the attempt (the row's id; a group's
first row and size) with a digest of its alerts' keys, actions and times: the same on
every retry of that row, so a resend after a crash (the sink killed between the
homeserver's answer and the record of it) gives the same event, which Synapse keeps for a
day per access token; never the same for another alert (a database started afresh reuses
row ids). Content is kept under :data:`CONTENT_MAX` bytes (a Matrix event's limit is
65,536, the edit carries the message twice).

Answers: 200 ``{"event_id": "$..."}``, the receipt's message id; 401 (``M_UNKNOWN_TOKEN``,
``M_MISSING_TOKEN``: the token logged out or wrong), 403 (``M_FORBIDDEN``: not in the
room), 404, 400 and 413 refuse the alert for good, which fails the channel; 429
(``M_LIMIT_EXCEEDED``) is retried after its ``retry_after_ms`` (or ``Retry-After``); a
408, a 5xx, a time-out or a refused connection is retried. The token is read from its file
when sending and is in no log line, error or receipt.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import re
import urllib.error
import urllib.parse
import urllib.request

from fleetwatch import __version__
from sinks.alerting.delivery import message as messages
from sinks.alerting.delivery.channels import (Receipt, SendError, _NoRedirect, _retry_after,
                                              _safe, read_secret)
from sinks.alerting.delivery.channeltypes import MatrixChannel

log = logging.getLogger(__name__)

#: the client-server API's prefix
CLIENT = "/_matrix/client/v3"
#: the most bytes of a message's content as JSON (an event's limit is 65,536, with its
#: envelope and signatures; an edit carries the content twice)
CONTENT_MAX = 30000
#: the most alerts a grouped message lists; the rest are counted ("... and N more")
GROUP_LIST = 50
HTML = "org.matrix.custom.html"
#: invisible; after an agent's ``@`` and inside its ``://``: no mention, no URL
JOINER = "\u2060"
#: what an action does to its problem's message (the edit)
DONE = {"acknowledge": "ACKNOWLEDGED", "resolve": "RESOLVED"}


# ---------------------------------------------------------------- what is sent (pure)

def inert(text: str) -> str:
    """``text`` of an agent with a word joiner after each ``@`` and inside each ``://``:
    shown as written, but no ``@room``, ``@user:server`` or ``https://...`` in it for a
    client or a push rule to act on."""
    return text.replace("@", "@" + JOINER).replace("://", ":" + JOINER + "//")


def _html(text: str) -> str:
    return messages.html(inert(text))


def _code(text: str) -> str:
    return f"<code>{_html(text)}</code>"


def _text(body: str, formatted: str) -> dict:
    return {"msgtype": "m.text", "body": body, "format": HTML, "formatted_body": formatted,
            "m.mentions": {}}


def content(event: dict, cap: int = messages.OUTPUT_LINES) -> dict:
    """The ``m.room.message`` content of one alert: ``CRITICAL web-1/check_disk: DISK
    CRITICAL - / 95%`` then State, Since, Parent, the output's first ``cap`` lines and the
    console's link; in the HTML the label bold, what agents wrote in code."""
    m = messages.of(event)
    head = f"<strong>{messages.html(m.label)}</strong> {_code(m.host)}"
    if m.check:
        head += f" / {_code(m.check)}"
    if m.summary:
        head += f": {_code(m.summary)}"
    facts = [(name, value) for name, value in m.facts() if name not in ("Host", "Check")]
    body = [inert(m.title), *(f"{name}: {inert(value)}" for name, value in facts)]
    html = [head, *(f"{name}: {_code(value)}" for name, value in facts)]
    output = m.output[:cap]
    if output:
        body += ["", *(inert(line) for line in output)]
    formatted = "<br>".join(html)
    if output:
        formatted += f"<pre><code>{_html(chr(10).join(output))}</code></pre>"
    if m.link:
        body += ["", f"Open in the console: {m.link}"]
        formatted += f'{"" if output else "<br>"}<a href="{messages.html(m.link)}">' \
                     f"Open in the console</a>"
    out = _text("\n".join(body), formatted)
    if _size(out) > CONTENT_MAX and cap > 0:
        return content(event, cap - 1)
    return out


def reply(content: dict, event_id: str) -> dict:
    """``content`` as a reply to the event ``event_id`` (a problem's message)."""
    return {**content, "m.relates_to": {"m.in_reply_to": {"event_id": event_id}}}


def edit_content(original: dict, event_id: str, action: str) -> dict:
    """An edit (``m.replace``) of ``event_id``, whose content was ``original`` (ours): its
    text struck under ``ACKNOWLEDGED`` or ``RESOLVED``."""
    done = DONE[action]
    body = f"{done} (see the replies)\n{original.get('body') or ''}"
    formatted = f"<strong>{done}</strong> (see the replies)<br>" \
                f"<del>{original.get('formatted_body') or messages.html(body)}</del>"
    new = _text(body, formatted)
    return {**_text(f"* {body}", f"* {formatted}"), "m.new_content": new,
            "m.relates_to": {"rel_type": "m.replace", "event_id": event_id}}


def group_content(events: list[dict], title: str = "", cap: int = GROUP_LIST) -> dict:
    """One message listing a group's alerts (problems first), each as its title, at most
    ``cap`` of them, then "... and N more"."""
    group = messages.of_group(events, cap, title)
    lines = group.lines()
    body = "\n".join([inert(group.title), *(f"- {inert(line)}" for line in lines)])
    items = "".join(f"<li>{_code(m.title)}</li>" for m in group.messages)
    if group.more:
        items += f"<li>... and {group.more} more</li>"
    out = _text(body, f"<strong>{_html(group.title)}</strong><ul>{items}</ul>")
    if _size(out) > CONTENT_MAX and cap > 1:
        return group_content(events, title, cap // 2)
    return out


def txn_id(ref: str, events: list[dict]) -> str:
    """The transaction id of the attempt ``ref`` (the outbox's row id; ``ID+N`` for a
    group): ``fleetwatch.REF.DIGEST``, the digest over the alerts' keys, actions and times.
    The same on every retry of that row; another alert's differs."""
    digest = hashlib.sha256()
    for e in events:
        digest.update(f"{e.get('key')}\0{e.get('action')}\0{e.get('created')!r}\0".encode())
    return f"fleetwatch.{re.sub(r'[^A-Za-z0-9]', '_', ref)[:60]}.{digest.hexdigest()[:20]}"


def _size(content: dict) -> int:
    return len(json.dumps(content, ensure_ascii=False).encode())


# ---------------------------------------------------------------- talking to the homeserver

class MatrixSender:
    #: the deliverer hands a follow-up its problem's event id (``thread``)
    threads = True

    def __init__(self, name: str, channel: MatrixChannel, opener=None):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        self.opener = opener or urllib.request.build_opener(_NoRedirect)
        self.room = urllib.parse.quote(channel.room, safe="")
        self.base = channel.homeserver.rstrip("/") + CLIENT

    def send(self, event: dict, ref: str, thread: str | None = None) -> Receipt:
        token = read_secret(self.channel.token_file, "token_file")
        txn = txn_id(ref, [event])
        follow = event.get("action") in DONE and bool(thread)
        body = reply(content(event), thread) if follow else content(event)
        receipt = self._send(token, txn, body)
        if follow:
            self._edit(token, txn, thread, event["action"])
        return receipt

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """One message listing ``events`` (a group, :mod:`sinks.alerting.delivery.grouping`)."""
        token = read_secret(self.channel.token_file, "token_file")
        return self._send(token, txn_id(ref, events), group_content(events, title))

    def _send(self, token: str, txn: str, body: dict) -> Receipt:
        url = f"{self.base}/rooms/{self.room}/send/m.room.message/" \
              f"{urllib.parse.quote(txn, safe='')}"
        code, answer = self._call("PUT", url, token, body)
        try:
            event_id = json.loads(answer).get("event_id")
        except (ValueError, AttributeError):
            event_id = None
        if not isinstance(event_id, str) or not event_id.startswith("$"):
            raise SendError(f"HTTP {code} without an event_id (not a Matrix homeserver?): "
                            f"{answer[:200]}", permanent=True, status=f"HTTP {code}")
        return Receipt.of(f"HTTP {code}", event_id, answer)

    def _edit(self, token: str, txn: str, event_id: str, action: str) -> None:
        """The problem's message ``event_id`` edited to say ``action`` happened: its
        follow-up was sent, so a refusal here is logged, not retried (it would send the
        follow-up again)."""
        where = f"{self.base}/rooms/{self.room}/event/{urllib.parse.quote(event_id, safe='')}"
        try:
            _, answer = self._call("GET", where, token, None)
            original = json.loads(answer).get("content") or {}
            self._send(token, f"{txn}.edit", edit_content(original, event_id, action))
        except (SendError, ValueError, AttributeError) as e:
            log.warning("channel %s: the problem's message %s not edited: %s", self.name,
                        event_id, e)

    def _call(self, method: str, url: str, token: str, payload) -> tuple[int, str]:
        """``method`` ``url`` with the token (and ``payload`` as JSON); (its 2xx status,
        the answer's text), or a :class:`SendError`: 408, 429 (after ``retry_after_ms``
        or ``Retry-After``) and 5xx retried, any other 4xx or 3xx for good; no answer
        retried, naming the URL without its query."""
        data = json.dumps(payload, ensure_ascii=False).encode() if payload is not None \
            else None
        req = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "User-Agent": f"fleetwatch/{__version__}"})
        try:
            with self.opener.open(req, timeout=self.timeout) as resp:
                return resp.status, resp.read(65536).decode(errors="replace")
        except urllib.error.HTTPError as e:
            detail = e.read(2000).decode(errors="replace") if e.fp else ""
            header = _retry_after(e.headers.get("Retry-After"))
            e.close()
            raise _refusal(e.code, e.reason, detail, header) from None
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            reason = getattr(e, "reason", None) or e
            raise SendError(f"{method} {_safe(url)}: {reason}") from None


def _refusal(code: int, reason: str, detail: str, header: float | None) -> SendError:
    """A homeserver's error answer (``{"errcode": "M_...", "error": ...}``) as a
    SendError: 408, 429 and 5xx retried (429 after the longer of ``retry_after_ms`` and
    ``Retry-After``), anything else for good."""
    try:
        found = json.loads(detail)
    except ValueError:
        found = None
    found = found if isinstance(found, dict) else {}
    errcode, error = found.get("errcode"), found.get("error")
    wait = found.get("retry_after_ms")
    after = [s for s in (header, wait / 1000 if isinstance(wait, (int, float)) and
                         not isinstance(wait, bool) and wait >= 0 else None) if s is not None]
    retry = code in (408, 429) or code >= 500
    said = f"{errcode}: {error}" if errcode else (detail[:200] or reason)
    return SendError(f"HTTP {code} {said}", permanent=not retry, status=f"HTTP {code}",
                     retry_after=max(after) if after else None)
