"""``fleetwatch service install``, step by step: refuse a command the unit could not execute,
the system user, the state directory, a default config unless one exists, the unit, and
(``--enable``) ``systemctl``. Each step prints one line; a second run changes nothing and
says so.
"""

from __future__ import annotations

import os
import shlex
import sys

from fleetwatch.cli import reach, units
from fleetwatch.cli.service.task import Failure, Task
from fleetwatch.config import ConfigError, load


def router_sizes(service: units.Service, path: str) -> dict:
    """A router's ``max_agents`` (the unit's ``LimitNOFILE=``) and ``nice`` (its ``Nice=``,
    ``CPUWeight=``) from its config at ``path``, as :func:`units.render` takes them; empty
    for another process, or a config missing or broken (the defaults then:
    :meth:`Install.ensure_config` has said what is wrong with it)."""
    cfg = _config_of(service, "router", path)
    return {} if cfg is None else {"max_agents": cfg.max_agents, "nice": cfg.nice}


def _config_of(service: units.Service, process: str, path: str):
    """The config at ``path`` of ``service`` if it is a ``process``; None for another
    process, or a config missing or broken."""
    if service.process != process:
        return None
    try:
        return load(service.config_class(), path)
    except ConfigError:
        return None


def agent_needs(service: units.Service, path: str) -> dict:
    """What an agent's devices need of its unit (:func:`units.render`'s ``capabilities``
    and ``nofile``), from its config at ``path``; empty for another process, an agent
    without devices, or a config missing or broken."""
    cfg = _config_of(service, "agent", path)
    if cfg is None or not cfg.devices.hosts:
        return {}
    return {"capabilities": cfg.devices.capabilities(),
            "nofile": cfg.devices.descriptors(cfg.device_links)}


def unit_sizes(service: units.Service, path: str) -> dict:
    """What the config at ``path`` says of its unit (:func:`router_sizes`,
    :func:`agent_needs`)."""
    return {**router_sizes(service, path), **agent_needs(service, path)}


class Install(Task):
    """One install: :meth:`run` takes the steps in order."""

    def run(self) -> int:
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
        unit = units.render(service, exe, config_path, args.user, groups,
                            **unit_sizes(service, self.path(config_path)))
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
            raise Failure(os.EX_CONFIG, f"{self.service.unit} could not start as user {user}: "
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
            raise Failure(os.EX_CANTCREAT, f"useradd {user}: "
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
            raise Failure(os.EX_CANTCREAT, f"cannot create {path}: {e.strerror}") from None
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
