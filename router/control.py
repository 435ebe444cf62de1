"""The router's control socket: sinks, schedulers and the CLI talk to the router here.

Control clients send HELLO (answered WELCOME), PEERS (answered with a page of the attached
agents) or ACK and RUN for one agent, which :class:`ControlDesk` forwards to that agent as
received (SIGNATURE, TYPE, BODY), answering an ERROR when the agent is not attached or not
reading.
Every request is decoded with :func:`fleetwatch.protocol.decode_control`; none takes the
hot path. The desk works through its :class:`router.relay.Relay` (sockets, peers, counters,
replies and refusals).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import zmq

from fleetwatch import protocol
from fleetwatch.protocol import SIGNATURE, Message, ProtocolError
from router.replies import answerable

if TYPE_CHECKING:
    from router.relay import Relay

log = logging.getLogger(__name__)

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK
#: what a back-end process's STATS may say it comes from
BACKEND_SOURCES = frozenset({"sink", "scheduler"})


class ControlDesk:
    """Answer and forward what arrives on the relay's control ROUTER."""

    def __init__(self, relay: Relay):
        self.relay = relay

    def drain(self) -> None:
        """Handle up to the relay's ``drain`` control requests."""
        relay = self.relay
        recv, more = relay.control.recv, relay.control_rcvmore
        for _ in range(relay.drain):
            try:
                rid = recv(NOBLOCK)
            except zmq.Again:
                return
            parts = []
            while more():
                parts.append(recv())
            relay.guarded(self.control_message, rid, parts)

    def control_message(self, rid: bytes, parts: list[bytes]) -> None:
        relay = self.relay
        try:
            target, msg = protocol.decode_control(parts, relay.max_body)
        except ProtocolError as e:
            relay.refuse(relay.control, "control", rid, e, answer=answerable(parts))
            return
        if msg.type == "HELLO":
            log.info("control client %s (%s, %s) said HELLO", msg.uuid, msg.get("role", "?"),
                     msg.get("hostname"))
            relay.reply(relay.control, rid, relay.welcome(endpoints=True))
        elif msg.type == "STATS":
            self.stats(rid, parts, msg)
        elif msg.type == "PEERS":
            self.peers(rid, msg)
        else:
            self.forward(rid, target, parts[1], parts[3], msg)

    def peers(self, rid: bytes, msg: Message) -> None:
        """One page of the attached agents (SPEC 4.3): those after the request's ``after``
        in uuid order, at most its ``limit`` (PEERS_PAGE by default and at most) and 256 KiB,
        with ``total`` and, when more follow, ``next``. A page costs the relay loop at most
        one sort of the uuids and PEERS_PAGE entries, whatever the fleet's size."""
        relay = self.relay
        after = msg.get("after") or ""
        limit = msg.get("limit", protocol.PEERS_PAGE)
        entries = (peer.as_dict() for peer in relay.peers.after(after))
        relay.reply(relay.control, rid, protocol.peers_page(
            relay.id, entries, len(relay.peers), limit, relay.clock))

    def stats(self, rid: bytes, parts: list[bytes], msg: Message) -> None:
        """A back-end process's own counters (SPEC 4.3): relayed through the STATS route
        like the router's, stamped with the sender's id; ``source`` must say it is not an
        agent's (``sink`` or ``scheduler``), so it never lands under an agent's host."""
        relay = self.relay
        if msg.get("source") not in BACKEND_SOURCES:
            relay.refuse(relay.control, "control", rid, ProtocolError(
                protocol.BAD_REQUEST, "STATS on control: source must be one of "
                                      + ", ".join(sorted(BACKEND_SOURCES))), ref=msg.msg_id)
            return
        relay.counters.control_stats += 1
        relay.relay(protocol.envelope("STATS", msg.uuid, relay.id), b"STATS", parts[3])

    def forward(self, rid: bytes, target: str, type_frame: bytes, body: bytes, msg: Message):
        """ACK or RUN to the agent ``target``: SIGNATURE, TYPE, BODY as received."""
        relay = self.relay
        if target == relay.id and msg.type == "ACK":   # of the router's own security events
            relay.counters.own_acks += 1
            return
        peer = relay.peers.by_uuid(target)     # at its newest connection
        status, reason = protocol.NOT_FOUND, f"agent {target[:64]} is not attached here"
        if peer is not None:
            send = relay.agents.send
            try:
                send(peer.routing_id, MORE_NB)
                send(SIGNATURE, MORE_NB)
                send(type_frame, MORE_NB)
                send(body, NOBLOCK)
                relay.counters.forwarded[msg.type] += 1
                return
            except zmq.Again:
                status, reason = protocol.UNAVAILABLE, f"agent {target[:64]} is not reading"
            except zmq.ZMQError as e:
                if e.errno != zmq.EHOSTUNREACH:
                    raise
                relay.peers.forget(peer.routing_id)
        relay.counters.count_bad(status)
        log.debug("cannot forward %s %s: %s", msg.type, msg.msg_id, reason)
        relay.reply(relay.control, rid, protocol.error(status, reason, msg.msg_id, relay.id))
