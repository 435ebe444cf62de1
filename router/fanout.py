"""Where a relayed message goes: each sink type of its route, upstream, and the tail.

:class:`Fanout` compiles the routing table for sending: type frame -> ((send, counter
slot), ...), one entry per sink type of the type's route (:mod:`router.routes`: the base
class's ``send`` of that type's PUSH socket, without pyzmq's Python wrapper, about 0.5 us
less per frame) and, at a site router, the uplink's sender for the type (everything goes
upstream too, SPEC 4.10). :meth:`Fanout.relay` sends SIGNATURE, ENVELOPE, BODY to each with
``NOBLOCK``, counting a ``zmq.Again`` as a drop, then publishes on the tail if anyone
listens; the hot path (:meth:`router.intake.Intake.fast`) inlines that loop.

A drop of an agent's message (:meth:`Fanout.lost`) is noted per agent in the drops ledger
(:mod:`router.drops`, when STATS go to a history sink) and, on a durable route, answered
``503`` (at most once a second per connection): the agent keeps the message and sends it
again (SPEC 4.1).
"""

from __future__ import annotations

import zmq

from fleetwatch import protocol
from fleetwatch.protocol import AGENT_TYPES, SIGNATURE
from router.counters import Counters
from router.drops import DropLedger
from router.port import RelayPort
from router.presence import SinkPresence
from router.replies import ReplyLimiter
from router.routes import RoutingTable
from router.tail import Tail
from router.uplink import UPSTREAM, Uplink

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK


class Fanout:
    """The sending side of router ``router_id``'s routes. ``durable``: spooled type -> the
    sink types whose ACK agents must have (SPEC 4.1), this router's own (``sink_durable``)
    and, at a site, those it tells its agents (its upstream's); ``port`` answers agents."""

    def __init__(self, router_id: str, routes: RoutingTable, counters: Counters, tail: Tail,
                 sink_durable: dict, presence: SinkPresence, ledger: DropLedger,
                 port: RelayPort, limiter: ReplyLimiter, uplink: Uplink | None = None,
                 durable: dict | None = None):
        self.id, self.counters, self.tail, self.presence = router_id, counters, tail, presence
        self.ledger, self.port, self.limiter = ledger, port, limiter
        slot = counters.slot
        #: type frame -> ((send, counter slot), ...): what the hot path iterates over
        self.table = {t: tuple((send, slot(t.decode(), name)) for name, send in entries)
                      for t, entries in routes.table.items()}
        #: counter slot -> (type, sink): whose drop the ledger notes
        self.slot_names = {slot(t, s): (t, s) for t, s in routes.pairs()}
        #: the counter slots of the durable (type, sink) routes
        self.durable_slots = frozenset(slot(t, s) for t, sinks in sink_durable.items()
                                       for s in sinks)
        if uplink is not None:              # a site: everything goes upstream too (4.10)
            types = {t for t, sinks in (durable or {}).items() if sinks}
            self.table = {t: (*entries, (uplink.sender(t, t.decode() in types),
                                         slot(t.decode(), UPSTREAM)))
                          for t, entries in self.table.items()}
            self.slot_names.update({slot(t, UPSTREAM): (t, UPSTREAM) for t in AGENT_TYPES})
            self.durable_slots |= {slot(t, UPSTREAM) for t in types}
        #: drops per agent until a history sink has them (only if STATS go to history)
        self.ledger_on = "history" in routes.sinks_of("STATS")

    def relay(self, envelope: bytes, type_frame: bytes, body: bytes, rid: bytes = b"",
              peer=None, now: float = 0.0) -> None:
        """Send a stamped message to each sink type of its route, and to the tail. ``peer``
        (at ``rid``): the agent it came from, whose drops are noted (:meth:`lost`)."""
        relayed, dropped = self.counters.relayed, self.counters.dropped
        for send, slot in self.table.get(type_frame, ()):
            try:
                send(SIGNATURE, MORE_NB)
            except zmq.Again:
                dropped[slot] += 1
                if peer is not None:
                    self.lost(rid, peer, slot, now)
                continue
            send(envelope, MORE_NB)
            send(body, NOBLOCK)
            relayed[slot] += 1
        tail = self.tail
        if tail.topics:
            tail.publish(type_frame, envelope, body,
                         peer.tail_seq if peer is not None else None)

    def lost(self, rid: bytes, peer, slot: int, now: float) -> None:
        """An agent's message its route's sink type ``slot`` could not take (counted by the
        caller): noted in the ledger for the lake, and on a durable route answered ``503``
        (at most once a second per connection): the agent keeps it and sends it again."""
        type_, sink = self.slot_names[slot]
        if self.ledger_on:
            self.ledger.add(peer.uuid, type_, sink, now)
        if slot in self.durable_slots and self.limiter.allow(rid):
            self.counters.durable_unavailable += 1
            if sink == UPSTREAM:
                why = f"the uplink of site router {self.id} is down"
            elif not self.presence.connected(sink):
                why = f"no {sink} sink is connected to router {self.id}"
            else:
                why = f"the {sink} sinks' queues are full"
            self.port.reply(rid, protocol.error(
                protocol.UNAVAILABLE, f"{why}: keep the {type_} and send it again", type_,
                self.id))
