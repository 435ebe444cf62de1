"""Links to routers: one DEALER per router ``agents`` endpoint (SPEC.md sections 2 and 5).

:class:`Link` is the state machine of one endpoint, with no socket: ``dead`` (waiting to
reconnect) -> ``connecting`` (socket open, HELLO sent) -> ``alive`` (WELCOME heard). Any
message from the router refreshes its liveness; ``liveness`` heartbeat intervals of silence
close the socket, and the reconnect delay starts at ``reconnect_min``, doubles up to
``reconnect_max`` and is jittered by +-25 %. ERROR 401 means "send HELLO again".

:class:`Links` is the set of endpoints: configured ones, and routers learned from WELCOME.
A learned one that the newest WELCOME of every alive link leaves out (the router left the
routers' live set, SPEC 4.9) is dropped: :meth:`Links.unlisted`; configured ones stay.
Which of the named routers to link to is :mod:`agent.attach`'s choice (``k`` of a mesh's
live set by rendezvous hashing); a configured link it does not choose is *parked*: closed,
not reconnected until unparked. Traffic goes round-robin through alive links.
:class:`Sockets` is the thin zmq adapter.
"""

from __future__ import annotations

import logging
import os
import random

import zmq

from fleetwatch import protocol

log = logging.getLogger(__name__)

DEAD, CONNECTING, ALIVE = "dead", "connecting", "alive"
SNDHWM = 1000
RCVHWM = 1000
#: Most router endpoints one agent links to (a WELCOME cannot make it open thousands).
MAX_LINKS = 64


class Link:
    """One router endpoint's state: the daemon asks it what to do and tells it what happened."""

    def __init__(self, endpoint: str, interval: float, liveness: int = 3,
                 reconnect_min: float = 0.5, reconnect_max: float = 30.0,
                 learned: bool = False, rand=random.random):
        self.endpoint = endpoint
        self.interval, self.liveness = interval, liveness
        self.reconnect_min, self.reconnect_max = reconnect_min, reconnect_max
        self.learned = learned
        self.rand = rand
        self.state = DEAD
        self.router_id: str | None = None
        self.backoff = reconnect_min
        self.reconnect_at = 0.0      # first connection at once
        self.last_heard = 0.0
        self.next_heartbeat = 0.0
        self.connects = 0
        #: the ``routers`` of this router's newest WELCOME (None before one)
        self.told: list[str] | None = None
        #: its newest WELCOME's ``members`` as agents endpoint -> router id (None: a WELCOME
        #: without ``members``, from a router older than meshes, or none yet)
        self.members: dict[str, str] | None = None
        #: a configured router not chosen (agent.attach): closed, not reconnected
        self.parked = False

    def __repr__(self) -> str:
        return f"Link({self.endpoint!r}, {self.state})"

    @property
    def alive(self) -> bool:
        return self.state == ALIVE

    def opened(self, now: float) -> None:
        """A socket was connected and HELLO sent: wait for WELCOME."""
        self.state = CONNECTING
        self.last_heard = now
        self.next_heartbeat = now + self.interval
        self.connects += 1

    def heard(self, now: float) -> None:
        """Any valid message from the router: it is there."""
        self.last_heard = now

    def welcomed(self, now: float, router_id: str) -> None:
        self.heard(now)
        if self.state != ALIVE:
            log.info("router %s (%s) is alive", router_id, self.endpoint)
        self.state = ALIVE
        self.router_id = router_id
        self.backoff = self.reconnect_min

    def hello_required(self, now: float) -> None:
        """ERROR 401: the router forgot us; HELLO is sent again and WELCOME awaited."""
        self.heard(now)
        self.state = CONNECTING

    def expired(self, now: float) -> bool:
        return self.state != DEAD and now - self.last_heard >= self.liveness * self.interval

    def closed(self, now: float) -> float:
        """The socket was closed: schedule the reconnect and return its delay."""
        self.state = DEAD
        delay = self.backoff * (0.75 + 0.5 * self.rand())
        self.reconnect_at = now + delay
        self.backoff = min(self.backoff * 2, self.reconnect_max)
        return delay

    def reconnect_due(self, now: float) -> bool:
        return self.state == DEAD and not self.parked and now >= self.reconnect_at

    def park(self) -> None:
        """Not chosen (its socket is closed by the caller): no reconnecting until
        :meth:`unpark`. What it told is forgotten with the connection."""
        self.state, self.parked = DEAD, True
        self.told = self.members = None

    def unpark(self, now: float) -> None:
        """Wanted again: connect at once."""
        self.parked = False
        self.reconnect_at, self.backoff = now, self.reconnect_min

    def heartbeat_due(self, now: float) -> bool:
        """True (and the next heartbeat scheduled) when a HEARTBEAT should be sent now."""
        if self.state != ALIVE or now < self.next_heartbeat:
            return False
        self.next_heartbeat = max(self.next_heartbeat + self.interval, now + self.interval / 2)
        return True

    def deadline(self) -> float:
        """The next time this link needs attention."""
        if self.state == DEAD:
            return float("inf") if self.parked else self.reconnect_at
        expiry = self.last_heard + self.liveness * self.interval
        return min(expiry, self.next_heartbeat) if self.state == ALIVE else expiry


class Links:
    """Every router endpoint the agent knows, and the choice of a live one for traffic."""

    def __init__(self, endpoints, make_link):
        self.make_link = make_link
        self.links: dict[str, Link] = {}
        self.ignored: set[str] = set()   # endpoints found to be aliases of a known router
        self._turn = 0
        for endpoint in endpoints:
            self.add(endpoint, learned=False)

    def __iter__(self):
        return iter(list(self.links.values()))

    def __len__(self) -> int:
        return len(self.links)

    def add(self, endpoint: str, learned: bool) -> Link | None:
        if endpoint in self.links or endpoint in self.ignored:
            return None
        link = self.make_link(endpoint, learned)
        self.links[endpoint] = link
        return link

    def remove(self, link: Link) -> None:
        """Forget ``link`` for good: an alias of a known router, or a bad endpoint."""
        self.links.pop(link.endpoint, None)
        self.ignored.add(link.endpoint)

    def forget(self, link: Link) -> None:
        """Forget ``link`` until a WELCOME names its endpoint again (a router that left)."""
        self.links.pop(link.endpoint, None)

    def unlisted(self) -> list[Link]:
        """The learned links whose endpoint no alive link's newest WELCOME names (SPEC
        4.9): the routers that left the live set. None while no alive link has told any.
        An alive link is named by itself (a router answers there, whatever endpoint it
        advertises: a configured ``peers`` entry may be an alias of it)."""
        alive = [link for link in self.links.values() if link.alive]
        told = [link.told for link in alive if link.told is not None]
        if not told:
            return []
        named = set().union(*told) | {link.endpoint for link in alive}
        return [link for link in self.links.values() if link.learned and link.endpoint not in named]

    def alive(self) -> list[Link]:
        return [link for link in self.links.values() if link.alive]

    def learn(self, endpoints) -> list[Link]:
        """Routers named in a WELCOME: the new ones become links (returned)."""
        new = []
        for endpoint in list(endpoints or ()):
            if not isinstance(endpoint, str) or not endpoint or endpoint in self.links \
                    or endpoint in self.ignored:
                continue
            if len(self.links) >= MAX_LINKS:
                log.warning("%d routers known already: %s ignored", MAX_LINKS, endpoint)
                continue
            new.append(self.add(endpoint, True))
            log.info("learned router endpoint %s", endpoint)
        return new

    def duplicate_of(self, link: Link) -> Link | None:
        """Another live link to the same router id (an alias endpoint), if any."""
        for other in self.links.values():
            if other is not link and other.alive and other.router_id == link.router_id:
                return other
        return None

    def pick(self, avoid: str | None = None) -> Link | None:
        """The next alive link, round-robin; another than ``avoid`` when there is one."""
        alive = self.alive()
        if not alive:
            return None
        choices = [link for link in alive if link.endpoint != avoid] or alive
        self._turn = (self._turn + 1) % len(choices)
        return choices[self._turn]


def connection_id() -> bytes:
    """A new DEALER's routing id: a secret nobody else can announce to take its place (SPEC
    7.3); 128 random bits after a non-zero octet (libzmq reserves a leading zero). From
    ``os.urandom``, as ``secrets`` does: importing ``secrets`` maps OpenSSL's libcrypto (3 MiB
    of the agent's RSS) for an ``hmac`` the agent never calls."""
    return b"c" + os.urandom(16)


class Sockets:
    """The DEALER of each link (a new secret routing id per socket, :func:`connection_id`),
    registered with one poller; a CURVE client of the routers' key when ``keys`` is enabled."""

    def __init__(self, ctx: zmq.Context, uuid: str, poller: zmq.Poller, keys=None):
        self.ctx, self.uuid, self.poller = ctx, uuid, poller
        self.keys = keys            # fleetwatch.security.ClientKeys: CURVE when enabled
        self.by_link: dict[str, zmq.Socket] = {}
        self.by_socket: dict[zmq.Socket, Link] = {}
        #: CURVE only: a monitor per DEALER reporting failed handshakes (monitor -> link)
        self.monitors: dict[zmq.Socket, Link] = {}
        self._monitor_of: dict[str, zmq.Socket] = {}

    def open(self, link: Link) -> zmq.Socket:
        sock = self.ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, SNDHWM)
        sock.setsockopt(zmq.RCVHWM, RCVHWM)
        sock.setsockopt(zmq.ROUTING_ID, connection_id())
        sock.setsockopt(zmq.MAXMSGSIZE, protocol.MAX_BODY + 4096)
        if self.keys is not None and self.keys.enabled:
            from fleetwatch.link import HANDSHAKE_FAILED
            self.keys.apply(sock)
            monitor = sock.get_monitor_socket(HANDSHAKE_FAILED)
            self.monitors[monitor] = link
            self._monitor_of[link.endpoint] = monitor
            self.poller.register(monitor, zmq.POLLIN)
        try:
            sock.connect(link.endpoint)
        except zmq.ZMQError:
            self._close_monitor(link, sock)
            sock.close(linger=0)
            raise
        self.by_link[link.endpoint] = sock
        self.by_socket[sock] = link
        self.poller.register(sock, zmq.POLLIN)
        return sock

    def _close_monitor(self, link: Link, sock: zmq.Socket) -> None:
        monitor = self._monitor_of.pop(link.endpoint, None)
        if monitor is not None:
            self.monitors.pop(monitor, None)
            self.poller.unregister(monitor)
            sock.disable_monitor()
            monitor.close(linger=0)

    def handshake_failures(self, monitor: zmq.Socket) -> list[dict]:
        """The failed-handshake events waiting on ``monitor``."""
        from zmq.utils.monitor import recv_monitor_message
        events = []
        while monitor.poll(0):
            events.append(recv_monitor_message(monitor))
        return events

    def close(self, link: Link) -> None:
        sock = self.by_link.pop(link.endpoint, None)
        if sock is not None:
            self._close_monitor(link, sock)
            self.by_socket.pop(sock, None)
            self.poller.unregister(sock)
            sock.close(linger=0)

    def send(self, link: Link, msg: protocol.Message) -> bool:
        """Send without blocking; False if the link has no socket or its queue is full."""
        sock = self.by_link.get(link.endpoint)
        if sock is None:
            return False
        try:
            sock.send_multipart(protocol.encode(msg), zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def close_all(self) -> None:
        for sock in list(self.by_socket):
            self.close(self.by_socket[sock])
