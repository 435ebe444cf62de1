"""The one command, ``fleetwatch``: a subcommand per process and per operator task.

Subcommands are registered explicitly below and imported lazily, so ``fleetwatch agent``
loads only what the agent needs. Each module named here provides ``add_arguments(parser)``
and ``run(args) -> int``. A command of one noun takes verbs (``silence add|list|remove``);
its module's ``VERBS`` and ``DEFAULT_VERB`` (if any: the verb of the old spelling without
one) say which. A module that also answers an old name (an alias, registered here too)
gives its ``add_arguments`` and ``run`` in ``ALIASES``. Config errors and unusable keys exit
with status 78 (EX_CONFIG), usage errors with 2; output into a pipe whose reader left
(``| head``) ends quietly with 141.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import sys

from fleetwatch import __version__, sinktypes
from fleetwatch.config import ConfigError
from fleetwatch.security import SecurityError
from fleetwatch.sqlitefiles import Unwritable

#: the status a shell shows for a command killed by SIGPIPE (``fleetwatch tail | head``)
EX_PIPE = 128 + signal.SIGPIPE

#: name -> (module, one-line help)
COMMANDS = {
    "agent": ("agent.main", "run the agent daemon (or --once: print one stats collection)"),
    "router": ("router.main", "run a router"),
    "sink": ("sinks.main", f"run a sink of a type ({', '.join(sinktypes.NAMES)})"),
    "scheduler": ("scheduler.main", "run the declared plugins on time through the routers "
                                    "(--list: the job table)"),
    "send": ("fleetwatch.cli.send", "send a notification, stat or heartbeat through the local agent"),
    "run": ("fleetwatch.cli.run", "have an agent run a plugin now (--wait: its output and status)"),
    "status": ("fleetwatch.cli.status", "show the agents of the fleet and their checks "
                                        "(--problems: only the unhandled problems)"),
    "alerts": ("fleetwatch.cli.alerts", "list alerts and their delivery state per channel"),
    "channels": ("fleetwatch.cli.channels", "the alert channels' health: working or failing "
                                            "since when and why (channels test NAME: send "
                                            "one a test message)"),
    "rules": ("fleetwatch.cli.rules", "rules on series: what a policy would have paged over "
                                      "the lake's past (rules backtest)"),
    "slo": ("fleetwatch.cli.slo", "service level objectives: error budget left, burn rates, "
                                  "worst offenders (slo list|report)"),
    "silence": ("fleetwatch.cli.silence", "mute alerts for a while, list and end silences "
                                          "(silence add|list|remove)"),
    "silences": ("fleetwatch.cli.silence", "alias of 'silence list' "
                                           "(--remove ID: 'silence remove ID')"),
    "ack": ("fleetwatch.cli.ack", "acknowledge a problem: no more reminders; list and end "
                                  "acknowledgements (ack add|list|remove)"),
    "downtime": ("fleetwatch.cli.downtime", "plan work, once or recurring: alerts held, what "
                                            "outlives it delivered at its end; list and end "
                                            "downtimes (downtime add|list|remove)"),
    "state": ("fleetwatch.cli.state", "the state database's revision and the fleetwatch "
                                      "release that made it; migrate it now "
                                      "(state show|migrate)"),
    "forget": ("fleetwatch.cli.forget", "remove an agent gone for good (its registry and "
                                        "state rows) now"),
    "tail": ("fleetwatch.cli.tail", "print live traffic from the routers"),
    "routers": ("fleetwatch.cli.routers", "the live routers as each router sees them, and "
                                          "where they disagree (--json)"),
    "demo": ("fleetwatch.cli.demo", "start a whole fleet on this machine"),
    "keys": ("fleetwatch.cli.keys", "create and list CURVE certificates (keys new|list)"),
    "service": ("fleetwatch.cli.service", "install or remove a process's systemd unit "
                                      "(service install|uninstall)"),
    "web": ("fleetwatch.cli.web", "the operator console and the HTTP API, and their users "
                                  "and tokens (web serve|user|token)"),
    "history": ("fleetwatch.cli.history", "the history lake on Spark (history compact|sql|gaps|replay|expire|cluster|notebook|serve)"),
}


def entry(name: str):
    """Command ``name``'s module and its ``(add_arguments, run)`` (an alias's own pair)."""
    module = importlib.import_module(COMMANDS[name][0])
    return module, getattr(module, "ALIASES", {}).get(name, (module.add_arguments, module.run))


def help_width() -> int:
    """The width argparse gives help text, found as ``shutil.get_terminal_size`` finds it
    ($COLUMNS, else the terminal on stdout, else 80), less argparse's margin of 2."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns or 80) - 2


class HelpFormatter(argparse.HelpFormatter):
    """argparse's own, given its width: left to itself it imports shutil at the first
    ``add_argument``, and shutil loads zlib, bz2 and lzma (0.4 MiB of every daemon's RSS)."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        super().__init__(prog, indent_increment, max_help_position,
                         help_width() if width is None else width)


#: what ``--version`` prints, for ``fleetwatch`` and each of its commands
VERSION = f"fleetwatch {__version__}"


def parser_for(name: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"fleetwatch {name}", description=COMMANDS[name][1],
                                     formatter_class=HelpFormatter)
    parser.add_argument("--version", action="version", version=VERSION,
                        help="print fleetwatch's version and exit")
    entry(name)[1][0](parser)
    return parser


def with_default_verb(module, argv: list[str]) -> list[str]:
    """``argv`` with the module's ``DEFAULT_VERB`` in front when it names no verb (the old
    spelling ``silence HOST --for 2h`` is ``silence add HOST --for 2h``)."""
    verb = getattr(module, "DEFAULT_VERB", None)
    if verb and argv and argv[0] not in module.VERBS and \
            argv[0] not in ("-h", "--help", "--version"):
        return [verb, *argv]
    return argv


def top_parser() -> argparse.ArgumentParser:
    width = max(map(len, COMMANDS))
    lines = "\n".join(f"  {n:<{width}}  {h}" for n, (_, h) in COMMANDS.items())
    parser = argparse.ArgumentParser(
        prog="fleetwatch", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="fleetwatch: monitoring agent and router fleet on ZeroMQ",
        epilog=f"commands:\n{lines}\n\n'fleetwatch COMMAND --help' for a command's options.")
    parser.add_argument("--version", action="version", version=VERSION)
    parser.add_argument("command", choices=sorted(COMMANDS), metavar="COMMAND")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        top_parser().print_help(sys.stderr)
        return 2
    if argv[0].startswith("-") or argv[0] not in COMMANDS:
        top_parser().parse_args(argv[:1])  # --help, --version, or a usage error (exit 2)
        return 2
    name = argv[0]
    module, (_, run) = entry(name)
    rest = argv[1:] if name in getattr(module, "ALIASES", {}) else \
        with_default_verb(module, argv[1:])
    args = parser_for(name).parse_args(rest)
    try:
        code = run(args) or 0
        sys.stdout.flush()          # a reader that left shows here, not at exit
        return code
    except (ConfigError, SecurityError) as e:  # a bad config file, a missing or bad key
        print(f"fleetwatch {name}: {e}", file=sys.stderr)
        return os.EX_CONFIG
    except Unwritable as e:     # a file of the SQLite state database (its -shm...)
        print(f"fleetwatch {name}: {e}", file=sys.stderr)
        return os.EX_IOERR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        if not stdout_closed():
            raise                   # another pipe: a bug to see, not to hide
        # ``| head`` has read enough: exit quietly as a tool killed by SIGPIPE would. stdout
        # goes to /dev/null so that the flush at exit cannot fail again (Python's docs,
        # "Note on SIGPIPE").
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EX_PIPE


def stdout_closed() -> bool:
    """Whether stdout is a pipe (or socket) whose reader has gone."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError):           # no stdout, or no file descriptor behind it
        return False


if __name__ == "__main__":
    sys.exit(main())
