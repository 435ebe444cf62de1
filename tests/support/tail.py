"""The routers' tails as ``fleetwatch tail`` sees them: a SUB on one or more routers' tail
sockets (a CURVE client when given keys) that keeps every message it decoded."""

from __future__ import annotations

import zmq

from fleetwatch import protocol, security
from support.fleet import wait_for


class Tail:
    """Subscribed to ``topics`` (``protocol.topic(...)``; default everything) on the tail
    ``endpoints``; ``cert`` and ``router_cert`` make it a CURVE client."""

    def __init__(self, ctx: zmq.Context, endpoints: list[str], topics=(b"",), cert=None,
                 router_cert=None):
        self.sub = ctx.socket(zmq.SUB)
        self.sub.linger = 0
        if cert is not None:
            security.client(self.sub, cert, router_cert)
        for topic in topics:
            self.sub.subscribe(topic)
        for endpoint in endpoints:
            self.sub.connect(endpoint)
        #: every message received so far, in order
        self.seen: list[protocol.Relayed] = []
        self._taken = 0

    def pump(self) -> list[protocol.Relayed]:
        """Receive what has arrived; every message so far."""
        while self.sub.poll(20):
            self.seen.append(protocol.decode_tail(self.sub.recv_multipart()))
        return self.seen

    def next(self, match, timeout: float = 20.0, what: str = "a message") -> protocol.Message:
        """The first message after the one this last returned that satisfies ``match``."""
        def found():
            seen = self.pump()
            for i in range(self._taken, len(seen)):
                if match(seen[i].message):
                    self._taken = i + 1
                    return seen[i].message
            self._taken = len(seen)
            return None
        return wait_for(found, timeout, interval=0, what=what)

    def close(self) -> None:
        self.sub.close(0)
