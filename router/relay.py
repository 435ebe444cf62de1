"""The router's socket loop: agents ROUTER, control ROUTER, one PUSH per sink type, tail XPUB.

A thin adapter around :mod:`router.peers`, :mod:`router.routes`, :mod:`router.counters` and
:mod:`router.replies`: set-up, the main loop, the hot path, the relay to sinks and tail, and
the answers the other modules send through it. The hot path (a STATS, NOTIFY, REGISTER or
RESULT from an attached agent) neither decodes the body nor allocates a message object: it
reads the frames one by one with integer flags, compares the signature frame, looks the type
frame up in the routing table and sends the stamped frames (SIGNATURE, ENVELOPE, BODY) to
each sink type's PUSH socket with ``NOBLOCK``, counting a ``zmq.Again`` as a drop.
An attached agent's HEARTBEAT, well framed, is answered and relayed here too
(:meth:`Relay._heartbeat`: one a second from every agent, the bulk of a big fleet's traffic).
Everything else (HELLO, bad frames, unknown peers) is read here and handed as
frames to the slow path, :class:`router.admission.Admission` (key-bound uuids, the limits);
control requests to :class:`router.control.ControlDesk`. Neither sees a socket or this
class: each gets the peers, the counters, its clocks and a :class:`router.port.RelayPort`
over its ROUTER socket, through which it answers, refuses and relays. CURVE's server keys,
ZAP and handshake monitors are the relay's :class:`router.doorman.Doorman`.
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

from fleetwatch import protocol
from fleetwatch.logs import Throttle
from fleetwatch.protocol import (ACKING_SINKS, AGENT_TYPES, SIGNATURE, TAIL_SEQ, Message,
                                 ProtocolError)
from router.admission import Admission, connection_property
from router.config import RouterConfig
from router.control import ControlDesk
from router.counters import Counters
from router.descriptors import Descriptors
from router.doorman import FAILED, Doorman
from router.drops import DropLedger
from router.endpoints import advertised
from router.guard import Busy
from router.members import ENDPOINTS, Members
from router.mesh import Mesh, mesh_keys
from router.peers import Peers
from router.port import RelayPort
from router.presence import SinkPresence
from fleetwatch.rcvmore import rcvmore_reader
from router.reload import sighup
from router.replies import ReplyLimiter
from router.rids import seed_libzmq_counters
from router.routes import RoutingTable
from router.sites import Sites
from router.uplink import UPSTREAM, Uplink

log = logging.getLogger(__name__)

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK
#: Types that need an answer or a decode, so never take the hot path.
SLOW_TYPES = frozenset({b"HELLO", b"HEARTBEAT"})
HEARTBEAT = b"HEARTBEAT"
SWEEP_PERIOD = 0.25
#: the agents socket's listen backlog (the kernel caps it at net.core.somaxconn)
AGENTS_BACKLOG = 65535
MAX_POLL = 0.25
#: longest poll while HELLOs wait for the admission pace (its tokens accrue continuously)
WAITING_POLL = 0.01
#: agents sent a new WELCOME per sweep once the mesh's live set changed (SPEC 4.9)
ANNOUNCE_BATCH = 2000
#: senders other than attached agents whose tail messages are numbered (back-ends, this
#: router); past it their numbers start again from 1
MAX_SENDERS = 10_000


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
        self.throttle = Throttle(log, 10.0, monotonic)
        #: distinct topics subscribed on the tail (XPUB passes each topic's first subscribe
        #: and last unsubscribe): a count, since the relay only asks "anyone listening?"
        self.tail_topics = 0
        #: type frame -> messages of that type published on the tail (SEQ's first number);
        #: envelope -> those of a sender that is not an attached agent (a back-end, this
        #: router: SEQ's second number; an agent's are on its Peer)
        self.tail_seq: dict[bytes, int] = {}
        self.sender_seq: dict[bytes, int] = {}
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
        #: the counter slots of the durable (type, sink) routes (made at bind)
        self.durable_slots: frozenset[int] = frozenset()
        #: counter slot -> (type, sink): whose drop the ledger notes
        self.slot_names: dict[int, tuple[str, str]] = {}
        #: the sinks connected per type (made at bind)
        self.presence = SinkPresence(sink_durable, monotonic)
        #: drops per agent until a history sink has them (only if STATS go to history)
        self.ledger = DropLedger()
        self.ledger_on = False
        self.agents_port = RelayPort(self, "agents")
        #: the routers of the mesh (SPEC 4.9): the member table (its endpoints set at bind;
        #: the incarnation is its start in microseconds) and the gossip DEALERs; once the
        #: live set changed, the agents still to be sent a new WELCOME (routing ids)
        mesh = config.mesh
        self.members = Members(config.id, dict.fromkeys(ENDPOINTS, ""), int(clock() * 1e6),
                               mesh.interval, mesh.expire_intervals, monotonic)
        self.mesh = Mesh(self.members, mesh.seeds, mesh.fanout, self.ctx, self.max_body,
                         clock=clock, monotonic=monotonic)
        self.mesh.on_change = self.members_changed
        self.announcing: list[bytes] = []
        # key-bound uuids and limits (SPEC 7), and the control socket's requests
        self.admission = Admission(self.peers, self.counters, self.agents_port,
                                   config.id, config.limits, config.security.curve,
                                   clock, monotonic)
        self.desk = ControlDesk(self.peers, self.counters, RelayPort(self, "control"),
                                config.id, self.max_body, clock, self.members,
                                self.mesh.merge, config.security.curve)
        # The hot path's exits to the slow path, bound once here: taking one costs no more
        # than calling a method of this class (no extra lookup in the loops).
        self._unknown = self.admission.unknown
        self._rate_limited = self.admission.rate_limited
        self._agent_message = self.admission.agent_message
        #: a central router's site links (``bind.sites``), a site router's uplink
        #: (``upstream``): SPEC 4.10, made at bind
        self.sites: Sites | None = None
        self.uplink: Uplink | None = None

    # ---------------------------------------------------------------- set-up
    def _socket(self, kind: int, **options) -> zmq.Socket:
        sock = self.ctx.socket(kind)
        sock.linger = 0
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_body)
        for name, value in options.items():
            sock.setsockopt(getattr(zmq, name), value)
        self.sockets.append(sock)
        return sock

    def _bind(self, sock: zmq.Socket, endpoint: str) -> str:
        try:
            sock.bind(endpoint)
        except zmq.ZMQError as e:
            raise zmq.ZMQError(e.errno, f"cannot bind {endpoint}: {e.strerror}") from None
        bound = sock.last_endpoint.decode()
        return advertised(bound, self.config.advertise_host, self.fqdn)

    def bind(self) -> dict:
        """Create and bind every socket; return the advertised endpoints."""
        cfg, limits = self.config, self.config.limits
        sink_durable = cfg.durable_routes()
        if cfg.security.curve:  # SecurityError: the caller exits 78, never falls back to plain
            self.doorman = Doorman(self.ctx, cfg.security, self.counters.refused,
                                   self.monotonic)
        # no ROUTER_HANDOVER: a routing id stays with its connection (SPEC 7.3)
        # a restart's thousands of reconnects at once: with libzmq's listen backlog of 100
        # the kernel drops the SYNs above it and their clients retry 1, 3, 7, 15, 31 s later
        self.agents = self._socket(zmq.ROUTER, ROUTER_MANDATORY=1, SNDHWM=limits.agent_hwm,
                                   BACKLOG=AGENTS_BACKLOG)
        self.control = self._socket(zmq.ROUTER, ROUTER_MANDATORY=1)
        self.tail = self._socket(zmq.XPUB, SNDHWM=limits.tail_hwm)
        self.sinks = {name: self._socket(zmq.PUSH, SNDHWM=limits.sink_hwm)
                      for name in cfg.bind.sinks}
        if self.doorman is not None:
            self.doorman.secure(self.agents, "agents")
            for sock in (self.control, self.tail):
                self.doorman.secure(sock, "backends")
            for sock in self.sinks.values():     # (watched below, with their connections)
                self.doorman.secure(sock, "backends", watch=False)
            self.presence.on_failed = self.doorman.handshake_failed
        for name, sock in self.sinks.items():
            self.presence.watch(name, sock, FAILED if self.doorman is not None else 0)
        endpoints = {
            "agents": self._bind(self.agents, cfg.bind.agents),
            "control": self._bind(self.control, cfg.bind.control),
            "tail": self._bind(self.tail, cfg.bind.tail),
            "sinks": {name: self._bind(sock, cfg.bind.sinks[name])
                      for name, sock in self.sinks.items()},
        }
        if cfg.bind.sites:
            sock = self._socket(zmq.ROUTER, ROUTER_MANDATORY=1, SNDHWM=limits.sink_hwm,
                                RCVHWM=limits.sink_hwm)
            if self.doorman is not None:        # only security.sites keys link (SPEC 4.10)
                self.doorman.secure(sock, "sites")
            endpoints["sites"] = self._bind(sock, cfg.bind.sites)
            self.sites = Sites(sock, self.id, cfg.site, self.relay,
                               lambda: self.welcome(endpoints=False), self.max_body,
                               self.clock, self.monotonic, self.drain,
                               curve=self.doorman is not None)
            self.sites.unavailable = self.unavailable
            self.desk.beyond = self.sites
        if cfg.upstream:
            self.uplink = Uplink(self.id, cfg.upstream, cfg.site, self.ctx, self.max_body,
                                 limits.sink_hwm, self.clock, self.monotonic)
            self.uplink.down = self.down
            self.uplink.on_durable = self.upstream_durable
            if cfg.security.curve:              # site.key, verifying the routers' key
                self.uplink.keys = mesh_keys(cfg.security, cfg.site.key)
        self.endpoints = endpoints
        self.members.own.endpoints = {k: endpoints[k] for k in ENDPOINTS}
        if cfg.security.curve:
            self.mesh.keys = mesh_keys(cfg.security, cfg.mesh.key)
        self.agents_rcvmore = rcvmore_reader(self.agents)
        self.agents_send = MethodType(zmq.backend.Socket.send, self.agents)
        self.control_rcvmore = rcvmore_reader(self.control)
        self.hostname = self.fqdn()
        # The base class's send: the same call without pyzmq's Python wrapper (routing_id and
        # group arguments, unused here), about 0.5 us less per frame on the hot path.
        self.routes = RoutingTable(cfg.routes, {n: MethodType(zmq.backend.Socket.send, s)
                                                for n, s in self.sinks.items()})
        # type frame -> ((send, counter slot), ...): what the hot path iterates over
        self.table = {t: tuple((send, self.counters.slot(t.decode(), name)) for name, send in entries)
                      for t, entries in self.routes.table.items()}
        if self.uplink is not None:         # a site: everything goes upstream too (4.10)
            durable_types = {t.encode() for t, sinks in self.durable.items() if sinks}
            self.table = {t: (*entries, (self.uplink.sender(t, t in durable_types),
                                         self.counters.slot(t.decode(), UPSTREAM)))
                          for t, entries in self.table.items()}
        self.fast = {t: r for t, r in self.table.items() if t not in SLOW_TYPES}
        self.slot_names = {self.counters.slot(t, s): (t, s) for t, s in self.routes.pairs()}
        self.durable_slots = frozenset(self.counters.slot(t, s)
                                       for t, sinks in sink_durable.items() for s in sinks)
        if self.uplink is not None:
            self.slot_names.update({self.counters.slot(t, UPSTREAM): (t, UPSTREAM)
                                    for t in AGENT_TYPES})
            self.durable_slots |= {self.counters.slot(t, UPSTREAM)
                                   for t, sinks in self.durable.items() if sinks}
        self.ledger_on = "history" in self.routes.sinks_of("STATS")
        log.info("durable routes (agents keep these until each sink type ACKs them): %s",
                 "; ".join(f"{t} -> {', '.join(s) or 'none'}" for t, s in self.durable.items()))
        self.routers = list(dict.fromkeys([endpoints["agents"], *cfg.peers]))
        log.info("router %s: agents %s, control %s, tail %s, sinks %s", self.id,
                 endpoints["agents"], endpoints["control"], endpoints["tail"],
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
        for sock in (self.agents, self.control, self.tail):
            poller.register(sock, zmq.POLLIN)
        agents, control, tail = self.agents, self.control, self.tail
        doorman = self.doorman
        zap = None
        if doorman is not None:
            zap = doorman.zap
            poller.register(zap, zmq.POLLIN)
        mesh = self.mesh
        mesh.register(poller)
        sites, uplink = self.sites, self.uplink
        if sites is not None:
            poller.register(sites.socket, zmq.POLLIN)
        if uplink is not None:
            uplink.open(poller)
            uplink.tick()
        mono = self.monotonic
        waited = self.busy.waited
        next_sweep = mono() + SWEEP_PERIOD
        next_stats = mono() + self.config.stats_interval
        while not self.stopping:
            before = mono()
            timeout = min(next_sweep, next_stats, mesh.next_round) - before
            if uplink is not None:
                timeout = min(timeout, uplink.next_tick - before)
            if self.admission.waiting:      # HELLOs wait for the pace: look again soon
                timeout = min(timeout, WAITING_POLL)
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
                self._drain_tail()
            if agents in events:
                self._drain_agents(self.clock())
            if control in events:
                self._drain_control()
            for sock in [s for s in mesh.by_socket if s in events]:
                mesh.read(sock)
            if sites is not None and sites.socket in events:
                sites.read()
            if uplink is not None:
                for sock in [s for s in uplink.by_socket if s in events]:
                    uplink.read(sock)
                if mono() >= uplink.next_tick:
                    uplink.tick()
                uplink.flush()
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
                self.send_stats()
                next_stats = now + self.config.stats_interval

    def close(self) -> None:
        self.mesh.close()
        if self.uplink is not None:
            self.uplink.close()
        self.presence.close(getattr(self, "sinks", {}))
        if self.doorman is not None:
            self.doorman.close(self.sockets)
        for sock in self.sockets:
            sock.close(linger=0)
        self.sockets.clear()
        if self._own_context:
            self.ctx.term()

    # ---------------------------------------------------------------- agents
    def _drain_agents(self, now: float) -> None:
        """Handle up to ``drain`` agent messages, the fast way unless lately misframed.

        Fast: receive SIGNATURE, TYPE and BODY, then check RCVMORE once. A message of fewer
        than three frames cannot be told from its successor that way (the frames run on into
        the next message), so the first malformed message switches the router to careful
        draining for ``limits.careful_seconds``: a hostile peer can cost at most the message
        that follows its own, once per quiet period; well-formed traffic pays one RCVMORE
        read per message instead of three (about 30 % more throughput, bench/RESULTS.md).
        """
        if self.monotonic() < self.careful_until:
            self._drain_agents_careful(now)
            return
        recv, more = self.agents.recv, self.agents_rcvmore
        fast, known = self.fast, self.peers.table
        received, relayed, dropped = (self.counters.received, self.counters.relayed,
                                      self.counters.dropped)
        signature = SIGNATURE
        tail = self.tail_topics
        for _ in range(self.drain):
            try:
                rid = recv(NOBLOCK)
            except zmq.Again:
                return
            peer = known.get(rid)
            if peer is None:         # not attached: the slow way
                self._stranger(rid, now)
                continue
            sig = type_frame = None
            try:
                sig = recv(NOBLOCK)
                type_frame = recv(NOBLOCK)
                body = recv(NOBLOCK)
            except zmq.Again:        # fewer than three frames and nothing behind them
                self._misframed(rid, [f for f in (sig, type_frame) if f is not None], now)
                return
            if more():
                parts = [sig, type_frame, body]
                while more():
                    parts.append(recv())
                self._misframed(rid, parts, now)
                return
            route = fast.get(type_frame)
            if route is None or sig != signature:
                if type_frame == HEARTBEAT and sig == signature:
                    self._heartbeat(rid, peer, body, now)
                    continue
                self.guarded(self._agent_message, rid, [sig, type_frame, body], now)
                continue
            tokens = peer.tokens - 1.0
            peer.tokens = tokens
            if tokens < 0.0:
                self._rate_limited(peer)
                continue
            peer.last_heard = now
            received[type_frame] += 1
            envelope = peer.envelopes[type_frame]
            for send, slot in route:
                try:
                    send(signature, MORE_NB)
                except zmq.Again:
                    dropped[slot] += 1
                    self._lost(rid, peer, slot, now)
                    continue
                send(envelope, MORE_NB)
                send(body, NOBLOCK)
                relayed[slot] += 1
            if tail:
                self._publish(type_frame, envelope, body, peer.tail_seq)

    def _heartbeat(self, rid: bytes, peer, body: bytes, now: float) -> None:
        """An attached agent's HEARTBEAT read the fast way (three frames, the signature
        checked): what the slow path does with it, without its checks and message objects
        (a rate-limit token, a sign of life, the answer, the relay)."""
        tokens = peer.tokens - 1.0
        peer.tokens = tokens
        if tokens < 0.0:
            self._rate_limited(peer)
            return
        peer.last_heard = now
        self.counters.received[HEARTBEAT] += 1
        send = self.agents_send
        answer = protocol.encode_body(protocol.make("HEARTBEAT", self.id, self.clock))
        try:
            send(rid, MORE_NB)
            send(SIGNATURE, MORE_NB)
            send(HEARTBEAT, MORE_NB)
            send(answer, NOBLOCK)
        except zmq.ZMQError:    # Again (its queue is full) or EHOSTUNREACH (gone)
            self.counters.replies_failed += 1
        self.relay(peer.envelopes[HEARTBEAT], HEARTBEAT, body, rid, peer, now)

    def _misframed(self, rid: bytes, parts: list[bytes], now: float) -> None:
        """A message with the wrong number of frames: refuse it and drain carefully."""
        self.careful_until = self.monotonic() + self.careful_for
        self.counters.misframed += 1
        self.guarded(self._agent_message, rid, parts, now)

    def _drain_agents_careful(self, now: float) -> None:
        """Handle up to ``drain`` agent messages, checking RCVMORE after every frame.

        Frame by frame with integer flags (recv_multipart costs 4x more; docs/development/
        decisions.md, "Reading frames on the hot path"), RCVMORE read through
        :mod:`fleetwatch.rcvmore`. A ROUTER's routing id frame is always followed by
        at least one frame, so RCVMORE is checked after each frame but the routing id.
        """
        recv, more = self.agents.recv, self.agents_rcvmore
        fast, known = self.fast, self.peers.table
        received = self.counters.received
        signature = SIGNATURE
        for _ in range(self.drain):
            try:
                rid = recv(NOBLOCK)
            except zmq.Again:
                return
            peer = known.get(rid)
            if peer is None:
                self._stranger(rid, now)
                continue
            sig = recv()
            if not more():
                self.guarded(self._agent_message, rid, [sig], now)
                continue
            type_frame = recv()
            if not more():
                self.guarded(self._agent_message, rid, [sig, type_frame], now)
                continue
            body = recv()
            if more():
                parts = [sig, type_frame, body]
                while more():
                    parts.append(recv())
                self.guarded(self._agent_message, rid, parts, now)
                continue
            if type_frame not in fast or sig != signature:
                self.guarded(self._agent_message, rid, [sig, type_frame, body], now)
                continue
            tokens = peer.tokens - 1.0
            peer.tokens = tokens
            if tokens < 0.0:
                self._rate_limited(peer)
                continue
            peer.last_heard = now
            received[type_frame] += 1
            # not the hot path: the send loop inlined in _drain_agents is relay()'s
            self.relay(peer.envelopes[type_frame], type_frame, body, rid, peer, now)

    def _stranger(self, rid: bytes, now: float) -> None:
        """A message from a routing id not in the hot path's table: read it frame by frame
        (zmq.Frame: the first carries the connection's properties, its ZAP User-Id should it
        be a HELLO), then hand it to admission."""
        recv = self.agents.recv
        frames = [recv(copy=False)]
        while frames[-1].more:
            frames.append(recv(copy=False))
        self.guarded(self._unknown, rid, [f.bytes for f in frames], now, frames[0])

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

    def _announce(self) -> None:
        batch, self.announcing = (self.announcing[:ANNOUNCE_BATCH],
                                  self.announcing[ANNOUNCE_BATCH:])
        welcome = self.welcome(endpoints=True)
        for rid in batch:
            if rid in self.peers.table:
                self.agents_port.reply(rid, welcome)

    # ---------------------------------------------------------------- sites (SPEC 4.10)
    def down(self, target: str, type_frame: bytes, body: bytes) -> None:
        """An ACK, RUN or ERROR from upstream for ``target``: to the agent attached here, or
        down the site link below that speaks for it (a tree); else counted unroutable."""
        peer = self.peers.by_uuid(target)
        if peer is not None:
            sent = self.agents_port.to_agent(peer.routing_id, type_frame, body)
        elif self.sites is not None:
            sent = self.sites.to_site(target, type_frame, body)
        else:
            sent = None
        if sent == "sent":
            self.counters.forwarded[type_frame.decode("ascii", "replace")] += 1
        else:
            self.counters.forwarded["unroutable"] += 1
            self.throttle.warning("down:unroutable", "uplink: %s for %s not delivered (%s)",
                                  type_frame[:16], target[:64], sent or "not attached here")

    def unavailable(self, type_frame: bytes) -> str | None:
        """Why a message of a durable route from a site below cannot be taken now (SPEC
        4.1, 4.10): no sink of a type its route needs is connected, or this site's uplink
        is down; None when it can (a full queue is only seen when sending: counted)."""
        type_ = type_frame.decode()
        if self.uplink is not None and self.uplink.active is None \
                and self.durable.get(type_):
            return f"the uplink of site router {self.id} is down"
        for sink in self.presence.durable.get(type_, ()):
            if not self.presence.connected(sink):
                return f"no {sink} sink is connected to router {self.id}"
        return None

    def upstream_durable(self, durable: dict) -> None:
        """Upstream's WELCOME told its durable routes: this site's agents are told them
        (a new WELCOME each, when they changed)."""
        told = {t: [str(s) for s in sinks if isinstance(s, str)]
                for t, sinks in durable.items() if t in ACKING_SINKS and isinstance(sinks, list)}
        told = {**{t: [] for t in ACKING_SINKS}, **told}
        if told != self.durable:
            log.info("upstream's durable routes: %s", told)
            self.durable = told
            self.announcing = list(self.peers.table)

    def fleet(self) -> dict:
        """What PEERS answers carry besides the agents (SPEC 4.3): sink connections per
        type and the durable routes."""
        return {"sinks": self.presence.counts(), "durable": self.durable}

    # ---------------------------------------------------------------- relay and tail
    def relay(self, envelope: bytes, type_frame: bytes, body: bytes, rid: bytes = b"",
              peer=None, now: float = 0.0) -> None:
        """Send a stamped message to each sink type of its route, and to the tail. ``peer``
        (at ``rid``): the agent it came from, whose drops are noted (:meth:`_lost`)."""
        relayed, dropped = self.counters.relayed, self.counters.dropped
        for send, slot in self.table.get(type_frame, ()):
            try:
                send(SIGNATURE, MORE_NB)
            except zmq.Again:
                dropped[slot] += 1
                if peer is not None:
                    self._lost(rid, peer, slot, now)
                continue
            send(envelope, MORE_NB)
            send(body, NOBLOCK)
            relayed[slot] += 1
        if self.tail_topics:
            self._publish(type_frame, envelope, body,
                          peer.tail_seq if peer is not None else None)

    def _lost(self, rid: bytes, peer, slot: int, now: float) -> None:
        """An agent's message its route's sink type ``slot`` could not take (counted by the
        caller): noted in the ledger for the lake, and on a durable route answered ``503``
        (at most once a second per connection): the agent keeps it and sends it again."""
        type_, sink = self.slot_names[slot]
        if self.ledger_on:
            self.ledger.add(peer.uuid, type_, sink, now)
        if slot in self.durable_slots and self.durable_limiter.allow(rid):
            self.counters.durable_unavailable += 1
            if sink == UPSTREAM:
                why = f"the uplink of site router {self.id} is down"
            elif not self.presence.connected(sink):
                why = f"no {sink} sink is connected to router {self.id}"
            else:
                why = f"the {sink} sinks' queues are full"
            self.agents_port.reply(rid, protocol.error(
                protocol.UNAVAILABLE, f"{why}: keep the {type_} and send it again", type_,
                self.id))

    def _publish(self, type_frame: bytes, envelope: bytes, body: bytes,
                 sender: dict[bytes, int] | None = None) -> None:
        """Publish ENVELOPE, SIGNATURE, BODY, SEQ: the envelope is the topic subscribers
        match; SEQ numbers the message among those of its type and of its type from its
        sender (``sender``: the attached agent's numbers by type; None: another sender's,
        by envelope), so that a subscriber that fell behind learns what it lost (SPEC 4.1).
        A message numbered and not sent is lost to every subscriber, and they see it."""
        seqs = self.tail_seq
        n = seqs.get(type_frame, 0) + 1
        seqs[type_frame] = n
        if sender is None:
            sender, key = self.sender_seq, envelope
            if len(sender) >= MAX_SENDERS:      # (anyone may send STATS on control)
                sender.clear()
        else:
            key = type_frame
        m = sender.get(key, 0) + 1
        sender[key] = m
        send = self.tail.send
        try:
            send(envelope, MORE_NB)
        except zmq.Again:
            return
        send(SIGNATURE, MORE_NB)
        send(body, MORE_NB)
        send(TAIL_SEQ.pack(n, m), NOBLOCK)
        self.counters.tail_published += 1

    def _drain_tail(self) -> None:
        """Count tail subscriptions; above ``limits.tail_topics`` count and report the excess
        (libzmq's XPUB keeps the topics themselves, SPEC 8)."""
        counters, cap = self.counters, self.config.limits.tail_topics
        for _ in range(self.drain):
            try:
                event = self.tail.recv(NOBLOCK)
            except zmq.Again:
                return
            if event[:1] == b"\x01":
                self.tail_topics += 1
                if self.tail_topics > cap:
                    counters.tail_excess += 1
                    self.throttle.warning("tail:excess", "tail: %d topics subscribed, above "
                                          "limits.tail_topics (%d)", self.tail_topics, cap)
            elif event[:1] == b"\x00" and self.tail_topics > 0:
                self.tail_topics -= 1
            counters.tail_topics = self.tail_topics

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
            user = connection_property(first, "User-Id") if parts[1:2] == [b"MEMBERS"] else ""
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
        self.peers.expire()
        if self.sites is not None:
            self.sites.sweep()
        self.limiter.prune()
        self.durable_limiter.prune()
        if self.announcing:
            self._announce()

    def site_metrics(self) -> dict:
        """``router.sites.*`` of a central router, ``router.site.*`` of a site (4.10)."""
        out = self.sites.metrics() if self.sites is not None else {}
        return {**out, **(self.uplink.metrics() if self.uplink is not None else {})}

    def stats(self, drops: list | None = None) -> Message:
        ledger, presence = self.ledger, self.presence
        sinks = {f"router.sinks.{name}": n for name, n in presence.counts().items()}
        return protocol.make("STATS", self.id, self.clock,
                             metrics={**self.counters.metrics(len(self.peers),
                                                              len(self.admission.waiting)),
                                      **self.descriptors.metrics(), **sinks,
                                      "router.durable_missing": len(presence.missing()),
                                      "router.drops.pending": len(ledger),
                                      "router.drops.reported": ledger.reported_entries,
                                      "router.drops.unledgered": ledger.unledgered,
                                      **self.mesh.metrics(self.desk.mesh_refused,
                                                          self.desk.mesh_bad),
                                      **self.site_metrics()},
                             hostname=self.hostname, source="router", drops=drops or None)

    def send_stats(self) -> None:
        """Relay the router's own STATS through the STATS route and the tail, with the
        ledger's oldest drops (:mod:`router.drops`); more of them, if any, in STATS of no
        metrics that follow, as long as a history sink takes them."""
        envelope = protocol.envelope("STATS", self.id, self.id)
        chunks = self.ledger.chunks() if self.ledger_on else []
        if not chunks:
            self.relay(envelope, b"STATS", protocol.encode_body(self.stats()))
            return
        # a history sink took a STATS when the relay counted it relayed there
        relayed, to_history = self.counters.relayed, self.counters.slot("STATS", "history")
        for n, chunk in enumerate(chunks):
            drops = [d for _, d in chunk]
            msg = self.stats(drops) if n == 0 else protocol.make(
                "STATS", self.id, self.clock, metrics={}, hostname=self.hostname,
                source="router", drops=drops)
            before = relayed[to_history]
            self.relay(envelope, b"STATS", protocol.encode_body(msg))
            if relayed[to_history] == before:
                return                  # kept for the next report
            self.ledger.reported(chunk)

