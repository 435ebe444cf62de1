"""The ``apprise`` channel: a catch-all for the services Apprise (PyPI ``apprise``) speaks,
each named by an Apprise URL (``slack://...``, ``tgram://...``, ``mailto://...``,
``json://...``: the URLs carry the services' secrets). Apprise is imported when a
message is sent, not before.

**What is sent.** Each alert one ``Apprise.notify()`` to every URL of ``urls_file`` (read
at each send, one URL a line, ``#`` comments): ``title`` the headline, ``body`` plain text
(the facts, the output's first lines, the console's link; :func:`body`), ``notify_type``
``failure`` (critical, error, unknown), ``warning``, ``info`` (an acknowledgement) or
``success`` (a recovery). A group (``group_wait``) is one notification listing its
alerts. The text is plain (``body_format`` text: Apprise escapes it for the services that
take HTML), control characters shown as escapes and mentions broken
(:mod:`sinks.alerting.delivery.services.plaintext`); a service that renders Markdown from plain
text may still show an agent's ``*`` as emphasis.

**No threads, no receipts.** Apprise says whether each service took the message, not
which message it became: an acknowledgement or a recovery is a notification of its own,
and the receipt is ``apprise ok`` with how many services took it, no message id.

**Answers.** ``notify()`` returns an ``AppriseResult`` (not a bool, and it never raises):
every service took it -> sent; a part or none of them, or a time-out (the channel's
``timeout`` bounds the whole call) -> a :class:`SendError` retried, naming the services
that failed and what Apprise said of them. A retry after a partial send goes only to the
services that failed (remembered in memory by the alert's outbox row: a restarted sink
sends to all again, one duplicate at most). A URL of a scheme Apprise does not know, or an
empty ``urls_file``, refuses the alert for good (the channel fails); an unreadable one is
retried (it may come back). Apprise cannot tell a refused token from a server error, so a
service's 401 is retried too, until ``retry.max_age``.

**Secrets.** A URL is never written in a log line, an error or a receipt: a service is
named by its scheme and line (``tgram (line 2)``), with its host only for schemes whose
host is a server (``json://127.0.0.1``, ``mailto://smtp.example.com``); what Apprise said
is kept with every part of the URLs (user, password, host, path, query values) blanked.
Apprise's own log lines do not reach fleetwatch's log (the ``apprise`` logger does not
propagate: some services log their URL at debug level), nor do urllib3's debug lines
(each request's path, which holds some services' tokens).
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections import OrderedDict
from urllib.parse import parse_qsl, unquote, urlsplit

from sinks.alerting.delivery import message
from sinks.alerting.delivery.channels import Receipt, SendError, read_secret
from sinks.alerting.delivery.channeltypes import AppriseChannel
from sinks.alerting.delivery.services.plaintext import inert

log = logging.getLogger(__name__)

#: schemes whose URL's host is a server's name, not a token (shown in errors)
SERVER_SCHEMES = frozenset("json jsons xml xmls form forms mailto mailtos ntfy ntfys gotify "
                           "gotifys mmost mmosts matrix matrixs rocket rockets apprise "
                           "apprises".split())
NOTIFY_TYPE = {"critical": "failure", "error": "failure", "unknown": "failure",
               "warning": "warning"}
#: alerts whose services that took them are remembered (for a retry after a partial send)
REMEMBERED = 1000
REASON_MAX = 400


# ---------------------------------------------------------------- what is sent (pure)

def urls(text: str) -> list[tuple[int, str]]:
    """The (line number, URL) of each URL in a ``urls_file``: blank lines and ``#``
    comments left out."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
            if line.strip() and not line.strip().startswith("#")]


def service(url: str, line: int) -> str:
    """A service as errors name it: ``json://127.0.0.1`` for a server's scheme, else
    ``tgram (line 2)``; never a secret."""
    scheme = url.partition("://")[0].lower() if "://" in url else "?"
    scheme = scheme if re.fullmatch(r"[a-z0-9+.-]{1,20}", scheme) else "?"
    if scheme in SERVER_SCHEMES:
        try:
            host = urlsplit(url).hostname
        except ValueError:
            host = None
        if host and re.fullmatch(r"[A-Za-z0-9.:-]{1,253}", host):
            return f"{scheme}://{host} (line {line})"
    return f"{scheme} (line {line})"


def secrets_of(url: str) -> set[str]:
    """The parts of ``url`` that may be secret: user, password, host (for a scheme that
    names a server by it, none), path segments and query values (4 characters or more)."""
    try:
        parts = urlsplit(url)
        found = {parts.username, parts.password, *parts.path.split("/"),
                 *(v for _, v in parse_qsl(parts.query))}
        if url.partition("://")[0].lower() not in SERVER_SCHEMES:
            found.add(parts.hostname)
            found.add(parts.netloc.rpartition("@")[2])
    except ValueError:
        found = set(re.split(r"[/:@?&=]+", url))
    return {s for p in found if p and len(p) >= 4 for s in (p, unquote(p))}


def scrubbed(text: str, secrets: set[str]) -> str:
    """``text`` without any URL or any of ``secrets`` (longest first)."""
    text = re.sub(r"\b([a-zA-Z][a-zA-Z0-9+.-]{1,20})://\S+", r"\1://...", text)
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def notify_type(event: dict) -> str:
    action = event.get("action")
    if action == "resolve":
        return "success"
    if action == "acknowledge":
        return "info"
    return NOTIFY_TYPE.get(str(event.get("severity")), "info")


def body(event: dict) -> tuple[str, str]:
    """(title, body) of one alert: the headline; the facts, the output's first lines and
    the console's link, as plain text."""
    m = message.of(event)
    lines = [f"{name}: {value}" for name, value in m.facts()]
    if m.output:
        lines += ["", *m.output]
    if m.link:
        lines += ["", f"In the console: {m.link}"]
    return inert(m.title), inert("\n".join(lines))


def group_body(events: list[dict], title: str = "") -> tuple[str, str]:
    """(title, body) of a group: its title, one line per alert, "... and N more"."""
    group = message.of_group(events, title=title)
    return inert(group.title), inert("\n".join(group.lines()))


def group_type(events: list[dict]) -> str:
    """The most pressing notify type of a group's alerts."""
    found = {notify_type(e) for e in events}
    for kind in ("failure", "warning", "info"):
        if kind in found:
            return kind
    return "success"


# ---------------------------------------------------------------- talking to Apprise

class _NoDebug(logging.Filter):
    """Drops a logger's debug records (urllib3's say each request's path: a token)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.DEBUG


def _quiet(name: str) -> None:
    """Keep Apprise's log lines (some give a service's URL) and urllib3's debug lines
    (the path of each request Apprise makes) out of fleetwatch's log; checked at each
    send, as a logging setup made later may undo it."""
    logging.getLogger(name).propagate = False
    pool = logging.getLogger("urllib3.connectionpool")
    if not any(isinstance(f, _NoDebug) for f in pool.filters):
        pool.addFilter(_NoDebug())


def _digest(url: str) -> str:
    return hashlib.sha256(url.encode()).hexdigest()[:32]


class AppriseSender:
    def __init__(self, name: str, channel: AppriseChannel):
        self.name, self.channel, self.timeout = name, channel, channel.timeout
        #: outbox ref -> the URLs (digests) that took it, for a retry after a partial send
        self.took: OrderedDict[str, set[str]] = OrderedDict()

    def send(self, event: dict, ref: str) -> Receipt:
        return self._notify(*body(event), notify_type(event), ref)

    def send_group(self, events: list[dict], ref: str, title: str = "") -> Receipt:
        """A group of alerts as one notification (no thread: each follow-up is its own)."""
        return self._notify(*group_body(events, title), group_type(events), ref)

    def _notify(self, title: str, text: str, kind: str, ref: str) -> Receipt:
        listed = urls(read_secret(self.channel.urls_file, "urls_file"))
        if not listed:
            raise SendError(f"urls_file {self.channel.urls_file} holds no Apprise URL",
                            permanent=True, status="apprise refused")
        secrets = set().union(*(secrets_of(url) for _, url in listed))
        took = self.took.get(ref, set())
        left = [(n, url) for n, url in listed if _digest(url) not in took]
        if not left:                    # every service took it before a restart of ours
            self.took.pop(ref, None)
            return Receipt.of("apprise ok", None, f"0 services ({len(listed)} before)")
        import apprise
        _quiet(apprise.LOGGER_NAME)
        services, names = apprise.Apprise(), {}
        for n, url in left:
            if not services.add(url, tag=f"line{n}"):
                raise SendError(f"urls_file: {service(url, n)}: Apprise does not know the "
                                f"service, or its URL is malformed", permanent=True,
                                status="apprise refused")
            names[f"line{n}"] = (service(url, n), _digest(url))
        result = services.notify(body=text, title=title, notify_type=kind,
                                 body_format="text", timeout=self.channel.timeout)
        failed = []
        for one in result.results:
            tag = next((t for t in one.tag if t in names), None)
            name, digest = names.get(tag, ("?", None))
            if one.status == apprise.AppriseResultStatus.SUCCESS and digest:
                took.add(digest)
                continue
            said = "; ".join(dict.fromkeys(e.message for attempt in one for e in attempt))
            failed.append(f"{name}: {one.status.name.lower()}"
                          + (f": {scrubbed(said, secrets)}" if said else ""))
        before = len(listed) - len(left)
        if result.status == apprise.AppriseResultStatus.SUCCESS:
            self.took.pop(ref, None)
            sent = f"{len(left)} service{'s' * (len(left) != 1)}"
            return Receipt.of("apprise ok", None, sent + (f" ({before} before)" if before
                                                          else ""))
        self._remember(ref, took)
        status = result.status.name.lower()
        reason = (f"apprise {status}: {result.failed_count} of {len(left)} services failed: "
                  f"{' | '.join(failed) or 'no service answered'}")
        raise SendError(reason[:REASON_MAX], status=f"apprise {status}")

    def _remember(self, ref: str, took: set[str]) -> None:
        if took:
            self.took[ref] = took
            self.took.move_to_end(ref)
            while len(self.took) > REMEMBERED:
                self.took.popitem(last=False)
