"""The router's gossip sockets: one DEALER to the control socket of each router it tells.

Every ``mesh.interval`` seconds (:meth:`Mesh.round`) the router's own beat advances, the
members silent past the expiry become tombstones, and a MEMBERS carrying the router's member
list (SPEC 4.9) goes to ``mesh.fanout`` live members chosen at random and to every seed not
yet known as a live member; each answers MEMBERS with its own list, which is merged here
(push-pull). The same DEALERs carry ATTACHED (:meth:`Mesh.ask_attached`: which of these
uuids is attached to you, before a site may speak for them, SPEC 4.10), whose answers go to
``on_attached``. The decisions are :class:`router.members.Members`'; this is the thin adapter
that owns the DEALERs (the relay's poll loop polls them: :meth:`Mesh.register`,
:meth:`Mesh.read`). A DEALER sends only once connected (``IMMEDIATE``) and is made again
after ``REDIAL_AFTER`` rounds without an answer: libzmq does not retry a connection whose
CURVE handshake was refused (a key allowed later, SPEC 7.4). DEALERs to routers no longer
live, and not seeds, are closed.

With CURVE the DEALERs present ``mesh.key`` (else the router's own server certificate) and
verify the routers' certificate (the router's ``security.server_key``: a fleet's routers
share one, SPEC 7.1); a router lets them in if that key is in its ``security.routers``.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

import zmq

from fleetwatch import protocol
from fleetwatch.link import replies
from fleetwatch.logs import Throttle
from fleetwatch.protocol import ProtocolError
from router.members import Members

log = logging.getLogger(__name__)

#: rounds without an answer after which a DEALER is made again
REDIAL_AFTER = 5
#: requests queued per DEALER: a few rounds' MEMBERS (one is worthless once the next is
#: due) and the ATTACHED of a site's burst (20,000 uuids held are 20 of them)
SNDHWM = 32
FROM_ROUTER = frozenset({"MEMBERS", "ATTACHED", "ERROR"})


@dataclass
class Dealer:
    """The DEALER to one router's control ``endpoint``; ``router_id``: who answered."""

    endpoint: str
    socket: zmq.Socket
    router_id: str | None = None
    unanswered: int = 0


class Mesh:
    """Gossip with the other routers (see the module docstring). ``keys``: (own
    certificate, routers' certificate) with CURVE, else None. ``on_change(joined, left)``:
    the live set changed (the relay tells its agents)."""

    def __init__(self, members: Members, seeds, fanout: int, ctx: zmq.Context,
                 max_body: int = protocol.MAX_BODY, keys=None, counts: Counter | None = None,
                 clock=time.time, monotonic=time.monotonic, rand: random.Random | None = None):
        self.members, self.fanout, self.ctx = members, fanout, ctx
        self.seeds = list(dict.fromkeys(seeds))
        self.max_body, self.keys = max_body, keys
        self.counts = counts if counts is not None else Counter()
        self.clock, self.monotonic = clock, monotonic
        self.rand = rand or random.Random()
        self.throttle = Throttle(log, 10.0, monotonic)
        self.dealers: dict[str, Dealer] = {}
        self.by_socket: dict[zmq.Socket, Dealer] = {}
        self.poller: zmq.Poller | None = None
        self.on_change: Callable[[list[str], list[str]], None] = lambda joined, left: None
        #: ``on_attached(router_id, ref, attached)``: a router's answer to
        #: :meth:`ask_attached` (an ERROR answering it: none attached)
        self.on_attached: Callable[[str, str, dict], None] = lambda router, ref, found: None
        self.next_round = 0.0

    # ---------------------------------------------------------------- sockets
    def register(self, poller: zmq.Poller) -> None:
        """Poll the DEALERs on ``poller`` (and those made later)."""
        self.poller = poller
        for sock in self.by_socket:
            poller.register(sock, zmq.POLLIN)

    def _open(self, endpoint: str) -> Dealer | None:
        sock = self.ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.sndhwm = SNDHWM
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_body + 4096)
        if self.keys is not None:
            from fleetwatch.security import client
            client(sock, *self.keys)
        try:
            sock.connect(endpoint)
        except zmq.ZMQError as e:
            sock.close(0)
            self.counts["bad_endpoint"] += 1
            self.throttle.warning(f"endpoint {endpoint[:64]}", "mesh: cannot connect to %s: %s",
                                  endpoint[:255], e)
            return None
        dealer = Dealer(endpoint, sock)
        self.dealers[endpoint] = dealer
        self.by_socket[sock] = dealer
        if self.poller is not None:
            self.poller.register(sock, zmq.POLLIN)
        return dealer

    def _close(self, dealer: Dealer) -> None:
        self.dealers.pop(dealer.endpoint, None)
        self.by_socket.pop(dealer.socket, None)
        if self.poller is not None:
            self.poller.unregister(dealer.socket)
        dealer.socket.close(0)

    def close(self) -> None:
        for dealer in list(self.dealers.values()):
            self._close(dealer)

    # ---------------------------------------------------------------- rounds
    def round(self) -> None:
        """One gossip round: beat, expire, tell ``fanout`` members and the unknown seeds."""
        self.next_round = self.monotonic() + self.members.interval
        self.members.tick()
        left = self.members.expire()
        if left:
            self.on_change([], left)
        targets = self.targets()
        wanted = set(targets) | set(self.seeds) | {
            m.endpoints["control"] for m in self.members.live()}
        for dealer in list(self.dealers.values()):
            if dealer.endpoint not in wanted:
                self._close(dealer)
        if not targets:
            return
        frames = protocol.encode_control(self.request())
        for endpoint in targets:
            self._send(endpoint, frames)

    def request(self) -> protocol.Message:
        own = self.members.own.id
        return protocol.make("MEMBERS", own, self.clock, router=own,
                             routers=self.members.entries())

    def targets(self) -> list[str]:
        """The control endpoints told this round: ``fanout`` live members at random, and
        every seed that has not answered as a live member (nor as this router)."""
        own = self.members.own
        others = [m.endpoints["control"] for m in self.members.live() if m is not own]
        chosen = self.rand.sample(others, min(self.fanout, len(others)))
        live = {m.id for m in self.members.live()}
        for seed in self.seeds:
            dealer = self.dealers.get(seed)
            known = dealer is not None and dealer.router_id in live
            if not known and seed not in chosen and seed != own.endpoints["control"]:
                chosen.append(seed)
        return chosen

    def _send(self, endpoint: str, frames: list[bytes], gossip: bool = True) -> None:
        """Send ``frames`` to the router at ``endpoint``; a ``gossip`` round's MEMBERS
        counts toward :data:`REDIAL_AFTER` (an ATTACHED burst does not)."""
        dealer = self.dealers.get(endpoint)
        if gossip and dealer is not None and dealer.unanswered >= REDIAL_AFTER:
            self.counts["redialled"] += 1
            log.debug("mesh: %s has not answered %d rounds: connecting again", endpoint,
                      dealer.unanswered)
            self._close(dealer)
            dealer = None
        fresh = dealer is None
        if dealer is None:
            dealer = self._open(endpoint)
            if dealer is None:
                return
        dealer.unanswered += gossip
        try:
            dealer.socket.send_multipart(frames, zmq.NOBLOCK)
            self.counts["sent"] += 1
        except zmq.Again:           # not connected (yet), or not reading
            # a DEALER made this round has not connected yet: no fault, counted apart
            self.counts["connecting" if fresh else "unsent"] += 1

    def ask_attached(self, uuids: list[str]) -> tuple[str, set[str]] | None:
        """Ask every other live router which of ``uuids`` are attached to it (ATTACHED,
        SPEC 4.10); return the request's msg_id and the ids of the routers asked, or None
        when no other router is live."""
        own = self.members.own
        others = [m for m in self.members.live() if m is not own]
        if not others:
            return None
        msg = protocol.make("ATTACHED", own.id, self.clock, router=own.id, uuids=list(uuids))
        frames = protocol.encode_control(msg)
        for member in others:
            self._send(member.endpoints["control"], frames, gossip=False)
        return msg.msg_id, {m.id for m in others}

    # ---------------------------------------------------------------- answers
    def read(self, sock: zmq.Socket) -> None:
        """The answers waiting on one DEALER: MEMBERS lists merged, ERRORs counted."""
        dealer = self.by_socket.get(sock)
        if dealer is None:
            return
        def bad(e: ProtocolError) -> None:
            self.counts["bad"] += 1
            self.throttle.warning(f"bad {dealer.endpoint[:64]}", "mesh: bad answer from %s: %s",
                                  dealer.endpoint, e)
        for msg in replies(sock, bad, FROM_ROUTER):
            dealer.unanswered = 0
            if msg.type == "ATTACHED" or (msg.type == "ERROR" and msg.get("ref")):
                router = msg.get("router") or dealer.router_id or msg.uuid
                attached = msg.get("attached") if msg.type == "ATTACHED" else None
                self.on_attached(router, msg.get("ref") or "",
                                 attached if isinstance(attached, dict) else {})
                if msg.type == "ATTACHED":
                    continue
            if msg.type == "ERROR":
                self.counts["errors"] += 1
                hint = (" (is this router's key in its security.routers?)"
                        if msg.get("status") == protocol.FORBIDDEN else "")
                self.throttle.warning(f"error {dealer.endpoint[:64]}",
                                      "mesh: %s answered ERROR %s %s%s", dealer.endpoint,
                                      msg.get("status"), str(msg.get("reason"))[:200], hint)
                continue
            dealer.router_id = msg.get("router") or msg.uuid
            self.merge(msg.get("routers") or [])

    def metrics(self, refused: int, bad: int) -> dict[str, int]:
        """The router's STATS of the mesh (SPEC 4.9); ``refused`` and ``bad``: the MEMBERS
        the control desk refused (403) and found malformed (400)."""
        return {"router.mesh.members": len(self.members),
                "router.mesh.dead": len(self.members.dead()),
                "router.mesh.refused": refused,
                "router.mesh.bad": bad + self.counts["bad"],
                "router.mesh.full": self.counts["full"],
                "router.mesh.impostors": self.counts["impostor"],
                "router.mesh.errors": self.counts["errors"],
                "router.mesh.unsent": self.counts["unsent"],
                "router.mesh.connecting": self.counts["connecting"]}

    def merge(self, entries: list) -> list[str]:
        """Merge a MEMBERS list (a request's or an answer's); return the ids that joined."""
        merged = self.members.merge(entries)
        self.counts["bad"] += merged.bad
        self.counts["full"] += merged.full
        self.counts["impostor"] += merged.impostor
        if merged.bad:
            self.throttle.warning("bad entries", "mesh: %d malformed member entries skipped",
                                  merged.bad)
        if merged.impostor:
            self.throttle.error("impostor", "mesh: another router claims this router's id %s "
                                "with a later start: two routers with one id?",
                                self.members.own.id)
        if merged.joined or merged.moved:
            self.on_change(merged.joined + merged.moved, [])
        return merged.joined


def mesh_keys(security, key: str = "") -> tuple:
    """With CURVE, what the mesh's DEALERs present and verify: the certificate ``key``
    (``mesh.key``, else the router's ``security.server_key``) and the routers' certificate
    (``security.server_key``). A missing or secret-less one raises SecurityError (the
    router exits 78)."""
    from fleetwatch.security import read_certificate
    own = read_certificate(key or security.server_key, need_secret=True)
    return own, read_certificate(security.server_key)
