"""``fleetwatch channels [list] [--json]`` and ``fleetwatch channels test NAME``: the alert
channels' health, and a test message through one.

    fleetwatch channels [--json]            # each channel: ok, failing (since, why), unknown
    fleetwatch channels test NAME [--wait S] [--json]   # send one, print what it answered

A channel is failing after an attempt it refused for good or three in a row that failed
(:mod:`sinks.alerting.delivery.health`); it is then a fleet problem (``status --problems``,
the console) and its alerts also go to its ``fallback``. ``test`` puts a test alert in the
outbox for NAME only: a running alerting sink sends it with the channel's own settings, and
the command waits for the attempts (``--wait`` seconds, 60 by default), printing each with
the service's answer.

Exit status: 0 when listed, or when the test message was sent; 1 when it failed or was not
tried within ``--wait`` (no alerting sink running?); 2 for an unknown channel; 69 when the
state database cannot be used; 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

from fleetwatch.actions import channels
from fleetwatch.actions.database import Unavailable
from fleetwatch.cli.operator import OperatorConfig, add_config, login
from fleetwatch.config import load
from fleetwatch.display import escape, human, table

VERBS = ("list", "test")


def _list_options(parser: argparse.ArgumentParser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _test_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the channel (fleetwatch channels)")
    parser.add_argument("--wait", type=_seconds, default=60.0, metavar="SECONDS",
                        help="how long to wait for a sink to send it (default 60)")
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"expected seconds, 1 to 3600; got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    for verb, options, help_ in (
            ("list", _list_options, "each channel's health (also without the verb)"),
            ("test", _test_options, "send a test message through a channel, print what the "
                                    "service answered")):
        options(verbs.add_parser(verb, help=help_, description=help_))
    _list_options(parser)


def listing(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    try:
        found = channels.listed(config.state_url)
    except Unavailable as e:
        print(f"fleetwatch channels: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if args.json:
        print(json.dumps(channels.document(found), indent=2, ensure_ascii=False))
        return 0
    if not found:
        print("no alert channels: no alerting sink has any (alerting.delivery.channels)")
        return 0
    for c in found:
        c["why"] = " ".join(str(c["last_error"] or "").split())[:70] \
            if c["state"] == "failing" else None
    print(table(found, ["name", "type", "state", "since", "last_ok", "failures", "fallback",
                        "why"]))
    return 0


def test(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    by = f"{login()}@{socket.gethostname()}"
    try:
        event_id = channels.test(config.state_url, args.name, by, clock())
    except ValueError as e:
        print(f"fleetwatch channels: {escape(str(e))}", file=sys.stderr)
        return 2
    except Unavailable as e:
        print(f"fleetwatch channels: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if sys.stderr.isatty() or not args.json:
        print(f"test alert {event_id} put in the outbox for {args.name}; waiting up to "
              f"{args.wait:g} s for an alerting sink to send it...", file=sys.stderr,
              flush=True)
    deadline, tried = time.monotonic() + args.wait, []
    while True:
        try:
            tried = channels.outcome(config.state_url, event_id, args.name)
        except Unavailable as e:
            print(f"fleetwatch channels: {e}", file=sys.stderr)
            return os.EX_UNAVAILABLE
        done = [t for t in tried if t["outcome"] in ("sent", "failed")]
        if done or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if args.json:
        print(json.dumps({"event_id": event_id, "channel": args.name, "deliveries": tried,
                          "sent": any(t["outcome"] == "sent" for t in tried)}, indent=2,
                         ensure_ascii=False))
    else:
        for t in reversed(tried):       # oldest first, as they happened
            print(escape(f"{human(t['started_at'])}  attempt {t['attempt']}: "
                         f"{t['outcome']}  {t['status'] or 'no answer'}  "
                         f"{t['latency_ms']:.0f} ms  {t['answer']}"))
    if any(t["outcome"] == "sent" for t in tried):
        return 0
    if not tried:
        print(f"fleetwatch channels: not tried within {args.wait:g} s: is an alerting sink "
              f"running? (alert {event_id} stays in the outbox)", file=sys.stderr)
    return 1


def run(args, clock=time.time) -> int:
    return test(args, clock) if args.verb == "test" else listing(args, clock)
