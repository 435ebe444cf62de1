"""An agent leaving the fleet for good: its DEREGISTER, until the sinks that act on it ACKed.

A DEREGISTER (SPEC.md 4.8) ends the agent's checks and jobs (the registry) and its DOWN
alerting (the alerting sinks), so it waits for an ACK of both types
(:data:`agent.config.DEREGISTER_ACKS`), resent like a spooled message (``retry``, ``dup``,
through another router when there is one, the wait doubling from ``spool.ack_timeout`` up to
``spool.max_backoff``), but not spooled: it is sent by a process that is about to end, and
gives up at its deadline (``deregister_timeout``). Two senders:

- the daemon at stop, with ``deregister_on_stop`` (:meth:`agent.daemon.Agent.depart`, on its
  own sockets);
- ``fleetwatch agent --deregister`` while the daemon is stopped (:func:`leave`): a HELLO to
  each router, then the same.

:class:`Departure` is the logic (no socket, the clock passed in); :func:`leave` its loop for
the one-shot command. Once the DEREGISTER is out, the sender says no HELLO and no HEARTBEAT
any more: either would tell the sinks the agent is back.
"""

from __future__ import annotations

import logging
import math
import os
import time

import zmq

import fleetwatch
from fleetwatch import protocol
from fleetwatch.link import replies

from agent.config import DEREGISTER_ACKS
from agent.links import Link, Links, Sockets
from agent.routers import FROM_ROUTER, ephemeral, parents

log = logging.getLogger(__name__)

#: seconds before a send a full queue refused is tried again
REFUSED_WAIT = 0.1


class Departure:
    """One DEREGISTER on its way: when to (re)send it, and which ACKs it still waits for."""

    def __init__(self, message: protocol.Message, until: float, ack_timeout: float = 2.0,
                 max_backoff: float = 60.0, required=DEREGISTER_ACKS, wall=time.time):
        self.message, self.until, self.wall = message, until, wall
        self.ack_timeout, self.max_backoff = ack_timeout, max_backoff
        self.required = tuple(required)
        self.waiting = set(required)
        self.sends = 0
        self.next_send: float | None = None      # None: at once
        self.via: str | None = None              # the router endpoint of the last send

    @property
    def done(self) -> bool:
        return not self.waiting

    def due(self, now: float) -> bool:
        return not self.done and (self.next_send is None or now >= self.next_send)

    def outgoing(self) -> protocol.Message:
        """The message to send now: a resend with ``retry``, ``dup``; the first send dated
        now. Until it is out the agent still heartbeats (its links keep connecting), and the
        alerting sinks take a heartbeat dated after the DEREGISTER for the agent back: its
        ``ts`` is the moment it first leaves, after every heartbeat sent before it."""
        if self.sends:
            return protocol.resend(self.message, self.sends)
        self.message = protocol.Message(self.message.type,
                                        {**self.message.body,
                                         "ts": max(self.message.ts, self.wall())})
        return self.message

    def sent(self, now: float, via: str, ok: bool = True) -> None:
        """A send through ``via`` (``ok`` False: its queue was full, try again shortly)."""
        if not ok:
            self.next_send = now + REFUSED_WAIT
            return
        self.sends += 1
        self.via = via
        self.next_send = now + min(self.ack_timeout * 2 ** (self.sends - 1), self.max_backoff)

    def acked(self, msg: protocol.Message) -> bool:
        """An ACK: True if it names this DEREGISTER (its sink type then no longer waited for).
        An ACK without ``sink`` comes from a sink older than DEREGISTER: it cannot be one."""
        ids = msg.get("msg_ids")
        if not isinstance(ids, list) or self.message.msg_id not in ids:
            return False
        sink = msg.get("sink")
        if sink in self.waiting:
            self.waiting.discard(sink)
            log.info("deregistration acknowledged by %s", sink)
        return True

    def deadline(self, now: float) -> float:
        """When something is to be done next: a resend, or giving up."""
        return min(self.until, now if self.next_send is None else self.next_send)

    def summary(self) -> str:
        """One line: what ACKed, what did not."""
        acked = [s for s in self.required if s not in self.waiting]
        if self.done:
            return f"acknowledged by {' and '.join(acked)}"
        missing = " and ".join(s for s in self.required if s in self.waiting)
        text = f"not acknowledged by {missing}"
        if acked:
            text += f" (acknowledged by {' and '.join(acked)})"
        return text + (" (no router answered)" if not self.sends else "")


def deregister(uuid: str, reason: str, wall=time.time) -> protocol.Message:
    """The agent's DEREGISTER; ``reason`` says why (``stop``, ``deregister``)."""
    return protocol.make("DEREGISTER", uuid, clock=wall, reason=reason)


def leave(cfg, uuid: str, hostname: str, keys=None, clock=time.monotonic,
          wall=time.time) -> Departure:
    """``fleetwatch agent --deregister``: connect to every configured router, say HELLO, send
    the DEREGISTER through one that WELCOMEd us and wait for its ACKs, at most
    ``cfg.deregister_timeout`` seconds. Returns the :class:`Departure` (``done``: ACKed)."""
    ctx = zmq.Context()
    poller = zmq.Poller()
    sockets = Sockets(ctx, uuid, poller, keys)
    links = Links(cfg.routers, lambda endpoint, learned: Link(
        endpoint, cfg.heartbeat_interval, cfg.liveness, cfg.reconnect_min, cfg.reconnect_max))
    hello = protocol.make("HELLO", uuid, clock=wall, hostname=hostname,
                          heartbeat=cfg.heartbeat_interval, version=fleetwatch.__version__,
                          role="agent", instance=os.urandom(8).hex(),
                          **parents(cfg.parents), **ephemeral(cfg.ephemeral))
    now = clock()
    departure = Departure(deregister(uuid, "deregister", wall), now + cfg.deregister_timeout,
                          cfg.spool.ack_timeout, cfg.spool.max_backoff, wall=wall)
    try:
        for link in links:
            try:
                sockets.open(link)
            except zmq.ZMQError as e:
                log.warning("cannot connect to %s: %s", link.endpoint, e)
                continue
            link.opened(now)
            sockets.send(link, hello)
        while not departure.done and (now := clock()) < departure.until:
            if departure.due(now) and links.alive():
                link = links.pick(departure.via)
                departure.sent(now, link.endpoint, sockets.send(link, departure.outgoing()))
            wait = departure.deadline(now) if links.alive() else departure.until
            events = dict(poller.poll(max(0, math.ceil((wait - now) * 1000))))
            for monitor, link in list(sockets.monitors.items()):
                if monitor in events:
                    from fleetwatch.link import handshake_problem
                    for event in sockets.handshake_failures(monitor):
                        log.warning("router %s: %s", link.endpoint, handshake_problem(event))
            for sock, link in list(sockets.by_socket.items()):
                if sock in events:
                    _drain(sock, link, departure, sockets, hello, clock())
    finally:
        sockets.close_all()
        ctx.term()
    return departure


def _drain(sock, link: Link, departure: Departure, sockets: Sockets,
           hello: protocol.Message, now: float) -> None:
    def bad(e: protocol.ProtocolError) -> None:
        log.warning("router %s: bad message: %s", link.endpoint, e)
    for msg in replies(sock, bad, FROM_ROUTER):
        link.heard(now)
        if msg.type == "WELCOME":
            link.welcomed(now, msg.get("router"))
        elif msg.type == "ACK":
            departure.acked(msg)
        elif msg.type == "ERROR" and msg.get("status") == protocol.HELLO_REQUIRED:
            link.hello_required(now)
            if not departure.sends:             # never once the DEREGISTER is out
                sockets.send(link, hello)
        elif msg.type == "ERROR":
            log.warning("router %s: ERROR %s %s", link.endpoint, msg.get("status"),
                        msg.get("reason"))
