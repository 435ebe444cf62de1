"""Which sink types have a sink connected: monitors on the router's sink PUSH sockets.

A durable route (SPEC 4.1: a spooled type an agent keeps until that sink type ACKs it) with
no sink of its type connected must never be silent: the relay answers the agents that sent
on it ``503`` (they keep the message), its STATS say ``router.durable_missing`` and
``router.sinks.TYPE`` (connections), its PEERS answers carry ``sinks`` and ``durable`` for
``fleetwatch status``, and a warning is logged once the absence has lasted :data:`GRACE`
seconds (a router starts before its sinks), then an info line when a sink is back.

A connection counts from libzmq's ``ACCEPTED`` event to its ``DISCONNECTED`` (both carry the
descriptor), so a sink still in its handshake counts, and so would a stray TCP client until
it goes. With CURVE the same monitor reports failed handshakes, handed to the doorman
(``router.refused.handshake``); libzmq allows one monitor per socket.
"""

from __future__ import annotations

import logging
import time

import zmq
from zmq.utils.monitor import parse_monitor_message

log = logging.getLogger(__name__)

EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED
#: seconds a durable sink type may have no sink before the router warns (start-up order)
GRACE = 10.0
#: monitor events read per socket per sweep
BUDGET = 1000


class SinkPresence:
    """Connections per sink type, and the durable routes left without a sink.

    ``durable``: spooled type -> the sink types it must be ACKed by (the config's
    :meth:`router.config.RouterConfig.durable_routes`). ``on_failed(endpoint)``: a failed
    handshake (CURVE), when the caller asks for those events in :meth:`watch`.
    """

    def __init__(self, durable: dict[str, list[str]], monotonic=time.monotonic,
                 on_failed=None):
        self.durable = durable
        self.monotonic, self.on_failed = monotonic, on_failed
        #: sink type -> descriptors of its connections
        self.connections: dict[str, set[int]] = {}
        self.monitors: dict[str, zmq.Socket] = {}
        #: durable sink type -> since when (monotonic) it has had no connection
        self.absent_since: dict[str, float] = {}
        self.warned: set[str] = set()

    def watch(self, name: str, sock: zmq.Socket, failed: int = 0) -> None:
        """Monitor sink type ``name``'s PUSH socket (before it binds); ``failed``: the
        handshake failure events to hand to ``on_failed`` as well."""
        monitor = sock.get_monitor_socket(EVENTS | failed)
        monitor.linger = 0
        self.monitors[name] = monitor
        self.connections[name] = set()

    def connected(self, name: str) -> int:
        """Connections to sink type ``name`` (0 for a type not watched)."""
        return len(self.connections.get(name, ()))

    def counts(self) -> dict[str, int]:
        """Sink type -> connections, for STATS and PEERS."""
        return {name: len(fds) for name, fds in sorted(self.connections.items())}

    def missing(self) -> list[tuple[str, str]]:
        """The durable (type, sink type) routes with no sink connected."""
        return [(t, s) for t, sinks in sorted(self.durable.items()) for s in sinks
                if not self.connected(s)]

    def drain(self) -> None:
        """Read the monitors' events (from the relay's sweep)."""
        for name, monitor in self.monitors.items():
            fds = self.connections[name]
            for _ in range(BUDGET):
                try:
                    frames = monitor.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                try:
                    event = parse_monitor_message(frames)
                    kind, fd = int(event["event"]), int(event["value"])
                except (ValueError, KeyError, IndexError, TypeError):
                    continue
                if kind == zmq.EVENT_ACCEPTED:
                    fds.add(fd)
                elif kind == zmq.EVENT_DISCONNECTED:
                    fds.discard(fd)
                elif self.on_failed is not None:
                    self.on_failed(frames[1].decode("ascii", "replace")[:64])

    def check(self) -> None:
        """Warn once per absence of a durable sink type that lasts :data:`GRACE` seconds."""
        now = self.monotonic()
        for sink in sorted({s for sinks in self.durable.values() for s in sinks}):
            if self.connected(sink):
                self.absent_since.pop(sink, None)
                if sink in self.warned:
                    self.warned.discard(sink)
                    log.info("a %s sink is connected again: durable routes to it are served",
                             sink)
                continue
            since = self.absent_since.setdefault(sink, now)
            if sink not in self.warned and now - since >= GRACE:
                self.warned.add(sink)
                types = [t for t, sinks in sorted(self.durable.items()) if sink in sinks]
                log.warning("no %s sink connected for %.0fs: %s must reach one, so agents keep "
                            "them in their spools (and get 503) until a %s sink connects to "
                            "this router or another", sink, now - since, ", ".join(types),
                            sink)

    def close(self, sockets: dict[str, zmq.Socket]) -> None:
        """Stop the monitors of ``sockets`` (sink type -> socket) and close them."""
        for name, sock in sockets.items():
            if name in self.monitors:
                try:
                    sock.disable_monitor()
                except zmq.ZMQError:
                    pass
        for monitor in self.monitors.values():
            monitor.close(linger=0)
        self.monitors.clear()
