"""A site router's uplink: one DEALER to the ``sites`` socket of each upstream router.

A site router (``upstream:`` in its config, SPEC 4.10) relays its agents' traffic upstream as
a router relays to a sink: SIGNATURE, ENVELOPE, BODY, the envelope naming the site as the
relaying router. Each message goes over the first link that is *up*: its HELLO was answered
WELCOME and an answer (WELCOME or HEARTBEAT) came within ``site.expire_intervals`` of the
link's HEARTBEATs, sent every ``site.interval`` (:meth:`Uplink.tick`). The link's own HELLO
and HEARTBEAT carry the site's id as their uuid and as the whole path: upstream they are the
site's, as a host named by its id, and the central router expires a silent site by them
(the HELLO is said again every ``HELLO_EVERY`` intervals, for upstream's registry).

No custody: the durable types (NOTIFY, REGISTER) are only passed on; with no link up they
are not taken (:class:`TypeSender` raises ``zmq.Again``, so the relay counts the drop and
answers the agent 503, and the agent keeps them). The other types wait in a
:class:`router.sitebuffer.SiteBuffer` while no link is up (or while it holds any: order is
kept) and are delivered, oldest first, at each of the relay's wake-ups once one is
(:meth:`Uplink.flush`). Upstream's answers for an agent (SIGNATURE, TYPE, TARGET, BODY: ACK,
RUN, ERROR) go to ``down(target, type_frame, body)``, the relay's way to the agent.

Whenever messages start going over a link (the first up, another, or the same one after it
was down), the upstream router there may not know the uuids the site speaks for (it
restarted, or never had this site's traffic): the site says again the last HELLO of each,
``speaks_for()`` the uuids and ``hello_of(uuid)`` the (envelope, body) to send, if still
known. They go after what the buffer holds, :data:`FLUSH_BATCH` a wake-up at most, while
the link takes them (:meth:`Uplink.flush`), best effort like the buffer's.

This is the thin adapter that owns the DEALERs (the relay's poll loop polls them, as
:mod:`router.mesh`'s); the buffer is logic apart.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, deque

import zmq

from fleetwatch import __version__, protocol
from fleetwatch.logs import Throttle
from fleetwatch.protocol import SIGNATURE, ProtocolError
from router.config import RouterSite
from router.sitebuffer import SiteBuffer

log = logging.getLogger(__name__)

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK
#: the routing table's name for the uplink (router.relay: a sink type of its own)
UPSTREAM = "upstream"
#: buffered messages sent per wake-up at most (the agents socket is read in between)
FLUSH_BATCH = 2000
#: HELLOs unanswered after which a link's DEALER is made again: libzmq does not retry a
#: connection whose CURVE handshake was refused (a site key allowed later, SPEC 7.4)
REDIAL_AFTER = 5
#: a welcomed link says HELLO again every this many intervals: upstream's registry learns
#: the site as a host even when it missed the first (a registry sink that connected after
#: the link opened: until then the site's DOWN would find no host, and its agents no
#: parent); one HELLO per site every 10 s at the default interval costs nothing
HELLO_EVERY = 10


class Link:
    """The DEALER to one upstream router's ``sites`` endpoint."""

    def __init__(self, endpoint: str, sock: zmq.Socket):
        self.endpoint, self.socket = endpoint, sock
        self.router_id = ""
        self.welcomed = False
        #: ticks since its last HELLO; HELLOs sent since its last answer
        self.beats = 0
        self.unanswered = 0
        #: monotonic time of its last answer (WELCOME or HEARTBEAT)
        self.last_answer = float("-inf")
        self.was_up = False


class TypeSender:
    """What the relay's routing table calls for one type, as it calls a PUSH socket's send:
    SIGNATURE, ENVELOPE, BODY, one frame a call. The first call decides: a durable type with
    no link up raises ``zmq.Again`` (the relay counts it dropped and answers 503)."""

    __slots__ = ("uplink", "type_frame", "durable", "envelope", "step")

    def __init__(self, uplink: "Uplink", type_frame: bytes, durable: bool):
        self.uplink, self.type_frame, self.durable = uplink, type_frame, durable
        self.envelope = b""
        self.step = 0

    def __call__(self, frame: bytes, flags: int = 0) -> None:
        step = self.step
        if step == 0:
            if self.durable and self.uplink.active is None:
                raise zmq.Again()
            self.step = 1
        elif step == 1:
            self.envelope = frame
            self.step = 2
        else:
            self.step = 0
            self.uplink.forward(self.envelope, frame, self.durable)


class Uplink:
    """The site's links upstream (see the module docstring). ``down(target, type_frame,
    body)``: an answer for an agent; ``on_durable(durable)``: upstream's WELCOME told its
    durable routes (the site tells its agents)."""

    def __init__(self, site_id: str, endpoints: list[str], settings: RouterSite,
                 ctx: zmq.Context, max_body: int = protocol.MAX_BODY, hwm: int = 10000,
                 clock=time.time, monotonic=time.monotonic):
        self.id, self.settings, self.ctx = site_id, settings, ctx
        self.endpoints = list(dict.fromkeys(endpoints))
        self.max_body, self.hwm = max_body, hwm
        self.clock, self.monotonic = clock, monotonic
        self.own = protocol.envelope("HEARTBEAT", site_id, site_id)
        self.own_hello = protocol.envelope("HELLO", site_id, site_id)
        self.buffer = SiteBuffer(settings.buffer_messages, settings.spool_dir,
                                 settings.spool_bytes)
        self.counts: Counter[str] = Counter()
        self.throttle = Throttle(log, 10.0, monotonic)
        self.links: list[Link] = []
        self.by_socket: dict[zmq.Socket, Link] = {}
        #: the link messages go over (the first up), None while none is
        self.active: Link | None = None
        self.next_tick = 0.0
        self.poller: zmq.Poller | None = None
        self.down = lambda target, type_frame, body: None
        self.on_durable = lambda durable: None
        #: the uuids this site speaks for, and the HELLO (envelope, body) of one of them
        self.speaks_for = lambda: []
        self.hello_of = lambda uuid: None
        #: uuids whose HELLO is still to be said again over the active link
        self.resending: deque[str] = deque()
        #: with CURVE: (the site's certificate, the routers' certificate)
        self.keys: tuple | None = None

    # ---------------------------------------------------------------- sockets
    def open(self, poller: zmq.Poller | None = None) -> None:
        self.poller = poller
        for endpoint in self.endpoints:
            link = Link(endpoint, self._dealer(endpoint))
            self.links.append(link)
            self.by_socket[link.socket] = link

    def _dealer(self, endpoint: str) -> zmq.Socket:
        ms = int(self.settings.interval * 1000)
        sock = self.ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.sndhwm = self.hwm
        sock.setsockopt(zmq.IMMEDIATE, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, self.max_body + 4096)
        # libzmq drops a connection that stops answering its own pings: the messages
        # sent after go to the buffer, not into a dead connection's queue
        sock.setsockopt(zmq.HEARTBEAT_IVL, ms)
        sock.setsockopt(zmq.HEARTBEAT_TIMEOUT, ms * self.settings.expire_intervals)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        if self.keys is not None:
            from fleetwatch.security import client
            client(sock, *self.keys)
        sock.connect(endpoint)
        if self.poller is not None:
            self.poller.register(sock, zmq.POLLIN)
        return sock

    def _redial(self, link: Link) -> None:
        """A new DEALER for ``link`` (its HELLOs went unanswered ``REDIAL_AFTER`` times)."""
        self.counts["redialled"] += 1
        self.by_socket.pop(link.socket, None)
        if self.poller is not None:
            self.poller.unregister(link.socket)
        link.socket.close(0)
        link.socket = self._dealer(link.endpoint)
        link.unanswered = 0
        self.by_socket[link.socket] = link

    def close(self) -> None:
        for link in self.links:
            link.socket.close(0)
        self.links.clear()
        self.by_socket.clear()

    # ---------------------------------------------------------------- up
    def sender(self, type_frame: bytes, durable: bool) -> TypeSender:
        return TypeSender(self, type_frame, durable)

    def forward(self, envelope: bytes, body: bytes, durable: bool) -> None:
        """One relayed message: sent over the active link, or (best effort) buffered."""
        link = self.active
        if durable:
            if link is None or not self._send(link, envelope, body):
                self.counts["durable_unsent"] += 1      # the agent keeps it and resends
            return
        if link is None or len(self.buffer) or not self._send(link, envelope, body):
            self.buffer.push(envelope, body)

    def _send(self, link: Link, envelope: bytes, body: bytes) -> bool:
        send = link.socket.send
        try:
            send(SIGNATURE, MORE_NB)
        except zmq.Again:
            return False
        send(envelope, MORE_NB)
        send(body, NOBLOCK)
        self.counts["sent"] += 1
        return True

    def flush(self) -> int:
        """Deliver buffered messages, oldest first, while the active link takes them; then
        the HELLOs to say again (at most :data:`FLUSH_BATCH` messages in all)."""
        link, buffer = self.active, self.buffer
        if link is None or not (len(buffer) or self.resending):
            return 0
        sent = 0
        while sent < FLUSH_BATCH:
            item = buffer.peek()
            if item is None or not self._send(link, *item):
                break
            buffer.pop()
            sent += 1
        if len(buffer):
            return sent
        resending, hello_of = self.resending, self.hello_of
        while sent < FLUSH_BATCH and resending:
            hello = hello_of(resending[0])
            if hello is not None:
                if not self._send(link, *hello):
                    break
                self.counts["resent"] += 1
                sent += 1
            resending.popleft()
        return sent

    # ---------------------------------------------------------------- the links
    def tick(self) -> None:
        """Every ``site.interval``: HELLO on links not welcomed, HEARTBEAT on the others;
        which link is active."""
        now = self.monotonic()
        self.next_tick = now + self.settings.interval
        for link in self.links:
            link.beats += 1
            if link.welcomed and link.beats < HELLO_EVERY:
                msg = protocol.make("HEARTBEAT", self.id, self.clock,
                                    interval=self.settings.interval)
                frames = [SIGNATURE, self.own, protocol.encode_body(msg)]
            else:
                if link.unanswered >= REDIAL_AFTER:
                    self._redial(link)
                link.beats = 0
                link.unanswered += 1
                frames = self._hello()
            try:
                link.socket.send_multipart(frames, NOBLOCK)
            except zmq.Again:
                self.counts["link_unsent"] += 1
        self._choose(now)

    def _hello(self) -> list[bytes]:
        # upstream, the site is a host named by its id: its agents' parent (SPEC 4.10)
        msg = protocol.make("HELLO", self.id, self.clock, hostname=self.id,
                            heartbeat=self.settings.interval, role="site",
                            version=__version__)
        return [SIGNATURE, self.own_hello, protocol.encode_body(msg)]

    def _choose(self, now: float) -> None:
        expiry = self.settings.interval * self.settings.expire_intervals
        active, before = None, self.active
        for link in self.links:
            up = link.welcomed and now - link.last_answer <= expiry
            if up != link.was_up:
                link.was_up = up
                if up:
                    log.info("uplink to %s (%s) is up", link.endpoint, link.router_id)
                else:
                    self.counts["outages"] += 1
                    log.warning("uplink to %s (%s) is down: no answer for %.1fs; NOTIFY and "
                                "REGISTER answered 503, the rest buffered", link.endpoint,
                                link.router_id, now - link.last_answer)
                    link.welcomed = False
            if up and active is None:
                active = link
        self.active = active
        if active is not None and active is not before:
            self.resending = deque(self.speaks_for())
            if self.resending:
                log.info("uplink: messages go to %s (%s): the HELLOs of the %d uuids this "
                         "site speaks for said again", active.endpoint, active.router_id,
                         len(self.resending))

    def read(self, sock: zmq.Socket) -> None:
        """What one link's upstream router sent: answers to the link, or for an agent."""
        link = self.by_socket.get(sock)
        if link is None:
            return
        for _ in range(1000):
            try:
                frames = sock.recv_multipart(NOBLOCK)
            except zmq.Again:
                return
            try:
                target, msg = protocol.decode_down(frames, self.max_body)
            except ProtocolError as e:
                self.counts["bad"] += 1
                self.throttle.warning(f"bad {link.endpoint[:64]}",
                                      "uplink: bad message from %s: %s", link.endpoint, e)
                continue
            try:
                if target:
                    self.down(target, frames[1], frames[3])
                else:
                    self._answer(link, msg)
            except (zmq.ZMQError, ValueError, TypeError, KeyError, AttributeError,
                    UnicodeError) as e:         # a bug: logged and counted, never fatal
                self.counts["internal"] += 1
                self.throttle.warning(f"internal {type(e).__name__}", "uplink: %s from %s "
                                      "failed: %r", msg.type, link.endpoint, e)

    def _answer(self, link: Link, msg: protocol.Message) -> None:
        now = self.monotonic()
        link.unanswered = 0
        if msg.type == "WELCOME":
            link.router_id = str(msg.get("router") or msg.uuid)
            link.welcomed, link.last_answer = True, now
            durable = msg.get("durable")
            if isinstance(durable, dict):
                self.on_durable(durable)
            self._choose(now)
        elif msg.type == "HEARTBEAT":
            if link.welcomed:
                link.last_answer = now
                if self.active is None:
                    self._choose(now)
        elif msg.type == "ERROR":
            status = msg.get("status")
            if status == protocol.HELLO_REQUIRED:       # upstream restarted, or expired us
                link.welcomed = False
                self.counts["hellos"] += 1
                try:
                    link.socket.send_multipart(self._hello(), NOBLOCK)
                except zmq.Again:
                    self.counts["link_unsent"] += 1
                self._choose(now)
                return
            self.counts["errors"] += 1
            self.throttle.warning(f"error {link.endpoint[:64]} {status}",
                                  "uplink: %s answered ERROR %s %s", link.endpoint, status,
                                  str(msg.get("reason"))[:200])

    def metrics(self) -> dict[str, int]:
        """The site's ``router.site.*`` STATS (SPEC 4.10)."""
        return {**self.buffer.metrics(),
                "router.site.up": int(self.active is not None),
                "router.site.outages": self.counts["outages"],
                "router.site.sent": self.counts["sent"],
                "router.site.durable_unsent": self.counts["durable_unsent"],
                "router.site.errors": self.counts["errors"],
                "router.site.redialled": self.counts["redialled"],
                "router.site.resent": self.counts["resent"],
                "router.site.internal": self.counts["internal"],
                "router.site.bad": self.counts["bad"]}
