"""Frame lists from a sink's PULL, read frame by frame: several times cheaper than
``recv_multipart``.

In pyzmq 27 ``recv_multipart`` pays for an enum built at every internal RCVMORE read
(docs/development/decisions.md#reading-frames-on-the-hot-path); :class:`Receiver` reads each
frame with integer flags instead. A router always
relays three frames (SIGNATURE, ENVELOPE, BODY), so three are read, then RCVMORE once
(through :mod:`fleetwatch.rcvmore`; a check after every frame cost the history sink about 1.3 us
more per message, a sixth of its time, bench/RESULTS.md "History sink"). A longer message is
read to its end and kept whole. A message of fewer than three frames cannot be told from its
successor that way: its frames run on into the next message, and both are refused as
misframed by whoever decodes them. So the first misframed message (counted, ``misframed``)
makes the receiver check every frame boundary for ``CAREFUL_SECONDS``, as the router does
with its agents (router/relay.py). Nothing but routers can send to a sink's PULL: the sink
connects it to the endpoints their WELCOMEs name.
"""

from __future__ import annotations

import time
from collections import Counter

import zmq

from fleetwatch.rcvmore import rcvmore_reader

NOBLOCK = zmq.NOBLOCK
#: seconds of exact (slower) framing after a message of other than three frames
CAREFUL_SECONDS = 10.0


class Receiver:
    """Takes batches of messages from one socket; the owner's thread only."""

    def __init__(self, sock: zmq.Socket, clock=time.monotonic, counts: Counter | None = None):
        self.sock, self.clock = sock, clock
        self.counts = counts if counts is not None else Counter()
        self.more = rcvmore_reader(sock)
        #: until this clock time, every frame boundary is checked
        self.careful_until = 0.0

    def take(self, limit: int) -> list[list[bytes]]:
        """Up to ``limit`` messages waiting on the socket, each as its list of frames."""
        if self.clock() < self.careful_until:
            return self._take_careful(limit)
        recv, more, raw = self.sock.recv, self.more, []
        for _ in range(limit):
            try:
                first = recv(NOBLOCK)
            except zmq.Again:
                break
            second = None
            try:
                second = recv(NOBLOCK)
                third = recv(NOBLOCK)
            except zmq.Again:           # fewer than three frames and nothing behind them
                raw.append([first] if second is None else [first, second])
                self._misframed()
                break
            if more():
                frames = [first, second, third]
                while more():
                    frames.append(recv())
                raw.append(frames)
                self._misframed()
                break
            raw.append([first, second, third])
        return raw

    def _take_careful(self, limit: int) -> list[list[bytes]]:
        """:meth:`take` with RCVMORE checked after every frame: exact framing, slower."""
        recv, more, raw = self.sock.recv, self.more, []
        for _ in range(limit):
            try:
                frames = [recv(NOBLOCK)]
            except zmq.Again:
                break
            while more():
                frames.append(recv())   # the rest of a message arrives with its first frame
            raw.append(frames)
        return raw

    def _misframed(self) -> None:
        self.counts["misframed"] += 1
        self.careful_until = self.clock() + CAREFUL_SECONDS
