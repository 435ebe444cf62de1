"""What the router's slow path may do: answer a peer, refuse a message, relay, reach an agent.

:class:`router.admission.Admission` (agents) and :class:`router.control.ControlDesk` (control
clients) are logic fed frames: they read the peers and the counters and act only through a
:class:`Port`, the desk through a :class:`DeskPort`, which can also send to an attached agent.
The relay gives each a :class:`RelayPort`, the thin adapter over one of its ROUTER sockets;
unit tests give them a recording fake. So the imports point one way: ``router.relay`` imports
admission, control and this module; they import this module and never the relay.
"""

from __future__ import annotations

import logging
from typing import Protocol

import zmq

from fleetwatch import protocol
from fleetwatch.protocol import SIGNATURE, Message, ProtocolError

log = logging.getLogger(__name__)

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK

#: what :meth:`DeskPort.to_agent` says: sent, not reading (its queue is full), gone
SENT, FULL, GONE = "sent", "full", "gone"


class Port(Protocol):
    """The way out of one ROUTER socket, and to the sinks and the tail."""

    def reply(self, rid: bytes, msg: Message) -> bool:
        """Send ``msg`` to ``rid`` now, without blocking; False (counted) if it could not go."""

    def may_answer(self, rid: bytes) -> bool:
        """Whether ``rid`` may be answered an error now (at most one a second per peer,
        :class:`router.replies.ReplyLimiter`); True notes that it is."""

    def refuse(self, rid: bytes, err: ProtocolError, ref: str | None = None,
               answer: bool = True, careful: bool = True) -> None:
        """Drop a message: count it (``router.bad.STATUS``), log it and, when ``answer``,
        answer ERROR (both throttled). ``careful``: the message was read the fast way, so its
        framing is uncertain (the agents socket then checks every frame boundary a while)."""

    def relay(self, envelope: bytes, type_frame: bytes, body: bytes) -> None:
        """Send a stamped message to each sink type of its route, and to the tail."""

    def welcome(self) -> Message:
        """A WELCOME naming this router, the routers agents may use and the endpoints."""

    def fleet(self) -> dict:
        """The router's sink connections per type and its durable routes (PEERS, 4.3)."""


class DeskPort(Port, Protocol):
    """A control socket's :class:`Port`, which also sends to agents."""

    def to_agent(self, rid: bytes, type_frame: bytes, body: bytes) -> str:
        """Send SIGNATURE, TYPE, BODY to the agent connection ``rid`` without blocking:
        :data:`SENT`, :data:`FULL` (it is not reading) or :data:`GONE` (no such connection)."""


class RelayPort:
    """A :class:`DeskPort` over the relay's ROUTER socket named ``where`` (its attribute,
    ``agents`` or ``control``, read at each call: the relay makes its sockets at bind)."""

    def __init__(self, relay, where: str):
        self.owner, self.where = relay, where

    def reply(self, rid: bytes, msg: Message) -> bool:
        owner = self.owner
        try:
            getattr(owner, self.where).send_multipart([rid, *protocol.encode(msg)], NOBLOCK)
            return True
        except zmq.ZMQError as e:  # Again (queue full) or EHOSTUNREACH (gone)
            owner.counters.replies_failed += 1
            log.debug("cannot answer %s to %s: %s", msg.type, owner.who(rid), e)
            return False

    def may_answer(self, rid: bytes) -> bool:
        return self.owner.limiter.allow(rid)

    def refuse(self, rid: bytes, err: ProtocolError, ref: str | None = None,
               answer: bool = True, careful: bool = True) -> None:
        owner, where = self.owner, self.where
        if careful and where == "agents":
            owner.careful_until = owner.monotonic() + owner.careful_for
        owner.counters.count_bad(err.status)
        owner.throttle.warning(f"{where}:{err.status}", "%s: refused a message from %s: %s",
                               where, owner.who(rid), err)
        if answer and owner.limiter.allow(rid):
            self.reply(rid, protocol.error(err.status, err.reason, ref, owner.id))

    def relay(self, envelope: bytes, type_frame: bytes, body: bytes) -> None:
        self.owner.relay(envelope, type_frame, body)

    def welcome(self) -> Message:
        return self.owner.welcome(endpoints=True)

    def fleet(self) -> dict:
        return self.owner.fleet()

    def to_agent(self, rid: bytes, type_frame: bytes, body: bytes) -> str:
        send = self.owner.agents.send
        try:
            send(rid, MORE_NB)
            send(SIGNATURE, MORE_NB)
            send(type_frame, MORE_NB)
            send(body, NOBLOCK)
            return SENT
        except zmq.Again:
            return FULL
        except zmq.ZMQError as e:
            if e.errno != zmq.EHOSTUNREACH:
                raise
            return GONE
