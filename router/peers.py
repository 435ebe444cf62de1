"""The identity map: which agents are attached, filled by HELLO and expired by silence.

Two keys lead to an attached agent: the routing id of its current connection (the hot path's
:attr:`Peers.table`) and its uuid (:meth:`Peers.by_uuid`, for RUN and ACK). A routing id is
bound to one uuid by the first HELLO of its connection; a HELLO for that uuid from another
routing id (the agent reconnected) moves the agent there and forgets the old routing id.

Pure logic: no sockets. Times come from an injected ``clock`` returning seconds since the
epoch (PEERS reports them as such). The relay's hot path reads :attr:`Peers.table` directly and
sets ``Peer.last_heard``; everything else goes through the methods.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from fleetwatch.protocol import AGENT_TYPES

log = logging.getLogger(__name__)

#: longest hostname a PEERS entry carries (SPEC 4.3: longer ones are cut), so that any
#: entry fits a page
PEERS_HOSTNAME = 255


@dataclass
class Peer:
    """An attached agent. ``routing_id`` is the routing id of its current connection."""

    routing_id: bytes
    uuid: str
    hostname: str
    since: float
    last_heard: float
    interval: float
    #: the per-agent rate limit's token bucket: the hot path takes one per message, the
    #: periodic sweep refills it (router.guard.refill)
    tokens: float = 0.0
    #: HELLO's ``instance`` (random per agent process start), for clone detection
    instance: str = ""
    #: type frame -> the ENVELOPE frame ``TYPE/UUID/ROUTER`` the relay stamps messages with
    envelopes: dict[bytes, bytes] = field(default_factory=dict, repr=False)
    #: type frame -> how many of its messages of that type the tail published (SPEC 4.1,
    #: "The tail": the second number of SEQ; kept across its reconnections)
    tail_seq: dict[bytes, int] = field(default_factory=dict, repr=False)
    #: the body of its last HELLO, kept by a site router (Admission.keep_hellos): said again
    #: upstream when its uplink comes back (SPEC 4.10)
    hello: bytes = field(default=b"", repr=False)

    def deadline(self, expiry_intervals: float) -> float:
        """The time after which the peer is forgotten unless heard from again."""
        return self.last_heard + expiry_intervals * self.interval

    def as_dict(self) -> dict:
        """The PEERS reply entry for this agent (its hostname cut to PEERS_HOSTNAME)."""
        return {"uuid": self.uuid, "hostname": self.hostname[:PEERS_HOSTNAME],
                "since": self.since, "last_heard": self.last_heard}


class Peers:
    """Routing id -> :class:`Peer` and uuid -> :class:`Peer`, with expiry after
    ``expiry_intervals`` silent intervals."""

    def __init__(self, expiry_intervals: float = 3.0, clock=time.time, router: bytes = b"router"):
        self.expiry_intervals = expiry_intervals
        self.clock = clock
        self.router = router
        #: routing id -> Peer. Read by the relay's hot path; mutate only through methods
        #: (except ``Peer.last_heard``).
        self.table: dict[bytes, Peer] = {}
        #: uuid -> Peer (whose ``routing_id`` is its current connection's)
        self.uuids: dict[str, Peer] = {}
        #: tokens a new peer's bucket starts with
        self.burst = 0.0

    def __len__(self) -> int:
        return len(self.table)

    def __contains__(self, routing_id: bytes) -> bool:
        return routing_id in self.table

    def get(self, routing_id: bytes) -> Peer | None:
        return self.table.get(routing_id)

    def by_uuid(self, uuid: str) -> Peer | None:
        """The attached agent with this uuid (at its newest connection)."""
        return self.uuids.get(uuid)

    def hello(self, routing_id: bytes, uuid: str, hostname: str, interval: float,
              instance: str = "") -> tuple[Peer, bool]:
        """Record a HELLO; return the peer and whether it is new.

        The caller has checked that ``routing_id`` is not bound to another uuid (ValueError
        otherwise) and, with CURVE, that its connection's key speaks for ``uuid``. A HELLO
        for an attached uuid refreshes it and keeps its ``since`` and its rate bucket; from
        another routing id (a reconnect, or a clone) it moves the agent there and forgets
        the old routing id, whose messages then get 401 (SPEC 7.3).
        """
        bound = self.table.get(routing_id)
        if bound is not None and bound.uuid != uuid:
            raise ValueError(f"routing id bound to uuid {bound.uuid!r}, not {uuid!r}")
        now = self.clock()
        peer = self.uuids.get(uuid)
        if peer is None:
            peer = Peer(routing_id, uuid, hostname, now, now, interval, self.burst,
                        envelopes=envelopes(uuid.encode("ascii"), self.router))
            peer.instance = instance
            self.table[routing_id] = peer
            self.uuids[uuid] = peer
            log.info("agent %s (%s) attached, heartbeat %.3gs", uuid, hostname, interval)
            return peer, True
        if peer.routing_id != routing_id:
            self.table.pop(peer.routing_id, None)
            peer.routing_id = routing_id
            self.table[routing_id] = peer
            log.info("agent %s (%s) moved to a new connection", uuid, hostname)
        peer.hostname, peer.interval, peer.last_heard = hostname, interval, now
        peer.instance = instance
        return peer, False

    def heard(self, routing_id: bytes, now: float | None = None) -> Peer | None:
        """Note a sign of life from a peer; None if it is not attached."""
        peer = self.table.get(routing_id)
        if peer is not None:
            peer.last_heard = self.clock() if now is None else now
        return peer

    def forget(self, routing_id: bytes) -> Peer | None:
        peer = self.table.pop(routing_id, None)
        if peer is not None and self.uuids.get(peer.uuid) is peer:
            del self.uuids[peer.uuid]
        return peer

    def expire(self, now: float | None = None) -> list[Peer]:
        """Forget and return every peer silent for longer than its expiry deadline at
        ``now``: the time up to which the agents' messages have been read (the relay's
        ``read_up_to``), which is behind the clock while the inbound queue is."""
        now = self.clock() if now is None else now
        gone = [p for p in self.table.values() if now > p.deadline(self.expiry_intervals)]
        for peer in gone:
            self.forget(peer.routing_id)
            log.info("agent %s (%s) expired: silent for %.1fs", peer.uuid, peer.hostname,
                     now - peer.last_heard)
        return gone

    def after(self, uuid: str = "") -> Iterator[Peer]:
        """The attached agents whose uuid sorts after ``uuid``, in uuid order (a PEERS page,
        SPEC 4.3: a stable order a client can resume from, whoever attaches meanwhile)."""
        for key in sorted(u for u in self.uuids if u > uuid):
            peer = self.uuids.get(key)
            if peer is not None:
                yield peer

    def listing(self) -> list[dict]:
        """The attached agents as PEERS entries, oldest attachment first."""
        return [p.as_dict() for p in sorted(self.table.values(), key=lambda p: p.since)]


def envelopes(uuid: bytes, router: bytes) -> dict[bytes, bytes]:
    """Every ENVELOPE frame a peer's messages can be relayed with, built once at HELLO."""
    return {t: b"/".join((t, uuid, router)) for t in (a.encode() for a in AGENT_TYPES)}
