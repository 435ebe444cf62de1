"""``fleetwatch service install|uninstall``: a process as a systemd service on this machine.

    fleetwatch service install agent --router tcp://r1:5555 --enable
    fleetwatch service install sink alerting --root /tmp/prefix       # files only, no user
    fleetwatch service uninstall agent [--purge]

``install`` writes the unit (:mod:`fleetwatch.cli.units`) to ``ROOT/etc/systemd/system``, a
commented default config to ``ROOT/etc/fleetwatch/NAME.yaml`` unless one exists, creates the
system user (``useradd --system``) and the state directory, then prints the ``systemctl``
commands, or runs them with ``--enable``. Paths inside the unit and the config are the
target system's: ``--root`` only prefixes where files are written (like ``DESTDIR``), and
skips what needs the running system (the user, ownership, starting the service; with
``--enable`` it runs ``systemctl --root=DIR enable``, which works offline).
Without ``--root``, a command the unit could not execute (hidden by its sandbox, or closed to
the service user: :mod:`fleetwatch.cli.reach`) is refused first: one line, exit status 78.
Each step prints one line (``wrote``, ``unchanged``, ``kept``...); the last line is
``nothing changed`` when a second run had nothing to do (for Ansible's ``changed_when``).

``uninstall`` stops and disables the unit and removes it; the config, the state directory and
drop-ins stay unless ``--purge``. The system user is never removed.

This module is the command (its arguments, :func:`run`); the steps are ``install.py`` and
``uninstall.py``, over what they share in ``task.py``; ``system.py`` is the running system.
"""

from __future__ import annotations

import argparse
import os
import sys

from fleetwatch.cli import units
from fleetwatch.cli.service.install import Install, unit_sizes
from fleetwatch.cli.service.system import System
from fleetwatch.cli.service.task import Failure, Task
from fleetwatch.cli.service.uninstall import Uninstall


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="install|uninstall")
    install = actions.add_parser(
        "install", help="write the unit and a default config, create the user and state dir",
        description="Install a fleetwatch process as a systemd service.")
    uninstall = actions.add_parser(
        "uninstall", help="stop, disable and remove the unit (--purge: config and state too)",
        description="Remove a fleetwatch process's systemd service.")
    for p in (install, uninstall):
        p.add_argument("process", choices=units.PROCESSES, help="the process to (un)install")
        p.add_argument("type", nargs="?", metavar="TYPE", help="the sink type (sink only)")
        p.add_argument("--config", metavar="PATH",
                       help="config file the unit uses (default /etc/fleetwatch/NAME.yaml)")
        p.add_argument("--root", metavar="DIR",
                       help="write into this prefix; no user, no ownership, no systemctl "
                            "but `systemctl --root`")
    install.add_argument("--user", default=units.DEFAULT_USER,
                         help="system user the service runs as (default %(default)s)")
    install.add_argument("--router", action="append", default=[], metavar="ENDPOINT",
                         help="a router endpoint for a new default config (repeat for each; "
                              "agents: tcp://HOST:5555, sinks and schedulers: tcp://HOST:5556)")
    install.add_argument("--executable", metavar="PATH",
                         help="fleetwatch script for ExecStart= (default: the one of the "
                              "environment running this command)")
    install.add_argument("--enable", action="store_true",
                         help="run systemctl daemon-reload and enable --now (with --root: "
                              "systemctl --root=DIR enable)")
    install.add_argument("--print", action="store_true",
                         help="print the unit on stdout and write nothing")
    uninstall.add_argument("--purge", action="store_true",
                           help="also remove the config, the drop-ins and the state directory")


def service_of(args) -> units.Service:
    if args.process == "sink":
        from sinks import SINKS
        if not args.type:
            raise Failure(2, f"sink needs a TYPE ({', '.join(sorted(SINKS))})")
        if args.type not in SINKS:
            raise Failure(2, f"unknown sink type {args.type!r} "
                             f"(known: {', '.join(sorted(SINKS))})")
    elif args.type:
        raise Failure(2, f"{args.process} takes no TYPE (got {args.type!r})")
    if args.config and not os.path.isabs(args.config):
        raise Failure(2, f"--config {args.config}: expected an absolute path")
    return units.Service(args.process, args.type or "")


def run(args: argparse.Namespace, system: System | None = None, out=None) -> int:
    out = out or sys.stdout
    try:
        service = service_of(args)
        if args.action == "install" and args.print:
            exe = args.executable or units.executable()
            config = args.config or service.config_path
            out.write(units.render(service, exe, args.config, args.user,
                                  **unit_sizes(service, Task.at(args.root, config))))
            return 0
        task = (Install if args.action == "install" else Uninstall)(
            service, args, system or System(), out)
        return task.run()
    except Failure as e:
        print(f"fleetwatch service: {e}", file=sys.stderr)
        return e.status
