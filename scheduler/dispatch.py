"""The sender: one thread owns the control DEALERs (one per router) and sends every RUN.

APScheduler's jobs run in other threads and only call :meth:`Dispatcher.submit`, which puts
the :class:`scheduler.jobs.Run` on a queue and, if the sender is waiting in its poll, writes a
byte to a pipe it polls with its sockets (ZeroMQ sockets are not thread-safe: nothing else
touches them; a busy sender takes the queue without the pipe's system calls). The sender holds
each run until its ``due`` time (the jitter), drops it if it is already past ``expires`` (a
sender that fell a whole interval behind: ``stale``), and sends one RUN message, the same
frames, to every router's control socket with ``NOBLOCK`` (``IMMEDIATE`` is set, so a router
that is not connected costs ``unsent`` instead of a queue of stale RUNs for later).

Like the sinks, it sends HELLO (``role: scheduler``) to each router until WELCOME. A router
the agent is not attached to answers ``ERROR 404``: that is normal with several routers
(an agent attached to one of them) and is only counted (``not_found``), never logged per
message. Counters are logged every ``stats_interval``, with ``extra()``'s (the plan's).
"""

from __future__ import annotations

import heapq
import logging
import os
import queue
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass

import zmq

from fleetwatch import __version__, protocol
from fleetwatch.ask import replies
from fleetwatch.logs import Throttle
from fleetwatch.protocol import ProtocolError
from scheduler.jobs import Run

log = logging.getLogger(__name__)

#: longest poll, so that a stop request is seen promptly
MAX_WAIT = 0.25
#: RUNs queued per router connection before sends count as ``unsent``
SNDHWM = 100_000


@dataclass
class Link:
    endpoint: str
    socket: zmq.Socket
    router_id: str | None = None
    next_hello: float = 0.0


class Dispatcher:
    """Start with :meth:`start`; :meth:`submit` from any thread; :meth:`stop` to end."""

    def __init__(self, endpoints: list[str], sender_id: str, keys=None,
                 ctx: zmq.Context | None = None, clock=time.time, hello_interval: float = 1.0,
                 stats_interval: float = 60.0, extra=None):
        self.endpoints, self.sender_id, self.keys = list(endpoints), sender_id, keys
        self.ctx = ctx or zmq.Context.instance()
        self.clock = clock
        self.hello_interval, self.stats_interval = hello_interval, stats_interval
        self.extra = extra or (lambda: {})
        self.counts: Counter = Counter()
        self.throttle = Throttle(log)
        self.links: list[Link] = []
        self._queue: queue.SimpleQueue[Run] = queue.SimpleQueue()
        self._pending: list[tuple[float, int, Run]] = []
        self._seq = 0
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._stopping = False
        self._polling = False
        self._thread: threading.Thread | None = None
        self.hostname = socket.gethostname()
        #: ``time.monotonic()`` at the sender loop's latest turn: the service pings the
        #: systemd watchdog only while this is recent (a hung sender stops the pings)
        self.beat = time.monotonic()

    # ---------------------------------------------------------------- any thread
    def submit(self, run: Run) -> None:
        self._queue.put(run)
        if self._polling:   # read after the put; the sender sets it before looking (run())
            self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wfd, b"!")
        except BlockingIOError:    # the pipe is full: the sender is awake already
            pass

    def start(self) -> None:
        """Connect (a bad endpoint raises ``zmq.ZMQError`` here), then hand the sockets to
        the sender thread, their only user from then on."""
        self._open()
        self._thread = threading.Thread(target=self.run, name="dispatch", daemon=True)
        self._thread.start()

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def silent_for(self) -> float:
        """Seconds since the sender loop last turned (at most ``MAX_WAIT`` when healthy)."""
        return time.monotonic() - self.beat

    def stop(self, timeout: float = 5.0) -> None:
        self._stopping = True
        self._wake()
        if self._thread is not None:
            self._thread.join(timeout)
        for fd in (self._rfd, self._wfd):
            try:
                os.close(fd)
            except OSError:
                pass

    # ---------------------------------------------------------------- sender thread
    def run(self) -> None:
        """The sender thread's loop (:meth:`start` runs it)."""
        poller = zmq.Poller()
        poller.register(self._rfd, zmq.POLLIN)
        for link in self.links:
            poller.register(link.socket, zmq.POLLIN)
        next_stats = time.monotonic() + self.stats_interval
        try:
            while not self._stopping:
                self.beat = time.monotonic()
                now = self.clock()
                wake = min(self._hellos(now), now + MAX_WAIT)
                if self._pending:
                    wake = min(wake, self._pending[0][0])
                self._polling = True
                if not self._queue.empty():
                    wake = now
                events = dict(poller.poll(max(0.0, wake - now) * 1000))
                self._polling = False
                if self._rfd in events:
                    self._drain_wakeups()
                self._take()
                self._send_due(self.clock())
                for link in self.links:
                    if link.socket in events:
                        self._replies(link)
                if time.monotonic() >= next_stats:
                    log.info("counters: %s", self.report())
                    next_stats = time.monotonic() + self.stats_interval
        except Exception:   # a bug: logged here; the service sees the thread gone and exits
            log.exception("the sender thread failed")
        finally:
            log.info("sender stopping; counters: %s", self.report())
            for link in self.links:
                link.socket.close(0)
            self.links = []

    def _open(self) -> None:
        for endpoint in self.endpoints:
            sock = self.ctx.socket(zmq.DEALER)
            sock.linger = 0
            sock.sndhwm = SNDHWM
            if self.keys is not None:
                self.keys.apply(sock)
            sock.setsockopt(zmq.IMMEDIATE, 1)
            sock.connect(endpoint)
            self.links.append(Link(endpoint, sock))

    def _drain_wakeups(self) -> None:
        try:
            while os.read(self._rfd, 4096):
                pass
        except BlockingIOError:
            pass

    def _take(self) -> None:
        while True:
            try:
                run = self._queue.get_nowait()
            except queue.Empty:
                return
            self._seq += 1
            heapq.heappush(self._pending, (run.due, self._seq, run))

    def _send_due(self, now: float) -> None:
        pending = self._pending
        while pending and pending[0][0] <= now:
            run = heapq.heappop(pending)[2]
            if now > run.expires:
                self.counts["stale"] += 1
                continue
            self.send(run)

    def send(self, run: Run) -> None:
        msg = protocol.make("RUN", self.sender_id, self.clock, command_id=run.command_id,
                            plugin=run.plugin, timeout=run.timeout, slot=run.slot)
        frames = protocol.encode_control(msg, run.uuid)
        self.counts["runs"] += 1
        for link in self.links:
            try:
                link.socket.send_multipart(frames, zmq.NOBLOCK)
                self.counts["sent"] += 1
            except zmq.Again:
                self.counts["unsent"] += 1
                self.throttle.warning(f"unsent {link.endpoint}",
                                      "router %s not connected: RUNs to it are dropped",
                                      link.router_id or link.endpoint)

    def _hellos(self, now: float) -> float:
        due = float("inf")
        for link in self.links:
            if link.router_id is not None:
                continue
            if now >= link.next_hello:
                hello = protocol.make("HELLO", self.sender_id, self.clock,
                                      hostname=self.hostname, heartbeat=self.hello_interval,
                                      version=__version__, role="scheduler")
                try:
                    link.socket.send_multipart(protocol.encode_control(hello), zmq.NOBLOCK)
                except zmq.Again:
                    pass
                link.next_hello = now + self.hello_interval
            due = min(due, link.next_hello)
        return due

    def _replies(self, link: Link) -> None:
        def bad(e: ProtocolError) -> None:
            self.counts["reply_bad"] += 1
            self.throttle.warning("reply_bad", "bad reply from %s: %s", link.endpoint, e)
        for msg in replies(link.socket, bad):
            if msg.type == "ERROR":
                status = msg.get("status")
                self.counts["not_found" if status == protocol.NOT_FOUND
                            else f"error_{status}"] += 1
                if status != protocol.NOT_FOUND:
                    self.throttle.warning(f"error_{status}", "router %s answered ERROR %s %s",
                                          link.router_id or link.endpoint, status,
                                          msg.get("reason"))
            elif msg.type == "WELCOME":
                if link.router_id is None:
                    log.info("router %s at %s welcomed us", msg.get("router"), link.endpoint)
                link.router_id = msg.get("router") or link.endpoint
            else:
                self.counts["reply_unexpected"] += 1

    def report(self) -> str:
        merged = Counter(self.counts)
        merged.update(self.extra())
        return " ".join(f"{k}={v}" for k, v in sorted(merged.items()) if v) or "nothing yet"
