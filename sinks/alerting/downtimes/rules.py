"""Downtimes: planned work, once or recurring, during which a subject's alerts are held.

Pure logic with the times and the time zone passed in; no SQL (the sinks' side is
:mod:`sinks.alerting.downtimes.store`, the command :mod:`fleetwatch.cli.downtime`). The
semantics are Icinga 2's and Checkmk's downtimes:

- A downtime names a host by glob (matched against the hostname and the uuid, ignoring case,
  as silences do: :func:`sinks.alerting.silences.rules.matches`) and optionally a check by glob;
  with ``children`` it also covers every host that depends on a host it names (the
  ``ancestors`` of a host, given by the caller).
- **Fixed**: it covers ``[start, end)``. **Recurring** (``every``): it covers each window of
  its schedule from ``start`` (and until ``end`` if set): a day schedule ``"sun
  02:00-04:00"``, ``"sat,sun 23:00-01:00"`` (crossing midnight), ``"mon-fri 12:00-13:00"``,
  ``"daily 02:00-03:00"``, or a cron expression (``"0 2 * * 0"``, croniter) whose windows
  last ``duration`` each. Wall-clock times are in the sinks' local time zone, so a window
  keeps its wall-clock hours across a DST change: 02:00-04:00 lasts one hour on the
  spring-forward day (02:00-03:00 does not exist) and three on the fall-back day.
- **Flexible** (``flexible`` seconds): a window does not cover by itself; it covers a
  subject from when its problem begins, if that is within a window, for ``flexible``
  seconds (which may run past the window's end).

While a downtime covers a subject, its alerts are recorded and not delivered, and the state
machines are not told (:mod:`sinks.alerting.checks.rules`), so what is still wrong when it ends
is delivered then, once (the sinks' tick looks for covers that ended: :func:`ended`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo

from sinks.alerting.silences.rules import Silence, Subject, matches as silence_matches

Window = tuple[float, float]
#: a host's transitive parents (``sinks.alerting.dependencies.rules.Graph.ancestors``)
Ancestors = Callable[[str], Iterable[str]]
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DAY_SCHEDULE = re.compile(r"^\s*([a-z,\-]+)\s+(\d{1,2}):(\d{2})\s*-\s*(\d{1,2}):(\d{2})\s*$")
#: windows of a recurring downtime looked at, at most, per call (a cron of every minute
#: over a year is not walked to the end)
MAX_WINDOWS = 2000


def no_parents(_host: str) -> set[str]:
    return set()


@dataclass(frozen=True)
class Downtime:
    id: int
    host: str
    check: str | None
    start: float
    end: float | None               # None: a recurring one without an end
    every: str | None = None        # the schedule of a recurring one
    duration: float | None = None   # each window's length (a cron schedule's)
    flexible: float | None = None   # seconds it lasts from the problem's start
    children: bool = False
    comment: str = ""
    author: str = ""
    created: float = 0.0
    removed: float | None = None

    @classmethod
    def from_row(cls, row) -> Downtime:
        """A ``downtimes`` row (a mapping or a row with attributes) as a Downtime."""
        m = row._mapping if hasattr(row, "_mapping") else row
        return cls(m["id"], m["host"], m["check_name"], m["start"], m["end"], m["every"],
                   m["duration"], m["flexible"], bool(m["children"]), m["comment"] or "",
                   m["author"] or "", m["created"], m["removed"])


# ---------------------------------------------------------------- schedules

@dataclass(frozen=True)
class DaySchedule:
    days: frozenset[int]            # 0 = Monday
    start: tuple[int, int]          # (hour, minute)
    end: tuple[int, int]            # earlier than or equal to start: the next day


def _days(text: str) -> frozenset[int]:
    if text == "daily":
        return frozenset(range(7))
    out: set[int] = set()
    for part in text.split(","):
        ends = part.split("-")
        if len(ends) > 2 or not all(e in DAYS for e in ends):
            raise ValueError(f"{part!r}: expected days like mon, sat,sun, mon-fri or daily")
        a, b = DAYS.index(ends[0]), DAYS.index(ends[-1])
        out.update(range(a, b + 1) if a <= b else [*range(a, 7), *range(0, b + 1)])
    return frozenset(out)


def parse_schedule(text: str, duration: float | None = None):
    """A DaySchedule, or a cron expression (str) with its ``duration``; ValueError with one
    line otherwise."""
    text = " ".join(text.strip().lower().split())
    m = _DAY_SCHEDULE.match(text)
    if m:
        h1, m1, h2, m2 = map(int, m.groups()[1:])
        if h1 > 23 or h2 > 24 or m1 > 59 or m2 > 59 or (h2 == 24 and m2):
            raise ValueError(f"{text!r}: times are HH:MM, 00:00 to 24:00")
        if (h1, m1) == (h2 % 24, m2):
            raise ValueError(f"{text!r}: the window starts and ends at the same time")
        if duration is not None:
            raise ValueError("--for: a day schedule gives its windows' length already")
        return DaySchedule(_days(m.group(1)), (h1, m1), (h2, m2))
    from fleetwatch.optional import MissingDependency, optional_import
    try:
        croniter = optional_import("croniter", "a cron schedule (--every)").croniter
    except MissingDependency as e:
        raise ValueError(str(e)) from None
    if len(text.split()) != 5 or not croniter.is_valid(text):
        raise ValueError(f"{text[:40]!r} is not a schedule (like 'sun 02:00-04:00', "
                         f"'sat,sun 23:00-01:00', 'daily 02:00-03:00', or cron '0 2 * * 0')")
    if duration is None:
        raise ValueError("--every with a cron expression needs --for: each window's length")
    return text


def _at(day: date, hm: tuple[int, int], tz: tzinfo) -> float:
    """The epoch time of wall-clock ``hm`` on ``day`` in ``tz``: a time that does not exist
    (spring forward) is read with the offset before the change, so it lands after the
    gap; a time that exists twice (fall back) is its first."""
    if hm[0] == 24:
        day, hm = day + timedelta(days=1), (0, 0)
    return datetime(day.year, day.month, day.day, hm[0], hm[1], tzinfo=tz).timestamp()


def _day_windows(s: DaySchedule, since: float, until: float, tz: tzinfo) -> list[Window]:
    out: list[Window] = []
    day = datetime.fromtimestamp(since, tz).date() - timedelta(days=1)
    last = datetime.fromtimestamp(until, tz).date()
    crosses = s.end <= s.start
    while day <= last and len(out) < MAX_WINDOWS:
        if day.weekday() in s.days:
            begin = _at(day, s.start, tz)
            end = _at(day + timedelta(days=1) if crosses else day, s.end, tz)
            if end > since and begin < until:
                out.append((begin, end))
        day += timedelta(days=1)
    return out


def _cron_windows(expr: str, length: float, since: float, until: float,
                  tz: tzinfo) -> list[Window]:
    from croniter import croniter
    it = croniter(expr, datetime.fromtimestamp(since - length, tz))
    out: list[Window] = []
    previous = None
    while len(out) < MAX_WINDOWS:
        begin = it.get_next(datetime)
        wall = begin.replace(tzinfo=None)
        if wall == previous:
            continue        # the fall-back hour's second run of one wall-clock time
        previous = wall
        t = begin.timestamp()
        if t >= until:
            break
        if t + length > since:
            out.append((t, t + length))
    return out


def occurrences(downtime: Downtime, since: float, until: float,
                tz: tzinfo | None = None) -> list[Window]:
    """The windows of ``downtime`` that overlap ``[since, until)``, in order, each cut to
    the downtime's ``start`` and ``end`` (not to its removal: the caller's, see
    :func:`cover`): a fixed one's one window, a
    recurring one's windows (in ``tz``, default the local time zone), a flexible one's whole
    windows (what it may cover: a problem beginning in one, for its length)."""
    if not isinstance(downtime, Downtime):
        downtime = Downtime.from_row(downtime)
    stop = downtime.end if downtime.end is not None else float("inf")
    since, until = max(since, downtime.start), min(until, stop)
    if since >= until:
        return []
    if not downtime.every:
        return [(downtime.start, stop)]
    schedule = parse_schedule(downtime.every, downtime.duration)
    tz = tz or local_zone()
    if isinstance(schedule, DaySchedule):
        windows = _day_windows(schedule, since, until, tz)
    else:
        windows = _cron_windows(schedule, downtime.duration, since, until, tz)
    return [(max(b, downtime.start), min(e, stop)) for b, e in windows
            if min(e, stop) > max(b, downtime.start)]


def local_zone() -> tzinfo:
    """The local time zone as a zoneinfo zone (DST-aware): ``TZ``, else /etc/localtime."""
    import os
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError
    name = os.environ.get("TZ", "").lstrip(":")
    try:
        if name:
            return ZoneInfo(name)
        path = os.path.realpath("/etc/localtime")
        if "/zoneinfo/" in path:
            return ZoneInfo(path.split("/zoneinfo/", 1)[1])
        with open("/etc/localtime", "rb") as f:
            return ZoneInfo.from_file(f)
    except (OSError, ValueError, ZoneInfoNotFoundError):
        return ZoneInfo("UTC")


# ---------------------------------------------------------------- matching a subject

def names(downtime: Downtime, subject: Subject, ancestors: Ancestors = no_parents) -> bool:
    """Whether ``downtime`` names ``subject`` (host and check globs; with ``children`` a
    host whose ancestor it names too), whatever the time: the silences' one glob rule,
    asked of a silence with the downtime's globs at a time it runs."""
    probe = Silence(downtime.id, downtime.host, downtime.check, 0.0, 1.0)
    if silence_matches(probe, subject, 0.5):
        return True
    if not downtime.children or not subject.hostname:
        return False
    return any(silence_matches(probe, Subject(parent, None, subject.check), 0.5)
               for parent in ancestors(subject.hostname))


def cover(downtime: Downtime, now: float, problem: float | None = None,
          tz: tzinfo | None = None) -> Window | None:
    """The stretch of time of ``downtime`` that holds a subject's alerts at ``now`` (None:
    it does not now). ``problem``: when the subject's problem began (a flexible downtime
    covers only a problem that began in one of its windows, from then)."""
    stop = downtime.removed if downtime.removed is not None else float("inf")
    if now >= stop:
        return None
    if downtime.flexible is None:
        found = occurrences(downtime, now, now + 1e-6, tz)
        return (found[0][0], min(found[0][1], stop)) if found else None
    if problem is None or problem > now or now - problem >= downtime.flexible:
        return None
    for begin, end in occurrences(downtime, problem, problem + 1e-6, tz):
        if begin <= problem < end:
            return (problem, min(problem + downtime.flexible, stop))
    return None


def covering(downtimes: Iterable[Downtime], subject: Subject, now: float,
             problem: float | None = None, tz: tzinfo | None = None,
             ancestors: Ancestors = no_parents) -> Downtime | None:
    """The downtime holding ``subject``'s alerts at ``now`` whose cover lasts longest, or
    None."""
    found = []
    for d in downtimes:
        if not names(d, subject, ancestors):
            continue
        window = cover(d, now, problem, tz)
        if window is not None:
            found.append((window[1], -d.id, d))
    return max(found, key=lambda x: x[:2])[2] if found else None


def ended(downtime: Downtime, since: float, now: float, tz: tzinfo | None = None) -> bool:
    """Whether a cover of ``downtime`` may have ended in ``(since, now]``: a window's end or
    the removal in it; for a flexible one, a window that a problem's cover could have ended
    from (one beginning in a window, ending ``flexible`` seconds later, in that span)."""
    if downtime.removed is not None:
        if since <= downtime.removed <= now:
            return True         # (a removal at the last look's time came after that look)
        if downtime.removed < since:
            return False
    if downtime.flexible is not None:
        return bool(occurrences(downtime, since - downtime.flexible, now - downtime.flexible
                                + 1e-6, tz))
    return any(since < end <= now for _, end in occurrences(downtime, since, now + 1e-6, tz))


def check_text(text: str, what: str, limit: int = 1000) -> str:
    if len(text) > limit or "\n" in text:
        raise ValueError(f"{what}: expected one line of at most {limit} characters")
    return text
