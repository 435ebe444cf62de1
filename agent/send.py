"""``fleetwatch send``: hand the local agent a notification, stat, heartbeat or registration.

    fleetwatch send notify --severity error "backup failed"
    fleetwatch send stat backup.seconds 312.5
    fleetwatch send heartbeat backup
    fleetwatch send register backup --heartbeat 3600

Prints the msg_id once the agent has ACKed (a NOTIFY is then in its durable spool). Exit
status: 0 on ACK, 69 (EX_UNAVAILABLE) when no agent answers, 65 (EX_DATAERR) when the agent
refuses the message, 2 for bad arguments, 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import math
import sys

from fleetwatch import protocol

EX_DATAERR = 65
EX_UNAVAILABLE = 69
DEFAULT_CONFIG = "/etc/fleetwatch/agent.yaml"


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", default=DEFAULT_CONFIG,
                        help=f"the agent's config file, for its intake endpoint "
                             f"(default {DEFAULT_CONFIG})")
    common.add_argument("--endpoint", default="",
                        help="the agent's intake endpoint (instead of reading --config)")
    common.add_argument("--timeout", type=_positive, default=5.0,
                        help="seconds to wait for the agent's answer (default 5)")
    common.add_argument("--source", default=None, help="name of the sending program")
    sub = parser.add_subparsers(dest="what", required=True, metavar="WHAT")
    p = sub.add_parser("notify", parents=[common], help="a notification (kept until delivered)")
    p.add_argument("--severity", choices=protocol.SEVERITIES, default="error")
    p.add_argument("text", nargs="+", metavar="TEXT")
    p = sub.add_parser("stat", parents=[common], help="one metric value (at most once)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("value", type=_number, metavar="VALUE")
    p = sub.add_parser("heartbeat", parents=[common], help="a named heartbeat (at most once)")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--interval", type=_positive, default=None,
                   help="seconds until the next heartbeat is expected")
    p = sub.add_parser("register", parents=[common], help="declare a local process")
    p.add_argument("name", metavar="NAME")
    p.add_argument("--heartbeat", type=_positive, default=None, metavar="S",
                   help="the process will send a heartbeat every S seconds")
    p.add_argument("--plugin", action="append", default=[], dest="plugins",
                   help="a plugin the process provides (repeatable)")


def run(args: argparse.Namespace) -> int:
    from agent.client import AgentError, AgentUnavailable, Client

    client = Client(config_path=args.config, endpoint=args.endpoint or None,
                    timeout=args.timeout, source=args.source)
    try:
        if args.what == "notify":
            msg_id = client.notify(" ".join(args.text), severity=args.severity)
        elif args.what == "stat":
            msg_id = client.stat(args.name, args.value)
        elif args.what == "heartbeat":
            msg_id = client.heartbeat(args.name, interval=args.interval)
        else:
            msg_id = client.register(args.name, plugins=args.plugins, heartbeat=args.heartbeat)
    except AgentUnavailable as e:
        print(f"fleetwatch send: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    except AgentError as e:
        print(f"fleetwatch send: {e}", file=sys.stderr)
        return EX_DATAERR
    finally:
        client.close()
    print(msg_id)
    return 0
