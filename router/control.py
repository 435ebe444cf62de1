"""The router's control socket: sinks, schedulers and the CLI talk to the router here.

Control clients send HELLO (answered WELCOME), PEERS (answered with a page of the attached
agents), MEMBERS (the routers of the mesh: a router's list is merged, and every MEMBERS is
answered with this router's list, SPEC 4.9), ATTACHED (another router asks which uuids
are attached here before a site may speak for them, SPEC 4.10), STATS (a back-end
process's own counters, relayed like the router's) or ACK and RUN for one agent, which :class:`ControlDesk` forwards to that agent as received
(SIGNATURE, TYPE, BODY), answering an ERROR when the agent is not attached or not reading.
Every request is decoded with :func:`fleetwatch.protocol.decode_control`; none takes the
hot path.

No sockets here: the desk is given the identity map, the counters, a clock and a
:class:`router.port.DeskPort` (answer, refuse, relay, send to an agent). The relay reads each
request's frames and hands them to :meth:`ControlDesk.control_message`, with a
:class:`router.port.RelayPort` over its control socket.
"""

from __future__ import annotations

import heapq
import logging
import time

from fleetwatch import __version__, protocol
from fleetwatch.protocol import Message, ProtocolError
from router.counters import Counters
from router.heard import Backends
from router.members import MAX_MEMBERS, Members
from router.peers import Peers
from router.port import FULL, SENT, DeskPort
from router.replies import answerable

log = logging.getLogger(__name__)

#: what a back-end process's STATS may say it comes from
BACKEND_SOURCES = frozenset({"sink", "scheduler"})


class ControlDesk:
    """Answer and forward the control requests of the router ``router_id``
    (``clock``: epoch seconds)."""

    def __init__(self, peers: Peers, counters: Counters, port: DeskPort, router_id: str,
                 max_body: int = protocol.MAX_BODY, clock=time.time,
                 members: Members | None = None, gossip=None, curve: bool = False):
        self.peers, self.counters, self.port, self.id = peers, counters, port, router_id
        self.max_body, self.clock = max_body, clock
        #: the member table (SPEC 4.9), and ``gossip(entries)``, which merges a router's
        #: list into it (:meth:`router.mesh.Mesh.merge`); ``mesh_refused``, ``mesh_bad``:
        #: the MEMBERS refused (403: not a router's key) and malformed (400)
        self.members, self.gossip, self.curve = members, gossip, curve
        self.mesh_refused = self.mesh_bad = 0
        #: the agents behind site links (SPEC 4.10), a :class:`router.sites.Sites`:
        #: ``to_site(uuid, type_frame, body)`` (SENT, FULL, GONE, or None when no site
        #: speaks for it), ``peers_after(uuid)`` and ``len()`` (PEERS)
        self.beyond = None
        #: the back-end processes whose STATS this router relayed (PEERS: ``backends``),
        #: and when it started (PEERS: ``uptime``)
        self.backends = Backends(clock)
        self.started = clock()

    def control_message(self, rid: bytes, parts: list[bytes], user: str = "") -> None:
        """One request: its frames after the routing id ``rid``; ``user``: its connection's
        ZAP User-Id, with CURVE (read by the relay for MEMBERS and ATTACHED only)."""
        try:
            target, msg = protocol.decode_control(parts, self.max_body)
        except ProtocolError as e:
            if parts[1:2] == [b"MEMBERS"]:
                self.mesh_bad += 1
            self.port.refuse(rid, e, answer=answerable(parts))
            return
        if msg.type == "MEMBERS":
            self.members_request(rid, msg, user)
            return
        if msg.type == "ATTACHED":
            self.attached_request(rid, msg, user)
            return
        if msg.type == "HELLO":
            log.info("control client %s (%s, %s) said HELLO", msg.uuid, msg.get("role", "?"),
                     msg.get("hostname"))
            self.port.reply(rid, self.port.welcome())
        elif msg.type == "STATS":
            self.stats(rid, parts, msg)
        elif msg.type == "PEERS":
            self.peers_page(rid, msg)
        else:
            self.forward(rid, target, parts[1], parts[3], msg)

    def peers_page(self, rid: bytes, msg: Message) -> None:
        """One page of the attached agents (SPEC 4.3): those after the request's ``after``
        in uuid order, at most its ``limit`` (PEERS_PAGE by default and at most) and 256 KiB,
        with ``total``, the router's ``sinks`` and ``durable`` and, when more follow, ``next``. A page costs the relay loop at most
        one sort of the uuids and PEERS_PAGE entries, whatever the fleet's size."""
        after = msg.get("after") or ""
        limit = msg.get("limit", protocol.PEERS_PAGE)
        entries = (peer.as_dict() for peer in self.peers.after(after))
        total = len(self.peers)
        if self.beyond is not None and len(self.beyond):       # behind sites (4.10)
            attached = self.peers.uuids
            entries = heapq.merge(entries, (e for e in self.beyond.peers_after(after)
                                            if e["uuid"] not in attached),
                                  key=lambda e: e["uuid"])
            total += len(self.beyond)
        self.port.reply(rid, protocol.peers_page(self.id, entries, total, limit,
                                                 self.clock, fleet=self.fleet()))

    def fleet(self) -> dict:
        """What a PEERS answer says besides the agents (SPEC 4.3): the router's ``sinks``
        and ``durable`` routes, the ``backends`` it heard, the site links it lost
        (``sites_lost``, a central router's), its ``uptime`` and its fleetwatch
        ``version``."""
        found = {**self.port.fleet(), "backends": self.backends.answer(),
                 "uptime": round(max(0.0, self.clock() - self.started), 3),
                 "version": __version__}
        if self.beyond is not None:
            found["sites_lost"] = self.beyond.lost.answer()
        return found

    def members_request(self, rid: bytes, msg: Message, user: str) -> None:
        """MEMBERS (SPEC 4.9): a router's ``routers`` list is merged (with CURVE only from a
        key of ``security.routers``: else 403), a client's (none, or empty) is not; either
        is answered with this router's list."""
        if self.members is None:
            self.port.refuse(rid, ProtocolError(protocol.NOT_ALLOWED, "MEMBERS not accepted "
                                                "here"), ref=msg.msg_id)
            return
        entries = msg.get("routers") or []
        if entries:
            if not self._from_router(rid, msg, user, "MEMBERS with routers"):
                return
            if len(entries) > MAX_MEMBERS:
                self.mesh_bad += 1
                self.port.refuse(rid, ProtocolError(
                    protocol.BAD_REQUEST, f"MEMBERS: more than {MAX_MEMBERS} routers"),
                    ref=msg.msg_id)
                return
            if self.gossip is not None:
                self.gossip(entries)
        self.port.reply(rid, protocol.make("MEMBERS", self.id, self.clock, router=self.id,
                                           routers=self.members.entries()))

    def _from_router(self, rid: bytes, msg: Message, user: str, what: str) -> bool:
        """Whether a request only a router may make comes from one: without CURVE any
        peer may; with it, only a key of ``security.routers`` (else refused 403, counted
        ``mesh_refused``)."""
        if not self.curve or user.startswith("router:"):
            return True
        self.mesh_refused += 1
        self.port.refuse(rid, ProtocolError(
            protocol.FORBIDDEN, f"{what} from a key that is not a router's "
                                f"(security.routers)"), ref=msg.msg_id)
        return False

    def attached_request(self, rid: bytes, msg: Message, user: str) -> None:
        """ATTACHED (SPEC 4.10): another router of the mesh asks which of ``uuids`` are
        attached here (answered ``attached``: uuid -> "") or behind a site linked here,
        heard in the last minute (uuid -> the site), before it lets a site speak for them;
        with CURVE only a router's key may ask (else 403)."""
        if not self._from_router(rid, msg, user, "ATTACHED"):
            return
        uuids = msg.get("uuids")
        if uuids is None:
            self.mesh_bad += 1
            self.port.refuse(rid, ProtocolError(protocol.BAD_REQUEST, "ATTACHED: uuids "
                                                "missing"), ref=msg.msg_id)
            return
        here, beyond = self.peers.uuids, self.beyond
        found = {}
        for uuid in uuids:
            if uuid in here:
                found[uuid] = ""
            elif beyond is not None and (site := beyond.holds(uuid)) is not None:
                found[uuid] = site
        self.port.reply(rid, protocol.make("ATTACHED", self.id, self.clock, router=self.id,
                                           attached=found, ref=msg.msg_id))

    def stats(self, rid: bytes, parts: list[bytes], msg: Message) -> None:
        """A back-end process's own counters (SPEC 4.3): relayed through the STATS route
        like the router's, stamped with the sender's id; ``source`` must say it is not an
        agent's (``sink`` or ``scheduler``), so it never lands under an agent's host."""
        if msg.get("source") not in BACKEND_SOURCES:
            self.port.refuse(rid, ProtocolError(
                protocol.BAD_REQUEST, "STATS on control: source must be one of "
                                      + ", ".join(sorted(BACKEND_SOURCES))), ref=msg.msg_id)
            return
        self.counters.control_stats += 1
        self.backends.heard(msg.uuid, msg.get("source"), msg.get("hostname"),
                            msg.get("version"))
        # the sender's id ends the path, as a router's own id does: what no agent's STATS
        # can say (protocol.reporter), whatever its body's ``source``
        self.port.relay(protocol.envelope("STATS", msg.uuid, f"{self.id},{msg.uuid}"),
                        b"STATS", parts[3])

    def forward(self, rid: bytes, target: str, type_frame: bytes, body: bytes, msg: Message):
        """ACK or RUN to the agent ``target``: SIGNATURE, TYPE, BODY as received."""
        if target == self.id and msg.type == "ACK":   # of the router's own security events
            self.counters.own_acks += 1
            return
        peer = self.peers.by_uuid(target)     # at its newest connection
        status, reason = protocol.NOT_FOUND, f"agent {target[:64]} is not attached here"
        if peer is not None:
            sent = self.port.to_agent(peer.routing_id, type_frame, body)
            if sent == SENT:
                self.counters.forwarded[msg.type] += 1
                return
            if sent == FULL:
                status, reason = protocol.UNAVAILABLE, f"agent {target[:64]} is not reading"
            else:                             # GONE: its connection closed unnoticed
                self.peers.forget(peer.routing_id)
        elif self.beyond is not None:         # behind a site (SPEC 4.10)
            sent = self.beyond.to_site(target, type_frame, body)
            if sent == SENT:
                self.counters.forwarded[msg.type] += 1
                return
            if sent == FULL:
                status, reason = (protocol.UNAVAILABLE,
                                  f"the site link of agent {target[:64]} is not reading")
        if status == protocol.NOT_FOUND and msg.type == "RUN":
            self.counters.run_elsewhere += 1    # a scheduler sends each RUN to every router
        else:
            self.counters.count_bad(status)
        log.debug("cannot forward %s %s: %s", msg.type, msg.msg_id, reason)
        self.port.reply(rid, protocol.error(status, reason, msg.msg_id, self.id))
