"""Downtimes: plan work, once or recurring; end a downtime; list them.

A downtime is a row in the state database's ``downtimes`` table, which every alerting sink
reads when an alert is due (:mod:`sinks.alerting.downtimes.rules` says what it covers and when):
the alerts it covers are recorded as held, not delivered, and what is still wrong when it
ends is delivered then, once. :func:`plan` makes one of a :class:`Request` (the options of
``fleetwatch downtime add``, the console's form), :func:`add` writes it: a host (or host and
check) the fleet has never seen is refused, naming the closest known ones
(:class:`query.known.Unknown`), unless ``force``.

Times (``start``, ``end``) are ISO 8601 (``2026-11-28T02:00``, with an offset or not),
``YYYY-MM-DD HH:MM`` or ``HH:MM`` (today): without an offset, in the time zone given
(the local one of the machine asking). An ``end`` ``HH:MM`` not after the start is the next
day's. A schedule's wall-clock hours (``every``) are in the alerting sinks' local time zone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from fleetwatch.actions.database import Unavailable, reading, write
from fleetwatch.display import iso

__all__ = ["AHEAD", "Request", "Unavailable", "add", "document", "entry", "listed",
           "parse_time", "plan", "remove", "span", "windows"]

#: how far ahead a listing looks for a recurring downtime's next window
AHEAD = 400 * 86400.0
_CLOCK = re.compile(r"^\d{1,2}:\d{2}$")


@dataclass(frozen=True)
class Request:
    """A downtime as asked for, in the words of ``downtime add``'s options: ``duration``
    (``--for``, ``2h``), ``start`` and ``end`` (times), ``every`` (a schedule),
    ``flexible`` (a duration); None where not given."""
    host: str
    check: str | None = None
    comment: str = ""
    duration: str | None = None
    start: str | None = None
    end: str | None = None
    every: str | None = None
    flexible: str | None = None
    children: bool = False


def parse_time(text: str, now: float, tz, what: str) -> float:
    """Epoch seconds of ``text`` (ISO 8601, 'YYYY-MM-DD HH:MM', 'HH:MM' today), local
    ``tz`` when it has no offset; ValueError with one line otherwise."""
    text = text.strip()
    try:
        if _CLOCK.match(text):
            hour, minute = map(int, text.split(":"))
            day = datetime.fromtimestamp(now, tz)
            moment = day.replace(hour=hour, minute=minute, second=0, microsecond=0)
        else:
            moment = datetime.fromisoformat(text)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=tz)
    except ValueError:
        raise ValueError(f"{what}: {text[:40]!r} is not a time (ISO 8601, 'YYYY-MM-DD HH:MM' "
                         f"or 'HH:MM')") from None
    return moment.timestamp()


def plan(request: Request, now: float, tz, by: str):
    """The :class:`~sinks.alerting.downtimes.rules.Downtime` ``request`` asks for (id 0), made
    ``by``; ValueError with one line, naming the option, when it cannot be one."""
    from sinks.alerting.downtimes.rules import Downtime, check_text, parse_schedule
    from sinks.alerting.silences.rules import MAX_DURATION, check_pattern, parse_duration
    r = request
    host = check_pattern(r.host, "HOST")
    check = check_pattern(r.check, "CHECK") if r.check is not None else None
    comment = check_text(r.comment, "--comment")
    length = parse_duration(r.duration) if r.duration is not None else None
    flexible = parse_duration(r.flexible) if r.flexible is not None else None
    start = parse_time(r.start, now, tz, "--start") if r.start is not None else now
    end = parse_time(r.end, now, tz, "--end") if r.end is not None else None
    if end is not None and end <= start and _CLOCK.match(r.end.strip()):
        end += 86400.0                  # 'HH:MM' not after the start: the next day's
    every = None
    if r.every is not None:
        every = " ".join(r.every.split())
        if len(every) > 255:
            raise ValueError("--every: a schedule of at most 255 characters")
        parse_schedule(every, length)   # (--for: a cron schedule's window length)
    else:
        if length is not None and end is not None:
            raise ValueError("--for and --end: give one of them")
        if length is None and end is None:
            raise ValueError("give --for DURATION, --start TIME --end TIME, or --every "
                             "SCHEDULE")
        if length is not None:
            end = start + length
        if flexible is not None and r.start is None and r.end is None:
            raise ValueError("--flexible needs a window: --start and --end, or --every")
    if end is not None:
        if end <= start:
            raise ValueError(f"the end ({iso(end)}) is not after the start ({iso(start)})")
        if end <= now:
            raise ValueError(f"the end ({iso(end)}) is in the past")
        if every is None and end - start > MAX_DURATION:
            raise ValueError(f"a downtime lasts at most {MAX_DURATION / 86400:g} days "
                             f"(--every for one that recurs)")
    d = Downtime(0, host, check, start, end, every, length if every else None, flexible,
                 bool(r.children), comment, by, now)
    if every is not None and not windows(d, now, tz, 1):
        raise ValueError(f"--every {every!r}: no window before its end")
    return d


def windows(d, now: float, tz, limit: int = 2) -> list[tuple[float, float]]:
    """The current or next ``limit`` windows of the downtime ``d``, within :data:`AHEAD`."""
    from sinks.alerting.downtimes.rules import occurrences
    return occurrences(d, max(now, d.start), max(now, d.start) + AHEAD, tz)[:limit]


def add(state_url: str, d, force: bool = False, also=None) -> int:
    """Write the downtime ``d`` (:func:`plan`): its id; :class:`query.known.Unknown` for a
    host (or check) the fleet has never seen, unless ``force``. ``also``: as
    :func:`fleetwatch.actions.database.write`'s (the console's audit row, in the same
    transaction)."""
    from query.known import refuse_unknown
    from sinks.alerting.downtimes import store as downtimestore

    def known(conn):
        refuse_unknown(conn, d.host, d.check)
    return write(state_url, lambda conn: downtimestore.add(conn, d), "downtimes", also,
                 first=None if force else known)


def remove(state_url: str, downtime_id: int, now: float, also=None) -> bool:
    """End the running or planned downtime ``downtime_id`` now; False when there was none."""
    from sinks.alerting.downtimes import store as downtimestore
    return bool(write(state_url, lambda conn: downtimestore.remove(conn, downtime_id, now),
                      "downtimes", also))


def listed(state_url: str, now: float, tz, ended: bool = False,
           reader=None) -> tuple[list[dict], list[dict]]:
    """The downtimes running and planned (and ``ended`` ones): (their rows, each as
    :func:`entry` lists it); :class:`Unavailable` when the state database cannot be read.
    ``reader``: the console's (:class:`fleetwatch.store.reader.Reader` over its engine)."""
    with reading(state_url, reader) as (reader, reads):
        rows = reader.read(reads.downtimes, now=now, ended=ended)
    return rows, [entry(row, now, tz) for row in rows]


def document(entries: list[dict]) -> dict:
    """What ``downtime list --json`` prints."""
    return {"downtimes": entries}


def entry(row: dict, now: float, tz) -> dict:
    """A ``downtimes`` row as listed: times in ISO 8601; ``state`` (``active``: a window
    covers now, a flexible one's is open; ``planned``; ``ended``; ``removed``);
    ``window``: the current or next window; ``held``: how many distinct alerts it held back."""
    from sinks.alerting.downtimes.rules import Downtime
    d = Downtime.from_row(row)
    found = [] if d.removed is not None else windows(d, now, tz, 1)
    current = found[0] if found else None
    if d.removed is not None:
        state = "removed"
    elif current is None:
        state = "ended"
    else:
        state = "active" if current[0] <= now else "planned"
    return {"id": d.id, "host": d.host, "check": d.check, "state": state,
            "window": [iso(current[0]), iso(current[1])] if current else None,
            "start": iso(d.start), "end": iso(d.end), "every": d.every,
            "duration": d.duration, "flexible": d.flexible, "children": d.children,
            "comment": d.comment, "by": d.author, "created": iso(d.created),
            "removed": iso(d.removed), "held": row.get("held", 0),
            "active": state == "active"}


def span(seconds: float) -> str:
    """``1h30m`` for 5400 seconds."""
    out, left = "", int(seconds)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m"), (1, "s")):
        if left >= size:
            out, left = out + f"{left // size}{unit}", left % size
    return out or "0s"
