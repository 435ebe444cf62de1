"""The router's slow path for agents: who may speak, and what happens to those who may not.

Everything an agent sends that the hot path in :mod:`router.relay` does not take comes here
as frames: messages from routing ids not attached, HELLO, HEARTBEAT, badly framed or unknown
types. :class:`Admission` decodes them with :mod:`fleetwatch.protocol` and answers with a
status code.

A routing id names one connection (agents draw a new secret one for each socket and the
agents ROUTER has no ``ROUTER_HANDOVER``, so no connection can take another's over, SPEC
7.3). The first HELLO from a routing id binds it to the HELLO's uuid, and with CURVE only
when the connection's key (its ZAP User-Id, read from the connection's properties once per
connection) is bound to that uuid; the hot path then trusts the routing id for the life of
the binding. Admission also keeps the limits and alarms of :mod:`router.guard`: rate
buckets, admission pacing, clone detection and the security events the router relays as
its own NOTIFYs. A HELLO the admission pace defers waits as long as its agent waits for an
answer (its declared heartbeat times the liveness, :func:`patience`;
:meth:`Admission.admit_waiting`, from each of the relay's wake-ups), newest first: its
connection is kept, so an agent pays one handshake (with CURVE, the costly part of a
reconnect storm) instead of one per retry.

No sockets here: :class:`Admission` is given the identity map, the counters, the limits, a
clock and a :class:`router.port.Port` (answer, refuse, relay to sinks and tail). The relay
reads the frames, hands them over from its main loop, its hot path's exits and its sweep,
and gives it a :class:`router.port.RelayPort` over the agents socket; the CURVE side
(:mod:`router.doorman`) stays with the relay.
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict

import zmq

from fleetwatch import protocol
from fleetwatch.logs import Throttle
from fleetwatch.protocol import (AGENT_TYPES, SIGNATURE, ProtocolError, check_signature,
                                 check_type)
from router.config import RouterLimits
from router.counters import Counters
from router.guard import CloneDetector, Once, Pacer, refill
from router.peers import Peer, Peers
from router.port import Port
from router.replies import answerable

log = logging.getLogger(__name__)

#: at most one security event per claimed uuid per this many seconds
EVENT_PERIOD = 60.0
#: the sweep forgets old clone sightings and security events this often (each a pass over
#: every uuid seen; their own caps bound them in between)
PRUNE_PERIOD = 60.0
#: a deferred HELLO waits as long as its agent does: an agent whose HELLO is not answered
#: within its liveness (LIVENESS heartbeat intervals, as its HELLO declares them: 6 s by
#: default) reconnects, and a WELCOME after that would go to a connection it closed. Less
#: WAITING_MARGIN (the answer's way back), never more than WAITING_SECONDS
LIVENESS = 3.0
WAITING_MARGIN = 0.25
WAITING_SECONDS = 30.0
#: the heartbeat a HELLO is assumed to declare when its body does not say (it is refused
#: when admitted; the agent's default)
DEFAULT_HEARTBEAT = 2.0
#: HELLO bodies longer than this are not read for their heartbeat while they wait
PATIENCE_BODY = 4096
#: HELLOs waiting at most (beyond, they are dropped unanswered, as they all were before)
WAITING_MAX = 50_000
CLONE_TEXT = ("uuid {uuid} is used by two agents at once (instances {a}, {b}): a cloned "
              "machine? mint a new uuid with fleetwatch agent --new-uuid")


class Admission:
    """Key-bound uuids and limits (SPEC 7) for the router ``router_id``.

    ``curve``: connections are CURVE, so a HELLO's uuid must be the one its connection's key
    is bound to. ``clock`` gives epoch seconds (stamps), ``monotonic`` the limits' time.
    A message handler's ``conn`` is the connection's properties (anything with
    ``get(name)``, such as the first :class:`zmq.Frame` of the message), or None when the
    message was read the fast way (its framing uncertain, its properties not read).
    """

    def __init__(self, peers: Peers, counters: Counters, port: Port, router_id: str,
                 limits: RouterLimits, curve: bool = False, clock=time.time,
                 monotonic=time.monotonic):
        self.peers, self.counters, self.port, self.id = peers, counters, port, router_id
        self.clock, self.monotonic = clock, monotonic
        self.curve = curve
        self.max_body = limits.max_message_bytes
        self.rate, self.burst = limits.rate, limits.burst
        self.peers.burst = self.burst
        self.last_refill = monotonic()
        self.pacer = Pacer(limits.hellos_per_second, monotonic)
        #: routing id -> (frames, connection, monotonic arrival) of HELLOs the pace deferred
        self.waiting: OrderedDict[bytes, tuple[list[bytes], object, float]] = OrderedDict()
        self.clones = CloneDetector(clock=monotonic)
        #: keep each attached agent's last HELLO body on its Peer (a site router's: it says
        #: them again upstream when its uplink comes back, SPEC 4.10)
        self.keep_hellos = False
        self.next_prune = monotonic() + PRUNE_PERIOD
        self.mismatch_events = Once(EVENT_PERIOD, monotonic)
        self.throttle = Throttle(log, 10.0, monotonic)
        self.own_notify = protocol.envelope("NOTIFY", router_id, router_id)

    # ---------------------------------------------------------------- strangers
    def unknown(self, rid: bytes, parts: list[bytes], now: float, conn) -> None:
        """A message from a routing id not attached, read frame by frame: only a HELLO gets
        anywhere (others: 401), and new agents at most at the admission pace."""
        if len(parts) == 3 and parts[1] == b"HELLO" and parts[0] == SIGNATURE:
            # admission pacing (SPEC 7.6): with those waiting, and within the pace
            if self.waiting or not self.pacer.allow():
                self.defer(rid, parts, conn)
                return
        self.agent_message(rid, parts, now, conn)

    def defer(self, rid: bytes, parts: list[bytes], conn) -> None:
        """Put a HELLO to wait for the pace, until its agent gives up on it
        (:func:`patience`); a routing id's later HELLO replaces its earlier one in its
        place, with the earlier one's deadline (the connection's agent counts from its
        first)."""
        self.counters.admission_deferred += 1
        waiting = self.waiting
        if rid in waiting:
            waiting[rid] = (parts, conn, waiting[rid][2])
        elif len(waiting) >= WAITING_MAX:
            self.counters.admission_expired += 1
        else:
            waiting[rid] = (parts, conn, self.monotonic() + patience(parts[2]))

    def admit_waiting(self, now: float) -> None:
        """Admit the waiting HELLOs the pace allows, newest first (``now``: epoch seconds):
        under a storm the newest have the most time left before their agents give up and
        reconnect. A HELLO whose agent has given up (its liveness passed, :func:`patience`)
        is dropped unanswered: its connection is closed or about to be."""
        waiting, pacer = self.waiting, self.pacer
        mono = self.monotonic()
        while waiting:                      # the oldest, whose agents gave up first
            rid = next(iter(waiting))
            if waiting[rid][2] > mono:
                break
            del waiting[rid]
            self.counters.admission_expired += 1
        while waiting:
            rid, entry = waiting.popitem()
            if entry[2] <= mono:            # a shorter liveness than those before it
                self.counters.admission_expired += 1
                continue
            if not pacer.take():
                waiting[rid] = entry        # back in its place, the newest
                return
            self.agent_message(rid, entry[0], now, entry[1])

    def bound(self, rid: bytes, conn, claimed: str, ref: str) -> bool:
        """With CURVE, whether the connection's key (its User-Id) is bound to ``claimed``,
        or to the poller of the device ``claimed`` names (:func:`fleetwatch.protocol.
        poller_of`); if not, refuse (403), count and report a security event."""
        if not self.curve:
            return True
        user_id = connection_property(conn, "User-Id")
        poller = protocol.poller_of(claimed)
        if user_id == "agent:" + claimed or (poller is not None and user_id == "agent:" + poller):
            return True                 # its own uuid, or a device it polls (SPEC 7.2)
        self.mismatch(rid, claimed, user_id.removeprefix("agent:"),
                      connection_property(conn, "Peer-Address"), ref)
        return False

    def mismatch(self, rid: bytes, claimed: str, bound: str, address: str, ref: str,
                 careful: bool = False) -> None:
        """A connection claimed a uuid it does not speak for: 403, counted
        (``router.refused.uuid_mismatch``) and, with CURVE, a security event (at most one
        per claimed uuid per minute)."""
        claimed, bound = claimed[:64], bound[:64] or "?"
        self.port.refuse(rid, ProtocolError(
            protocol.FORBIDDEN, f"this connection speaks for uuid {bound}, not {claimed}"),
            ref=ref, careful=careful)
        self.counters.refused["uuid_mismatch"] += 1
        if self.curve and self.mismatch_events.allow(claimed):
            address = address[:64] or "an unknown address"
            self.security_event(f"uuid mismatch: a connection from {address} claimed uuid "
                                f"{claimed} with the key bound to uuid {bound}")

    # ---------------------------------------------------------------- the slow path
    def agent_message(self, rid: bytes, parts: list[bytes], now: float, conn=None) -> None:
        """The slow path for any agent message (``now``: epoch seconds)."""
        port = self.port
        careful = conn is None
        try:
            if len(parts) != 3:
                raise ProtocolError(protocol.BAD_REQUEST, f"expected 3 frames, got {len(parts)}")
            check_signature(parts[0])
            type_ = check_type(parts[1], AGENT_TYPES)
        except ProtocolError as e:
            port.refuse(rid, e, answer=answerable(parts), careful=careful)
            return
        peer = self.peers.get(rid)
        if peer is not None:
            peer.tokens -= 1.0
            if peer.tokens < 0.0:
                self.rate_limited(peer)
                return
        if type_ == "HELLO":
            self.hello(rid, parts, conn)
            return
        peer = self.peers.heard(rid, now)
        if peer is None:
            port.refuse(rid, ProtocolError(protocol.HELLO_REQUIRED, "send HELLO first"),
                        ref=type_, careful=careful)
            return
        if type_ == "HEARTBEAT":
            port.reply(rid, protocol.make("HEARTBEAT", self.id, self.clock))
        self.counters.count_received(parts[1])
        port.relay(peer.envelopes[parts[1]], parts[1], parts[2])

    def hello(self, rid: bytes, parts: list[bytes], conn=None) -> None:
        port = self.port
        careful = conn is None
        try:
            msg = protocol.decode(parts, AGENT_TYPES, self.max_body)
        except ProtocolError as e:
            port.refuse(rid, e, careful=careful)
            return
        if msg.uuid == self.id:             # what stamps this router's own STATS (SPEC 4.3)
            self.counters.refused["own_id"] += 1
            port.refuse(rid, ProtocolError(protocol.FORBIDDEN, f"uuid {self.id} is this "
                                           f"router's own id"), ref=msg.msg_id, careful=careful)
            return
        attached = self.peers.get(rid)
        if attached is not None:            # its connection is bound: to this uuid only
            if attached.uuid != msg.uuid:
                self.mismatch(rid, msg.uuid, attached.uuid,
                              connection_property(conn, "Peer-Address"), msg.msg_id, careful)
                return
        elif not self.bound(rid, conn, msg.uuid, msg.msg_id):
            return                          # (an unattached routing id: read with properties)
        welcome = port.welcome()
        if attached is None and not port.reply(rid, welcome):
            # its connection is gone (its agent gave up waiting and reconnected) or not
            # reading: bound, it would take the agent's uuid from the connection it uses
            # now, and the sinks would hear of an attachment that never was
            self.counters.admission_gone += 1
            return
        instance = str(msg.get("instance") or "")[:64]
        peer, _ = self.peers.hello(rid, msg.uuid, msg.get("hostname"),
                                   float(msg.get("heartbeat")), instance)
        found = self.clones.hello(msg.uuid, instance)
        if found is not None:
            self.counters.clones += 1
            self.security_event(CLONE_TEXT.format(uuid=msg.uuid, a=found[0], b=found[1]))
        if self.keep_hellos:
            peer.hello = parts[2]
        if attached is not None:
            port.reply(rid, welcome)
        self.counters.count_received(parts[1])
        port.relay(peer.envelopes[parts[1]], parts[1], parts[2])

    def set_limits(self, rate: float, burst: float, hellos_per_second: float) -> None:
        """New limits (a config reload): every bucket above the new burst is cut to it now,
        the sweep refills at the new rate; the admission pace's ceiling changes at once too."""
        self.rate, self.burst = rate, burst
        self.peers.burst = burst
        for peer in self.peers.table.values():
            if peer.tokens > burst:
                peer.tokens = burst
        self.pacer.set_ceiling(hellos_per_second)

    # ---------------------------------------------------------------- reports
    def rate_limited(self, peer: Peer) -> None:
        """A message above the agent's rate: dropped, counted, answered 429 (throttled)."""
        peer.tokens = 0.0
        peer.last_heard = self.clock()          # a sign of life all the same
        self.counters.rate_limited += 1
        rid = peer.routing_id
        self.throttle.warning("agents:429", "agents: %s is above its rate limit (%g/s, burst "
                              "%g): dropping", peer.uuid, self.rate, self.burst)
        if self.port.may_answer(rid):
            self.port.reply(rid, protocol.error(
                protocol.RATE_LIMITED, f"above {self.rate:g} messages/s", None, self.id))

    def security_event(self, text: str) -> None:
        """A NOTIFY the router makes itself, relayed through the NOTIFY route (alerting)."""
        self.counters.events += 1
        log.warning("security event: %s", text)
        msg = protocol.make("NOTIFY", self.id, self.clock, severity="error",
                            source="router-security", text=text)
        self.port.relay(self.own_notify, b"NOTIFY", protocol.encode_body(msg))

    # ---------------------------------------------------------------- periodic
    def sweep(self, busy: float | None = None) -> None:
        """Refill the rate buckets and the admission pace (moved by ``busy``, the share of
        the period the relay's loop worked: :class:`router.guard.Pacer`), forget old events
        and clones."""
        now = self.monotonic()
        elapsed, self.last_refill = now - self.last_refill, now
        refill(self.peers.table.values(), self.rate, self.burst, elapsed)
        self.pacer.refill(busy)
        if now >= self.next_prune:          # O(agents): not at every sweep
            self.next_prune = now + PRUNE_PERIOD
            self.mismatch_events.prune(now)
            self.clones.prune(now)


def patience(body: bytes) -> float:
    """How long the agent that sent this HELLO body waits for its WELCOME, less the
    answer's way back: ``LIVENESS`` times the heartbeat the HELLO declares (SPEC 5), at
    most ``WAITING_SECONDS``. A body that does not say is given the agent's default."""
    heartbeat = DEFAULT_HEARTBEAT
    if len(body) <= PATIENCE_BODY:
        try:
            declared = json.loads(body).get("heartbeat")
        except (ValueError, AttributeError, RecursionError):
            declared = None
        if isinstance(declared, (int, float)) and not isinstance(declared, bool) \
                and declared > 0:
            heartbeat = float(declared)
    return max(0.0, min(WAITING_SECONDS, LIVENESS * heartbeat - WAITING_MARGIN))


def connection_property(conn, name: str) -> str:
    """A connection property ('' when there is none, or no connection)."""
    if conn is None:
        return ""
    try:
        return conn.get(name) or ""
    except (zmq.ZMQError, UnicodeError):
        return ""
