"""The service manager's end of ``NOTIFY_SOCKET`` (sd_notify), for tests of processes that
report READY, RELOADING, STOPPING and WATCHDOG pings."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import threading
import time

from support.fleet import wait_for


class Listener:
    """The service manager's end: a bound datagram socket and a thread recording each
    datagram with its arrival time and what ``probe()`` said at that moment."""

    def __init__(self, address: str, probe=lambda: None):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.1)
        self.probe = probe
        self.got: list[tuple[float, dict, object]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except socket.timeout:
                continue
            fields = dict(line.split("=", 1) for line in data.decode().splitlines())
            try:
                seen = self.probe()
            except Exception as e:  # recorded for the test to see; the thread goes on
                seen = e
            self.got.append((time.monotonic(), fields, seen))

    def first(self, key: str, timeout: float = 15.0):
        def find():
            return next((g for g in list(self.got) if key in g[1]), None)
        return wait_for(find, timeout, what=f"{key} on the notify socket")

    def times(self, key: str) -> list[float]:
        return [t for t, fields, _ in list(self.got) if key in fields]

    def close(self):
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


class NotifySocket:
    """A :class:`Listener` standing in for systemd at ``path``, in a short directory of its
    own (AF_UNIX paths are limited to 108 bytes), removed by :meth:`close`."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="fwsd", dir="/tmp")
        self.path = os.path.join(self.dir, "notify.sock")
        self.listener = Listener(self.path)

    def close(self):
        self.listener.close()
        shutil.rmtree(self.dir, ignore_errors=True)
