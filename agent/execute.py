"""Run one plugin process, and the worker threads that run plugins for the agent's loop.

:func:`execute` is the only code that starts a plugin: an argument list (never a shell), the
resolved executable, stdin from /dev/null, a new session (so a new process group), stdout
and stderr read as they come and capped (what is past ``output_limit`` is read and thrown
away, so a chatty plugin never blocks on a full pipe). On timeout the whole group gets
SIGTERM, then SIGKILL after ``grace``: children the plugin forked die with it. When the
plugin exits on its own, whatever it left running in its group is killed too. The group is
signalled before the plugin's own process is reaped, so its id cannot have been reused.

:class:`Workers` runs jobs in threads, so the agent's socket loop never waits for a plugin;
a finished job goes back to the loop thread through a queue, with one byte on a socket pair
that the loop polls to wake up. Only the loop thread touches zmq sockets.
"""

from __future__ import annotations

import logging
import os
import queue
import selectors
import signal
import socket
import subprocess
import threading
import time
from dataclasses import dataclass

log = logging.getLogger(__name__)

CHUNK = 65536
#: Longest select() wait: how soon a stop request or the plugin's exit is noticed.
SLICE = 0.1
#: After the plugin exits, how long children holding its pipes may keep writing.
EXIT_DRAIN = 0.2


@dataclass(frozen=True)
class Launch:
    """What to start: ``path`` is the resolved executable, ``argv0`` the name it is given."""

    path: str
    argv0: str
    args: tuple[str, ...]
    timeout: float
    output_limit: int = 65536
    grace: float = 1.0


@dataclass(frozen=True)
class Finished:
    """How a plugin process ended. ``returncode`` is None when it could not be started
    (``error`` says why); negative when a signal ended it."""

    returncode: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    timed_out: bool = False
    stopped: bool = False
    error: str | None = None
    started: float = 0.0
    duration: float = 0.0


class _Capture:
    """The first ``limit`` bytes of a stream, and a count of the bytes thrown away."""

    def __init__(self, limit: int):
        self.data = bytearray()
        self.limit = limit
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))


def _exited(pid: int) -> bool:
    """Whether ``pid`` has exited, without reaping it (so its group id stays ours)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _pidfd(pid: int) -> int | None:
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def execute(launch: Launch, stop: threading.Event | None = None, clock=time.monotonic,
            wall=time.time) -> Finished:
    """Run ``launch`` to its end (or its timeout) and return what happened."""
    started, t0 = wall(), clock()
    try:
        proc = subprocess.Popen([launch.argv0, *launch.args], executable=launch.path,
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, start_new_session=True, close_fds=True)
    except (OSError, ValueError, subprocess.SubprocessError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        return Finished(None, error=reason, started=started, duration=clock() - t0)
    captures = {proc.stdout.fileno(): _Capture(launch.output_limit),
                proc.stderr.fileno(): _Capture(launch.output_limit)}
    out, err = captures[proc.stdout.fileno()], captures[proc.stderr.fileno()]
    sel = selectors.DefaultSelector()
    pidfd = _pidfd(proc.pid)
    timed_out = stopped = exited = draining = False
    try:
        for fd in captures:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        if pidfd is not None:
            sel.register(pidfd, selectors.EVENT_READ)
        deadline = t0 + launch.timeout
        open_pipes = set(captures)
        while open_pipes or not exited:
            now = clock()
            if stop is not None and stop.is_set():
                stopped = True
                break
            if now >= deadline:
                timed_out = not exited
                break
            for key, _ in sel.select(min(deadline - now, SLICE)):
                if key.fd == pidfd:
                    exited = True
                    sel.unregister(pidfd)
                    continue
                try:
                    chunk = os.read(key.fd, CHUNK)
                except BlockingIOError:
                    continue
                if chunk:
                    captures[key.fd].add(chunk)
                else:
                    sel.unregister(key.fd)
                    open_pipes.discard(key.fd)
            if not exited and (pidfd is None or not open_pipes) and _exited(proc.pid):
                exited = True
            if exited and open_pipes and not draining:  # children hold the pipes
                draining = True
                deadline = min(deadline, clock() + EXIT_DRAIN)
        if timed_out or stopped:
            _killpg(proc.pid, signal.SIGTERM)
            end = clock() + launch.grace
            while clock() < end and not _exited(proc.pid):
                time.sleep(0.01)
        _killpg(proc.pid, signal.SIGKILL)
        try:
            proc.wait(timeout=5.0)
        except subprocess.TimeoutExpired:   # stuck in the kernel: reaped later by Popen
            log.error("plugin %s (pid %d) does not die", launch.argv0, proc.pid)
    finally:
        sel.close()
        if pidfd is not None:
            os.close(pidfd)
        proc.stdout.close()
        proc.stderr.close()
    return Finished(proc.returncode, bytes(out.data), bytes(err.data), out.dropped,
                    err.dropped, timed_out=timed_out, stopped=stopped, started=started,
                    duration=clock() - t0)


class Workers:
    """``count`` threads calling ``work(job, stop_event)``; results come back through
    :meth:`finished`, with a byte on :attr:`wake` (a socket to poll) for each."""

    def __init__(self, count: int, work):
        self.count, self.work = count, work
        self.jobs: queue.Queue = queue.Queue()
        self.done: queue.Queue = queue.Queue()
        self.stop_event = threading.Event()
        self.wake, self._wake_w = socket.socketpair()
        self.wake.setblocking(False)
        self._wake_w.setblocking(False)
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        for i in range(self.count):
            t = threading.Thread(target=self._loop, name=f"plugin-worker-{i}", daemon=True)
            t.start()
            self.threads.append(t)

    def resize(self, count: int) -> None:
        """Run ``count`` threads from now on (a config reload): more are started at once;
        fewer, and as many threads end as soon as they are idle (a ``None`` job each)."""
        if self.threads:
            for i in range(len(self.threads), len(self.threads) + count - self.count):
                t = threading.Thread(target=self._loop, name=f"plugin-worker-{i}", daemon=True)
                t.start()
                self.threads.append(t)
            for _ in range(self.count - count):
                self.jobs.put(None)
        self.count = count

    def submit(self, job) -> None:
        self.jobs.put(job)

    def _loop(self) -> None:
        while True:
            job = self.jobs.get()
            if job is None:
                return
            try:
                result = self.work(job, self.stop_event)
            except Exception as e:  # a bug here must not lose the job or kill the thread
                log.exception("plugin worker failed on %r", job)
                result = e
            self.done.put((job, result))
            try:
                self._wake_w.send(b"x")
            except (BlockingIOError, OSError):
                pass  # the loop is behind on reading: it will drain everything anyway

    def finished(self) -> list:
        """Every (job, result) ready now; clears the wake-up socket first."""
        try:
            while self.wake.recv(4096):
                pass
        except (BlockingIOError, OSError):
            pass
        out = []
        while True:
            try:
                out.append(self.done.get_nowait())
            except queue.Empty:
                return out

    def close(self, timeout: float = 5.0) -> None:
        """Stop: running plugins are killed (their groups), waiting jobs are dropped."""
        self.stop_event.set()
        try:
            while True:
                self.jobs.get_nowait()
        except queue.Empty:
            pass
        for _ in self.threads:
            self.jobs.put(None)
        end = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, end - time.monotonic()))
        self.wake.close()
        self._wake_w.close()
