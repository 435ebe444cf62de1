"""The router's configuration file (``router.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch import sinktypes
from fleetwatch.config import setting
from fleetwatch.protocol import ACKING_SINKS
from fleetwatch.security import ServerSecurity

#: The default routing table (docs/concepts/architecture.md): message type -> sink types.
#: A router uses it cut to the sink types its ``bind.sinks`` has (:meth:`RouterConfig.
#: __post_init__`), so a router.yaml that binds its own list keeps working as types are added.
#: Derived from the table of sink types (:mod:`fleetwatch.sinktypes`: what each takes).
DEFAULT_ROUTES = sinktypes.routes()


@dataclass(frozen=True)
class RouterBind:
    agents: str = setting("tcp://*:5555", "ROUTER socket agents connect their DEALERs to")
    control: str = setting("tcp://*:5556", "ROUTER socket for sinks, schedulers and the CLI")
    tail: str = setting("tcp://*:5557", "PUB socket for `fleetwatch tail` (XPUB)")
    sites: str = setting(
        "", "ROUTER socket site routers connect their uplinks to (SPEC 4.10); empty: "
            "this router accepts no sites")
    sinks: dict[str, str] = setting(
        help="one PUSH socket per sink type: type -> endpoint",
        factory=sinktypes.endpoints)


@dataclass(frozen=True)
class RouterLimits:
    max_message_bytes: int = setting(256 * 1024, "largest frame accepted from any peer")
    sink_hwm: int = setting(10000, "messages queued per sink connection before drops")
    agent_hwm: int = setting(1000, "messages queued per agent before sends to it fail")
    tail_hwm: int = setting(1000, "messages queued per tail subscriber before drops")
    tail_topics: int = setting(
        10000, "distinct tail topics subscribed above which each new subscription is counted "
               "(router.tail.excess) and logged")
    drain: int = setting(256, "messages handled per socket per poll wake-up")
    rate: float = setting(1000.0, "messages per second one agent may send (token bucket)")
    burst: float = setting(5000.0, "messages one agent may send at once above its rate")
    hellos_per_second: float = setting(
        2000.0, "most new agent attachments processed per second; the pace follows the "
                "router's load below it (at least 500/s); HELLOs above are dropped and the "
                "agents retry (admission pacing for reconnect storms)")
    careful_seconds: float = setting(
        10.0, "after a malformed or refused agent message, check every frame boundary for "
              "this long (SPEC 8)")


@dataclass(frozen=True)
class RouterMesh:
    """Routers that find each other (SPEC 4.9)."""

    seeds: list[str] = setting(
        factory=list, help="control endpoints of other routers to join (one is enough: "
                           "the others are learnt from it); empty: this router is alone")
    interval: float = setting(1.0, "seconds between gossip rounds (MEMBERS to `fanout` "
                                   "members and every seed not yet known live)")
    expire_intervals: int = setting(
        5, "a router whose beat has not advanced for this many intervals is dead: out of "
           "the live set (WELCOME, PEERS of agents then drop it)")
    fanout: int = setting(3, "live members told each round, chosen at random")
    forget_after: float = setting(
        86_400.0, "seconds a dead router is kept after its beat last advanced (a tombstone: "
                  "`status` and the console list it as a router DOWN meanwhile)")
    key: str = setting(
        "", "with CURVE: the SECRET certificate this router presents when it joins others "
            "(their `security.routers` must list its public key); empty: its "
            "`security.server_key`, the fleet's router certificate")

    def validate(self):
        if not 0.05 <= self.interval <= 60:
            raise ValueError("interval: expected 0.05 to 60 seconds")
        if not 2 <= self.expire_intervals <= 1000:
            raise ValueError("expire_intervals: expected 2 to 1000 intervals")
        if not 1 <= self.fanout <= 64:
            raise ValueError("fanout: expected 1 to 64 members a round")
        if self.forget_after < 3 * self.expire_intervals * self.interval:
            raise ValueError("forget_after: expected at least 3 times expire_intervals x "
                             "interval seconds")
        for n, seed in enumerate(self.seeds):
            if not seed.startswith(("tcp://", "ipc://", "inproc://")) or len(seed) > 255:
                raise ValueError(f"seeds[{n}]: expected a control endpoint "
                                 f"(tcp://HOST:PORT), got {seed[:60]!r}")


@dataclass(frozen=True)
class RouterSite:
    """A site router's uplink (SPEC 4.10), and what a central router allows its sites."""

    interval: float = setting(1.0, "seconds between the uplink's HEARTBEATs (the site "
                                   "router's own, upstream)")
    expire_intervals: int = setting(
        3, "the uplink is down once no answer came for this many intervals (the site's "
           "NOTIFY and REGISTER are then answered 503, the rest buffered); a central router "
           "forgets a site silent for as long")
    buffer_messages: int = setting(
        10000, "best-effort messages (all but the durable types) held in memory while the "
               "uplink is down; beyond, the oldest go to the spool, or are dropped without one")
    spool_dir: str = setting("", "directory of the disk buffer behind the memory one; "
                                 "empty: none")
    spool_bytes: int = setting(100 * 1024 * 1024,
                               "most bytes the disk buffer holds; beyond, its oldest "
                               "messages are dropped and counted")
    max_agents: int = setting(
        100_000, "on a central router: most agent uuids one site link may speak for; "
                 "messages of more are refused 403")
    key: str = setting(
        "", "with CURVE, on a site router: the SECRET certificate its uplinks present (`fleetwatch "
            "keys new site ID DIR`: named by the site's id); the central routers' "
            "`security.sites` lists its public key")

    def validate(self):
        if not 0.05 <= self.interval <= 60:
            raise ValueError("interval: expected 0.05 to 60 seconds")
        if not 2 <= self.expire_intervals <= 1000:
            raise ValueError("expire_intervals: expected 2 to 1000 intervals")
        if self.buffer_messages < 1:
            raise ValueError("buffer_messages: expected at least 1 message")
        if self.spool_bytes < 0:
            raise ValueError("spool_bytes: expected a number of bytes, 0 or more")
        if self.max_agents < 1:
            raise ValueError("max_agents: expected at least 1 uuid")


@dataclass(frozen=True)
class RouterConfig:
    id: str = setting("router-1", "this router's id, stamped on every relayed message")
    bind: RouterBind = setting(factory=RouterBind, help="endpoints to bind")
    advertise_host: str = setting(
        "", "host name told to peers for endpoints bound on a wildcard address "
            "(default: this machine's fully qualified name)")
    peers: list[str] = setting(
        factory=list, help="agents endpoints of the other routers, told to agents in WELCOME "
                           "after the live routers of `mesh`")
    mesh: RouterMesh = setting(factory=RouterMesh,
                               help="routers that find each other: seeds, gossip timing")
    upstream: list[str] = setting(
        factory=list, help="sites endpoints (`bind.sites`) of the central routers this site "
                           "router forwards its agents' traffic to, one outbound connection "
                           "each, the first alive used (SPEC 4.10); empty: not a site")
    site: RouterSite = setting(factory=RouterSite,
                               help="the uplink's timing and buffer; a central router's "
                                    "bound on its sites")
    routes: dict[str, list[str]] = setting(
        factory=lambda: {k: list(v) for k, v in DEFAULT_ROUTES.items()},
        help="message type -> sink types it is relayed to (default: SPEC 4.1's table, cut to "
             "the sink types bind.sinks has)")
    durable: dict[str, list[str]] = setting(
        factory=lambda: {k: list(v) for k, v in ACKING_SINKS.items()},
        help="spooled message type -> the sink types that must each ACK it before an agent "
             "lets it go, where `routes` sends it there (told to agents in WELCOME; a type "
             "not given keeps its default: NOTIFY [alerting, history], REGISTER [registry, "
             "history]). A route left out is best effort")
    expiry_intervals: float = setting(
        3.0, "an agent silent for this many of its heartbeat intervals is forgotten")
    max_agents: int = setting(
        10000, "agents this router is sized for: its unit (`fleetwatch service install "
               "router`) allows it 2 file descriptors per agent and 1,024 more "
               "(LimitNOFILE=); started outside a unit it raises its soft limit that far if "
               "the hard limit allows. Its STATS report the descriptors used (router.fd_*)")
    stats_interval: float = setting(10.0, "seconds between the router's own STATS")
    nice: int = setting(
        -10, "CPU priority the router takes at start (-20 to 19; its unit's Nice= and "
             "CPUWeight=): under contention it goes first, or its agents, unanswered for 3 "
             "heartbeats, reconnect and cost it more (router/priority.py). Lowering needs "
             "root or CAP_SYS_NICE, else a warning; 0 leaves the priority alone")
    limits: RouterLimits = setting(factory=RouterLimits, help="sizes and queue bounds")
    security: ServerSecurity = setting(factory=ServerSecurity, help="CURVE and allowlists")
    ready_file: str = setting("", "if set, the bound endpoints are written here as JSON")
    log_level: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR")

    def __post_init__(self):
        # The default table names every sink type; a router binding fewer (its own
        # bind.sinks, written before a type existed) routes to those it has. A table the
        # config gives is kept as it is, and validate() refuses a type without an endpoint.
        if self.routes == DEFAULT_ROUTES:
            object.__setattr__(self, "routes", {
                t: [s for s in sinks if s in self.bind.sinks] for t, sinks in self.routes.items()})

    def validate(self):
        from fleetwatch.protocol import AGENT_TYPES, ID_PATTERN, MAX_ID
        if not ID_PATTERN.fullmatch(self.id):
            raise ValueError(f"id: expected 1 to {MAX_ID} letters, digits or ._:@- "
                             f"(starting with a letter or digit)")
        for type_, sinks in self.routes.items():
            if type_ not in AGENT_TYPES:
                raise ValueError(f"routes.{type_}: expected one of {', '.join(sorted(AGENT_TYPES))}")
            for sink in sinks:
                if sink not in self.bind.sinks:
                    raise ValueError(f"routes.{type_}: sink type {sink!r} has no endpoint "
                                     f"in bind.sinks")
        for type_, sinks in self.durable.items():
            if type_ not in ACKING_SINKS:
                raise ValueError(f"durable.{str(type_)[:40]}: expected one of "
                                 f"{', '.join(ACKING_SINKS)} (the types agents spool)")
            for sink in sinks:
                if sink not in ACKING_SINKS[type_]:
                    raise ValueError(f"durable.{type_}: {str(sink)[:40]!r} does not ACK {type_} "
                                     f"(those that do: {', '.join(ACKING_SINKS[type_])})")
        for name in ("rate", "burst", "hellos_per_second"):
            if getattr(self.limits, name) <= 0:
                raise ValueError(f"limits.{name}: expected a positive number")
        if self.expiry_intervals < 1:
            raise ValueError("expiry_intervals: expected a number of at least 1")
        from router.descriptors import MAX_AGENTS
        if not 1 <= self.max_agents <= MAX_AGENTS:
            raise ValueError(f"max_agents: expected 1 to {MAX_AGENTS:,} (more: another router)")
        if self.stats_interval <= 0:
            raise ValueError("stats_interval: expected a positive number of seconds")
        if isinstance(self.nice, bool) or not -20 <= self.nice <= 19:
            raise ValueError("nice: expected a whole number from -20 (first) to 19 (last)")
        for n, up in enumerate(self.upstream):
            if not up.startswith(("tcp://", "ipc://", "inproc://")) or len(up) > 255:
                raise ValueError(f"upstream[{n}]: expected a sites endpoint "
                                 f"(tcp://HOST:PORT), got {up[:60]!r}")
        if self.security.curve and self.upstream and not self.site.key:
            raise ValueError("site.key: required with curve when upstream is set (the "
                             "SECRET certificate of the site, SPEC 4.10)")
        if self.security.curve and self.bind.sites and not self.security.sites:
            raise ValueError("security.sites: required with curve when bind.sites is set "
                             "(the sites' public keys allowed to link, SPEC 4.10)")
        if self.security.curve and self.mesh.seeds and not self.security.routers:
            raise ValueError("security.routers: required with curve when mesh.seeds is set "
                             "(the routers' public keys allowed to join, SPEC 7.4)")

    def durable_routes(self) -> dict[str, list[str]]:
        """Every spooled type -> the sink types it must be ACKed by (SPEC 4.1): those of
        ``durable`` (defaults filled in) that ``routes`` relays it to, in the routes' order."""
        wanted = {**ACKING_SINKS, **self.durable}
        return {t: [s for s in dict.fromkeys(self.routes.get(t, ())) if s in wanted[t]]
                for t in ACKING_SINKS}
