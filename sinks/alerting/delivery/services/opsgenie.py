"""The ``opsgenie`` channel: alerts created, acknowledged and closed by alias through the
Alert API v2 of Opsgenie, or of its successor Jira Service Management (the same requests
under ``https://api.atlassian.com/jsm/ops/integration``), small documented HTTP calls
written here, with the header ``Authorization: GenieKey KEY``.

- A problem creates an alert: ``POST {api_url}/v2/alerts`` with ``message`` (the headline,
  at most 130 characters), ``alias`` (:func:`alias`, from the alert's key), ``description``
  (the host, check, state, since when, parent, the output's first lines and the console's
  link; at most 15,000), ``responders`` (the channel's teams), ``tags``, ``details`` (the
  same facts as name/value pairs, at most 8,000 characters in all), ``entity`` (the host),
  ``source: fleetwatch`` and ``priority`` (P1 for critical, P2 error, P3 warning or
  unknown, P5 informational). Opsgenie keeps one open alert per alias, so a resend (after
  a sink died mid-send) only counts the alert again.
- Its acknowledgement: ``POST {api_url}/v2/alerts/{alias}/acknowledge?identifierType=alias``
  with ``user`` (who acknowledged it in fleetwatch) and ``note`` (their comment);
- its recovery: ``POST {api_url}/v2/alerts/{alias}/close?identifierType=alias``, the
  recovery's headline as the note.

What is sent is built here and pure (:func:`create`, :func:`acknowledge`, :func:`close`).
Every text is plain, control characters shown as escapes; Opsgenie renders HTML in an
alert's message, so in what an agent wrote ``<`` and ``>`` become ``‹`` and ``›``
(:func:`inert`): no agent can make a tag, a link or a format of its text.

Answers: 202 ``{"result": "Request will be processed", "requestId": ...}`` is sent, the
``requestId`` the receipt's ``message_id``. A 404 to an acknowledgement or a close (Opsgenie
has no open alert of that alias: closed or deleted there) is taken as sent, with a note in
the receipt, since it must not fail the channel; a 401 or 403 (a key invalid or without the
right to create alerts), a 422 (what Opsgenie cannot take), another 4xx, or a 404 to a
create (a wrong ``api_url``) refuses the alert for good, which fails the channel; 429 waits
for its ``Retry-After`` if it gives one; a 5xx, a time-out or a refused connection is
retried. The API key is read from ``api_key_file`` when sending and is never in a log line,
an error or the recorded delivery.
"""

from __future__ import annotations

import hashlib
import json
import re
import urllib.parse
import urllib.request

from sinks.alerting.delivery import message as messages
from sinks.alerting.delivery.channels import (Receipt, SendError, _NoRedirect, post_json,
                                              read_secret)
from sinks.alerting.delivery.channeltypes import OpsgenieChannel

#: the Alert API's limits (characters)
MESSAGE_MAX, ALIAS_MAX, DESCRIPTION_MAX, DETAILS_MAX = 130, 512, 15000, 8000
ENTITY_MAX, USER_MAX, NOTE_MAX = 512, 100, 25000
PRIORITY = {"critical": "P1", "error": "P2", "unknown": "P3", "warning": "P3", "info": "P5",
            "ok": "P5", "debug": "P5"}
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_./-]+")


# ---------------------------------------------------------------- what is sent (pure)

def inert(text: str) -> str:
    """``text`` with no tag in it: ``<`` and ``>`` shown as ``‹`` and ``›``."""
    return text.replace("<", "\u2039").replace(">", "\u203a")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def alias(key: str) -> str:
    """The alert's alias in Opsgenie: its key with ``/`` as ``:`` (the alias travels in
    the path of acknowledge and close, where many HTTP servers refuse an encoded slash),
    ``3f0c...:check:check_disk``; a key with other characters, or past 512, becomes its
    letters and digits and a hash (``~`` and 16 hex digits), so that two keys never share
    an alias."""
    if _PLAIN_KEY.fullmatch(key) and len(key) <= ALIAS_MAX:
        return key.replace("/", ":")
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return re.sub(r"[^A-Za-z0-9_.:-]", "_", key.replace("/", ":"))[:ALIAS_MAX - 17] + \
        "~" + digest


def description(m: messages.Message) -> str:
    """The facts, the output's first lines and the console's link, plain text."""
    lines = [f"{name}: {inert(value)}" for name, value in m.facts()]
    if m.output:
        lines += ["", *(inert(line) for line in m.output)]
    if m.link:
        lines += ["", f"In the console: {m.link}"]
    return _cut("\n".join(lines), DESCRIPTION_MAX)


def details(m: messages.Message) -> dict[str, str]:
    """The facts as name/value pairs (``host``, ``check``, ``state``, ``since``,
    ``parent``, ``kind``, ``key``, ``console``), at most :data:`DETAILS_MAX` in all."""
    out = {name.lower(): inert(value) for name, value in m.facts()}
    out.update(kind=m.kind or "-", key=inert(m.key))
    if m.link:
        out["console"] = m.link
    room = DETAILS_MAX
    kept = {}
    for k, v in out.items():
        v = _cut(v, max(3, min(1000, room - len(k))))
        if len(k) + len(v) > room:
            break
        kept[k], room = v, room - len(k) - len(v)
    return kept


def create(m: messages.Message, channel: OpsgenieChannel) -> dict:
    """The body of ``POST /v2/alerts`` for a problem."""
    out = {"message": _cut(inert(m.title), MESSAGE_MAX), "alias": alias(m.key),
           "description": description(m), "details": details(m),
           "entity": _cut(inert(m.host), ENTITY_MAX), "source": "fleetwatch",
           "priority": PRIORITY.get(m.severity, "P3"), "user": "fleetwatch"}
    if channel.responders:
        out["responders"] = [{"name": team, "type": "team"} for team in channel.responders]
    if channel.tags:
        out["tags"] = list(channel.tags)
    return out


def acknowledge(m: messages.Message, by: str | None = None) -> dict:
    """The body of ``POST /v2/alerts/{alias}/acknowledge``: who acknowledged it (in
    fleetwatch) and what they said."""
    who = " ".join(str(by or "").split())
    return {"source": "fleetwatch", "user": _cut(inert(who) or "fleetwatch", USER_MAX),
            "note": _cut(inert(m.summary or m.title), NOTE_MAX)}


def close(m: messages.Message) -> dict:
    """The body of ``POST /v2/alerts/{alias}/close``: the recovery's headline and output."""
    note = "\n".join([m.title, *m.output])
    return {"source": "fleetwatch", "user": "fleetwatch", "note": _cut(inert(note), NOTE_MAX)}


def request(event: dict, channel: OpsgenieChannel) -> tuple[str, dict]:
    """(the path under ``api_url``, the body) of ``event``: a create, an acknowledge or a
    close."""
    m = messages.of(event)
    if m.action == "acknowledge":
        path, body = "acknowledge", acknowledge(m, event.get("acknowledged_by"))
    elif m.action == "resolve":
        path, body = "close", close(m)
    else:
        return "/v2/alerts", create(m, channel)
    return (f"/v2/alerts/{urllib.parse.quote(alias(m.key), safe='')}/{path}"
            "?identifierType=alias"), body


# ---------------------------------------------------------------- talking to Opsgenie

class OpsgenieSender:
    def __init__(self, name: str, channel: OpsgenieChannel, opener=None):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        self.opener = opener or urllib.request.build_opener(_NoRedirect)

    def _key(self) -> str:
        key = read_secret(self.channel.api_key_file, "api_key_file")
        if not key or any(c.isspace() or not c.isprintable() for c in key):
            raise SendError(f"api_key_file {self.channel.api_key_file}: expected one word, "
                            f"the integration's API key", permanent=True)
        return key

    def send(self, event: dict, ref: str) -> Receipt:
        path, body = request(event, self.channel)
        url = self.channel.api_url.rstrip("/") + path
        try:
            code, answer = post_json(self.opener, url, body,
                                     {"Authorization": f"GenieKey {self._key()}"},
                                     self.channel.timeout)
        except SendError as e:
            if e.status != "HTTP 404" or path == "/v2/alerts":
                raise
            verb = "acknowledge" if path.endswith("/acknowledge?identifierType=alias") \
                else "close"
            return Receipt.of(e.status, None, f"no open alert {alias(str(event.get('key')))} "
                                              f"in Opsgenie, nothing to {verb}: {e}")
        try:
            found = json.loads(answer)
        except ValueError:
            found = None
        request_id = found.get("requestId") if isinstance(found, dict) else None
        return Receipt.of(f"HTTP {code}", request_id if isinstance(request_id, str) else None,
                          answer)
