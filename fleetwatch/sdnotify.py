"""systemd's notify protocol (sd_notify(3)) and its watchdog, in the standard library.

Under ``Type=notify`` systemd passes the path of a datagram socket in ``NOTIFY_SOCKET``
(``@name`` for the abstract namespace) and, with ``WatchdogSec=``, the watchdog period in
``WATCHDOG_USEC``. A process sends newline-separated ``KEY=VALUE`` assignments to it:
``READY=1`` once its sockets are bound, ``STOPPING=1`` when it begins to shut down,
``WATCHDOG=1`` at least once per period, ``STATUS=...`` for ``systemctl status``, and
``RELOADING=1`` then ``READY=1`` around a config reload (SIGHUP, :mod:`fleetwatch.reload`).

The watchdog is pinged by :meth:`Notifier.tick`, which each daemon calls from its main loop
(never from a thread of its own): a loop that hangs stops pinging, and systemd kills and
restarts the service. :meth:`Notifier.watchdog_timeout` tells the loop how long it may sleep.

Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op. A failed send is counted and
logged (throttled), never raised: notification must not kill the daemon it reports on.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time

from fleetwatch.logs import Throttle

log = logging.getLogger(__name__)

#: what systemd passes to the service (and what children must not inherit)
ENV = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")
#: a send blocks at most this long (a datagram socket whose queue is full)
SEND_TIMEOUT = 1.0


def address(value: str | None):
    """The socket address of a ``NOTIFY_SOCKET`` value, or None if it is not usable.

    ``@name`` is ``name`` in Linux's abstract namespace (a leading NUL byte); otherwise the
    value must be an absolute path (sd_notify ignores anything else, and so do we)."""
    if not value:
        return None
    if value.startswith("@"):
        return "\0" + value[1:]
    if value.startswith("/"):
        return value
    return None


def watchdog_period(environ, pid: int | None = None) -> float | None:
    """The watchdog period in seconds from ``WATCHDOG_USEC``, or None when there is none or it
    is meant for another process (``WATCHDOG_PID``, as sd_watchdog_enabled(3) checks)."""
    owner = environ.get("WATCHDOG_PID")
    if owner:
        try:
            if int(owner) != (os.getpid() if pid is None else pid):
                return None
        except ValueError:
            return None
    try:
        usec = int(environ.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 1e6 if usec > 0 else None


class Notifier:
    """One process's channel to systemd: readiness, stopping, status and the watchdog."""

    def __init__(self, notify_socket: str | None = None, watchdog: float | None = None,
                 clock=time.monotonic):
        self.address = address(notify_socket)
        #: seconds between pings: half the watchdog period, as sd_watchdog_enabled(3) advises
        self.interval = watchdog / 2 if watchdog and self.address else None
        self.clock = clock
        self.next_ping = clock() if self.interval else math.inf
        self.sent = self.errors = 0
        self.throttle = Throttle(log, 60.0, clock)
        self._sock: socket.socket | None = None

    @classmethod
    def from_env(cls, environ=None, unset: bool = True, clock=time.monotonic) -> "Notifier":
        """A notifier from systemd's variables, removed from ``environ`` (``os.environ`` by
        default) unless ``unset`` is false, so that plugins and other children do not
        inherit them (sd_notify's ``unset_environment``)."""
        environ = os.environ if environ is None else environ
        notifier = cls(environ.get("NOTIFY_SOCKET"), watchdog_period(environ), clock)
        if unset:
            for name in ENV:
                environ.pop(name, None)
        return notifier

    @property
    def enabled(self) -> bool:
        return self.address is not None

    # ---------------------------------------------------------------- messages
    def send(self, *assignments: str) -> bool:
        """Send ``KEY=VALUE`` lines in one datagram; False when not sent (counted, logged)."""
        if self.address is None:
            return False
        data = "\n".join(assignments).encode("utf-8", "replace")
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sock.settimeout(SEND_TIMEOUT)
            self._sock.sendto(data, self.address)
        except OSError as e:
            self.errors += 1
            self.throttle.warning("send", "cannot notify systemd at %s: %s",
                                  self.address.replace("\0", "@"), e)
            return False
        self.sent += 1
        return True

    def ready(self, status: str = "") -> bool:
        """The process is up: its sockets are bound (``systemctl start`` returns now)."""
        return self.send("READY=1", *([f"STATUS={_line(status)}"] if status else []))

    def stopping(self, status: str = "") -> bool:
        """The process has begun to shut down (sent on SIGTERM, before draining)."""
        return self.send("STOPPING=1", *([f"STATUS={_line(status)}"] if status else []))

    def reloading(self) -> bool:
        """A config reload begins; :meth:`ready` says it ended. ``MONOTONIC_USEC`` is what
        ``Type=notify-reload`` requires, and harmless under ``Type=notify``."""
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        return self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def status(self, text: str) -> bool:
        return self.send(f"STATUS={_line(text)}")

    # ---------------------------------------------------------------- watchdog
    def watchdog_timeout(self) -> float:
        """Seconds the main loop may sleep before it must call :meth:`tick` (inf: no watchdog)."""
        return max(0.0, self.next_ping - self.clock())

    def tick(self) -> None:
        """Ping the watchdog if a ping is due; call this once per main-loop iteration."""
        if self.interval is None:
            return
        now = self.clock()
        if now >= self.next_ping:
            self.send("WATCHDOG=1")
            self.next_ping = now + self.interval

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _line(text: str) -> str:
    return " ".join(str(text).split())[:200]
