"""A central router's ``sites`` socket: the uplinks of site routers (SPEC 4.10).

Kept off the agents hot path: site routers connect one DEALER each to this ROUTER and send
what they relay, SIGNATURE, ENVELOPE, BODY, the envelope's path naming the site (and, in a
tree, the sites below it). The central router puts its own id first in the path and relays
the message to its sinks and tail like an agent's (:func:`fleetwatch.protocol.stamped`).

A link is *open* once its HELLO (the envelope ``HELLO/SITE/SITE``: the site's id as the
uuid and as the whole path, ``role`` ``site``) was answered WELCOME; its HEARTBEATs (the
same form) are answered HEARTBEAT and keep it open; silent for ``site.expire_intervals``
of its interval it is forgotten, as are the uuids it spoke for. A message from a link not
open is answered ``401`` (the site says HELLO again), one whose path does not start with
the link's site ``403``. The site's own HELLO and HEARTBEAT are relayed as the site's, a
host of its own. Every other message's uuid is learnt as behind that link (at most
``site.max_agents`` a link: beyond, ``403`` with the uuid as TARGET), so that ACK and RUN for
it (:meth:`Sites.to_site`, from the control desk) go down the link it was last heard on:
SIGNATURE, TYPE, TARGET, BODY. A link never speaks for a uuid that is elsewhere
(:meth:`SiteTable.elsewhere`): an agent attached to this router, a router linked here or
this router itself, or a uuid heard through another link in the last :data:`HELD` seconds;
such a message is dropped, counted (``router.sites.foreign``) and answered ``403`` with the
uuid as TARGET (at most once a second per uuid). A router that is itself a site (a tree)
keeps each uuid's last HELLO on its link (:attr:`SiteLink.hellos`, the link's own too), to
say them again upstream when its uplink comes back (:mod:`router.sitelinks`).

:class:`SiteTable` is the logic (links, uuids, expiry; no sockets); :class:`Sites` the thin
adapter over the socket, read by the relay's loop.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

import zmq

from fleetwatch import protocol
from fleetwatch.logs import Throttle
from fleetwatch.rcvmore import rcvmore_reader
from fleetwatch.protocol import (AGENT_TYPES, MAX_PATH, SIGNATURE, ProtocolError,
                                 parse_path, stamped)
from router.admission import connection_property
from router.claims import REFUSED_FOR, Claims, Settled
from router.heard import LostSites
from router.port import FULL, GONE, SENT
from router.replies import ReplyLimiter

log = logging.getLogger(__name__)

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK
HEARTBEAT, HELLO = b"HEARTBEAT", b"HELLO"
#: envelopes a link's cache keeps (uuids x types); past it the cache starts again
MAX_CACHED = 200_000
#: site links a central router keeps at most: a HELLO of one more site is refused 503
MAX_LINKS = 10_000
#: seconds a uuid heard through one site link stays that link's: the messages of another
#: link for it are refused meanwhile (an agent that moved is taken there once silent here)
HELD = 60.0


@dataclass
class SiteLink:
    """One open site link: ``rid`` its routing id, ``site`` the site router's id."""

    rid: bytes
    site: str
    hostname: str
    interval: float
    last_heard: float
    since: float
    uuids: set[str] = field(default_factory=set)
    #: envelope as received -> (type frame, envelope as relayed, uuid, the site's own)
    cache: dict[bytes, tuple[bytes, bytes, str, bool]] = field(default_factory=dict)
    #: uuid -> (envelope as relayed, body) of its last HELLO: the uuids behind the link
    #: and the site's own (kept when this router is itself a site: Sites.keep_hellos)
    hellos: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)


class SiteTable:
    """The open links and the uuids behind each (``clock``: seconds) of router
    ``router_id``; ``attached``: the uuids of the agents attached to it (a live view)."""

    def __init__(self, expire_intervals: int, max_agents: int, clock=time.monotonic,
                 router_id: str = "", attached=frozenset()):
        self.expire_intervals, self.max_agents, self.clock = expire_intervals, max_agents, clock
        self.router_id, self.attached = router_id, attached
        self.links: dict[bytes, SiteLink] = {}
        self.sites: dict[str, SiteLink] = {}
        self.uuids: dict[str, SiteLink] = {}
        #: uuid -> [since, last heard] (epoch seconds, kept by the caller): PEERS entries
        self.times: dict[str, list[float]] = {}

    def __len__(self) -> int:
        return len(self.links)

    def hello(self, rid: bytes, site: str, hostname: str, interval: float) -> SiteLink | None:
        """Open (or refresh) the link ``rid`` of ``site``; another link of the same site
        (it reconnected) is forgotten. None: :data:`MAX_LINKS` sites are linked already."""
        now = self.clock()
        link = self.links.get(rid)
        if link is not None and link.site == site:
            link.hostname, link.interval, link.last_heard = hostname, interval, now
            return link
        if link is not None:
            self.forget(rid)
        old = self.sites.get(site)
        if old is not None:
            self.forget(old.rid)
        elif len(self.links) >= MAX_LINKS:
            return None
        link = SiteLink(rid, site, hostname, interval, now, now)
        self.links[rid] = self.sites[site] = link
        log.info("site %s (%s) linked, heartbeat %.3gs", site, hostname, interval)
        return link

    def elsewhere(self, uuid: str, link: SiteLink, now: float) -> str | None:
        """Why ``link`` may not speak for ``uuid`` (SPEC 4.10), None when it may: the uuid
        is an agent attached to this router, a site linked here or this router's own id,
        or it was heard through another link less than :data:`HELD` seconds before ``now``
        (epoch seconds, as :attr:`times`)."""
        if uuid in self.attached:
            return f"agent {uuid} is attached to router {self.router_id} itself"
        if uuid in self.sites or uuid == self.router_id:
            return f"{uuid} is a router linked to router {self.router_id} itself"
        holder = self.uuids.get(uuid)
        if holder is not None and holder is not link \
                and now - self.times.get(uuid, (0.0, 0.0))[1] < HELD:
            return f"{uuid} is behind site {holder.site}"
        return None

    def learn(self, uuid: str, link: SiteLink) -> bool:
        """``uuid`` spoke through ``link``: ACK and RUN for it go there. False (not learnt)
        when the link already speaks for ``max_agents``."""
        known = self.uuids.get(uuid)
        if known is link:
            return True
        if len(link.uuids) >= self.max_agents:
            return False
        if known is not None:
            known.uuids.discard(uuid)
            known.hellos.pop(uuid, None)
            known.cache.clear()
        link.uuids.add(uuid)
        self.uuids[uuid] = link
        self.times.setdefault(uuid, [0.0, 0.0])
        return True

    def unlearn(self, uuid: str) -> None:
        """``uuid`` is no link's any more (found attached elsewhere in the mesh)."""
        link = self.uuids.pop(uuid, None)
        if link is not None:
            link.uuids.discard(uuid)
            link.hellos.pop(uuid, None)
        self.times.pop(uuid, None)

    def last_hello(self, uuid: str) -> tuple[bytes, bytes] | None:
        """The last HELLO (envelope as relayed, body) of ``uuid``, behind a link or a site
        linked, if kept."""
        link = self.uuids.get(uuid) or self.sites.get(uuid)
        return link.hellos.get(uuid) if link is not None else None

    def forget(self, rid: bytes) -> SiteLink | None:
        link = self.links.pop(rid, None)
        if link is None:
            return None
        if self.sites.get(link.site) is link:
            del self.sites[link.site]
            self.times.pop(link.site, None)
        for uuid in link.uuids:
            if self.uuids.get(uuid) is link:
                del self.uuids[uuid]
                self.times.pop(uuid, None)
        return link

    def expire(self) -> list[SiteLink]:
        now = self.clock()
        gone = [l for l in self.links.values()
                if now - l.last_heard > self.expire_intervals * l.interval]
        for link in gone:
            self.forget(link.rid)
            log.warning("site %s (%s) expired: its link silent for %.1fs (%d agents behind "
                        "it)", link.site, link.hostname, now - link.last_heard, len(link.uuids))
        return gone


class Sites:
    """The ``sites`` ROUTER of router ``router_id``. ``relay(envelope, type_frame, body)``
    sends to the sinks and the tail; ``welcome()`` is this router's WELCOME."""

    def __init__(self, sock: zmq.Socket, router_id: str, settings, relay, welcome,
                 max_body: int = protocol.MAX_BODY, clock=time.time,
                 monotonic=time.monotonic, drain: int = 256, curve: bool = False):
        self.socket, self.id, self.id_frame = sock, router_id, router_id.encode("ascii")
        self.relay, self.welcome = relay, welcome
        self.max_body, self.clock, self.monotonic, self.drain = max_body, clock, monotonic, drain
        self.table = SiteTable(settings.expire_intervals, settings.max_agents, monotonic,
                               router_id)
        self.counts: Counter[str] = Counter()
        self.throttle = Throttle(log, 10.0, monotonic)
        #: with CURVE, a link's HELLO must come from the key of its site (User-Id site:ID)
        self.curve = curve
        self.rcvmore = rcvmore_reader(sock)
        #: ``unavailable(type_frame)``: why a durable message cannot be taken now (its sink
        #: type not connected, this site's uplink down), None when it can (the relay's);
        #: such a message is still relayed, and its agent answered 503 down the link (at
        #: most once a second per uuid): it keeps the message (SPEC 4.1, 4.10)
        self.unavailable = lambda type_frame: None
        self.durable_frames = frozenset({b"NOTIFY", b"REGISTER"})
        self.limiter = ReplyLimiter(1.0, monotonic)
        #: the links expired, until their site links again (PEERS: ``sites_lost``)
        self.lost = LostSites(clock)
        #: a router of a mesh checks a site's claims with the other routers
        #: (:mod:`router.claims`: the relay sets it, and ``meshed()``: whether another
        #: router is live); uuid -> (monotonic time until, why) of those found elsewhere
        self.claims: Claims | None = None
        self.meshed = lambda: False
        self.refused: dict[str, tuple[float, str]] = {}
        #: keep each uuid's last HELLO on its link (a site in a tree: it says them again
        #: upstream when its uplink comes back, SPEC 4.10)
        self.keep_hellos = False
        #: messages read; the clocks read once per :meth:`read` (epoch, monotonic)
        self.received = 0
        self.now, self.now_mono = clock(), monotonic()

    # ---------------------------------------------------------------- up
    def read(self) -> None:
        """Up to ``drain`` messages from the site links, frame by frame (RCVMORE read the
        relay's cheap way); with CURVE, each message's first frame as a zmq.Frame, for its
        connection's User-Id (which site's key)."""
        try:
            self._read()
        finally:
            if self.claims is not None and self.claims.unasked:
                self.settle(self.claims.flush())

    def _read(self) -> None:
        recv, more, curve = self.socket.recv, self.rcvmore, self.curve
        self.now, self.now_mono = self.clock(), self.monotonic()
        for _ in range(self.drain):
            try:
                first = recv(NOBLOCK, copy=not curve)
            except zmq.Again:
                return
            user = ""
            if curve:
                user = connection_property(first, "User-Id")
                first = first.bytes
            frames = [first]
            while more():
                frames.append(recv())
            try:
                self.message(frames, user)
            except ProtocolError as e:
                self.refuse(frames[0], e)
            except (zmq.ZMQError, ValueError, TypeError, KeyError, AttributeError,
                    UnicodeError) as e:         # a bug: logged and counted, never fatal
                self.counts["internal"] += 1
                self.throttle.warning(f"internal {type(e).__name__}", "sites: a message "
                                      "failed: %r", e)

    def message(self, frames: list[bytes], user: str = "") -> None:
        rid = frames[0]
        if len(frames) != 4:
            raise ProtocolError(protocol.BAD_REQUEST, f"expected 3 frames, got {len(frames) - 1}")
        sig, envelope, body = frames[1], frames[2], frames[3]
        if sig != SIGNATURE:
            protocol.check_signature(sig)
        link = self.table.links.get(rid)
        cached = link.cache.get(envelope) if link is not None else None
        if cached is None:
            cached = self._learn(rid, link, envelope, body, user)
            if cached is None:
                return
            link = self.table.links[rid]
        type_frame, relayed, uuid, own = cached
        link.last_heard = self.now_mono
        self.received += 1
        if own:
            if type_frame == HEARTBEAT:
                self._send(rid, protocol.encode_down(protocol.make("HEARTBEAT", self.id,
                                                                   self.clock)))
            times = self.table.times.setdefault(uuid, [0.0, 0.0])
        else:
            table = self.table
            if table.uuids.get(uuid) is not link or uuid in table.attached:
                if not self._may_speak(rid, link, uuid, (type_frame, relayed, body)):
                    return
            times = table.times[uuid]
        self._pass(rid, link, uuid, own, times, type_frame, relayed, body)

    def _pass(self, rid: bytes, link: SiteLink, uuid: str, own: bool, times: list[float],
              type_frame: bytes, relayed: bytes, body: bytes) -> None:
        """Relay a message ``link`` may speak for (and answer 503 for a durable one that
        cannot be taken now)."""
        times[1] = now = self.now
        times[0] = times[0] or now
        if type_frame == HELLO and self.keep_hellos:
            link.hellos[uuid] = (relayed, body)
        self.relay(relayed, type_frame, body)
        if type_frame in self.durable_frames and not own:
            why = self.unavailable(type_frame)
            if why is not None and self.limiter.allow(uuid.encode()):
                self.counts["unavailable"] += 1
                type_ = type_frame.decode()
                self._send(rid, protocol.encode_down(protocol.error(
                    protocol.UNAVAILABLE, f"{why}: keep the {type_} and send it again", type_,
                    self.id), uuid))

    def _may_speak(self, rid: bytes, link: SiteLink, uuid: str, message: tuple) -> bool:
        """Whether ``link`` may speak for ``uuid`` now (it is learnt as the link's): not when
        it is elsewhere (refused, counted), nor while the mesh is asked about it
        (``message`` held meanwhile: :mod:`router.claims`)."""
        table, claims = self.table, self.claims
        why = table.elsewhere(uuid, link, self.now) or self._found_elsewhere(uuid)
        held = claims.pending.get(uuid) if claims is not None else None
        if why is None and held is not None and held.rid != rid:
            other = table.links.get(held.rid)
            if other is None or other.site == link.site:
                held.rid = rid                  # the same site, linked again meanwhile
            else:
                why = f"{uuid} is behind site {other.site} (being checked)"
        if why is not None:
            self._foreign(rid, link, uuid, why)
            return False
        if held is not None or (claims is not None and table.uuids.get(uuid) is not link
                                and self.meshed()):
            claims.hold(uuid, rid, link.site, message)   # past its bounds: counted, dropped
            return False
        if not table.learn(uuid, link):
            self._too_many(rid, link, uuid)
            return False
        return True

    def _found_elsewhere(self, uuid: str) -> str | None:
        found = self.refused.get(uuid)
        if found is None:
            return None
        if found[0] > self.now_mono:
            return found[1]
        del self.refused[uuid]
        return None

    def attached(self, router: str, ref: str, attached: dict) -> None:
        """A router's answer to the mesh's ATTACHED (:meth:`router.mesh.Mesh.ask_attached`)."""
        if self.claims is not None:
            self.settle(self.claims.answered(router, ref, attached))

    def settle(self, settled: list[Settled]) -> None:
        """The uuids the mesh was asked about: one attached elsewhere is refused (its held
        messages dropped, counted, ``403`` down the link) for :data:`REFUSED_FOR` seconds and
        taken from the link that spoke for it; a free one is learnt as its link's and its
        held messages relayed in order."""
        if not settled:
            return
        self.now, self.now_mono = self.clock(), self.monotonic()
        table = self.table
        for s in settled:
            link = table.links.get(s.held.rid)
            if s.elsewhere is not None:
                why = f"agent {s.uuid} is attached to {s.elsewhere} of the mesh"
                self.refused[s.uuid] = (self.now_mono + REFUSED_FOR, why)
                table.unlearn(s.uuid)
                if link is not None:
                    self.counts["foreign"] += max(0, len(s.held.messages) - 1)
                    self._foreign(link.rid, link, s.uuid, why)
                continue
            if not s.held.messages:
                continue
            if link is None or table.elsewhere(s.uuid, link, self.now) is not None:
                self.counts["held_dropped"] += len(s.held.messages)
                continue
            if not table.learn(s.uuid, link):
                self._too_many(link.rid, link, s.uuid)
                continue
            times = table.times[s.uuid]
            for type_frame, relayed, body in s.held.messages:
                self._pass(link.rid, link, s.uuid, False, times, type_frame, relayed, body)

    def holds(self, uuid: str) -> str | None:
        """The site a link here speaks for ``uuid`` through (heard in the last :data:`HELD`
        seconds), "" when it is a site linked here, None otherwise: what ATTACHED answers."""
        if uuid in self.table.sites:
            return ""
        link = self.table.uuids.get(uuid)
        if link is None or self.clock() - self.table.times.get(uuid, (0.0, 0.0))[1] >= HELD:
            return None
        return link.site

    def _learn(self, rid: bytes, link: SiteLink | None, envelope: bytes, body: bytes,
               user: str = ""):
        """A new envelope on link ``rid``: checked, cached; the link's own HELLO opens it.
        None when nothing more is to be done (answered, or refused)."""
        type_, uuid, path = parse_path(envelope, AGENT_TYPES)
        own = len(path) == 1 and uuid == path[0]
        if own and type_ == "HELLO":
            msg = protocol.decode_body("HELLO", body, self.max_body)
            if msg.uuid != uuid or msg.get("role") != "site":
                raise ProtocolError(protocol.BAD_REQUEST, "a site link's HELLO has the site's "
                                                          "id as uuid and role site")
            if self.curve and user != f"site:{uuid}":
                self.counts["impostor"] += 1
                raise ProtocolError(protocol.FORBIDDEN, f"this link's key is "
                                    f"{user or 'unknown'}'s, not site {uuid}'s")
            link = self.table.hello(rid, uuid, str(msg.get("hostname"))[:255],
                                    float(msg.get("heartbeat")))
            if link is None:
                raise ProtocolError(protocol.UNAVAILABLE, f"{MAX_LINKS} sites are linked "
                                                          f"here already")
            self.counts["hellos"] += 1
            self.lost.linked(uuid)
            self._send(rid, protocol.encode_down(self.welcome()))
        if link is None:
            self.counts["unknown"] += 1
            raise ProtocolError(protocol.HELLO_REQUIRED, "this site link is not open: send "
                                                         "HELLO first")
        if path[0] != link.site:
            raise ProtocolError(protocol.FORBIDDEN, f"this link is site {link.site}'s, not "
                                                    f"{path[0]}'s")
        if len(path) >= MAX_PATH:
            raise ProtocolError(protocol.BAD_REQUEST, f"a path of {len(path)} routers cannot "
                                                      f"grow (at most {MAX_PATH})")
        entry = (type_.encode(), stamped(envelope, self.id_frame), uuid, own)
        if not (own and type_ == "HELLO"):         # (each of those opens the link again)
            if len(link.cache) >= MAX_CACHED:
                link.cache.clear()
            link.cache[envelope] = entry
        return entry

    def _too_many(self, rid: bytes, link: SiteLink, uuid: str) -> None:
        self.counts["refused"] += 1
        self.throttle.warning(f"full {link.site}", "sites: site %s speaks for %d agents, "
                              "site.max_agents: %s refused", link.site, len(link.uuids), uuid)
        self._send(rid, protocol.encode_down(protocol.error(
            protocol.FORBIDDEN, f"site {link.site} speaks for {len(link.uuids)} agents "
                                f"already", None, self.id), uuid))

    def _foreign(self, rid: bytes, link: SiteLink, uuid: str, why: str) -> None:
        """A message of ``link`` for ``uuid``, which is elsewhere (``why``): dropped,
        counted, answered 403 (at most once a second per uuid)."""
        self.counts["foreign"] += 1
        self.throttle.warning(f"foreign {link.site}", "sites: site %s spoke for %s: %s; "
                              "dropped", link.site, uuid[:64], why)
        if self.limiter.allow(b"foreign " + uuid.encode()):
            self._send(rid, protocol.encode_down(protocol.error(
                protocol.FORBIDDEN, f"site {link.site} does not speak for {uuid}: {why}",
                None, self.id), uuid))

    def refuse(self, rid: bytes, err: ProtocolError) -> None:
        self.counts[f"bad.{err.status}"] += 1
        self.throttle.warning(f"refused {err.status}", "sites: refused a message from %s: %s",
                              self.who(rid), err)
        self._send(rid, protocol.encode_down(protocol.error(err.status, err.reason, None,
                                                            self.id)))

    def who(self, rid: bytes) -> str:
        link = self.table.links.get(rid)
        return f"site {link.site}" if link is not None else f"link {rid[:4].hex()}.."

    def _send(self, rid: bytes, frames: list[bytes]) -> bool:
        try:
            self.socket.send_multipart([rid, *frames], NOBLOCK)
            return True
        except zmq.ZMQError:
            self.counts["unsent"] += 1
            return False

    # ---------------------------------------------------------------- down
    def to_site(self, target: str, type_frame: bytes, body: bytes) -> str | None:
        """ACK, RUN or ERROR for ``target`` down the link it was last heard on: SENT, FULL,
        GONE, or None when no site link speaks for it."""
        link = self.table.uuids.get(target)
        if link is None:
            return None
        send = self.socket.send
        try:
            send(link.rid, MORE_NB)
            send(SIGNATURE, MORE_NB)
            send(type_frame, MORE_NB)
            send(target.encode("ascii"), MORE_NB)
            send(body, NOBLOCK)
        except zmq.Again:
            return FULL
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:
                raise
            self.table.forget(link.rid)
            return GONE
        self.counts["down"] += 1
        return SENT

    # ---------------------------------------------------------------- PEERS
    def __len__(self) -> int:
        """The sites linked and the agents behind them."""
        return len(self.table.uuids) + len(self.table.sites)

    def peers_after(self, uuid: str = ""):
        """PEERS entries (SPEC 4.3, 4.10) whose uuid sorts after ``uuid``, in uuid order:
        each site linked (its hostname, its id), and each agent behind one, with its
        ``site`` (its hostname empty: the registry has it)."""
        uuids, sites, times = self.table.uuids, self.table.sites, self.table.times
        for key in sorted(u for u in (*uuids, *sites) if u > uuid):
            since, heard = times.get(key, (0.0, 0.0))
            link = sites.get(key)
            if link is not None:
                yield {"uuid": key, "hostname": link.hostname, "since": since,
                       "last_heard": heard}
                continue
            link = uuids.get(key)
            if link is not None:
                yield {"uuid": key, "hostname": "", "since": since, "last_heard": heard,
                       "site": link.site}

    # ---------------------------------------------------------------- periodic
    def sweep(self) -> None:
        if self.claims is not None:
            self.settle(self.claims.expire())
            if self.claims.due():
                self.settle(self.claims.recheck({u: (link.rid, link.site) for u, link
                                                 in self.table.uuids.items()}))
            now = self.monotonic()
            for uuid in [u for u, (until, _) in self.refused.items() if until <= now]:
                del self.refused[uuid]
        expired = self.table.expire()
        self.counts["expired"] += len(expired)
        now, mono = self.clock(), self.monotonic()
        for link in expired:
            self.lost.lost(link.site, link.hostname, now - (mono - link.last_heard),
                           len(link.uuids))
        self.limiter.prune()

    def metrics(self) -> dict[str, int]:
        """A central router's ``router.sites.*`` STATS (SPEC 4.10)."""
        c = self.counts
        return {"router.sites.links": len(self.table),
                "router.sites.agents": len(self.table.uuids),
                "router.sites.received": self.received, "router.sites.down": c["down"],
                "router.sites.expired": c["expired"], "router.sites.refused": c["refused"],
                "router.sites.unavailable": c["unavailable"], "router.sites.internal": c["internal"],
                "router.sites.unknown": c["unknown"], "router.sites.impostors": c["impostor"],
                "router.sites.foreign": c["foreign"], "router.sites.lost_unkept": self.lost.unkept,
                "router.sites.checking": len(self.claims) if self.claims is not None else 0,
                "router.sites.unverified": self.claims.unverified if self.claims else 0,
                "router.sites.held_dropped": c["held_dropped"]
                + (self.claims.overflow if self.claims else 0),
                "router.sites.bad": sum(n for k, n in c.items() if k.startswith("bad."))}
