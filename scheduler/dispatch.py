"""The sender: one thread owns the control DEALERs (one per router) and sends every RUN.

APScheduler's jobs run in other threads and only call :meth:`Dispatcher.submit`, which puts
the :class:`scheduler.jobs.Run` on a queue and, if the sender is waiting in its poll, writes a
byte to a pipe it polls with its sockets (ZeroMQ sockets are not thread-safe: nothing else
touches them; a busy sender takes the queue without the pipe's system calls). The sender holds
each run until its ``due`` time (the jitter), drops it if it is already past ``expires`` (a
sender that fell a whole interval behind: ``stale``), and sends one RUN message, the same
frames, to every router's control socket with ``NOBLOCK`` (``IMMEDIATE`` is set, so a router
that is not connected costs ``unsent`` instead of a queue of stale RUNs for later).

The DEALERs are :class:`fleetwatch.link.Links`, as the sinks': HELLO (``role: scheduler``)
to each router until WELCOME, a new socket after a refused handshake (a scheduler started
before its key was allowed connects once it is). A router the agent is not attached to
answers ``ERROR 404``: that is normal with several routers (an agent attached to one of
them) and is only counted (``not_found``), never logged per message. Counters, with
``extra()``'s (the plan's), are logged every ``stats_interval`` and sent as the scheduler's
STATS (``source: scheduler``, names ``scheduler.NAME``) through one router, as the sinks'
(:meth:`fleetwatch.link.Links.report`, SPEC 4.3): at the first WELCOME, then as often.
"""

from __future__ import annotations

import heapq
import logging
import os
import queue
import threading
import time
from collections import Counter

import zmq

from fleetwatch import protocol
from fleetwatch.link import Link, Links
from fleetwatch.logs import Throttle
from scheduler.jobs import Run

log = logging.getLogger(__name__)

#: longest poll, so that a stop request is seen promptly
MAX_WAIT = 0.25
#: seconds between two of the sender's wake-ups for due RUNs at most: at hundreds of RUNs a
#: second, each wake-up sends those due since the last one (a RUN goes out at most this late,
#: far within its jitter) instead of one wake-up, with its poll and thread switch, per RUN
SEND_EVERY = 0.02
#: RUNs queued per router connection before sends count as ``unsent``
SNDHWM = 100_000


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
        self.links = Links(self.ctx, self.endpoints, sender_id, "scheduler", keys, self.counts,
                           sndhwm=SNDHWM, clock=clock, throttle=self.throttle)
        self._queue: queue.SimpleQueue[Run] = queue.SimpleQueue()
        self._pending: list[tuple[float, int, Run]] = []
        self._seq = 0
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._stopping = False
        self._polling = False
        #: when the sender's current poll ends (``clock`` time): a run due later needs no wake
        self._wake_at = 0.0
        self._last_send = 0.0
        self._thread: threading.Thread | None = None
        #: ``time.monotonic()`` at the sender loop's latest turn: the service pings the
        #: systemd watchdog only while this is recent (a hung sender stops the pings)
        self.beat = time.monotonic()

    # ---------------------------------------------------------------- any thread
    def submit(self, run: Run) -> None:
        self._queue.put(run)
        # read after the put; the sender sets both before it looks at the queue (run()). A
        # run due after the sender's poll ends anyway is taken then: no wake-up for it
        if self._polling and run.due < self._wake_at:
            self._wake()

    def _wake(self) -> None:
        try:
            os.write(self._wfd, b"!")
        except BlockingIOError:    # the pipe is full: the sender is awake already
            pass

    def start(self) -> None:
        """Connect (a bad endpoint raises ``zmq.ZMQError`` here), then hand the sockets to
        the sender thread, their only user from then on."""
        self.links.open()
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
        self.links.register(poller)
        next_stats = time.monotonic() + self.stats_interval
        reported = False        # a first report as soon as a router WELCOMEs us
        try:
            while not self._stopping:
                self.beat = time.monotonic()
                now = self.clock()
                self._take()        # runs submitted while it was busy: their due times count
                wake = min(self.links.hellos(now, self.hello_interval), now + MAX_WAIT)
                if self._pending:
                    wake = min(wake, max(self._pending[0][0], self._last_send + SEND_EVERY))
                self._wake_at = wake
                self._polling = True
                if not self._queue.empty():
                    wake = now
                events = dict(poller.poll(max(0.0, wake - now) * 1000))
                self._polling = False
                if self._rfd in events:
                    self._drain_wakeups()
                self._take()
                self._send_due(self.clock())
                for link, msg in self.links.receive(events):
                    if msg.type == "ERROR":
                        self._error(link, msg)
                due = time.monotonic() >= next_stats
                if due or (not reported and self.links.welcomed()):
                    if due:
                        log.info("counters: %s", self.report())
                    reported = bool(self.links.welcomed())
                    self.links.report({f"scheduler.{k}": v for k, v in self.merged().items()})
                    next_stats = time.monotonic() + self.stats_interval
        except Exception:   # a bug: logged here; the service sees the thread gone and exits
            log.exception("the sender thread failed")
        finally:
            log.info("sender stopping; counters: %s", self.report())
            self.links.close(0)

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
        if pending and pending[0][0] <= now:
            self._last_send = now
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
            if link.send(frames):
                self.counts["sent"] += 1
            else:
                self.counts["unsent"] += 1
                self.throttle.warning(f"unsent {link.endpoint}",
                                      "router %s not connected: RUNs to it are dropped",
                                      link.label)

    def _error(self, link: Link, msg: protocol.Message) -> None:
        status = msg.get("status")
        self.counts["not_found" if status == protocol.NOT_FOUND else f"error_{status}"] += 1
        if status != protocol.NOT_FOUND:
            self.throttle.warning(f"error_{status}", "router %s answered ERROR %s %s",
                                  link.label, status, msg.get("reason"))

    def merged(self) -> Counter:
        """The sender's counters and ``extra()``'s (the plan's)."""
        merged = Counter(self.counts)
        merged.update(self.extra())
        return merged

    def report(self) -> str:
        return " ".join(f"{k}={v}" for k, v in sorted(self.merged().items()) if v) \
            or "nothing yet"
