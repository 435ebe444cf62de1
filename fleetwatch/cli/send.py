"""``fleetwatch send``: hand the local agent a notification, stat, heartbeat or registration.

    fleetwatch send notify --severity error "backup failed"
    fleetwatch send stat backup.seconds 312.5
    fleetwatch send heartbeat backup
    fleetwatch send register backup --heartbeat 3600
    fleetwatch send register backup --interval 300 --plugin-timeout 20 \
        --plugin "backup_age=check_file_age -f /var/backups/last -w 90000 -c 180000"

Prints the msg_id once the agent has ACKed (a NOTIFY is then in its durable spool). Exit
status: 0 on ACK, 69 (EX_UNAVAILABLE) when no agent answers, 65 (EX_DATAERR) when the agent
refuses the message, 2 for bad arguments, 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from fleetwatch import protocol
from fleetwatch.config import ConfigError, load

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


def _plugin(text: str) -> tuple[str, str, list[str]]:
    import shlex

    from agent.plugins_config import plugin_problem
    name, eq, rest = text.partition("=")
    try:
        words = shlex.split(rest)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text[:64]!r}: {e}") from None
    if not eq or not words:
        raise argparse.ArgumentTypeError(f"{text[:64]!r} is not NAME=COMMAND [ARG...]")
    problem = plugin_problem(name.strip(), words[0], words[1:], 1.0, 1.0)
    if problem:
        raise argparse.ArgumentTypeError(f"{text[:64]!r}: {problem[0]}: {problem[1]}")
    return name.strip(), words[0], words[1:]


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
    which = p.add_mutually_exclusive_group()
    which.add_argument("--plugin", action="append", default=None, dest="plugins", type=_plugin,
                   metavar="'NAME=COMMAND [ARG...]'",
                   help="a plugin the agent runs for this process: COMMAND is a file in the "
                        "agent's plugin directories that its config lists in local.plugins, "
                        "the arguments are split like a shell "
                        "would (but no shell runs them); repeatable. Replaces the plugins "
                        "NAME declared before")
    which.add_argument("--no-plugins", action="store_true",
                   help="withdraw every plugin this process declared")
    p.add_argument("--interval", type=_positive, default=60.0, metavar="S",
                   help="seconds between scheduled runs of the plugins (default 60)")
    p.add_argument("--plugin-timeout", type=_positive, default=10.0, metavar="S",
                   help="seconds before a plugin is killed (default 10)")


def whose(path: str, error: ConfigError) -> ConfigError:
    """``error`` (the agent's config refused), or, when ``path`` is an operator config (the
    ``fleetwatch.yaml`` of status and alerts, a plausible mistake), one that says so."""
    from fleetwatch.cli.operator import OperatorConfig
    if error.key:
        try:
            load(OperatorConfig, path)
        except ConfigError:
            return error
        return ConfigError(path, "", "this is an operator config (fleetwatch.yaml: status, "
                                     "alerts, the console); `send` reads the agent's config, "
                                     f"for its intake endpoint: --config {DEFAULT_CONFIG} "
                                     "(the agent's --config), or --endpoint")
    return error


def run(args: argparse.Namespace) -> int:
    from agent.client import AgentError, AgentUnavailable, Client

    try:
        client = Client(config_path=args.config, endpoint=args.endpoint or None,
                        timeout=args.timeout, source=args.source)
    except ConfigError as e:
        raise whose(args.config, e) from None
    try:
        if args.what == "notify":
            msg_id = client.notify(" ".join(args.text), severity=args.severity)
        elif args.what == "stat":
            msg_id = client.stat(args.name, args.value)
        elif args.what == "heartbeat":
            msg_id = client.heartbeat(args.name, interval=args.interval)
        else:
            plugins = None if args.plugins is None and not args.no_plugins else [
                {"name": name, "command": command, "args": argv, "interval": args.interval,
                 "timeout": args.plugin_timeout}
                for name, command, argv in args.plugins or ()]
            msg_id = client.register(args.name, plugins=plugins, heartbeat=args.heartbeat)
    except AgentUnavailable as e:
        print(f"fleetwatch send: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    except AgentError as e:
        print(f"fleetwatch send: {e}", file=sys.stderr)
        return os.EX_DATAERR
    finally:
        client.close()
    print(msg_id)
    return 0
