"""The devices' asyncio loop, in a thread of its own beside the agent's zmq loop.

SNMP (pysnmp 7) is asyncio only, and the agent's loop is one ``zmq.Poller``: the polls and
the trap receiver run on this loop, and what they give (readings, traps) comes back to the
agent's thread, which alone sends to the routers (SPEC.md 4.5's rule for plugin runs, kept
here too). So:

- the agent's thread starts work on the loop with :meth:`DevicesLoop.submit` (a coroutine;
  its :class:`concurrent.futures.Future` back) or waits for it with :meth:`DevicesLoop.run`;
- a coroutine on the loop hands a result over with :meth:`DevicesLoop.post`, which queues it
  and writes a byte on :attr:`DevicesLoop.wake`, a socket the agent's poller watches (as
  :class:`agent.execute.Workers` does for plugin runs), and the agent's thread takes what
  came with :meth:`DevicesLoop.taken`;
- :meth:`DevicesLoop.close` runs the given cleanups on the loop (the receiver's and the
  poller's ``close``), cancels what is left, stops the loop and joins its thread.

An exception a task let out is logged with its traceback and counted (``loop_crashed``):
the loop goes on, as a daemon does with its input.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import socket
import threading
from collections import Counter

log = logging.getLogger(__name__)

#: seconds :meth:`DevicesLoop.close` waits for the cleanups, then for the thread
CLOSE_TIMEOUT = 10.0


class DevicesLoop:
    """An asyncio event loop running in the thread ``devices-loop``."""

    def __init__(self):
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(self._unhandled)
        self.counts: Counter = Counter({"loop_crashed": 0})
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self.wake, self._wake_w = socket.socketpair()
        self.wake.setblocking(False)
        self._wake_w.setblocking(False)
        self.thread = threading.Thread(target=self._run, name="devices-loop", daemon=True)
        self.closed = False

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def _unhandled(self, loop, context) -> None:
        self.counts["loop_crashed"] += 1
        error = context.get("exception")
        log.error("devices loop: %s", context.get("message", "unhandled error"),
                  exc_info=(type(error), error, error.__traceback__) if error else None)

    # ---------------------------------------------------------------- the agent's thread
    def submit(self, coro) -> concurrent.futures.Future:
        """Run ``coro`` on the loop; its future (RuntimeError once closed)."""
        if self.closed:
            coro.close()
            raise RuntimeError("the devices loop is closed")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro, timeout: float | None = None):
        """Run ``coro`` on the loop and wait for its result (or its exception) here."""
        return self.submit(coro).result(timeout)

    def taken(self) -> list:
        """What the loop posted since the last call, oldest first (the wake bytes read)."""
        try:
            while self.wake.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        out = []
        while True:
            try:
                out.append(self._done.get_nowait())
            except queue.Empty:
                return out

    # ---------------------------------------------------------------- the loop's side
    def post(self, item) -> None:
        """Hand ``item`` to the agent's thread (from the loop, or any thread)."""
        self._done.put(item)
        try:
            self._wake_w.send(b"x")
        except (BlockingIOError, InterruptedError):
            pass                    # the socket is full of wake bytes: the agent will wake

    # ---------------------------------------------------------------- the end
    def close(self, *cleanups) -> None:
        """Run each coroutine of ``cleanups`` on the loop (their errors logged), cancel every
        task left, stop the loop, join its thread and close the loop and the wake sockets.
        Safe to call twice, and before :meth:`start`."""
        if self.closed:
            return
        self.closed = True
        if self.thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._finish(cleanups), self.loop) \
                    .result(CLOSE_TIMEOUT)
            except (concurrent.futures.TimeoutError, RuntimeError) as e:
                log.warning("devices loop: cleanups not finished in %.0fs (%s)",
                            CLOSE_TIMEOUT, type(e).__name__)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(CLOSE_TIMEOUT)
        else:
            for coro in cleanups:
                coro.close()
        if not self.thread.is_alive():
            self.loop.close()
        self.wake.close()
        self._wake_w.close()

    async def _finish(self, cleanups) -> None:
        for coro in cleanups:
            try:
                await coro
            except Exception:           # a cleanup's failure stops no other
                log.exception("devices loop: a cleanup failed")
        me = asyncio.current_task()
        left = [t for t in asyncio.all_tasks() if t is not me]
        for task in left:
            task.cancel()
        await asyncio.gather(*left, return_exceptions=True)
