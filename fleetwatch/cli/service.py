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
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys

from fleetwatch.cli import reach, units
from fleetwatch.config import EX_CONFIG, ConfigError, load
from fleetwatch.optional import EX_UNAVAILABLE

EX_CANTCREAT = 73
EX_NOPERM = 77


class Failure(Exception):
    """Stop with one line on stderr and an exit status."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status


class System:
    """What is asked of the running system; tests pass a fake."""

    def euid(self) -> int:
        return os.geteuid()

    def user_exists(self, name: str) -> bool:
        try:
            pwd.getpwnam(name)
            return True
        except KeyError:
            return False

    def booted(self) -> bool:
        """Whether systemd runs this machine (sd_booted(3)); not in most containers."""
        return os.path.isdir("/run/systemd/system")

    def ids(self, name: str) -> tuple[int, int]:
        entry = pwd.getpwnam(name)
        return entry.pw_uid, entry.pw_gid

    def groups(self, name: str, gid: int) -> list[int]:
        return os.getgrouplist(name, gid)

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")


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
            out.write(units.render(service, exe, args.config, args.user))
            return 0
        task = Task(service, args, system or System(), out)
        return task.install() if args.action == "install" else task.uninstall()
    except Failure as e:
        print(f"fleetwatch service: {e}", file=sys.stderr)
        return e.status


class Task:
    """One install or uninstall, step by step, each step reported on ``out``."""

    def __init__(self, service: units.Service, args, system: System, out):
        self.service, self.args, self.system, self.out = service, args, system, out
        self.root = os.path.abspath(args.root) if args.root else None
        self.changed = 0
        if self.root is None and system.euid() != 0:
            raise Failure(EX_NOPERM, f"{args.action}ing a system service needs root: run it "
                                     f"with sudo, or pass --root DIR to write the files into "
                                     f"a prefix")

    # ---------------------------------------------------------------- helpers
    def path(self, target: str) -> str:
        """Where a target-system path is written: under ``--root`` if given."""
        return os.path.join(self.root, target.lstrip("/")) if self.root else target

    def say(self, text: str, changed: bool = False) -> None:
        self.changed += changed
        print(text, file=self.out)

    def systemctl(self, *argv: str, check: bool = True) -> bool:
        root = [f"--root={self.root}"] if self.root else []
        res = self.system.run(["systemctl", *root, *argv])
        if res.returncode != 0:
            text = " ".join((res.stderr or res.stdout or "").split()) or f"exit {res.returncode}"
            if check:
                raise Failure(EX_UNAVAILABLE, f"systemctl {' '.join(argv)}: {text}")
            print(f"fleetwatch service: warning: systemctl {' '.join(argv)}: {text}",
                  file=sys.stderr)
            return False
        return True

    def write(self, target: str, text: str, mode: int, owner: tuple[int, int] | None = None,
              what: str = "") -> bool:
        path = self.path(target)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    self.say(f"unchanged {path}")
                    return False
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError):
            pass  # unreadable: replaced below
        try:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            tmp = f"{path}.fleetwatch-tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, mode)
            if owner is not None:
                os.chown(tmp, *owner)
            os.replace(tmp, path)
        except OSError as e:
            raise Failure(EX_CANTCREAT, f"cannot write {path}: {e.strerror}") from None
        self.say(f"wrote {path}{what}", changed=True)
        return True

    # ---------------------------------------------------------------- install
    def install(self) -> int:
        service, args = self.service, self.args
        exe = os.path.abspath(args.executable) if args.executable else units.executable()
        config_path = args.config or service.config_path
        if not self.root:
            self.ensure_runnable(exe, args.user)
        self.ensure_user(args.user)
        owner = None if self.root else self.system.ids(args.user)
        self.ensure_state(owner)
        self.ensure_config(config_path, (0, owner[1]) if owner else None)
        groups = self.intake_groups(config_path)
        unit = units.render(service, exe, config_path, args.user, groups)
        unit_changed = self.write(f"{units.UNIT_DIR}/{service.unit}", unit, 0o644)
        if args.enable:
            self.enable(unit_changed)
        elif self.root:
            self.say(f"next: systemctl --root={self.root} enable {service.unit} (or --enable)")
        else:
            self.say(f"next: systemctl daemon-reload && systemctl enable --now {service.unit}")
        if not self.changed:
            self.say("nothing changed")
        return 0

    def ensure_runnable(self, exe: str, user: str) -> None:
        """Refuse, before changing anything, a command the unit could not execute (systemd
        would answer 203/EXEC and restart it forever): under a directory the sandbox hides,
        or not readable by the service user, itself or its interpreter."""
        who = reach.User(user)
        if self.system.user_exists(user):
            uid, gid = self.system.ids(user)
            who = reach.User(user, uid, frozenset(self.system.groups(user, gid)))
        found = reach.problem(exe, who, units.hidden_paths(self.service))
        if found:
            raise Failure(EX_CONFIG, f"{self.service.unit} could not start as user {user}: "
                                     f"{found}; install fleetwatch in a virtualenv made from "
                                     f"the system's Python outside /root, /home and /tmp "
                                     f"(e.g. /usr/bin/python3 -m venv /opt/fleetwatch/venv)")

    def ensure_user(self, user: str) -> None:
        argv = ["useradd", "--system", "--user-group", "--home-dir", units.STATE_ROOT,
                "--no-create-home", "--shell", "/usr/sbin/nologin", "--comment",
                "fleetwatch monitoring", user]
        if self.root:
            self.say(f"user {user}: not created (--root); on the target: {shlex.join(argv)}")
            return
        if self.system.user_exists(user):
            self.say(f"user {user} exists")
            return
        res = self.system.run(argv)
        if res.returncode != 0:
            raise Failure(EX_CANTCREAT, f"useradd {user}: "
                                        f"{' '.join((res.stderr or '').split())}")
        self.say(f"created system user {user}", changed=True)

    def ensure_state(self, owner: tuple[int, int] | None) -> None:
        """The state directory, which systemd would create too (``StateDirectory=``); made
        here so that the path exists for a first manual run and for ``--root`` trees."""
        if not self.service.state_directory:
            return
        path = self.path(f"/var/lib/{self.service.state_directory}")
        if os.path.isdir(path):
            return
        try:
            os.makedirs(path, mode=0o755)
            if owner is not None:
                os.chown(path, *owner)
        except OSError as e:
            raise Failure(EX_CANTCREAT, f"cannot create {path}: {e.strerror}") from None
        self.say(f"created {path}", changed=True)

    def ensure_config(self, config_path: str, owner: tuple[int, int] | None) -> None:
        path = self.path(config_path)
        if os.path.exists(path):
            self.say(f"kept {path} (exists)")
            try:
                load(self.service.config_class(), path)
            except ConfigError as e:
                print(f"fleetwatch service: warning: {e}", file=sys.stderr)
            return
        import socket
        text = units.default_config(self.service, self.args.router, socket.gethostname())
        self.write(config_path, text, 0o640, owner, " (default config: edit it)")

    def intake_groups(self, config_path: str) -> list[str]:
        """The agent's ``intake_group``, which the unit must give the agent's user."""
        if self.service.process != "agent":
            return []
        try:
            group = load(self.service.config_class(), self.path(config_path)).intake_group
        except ConfigError:
            return []
        return [group] if group else []

    def enable(self, unit_changed: bool) -> None:
        unit = self.service.unit
        if self.root:
            wanted = self.path(f"{units.UNIT_DIR}/multi-user.target.wants/{unit}")
            if not os.path.lexists(wanted):
                self.systemctl("enable", unit)
                self.say(f"enabled {unit} in {self.root}", changed=True)
            return
        if not self.system.booted():     # links only; nothing to start
            if self.system.run(["systemctl", "is-enabled", "--quiet", unit]).returncode != 0:
                self.systemctl("enable", unit)
                self.say(f"enabled {unit} (systemd is not running here: not started)",
                         changed=True)
            return
        if unit_changed:
            self.systemctl("daemon-reload")
        running = all(self.system.run(["systemctl", query, "--quiet", unit]).returncode == 0
                      for query in ("is-enabled", "is-active"))
        if running and unit_changed:
            self.systemctl("restart", unit)
            self.say(f"restarted {unit}", changed=True)
        elif not running:
            self.systemctl("enable", "--now", unit)
            self.say(f"enabled and started {unit}", changed=True)

    # ---------------------------------------------------------------- uninstall
    def uninstall(self) -> int:
        service = self.service
        unit_path = self.path(f"{units.UNIT_DIR}/{service.unit}")
        config_path = self.args.config or installed_config(unit_path) or service.config_path
        if self.root:
            for link in glob.glob(self.path(f"{units.UNIT_DIR}/*.wants/{service.unit}")):
                os.unlink(link)
                self.say(f"removed {link}", changed=True)
        elif os.path.exists(unit_path):
            now = ["--now"] if self.system.booted() else []
            self.systemctl("disable", *now, service.unit, check=False)
        if os.path.exists(unit_path):
            os.unlink(unit_path)
            self.say(f"removed {unit_path}", changed=True)
            if not self.root and self.system.booted():
                self.systemctl("daemon-reload", check=False)
        else:
            self.say(f"no unit {unit_path}")
        if self.args.purge:
            self.purge(config_path)
        else:
            state = f", {self.path('/var/lib/' + service.state_directory)}" \
                if service.state_directory else ""
            self.say(f"kept {self.path(config_path)}{state} (--purge removes them)")
        if not self.changed:
            self.say("nothing changed")
        return 0

    def purge(self, config_path: str) -> None:
        for path in (self.path(config_path),):
            if os.path.exists(path):
                os.unlink(path)
                self.say(f"removed {path}", changed=True)
        dropins = self.path(f"{units.UNIT_DIR}/{self.service.unit}.d")
        if os.path.isdir(dropins):
            shutil.rmtree(dropins)
            self.say(f"removed {dropins}", changed=True)
        state = self.service.state_directory
        if state == "fleetwatch":    # shared by the sinks and schedulers (and holds agent/)
            users = [os.path.basename(u) for u in
                     glob.glob(self.path(f"{units.UNIT_DIR}/fleetwatch-*.service"))]
            if users:
                self.say(f"kept {self.path(units.STATE_ROOT)} (used by {', '.join(users)})")
                return
        if state:
            path = self.path(f"/var/lib/{state}")
            if os.path.isdir(path):
                shutil.rmtree(path)
                self.say(f"removed {path}", changed=True)
        for empty in (self.path(units.STATE_ROOT), self.path(units.CONFIG_DIR)):
            try:
                os.rmdir(empty)
            except OSError:
                pass    # not empty, or not there


def installed_config(unit_path: str) -> str | None:
    """The ``--config`` path of an installed unit's ExecStart=, if it can be read."""
    try:
        with open(unit_path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(r"^ExecStart=.*\s--config\s+(\S+)\s*$", text, re.M)
    return found.group(1) if found else None
