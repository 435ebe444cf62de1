"""The router's slow path for agents: who may speak, and what happens to those who may not.

Everything an agent sends that the hot path in :mod:`router.relay` does not take comes here:
messages from routing ids not attached, HELLO, HEARTBEAT, badly framed or unknown types. It
decodes with :mod:`fleetwatch.protocol` and answers with a status code.

A routing id names one connection (agents draw a new secret one for each socket and the
agents ROUTER has no ``ROUTER_HANDOVER``, so no connection can take another's over, SPEC
7.3). The first HELLO from a routing id binds it to the HELLO's uuid, and with CURVE only
when the connection's key (its ZAP User-Id, read here once per connection) is bound to that
uuid; the hot path then trusts the routing id for the life of the binding. With CURVE this
module owns the :class:`router.doorman.Doorman` (server keys, ZAP, handshake-failure
monitors). It also keeps the limits and alarms of :mod:`router.guard`: rate buckets,
admission pacing, clone detection and the security events the router relays as its own
NOTIFYs.

:class:`Admission` works through its :class:`router.relay.Relay` (sockets, counters, peers,
replies and refusals, the relay to sinks and tail); the relay calls it from its main loop,
its hot path's exits and its sweep.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import zmq

from fleetwatch import protocol
from fleetwatch.protocol import (AGENT_TYPES, SIGNATURE, ProtocolError, check_signature,
                                 check_type)
from router.doorman import Doorman
from router.guard import CloneDetector, Once, Pacer, refill
from router.replies import answerable

if TYPE_CHECKING:
    from router.relay import Relay

log = logging.getLogger(__name__)

#: at most one security event per claimed uuid per this many seconds
EVENT_PERIOD = 60.0
CLONE_TEXT = ("uuid {uuid} is used by two agents at once (instances {a}, {b}): a cloned "
              "machine? mint a new uuid with fleetwatch agent --new-uuid")


class Admission:
    """CURVE, key-bound uuids and limits (SPEC 7) for one :class:`router.relay.Relay`."""

    def __init__(self, relay: Relay):
        self.relay = relay
        config, monotonic = relay.config, relay.monotonic
        self.peers, self.counters = relay.peers, relay.counters
        self.clock, self.monotonic = relay.clock, monotonic
        self.curve = config.security.curve
        self.doorman: Doorman | None = None
        self.rate, self.burst = config.limits.rate, config.limits.burst
        self.peers.burst = self.burst
        self.last_refill = monotonic()
        self.pacer = Pacer(config.limits.hellos_per_second, monotonic)
        self.clones = CloneDetector(clock=monotonic)
        self.mismatch_events = Once(EVENT_PERIOD, monotonic)
        self.own_notify = protocol.envelope("NOTIFY", relay.id, relay.id)

    # ---------------------------------------------------------------- CURVE set-up
    def open(self) -> None:
        """With CURVE, load the keys and answer ZAP; call before any socket is made.

        :class:`fleetwatch.security.SecurityError`: the caller exits 78, never falls back
        to plain text."""
        if self.curve:
            relay = self.relay
            self.doorman = Doorman(relay.ctx, relay.config.security, self.counters.refused,
                                   self.monotonic)

    def secure(self, agents: zmq.Socket, backends) -> None:
        """With CURVE, make ``agents`` and each of ``backends`` CURVE servers (before bind)."""
        if self.doorman is not None:
            self.doorman.secure(agents, "agents")
            for sock in backends:
                self.doorman.secure(sock, "backends")

    def close(self, sockets) -> None:
        """Stop the handshake monitors of ``sockets`` and close the doorman's own."""
        if self.doorman is not None:
            for sock in sockets:
                try:
                    sock.disable_monitor()
                except zmq.ZMQError:
                    pass
            self.doorman.close()

    # ---------------------------------------------------------------- strangers
    def stranger(self, rid: bytes, now: float) -> None:
        """A message from a routing id not in the hot path's table: read it frame by frame
        (zmq.Frame, for the connection's ZAP User-Id should it be a HELLO), then handle it."""
        relay = self.relay
        recv = relay.agents.recv
        frames = [recv(copy=False)]
        while frames[-1].more:
            frames.append(recv(copy=False))
        relay.guarded(self.unknown, rid, [f.bytes for f in frames], now, frames[0])

    def unknown(self, rid: bytes, parts: list[bytes], now: float, first: zmq.Frame) -> None:
        """Only a HELLO gets anywhere from a routing id not attached (others: 401)."""
        if len(parts) == 3 and parts[1] == b"HELLO" and parts[0] == SIGNATURE:
            if not self.pacer.allow():      # admission pacing (SPEC 7.6): no answer
                self.counters.admission_deferred += 1
                return
        self.agent_message(rid, parts, now, first)

    def bound(self, rid: bytes, first: zmq.Frame | None, claimed: str, ref: str) -> bool:
        """With CURVE, whether the connection's key (its User-Id) is bound to ``claimed``;
        if not, refuse (403), count and report a security event."""
        if not self.curve:
            return True
        user_id = _property(first, "User-Id") if first is not None else ""
        if user_id == "agent:" + claimed:
            return True
        address = _property(first, "Peer-Address") if first is not None else ""
        self.mismatch(rid, claimed, user_id.removeprefix("agent:"), address, ref)
        return False

    def mismatch(self, rid: bytes, claimed: str, bound: str, address: str, ref: str,
                 careful: bool = False) -> None:
        """A connection claimed a uuid it does not speak for: 403, counted
        (``router.refused.uuid_mismatch``) and, with CURVE, a security event (at most one
        per claimed uuid per minute)."""
        claimed, bound = claimed[:64], bound[:64] or "?"
        relay = self.relay
        relay.refuse(relay.agents, "agents", rid, ProtocolError(
            protocol.FORBIDDEN, f"this connection speaks for uuid {bound}, not {claimed}"),
            ref=ref, careful=careful)
        self.counters.refused["uuid_mismatch"] += 1
        if self.curve and self.mismatch_events.allow(claimed):
            address = address[:64] or "an unknown address"
            self.security_event(f"uuid mismatch: a connection from {address} claimed uuid "
                                f"{claimed} with the key bound to uuid {bound}")

    # ---------------------------------------------------------------- the slow path
    def agent_message(self, rid: bytes, parts: list[bytes], now: float,
                      first: zmq.Frame | None = None) -> None:
        """The slow path. ``first`` is the first frame when the message was read frame by
        frame (its framing is certain, and it carries the connection's properties)."""
        relay = self.relay
        careful = first is None
        try:
            if len(parts) != 3:
                raise ProtocolError(protocol.BAD_REQUEST, f"expected 3 frames, got {len(parts)}")
            check_signature(parts[0])
            type_ = check_type(parts[1], AGENT_TYPES)
        except ProtocolError as e:
            relay.refuse(relay.agents, "agents", rid, e, answer=answerable(parts),
                         careful=careful)
            return
        peer = self.peers.get(rid)
        if peer is not None:
            peer.tokens -= 1.0
            if peer.tokens < 0.0:
                self.rate_limited(peer)
                return
        if type_ == "HELLO":
            self.hello(rid, parts, first)
            return
        peer = self.peers.heard(rid, now)
        if peer is None:
            relay.refuse(relay.agents, "agents", rid,
                         ProtocolError(protocol.HELLO_REQUIRED, "send HELLO first"), ref=type_,
                         careful=careful)
            return
        if type_ == "HEARTBEAT":
            relay.reply(relay.agents, rid, protocol.make("HEARTBEAT", relay.id, self.clock))
        self.counters.count_received(parts[1])
        relay.relay(peer.envelopes[parts[1]], parts[1], parts[2])

    def hello(self, rid: bytes, parts: list[bytes], first: zmq.Frame | None) -> None:
        relay = self.relay
        careful = first is None
        try:
            msg = protocol.decode(parts, AGENT_TYPES, relay.max_body)
        except ProtocolError as e:
            relay.refuse(relay.agents, "agents", rid, e, careful=careful)
            return
        attached = self.peers.get(rid)
        if attached is not None:            # its connection is bound: to this uuid only
            if attached.uuid != msg.uuid:
                self.mismatch(rid, msg.uuid, attached.uuid,
                              _property(first, "Peer-Address") if first is not None else "",
                              msg.msg_id, careful)
                return
        elif not self.bound(rid, first, msg.uuid, msg.msg_id):
            return                          # (an unattached routing id: read with properties)
        instance = str(msg.get("instance") or "")[:64]
        peer, _ = self.peers.hello(rid, msg.uuid, msg.get("hostname"),
                                   float(msg.get("heartbeat")), instance)
        found = self.clones.hello(msg.uuid, instance)
        if found is not None:
            self.counters.clones += 1
            self.security_event(CLONE_TEXT.format(uuid=msg.uuid, a=found[0], b=found[1]))
        relay.reply(relay.agents, rid, relay.welcome(endpoints=True))
        self.counters.count_received(parts[1])
        relay.relay(peer.envelopes[parts[1]], parts[1], parts[2])

    def set_limits(self, rate: float, burst: float, hellos_per_second: float) -> None:
        """New limits (a config reload): every bucket above the new burst is cut to it now,
        the sweep refills at the new rate; the admission pace changes at once too."""
        self.rate, self.burst = rate, burst
        self.peers.burst = burst
        for peer in self.peers.table.values():
            if peer.tokens > burst:
                peer.tokens = burst
        self.pacer.rate = float(hellos_per_second)
        self.pacer.tokens = min(self.pacer.tokens, self.pacer.rate)

    # ---------------------------------------------------------------- reports
    def rate_limited(self, peer) -> None:
        """A message above the agent's rate: dropped, counted, answered 429 (throttled)."""
        relay = self.relay
        peer.tokens = 0.0
        peer.last_heard = self.clock()          # a sign of life all the same
        self.counters.rate_limited += 1
        rid = peer.routing_id
        relay.throttle.warning("agents:429", "agents: %s is above its rate limit (%g/s, burst "
                               "%g): dropping", peer.uuid, self.rate, self.burst)
        if relay.limiter.allow(rid):
            relay.reply(relay.agents, rid, protocol.error(
                protocol.RATE_LIMITED, f"above {self.rate:g} messages/s", None, relay.id))

    def security_event(self, text: str) -> None:
        """A NOTIFY the router makes itself, relayed through the NOTIFY route (alerting)."""
        relay = self.relay
        self.counters.events += 1
        log.warning("security event: %s", text)
        msg = protocol.make("NOTIFY", relay.id, self.clock, severity="error",
                            source="router-security", text=text)
        relay.relay(self.own_notify, b"NOTIFY", protocol.encode_body(msg))

    # ---------------------------------------------------------------- periodic
    def sweep(self) -> None:
        """Refill the rate buckets and the admission pace, re-read changed allowlists,
        count failed handshakes, forget old events and clones."""
        now = self.monotonic()
        elapsed, self.last_refill = now - self.last_refill, now
        refill(self.peers.table.values(), self.rate, self.burst, elapsed)
        self.pacer.refill()
        if self.doorman is not None:
            self.doorman.refresh()
            self.doorman.drain_monitors()
        self.mismatch_events.prune(now)
        if len(self.clones) > 10_000:
            self.clones.prune(now)


def _property(frame: zmq.Frame, name: str) -> str:
    """A connection property of a received frame ('' when it has none)."""
    try:
        return frame.get(name) or ""
    except (zmq.ZMQError, UnicodeError):
        return ""
