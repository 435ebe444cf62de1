"""What ``fleetwatch service install`` writes: the systemd unit of each process and a
commented default config. Pure functions of their arguments; :mod:`fleetwatch.cli.service` does
the writing.

Every unit is ``Type=notify`` (READY once the process's sockets are bound, STOPPING on
SIGTERM, ``WATCHDOG=1`` from its main loop: :mod:`fleetwatch.sdnotify`), reloads with
``ExecReload=`` sending SIGHUP (each re-reads its config, the router its key allowlists
too, applying what is safe while running and logging the rest as needing a restart:
:mod:`fleetwatch.reload`; ``RELOADING=1`` and ``READY=1`` frame the reload), restarts on
failure but not on a configuration error (exit 78), runs as one static system user
(``fleetwatch``), and is hardened as far as the process allows. The router, the sinks and
the scheduler need only the network and their state directory; the agent runs plugins, so
it keeps the whole process table (``/proc``), netlink, the users' groups and the
``@resources`` system calls, and it is where a drop-in adds capabilities
(docs/operating/systemd.md, "Plugins and capabilities"). What libzmq needs under a real
systemd, found by running the units there (tests/integration/test_systemd.py;
``systemd-analyze verify`` cannot see it):
``sched_setscheduler`` in every unit, netlink in the router's.

Why not ``DynamicUser=``: its state directories live under ``/var/lib/private`` (mode 0700),
where local processes could not reach the agent's intake socket, and the sinks and the
scheduler share one state database, which needs one owner across units.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import textwrap
import typing
from dataclasses import dataclass

import yaml

PROCESSES = ("agent", "router", "scheduler", "sink")
UNIT_DIR = "/etc/systemd/system"
CONFIG_DIR = "/etc/fleetwatch"
STATE_ROOT = "/var/lib/fleetwatch"
DEFAULT_USER = "fleetwatch"
WATCHDOG_SEC = 30

#: ``@resources`` (systemd 252) without ``sched_setscheduler``: libzmq's I/O thread calls
#: pthread_setschedparam() with the policy it already has and aborts when that fails
#: (src/thread.cpp), so ``~@resources`` kills every process with a ZeroMQ context
RESOURCES_REFUSED = ("ioprio_set", "mbind", "migrate_pages", "move_pages", "nice",
                     "sched_setaffinity", "sched_setattr", "sched_setparam", "set_mempolicy",
                     "set_mempolicy_home_node", "setpriority", "setrlimit")

#: placeholder endpoints written into a default config, to be edited
DEFAULT_ROUTERS = {"agent": "tcp://127.0.0.1:5555", "sink": "tcp://127.0.0.1:5556",
                   "scheduler": "tcp://127.0.0.1:5556"}


@dataclass(frozen=True)
class Service:
    """One installable process: ``agent``, ``router``, ``scheduler`` or ``sink`` of a type."""

    process: str
    sink_type: str = ""

    @property
    def name(self) -> str:
        return f"sink-{self.sink_type}" if self.process == "sink" else self.process

    @property
    def unit(self) -> str:
        return f"fleetwatch-{self.name}.service"

    @property
    def config_path(self) -> str:
        """Where the process reads its config by default (each ``main`` module agrees)."""
        return f"{CONFIG_DIR}/{self.name}.yaml"

    @property
    def state_directory(self) -> str | None:
        """``StateDirectory=`` (relative to /var/lib): the agent's own; the sinks' and the
        scheduler's shared one, holding the default SQLite state database; none for the
        stateless router."""
        return {"agent": "fleetwatch/agent", "router": None}.get(self.process, "fleetwatch")

    def argv(self, config_path: str) -> list[str]:
        kind = [self.process, self.sink_type] if self.process == "sink" else [self.process]
        return [*kind, "--config", config_path]

    def config_class(self) -> type:
        """The process's config dataclass (imported lazily: the sinks' pulls nothing heavy)."""
        if self.process == "agent":
            from agent.config import AgentConfig
            return AgentConfig
        if self.process == "router":
            from router.config import RouterConfig
            return RouterConfig
        if self.process == "sink":
            from sinks.config import SinkConfig
            return SinkConfig
        from scheduler.config import SchedulerConfig
        return SchedulerConfig


#: the comment above each unit's ExecReload= (docs/operating/systemd.md has the details)
RELOADS = {
    "agent": "# SIGHUP re-reads agent.yaml: log level, collectors, plugins, local limits",
    "router": "# SIGHUP re-reads the key allowlists and router.yaml: log level, limits, timings",
    "scheduler": "# SIGHUP re-reads scheduler.yaml (timings, log level) and the registry",
    "sink": "# SIGHUP re-reads the config: log level, timings, the alerting section",
}

DESCRIPTIONS = {
    "agent": "fleetwatch agent (stats, heartbeats, notifications, plugins)",
    "router": "fleetwatch router (relays agents' traffic to the sinks)",
    "scheduler": "fleetwatch scheduler (runs declared plugins on time)",
    "sink": "fleetwatch {type} sink",
}


def executable() -> str:
    """The ``fleetwatch`` script of the running environment (a virtualenv's bin/), else the
    one on PATH; absolute, as ``ExecStart=`` needs."""
    beside = os.path.join(os.path.dirname(os.path.abspath(sys.executable)), "fleetwatch")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("fleetwatch")
    return os.path.abspath(found) if found else beside


def hidden_paths(service: Service) -> tuple[str, ...]:
    """What the unit's sandbox hides from the service (render()'s ``ProtectHome=`` and
    ``PrivateTmp=``): nothing it executes may live there (:mod:`fleetwatch.cli.reach`)."""
    tmp = ("/tmp/", "/var/tmp/")
    return tmp if service.process == "agent" else ("/home/", "/root/", "/run/user/", *tmp)


def _quote(arg: str) -> str:
    """An ExecStart= argument: quoted when it holds spaces or quotes; ``$``/``%`` escaped."""
    arg = arg.replace("%", "%%").replace("$", "$$")
    if any(c in arg for c in " \t\"'\\;"):
        return '"' + arg.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return arg


def render(service: Service, exe: str, config_path: str | None = None,
           user: str = DEFAULT_USER, groups: typing.Sequence[str] = (),
           max_agents: int | None = None, nice: int | None = None,
           capabilities: typing.Sequence[str] = (), nofile: int | None = None) -> str:
    """The unit file text. ``groups``: supplementary groups (the agent's ``intake_group``);
    ``max_agents``: the agents a router is sized for, ``nice`` its CPU priority (its
    config's; None: the default); an agent's ``capabilities`` and ``nofile`` (what its
    devices need, :func:`fleetwatch.cli.service.install.agent_needs`)."""
    config_path = config_path or service.config_path
    agent = service.process == "agent"
    command = " ".join(_quote(a) for a in [exe, *service.argv(config_path)])
    unit = [
        "[Unit]",
        f"Description={DESCRIPTIONS[service.process].format(type=service.sink_type)}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=notify",
        "NotifyAccess=main",
        f"ExecStart={command}",
    ]
    unit.append(RELOADS[service.process])
    unit.append("ExecReload=/bin/kill -HUP $MAINPID")
    unit += [
        f"WatchdogSec={WATCHDOG_SEC}s",
        "Restart=on-failure",
        "RestartSec=2s",
        "# 78: a configuration or key problem, which a restart does not fix",
        "RestartPreventExitStatus=78",
        "TimeoutStopSec=30s",
        f"User={user}",
        f"Group={user}",
    ]
    if groups:
        unit.append(f"SupplementaryGroups={' '.join(groups)}")
    if service.state_directory:
        unit.append(f"StateDirectory={service.state_directory}")
    unit += [
        f"RuntimeDirectory=fleetwatch/{service.name}",
        "RuntimeDirectoryMode=0750",
        "UMask=0027",
        f"SyslogIdentifier=fleetwatch-{service.name}",
    ]
    if service.process == "router":
        from router.config import RouterConfig
        from router.descriptors import nofile
        agents = RouterConfig().max_agents if max_agents is None else max_agents
        unit.append(f"# sized for {agents} agents (max_agents in its config): a descriptor "
                    f"per agent connection,")
        unit.append("# as many again for reconnections, 1024 for the rest")
        unit.append(f"LimitNOFILE={nofile(agents)}")
        from router.priority import cpu_weight
        nice = RouterConfig().nice if nice is None else nice
        if nice:
            unit.append("# under CPU contention the router goes first: its agents, unanswered "
                        "for 3 heartbeats,")
            unit.append("# reconnect and cost it more (nice: in its config)")
            unit.append(f"Nice={nice}")
            unit.append(f"CPUWeight={cpu_weight(nice)}")
    if agent and nofile:
        unit.append("# its devices' connections to the routers (devices: in its config)")
        unit.append(f"LimitNOFILE={nofile}")
    held = " ".join(capabilities) if agent else ""
    unit += [
        "",
        "# Hardening (systemd.exec(5)); `systemd-analyze security` scores it.",
        "NoNewPrivileges=yes",
    ]
    if held:
        unit.append("# what its devices need (docs/operating/devices.md): ping's raw "
                    "sockets, a trap port below 1024")
    unit += [
        f"CapabilityBoundingSet={held}",
        f"AmbientCapabilities={held}",
        "ProtectSystem=strict",
        # plugins may look at /home (check_disk); nothing may write there
        "ProtectHome=read-only" if agent else "ProtectHome=yes",
        "PrivateTmp=yes",
        "PrivateDevices=yes",
        "PrivateMounts=yes",
        "ProtectKernelTunables=yes",
        "ProtectKernelModules=yes",
        "ProtectKernelLogs=yes",
        "ProtectControlGroups=yes",
        "ProtectClock=yes",
        "ProtectHostname=yes",
    ]
    if not agent:
        # the agent's collectors and plugins (check_procs) read the whole process table,
        # and chown the intake socket to a group that other users hold
        unit += ["ProtectProc=invisible", "ProcSubset=pid", "PrivateUsers=yes"]
    families = "AF_UNIX AF_INET AF_INET6"
    if agent:
        families += " AF_NETLINK"
    elif service.process == "router":
        # libzmq tries a bind address as a network interface's name first (getifaddrs(),
        # a netlink socket) and aborts if the socket is refused
        unit.append("# netlink: libzmq's bind looks the address up among the interfaces")
        families += " AF_NETLINK"
    unit += [
        f"RestrictAddressFamilies={families}",
        "RestrictNamespaces=yes",
        "RestrictRealtime=yes",
        "RestrictSUIDSGID=yes",
        "LockPersonality=yes",
        "MemoryDenyWriteExecute=yes",
        "RemoveIPC=yes",
        "KeyringMode=private",
        "SystemCallArchitectures=native",
        "SystemCallFilter=@system-service",
    ]
    if not agent:
        unit += [
            "SystemCallFilter=~@privileged",
            "# @resources but sched_setscheduler: libzmq sets each I/O thread's policy",
            "# (the one it has) and aborts if refused; RestrictRealtime= refuses real-time",
            f"SystemCallFilter=~{' '.join(RESOURCES_REFUSED)}",
        ]
    unit += [
        "SystemCallErrorNumber=EPERM",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
    ]
    return "\n".join(unit) + "\n"


# -------------------------------------------------------------------- default configs

HEADER = """\
# fleetwatch {name}: written by `fleetwatch service install` (a default; edit it).
# Lines starting with `#` and no space are settings at their defaults: remove the `#` to
# change one. Every setting and its meaning: {source}.
# CURVE is off until a `security` section is set (docs/operating/security.md).
"""
SOURCES = {"agent": "agent/config.py", "router": "router/config.py",
           "sink": "sinks/config.py", "scheduler": "scheduler/config.py"}


def default_values(service: Service, routers: typing.Sequence[str] = (),
                   hostname: str = "") -> dict:
    """The settings a default config sets (the others stay commented out at defaults)."""
    from fleetwatch.protocol import ID_PATTERN
    if service.process == "router":
        short = hostname.split(".")[0]
        return {"id": short if short and ID_PATTERN.fullmatch(short) else "router-1"}
    values: dict = {"routers": list(routers) or [DEFAULT_ROUTERS[service.process]]}
    if service.process == "sink":
        values = {"type": service.sink_type, **values}
    return values


def default_config(service: Service, routers: typing.Sequence[str] = (),
                   hostname: str = "") -> str:
    """A commented config valid for the process: the required settings set, every other
    setting present with its help and commented out at its default."""
    cls = service.config_class()
    values = default_values(service, routers, hostname)
    defaults = dataclasses.asdict(cls(**values))
    out = [HEADER.format(name=service.name, source=SOURCES[service.process])]
    for f in dataclasses.fields(cls):
        if service.process == "sink" and f.name != service.sink_type and f.name in _sinks():
            continue    # another sink type's section (graphite:, alerting:, history:)
        help_ = f.metadata.get("help", "")
        if help_:
            out += [f"# {line}" for line in textwrap.wrap(help_, 86)]
        text = yaml.safe_dump({f.name: values.get(f.name, defaults[f.name])},
                              sort_keys=False, default_flow_style=False, width=88).rstrip("\n")
        if f.name not in values:
            text = "\n".join(f"#{line}" for line in text.splitlines())
        out.append(text + "\n")
    return "\n".join(out)


def _sinks() -> dict:
    from sinks import SINKS
    return SINKS
