"""Silences: planned work that mutes alerts, without stopping the state from being tracked.

A silence names a host by glob (matched against the hostname and the uuid, case-insensitive
like host names) and optionally a check by glob; it lasts from ``created`` until ``until``.

- Without a check it mutes every alert of the host: checks, flapping, DOWN/UP, notifications.
- With a check it mutes the alerts of the checks (plugins) whose name matches, the silence of
  a local process of that name, and notifications whose ``source`` matches.

A muted alert is recorded as suppressed and not delivered; the state machines
(:mod:`sinks.alerting.checks.rules`, :mod:`sinks.alerting.hosts.rules`) do not count it as told, so
whatever is still true when the silence ends is alerted then. Pure logic; the tables are in
:mod:`fleetwatch.store.schema`, the command in :mod:`fleetwatch.cli.silence`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

#: longest silence accepted (a forgotten silence should end by itself)
MAX_DURATION = 366 * 86400.0
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")


@dataclass(frozen=True)
class Silence:
    id: int
    host: str
    check: str | None
    created: float
    until: float
    reason: str = ""
    created_by: str = ""

    def active(self, now: float) -> bool:
        return self.created <= now < self.until


@dataclass(frozen=True)
class Subject:
    """What an alert is about, as silences see it."""

    uuid: str
    hostname: str | None
    check: str | None = None      # plugin, local process name or NOTIFY source; None: host


def matches(silence: Silence, subject: Subject, now: float) -> bool:
    if not silence.active(now):
        return False
    host = silence.host.lower()
    names = [subject.uuid.lower()] + ([subject.hostname.lower()] if subject.hostname else [])
    if not any(fnmatchcase(n, host) for n in names):
        return False
    if silence.check is None:
        return True
    return subject.check is not None and fnmatchcase(subject.check, silence.check)


def first_match(silences: Iterable[Silence], subject: Subject, now: float) -> Silence | None:
    """The active silence muting ``subject`` that lasts longest, or None."""
    found = [s for s in silences if matches(s, subject, now)]
    return max(found, key=lambda s: (s.until, -s.id)) if found else None


def parse_duration(text: str) -> float:
    """Seconds of ``90s``, ``30m``, ``2h``, ``1d``, ``1w``, ``1h30m`` or a plain number of
    seconds; ValueError with a one-line reason otherwise (or past :data:`MAX_DURATION`)."""
    text = text.strip().lower()
    try:
        seconds = float(text)
    except ValueError:
        pos, seconds = 0, 0.0
        for m in _DURATION.finditer(text):
            if m.start() != pos:
                break
            seconds += float(m.group(1)) * _UNITS[m.group(2)]
            pos = m.end()
        if pos != len(text) or not text:
            raise ValueError(f"{text[:20]!r} is not a duration (like 90s, 30m, 2h, 1d, 1h30m)") \
                from None
    if not 0 < seconds <= MAX_DURATION:
        raise ValueError(f"a duration must be more than 0 and at most {MAX_DURATION / 86400:g} "
                         f"days")
    return seconds


def check_pattern(text: str, what: str) -> str:
    """A host or check glob as given on the command line, checked (ValueError otherwise)."""
    if not text or len(text) > 255 or any(ord(c) < 32 for c in text):
        raise ValueError(f"{what}: expected 1 to 255 printable characters (a name or a glob)")
    return text
