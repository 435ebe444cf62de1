"""Signals for the agent's loop: SIGTERM and SIGINT stop it, SIGHUP asks for a reload.

The handlers only set flags; ``signal.set_wakeup_fd`` writes to a socket pair the poller
watches, so a signal wakes the loop at once instead of at its next timer. Outside the main
thread (tests running the loop in a thread) nothing is installed.
"""

from __future__ import annotations

import signal
import socket
import threading

import zmq


class Wakeup:
    """The socket pair signals wake the poller through, and the handlers behind it."""

    def __init__(self):
        self._r = self._w = None

    def install(self, poller: zmq.Poller, stop, reload=None) -> None:
        """``stop`` on SIGTERM and SIGINT, ``reload`` (if any) on SIGHUP."""
        if threading.current_thread() is not threading.main_thread():
            return
        self._r, self._w = socket.socketpair()
        self._r.setblocking(False)
        self._w.setblocking(False)
        signal.set_wakeup_fd(self._w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, stop)
        if reload is not None:
            signal.signal(signal.SIGHUP, reload)
        poller.register(self._r, zmq.POLLIN)

    def drain(self, events: dict) -> None:
        """Empty the socket pair if the poll reported it (the handlers did the rest)."""
        if self._r is not None and self._r.fileno() in events:
            try:
                self._r.recv(64)
            except BlockingIOError:
                pass  # nothing left to read: the flag is what matters

    def close(self) -> None:
        if self._r is not None:
            signal.set_wakeup_fd(-1)
            self._r.close()
            self._w.close()
