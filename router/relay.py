"""The router's socket loop: agents ROUTER, control ROUTER, one PUSH per sink type, tail XPUB.

A thin adapter: set-up, the main loop and the answers the other modules send through it.
Its parts: the agents socket's reading, the hot path and its exits to the slow path
(:class:`router.intake.Intake`; the relay picks fast, or careful for a while after a
malformed message); the sending to each sink type of a route, upstream and the tail
(:class:`router.fanout.Fanout`, :class:`router.tail.Tail`); the site links below and above
(:class:`router.sitelinks.SiteLinks`); its own STATS (:class:`router.report.Report`).
HELLO, bad frames and unknown peers go as frames to :class:`router.admission.Admission`
(key-bound uuids, the limits), control requests to :class:`router.control.ControlDesk`.
Neither sees a socket or this class: each gets the peers, the counters, its clocks and a
:class:`router.port.RelayPort` over its ROUTER socket, through which it answers, refuses and
relays. CURVE's server keys, ZAP and handshake monitors are its :class:`router.doorman.Doorman`.
The hot path trusts the routing id, bound to a uuid by its connection's HELLO: so no
``ROUTER_HANDOVER`` on the agents socket, and libzmq's routing ids are seeded (SPEC 7.3).
"""

from __future__ import annotations

import logging
import socket
import time
from types import MethodType

import zmq
import zmq.backend

from fleetwatch import __version__, protocol
from fleetwatch.heap import Trimmer
from fleetwatch.logs import Throttle
from fleetwatch.protocol import ACKING_SINKS, AGENT_TYPES, Message, ProtocolError
from router.admission import Admission, connection_property
from router.claims import Claims
from router.config import RouterConfig
from router.control import ControlDesk
from router.counters import Counters
from router.descriptors import Descriptors
from router.doorman import FAILED, Doorman
from router.drops import DropLedger
from router.fanout import Fanout
from router.guard import Busy
from router.intake import Intake
from router.members import ENDPOINTS, Members
from router.mesh import Mesh, mesh_keys
from router.peers import Peers
from router.port import RelayPort
from router.presence import SinkPresence
from fleetwatch.rcvmore import rcvmore_reader
from router.reload import sighup
from router.replies import ReplyLimiter
from router.report import Report
from router.rids import seed_libzmq_counters
from router.routes import RoutingTable
from router.sitelinks import SiteLinks
from router.sockets import RouterSockets
from router.tail import Tail

log = logging.getLogger(__name__)

NOBLOCK = zmq.NOBLOCK
SWEEP_PERIOD = 0.25
MAX_POLL = 0.25
#: longest poll while HELLOs wait for the admission pace (its tokens accrue continuously)
WAITING_POLL = 0.01
#: agents sent a new WELCOME per sweep once the mesh's live set changed (SPEC 4.9)
ANNOUNCE_BATCH = 2000


class Relay:
    """One router: ``bind()``, then ``run()`` until :meth:`stop`; ``close()`` at the end."""

    def __init__(self, config: RouterConfig, context: zmq.Context | None = None,
                 clock=time.time, monotonic=time.monotonic, fqdn=socket.getfqdn):
        self.config = config
        self.id = config.id
        self.id_frame = config.id.encode("ascii")
        self.max_body = config.limits.max_message_bytes
        self.drain = max(1, config.limits.drain)
        self.clock, self.monotonic, self.fqdn = clock, monotonic, fqdn
        self._own_context = context is None
        seed_libzmq_counters()
        # CURVE encrypts and decrypts in libzmq's I/O threads: give it two (bench/curve.py)
        self.ctx = context or zmq.Context(io_threads=2 if config.security.curve else 1)
        self.peers = Peers(config.expiry_intervals, clock, self.id_frame)
        self.counters = Counters(AGENT_TYPES)
        #: descriptors used against the limit, reported in STATS (warns when few are left)
        self.descriptors = Descriptors(clock=monotonic)
        self.limiter = ReplyLimiter(1.0, monotonic)
        #: the 503s of durable routes have their own (they must not hold back a 401)
        self.durable_limiter = ReplyLimiter(1.0, monotonic)
        #: how much of its time the loop works (admission paces itself by it)
        self.busy = Busy(monotonic)
        #: the agents socket was last found empty at this time (epoch seconds): every
        #: message an agent sent before it has been read. Silence is judged up to here, not
        #: up to now: a router whose inbound queue is behind does not expire the agents
        #: whose heartbeats wait in that queue (SPEC 7.6)
        self.read_up_to = clock()
        #: the freed buffers of closed connections go back to the system after churn
        self.heap = Trimmer(monotonic=monotonic)
        self.throttle = Throttle(log, 10.0, monotonic)
        self.endpoints: dict = {}
        self.stopping = False
        self.sockets: list[zmq.Socket] = []
        #: until this monotonic time, every frame boundary of agent traffic is checked
        self.careful_until = 0.0
        self.careful_for = config.limits.careful_seconds
        #: set by SIGHUP (:meth:`reload`): re-read the allowlists and the config at the next
        #: wake-up (router/reload.py); ``fleetwatch router`` sets the config's reloader and
        #: systemd's notifier, told RELOADING=1 and READY=1 around each reload
        self.reload_requested = False
        self.reloader = None
        self.notifier = None
        #: CURVE server keys, ZAP and handshake monitors (made at bind, with CURVE only)
        self.doorman: Doorman | None = None
        #: spooled type -> the sink types agents must have its ACK from (SPEC 4.1); a site
        #: router tells its agents its upstream's (SPEC 4.10), the defaults until told
        self.durable = config.durable_routes()
        sink_durable = self.durable
        if config.upstream:
            self.durable = {t: list(s) for t, s in {**ACKING_SINKS, **config.durable}.items()}
        #: the sinks connected per type (made at bind)
        self.presence = SinkPresence(sink_durable, monotonic)
        #: drops per agent until a history sink has them (only if STATS go to history)
        self.ledger = DropLedger()
        self.agents_port = RelayPort(self, "agents")
        #: the routers of the mesh (SPEC 4.9): the member table (its endpoints set at bind;
        #: the incarnation is its start in microseconds) and the gossip DEALERs; once the
        #: live set changed, the agents still to be sent a new WELCOME (routing ids)
        mesh = config.mesh
        self.members = Members(config.id, dict.fromkeys(ENDPOINTS, ""), int(clock() * 1e6),
                               mesh.interval, mesh.expire_intervals, monotonic,
                               forget_after=mesh.forget_after)
        self.mesh = Mesh(self.members, mesh.seeds, mesh.fanout, self.ctx, self.max_body,
                         clock=clock, monotonic=monotonic)
        self.mesh.on_change = self.members_changed
        self.announcing: list[bytes] = []
        # key-bound uuids and limits (SPEC 7), and the control socket's requests
        self.admission = Admission(self.peers, self.counters, self.agents_port,
                                   config.id, config.limits, config.security.curve,
                                   clock, monotonic)
        self.admission.keep_hellos = bool(config.upstream)     # said again upstream (4.10)
        self.desk = ControlDesk(self.peers, self.counters, RelayPort(self, "control"),
                                config.id, self.max_body, clock, self.members,
                                self.mesh.merge, config.security.curve)
        #: a central router's site links (``bind.sites``), a site router's uplink
        #: (``upstream``): SPEC 4.10, opened at bind
        self.links = SiteLinks(config.id, self.peers, self.agents_port, self.counters,
                               self.presence, lambda: self.durable, self.told_durable,
                               clock, monotonic)
        #: the tail, the routes' sending side and the agents socket's reader (made at bind)
        self.tail: Tail | None = None
        self.fanout: Fanout | None = None
        self.intake: Intake | None = None
        presence, ledger = self.presence, self.ledger
        self.report = Report(config.id, clock, self.relay, self.counters, ledger, [
            lambda: self.counters.metrics(len(self.peers), len(self.admission.waiting)),
            self.descriptors.metrics,
            lambda: {f"router.sinks.{name}": n for name, n in presence.counts().items()},
            lambda: {"router.durable_missing": len(presence.missing())},
            lambda: self.mesh.metrics(self.desk.mesh_refused, self.desk.mesh_bad),
            lambda: {"router.control.backends_unkept": self.desk.backends.unkept},
            self.links.metrics,
            lambda: {"router.heap.trims": self.heap.trims,
                     "router.heap.trim_ms": round(self.heap.seconds * 1000)}])

    # ---------------------------------------------------------------- set-up
    def bind(self) -> dict:
        """Create and bind every socket; return the advertised endpoints."""
        cfg, limits = self.config, self.config.limits
        sink_durable = cfg.durable_routes()
        if cfg.security.curve:  # SecurityError: the caller exits 78, never falls back to plain
            self.doorman = Doorman(self.ctx, cfg.security, self.counters.refused,
                                   self.monotonic)
        socks = RouterSockets(self.ctx, cfg, self.doorman, self.sockets, self.fqdn)
        self.agents, self.control, self.sinks = socks.agents, socks.control, socks.sinks
        self.tail = Tail(socks.tail, self.counters, self.throttle)
        if self.doorman is not None:
            self.presence.on_failed = self.doorman.handshake_failed
        for name, sock in self.sinks.items():
            self.presence.watch(name, sock, FAILED if self.doorman is not None else 0)
        endpoints = socks.bind()
        uplink = None
        if cfg.upstream:                        # with CURVE: site.key, verifying the routers'
            uplink = self.links.above(cfg.upstream, cfg.site, self.ctx, self.max_body,
                                      limits.sink_hwm, mesh_keys(cfg.security, cfg.site.key)
                                      if cfg.security.curve else None)
        self.endpoints = endpoints
        self.members.own.endpoints = {k: endpoints[k] for k in ENDPOINTS}
        if cfg.security.curve:
            self.mesh.keys = mesh_keys(cfg.security, cfg.mesh.key)
        self.control_rcvmore = rcvmore_reader(self.control)
        # a site router's own STATS name it as its HELLO upstream does (SPEC 4.10: its id),
        # so that the centre's sinks file them under that name, not a mismatch
        self.report.hostname = self.id if cfg.upstream else self.fqdn()
        # the base class's send: the same call without pyzmq's Python wrapper (router.fanout)
        self.routes = RoutingTable(cfg.routes, {n: MethodType(zmq.backend.Socket.send, s)
                                                for n, s in self.sinks.items()})
        self.fanout = Fanout(self.id, self.routes, self.counters, self.tail, sink_durable,
                             self.presence, self.ledger, self.agents_port,
                             self.durable_limiter, uplink, self.durable)
        self.report.ledger_on = self.fanout.ledger_on
        if socks.sites is not None:
            self.desk.beyond = self.links.below(socks.sites, cfg.site, self.fanout.relay,
                                                lambda: self.welcome(endpoints=False),
                                                self.max_body, self.drain,
                                                self.doorman is not None)
            # a site's claims checked with the other routers of the mesh (SPEC 4.10)
            sites = self.desk.beyond
            sites.claims = Claims(self.mesh.ask_attached, self.monotonic)
            sites.meshed = lambda: len(self.members.live()) > 1
            self.mesh.on_attached = sites.attached
        self.intake = Intake(self.agents, self.peers, self.counters, self.admission,
                             self.fanout, self.tail, self.id, self.clock,
                             guarded=self.guarded, misframed=self._misframed)
        log.info("durable routes (agents keep these until each sink type ACKs them): %s",
                 "; ".join(f"{t} -> {', '.join(s) or 'none'}" for t, s in self.durable.items()))
        self.routers = list(dict.fromkeys([endpoints["agents"], *cfg.peers]))
        log.info("router %s, fleetwatch %s: agents %s, control %s, tail %s, sinks %s",
                 self.id, __version__, endpoints["agents"], endpoints["control"], endpoints["tail"],
                 ", ".join(f"{k}={v}" for k, v in endpoints["sinks"].items()))
        return endpoints

    # ---------------------------------------------------------------- loop
    def stop(self, *_args) -> None:
        """Ask :meth:`run` to return (safe from a signal handler)."""
        self.stopping = True

    def reload(self, *_args) -> None:
        """Ask :meth:`run` to re-read the allowlists and the config (SIGHUP; safe from a
        signal handler)."""
        self.reload_requested = True

    def run(self, tick=None) -> None:
        """Relay until :meth:`stop`; ``tick()`` (the systemd watchdog) runs at each sweep."""
        poller = zmq.Poller()
        tail = self.tail.socket
        for sock in (self.agents, self.control, tail):
            poller.register(sock, zmq.POLLIN)
        agents, control = self.agents, self.control
        read_agents = self.read_agents
        doorman = self.doorman
        zap = None
        if doorman is not None:
            zap = doorman.zap
            poller.register(zap, zmq.POLLIN)
        mesh = self.mesh
        mesh.register(poller)
        links = self.links if self.links.open else None
        if links is not None:
            links.register(poller)
        mono = self.monotonic
        waited = self.busy.waited
        next_sweep = mono() + SWEEP_PERIOD
        next_stats = mono() + self.config.stats_interval
        while not self.stopping:
            before = mono()
            timeout = min(next_sweep, next_stats, mesh.next_round) - before
            if links is not None:
                timeout = min(timeout, links.next_tick - before)
            if self.admission.waiting:      # HELLOs wait for the pace: look again soon
                timeout = min(timeout, WAITING_POLL)
            polled = self.clock()
            events = dict(poller.poll(max(0.0, min(timeout, MAX_POLL)) * 1000))
            waited(mono() - before)
            if self.reload_requested:
                # between two wake-ups: what the loops below read into locals, they read
                # again at their next call; this loop's own local is next_stats
                self.reload_requested = False
                sighup(self)
                next_stats = min(next_stats, mono() + self.config.stats_interval)
            if zap is not None and zap in events:
                doorman.answer()
            if tail in events:
                self.tail.drain(self.drain, self.config.limits.tail_topics)
            if agents in events:
                read_agents(self.clock())
            else:                           # nothing was queued when the poll returned
                self.read_up_to = polled
            if control in events:
                self._drain_control()
            for sock in [s for s in mesh.by_socket if s in events]:
                mesh.read(sock)
            if links is not None:
                links.handle(events)
            if self.admission.waiting:
                self.admission.admit_waiting(self.clock())
            now = mono()
            if now >= mesh.next_round:
                mesh.round()
            if now >= next_sweep:
                self.sweep()
                if tick is not None:
                    tick()
                next_sweep = now + SWEEP_PERIOD
            if now >= next_stats:
                self.report.send()
                next_stats = now + self.config.stats_interval

    def close(self) -> None:
        self.mesh.close()
        self.links.close()
        self.presence.close(getattr(self, "sinks", {}))
        if self.doorman is not None:
            self.doorman.close(self.sockets)
        for sock in self.sockets:
            sock.close(linger=0)
        self.sockets.clear()
        if self._own_context:
            self.ctx.term()

    # ---------------------------------------------------------------- agents
    def read_agents(self, now: float) -> None:
        """Read up to ``drain`` messages from the agents socket (``now``: epoch seconds),
        carefully for a while after a misframed one; if that emptied it, every message sent
        before ``now`` has been read (:attr:`read_up_to`)."""
        intake = self.intake
        read = intake.careful if self.monotonic() < self.careful_until else intake.fast
        if read(now, self.drain):
            self.read_up_to = now

    def _misframed(self, rid: bytes, parts: list[bytes], now: float) -> None:
        """A message with the wrong number of frames: refuse it and drain carefully."""
        self.careful_until = self.monotonic() + self.careful_for
        self.counters.misframed += 1
        self.guarded(self.admission.agent_message, rid, parts, now)

    def guarded(self, handler, rid: bytes, parts: list[bytes], *args) -> None:
        """Run a slow-path handler; a bug in it is logged and counted, never fatal."""
        try:
            handler(rid, parts, *args)
        except (ProtocolError, zmq.ZMQError, ValueError, TypeError, KeyError,
                AttributeError, UnicodeError) as e:
            self.counters.count_bad(protocol.INTERNAL)
            self.throttle.warning(f"internal:{type(e).__name__}",
                                  "%s failed on a message from %s: %r", handler.__name__,
                                  self.who(rid), e)

    def who(self, rid: bytes) -> str:
        """An agent connection for logs: its uuid once attached, else a prefix of its routing
        id (agents' routing ids are secrets, SPEC 7.3: never logged whole)."""
        peer = self.peers.get(rid)
        return f"agent {peer.uuid}" if peer is not None else f"connection {rid[:4].hex()}.."

    def welcome(self, endpoints: bool) -> Message:
        """WELCOME (SPEC 4, 4.9): ``routers``, the agents endpoints of the live routers (its
        own first) and of the configured ``peers``; ``members``, the live routers."""
        live = self.members.live()
        return protocol.make("WELCOME", self.id, self.clock, router=self.id,
                             routers=list(dict.fromkeys(
                                 [m.endpoints["agents"] for m in live] + self.routers)),
                             endpoints=self.endpoints if endpoints else None,
                             durable=self.durable,
                             members=[m.as_listing() for m in live])

    def members_changed(self, joined: list[str], left: list[str]) -> None:
        """The mesh's live set changed: every attached agent is sent a new WELCOME (its
        ``routers``), :data:`ANNOUNCE_BATCH` a sweep."""
        self.announcing = list(self.peers.table)

    def told_durable(self, durable: dict) -> None:
        """Upstream told other durable routes (SPEC 4.10): every attached agent is sent a
        new WELCOME with them, as when the mesh changed."""
        self.durable = durable
        self.announcing = list(self.peers.table)

    def _announce(self) -> None:
        batch, self.announcing = (self.announcing[:ANNOUNCE_BATCH],
                                  self.announcing[ANNOUNCE_BATCH:])
        welcome = self.welcome(endpoints=True)
        for rid in batch:
            if rid in self.peers.table:
                self.agents_port.reply(rid, welcome)

    def fleet(self) -> dict:
        """What PEERS answers carry besides the agents (SPEC 4.3): sink connections per
        type and the durable routes."""
        return {"sinks": self.presence.counts(), "durable": self.durable}

    def relay(self, envelope: bytes, type_frame: bytes, body: bytes) -> None:
        """Send a stamped message to each sink type of its route, and to the tail (the
        slow path's, the desk's, this router's own: :meth:`router.fanout.Fanout.relay`)."""
        self.fanout.relay(envelope, type_frame, body)

    # ---------------------------------------------------------------- control
    def _drain_control(self) -> None:
        """Read up to ``drain`` control requests, each handed to the desk as frames."""
        recv, more = self.control.recv, self.control_rcvmore
        handle = self.desk.control_message
        curve = self.doorman is not None
        for _ in range(self.drain):
            try:
                rid = recv(NOBLOCK)
            except zmq.Again:
                return
            parts, first = [], None
            while more():
                if curve and first is None:     # its connection's User-Id: who may gossip
                    first = recv(copy=False)
                    parts.append(first.bytes)
                else:
                    parts.append(recv())
            user = connection_property(first, "User-Id") \
                if parts[1:2] in ([b"MEMBERS"], [b"ATTACHED"]) else ""
            self.guarded(handle, rid, parts, user)

    # ---------------------------------------------------------------- periodic
    def sweep(self) -> None:
        """Refill the limits, re-read changed allowlists, count failed handshakes, expire
        silent agents, forget old answers."""
        self.admission.sweep(self.busy.share())
        if self.doorman is not None:
            self.doorman.refresh()
            self.doorman.drain_monitors()
        self.presence.drain()
        self.presence.check()
        self.peers.expire(self.read_up_to)
        c = self.counters
        self.heap.maybe(c.received.get(b"HELLO", 0) + c.admission_deferred)
        self.links.sweep()
        self.limiter.prune()
        self.durable_limiter.prune()
        if self.announcing:
            self._announce()
