"""``fleetwatch downtime add|list|remove``: plan work, once or recurring; list and end downtimes.

    fleetwatch downtime add HOST [CHECK] (--for D | --start T --end T) [--every SCHEDULE]
                            [--flexible D] [--children] [--comment TEXT] [--by NAME]
    fleetwatch downtime list [--json] [--all]       # running and planned (or all) downtimes
    fleetwatch downtime remove ID                   # end downtime ID now

A downtime is a row in the state database's ``downtimes`` table, which every alerting sink
reads when an alert is due (:mod:`sinks.alerting.downtimes.rules` says what it covers and when):
the alerts it covers are recorded as held, not delivered, and what is still wrong when it
ends is delivered then, once. ``fleetwatch silence`` is its short form (a host or check
glob, starting now, for a while).

Times (``--start``, ``--end``) are ISO 8601 (``2026-11-28T02:00``, with an offset or not),
``YYYY-MM-DD HH:MM`` or ``HH:MM`` (today): without an offset, in the local time zone of the
machine the command runs on. An ``--end HH:MM`` not after the start is the next day's.
A schedule's wall-clock hours (``--every``) are in the alerting sinks' local time zone.

A HOST (or HOST and CHECK) the fleet has never seen is refused, naming the closest known
ones (:mod:`query.known`), unless ``--force`` (a host not deployed yet).

Exit status: 2 for a usage error (an unknown host among them), 1 when ``remove`` finds no running downtime of that id,
69 (EX_UNAVAILABLE) when the state database cannot be used, 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from datetime import datetime

from fleetwatch.config import load
from fleetwatch.display import escape, human, iso, table
from fleetwatch.optional import EX_UNAVAILABLE
from fleetwatch.cli.operator import OperatorConfig, add_config, login
from fleetwatch.cli.silence import Unavailable, add_force, removed, write

VERBS = ("add", "list", "remove")
#: how far ahead ``list`` looks for a recurring downtime's next window
AHEAD = 400 * 86400.0
_CLOCK = re.compile(r"^\d{1,2}:\d{2}$")


# ---------------------------------------------------------------- arguments

def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST", help="hostname, uuid or glob (web-*)")
    parser.add_argument("check", nargs="?", metavar="CHECK",
                        help="plugin or glob (default: every alert of the host)")
    parser.add_argument("--for", dest="duration", metavar="DURATION",
                        help="how long (90s, 30m, 2h, 1d), from --start or now; with a cron "
                             "--every: each window's length")
    parser.add_argument("--start", metavar="TIME",
                        help="when it starts (default now): ISO 8601, 'YYYY-MM-DD HH:MM' or "
                             "'HH:MM' (today), local time unless an offset is given")
    parser.add_argument("--end", metavar="TIME",
                        help="when it ends (same forms; an 'HH:MM' not after the start is "
                             "the next day's); with --every: the last window's bound")
    parser.add_argument("--every", metavar="SCHEDULE",
                        help="recurring windows: 'sun 02:00-04:00', 'sat,sun 23:00-01:00', "
                             "'mon-fri 12:00-13:00', 'daily 02:00-03:00' (the sinks' local "
                             "time), or a cron expression '0 2 * * 0' with --for")
    parser.add_argument("--flexible", metavar="DURATION",
                        help="cover a problem only if it begins within a window, for this "
                             "long from then")
    parser.add_argument("--children", action="store_true",
                        help="also cover the hosts that depend on HOST")
    parser.add_argument("--comment", default="", metavar="TEXT",
                        help="why (shown in listings)")
    parser.add_argument("--by", metavar="NAME", help="who plans it (default: your login)")
    add_force(parser)
    add_config(parser)


def _list_options(parser: argparse.ArgumentParser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--all", action="store_true",
                        help="also the downtimes that ended or were removed")


def _remove_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", type=int, metavar="ID", help="the downtime's id (downtime list)")
    add_config(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, options, help_ in (
            ("add", _add_options, "plan a downtime: its alerts are held, and what is still "
                                  "wrong at its end is delivered then"),
            ("list", _list_options, "the running and planned downtimes (--all: also those "
                                    "over)"),
            ("remove", _remove_options, "end a downtime now")):
        options(verbs.add_parser(verb, help=help_, description=help_))


# ---------------------------------------------------------------- times

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


def plan(args, now: float, tz, by: str):
    """The :class:`~sinks.alerting.downtimes.rules.Downtime` ``downtime add`` asks for (id 0);
    ValueError with one line when it cannot be one."""
    from sinks.alerting.downtimes.rules import Downtime, check_text, parse_schedule
    from sinks.alerting.silences.rules import MAX_DURATION, check_pattern, parse_duration
    host = check_pattern(args.host, "HOST")
    check = check_pattern(args.check, "CHECK") if args.check is not None else None
    comment = check_text(args.comment, "--comment")
    length = parse_duration(args.duration) if args.duration is not None else None
    flexible = parse_duration(args.flexible) if args.flexible is not None else None
    start = parse_time(args.start, now, tz, "--start") if args.start is not None else now
    end = parse_time(args.end, now, tz, "--end") if args.end is not None else None
    if end is not None and end <= start and _CLOCK.match(args.end.strip()):
        end += 86400.0                  # 'HH:MM' not after the start: the next day's
    every = None
    if args.every is not None:
        every = " ".join(args.every.split())
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
        if flexible is not None and args.start is None and args.end is None:
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
                 bool(args.children), comment, by, now)
    if every is not None and not _windows(d, now, tz, 1):
        raise ValueError(f"--every {every!r}: no window before its end")
    return d


def _windows(d, now: float, tz, limit: int = 2):
    from sinks.alerting.downtimes.rules import occurrences
    return occurrences(d, max(now, d.start), max(now, d.start) + AHEAD, tz)[:limit]


# ---------------------------------------------------------------- the verbs

def create(url: str, d, force: bool = False, also=None) -> int:
    """Write the downtime ``d`` (:func:`plan`): its id; :class:`query.known.Unknown` for a
    host (or check) the fleet has never seen, unless ``force`` (the console's too). ``also``:
    as :func:`fleetwatch.cli.silence.write`'s (the console's audit row, in the same
    transaction)."""
    from query.known import refuse_unknown
    from sinks.alerting.downtimes import store as downtimestore

    def known(conn):
        refuse_unknown(conn, d.host, d.check)
    return write(url, lambda conn: downtimestore.add(conn, d), "downtimes", also,
                 first=None if force else known)


def add(args, clock=time.time, tz=None) -> int:
    from sinks.alerting.downtimes.rules import local_zone
    from sinks.alerting.silences.rules import check_pattern
    now = clock()
    tz = tz or local_zone()
    try:
        by = check_pattern(args.by, "--by") if args.by is not None else login()
        d = plan(args, now, tz, by)
    except ValueError as e:
        print(f"fleetwatch downtime: {e}", file=sys.stderr)
        return 2
    config = load(OperatorConfig, args.config)
    try:
        downtime_id = create(config.state_url, d, args.force)
    except ValueError as e:             # (query.known.Unknown: never seen)
        print(f"fleetwatch downtime: {escape(str(e))}", file=sys.stderr)
        return 2
    except Unavailable as e:
        print(f"fleetwatch downtime: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    what = f"{d.host} {d.check}" if d.check else f"{d.host} (every alert)"
    if d.children:
        what += " and the hosts that depend on it"
    if d.every:
        first = _windows(d, now, tz, 1)[0]
        when = f"every {d.every!r}" + (f" for {args.duration}" if d.duration else "") + \
            f", next {human(first[0])} to {human(first[1])}" + \
            (f", until {human(d.end)}" if d.end is not None else "")
    else:
        when = f"from {human(d.start)} until {human(d.end)}"
    if d.flexible is not None:
        when += f", flexible: {args.flexible} from a problem beginning in a window"
    print(f"downtime {downtime_id}: {what} {when} by {d.author}"
          + (f": {d.comment}" if d.comment else ""))
    return 0


def end(args, clock=time.time) -> int:
    """``downtime remove ID``: 0 when ended, 1 when no downtime ``ID`` was running or
    planned."""
    from sinks.alerting.downtimes import store as downtimestore
    return removed(args, "downtime", "downtime", "running or planned downtime",
                   lambda url: write(url, lambda conn: downtimestore.remove(conn, args.id,
                                                                            clock()),
                                     "downtimes"))


def listed(config: OperatorConfig, now: float, tz, ended: bool,
           reader=None) -> tuple[list[dict], list]:
    """The downtimes running and planned (and ``ended`` ones): (their rows, each as
    :func:`entry` lists it); the console lists them through this too, with its ``reader``.
    Unavailable when the state database cannot be read."""
    from fleetwatch.optional import MissingDependency
    from sinks.state import state_reads
    from sinks.state.reader import Reader, StateError
    try:
        reader = reader or Reader(config.state_url)
        try:
            rows = reader.read(state_reads().downtimes, now=now, ended=ended)
        finally:
            reader.close()
    except (MissingDependency, StateError) as e:
        raise Unavailable(str(e)) from None
    return rows, [entry(row, now, tz) for row in rows]


def listing(args, clock=time.time, tz=None) -> int:
    from sinks.alerting.downtimes.rules import Downtime, local_zone
    config = load(OperatorConfig, args.config)
    now = clock()
    try:
        rows, out = listed(config, now, tz or local_zone(), args.all)
    except Unavailable as e:
        print(f"fleetwatch downtime: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    if args.json:
        print(json.dumps({"downtimes": out}, indent=2, ensure_ascii=False))
        return 0
    for x, row in zip(out, rows):
        window = _windows(Downtime.from_row(row), now, tz or local_zone(), 1) \
            if x["window"] else None
        x["window"] = f"{human(window[0][0])} - {human(window[0][1])}" if window else None
        x["flexible"] = span(x["flexible"]) if x["flexible"] is not None else None
        if x["duration"]:
            x["every"] += f" for {span(x['duration'])}"
    print(table(out, ["id", "host", "check", "state", "window", "every", "flexible",
                      "children", "held", "by", "comment"]))
    return 0


def entry(row: dict, now: float, tz) -> dict:
    """A ``downtimes`` row as listed: times in ISO 8601; ``state`` (``active``: a window
    covers now, a flexible one's is open; ``planned``; ``ended``; ``removed``);
    ``window``: the current or next window; ``held``: how many distinct alerts it held back."""
    from sinks.alerting.downtimes.rules import Downtime
    d = Downtime.from_row(row)
    windows = [] if d.removed is not None else _windows(d, now, tz, 1)
    current = windows[0] if windows else None
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


VERB_RUNS = {"add": add, "list": listing, "remove": end}


def run(args, clock=time.time) -> int:
    return VERB_RUNS[args.verb](args, clock)
