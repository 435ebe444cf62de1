"""A router's place in a tree of sites (SPEC 4.10): the site links below it, its uplink above.

A router with ``bind.sites`` takes the links of site routers on its ``sites`` socket
(:class:`router.sites.Sites`); one with ``upstream`` relays its agents' traffic, and what comes
up from the sites below it, over its uplink (:class:`router.uplink.Uplink`); a site in the
middle of a tree has both. :class:`SiteLinks` is all the relay sees of either: the relay
makes the ``sites`` socket with its others and hands it to :meth:`SiteLinks.below`,
:meth:`SiteLinks.above` opens the uplink; the relay's loop polls them through
:meth:`~SiteLinks.register`, :attr:`~SiteLinks.next_tick` and :meth:`~SiteLinks.handle`, and
sweeps, reports (:meth:`~SiteLinks.metrics`) and closes them.

It answers the questions of the tree: where an ACK, RUN or ERROR from upstream goes
(:meth:`~SiteLinks.down`: to the agent attached here, or down the link below that speaks for
it), why a durable message from a site below cannot be taken now
(:meth:`~SiteLinks.unavailable`), and what upstream's WELCOME told of its durable routes
(:meth:`~SiteLinks.upstream_durable`, which the relay tells its agents), and which agents
this site speaks for upstream, with their last HELLO, to say again when its uplink comes
back (:meth:`~SiteLinks.speaks_for`, :meth:`~SiteLinks.hello_of`): those attached here (the
HELLO kept on each :class:`router.peers.Peer`) and those behind the site links below, the
sites themselves too (kept on each :class:`router.sites.SiteLink`). The uplink's senders in
the relay's routing table are :meth:`router.uplink.Uplink.sender`'s.
"""

from __future__ import annotations

import logging
import time

import zmq

from fleetwatch.logs import Throttle
from fleetwatch.protocol import ACKING_SINKS
from router.config import RouterSite
from router.counters import Counters
from router.peers import Peers
from router.port import RelayPort
from router.presence import SinkPresence
from router.sites import Sites
from router.uplink import Uplink

log = logging.getLogger(__name__)


class SiteLinks:
    """The site links of router ``router_id``: ``sites`` (below, None without
    ``bind.sites``) and ``uplink`` (above, None without ``upstream``). ``durable()``: the
    durable routes the relay tells its agents; ``told(durable)``: upstream told others."""

    def __init__(self, router_id: str, peers: Peers, agents: RelayPort, counters: Counters,
                 presence: SinkPresence, durable, told, clock=time.time,
                 monotonic=time.monotonic):
        self.id, self.peers, self.agents, self.counters = router_id, peers, agents, counters
        self.presence, self.durable, self.told = presence, durable, told
        self.clock, self.monotonic = clock, monotonic
        self.throttle = Throttle(log, 10.0, monotonic)
        self.sites: Sites | None = None
        self.uplink: Uplink | None = None

    @property
    def open(self) -> bool:
        """Whether this router has site links at all (else the relay's loop skips them)."""
        return self.sites is not None or self.uplink is not None

    # ---------------------------------------------------------------- set-up
    def below(self, sock: zmq.Socket, settings: RouterSite, relay, welcome, max_body: int,
              drain: int, curve: bool) -> Sites:
        """Take site links on ``sock`` (``bind.sites``, bound): messages from them go to
        ``relay(envelope, type_frame, body)``, their HELLOs are answered ``welcome()``."""
        self.sites = Sites(sock, self.id, settings, relay, welcome, max_body, self.clock,
                           self.monotonic, drain, curve=curve)
        self.sites.unavailable = self.unavailable
        self.sites.table.attached = self.peers.uuids     # a site never speaks for them
        self.sites.keep_hellos = self.uplink is not None
        return self.sites

    def above(self, endpoints: list[str], settings: RouterSite, ctx: zmq.Context,
              max_body: int, hwm: int, keys: tuple | None) -> Uplink:
        """Relay upstream to ``endpoints`` (``upstream``); ``keys``: with CURVE, the site's
        certificate and the routers' (made when the relay's loop registers them)."""
        self.uplink = Uplink(self.id, endpoints, settings, ctx, max_body, hwm, self.clock,
                             self.monotonic)
        self.uplink.down = self.down
        self.uplink.on_durable = self.upstream_durable
        self.uplink.speaks_for, self.uplink.hello_of = self.speaks_for, self.hello_of
        self.uplink.keys = keys
        if self.sites is not None:
            self.sites.keep_hellos = True
        return self.uplink

    # ---------------------------------------------------------------- the relay's loop
    def register(self, poller: zmq.Poller) -> None:
        if self.sites is not None:
            poller.register(self.sites.socket, zmq.POLLIN)
        if self.uplink is not None:
            self.uplink.open(poller)
            self.uplink.tick()

    @property
    def next_tick(self) -> float:
        """The monotonic time the uplink wants its next :meth:`handle` by."""
        return self.uplink.next_tick if self.uplink is not None else float("inf")

    def handle(self, events: dict) -> None:
        """One wake-up of the relay's loop: read what came (``events``: the poll's), tick
        the uplink when due, deliver what waits for it."""
        sites, uplink = self.sites, self.uplink
        if sites is not None and sites.socket in events:
            sites.read()
        if uplink is not None:
            for sock in [s for s in uplink.by_socket if s in events]:
                uplink.read(sock)
            if self.monotonic() >= uplink.next_tick:
                uplink.tick()
            uplink.flush()

    def sweep(self) -> None:
        if self.sites is not None:
            self.sites.sweep()

    def close(self) -> None:
        if self.uplink is not None:
            self.uplink.close()

    def metrics(self) -> dict:
        """``router.sites.*`` of a central router, ``router.site.*`` of a site (4.10)."""
        out = self.sites.metrics() if self.sites is not None else {}
        return {**out, **(self.uplink.metrics() if self.uplink is not None else {})}

    # ---------------------------------------------------------------- the tree
    def down(self, target: str, type_frame: bytes, body: bytes) -> None:
        """An ACK, RUN or ERROR from upstream for ``target``: to the agent attached here, or
        down the site link below that speaks for it (a tree); else counted unroutable."""
        peer = self.peers.by_uuid(target)
        if peer is not None:
            sent = self.agents.to_agent(peer.routing_id, type_frame, body)
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
                and self.durable().get(type_):
            return f"the uplink of site router {self.id} is down"
        for sink in self.presence.durable.get(type_, ()):
            if not self.presence.connected(sink):
                return f"no {sink} sink is connected to router {self.id}"
        return None

    def speaks_for(self) -> list[str]:
        """The uuids this router speaks for upstream: its attached agents', then those
        behind its site links and the sites linked."""
        out = list(self.peers.uuids)
        if self.sites is not None:
            out += [*self.sites.table.uuids, *self.sites.table.sites]
        return out

    def hello_of(self, uuid: str) -> tuple[bytes, bytes] | None:
        """The last HELLO of ``uuid`` as it goes upstream (envelope, body): an attached
        agent's, or one that came from a site link below; None if not known (any more)."""
        peer = self.peers.by_uuid(uuid)
        if peer is not None:
            return (peer.envelopes[b"HELLO"], peer.hello) if peer.hello else None
        return self.sites.table.last_hello(uuid) if self.sites is not None else None

    def upstream_durable(self, durable: dict) -> None:
        """Upstream's WELCOME told its durable routes: the relay tells this site's agents
        (a new WELCOME each) when they changed."""
        told = {t: [str(s) for s in sinks if isinstance(s, str)]
                for t, sinks in durable.items() if t in ACKING_SINKS and isinstance(sinks, list)}
        told = {**{t: [] for t in ACKING_SINKS}, **told}
        if told != self.durable():
            log.info("upstream's durable routes: %s", told)
            self.told(told)
