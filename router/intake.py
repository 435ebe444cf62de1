"""The agents socket's reading: the relay's hot path, and its exits to the slow path.

The hot path (a STATS, NOTIFY, REGISTER or RESULT from an attached agent) neither decodes
the body nor allocates a message object: :meth:`Intake.fast` reads the frames one by one
with integer flags, compares the signature frame, looks the type frame up in the routing
table and sends the stamped frames (SIGNATURE, ENVELOPE, BODY) to each sink type's PUSH
socket with ``NOBLOCK``, counting a ``zmq.Again`` as a drop (noted and answered by
:meth:`router.fanout.Fanout.lost`), then publishes on the tail if anyone listens: the send
loop of :meth:`router.fanout.Fanout.relay`, inlined. An attached agent's HEARTBEAT, well
framed, is answered and relayed here too (:meth:`Intake.heartbeat`: one a second from every
agent, the bulk of a big fleet's traffic). Everything else (HELLO, bad frames, unknown peers) is read here and handed as
frames to the slow path, :class:`router.admission.Admission`, through the relay's
``guarded`` (a bug in a handler is counted, never fatal).

Two ways to read (which one is the relay's choice, :meth:`router.relay.Relay.run`):
:meth:`Intake.fast` receives SIGNATURE, TYPE and BODY, then checks RCVMORE once. A message
of fewer than three frames cannot be told from its successor that way (its frames run on into
the next message), so the first malformed one goes to the relay's ``misframed``, which
switches it to :meth:`Intake.careful` for ``limits.careful_seconds``: a hostile peer can
cost at most the message that follows its own, once per quiet period; well-formed traffic
pays one RCVMORE read per message instead of three (about 30 % more throughput,
bench/RESULTS.md). The hot path trusts the routing id, bound to a uuid by its connection's
HELLO: so no ``ROUTER_HANDOVER`` on the agents socket (SPEC 7.3).
"""

from __future__ import annotations

from types import MethodType

import zmq
import zmq.backend

from fleetwatch import protocol
from fleetwatch.protocol import SIGNATURE
from fleetwatch.rcvmore import rcvmore_reader
from router.admission import Admission
from router.counters import Counters
from router.fanout import Fanout
from router.peers import Peers
from router.tail import Tail

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK
HEARTBEAT = b"HEARTBEAT"
#: Types that need an answer or a decode, so never take the hot path.
SLOW_TYPES = frozenset({b"HELLO", HEARTBEAT})


class Intake:
    """Reads the agents ROUTER ``sock`` of router ``router_id``; sends through ``fanout``
    (its routing table, its ``relay`` and ``lost``). The relay's ways on: ``guarded(handler,
    rid, parts, *args)`` (the slow path), ``misframed(rid, parts, now)`` (read carefully
    from now on)."""

    def __init__(self, sock: zmq.Socket, peers: Peers, counters: Counters,
                 admission: Admission, fanout: Fanout, tail: Tail, router_id: str, clock, *,
                 guarded, misframed):
        self.socket, self.peers, self.counters = sock, peers, counters
        self.tail, self.id, self.clock = tail, router_id, clock
        self.fast_routes = {t: r for t, r in fanout.table.items() if t not in SLOW_TYPES}
        self.rcvmore = rcvmore_reader(sock)
        # the base class's send, without pyzmq's Python wrapper (as the routing table's)
        self.send = MethodType(zmq.backend.Socket.send, sock)
        # the exits, bound once here: taking one costs no more than calling a method of
        # this class (no extra lookup in the loops)
        self.unknown = admission.unknown
        self.rate_limited = admission.rate_limited
        self.agent_message = admission.agent_message
        self.relay, self.lost = fanout.relay, fanout.lost
        self.guarded, self.misframed = guarded, misframed

    def fast(self, now: float, drain: int) -> bool:
        """Handle up to ``drain`` agent messages, RCVMORE read once each (the module
        docstring: the relay switches to :meth:`careful` after a malformed one). True when
        the socket was emptied: every message queued before ``now`` has been read."""
        recv, more = self.socket.recv, self.rcvmore
        fast, known = self.fast_routes, self.peers.table
        received, relayed, dropped = (self.counters.received, self.counters.relayed,
                                      self.counters.dropped)
        signature = SIGNATURE
        tail = self.tail.topics
        publish = self.tail.publish
        for _ in range(drain):
            try:
                rid = recv(NOBLOCK)
            except zmq.Again:
                return True
            peer = known.get(rid)
            if peer is None:         # not attached: the slow way
                self.stranger(rid, now)
                continue
            sig = type_frame = None
            try:
                sig = recv(NOBLOCK)
                type_frame = recv(NOBLOCK)
                body = recv(NOBLOCK)
            except zmq.Again:        # fewer than three frames and nothing behind them
                self.misframed(rid, [f for f in (sig, type_frame) if f is not None], now)
                return True
            if more():
                parts = [sig, type_frame, body]
                while more():
                    parts.append(recv())
                self.misframed(rid, parts, now)
                return
            route = fast.get(type_frame)
            if route is None or sig != signature:
                if type_frame == HEARTBEAT and sig == signature:
                    self.heartbeat(rid, peer, body, now)
                    continue
                self.guarded(self.agent_message, rid, [sig, type_frame, body], now)
                continue
            tokens = peer.tokens - 1.0
            peer.tokens = tokens
            if tokens < 0.0:
                self.rate_limited(peer)
                continue
            peer.last_heard = now
            received[type_frame] += 1
            envelope = peer.envelopes[type_frame]
            for send, slot in route:
                try:
                    send(signature, MORE_NB)
                except zmq.Again:
                    dropped[slot] += 1
                    self.lost(rid, peer, slot, now)
                    continue
                send(envelope, MORE_NB)
                send(body, NOBLOCK)
                relayed[slot] += 1
            if tail:
                publish(type_frame, envelope, body, peer.tail_seq)
        return False

    def heartbeat(self, rid: bytes, peer, body: bytes, now: float) -> None:
        """An attached agent's HEARTBEAT read the fast way (three frames, the signature
        checked): what the slow path does with it, without its checks and message objects
        (a rate-limit token, a sign of life, the answer, the relay)."""
        tokens = peer.tokens - 1.0
        peer.tokens = tokens
        if tokens < 0.0:
            self.rate_limited(peer)
            return
        peer.last_heard = now
        self.counters.received[HEARTBEAT] += 1
        send = self.send
        answer = protocol.encode_body(protocol.make("HEARTBEAT", self.id, self.clock))
        try:
            send(rid, MORE_NB)
            send(SIGNATURE, MORE_NB)
            send(HEARTBEAT, MORE_NB)
            send(answer, NOBLOCK)
        except zmq.ZMQError:    # Again (its queue is full) or EHOSTUNREACH (gone)
            self.counters.replies_failed += 1
        self.relay(peer.envelopes[HEARTBEAT], HEARTBEAT, body, rid, peer, now)

    def careful(self, now: float, drain: int) -> bool:
        """Handle up to ``drain`` agent messages, checking RCVMORE after every frame; True
        when the socket was emptied (as :meth:`fast`).

        Frame by frame with integer flags (recv_multipart costs 4x more; docs/development/
        decisions.md, "Reading frames on the hot path"), RCVMORE read through
        :mod:`fleetwatch.rcvmore`. A ROUTER's routing id frame is always followed by
        at least one frame, so RCVMORE is checked after each frame but the routing id.
        """
        recv, more = self.socket.recv, self.rcvmore
        fast, known = self.fast_routes, self.peers.table
        received = self.counters.received
        signature = SIGNATURE
        for _ in range(drain):
            try:
                rid = recv(NOBLOCK)
            except zmq.Again:
                return True
            peer = known.get(rid)
            if peer is None:
                self.stranger(rid, now)
                continue
            sig = recv()
            if not more():
                self.guarded(self.agent_message, rid, [sig], now)
                continue
            type_frame = recv()
            if not more():
                self.guarded(self.agent_message, rid, [sig, type_frame], now)
                continue
            body = recv()
            if more():
                parts = [sig, type_frame, body]
                while more():
                    parts.append(recv())
                self.guarded(self.agent_message, rid, parts, now)
                continue
            if type_frame not in fast or sig != signature:
                self.guarded(self.agent_message, rid, [sig, type_frame, body], now)
                continue
            tokens = peer.tokens - 1.0
            peer.tokens = tokens
            if tokens < 0.0:
                self.rate_limited(peer)
                continue
            peer.last_heard = now
            received[type_frame] += 1
            # not the hot path: the send loop inlined in fast() is Fanout.relay's
            self.relay(peer.envelopes[type_frame], type_frame, body, rid, peer, now)
        return False

    def stranger(self, rid: bytes, now: float) -> None:
        """A message from a routing id not in the hot path's table: read it frame by frame
        (zmq.Frame: the first carries the connection's properties, its ZAP User-Id should it
        be a HELLO), then hand it to admission."""
        recv = self.socket.recv
        frames = [recv(copy=False)]
        while frames[-1].more:
            frames.append(recv(copy=False))
        self.guarded(self.unknown, rid, [f.bytes for f in frames], now, frames[0])
