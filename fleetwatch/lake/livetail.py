"""The routers' tails for a replay (:mod:`fleetwatch.lake.follow`): one SUB, buffered by a
thread of its own while the lake is read, then read by the caller."""

from __future__ import annotations

import queue
import threading
import time

import zmq

from fleetwatch import protocol
from fleetwatch.protocol import ProtocolError, Relayed


class LiveTail:
    """A SUB on the routers' tails. Until :meth:`handover` a thread of its own owns the socket
    and buffers what arrives (while the lake is read and replayed); then the caller's thread
    reads it directly, so a reader slower than the traffic falls behind at the routers and is
    told so (SEQ), as ``fleetwatch tail`` is, instead of growing a buffer."""

    def __init__(self, endpoints: list[str], topics: list[bytes], keys=None, ctx=None):
        self.sub = (ctx or zmq.Context.instance()).socket(zmq.SUB)
        self.sub.linger = 0
        if keys is not None:
            keys.apply(self.sub)
        for topic in topics:
            self.sub.setsockopt(zmq.SUBSCRIBE, topic)
        for endpoint in endpoints:
            self.sub.connect(endpoint)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.bad = 0
        self.started = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tail", daemon=True)

    def start(self, clock=time.monotonic) -> "LiveTail":
        self.started = clock()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if self.sub.poll(100):
                self._receive(self.queue.put)

    def _receive(self, put) -> None:
        try:
            put(protocol.decode_tail(self.sub.recv_multipart()))
        except ProtocolError:
            self.bad += 1

    def handover(self) -> None:
        """Stop buffering: the caller's thread owns the socket from now on."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def buffered(self) -> list[Relayed]:
        """What the thread buffered and nobody took yet."""
        out = []
        while True:
            try:
                out.append(self.queue.get_nowait())
            except queue.Empty:
                return out

    def get(self, timeout: float) -> Relayed | None:
        """The next message (after :meth:`handover`), waiting ``timeout`` seconds at most."""
        got: list[Relayed] = self.buffered()[:1]
        if not got and self.sub.poll(max(0.0, timeout) * 1000):
            self._receive(got.append)
        return got[0] if got else None

    def close(self) -> None:
        self.handover()
        self.sub.close(0)
