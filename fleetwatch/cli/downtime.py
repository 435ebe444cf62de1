"""``fleetwatch downtime add|list|remove``: plan work, once or recurring; list and end downtimes.

    fleetwatch downtime add HOST [CHECK] (--for D | --start T --end T) [--every SCHEDULE]
                            [--flexible D] [--children] [--comment TEXT] [--by NAME]
    fleetwatch downtime list [--json] [--all]       # running and planned (or all) downtimes
    fleetwatch downtime remove ID                   # end downtime ID now

A downtime is a row in the state database's ``downtimes`` table, which every alerting sink
reads when an alert is due (:mod:`sinks.alerting.downtimes.rules` says what it covers and when;
:mod:`fleetwatch.actions.downtimes` plans, makes, ends and lists them):
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
import os
import sys
import time

from fleetwatch.actions import downtimes
from fleetwatch.actions.downtimes import Unavailable, span
from fleetwatch.config import load
from fleetwatch.display import escape, human, table
from fleetwatch.cli.operator import OperatorConfig, add_config, login
from fleetwatch.cli.silence import add_force, removed

VERBS = ("add", "list", "remove")


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


# ---------------------------------------------------------------- the verbs

def request_of(args) -> downtimes.Request:
    """The downtime ``downtime add``'s options ask for."""
    return downtimes.Request(args.host, args.check, args.comment, args.duration, args.start,
                             args.end, args.every, args.flexible, bool(args.children))


def add(args, clock=time.time, tz=None) -> int:
    from sinks.alerting.downtimes.rules import local_zone
    from sinks.alerting.silences.rules import check_pattern
    now = clock()
    tz = tz or local_zone()
    try:
        by = check_pattern(args.by, "--by") if args.by is not None else login()
        d = downtimes.plan(request_of(args), now, tz, by)
    except ValueError as e:
        print(f"fleetwatch downtime: {e}", file=sys.stderr)
        return 2
    config = load(OperatorConfig, args.config)
    try:
        downtime_id = downtimes.add(config.state_url, d, args.force)
    except ValueError as e:             # (query.known.Unknown: never seen)
        print(f"fleetwatch downtime: {escape(str(e))}", file=sys.stderr)
        return 2
    except Unavailable as e:
        print(f"fleetwatch downtime: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    what = f"{d.host} {d.check}" if d.check else f"{d.host} (every alert)"
    if d.children:
        what += " and the hosts that depend on it"
    if d.every:
        first = downtimes.windows(d, now, tz, 1)[0]
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
    return removed(args, "downtime", "downtime", "running or planned downtime",
                   lambda url: downtimes.remove(url, args.id, clock()))


def listing(args, clock=time.time, tz=None) -> int:
    from sinks.alerting.downtimes.rules import Downtime, local_zone
    config = load(OperatorConfig, args.config)
    now = clock()
    try:
        rows, out = downtimes.listed(config.state_url, now, tz or local_zone(), args.all)
    except Unavailable as e:
        print(f"fleetwatch downtime: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if args.json:
        print(json.dumps(downtimes.document(out), indent=2, ensure_ascii=False))
        return 0
    for x, row in zip(out, rows):
        window = downtimes.windows(Downtime.from_row(row), now, tz or local_zone(), 1) \
            if x["window"] else None
        x["window"] = f"{human(window[0][0])} - {human(window[0][1])}" if window else None
        x["flexible"] = span(x["flexible"]) if x["flexible"] is not None else None
        if x["duration"]:
            x["every"] += f" for {span(x['duration'])}"
    print(table(out, ["id", "host", "check", "state", "window", "every", "flexible",
                      "children", "held", "by", "comment"]))
    return 0


VERB_RUNS = {"add": add, "list": listing, "remove": end}


def run(args, clock=time.time) -> int:
    return VERB_RUNS[args.verb](args, clock)
