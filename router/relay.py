"""The router's socket loop: agents ROUTER, control ROUTER, one PUSH per sink type, tail XPUB.

A thin adapter around :mod:`router.peers`, :mod:`router.routes`, :mod:`router.counters` and
:mod:`router.replies`. The hot path (a STATS, NOTIFY, REGISTER or RESULT from an attached
agent) neither decodes the body nor allocates a message object: it reads the frames one by
one with integer flags, compares the signature frame, looks the type frame up in the routing
table and sends the stamped frames (SIGNATURE, ENVELOPE, BODY) to each sink type's
PUSH socket with ``NOBLOCK``, counting a ``zmq.Again`` as a drop. Everything else (HELLO,
HEARTBEAT, bad frames, unknown peers, control requests) goes through the slow path, which
decodes with :mod:`fleetwatch.protocol` and answers with a status code.
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
from fleetwatch.protocol import (AGENT_TYPES, SIGNATURE, Message, ProtocolError, check_signature,
                                 check_type)
from router.config import RouterConfig
from router.counters import Counters
from router.doorman import Doorman
from router.endpoints import advertised
from router.guard import CloneDetector, Once, Pacer, refill
from router.peers import Peers
from router.rcvmore import rcvmore_reader
from router.replies import ReplyLimiter
from router.routes import RoutingTable

log = logging.getLogger(__name__)

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK
#: Types that need an answer or a decode, so never take the hot path.
SLOW_TYPES = frozenset({b"HELLO", b"HEARTBEAT"})
SWEEP_PERIOD = 0.25
MAX_POLL = 0.25
#: at most one security event per claimed uuid per this many seconds
EVENT_PERIOD = 60.0
CLONE_TEXT = ("uuid {uuid} is used by two agents at once (instances {a}, {b}): a cloned "
              "machine? mint a new uuid with fleetwatch agent --new-uuid")


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
        # CURVE encrypts and decrypts in libzmq's I/O threads: give it two (bench/curve.py)
        self.ctx = context or zmq.Context(io_threads=2 if config.security.curve else 1)
        self.peers = Peers(config.expiry_intervals, clock, self.id_frame)
        self.counters = Counters(AGENT_TYPES)
        self.limiter = ReplyLimiter(1.0, monotonic)
        self.throttle = Throttle(log, 10.0, monotonic)
        self.tail_topics: set[bytes] = set()
        self.endpoints: dict = {}
        self.stopping = False
        self.sockets: list[zmq.Socket] = []
        #: until this monotonic time, every frame boundary of agent traffic is checked
        self.careful_until = 0.0
        self.careful_for = config.limits.careful_seconds
        # ---- issue 3: CURVE, key-bound uuids, limits (SPEC 7)
        self.curve = config.security.curve
        self.doorman: Doorman | None = None
        self.rate, self.burst = config.limits.rate, config.limits.burst
        self.peers.burst = self.burst
        self.last_refill = monotonic()
        self.pacer = Pacer(config.limits.hellos_per_second, monotonic)
        self.clones = CloneDetector(clock=monotonic)
        self.mismatch_events = Once(EVENT_PERIOD, monotonic)
        self.own_notify = protocol.envelope("NOTIFY", self.id, self.id)
        #: set by SIGHUP (:meth:`reload`): re-read the allowlists at the next wake-up
        self.reload_requested = False
        #: a new agent connection completed its CURVE handshake: every attached agent
        #: proves its key again at its next message (see :meth:`_suspend`)
        self.suspend_pending = False
        self.next_suspend = 0.0

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
        if self.curve:      # SecurityError: the caller exits 78, never falls back to plain
            self.doorman = Doorman(self.ctx, cfg.security, self.counters.refused,
                                   self.monotonic)
        self.agents = self._socket(zmq.ROUTER, ROUTER_HANDOVER=1, ROUTER_MANDATORY=1,
                                   SNDHWM=limits.agent_hwm)
        self.control = self._socket(zmq.ROUTER, ROUTER_MANDATORY=1)
        self.tail = self._socket(zmq.XPUB, SNDHWM=limits.tail_hwm)
        self.sinks = {name: self._socket(zmq.PUSH, SNDHWM=limits.sink_hwm)
                      for name in cfg.bind.sinks}
        if self.doorman is not None:
            self.doorman.secure(self.agents, "agents")
            for sock in (self.control, self.tail, *self.sinks.values()):
                self.doorman.secure(sock, "backends")
        endpoints = {
            "agents": self._bind(self.agents, cfg.bind.agents),
            "control": self._bind(self.control, cfg.bind.control),
            "tail": self._bind(self.tail, cfg.bind.tail),
            "sinks": {name: self._bind(sock, cfg.bind.sinks[name])
                      for name, sock in self.sinks.items()},
        }
        self.endpoints = endpoints
        self.agents_rcvmore = rcvmore_reader(self.agents)
        self.control_rcvmore = rcvmore_reader(self.control)
        self.hostname = self.fqdn()
        # The base class's send: the same call without pyzmq's Python wrapper (routing_id and
        # group arguments, unused here), about 0.5 us less per frame on the hot path.
        self.routes = RoutingTable(cfg.routes, {n: MethodType(zmq.backend.Socket.send, s)
                                                for n, s in self.sinks.items()})
        # type frame -> ((send, counter slot), ...): what the hot path iterates over
        self.table = {t: tuple((send, self.counters.slot(t.decode(), name)) for name, send in entries)
                      for t, entries in self.routes.table.items()}
        self.fast = {t: r for t, r in self.table.items() if t not in SLOW_TYPES}
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
        """Ask :meth:`run` to re-read the allowlists now (SIGHUP; safe from a handler)."""
        self.reload_requested = True

    def run(self) -> None:
        poller = zmq.Poller()
        for sock in (self.agents, self.control, self.tail):
            poller.register(sock, zmq.POLLIN)
        agents, control, tail = self.agents, self.control, self.tail
        doorman = self.doorman
        zap = monitor = None
        if doorman is not None:
            zap, monitor = doorman.zap, doorman.agent_monitor
            poller.register(zap, zmq.POLLIN)
            poller.register(monitor, zmq.POLLIN)
        mono = self.monotonic
        next_sweep = mono() + SWEEP_PERIOD
        next_stats = mono() + self.config.stats_interval
        while not self.stopping:
            timeout = min(next_sweep, next_stats) - mono()
            events = dict(poller.poll(max(0.0, min(timeout, MAX_POLL)) * 1000))
            if doorman is not None:
                if zap in events:
                    doorman.answer()
                if monitor in events:
                    self._suspend(doorman.agent_connections())
                if self.reload_requested:
                    self.reload_requested = False
                    doorman.refresh(force=True)
            if tail in events:
                self._drain_tail()
            if agents in events:
                self._drain_agents(self.clock())
            if control in events:
                self._drain_control()
            now = mono()
            if now >= next_sweep:
                self.sweep()
                next_sweep = now + SWEEP_PERIOD
            if now >= next_stats:
                self.send_stats()
                next_stats = now + self.config.stats_interval

    def close(self) -> None:
        if self.doorman is not None:
            for sock in self.sockets:
                try:
                    sock.disable_monitor()
                except zmq.ZMQError:
                    pass
            self.doorman.close()
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
            if peer is None:         # not attached (or to be verified): the slow way
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
                self._guarded(self._agent_message, rid, [sig, type_frame, body], now)
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
                    continue
                send(envelope, MORE_NB)
                send(body, NOBLOCK)
                relayed[slot] += 1
            if tail:
                self._publish(envelope, body)

    def _misframed(self, rid: bytes, parts: list[bytes], now: float) -> None:
        """A message with the wrong number of frames: refuse it and drain carefully."""
        self.careful_until = self.monotonic() + self.careful_for
        self.counters.misframed += 1
        self._guarded(self._agent_message, rid, parts, now)

    def _drain_agents_careful(self, now: float) -> None:
        """Handle up to ``drain`` agent messages, checking RCVMORE after every frame.

        Frame by frame with integer flags (PERF-NOTES: recv_multipart costs 4x more), RCVMORE
        read through :mod:`router.rcvmore`. A ROUTER's routing id frame is always followed by
        at least one frame, so RCVMORE is checked after each frame but the routing id.
        """
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
            if peer is None:
                self._stranger(rid, now)
                continue
            sig = recv()
            if not more():
                self._guarded(self._agent_message, rid, [sig], now)
                continue
            type_frame = recv()
            if not more():
                self._guarded(self._agent_message, rid, [sig, type_frame], now)
                continue
            body = recv()
            if more():
                parts = [sig, type_frame, body]
                while more():
                    parts.append(recv())
                self._guarded(self._agent_message, rid, parts, now)
                continue
            route = fast.get(type_frame)
            if route is None or sig != signature:
                self._guarded(self._agent_message, rid, [sig, type_frame, body], now)
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
                    continue
                send(envelope, MORE_NB)
                send(body, NOBLOCK)
                relayed[slot] += 1
            if tail:
                self._publish(envelope, body)

    def _guarded(self, handler, rid: bytes, parts: list[bytes], *args) -> None:
        """Run a slow-path handler; a bug in it is logged and counted, never fatal."""
        try:
            handler(rid, parts, *args)
        except (ProtocolError, zmq.ZMQError, ValueError, TypeError, KeyError,
                AttributeError, UnicodeError) as e:
            self.counters.count_bad(protocol.INTERNAL)
            self.throttle.warning(f"internal:{type(e).__name__}",
                                  "%s failed on a message from %r: %r", handler.__name__,
                                  rid[:64], e)

    def _stranger(self, rid: bytes, now: float) -> None:
        """A message from a routing id not in the hot path's table: read it frame by frame
        (zmq.Frame, for the connection's ZAP User-Id), then verify and handle it."""
        recv = self.agents.recv
        frames = [recv(copy=False)]
        while frames[-1].more:
            frames.append(recv(copy=False))
        self._guarded(self._unknown, rid, [f.bytes for f in frames], now, frames[0])

    def _unknown(self, rid: bytes, parts: list[bytes], now: float, first: zmq.Frame) -> None:
        if rid in self.peers.suspended:     # attached, but its connection may be new
            if self._bound(rid, first, parts[1][:16] if len(parts) > 1 else None):
                self.peers.resume(rid)
                self._agent_message(rid, parts, now, first)
            return
        if len(parts) == 3 and parts[1] == b"HELLO" and parts[0] == SIGNATURE:
            if not self.pacer.allow():      # admission pacing (SPEC 7.6): no answer
                self.counters.admission_deferred += 1
                return
        self._agent_message(rid, parts, now, first)

    def _bound(self, rid: bytes, first: zmq.Frame, ref) -> bool:
        """With CURVE, whether the connection's key is bound to the uuid ``rid``; if not,
        refuse (403), count and report a security event (at most one per uuid per minute)."""
        if not self.curve:
            return True
        user_id = _property(first, "User-Id")
        claimed = rid.decode("ascii", "replace")[:64]
        if user_id == "agent:" + claimed:
            return True
        bound = user_id.removeprefix("agent:")[:64] or "?"
        address = _property(first, "Peer-Address")[:64] or "an unknown address"
        self.counters.refused["uuid_mismatch"] += 1
        ref = ref.decode("ascii", "replace") if isinstance(ref, bytes) else ref
        self.refuse(self.agents, "agents", rid, ProtocolError(
            protocol.FORBIDDEN, f"this key speaks for uuid {bound}, not {claimed}"),
            ref=ref, careful=False)
        if self.mismatch_events.allow(claimed):
            self.security_event(f"uuid mismatch: a connection from {address} claimed uuid "
                                f"{claimed} with the key bound to uuid {bound}")
        return False

    def _rate_limited(self, peer) -> None:
        """A message above the agent's rate: dropped, counted, answered 429 (throttled)."""
        peer.tokens = 0.0
        peer.last_heard = self.clock()          # a sign of life all the same
        self.counters.rate_limited += 1
        rid = peer.routing_id
        self.throttle.warning("agents:429", "agents: %r is above its rate limit (%g/s, burst "
                              "%g): dropping", rid[:64], self.rate, self.burst)
        if self.limiter.allow(rid):
            self.reply(self.agents, rid, protocol.error(
                protocol.RATE_LIMITED, f"above {self.rate:g} messages/s", None, self.id))

    def security_event(self, text: str) -> None:
        """A NOTIFY the router makes itself, relayed through the NOTIFY route (alerting)."""
        self.counters.events += 1
        log.warning("security event: %s", text)
        msg = protocol.make("NOTIFY", self.id, self.clock, severity="error",
                            source="router-security", text=text)
        self.relay(self.own_notify, b"NOTIFY", protocol.encode_body(msg))

    def _suspend(self, new_connections: int) -> None:
        """After new agent connections, make every attached agent prove its key again.

        With ROUTER_HANDOVER a new connection may take over an attached agent's routing id,
        and libzmq tells the application neither which connection nor which routing id
        (ROUTER_NOTIFY is a draft API). So every attached agent leaves the hot path's table
        and re-enters at its next message once that message's User-Id matches its uuid:
        at most once per sweep period, one slow-path message per agent (SPEC 7.3).
        """
        if new_connections:
            self.suspend_pending = True
        now = self.monotonic()
        if self.suspend_pending and now >= self.next_suspend:
            self.suspend_pending = False
            self.next_suspend = now + SWEEP_PERIOD
            self.peers.suspend_all()

    def _agent_message(self, rid: bytes, parts: list[bytes], now: float,
                       first: zmq.Frame | None = None) -> None:
        """The slow path. ``first`` is the first frame when the message was read frame by
        frame (its framing is certain, and it carries the connection's properties)."""
        careful = first is None
        try:
            if len(parts) != 3:
                raise ProtocolError(protocol.BAD_REQUEST, f"expected 3 frames, got {len(parts)}")
            check_signature(parts[0])
            type_ = check_type(parts[1], AGENT_TYPES)
        except ProtocolError as e:
            self.refuse(self.agents, "agents", rid, e, answer=_answerable(parts),
                        careful=careful)
            return
        peer = self.peers.get(rid)
        if peer is not None:
            peer.tokens -= 1.0
            if peer.tokens < 0.0:
                self._rate_limited(peer)
                return
        if type_ == "HELLO":
            self._hello(rid, parts, first)
            return
        peer = self.peers.heard(rid, now)
        if peer is None:
            self.refuse(self.agents, "agents", rid,
                        ProtocolError(protocol.HELLO_REQUIRED, "send HELLO first"), ref=type_,
                        careful=careful)
            return
        if type_ == "HEARTBEAT":
            self.reply(self.agents, rid, protocol.make("HEARTBEAT", self.id, self.clock))
        self.counters.count_received(parts[1])
        self.relay(b"/".join((parts[1], rid, self.id_frame)), parts[1], parts[2])

    def _hello(self, rid: bytes, parts: list[bytes], first: zmq.Frame | None) -> None:
        careful = first is None
        try:
            msg = protocol.decode(parts, AGENT_TYPES, self.max_body)
        except ProtocolError as e:
            self.refuse(self.agents, "agents", rid, e, careful=careful)
            return
        if msg.uuid.encode() != rid:
            self.refuse(self.agents, "agents", rid, ProtocolError(
                protocol.FORBIDDEN, f"uuid {msg.uuid[:64]!r} is not this connection's routing id"),
                ref=msg.msg_id, careful=careful)
            return
        # a HELLO read the fast way comes from a verified connection (see _suspend)
        if first is not None and not self._bound(rid, first, msg.msg_id):
            return
        instance = str(msg.get("instance") or "")[:64]
        self.peers.hello(rid, msg.uuid, msg.get("hostname"), float(msg.get("heartbeat")),
                         instance)
        found = self.clones.hello(msg.uuid, instance)
        if found is not None:
            self.counters.clones += 1
            self.security_event(CLONE_TEXT.format(uuid=msg.uuid, a=found[0], b=found[1]))
        self.reply(self.agents, rid, self.welcome(endpoints=True))
        self.counters.count_received(parts[1])
        self.relay(b"/".join((parts[1], rid, self.id_frame)), parts[1], parts[2])

    def welcome(self, endpoints: bool) -> Message:
        return protocol.make("WELCOME", self.id, self.clock, router=self.id,
                             routers=list(self.routers),
                             endpoints=self.endpoints if endpoints else None)

    # ---------------------------------------------------------------- relay and tail
    def relay(self, envelope: bytes, type_frame: bytes, body: bytes) -> None:
        """Send a stamped message to each sink type of its route, and to the tail."""
        relayed, dropped = self.counters.relayed, self.counters.dropped
        for send, slot in self.table.get(type_frame, ()):
            try:
                send(SIGNATURE, MORE_NB)
            except zmq.Again:
                dropped[slot] += 1
                continue
            send(envelope, MORE_NB)
            send(body, NOBLOCK)
            relayed[slot] += 1
        if self.tail_topics:
            self._publish(envelope, body)

    def _publish(self, envelope: bytes, body: bytes) -> None:
        """Publish ENVELOPE, SIGNATURE, BODY: the envelope is the topic subscribers match."""
        send = self.tail.send
        try:
            send(envelope, MORE_NB)
        except zmq.Again:
            return
        send(SIGNATURE, MORE_NB)
        send(body, NOBLOCK)
        self.counters.tail_published += 1

    def _drain_tail(self) -> None:
        """Track tail subscriptions: XPUB passes each topic's first subscribe, last unsubscribe."""
        for _ in range(self.drain):
            try:
                event = self.tail.recv(NOBLOCK)
            except zmq.Again:
                return
            if event[:1] == b"\x01":
                self.tail_topics.add(event[1:])
            elif event[:1] == b"\x00":
                self.tail_topics.discard(event[1:])

    # ---------------------------------------------------------------- control
    def _drain_control(self) -> None:
        recv, more = self.control.recv, self.control_rcvmore
        for _ in range(self.drain):
            try:
                rid = recv(NOBLOCK)
            except zmq.Again:
                return
            parts = []
            while more():
                parts.append(recv())
            self._guarded(self._control_message, rid, parts)

    def _control_message(self, rid: bytes, parts: list[bytes]) -> None:
        try:
            target, msg = protocol.decode_control(parts, self.max_body)
        except ProtocolError as e:
            self.refuse(self.control, "control", rid, e, answer=_answerable(parts))
            return
        if msg.type == "HELLO":
            log.info("control client %s (%s, %s) said HELLO", msg.uuid, msg.get("role", "?"),
                     msg.get("hostname"))
            self.reply(self.control, rid, self.welcome(endpoints=True))
        elif msg.type == "PEERS":
            self.reply(self.control, rid, protocol.make(
                "PEERS", self.id, self.clock, router=self.id, agents=self.peers.listing()))
        else:
            self._forward(rid, target, parts[1], parts[3], msg)

    def _forward(self, rid: bytes, target: str, type_frame: bytes, body: bytes, msg: Message):
        """ACK or RUN to the agent ``target``: SIGNATURE, TYPE, BODY as received."""
        if target == self.id and msg.type == "ACK":   # of the router's own security events
            self.counters.own_acks += 1
            return
        peer = self.peers.by_uuid(target)
        if peer is None and msg.type == "ACK":
            # an agent still to prove its key (7.3) gets its ACKs (harmless if it is not
            # who it claims); RUN waits for the proof
            peer = self.peers.suspended.get(target.encode("ascii", "replace"))
        status, reason = protocol.NOT_FOUND, f"agent {target[:64]} is not attached here"
        if peer is not None:
            send = self.agents.send
            try:
                send(peer.routing_id, MORE_NB)
                send(SIGNATURE, MORE_NB)
                send(type_frame, MORE_NB)
                send(body, NOBLOCK)
                self.counters.forwarded[msg.type] += 1
                return
            except zmq.Again:
                status, reason = protocol.UNAVAILABLE, f"agent {target[:64]} is not reading"
            except zmq.ZMQError as e:
                if e.errno != zmq.EHOSTUNREACH:
                    raise
                self.peers.forget(peer.routing_id)
        self.counters.count_bad(status)
        log.debug("cannot forward %s %s: %s", msg.type, msg.msg_id, reason)
        self.reply(self.control, rid, protocol.error(status, reason, msg.msg_id, self.id))

    # ---------------------------------------------------------------- answers
    def reply(self, sock: zmq.Socket, rid: bytes, msg: Message) -> bool:
        """Send ``msg`` to ``rid`` without blocking; count it when it cannot be delivered."""
        try:
            sock.send_multipart([rid, *protocol.encode(msg)], NOBLOCK)
            return True
        except zmq.ZMQError as e:  # Again (queue full) or EHOSTUNREACH (gone)
            self.counters.replies_failed += 1
            log.debug("cannot answer %s to %r: %s", msg.type, rid[:64], e)
            return False

    def refuse(self, sock: zmq.Socket, where: str, rid: bytes, err: ProtocolError,
               ref: str | None = None, answer: bool = True, careful: bool = True) -> None:
        """Drop a message: count it, log it (throttled) and answer ERROR (throttled).

        ``careful``: the message was read the fast way, so its framing is uncertain: check
        every frame boundary for a while (SPEC 8)."""
        if sock is self.agents and careful:
            self.careful_until = self.monotonic() + self.careful_for
        self.counters.count_bad(err.status)
        self.throttle.warning(f"{where}:{err.status}", "%s: refused a message from %r: %s",
                              where, rid[:64], err)
        if answer and self.limiter.allow(rid):
            self.reply(sock, rid, protocol.error(err.status, err.reason, ref, self.id))

    # ---------------------------------------------------------------- periodic
    def sweep(self) -> None:
        now = self.monotonic()
        elapsed, self.last_refill = now - self.last_refill, now
        refill(self.peers.table.values(), self.rate, self.burst, elapsed)
        refill(self.peers.suspended.values(), self.rate, self.burst, elapsed)
        self.pacer.refill()
        if self.doorman is not None:
            self.doorman.refresh()
            self._suspend(self.doorman.drain_monitors())
        self.peers.expire()
        self.limiter.prune()
        self.mismatch_events.prune(now)
        if len(self.clones) > 10_000:
            self.clones.prune(now)

    def stats(self) -> Message:
        return protocol.make("STATS", self.id, self.clock,
                             metrics=self.counters.metrics(len(self.peers)),
                             hostname=self.hostname, source="router")

    def send_stats(self) -> None:
        """Relay the router's own STATS through the STATS route and the tail."""
        envelope = protocol.envelope("STATS", self.id, self.id)
        self.relay(envelope, b"STATS", protocol.encode_body(self.stats()))


def _property(frame: zmq.Frame, name: str) -> str:
    """A connection property of a received frame ('' when it has none)."""
    try:
        return frame.get(name) or ""
    except (zmq.ZMQError, UnicodeError):
        return ""


def _answerable(parts: list[bytes]) -> bool:
    """Never answer an ERROR (SPEC.md, section 6)."""
    return not (len(parts) >= 2 and parts[1] == b"ERROR")
