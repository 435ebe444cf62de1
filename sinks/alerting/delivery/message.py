"""One message, the same in every channel: what an alert says, before any format (pure).

A channel's sender renders a :class:`Message` in its service's format (Slack's mrkdwn, HTML
for Telegram and Matrix, an Adaptive Card, Markdown for Discord and Mattermost, plain text)
with that format's escaping applied to every field, because every field but ``link`` comes
from an agent (a hostname, a check's name, its output): no agent may mention anyone, link
anything or format a message. The fields here are already on their lines with control
characters shown as escapes (``\\x1b``); a format escapes its own markup on top
(:func:`html`, :func:`markdown`).

A group of alerts (a channel's ``group_wait``) is one message too: :func:`of_group` gives
its title and one line per alert, at most ``cap``, then "... and N more".
"""

from __future__ import annotations

import html as _html
import re
from collections import Counter
from dataclasses import dataclass

from fleetwatch.display import escape, iso
from sinks.alerting.delivery import grouping
from sinks.alerting.delivery.channels import _state, headline, label

#: output lines shown under the summary
OUTPUT_LINES = 5
#: the longest line of output, host, check or summary kept
LINE_MAX = 300


def _line(text, limit: int = LINE_MAX) -> str:
    return escape(" ".join(str(text or "").split()))[:limit]


def duration(seconds: float) -> str:
    """``45s``, ``12m``, ``3h 20m``, ``2d 4h``."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h {s % 3600 // 60}m"
    return f"{s // 86400}d {s % 86400 // 3600}h"


@dataclass(frozen=True)
class Message:
    """An alert as a person reads it; every text field escaped of control characters and
    on one line (``output``: a few lines), none escaped of any format's markup."""

    label: str              # CRITICAL, RECOVERY, ACKNOWLEDGED, DOWN, UP, FLAPPING START...
    title: str              # "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%"
    host: str               # the hostname (or uuid)
    check: str | None
    state: str              # "CRITICAL (exit status 2)"
    summary: str
    output: tuple[str, ...]  # the output's first lines (without the summary's)
    since: str | None       # "2026-12-04T03:12:00.000Z (12m)": when the problem began
    parent: str | None      # the parent it is UNREACHABLE behind, where one is involved
    link: str | None        # the console's page of the problem (the operator's config)
    action: str             # trigger, acknowledge, resolve
    severity: str
    kind: str
    key: str

    @property
    def tone(self) -> str:
        """What a format colours the message by: ``ok`` for a recovery, ``acknowledge`` for
        an acknowledgement, else the severity (``critical``, ``warning``...)."""
        if self.action == "resolve":
            return "ok"
        return "acknowledge" if self.action == "acknowledge" else self.severity

    @property
    def problem(self) -> bool:
        """A trigger (not its acknowledgement or recovery)."""
        return self.action not in ("acknowledge", "resolve")

    def facts(self) -> list[tuple[str, str]]:
        """The (name, value) pairs under the title: Host, Check, State, Since, Parent."""
        out = [("Host", self.host)]
        if self.check:
            out.append(("Check", self.check))
        out.append(("State", self.state))
        if self.since:
            out.append(("Since", self.since))
        if self.parent:
            out.append(("Parent", self.parent))
        return out


def of(event: dict) -> Message:
    """The :class:`Message` of one alert event."""
    kind = str(event.get("kind") or "")
    host = event.get("hostname") or event.get("uuid") or \
        ("channel" if kind in ("channel", "test") else "?")
    summary = _line(event.get("summary"))
    lines = [_line(line) for line in str(event.get("text") or "").splitlines()
             if line.strip()]
    output = tuple(line for line in lines if line != summary)[:OUTPUT_LINES]
    since = None
    started = event.get("since")
    if isinstance(started, (int, float)):
        created = event.get("created") if isinstance(event.get("created"), (int, float)) \
            else started
        since = f"{iso(started)} ({duration(created - started)})"
    link = event.get("link")
    return Message(label=label(event), title=headline(event, LINE_MAX), host=_line(host, 255),
                   check=_line(event["check"], 255) if event.get("check") else None,
                   state=_line(_state(event)), summary=summary, output=output, since=since,
                   parent=_line(event["parent"], 255) if event.get("parent") else None,
                   link=str(link) if link else None,
                   action=str(event.get("action") or "trigger"),
                   severity=str(event.get("severity") or "error"), kind=kind,
                   key=str(event.get("key") or ""))


@dataclass(frozen=True)
class Group:
    """A group of alerts as one message: ``title`` ("12 alerts (severity critical): 10
    DOWN, 2 CRITICAL"), ``lines`` (one :class:`Message` per alert listed), ``more`` (how
    many are counted, not listed)."""

    title: str
    messages: tuple[Message, ...]
    more: int

    def lines(self) -> list[str]:
        """Each listed alert's title, then "... and N more" where some are not listed."""
        out = [m.title for m in self.messages]
        if self.more:
            out.append(f"... and {self.more} more")
        return out


def of_group(events: list[dict], cap: int = 20, title: str = "") -> Group:
    """The :class:`Group` of ``events`` (problems first, as grouping lists them), at most
    ``cap`` listed."""
    counts = Counter(label(e) for e in events)
    what = ", ".join(f"{n} {name}" for name, n in counts.most_common())
    shared = f" ({_line(title)})" if title else ""
    shown: list[Message] = []
    for _, these in grouping.sections(events):
        shown += [of(e) for e in these[:max(0, cap - len(shown))]]
    return Group(title=f"{len(events)} alerts{shared}: {what}", messages=tuple(shown),
                 more=len(events) - len(shown))


# ---------------------------------------------------------------- escaping per format

def html(text: str) -> str:
    """``text`` for HTML (Telegram's and Matrix's formatted bodies): ``& < > "`` escaped."""
    return _html.escape(text, quote=True)


_MARKDOWN = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>@<&:])")


def markdown(text: str) -> str:
    """``text`` for Markdown (Discord, Mattermost, Teams' TextBlocks): every character
    Markdown gives a meaning backslash-escaped, ``@`` too (no mention), so it shows as
    written."""
    return _MARKDOWN.sub(r"\\\1", text)
