"""``fleetwatch ack add|list|remove``: acknowledge a problem, list and end acknowledgements.

    fleetwatch ack add HOST [CHECK] [--comment TEXT] [--sticky] [--expire DURATION]
                       [--no-notify] [--by NAME]       # print the new acknowledgement's id
    fleetwatch ack list [--json] [--all]               # running (or all) acknowledgements
    fleetwatch ack remove ID                           # end acknowledgement ID now

An acknowledgement is a row in the state database's ``acknowledgements`` table, which every
alerting sink reads (:mod:`sinks.alerting.acks.rules` says what it holds back and when it ends);
:mod:`fleetwatch.actions.acks` makes, ends and lists them, for this command and the console.
HOST is a hostname (any case) or a uuid; with CHECK it acknowledges that check's problem
(its latest result not OK), without it the host's DOWN. ``ack add`` refuses when there is no
such problem now, and a HOST (or CHECK) the fleet has never seen, naming the closest known
ones (:mod:`query.known`; ``--force`` skips that).

Exit status: 2 for a usage error (an unknown host among them), 1 when ``add`` finds no current problem or ``remove`` no
running acknowledgement of that id, 69 (EX_UNAVAILABLE) when the state database cannot be
used, 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from fleetwatch.actions import acks
from fleetwatch.actions.acks import NoProblem, Unavailable
from fleetwatch.config import load
from fleetwatch.display import escape, human, state, table
from fleetwatch.cli.operator import OperatorConfig, add_config, login
from fleetwatch.cli.silence import add_force, removed

VERBS = ("add", "list", "remove")


# ---------------------------------------------------------------- arguments

def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST", help="hostname or uuid")
    parser.add_argument("check", nargs="?", metavar="CHECK",
                        help="plugin (default: the host's DOWN)")
    parser.add_argument("--comment", default="", metavar="TEXT",
                        help="what is being done (told to the channels, shown in listings)")
    parser.add_argument("--sticky", action="store_true",
                        help="last until recovery (default: until any state change)")
    parser.add_argument("--expire", metavar="DURATION",
                        help="end it after this long (90s, 30m, 2h, 1d): reminders resume")
    parser.add_argument("--no-notify", dest="notify", action="store_false",
                        help="do not tell the channels")
    parser.add_argument("--by", metavar="NAME", help="who acknowledges (default: your login)")
    add_force(parser)
    add_config(parser)


def _list_options(parser: argparse.ArgumentParser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--all", action="store_true",
                        help="also the acknowledgements that ended")


def _remove_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", type=int, metavar="ID", help="the acknowledgement's id (ack list)")
    add_config(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, options, help_ in (
            ("add", _add_options, "acknowledge a current problem: no more reminders"),
            ("list", _list_options, "the running acknowledgements (--all: also those ended)"),
            ("remove", _remove_options, "end an acknowledgement now")):
        options(verbs.add_parser(verb, help=help_, description=help_))


# ---------------------------------------------------------------- the verbs

def add(args, clock=time.time) -> int:
    from sinks.alerting.acks.rules import check_comment
    from sinks.alerting.silences.rules import check_pattern, parse_duration
    try:
        host = check_pattern(args.host, "HOST")
        check = check_pattern(args.check, "CHECK") if args.check is not None else None
        comment = check_comment(args.comment)
        seconds = parse_duration(args.expire) if args.expire is not None else None
        by = check_pattern(args.by, "--by") if args.by is not None else login()
    except ValueError as e:
        print(f"fleetwatch ack: {e}", file=sys.stderr)
        return 2
    config = load(OperatorConfig, args.config)
    now = clock()
    expire = now + seconds if seconds is not None else None
    try:
        made = acks.add(config.state_url, host, check, now, by, comment, args.sticky,
                        args.notify, expire, args.force)
    except ValueError as e:             # (query.known.Unknown: never seen)
        print(f"fleetwatch ack: {escape(str(e))}", file=sys.stderr)
        return 2
    except NoProblem as e:
        print(f"fleetwatch ack: {e}", file=sys.stderr)
        return 1
    except Unavailable as e:
        print(f"fleetwatch ack: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    for ack_id, uuid, status in made:
        what = f"{host} {check} ({state(status)})" if check else f"{host} (DOWN)"
        if uuid != host:
            what += f" [{uuid}]"
        lasts = "until recovery" if args.sticky or not check else "until its state changes"
        if expire is not None:
            lasts += f", at most until {human(expire)}"
        print(f"ack {ack_id}: {what} by {by} {lasts}" + (f": {comment}" if comment else ""))
    return 0


def end(args, clock=time.time) -> int:
    """``ack remove ID``: 0 when ended, 1 when no acknowledgement ``ID`` was running."""
    return removed(args, "ack", "ack", "running acknowledgement",
                   lambda url: acks.remove(url, args.id, clock()))


def listing(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    try:
        out = acks.listed(config.state_url, clock(), args.all)
    except Unavailable as e:
        print(f"fleetwatch ack: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if args.json:
        print(json.dumps(acks.document(out), indent=2, ensure_ascii=False))
        return 0
    for x in out:
        x["host"] = x["hostname"] or x["uuid"]
        x["ends"] = x["ended"] or x["until"]
    print(table(out, ["id", "host", "check", "state", "by", "sticky", "ends", "comment"]))
    return 0


VERB_RUNS = {"add": add, "list": listing, "remove": end}


def run(args, clock=time.time) -> int:
    return VERB_RUNS[args.verb](args, clock)
