"""The agent's configuration file (``agent.yaml``)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from fleetwatch.config import MAX_SOCKET_PATH, setting, socket_path_fits
from fleetwatch.protocol import ACK_OWNERS, ACKING_SINKS
from fleetwatch.security import ClientSecurity

from agent.devices.config import DevicesConfig
from agent.links import MAX_LINKS
from agent.parents import check_parents
from agent.plugins_config import PluginsConfig, command_problem, local_command_problem

_ENDPOINT = re.compile(r"^(tcp://[^\s:]+:\d+|(ipc|inproc)://\S+)$")
COLLECTORS = ("cpu", "load", "memory", "swap", "disk", "diskio", "netio", "procs", "uptime")

# ACK_OWNERS (the default of ``spool.ack_from``) and ACKING_SINKS are the protocol's (SPEC 4.2);
# tests/integration/test_agent_acks.py checks ACKING_SINKS against the sink classes.
#: The sink types whose ACKs a DEREGISTER waits for (SPEC.md 4.8): both end something.
DEREGISTER_ACKS = ("registry", "alerting")


@dataclass(frozen=True)
class SpoolConfig:
    max_messages: int = setting(100000, "unacknowledged messages kept; the oldest are dropped "
                                        "(counted and reported) past this")
    ack_timeout: float = setting(2.0, "seconds before an unacknowledged message is first resent")
    max_backoff: float = setting(60.0, "longest wait between resends of one message")
    ack_from: dict[str, list[str]] = setting(
        factory=lambda: {t: [s] for t, s in ACK_OWNERS.items()},
        help="message type -> the sink types that must each ACK a message before it leaves "
             "the spool, used only with routers older than durable routes: the routers' "
             "WELCOME says it (router `durable`; a type not given keeps its default: NOTIFY "
             "[alerting], REGISTER [registry])")

    def validate(self):
        for type_, sinks in self.ack_from.items():
            if type_ not in ACKING_SINKS:
                raise ValueError(f"ack_from: {str(type_)[:40]!r} is not a spooled message type "
                                 f"(known: {', '.join(ACKING_SINKS)})")
            if not sinks:
                raise ValueError(f"ack_from.{type_}: expected at least one sink type")
            for sink in sinks:
                if sink not in ACKING_SINKS[type_]:
                    raise ValueError(f"ack_from.{type_}: {sink[:40]!r} is not a sink type that "
                                     f"ACKs {type_} (known: {', '.join(ACKING_SINKS[type_])})")
            if len(set(sinks)) < len(sinks):
                raise ValueError(f"ack_from.{type_}: a sink type is listed twice")

    def required_acks(self) -> dict[str, tuple[str, ...]]:
        """Every spooled type -> the sink types whose ACKs it waits for (defaults filled in)."""
        return {t: tuple(self.ack_from.get(t, (owner,))) for t, owner in ACK_OWNERS.items()}


#: What a local process may hand the intake, unless ``local.allow`` narrows it.
INTAKE_TYPES = ("NOTIFY", "STATS", "HEARTBEAT", "REGISTER")
#: The default of ``local.max_metric_names``: distinct STATS names of local processes.
MAX_METRIC_NAMES = 500


@dataclass(frozen=True)
class LocalConfig:
    """What local processes may declare through the intake (refused: ERROR 403, counted)."""

    allow: list[str] = setting(factory=lambda: list(INTAKE_TYPES),
                               help=f"message types accepted: {', '.join(INTAKE_TYPES)}")
    names: list[str] = setting(factory=lambda: ["*"],
                               help="fnmatch patterns a REGISTER's or HEARTBEAT's `name` and "
                                    "a message's `source` must match (e.g. backup-*)")
    plugins: list[str] = setting(factory=list,
                                 help="commands (in plugins.dirs) that plugins declared by a "
                                      "local process may run, with the arguments the process "
                                      "gives; empty (the default): local processes declare "
                                      "no plugins. Never an exec-wrapper such as negate")
    max_metric_names: int = setting(
        MAX_METRIC_NAMES, "distinct STATS metric names local processes may send, all of "
                          "them together (a name not sent for a day frees its place); a "
                          "STATS's names past it are left out, counted "
                          "(agent.intake.names_refused) and answered ERROR 429. Keep it "
                          "below the sinks' max_names_per_host and max_series_per_host, "
                          "with room for the agent's own names")

    def validate(self):
        if self.max_metric_names < 1:
            raise ValueError("max_metric_names: expected at least 1")
        for t in self.allow:
            if t not in INTAKE_TYPES:
                raise ValueError(f"allow: unknown type {t!r} (known: {', '.join(INTAKE_TYPES)})")
        if not self.names:
            raise ValueError("names: expected at least one pattern (\"*\" for any name)")
        for command in self.plugins:
            problem = command_problem(command) or local_command_problem(command, self.plugins)
            if problem:
                raise ValueError(f"plugins: {problem}")


#: Where the OTLP/HTTP intake listens by default (OTLP's own port, this machine only)
OTLP_LISTEN = "127.0.0.1:4318"
#: Attributes not made labels by default: they name the exporting process, not the series
OTLP_DROPPED = ("service.instance.id", "telemetry.sdk.language", "telemetry.sdk.name",
                "telemetry.sdk.version")
_LISTEN = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[^\s:\[\]]+):(\d{1,5})$")


@dataclass(frozen=True)
class OtlpConfig:
    """The OTLP/HTTP metrics intake (SPEC.md 4.4.1, docs/operating/otlp.md)."""

    enabled: bool = setting(False, "listen for OTLP/HTTP metrics (POST /v1/metrics, protobuf "
                                   "or JSON) from this machine's applications; their series "
                                   "go out in the agent's STATS, as this host's")
    listen: str = setting(OTLP_LISTEN, "HOST:PORT to listen on ([::1]:PORT for IPv6; port 0: "
                                       "any free port, logged at start). Whoever reaches it "
                                       "writes series as this host: keep it on loopback")
    max_body: int = setting(4 * 1024 * 1024, "largest request body, in bytes, also once "
                                             "decompressed (413 past it)")
    max_series: int = setting(1000, "distinct series (name and labels) held, all "
                                    "applications together; a point needing one more is "
                                    "refused (agent.otlp.series_refused). A series not "
                                    "written for a day frees its place")
    max_labels: int = setting(32, "labels (resource and point attributes together) of a "
                                  "data point; past it, or a key past 100 or a value past "
                                  "255 characters, the point is refused "
                                  "(agent.otlp.labels_refused)")
    drop_attributes: list[str] = setting(
        factory=lambda: list(OTLP_DROPPED),
        help="attribute keys (of a resource or a point) not made labels. The default: the "
             "random id an OpenTelemetry SDK gives each process start, and the SDK's "
             "name, language and version, which would start new series at every restart "
             "or upgrade of an application ([] keeps every attribute)")
    interval: float = setting(10.0, "seconds between two sends of the series written "
                                    "meanwhile (the latest value of each)")

    def validate(self):
        m = _LISTEN.match(self.listen)
        if m is None or int(m.group(2)) > 65535:
            raise ValueError(f"listen: {self.listen[:60]!r} is not HOST:PORT (e.g. "
                             f"{OTLP_LISTEN})")
        if self.max_body < 1024:
            raise ValueError("max_body: expected at least 1024 bytes")
        for name in ("max_series", "max_labels"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: expected at least 1")
        if self.interval <= 0:
            raise ValueError("interval: expected a positive number of seconds")

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


@dataclass(frozen=True)
class AgentConfig:
    routers: list[str] = setting(help="agents endpoints of the routers, e.g. tcp://r1:5555")
    state_dir: str = setting("/var/lib/fleetwatch/agent",
                             "uuid file, spool database and the intake socket live here")
    intake: str = setting("", "local intake endpoint (default ipc://STATE_DIR/intake.sock); "
                              "an ipc:// path is at most 107 bytes (a Unix socket's)")
    intake_group: str = setting("", "group allowed to use the intake (socket file 0660 and "
                                    "this group); empty: the agent's user only (0600)")
    local: LocalConfig = setting(factory=LocalConfig, help="what local processes may send")
    hostname: str = setting("", "name reported for this machine (default: its host name)")
    parents: list[str] = setting(
        factory=list, help="what this machine can only be reached through, sent to the "
                           "sinks in HELLO and REGISTER: HOST (another agent's hostname, e.g. "
                           "its switch's poller) or HOST/CHECK (a check on any host, e.g. "
                           "poller-1/ping_sw3). While a parent is DOWN (or its check in a "
                           "HARD problem) this machine going silent is UNREACHABLE and pages "
                           "nobody")
    ephemeral: bool = setting(
        False, "this machine comes and goes (an autoscaled instance): silent, it is GONE, not "
               "DOWN (no page), and it is forgotten after the alerting sinks' forget_after; "
               "sent to the sinks in HELLO and REGISTER")
    deregister_on_stop: bool = setting(
        False, "at stop (SIGTERM: systemctl stop, an instance's shutdown) send a DEREGISTER "
               "and wait for the registry's and the alerting sinks' ACKs (at most "
               "deregister_timeout): its checks, RUNs and DOWN alerting end. For machines "
               "that leave for good when stopped, not for a restart")
    deregister_timeout: float = setting(
        10.0, "seconds a deregistration waits for its ACKs (at stop, or fleetwatch agent "
              "--deregister)")
    routers_k: int = setting(
        3, "routers of a mesh the agent attaches to (SPEC 4.9): the k of the live set that "
           "rendezvous hashing of its uuid ranks first (all of them when fewer are live); "
           "`routers` are then seeds, closed once a chosen router is alive and used again "
           "when none is. 0: every router named (as with routers older than meshes, which "
           "the agent always links to all)")
    heartbeat_interval: float = setting(2.0, "seconds between heartbeats to each router")
    liveness: int = setting(3, "heartbeat intervals of silence before a router is dropped")
    reconnect_min: float = setting(0.5, "first reconnect delay to a dropped router (seconds)")
    reconnect_max: float = setting(30.0, "longest reconnect delay (seconds, jittered)")
    stats_interval: float = setting(10.0, "seconds between stats collections")
    collectors: list[str] = setting(factory=lambda: list(COLLECTORS),
                                    help=f"collectors to run: {', '.join(COLLECTORS)}")
    stats_buffer: int = setting(100, "STATS batches kept while no router is up (oldest dropped)")
    spool: SpoolConfig = setting(factory=SpoolConfig, help="durable NOTIFY/REGISTER spool")
    security: ClientSecurity = setting(factory=ClientSecurity, help="CURVE keys")
    plugins: PluginsConfig = setting(factory=PluginsConfig,
                                     help="plugin directories, limits and declared checks")
    otlp: OtlpConfig = setting(factory=OtlpConfig,
                               help="the OTLP/HTTP metrics intake for local applications "
                                    "(off unless enabled)")
    devices: DevicesConfig = setting(
        factory=DevicesConfig, help="devices without an agent (switches, printers, web sites) "
                                    "that this agent polls and speaks for, each a host of "
                                    "the fleet (docs/operating/devices.md); none by default")
    log_level: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR")

    def validate(self):
        if not self.routers:
            raise ValueError("routers: expected at least one router endpoint")
        for r in self.routers:
            if not _ENDPOINT.match(r):
                raise ValueError(f"routers: {r!r} is not an endpoint like tcp://HOST:PORT")
        if self.intake and not _ENDPOINT.match(self.intake):
            raise ValueError(f"intake: {self.intake!r} is not an endpoint like ipc://PATH")
        path = self.intake_endpoint.removeprefix("ipc://")
        if self.intake_endpoint.startswith("ipc://") and not socket_path_fits(path):
            where = "intake" if self.intake else "state_dir"
            raise ValueError(f"{where}: the intake socket {path[:60]}... is "
                             f"{len(os.fsencode(path))} bytes long, a Unix socket's path at "
                             f"most {MAX_SOCKET_PATH}: choose a shorter "
                             f"{'path' if self.intake else 'state_dir, or set intake:'}")
        for c in self.collectors:
            if c not in COLLECTORS:
                raise ValueError(f"collectors: unknown collector {c!r} "
                                 f"(known: {', '.join(COLLECTORS)})")
        for name in ("heartbeat_interval", "stats_interval", "reconnect_min", "reconnect_max",
                     "deregister_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: expected a positive number of seconds")
        if self.liveness < 1:
            raise ValueError("liveness: expected at least 1")
        if not 0 <= self.routers_k <= MAX_LINKS:
            raise ValueError(f"routers_k: expected 0 (every router) to {MAX_LINKS}")
        check_parents(self.parents)

    @property
    def device_links(self) -> int:
        """Router links one device may hold: its routers_k, or each configured router."""
        return max(len(self.routers), self.routers_k, 1)

    @property
    def intake_endpoint(self) -> str:
        return self.intake or f"ipc://{os.path.join(self.state_dir, 'intake.sock')}"
