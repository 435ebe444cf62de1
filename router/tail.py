"""The router's tail (SPEC 4.1, "The tail"): every relayed message published on an XPUB.

Each message goes out as ENVELOPE, SIGNATURE, BODY, SEQ: the envelope is the topic
subscribers match; SEQ numbers the message among those of its type and among those of its
type from its sender, so that a subscriber that fell behind learns what it lost. An attached
agent's numbers are kept on its :class:`router.peers.Peer` (across its reconnections); any
other sender's (a back-end, this router) here, by envelope, at most :data:`MAX_SENDERS`.

XPUB passes each topic's first subscribe and last unsubscribe: :attr:`Tail.topics` counts
them, because the relay only asks "anyone listening?" before it publishes; topics above
``limits.tail_topics`` are counted and reported (libzmq keeps the topics themselves, SPEC 8).
The relay makes and binds the socket with its others and polls it; nothing here blocks.
"""

from __future__ import annotations

import zmq

from fleetwatch.logs import Throttle
from fleetwatch.protocol import SIGNATURE, TAIL_SEQ
from router.counters import Counters

NOBLOCK = zmq.NOBLOCK
MORE_NB = zmq.SNDMORE | zmq.NOBLOCK
#: senders other than attached agents whose tail messages are numbered (back-ends, this
#: router); past it their numbers start again from 1
MAX_SENDERS = 10_000


class Tail:
    """The XPUB ``socket``: :meth:`publish`, and :meth:`drain` its subscriptions."""

    def __init__(self, sock: zmq.Socket, counters: Counters, throttle: Throttle):
        self.socket, self.counters, self.throttle = sock, counters, throttle
        #: distinct topics subscribed: a count, not the topics
        self.topics = 0
        #: type frame -> messages of that type published (SEQ's first number)
        self.seq: dict[bytes, int] = {}
        #: envelope -> those of a sender that is not an attached agent (SEQ's second number)
        self.sender_seq: dict[bytes, int] = {}

    def publish(self, type_frame: bytes, envelope: bytes, body: bytes,
                sender: dict[bytes, int] | None = None) -> None:
        """Publish ENVELOPE, SIGNATURE, BODY, SEQ (``sender``: the attached agent's numbers
        by type; None: another sender's, by envelope). A message numbered and not sent is
        lost to every subscriber, and they see it."""
        seqs = self.seq
        n = seqs.get(type_frame, 0) + 1
        seqs[type_frame] = n
        if sender is None:
            sender, key = self.sender_seq, envelope
            if len(sender) >= MAX_SENDERS:      # (anyone may send STATS on control)
                sender.clear()
        else:
            key = type_frame
        m = sender.get(key, 0) + 1
        sender[key] = m
        send = self.socket.send
        try:
            send(envelope, MORE_NB)
        except zmq.Again:
            return
        send(SIGNATURE, MORE_NB)
        send(body, MORE_NB)
        send(TAIL_SEQ.pack(n, m), NOBLOCK)
        self.counters.tail_published += 1

    def drain(self, budget: int, cap: int) -> None:
        """Count up to ``budget`` subscription events; above ``cap`` topics
        (``limits.tail_topics``) count and report the excess."""
        counters, recv = self.counters, self.socket.recv
        for _ in range(budget):
            try:
                event = recv(NOBLOCK)
            except zmq.Again:
                return
            if event[:1] == b"\x01":
                self.topics += 1
                if self.topics > cap:
                    counters.tail_excess += 1
                    self.throttle.warning("tail:excess", "tail: %d topics subscribed, above "
                                          "limits.tail_topics (%d)", self.topics, cap)
            elif event[:1] == b"\x00" and self.topics > 0:
                self.topics -= 1
            counters.tail_topics = self.topics
