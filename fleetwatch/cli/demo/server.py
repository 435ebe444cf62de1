"""A server the demo or a test runs as a child process (carbon-cache, graphite-web): started
in a session of its own with its output in one file, waited for until it serves, stopped with
SIGTERM and, past a timeout, SIGKILL to its whole process group."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path


class LocalServer:
    """Subclasses give ``name``, ``error`` (the exception raised), ``log_path``,
    :meth:`command`, :meth:`ready` and :attr:`waiting` (what is not yet true)."""

    name = "server"
    error: type[Exception] = RuntimeError
    proc: subprocess.Popen | None = None
    log_path: Path

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready(self) -> bool:
        raise NotImplementedError

    @property
    def waiting(self) -> str:
        return "not ready"

    def launch(self, timeout: float, poll: float = 0.05):
        """Start :meth:`command`; return self once :meth:`ready`, else raise ``error`` with
        the end of its output (it exited, or ``timeout`` passed: then it is stopped)."""
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while not self.ready():
            if not self.alive():
                raise self.error(f"{self.name} exited with {self.proc.returncode}:\n"
                                 f"{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise self.error(f"{self.name} {self.waiting} after {timeout}s:\n"
                                 f"{self.output()[-3000:]}")
            time.sleep(poll)
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL to the process group after ``timeout``."""
        if not self.alive():
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)

    def output(self) -> str:
        """What the server printed."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""
