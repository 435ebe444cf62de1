"""Getting plaintext lines to carbon without losing them: a bounded buffer and a sender thread.

graphyte builds the lines (:mod:`sinks.graphite.sink`); this module owns what graphyte does not do
safely. graphyte's queue drops silently when full, and its sending closes the socket right
after ``sendall``, so a carbon that stops mid-stream loses the batch without anyone knowing.
Here:

- :class:`LineBuffer` is a bounded FIFO (``capacity`` lines, queued and in flight together)
  shared by the sink's PULL loop, which only appends (never blocks, never waits for carbon),
  and the sender. When full, the oldest queued lines are dropped and counted.
- :class:`CarbonSender` is the one thread that talks to carbon. It takes up to ``batch``
  lines (waiting at most ``flush_interval`` to fill a batch), opens a TCP connection, sends
  them, half-closes and waits for carbon to close in turn: carbon's line receiver closes only
  after reading up to our FIN, so that close confirms every line was read. Only then are the
  lines released. A failure (refused, reset, timeout) keeps the batch in hand and retries it
  after a backoff doubling from ``backoff_min`` to ``backoff_max``; nothing is lost while it
  fits in the buffer. A batch whose confirmation timed out is sent again: carbon may then
  have it twice, which whisper stores once (same metric and second: same value).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque

from fleetwatch.logs import Throttle

log = logging.getLogger(__name__)


class LineBuffer:
    """Encoded lines waiting for the sender; thread-safe; oldest dropped when full."""

    def __init__(self, capacity: int, batch: int):
        self.capacity, self.batch = capacity, min(batch, capacity)
        self.lines: deque[bytes] = deque()
        self.inflight = 0
        self.dropped = 0
        self.cond = threading.Condition()
        self.closed = False

    def __len__(self) -> int:
        with self.cond:
            return len(self.lines) + self.inflight

    def put(self, lines: list[bytes]) -> int:
        """Queue ``lines``; return how many (oldest) lines were dropped to make room."""
        if not lines:
            return 0
        with self.cond:
            self.lines.extend(lines)
            over = min(len(self.lines) + self.inflight - self.capacity, len(self.lines))
            for _ in range(max(0, over)):
                self.lines.popleft()
            dropped = max(0, over)
            self.dropped += dropped
            if len(self.lines) >= self.batch:
                self.cond.notify()
            return dropped

    def take(self, wait: float) -> list[bytes]:
        """Up to ``batch`` lines, after waiting at most ``wait`` s for a full batch; they stay
        counted (in flight) until :meth:`done`."""
        deadline = time.monotonic() + wait
        with self.cond:
            while len(self.lines) < self.batch and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            n = min(self.batch, len(self.lines))
            chunk = [self.lines.popleft() for _ in range(n)]
            self.inflight += n
            return chunk

    def done(self, n: int) -> None:
        """``n`` lines taken are delivered (or given up): they no longer count."""
        with self.cond:
            self.inflight -= n

    def close(self) -> None:
        """Wake the sender now: it flushes what is left, then ends."""
        with self.cond:
            self.closed = True
            self.cond.notify_all()


def deliver(data: bytes, host: str, port: int, timeout: float) -> None:
    """Send ``data`` on a fresh connection and return once carbon has read all of it.

    Raises OSError (refused, reset, timed out) when that cannot be confirmed.
    """
    with socket.create_connection((host, port), timeout) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        # carbon never writes on the line port: the first empty read is its close
        while sock.recv(4096):
            pass


class CarbonSender:
    """The thread that owns the connection to carbon (see the module docstring)."""

    def __init__(self, buffer: LineBuffer, host: str, port: int, flush_interval: float = 1.0,
                 timeout: float = 10.0, backoff_min: float = 0.5, backoff_max: float = 30.0,
                 deliver=deliver, tick=None, tick_interval: float = 10.0,
                 clock=time.monotonic):
        self.buffer, self.host, self.port = buffer, host, port
        self.flush_interval, self.timeout = flush_interval, timeout
        self.backoff_min, self.backoff_max = backoff_min, backoff_max
        self.deliver, self.clock = deliver, clock
        self.tick, self.tick_interval = tick, tick_interval
        self.lock = threading.Lock()
        self.sent = self.failures = self.batches = self.given_up = 0
        self.down_since: float | None = None
        self.throttle = Throttle(log, 30.0)
        self.stopping = threading.Event()
        self.deadline = float("inf")
        self.thread = threading.Thread(target=self.run, name="carbon-sender", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def stop(self, flush_for: float) -> int:
        """Flush for at most ``flush_for`` seconds, end the thread; return lines given up."""
        self.deadline = self.clock() + flush_for
        self.stopping.set()
        self.buffer.close()
        self.thread.join(flush_for + self.timeout + 1.0)
        left = len(self.buffer)
        with self.lock:
            self.given_up += left
        return left

    def snapshot(self) -> dict:
        with self.lock:
            return {"sent": self.sent, "send_failures": self.failures,
                    "batches": self.batches, "dropped_at_exit": self.given_up}

    # ---------------------------------------------------------------- thread
    def run(self) -> None:
        chunk: list[bytes] = []
        delay = self.backoff_min
        next_tick = self.clock() + self.tick_interval
        while True:
            now = self.clock()
            if self.tick is not None and now >= next_tick and not self.stopping.is_set():
                next_tick = now + self.tick_interval
                self._tick()
            if not chunk:
                if self.stopping.is_set() and not len(self.buffer):
                    return
                chunk = self.buffer.take(min(self.flush_interval, max(0.0, next_tick - now)))
                if not chunk:
                    continue
            try:
                self.deliver(b"".join(chunk), self.host, self.port, self.timeout)
            except Exception as e:  # OSError: carbon down or gone; anything else is a bug
                if not isinstance(e, OSError):
                    log.exception("unexpected error sending to carbon; retrying")
                with self.lock:
                    self.failures += 1
                if self.down_since is None:
                    self.down_since = self.clock()
                self.throttle.warning("down", "carbon %s:%d: %s; %d datapoints buffered, "
                                      "retrying in %.1fs", self.host, self.port, e,
                                      len(self.buffer), delay)
                if self.clock() + delay > self.deadline:
                    return  # stopping, and carbon is not back in time: stop() counts the rest
                if self.stopping.is_set():
                    time.sleep(delay)  # flushing at stop: keep trying until the deadline
                else:
                    self.stopping.wait(delay)  # a stop request cuts the wait short
                delay = min(delay * 2, self.backoff_max)
                continue
            self.buffer.done(len(chunk))
            with self.lock:
                self.sent += len(chunk)
                self.batches += 1
            if self.down_since is not None:
                log.info("carbon %s:%d is back after %.1fs; %d datapoints still buffered",
                         self.host, self.port, self.clock() - self.down_since, len(self.buffer))
                self.down_since = None
            chunk, delay = [], self.backoff_min
            if self.stopping.is_set() and self.clock() > self.deadline:
                return

    def _tick(self) -> None:
        try:
            self.tick()
        except Exception:  # the sink's own counters must never stop the sending
            log.exception("reporting the sink's own counters failed")
