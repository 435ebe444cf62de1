"""``fleetwatch silence add|list|remove``: mute alerts for planned work, list and end silences.

    fleetwatch silence add HOST [CHECK] --for 2h [--reason TEXT]   # print the new silence's id
    fleetwatch silence list [--json] [--all]                       # running (or all) silences
    fleetwatch silence remove ID                                   # end silence ID now

A silence is a row in the state database's ``silences`` table, which every alerting sink
reads when an alert is due (:mod:`sinks.alerting.silences.rules` says what it matches);
:mod:`fleetwatch.actions.silences` makes, ends and lists them. Muted alerts
are recorded as suppressed, and the sinks keep tracking state, so what is still wrong when the
silence ends is alerted then.

The old spellings stay, with the same output and exit status: ``fleetwatch silence HOST ...``
(no verb) is ``silence add``, and ``fleetwatch silences [--json] [--all] [--remove ID]`` is
``silence list`` (``silence remove ID`` with ``--remove``): :data:`ALIASES`.

A HOST (or HOST and CHECK) the fleet has never seen is refused, naming the closest known
ones (:mod:`query.known`), unless ``--force`` (a host not deployed yet).

Exit status: 2 for a usage error (an unknown host among them), 1 when ``remove`` finds no running silence of that id,
69 (EX_UNAVAILABLE) when the state database cannot be used, 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

from fleetwatch.actions import silences
from fleetwatch.actions.database import Unavailable
from fleetwatch.config import load
from fleetwatch.display import escape, human, table
from fleetwatch.cli.operator import OperatorConfig, add_config, login

VERBS = ("add", "list", "remove")
#: the verb of the spelling without one: ``fleetwatch silence HOST --for 2h``
DEFAULT_VERB = "add"


# ---------------------------------------------------------------- arguments

def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST", help="hostname, uuid or glob (web-*)")
    parser.add_argument("check", nargs="?", metavar="CHECK",
                        help="plugin or glob (default: every alert of the host)")
    parser.add_argument("--for", dest="duration", required=True, metavar="DURATION",
                        help="how long: 90s, 30m, 2h, 1d, 1h30m")
    parser.add_argument("--reason", default="", metavar="TEXT", help="why (shown in listings)")
    add_force(parser)
    add_config(parser)


def add_force(parser: argparse.ArgumentParser) -> None:
    """``--force`` of ``silence add``, ``downtime add`` and ``ack add``."""
    parser.add_argument("--force", action="store_true",
                        help="accept a HOST (or CHECK) the fleet has never seen (one not "
                             "deployed yet); without it such a name is refused, naming the "
                             "closest known ones")


def _list_options(parser: argparse.ArgumentParser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--all", action="store_true", help="also the silences that ended")


def _remove_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", type=int, metavar="ID", help="the silence's id (silence list)")
    add_config(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, options, help_ in (
            ("add", _add_options, "mute a host's (or a check's) alerts for a while "
                                  "(also without the verb: silence HOST ...)"),
            ("list", _list_options, "the running silences (--all: also those that ended)"),
            ("remove", _remove_options, "end a silence now")):
        options(verbs.add_parser(verb, help=help_, description=help_))


def add_alias_arguments(parser: argparse.ArgumentParser) -> None:
    """``fleetwatch silences``: ``silence list``, or with ``--remove ID`` ``silence remove``."""
    _list_options(parser)
    parser.add_argument("--remove", type=int, metavar="ID", help="end silence ID now")


# ---------------------------------------------------------------- the verbs

def who() -> str:
    """Who makes a silence: ``login@host``."""
    return f"{login()}@{socket.gethostname()}"


def add(args, clock=time.time, name: str = "silence") -> int:
    from sinks.alerting.silences.rules import check_pattern, parse_duration
    try:
        host = check_pattern(args.host, "HOST")
        check = check_pattern(args.check, "CHECK") if args.check is not None else None
        seconds = parse_duration(args.duration)
        if len(args.reason) > 1000 or "\n" in args.reason:
            raise ValueError("--reason: expected one line of at most 1000 characters")
    except ValueError as e:
        print(f"fleetwatch {name}: {e}", file=sys.stderr)
        return 2
    config = load(OperatorConfig, args.config)
    now = clock()
    try:
        silence_id = silences.add(config.state_url, host, check, seconds, args.reason, now,
                                  who(), args.force)
    except ValueError as e:             # (query.known.Unknown: never seen)
        print(f"fleetwatch {name}: {escape(str(e))}", file=sys.stderr)
        return 2
    except Unavailable as e:
        print(f"fleetwatch {name}: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    what = f"{host} {check}" if check else f"{host} (every alert)"
    print(f"silence {silence_id}: {what} until {human(now + seconds)}"
          + (f": {args.reason}" if args.reason else ""))
    return 0


def removed(args, name: str, noun: str, missing: str, remove) -> int:
    """``NAME remove ID`` of silence, ack and downtime: ``remove(url)`` ends row ``args.id``
    (True) or finds none ``missing`` (1, one line on stderr: "no MISSING ID"); 0 when
    ended ("NOUN ID removed"); 69 when the state database cannot be used."""
    config = load(OperatorConfig, args.config)
    try:
        ended = remove(config.state_url)
    except Unavailable as e:
        print(f"fleetwatch {name}: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if not ended:
        print(f"fleetwatch {name}: no {missing} {args.id}", file=sys.stderr)
        return 1
    print(f"{noun} {args.id} removed")
    return 0


def end(args, clock=time.time, name: str = "silence") -> int:
    """``silence remove ID``: 0 when ended, 1 when no silence ``ID`` was running."""
    return removed(args, name, "silence", "running silence",
                   lambda url: silences.remove(url, args.id, clock()))


def listing(args, clock=time.time, name: str = "silence") -> int:
    config = load(OperatorConfig, args.config)
    try:
        out = silences.listed(config.state_url, clock(), args.all)
    except Unavailable as e:
        print(f"fleetwatch {name}: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if args.json:
        print(json.dumps(silences.document(out), indent=2, ensure_ascii=False))
        return 0
    for x in out:
        x["state"] = "active" if x["active"] else \
            "removed" if x["removed"] is not None else "ended"
        x["ends"] = x["removed"] or x["until"]
    print(table(out, ["id", "host", "check", "state", "ends", "created_by", "suppressed",
                      "reason"]))
    return 0


VERB_RUNS = {"add": add, "list": listing, "remove": end}


def run(args, clock=time.time) -> int:
    return VERB_RUNS[args.verb](args, clock)


def run_alias(args, clock=time.time) -> int:
    """``fleetwatch silences [--remove ID]``, its messages prefixed ``fleetwatch silences``."""
    if args.remove is not None:
        args.id = args.remove
        return end(args, clock, "silences")
    return listing(args, clock, "silences")


#: old name -> (add_arguments, run): the spellings this module answers besides ``silence``
ALIASES = {"silences": (add_alias_arguments, run_alias)}
