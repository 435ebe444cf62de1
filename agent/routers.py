"""The agent's side of its router links: connecting, HELLO, heartbeats, silence, and what a
router sends.

Each link goes ``dead -> connecting (HELLO sent) -> alive (WELCOME)`` (:mod:`agent.links`
holds the state machine and the DEALERs). Here the timers act on it: a reconnect when due, a
link silent for ``liveness`` intervals closed (reconnect after a backoff), a HEARTBEAT when
due. What arrives is decoded (only WELCOME, HEARTBEAT, ACK, RUN and ERROR; a bad message is
counted and dropped) and dispatched: ACK to the :class:`agent.outbox.Outbox`, WELCOME learns
the routers named (an endpoint that turns out to be an alias of a linked router is dropped,
and so is a learned router that no alive router's newest WELCOME names any more: it left
the live set, SPEC 4.9; routers of a mesh send WELCOME again when their live set changes),
ERROR 401 sends HELLO again, RUN goes to ``on_run``. Which routers the agent keeps links to
is :mod:`agent.attach`'s choice (``k`` of a mesh's live set), made again at each WELCOME and
each link lost. With CURVE, a refused handshake is counted and logged (libzmq retries it).
"""

from __future__ import annotations

import collections
import logging
from typing import Callable

import zmq

import fleetwatch
from fleetwatch import protocol
from fleetwatch.logs import Throttle
from fleetwatch.protocol import ACK_OWNERS

from agent.attach import PARKED, UNCHOSEN, Attach
from agent.links import Link, Links, Sockets
from agent.outbox import Outbox

log = logging.getLogger(__name__)

FROM_ROUTER = frozenset({"WELCOME", "HEARTBEAT", "ACK", "RUN", "ERROR"})
#: messages read from one socket per wake-up
DRAIN = 256


def parents(declared) -> dict:
    """The ``parents`` field of HELLO and REGISTER: only when some are declared."""
    return {"parents": list(declared)} if declared else {}


def ephemeral(flag: bool) -> dict:
    """The ``ephemeral`` field of HELLO and REGISTER: only when true."""
    return {"ephemeral": True} if flag else {}


class Routers:
    """Timers and traffic of every router link."""

    def __init__(self, uuid: str, hostname: str, instance: str, heartbeat: float,
                 links: Links, sockets: Sockets, outbox: Outbox, declared,
                 counters: collections.Counter, on_run, clock, wall, k: int = 0):
        self.uuid, self.hostname, self.instance = uuid, hostname, instance
        #: which routers to keep links to: ``k`` of a mesh's live set (0: every one named)
        self.attach = Attach(links, uuid, k)
        self.heartbeat = heartbeat
        self.links, self.sockets, self.outbox, self.declared = links, sockets, outbox, declared
        self.counters = counters
        #: ``on_run(msg, endpoint)``: a RUN arrived through the router at ``endpoint``
        self.on_run = on_run
        self.clock, self.wall = clock, wall
        self.throttle = Throttle(log, 10.0, clock)
        #: the agent's declared parents (its config's ``parents``), sent in HELLO
        self.parents: tuple[str, ...] = ()
        #: its config's ``ephemeral``, sent in HELLO
        self.ephemeral = False
        #: its DEREGISTER is out (agent.departure): no HELLO any more
        self.leaving = False
        #: HELLO's ``role``: ``agent``, or ``device`` for a host its poller speaks for
        self.role = "agent"
        #: whether to heartbeat now: always for an agent; a device only while it answers
        #: (SPEC 7.2), so that its silence makes it DOWN through the sinks' host timeout
        self.beating: Callable[[], bool] = lambda: True

    def deadline(self) -> float:
        return min((link.deadline() for link in self.links), default=float("inf"))

    def timers(self, now: float) -> None:
        for link in self.links:
            if self.links.links.get(link.endpoint) is not link:
                continue                        # forgotten meanwhile (agent.attach)
            if link.reconnect_due(now):
                self._connect(link, now)
            elif link.alive and not self.beating():
                # silent by choice: no HEARTBEAT, so no answer awaited (the router forgets
                # it, SPEC 5, and answers its next HEARTBEAT 401: HELLO again)
                link.heard(now)
                link.heartbeat_due(now)
            elif link.expired(now):
                self.sockets.close(link)
                delay = link.closed(now)
                log.warning("router %s silent for %d intervals, reconnecting in %.2fs",
                            link.endpoint, link.liveness, delay)
                self.counters["agent.routers.expired"] += 1
                self._arrange(now)
            elif link.heartbeat_due(now):
                self.outbox.send(link, protocol.make("HEARTBEAT", self.uuid, clock=self.wall,
                                                     interval=self.heartbeat))

    def _connect(self, link: Link, now: float) -> None:
        try:
            self.sockets.open(link)
        except zmq.ZMQError as e:  # a malformed endpoint, most likely learned from WELCOME
            self.sockets.close(link)
            log.error("cannot connect to %s: %s%s", link.endpoint, e,
                      " (forgotten)" if link.learned else "")
            if link.learned:
                self.links.remove(link)
            else:
                link.closed(now)
            return
        link.opened(now)
        self._hello(link)

    def _hello(self, link: Link) -> None:
        self.outbox.send(link, protocol.make("HELLO", self.uuid, clock=self.wall,
                                             hostname=self.hostname, heartbeat=self.heartbeat,
                                             version=fleetwatch.__version__, role=self.role,
                                             instance=self.instance,
                                             plugins=self.declared.own_wire(),
                                             **parents(self.parents),
                                             **ephemeral(self.ephemeral)))

    # ---------------------------------------------------------------- arriving
    def drain(self, sock: zmq.Socket, link: Link, now: float) -> None:
        """Read what ``link``'s DEALER holds (at most ``DRAIN`` messages) and act on it."""
        for _ in range(DRAIN):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = protocol.decode(frames, FROM_ROUTER)
            except protocol.ProtocolError as e:
                self.counters["agent.router.errors"] += 1
                self.throttle.warning(f"router.{link.endpoint}", "router %s: bad message: %s",
                                      link.endpoint, e)
                continue
            link.heard(now)
            self._on_message(link, msg, now)
            if link.endpoint not in self.sockets.by_link:
                return  # the link was closed while handling (an alias)

    def handshake_failed(self, monitor: zmq.Socket, link: Link) -> None:
        """CURVE: the router refused our key or cannot be verified; libzmq retries."""
        from fleetwatch.link import handshake_problem
        for event in self.sockets.handshake_failures(monitor):
            self.counters["agent.router.handshake_failed"] += 1
            self.throttle.warning(f"handshake.{link.endpoint}", "router %s: %s",
                                  link.endpoint, handshake_problem(event))

    def _on_message(self, link: Link, msg: protocol.Message, now: float) -> None:
        if msg.type == "ACK":
            self.outbox.ack(msg)
        elif msg.type == "WELCOME":
            self._welcome(link, msg, now)
        elif msg.type == "ERROR":
            if msg.get("status") == protocol.HELLO_REQUIRED:
                log.info("router %s asks for HELLO again", link.endpoint)
                link.hello_required(now)
                if not self.leaving:            # a HELLO after a DEREGISTER would undo it
                    self._hello(link)
            elif msg.get("status") == protocol.UNAVAILABLE and msg.get("ref") in ACK_OWNERS:
                # a durable route's sink type could not take it (SPEC 4.1): it stays spooled
                self.counters["agent.spool.durable_unavailable"] += 1
                self.throttle.warning(f"durable.{link.endpoint}", "router %s: %s (kept in the "
                                      "spool, resent later)", link.endpoint,
                                      str(msg.get("reason"))[:200])
            else:
                self.throttle.warning(f"error.{link.endpoint}", "router %s: ERROR %s %s (%s)",
                                      link.endpoint, msg.get("status"), msg.get("reason"),
                                      msg.get("ref"))
        elif msg.type == "RUN":
            self.on_run(msg, link.endpoint)

    def _welcome(self, link: Link, msg: protocol.Message, now: float) -> None:
        link.welcomed(now, msg.get("router"))
        self.outbox.durable(link.router_id or link.endpoint, msg.get("durable"))
        other = self.links.duplicate_of(link)
        if other is not None:
            log.info("%s is router %s, already linked through %s: dropping it",
                     link.endpoint, link.router_id, other.endpoint)
            self.sockets.close(link)
            self.links.remove(link)
            return
        routers = [r for r in msg.get("routers") or () if isinstance(r, str)]
        link.told = routers
        members = msg.get("members")
        link.members = {m["agents"]: m["id"] for m in members
                        if isinstance(m.get("agents"), str) and isinstance(m.get("id"), str)} \
            if isinstance(members, list) else None
        if self.attach.live() is None:      # every named router (no mesh, or k 0)
            for new in self.links.learn(routers):
                log.info("router %s told us of %s", link.router_id, new.endpoint)
        self._arrange(now)

    def _arrange(self, now: float) -> None:
        """Close the links :mod:`agent.attach` no longer wants (counted by why: a learnt
        router no alive router names, ``agent.routers.dropped``; a live one not among the
        ``k``, ``unchosen``; a configured one not among them, ``parked``); the new ones
        connect at the next timers."""
        changes = self.attach.arrange(now)
        for gone, why in changes.closed:
            self.sockets.close(gone)
            self.counters[f"agent.routers.{why}"] += 1
            if why == PARKED:
                log.info("configured router %s (%s) is not among the %d chosen: closed until "
                         "no chosen router is alive", gone.router_id or "?", gone.endpoint,
                         self.attach.k)
            elif why == UNCHOSEN:
                log.info("router %s (%s) is no longer among the %d chosen: closed",
                         gone.router_id or "?", gone.endpoint, self.attach.k)
            else:
                log.info("router %s (%s) is no longer named by the routers: dropped",
                         gone.router_id or "?", gone.endpoint)
        for new in changes.new:
            log.info("attaching to router %s (among the %d chosen of %d live)", new.endpoint,
                     self.attach.k, len(self.attach.live() or ()))
