"""Alert channels: an email over SMTP and a JSON webhook, one message per alert per channel
(or, for an email channel with ``group_wait``, one message per group of alerts).

Building what is sent (:func:`subject`, :func:`email_message`, :func:`group_message`,
:func:`webhook_payload`) is
pure; :class:`EmailSender` and :class:`WebhookSender` only talk to the server and sort its
answer into sent, :class:`SendError` to retry, or :class:`SendError` ``permanent`` (retrying
would give the same answer: a 4xx from a webhook other than 408/429, a 5xx SMTP reply).

The webhook body follows the PagerDuty Events API v2 (``routing_key``, ``event_action``
trigger/acknowledge/resolve, ``dedup_key``, ``payload``), which other pager services and generic
receivers accept too; the event key is the dedup key, so a resend never opens a second
incident.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import smtplib
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from fleetwatch import __version__
from fleetwatch.display import escape, iso, state
from sinks.alerting.delivery import grouping
from sinks.alerting.delivery.channeltypes import EmailChannel, WebhookChannel

log = logging.getLogger(__name__)

SUBJECT_MAX = 200
#: the longest line of one alert in a grouped message
LISTED_MAX = 300
#: PagerDuty limits
SUMMARY_MAX, DEDUP_MAX = 1024, 255
PD_SEVERITY = {"critical": "critical", "error": "error", "unknown": "error",
               "warning": "warning", "info": "info", "ok": "info", "debug": "info"}


#: the longest answer of a service kept with a send (:class:`Receipt`)
ANSWER_MAX = 300


class SendError(Exception):
    """A channel did not take the alert; ``permanent`` when retrying cannot help;
    ``status``: what the service answered, as a :class:`Receipt` says it (None: no answer,
    the connection failed)."""

    def __init__(self, reason: str, permanent: bool = False, retry_after: float | None = None,
                 status: str | None = None):
        super().__init__(" ".join(reason.split())[:500])
        self.permanent, self.retry_after, self.status = permanent, retry_after, status


@dataclass(frozen=True)
class Receipt:
    """What a service answered a send that it took: ``status`` in its own terms (``HTTP
    202``, ``SMTP 250``), its id for the message where it gives one (``message_id``: the
    email's Message-ID, a PagerDuty-shaped answer's ``dedup_key``), and the first
    :data:`ANSWER_MAX` characters of its answer on one line, control characters escaped
    (kept in the ``deliveries`` table: proof that the alert went out, and when)."""

    status: str
    message_id: str | None = None
    answer: str = ""

    @classmethod
    def of(cls, status: str, message_id=None, answer="") -> "Receipt":
        return cls(status, _one_line(message_id, 255) or None if message_id else None,
                   _one_line(answer, ANSWER_MAX))


# ---------------------------------------------------------------- what is sent (pure)

def label(event: dict) -> str:
    """The word an operator reads first: CRITICAL, RECOVERY, DOWN, UP, FLAPPING..."""
    resolve = event.get("action") == "resolve"
    kind = event.get("kind")
    if kind == "host" and event.get("action") != "acknowledge":
        return "UP" if resolve else "DOWN"
    if kind == "flapping":
        return "FLAPPING STOP" if resolve else "FLAPPING START"
    if event.get("action") == "acknowledge":
        return "ACKNOWLEDGED"
    return "RECOVERY" if resolve else str(event.get("severity") or "alert").upper()


def _one_line(text, limit: int) -> str:
    """One line of ``text``: whitespace runs as one space, other control characters shown
    as escapes (``\\x1b``: a mail reader or a pager's console never acts on them)."""
    return escape(" ".join(str(text or "").split()))[:limit]


def headline(event: dict, limit: int = SUMMARY_MAX) -> str:
    """``CRITICAL web-1/check_disk: DISK CRITICAL - / 95%``."""
    where = event.get("hostname") or event.get("uuid") or \
        ("channel" if event.get("kind") in ("channel", "test") else "?")
    if event.get("check"):
        where = f"{where}/{event['check']}"
    return _one_line(f"{label(event)} {where}: {event.get('summary') or ''}", limit)


def subject(event: dict) -> str:
    """``[fleetwatch] CRITICAL web-1/check_disk: DISK CRITICAL - / 95%``."""
    return _one_line(f"[fleetwatch] {headline(event)}", SUBJECT_MAX)


def _state(event: dict) -> str:
    if event.get("kind") == "check" and isinstance(event.get("status"), int):
        return f"{state(event['status'])} (exit status {event['status']})"
    return str(event.get("severity") or "-").upper()


def body(event: dict) -> str:
    lines = [
        headline(event),
        "",
        f"Host:   {event.get('hostname') or '-'} ({event.get('uuid') or '-'})",
        f"Check:  {event.get('check') or '-'}",
        f"State:  {_state(event)}",
        f"Kind:   {event.get('kind')} {event.get('action')}",
        f"Time:   {iso(event.get('created'))}",
        f"Key:    {event.get('key')}",
    ]
    if event.get("parent"):
        lines.insert(5, f"Parent: {_one_line(event['parent'], 300)}")
    text = str(event.get("text") or "").strip()
    if text:
        lines += ["", text]
    if event.get("link"):
        lines += ["", f"In the console: {event['link']}"]
    return "\n".join(lines) + "\n"


def link(event: dict, event_id: int | None, console_url: str) -> str | None:
    """Where the console shows ``event``: its host's page (``/hosts/UUID``), else its own
    (``/alerts/ID``); None without a ``console_url``."""
    if not console_url:
        return None
    base = console_url.rstrip("/")
    if event.get("uuid") and event.get("kind") in ("check", "host", "flapping", "notify"):
        return f"{base}/hosts/{urllib.parse.quote(str(event['uuid']), safe='')}"
    return f"{base}/alerts/{event_id}" if event_id is not None else base + "/alerts"


def email_message(event: dict, channel: EmailChannel, sender: str, ref: str) -> EmailMessage:
    """The message of one alert for one channel (all its recipients on one message)."""
    msg = EmailMessage()
    msg["Subject"] = subject(event)
    msg["From"] = sender
    msg["To"] = ", ".join(channel.to)
    msg["Date"] = formatdate(event.get("created"), usegmt=True)
    msg["Message-ID"] = make_msgid(f"fleetwatch.{ref}", sender.rpartition("@")[2] or None)
    msg["X-Fleetwatch-Key"] = _one_line(event.get("key"), 300)
    msg["X-Fleetwatch-Action"] = str(event.get("action"))
    msg.set_content(body(event))
    return msg


def group_subject(events: list[dict], title: str = "") -> str:
    """``[fleetwatch] 500 alerts (severity critical): 498 DOWN, 2 CRITICAL``: how many, and
    of what, most first."""
    counts = Counter(label(e) for e in events)
    what = ", ".join(f"{n} {name}" for name, n in counts.most_common())
    shared = f" ({title})" if title else ""
    return _one_line(f"[fleetwatch] {len(events)} alerts{shared}: {what}", SUBJECT_MAX)


def _listed(event: dict) -> str:
    return f"{headline(event, LISTED_MAX)} ({iso(event.get('created'))})"


def group_body(events: list[dict], cap: int, title: str = "") -> str:
    """A group's alerts, one line each (as the single alert's headline), at most ``cap`` of
    them: problems, acknowledgements, recoveries."""
    times = [e["created"] for e in events if isinstance(e.get("created"), (int, float))]
    span = f", raised from {iso(min(times))} to {iso(max(times))}" if times else ""
    lines = [f"{len(events)} alerts{f' ({_one_line(title, 300)})' if title else ''}{span}.",
             "", *grouping.listing(events, cap, _listed), "",
             "Each alert in full: fleetwatch alerts"]
    return "\n".join(lines) + "\n"


def group_message(events: list[dict], channel: EmailChannel, sender: str, ref: str,
                  title: str = "") -> EmailMessage:
    """The one message of a group of alerts for one channel."""
    msg = EmailMessage()
    msg["Subject"] = group_subject(events, title)
    msg["From"] = sender
    msg["To"] = ", ".join(channel.to)
    msg["Date"] = formatdate(max((e.get("created") or 0) for e in events) or None, usegmt=True)
    msg["Message-ID"] = make_msgid(f"fleetwatch.{ref}", sender.rpartition("@")[2] or None)
    actions = {str(e.get("action")) for e in events}
    msg["X-Fleetwatch-Action"] = actions.pop() if len(actions) == 1 else "mixed"
    msg["X-Fleetwatch-Count"] = str(len(events))
    msg.set_content(group_body(events, channel.group_list, title))
    return msg


def dedup_key(key: str) -> str:
    """The event key, shortened with a hash past PagerDuty's 255 characters."""
    if len(key) <= DEDUP_MAX:
        return key
    return f"{key[:DEDUP_MAX - 17]}#{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def webhook_payload(event: dict, channel: WebhookChannel) -> dict:
    """A PagerDuty Events API v2 event for ``event``."""
    return {
        "routing_key": channel.routing_key,
        "event_action": event["action"] if event.get("action") in ("resolve", "acknowledge")
        else "trigger",
        "dedup_key": dedup_key(str(event.get("key"))),
        "payload": {
            "summary": headline(event),
            "source": event.get("hostname") or event.get("uuid") or "unknown",
            "severity": PD_SEVERITY.get(event.get("severity"), "error"),
            "component": event.get("check") or event.get("kind"),
            "class": event.get("kind"),
            "timestamp": iso(event.get("created")),
            "custom_details": {k: event.get(k) for k in
                               ("uuid", "hostname", "check", "status", "severity", "kind",
                                "text", "since", "parent") if event.get(k) is not None
                               or k not in ("since", "parent")},
        },
        "client": "fleetwatch",
        **({"links": [{"href": event["link"], "text": "the fleetwatch console"}]}
           if event.get("link") else {}),
    }


# ---------------------------------------------------------------- talking to servers

class EmailSender:
    def __init__(self, name: str, channel: EmailChannel, smtp=None,
                 hostname: str | None = None):
        self.name, self.channel, self.smtp = name, channel, smtp or ReplySMTP
        self.sender = channel.sender or f"fleetwatch@{hostname or socket.getfqdn()}"
        self.timeout = channel.timeout
        if channel.username and not channel.starttls:     # allow_plaintext_auth (config)
            log.warning("channel %s: SMTP AUTH as %s to %s:%d without STARTTLS: the password "
                        "crosses the network in clear (allow_plaintext_auth: true)", name,
                        channel.username, channel.host, channel.port)

    def _password(self) -> str:
        try:
            with open(self.channel.password_file, encoding="utf-8") as f:
                return f.read().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as e:
            raise SendError(f"cannot read password_file {self.channel.password_file}: "
                            f"{getattr(e, 'strerror', None) or e.__class__.__name__}") from None

    def send(self, event: dict, ref: str) -> Receipt:
        return self._deliver(email_message(event, self.channel, self.sender, ref))

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """One message listing ``events`` (a group, :mod:`sinks.alerting.delivery.grouping`)."""
        return self._deliver(group_message(events, self.channel, self.sender, ref, title))

    def _deliver(self, msg: EmailMessage) -> Receipt:
        """Send ``msg``; the server's reply to its DATA (``250 2.0.0 Ok: queued as ...``)
        and the message's Message-ID as the receipt."""
        c = self.channel
        try:
            with self.smtp(c.host, c.port, timeout=c.timeout) as smtp:
                smtp.ehlo()
                if c.starttls:
                    smtp.starttls(context=ssl.create_default_context(cafile=c.ca_file or None))
                    smtp.ehlo()
                if c.username:
                    smtp.login(c.username, self._password())
                refused = smtp.send_message(msg, from_addr=self.sender, to_addrs=list(c.to))
                code, reply = getattr(smtp, "data_reply", (250, b""))
        except smtplib.SMTPRecipientsRefused as e:
            codes = [code for code, _ in e.recipients.values()]
            raise SendError(f"all recipients refused: {codes}",
                            permanent=all(code >= 500 for code in codes),
                            status=f"SMTP {max(codes)}" if codes else None) from None
        except smtplib.SMTPResponseException as e:
            reply = _decoded(e.smtp_error)
            raise SendError(f"SMTP {e.smtp_code} {reply}", permanent=e.smtp_code >= 500,
                            status=f"SMTP {e.smtp_code}") from None
        except (smtplib.SMTPException, OSError) as e:
            raise SendError(f"SMTP {c.host}:{c.port}: {e.__class__.__name__}: {e}") from None
        if refused:
            log.warning("channel %s: recipients refused (the others got the alert): %s",
                        self.name, ", ".join(sorted(refused)))
        answer = _decoded(reply)
        if refused:
            answer = f"{answer} (refused: {', '.join(sorted(refused))})"
        return Receipt.of(f"SMTP {code}", msg["Message-ID"], answer)


class ReplySMTP(smtplib.SMTP):
    """:class:`smtplib.SMTP` that keeps the server's reply to DATA (``data_reply``): the
    reply that says the server took the message, which ``send_message`` does not return."""

    data_reply: tuple[int, bytes] = (250, b"")

    def data(self, msg):
        self.data_reply = super().data(msg)
        return self.data_reply


def _decoded(reply) -> str:
    return reply.decode(errors="replace") if isinstance(reply, bytes) else str(reply)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer (an error), not a second POST elsewhere."""

    def redirect_request(self, *args, **kwargs):
        return None


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


class WebhookSender:
    """The PagerDuty-shaped webhook; a channel with a ``template`` is sent by its
    subclass :class:`sinks.alerting.delivery.services.webhook.WebhookSender`, which renders it."""

    def __init__(self, name: str, channel: WebhookChannel, opener=None):
        self.name, self.channel = name, channel
        self.opener = opener or urllib.request.build_opener(_NoRedirect)
        self.timeout = channel.timeout

    def payload(self, event: dict):
        """What is POSTed for ``event``: the PagerDuty Events API v2 event."""
        if self.channel.template:       # never the PagerDuty shape in the template's place
            raise SendError("a webhook with a template is sent by sinks.alerting.delivery."
                            "webhook.WebhookSender", permanent=True)
        return webhook_payload(event, self.channel)

    def send(self, event: dict, ref: str) -> Receipt:
        """POST the event; the status and the answer (its ``dedup_key`` as the id, as
        PagerDuty's Events API answers ``{"status": "success", "dedup_key": ...}``) as the
        receipt."""
        c = self.channel
        code, text = post_json(self.opener, c.url, self.payload(event), c.headers, c.timeout)
        return Receipt.of(f"HTTP {code}", _answered_key(text), text)


def post_json(opener, url: str, payload, headers: dict, timeout: float,
              secret_url: bool = False) -> tuple[int, str]:
    """POST ``payload`` as JSON to ``url``; (its 2xx status, the answer's text). A refusal
    is a :class:`SendError`: 408, 429 (after its Retry-After) and 5xx retried, any other
    4xx or 3xx for good; no answer (refused, timed out) retried, naming the URL without
    its query or user info (``secret_url``: its scheme and host only, for a webhook whose
    path is its secret)."""
    data = json.dumps(payload, ensure_ascii=False).encode()
    req = urllib.request.Request(url, data=data, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": f"fleetwatch/{__version__}",
        **headers})
    try:
        with opener.open(req, timeout=timeout) as resp:
            answer, code = resp.read(65536), resp.status
    except urllib.error.HTTPError as e:
        code, detail = e.code, e.read(300).decode(errors="replace") if e.fp else ""
        e.close()
        retry = code in (408, 429) or code >= 500
        raise SendError(f"HTTP {code} {e.reason}: {detail}", permanent=not retry,
                        retry_after=_retry_after(e.headers.get("Retry-After")),
                        status=f"HTTP {code}") from None
    except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
        reason = getattr(e, "reason", None) or e
        raise SendError(f"POST {_host(url) if secret_url else _safe(url)}: {reason}") \
            from None
    if not 200 <= code < 300:
        raise SendError(f"HTTP {code}", permanent=True, status=f"HTTP {code}")
    return code, answer.decode(errors="replace")


def read_secret(path: str, what: str) -> str:
    """The secret in file ``path`` (a token, a URL), read when sending; a
    :class:`SendError` (retried: the file may come back) naming the file, never its
    content."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise SendError(f"cannot read {what} {path}: "
                        f"{getattr(e, 'strerror', None) or e.__class__.__name__}") from None


def _answered_key(text: str) -> str | None:
    """The ``dedup_key`` of a PagerDuty-shaped answer, if the answer is one."""
    try:
        found = json.loads(text)
    except ValueError:
        return None
    key = found.get("dedup_key") if isinstance(found, dict) else None
    return key if isinstance(key, str) else None


def _host(url: str) -> str:
    """A URL's scheme and host only (its path may be a webhook's secret), for messages."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"


def _safe(url: str) -> str:
    """A URL without its query or user info (both may hold a token), for messages."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}{parts.path}"
