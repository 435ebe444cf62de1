"""A draft's backtest run by the console: ``fleetwatch rules backtest --json`` as a process,
one at a time per console (:class:`Backtests`, the application's ``app.state.backtests``).

:meth:`Backtests.start` writes the files the run reads (the draft's policy, the operator
config: mode 0600, in a directory of its own, removed when the run ends), starts the command
(an argument list, never a shell; stdin from /dev/null; a new session, so a process group
of its own) and returns at once; a thread of its own reads what it prints and waits for it:

- its stderr, line by line as it comes, the latest :data:`PROGRESS_LINES` kept (each cut to
  :data:`LINE_MAX` characters): the run's progress, shown by the page while it runs;
- its stdout whole (at most :data:`ANSWER_MAX` bytes: a run that says more is stopped),
  the JSON document, given to ``digest`` (the page's cut of it, :func:`fleetwatch.actions.
  rules.would_be`) when it exits 0;
- after ``timeout`` seconds (``rules.backtest_timeout``) its whole group gets SIGTERM, then
  SIGKILL :data:`GRACE` seconds later; what it left running in its group is killed when it
  exits; so is a run still going when the console exits (``atexit``).

A :class:`Job` says how it went: ``running``, ``done`` (its ``result``), ``failed`` (its
``error``: the command's last line on stderr, which is where ``fleetwatch`` says what went
wrong, and its exit status) or ``stopped`` (past its time). The latest :data:`KEPT` jobs are
kept, for their pages.
"""

from __future__ import annotations

import atexit
import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable

from fleetwatch import private

log = logging.getLogger(__name__)

#: lines of a run's stderr kept (its latest), and the characters of each
PROGRESS_LINES, LINE_MAX = 20, 300
#: the most a run may print on stdout (its JSON answer), in bytes
ANSWER_MAX = 64 * 1024 * 1024
#: seconds between SIGTERM and SIGKILL of a run past its time
GRACE = 5.0
#: finished jobs kept for their pages
KEPT = 8


class Busy(Exception):
    """A backtest is running already: one at a time per console (``job``: that one)."""

    def __init__(self, job: "Job"):
        super().__init__(f"a backtest is running already (of rule {job.rule}, started by "
                         f"{job.who}): one at a time; try again once it is over")
        self.job = job


@dataclass
class Job:
    """One run: what it tries (``rule``, the ``draft``'s fields, by ``who``), how it is
    going (``state``, ``progress``) and what it found (``result``) or why not (``error``)."""

    id: int
    rule: str
    who: str
    draft: dict
    started: float
    state: str = "running"
    progress: deque = field(default_factory=lambda: deque(maxlen=PROGRESS_LINES))
    result: dict | None = None
    error: str | None = None
    finished: float | None = None
    #: the page it was asked from returns to this host's graph
    host: str = ""

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def said(self) -> list[str]:
        """Its progress lines now (a copy: the run's thread appends meanwhile)."""
        return list(self.progress)


class Backtests:
    """The console's backtests: at most one running. ``command``: the ``fleetwatch``
    command as an argument list (default this Python's ``-m fleetwatch``; a test gives a
    fake one); ``timeout``: seconds a run may take."""

    def __init__(self, command: list[str] | None = None, timeout: float = 600.0,
                 clock: Callable[[], float] = time.time):
        self.command = list(command or [sys.executable, "-m", "fleetwatch"])
        self.timeout, self.clock = timeout, clock
        self._lock = threading.Lock()
        self._jobs: OrderedDict[int, Job] = OrderedDict()
        self._ids = itertools.count(1)
        self._process: subprocess.Popen | None = None
        atexit.register(self.close)

    def running(self) -> Job | None:
        with self._lock:
            return next((j for j in self._jobs.values() if j.running), None)

    def get(self, job_id: int) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def start(self, rule: str, who: str, draft: dict, files: dict[str, str],
              args: Callable[[dict[str, str]], list[str]],
              digest: Callable[[dict], dict], host: str = "") -> Job:
        """Run ``self.command + args(paths)`` (``paths``: each of ``files``' names -> where
        its text was written) in a thread; the :class:`Job`, running. Raises :class:`Busy`
        when one runs already, OSError when its files cannot be written."""
        with self._lock:
            busy = next((j for j in self._jobs.values() if j.running), None)
            if busy is not None:
                raise Busy(busy)
            job = Job(next(self._ids), rule, who, dict(draft), self.clock(), host=host)
            self._jobs[job.id] = job
            while len(self._jobs) > KEPT:
                oldest = next(iter(self._jobs))
                if self._jobs[oldest].running:
                    break
                del self._jobs[oldest]
        try:
            where = tempfile.mkdtemp(prefix="fleetwatch-backtest-")
            paths = {}
            for name, text in files.items():
                paths[name] = os.path.join(where, name)
                private.write(paths[name], text)
        except OSError as e:
            self._end(job, "failed", error=f"cannot write the backtest's files: {e}")
            raise
        thread = threading.Thread(target=self._run, args=(job, self.command + args(paths),
                                                          where, digest),
                                  name=f"backtest-{job.id}", daemon=True)
        thread.start()
        return job

    # ------------------------------------------------------------ the run
    def _run(self, job: Job, argv: list[str], where: str, digest) -> None:
        try:
            self._execute(job, argv, where, digest)
        except Exception as e:          # a job never stays running: the page says why
            log.exception("the backtest %s failed", job.id)
            self._end(job, "failed", error=f"{e.__class__.__name__}: {e}")
        finally:
            shutil.rmtree(where, ignore_errors=True)

    def _execute(self, job: Job, argv: list[str], where: str, digest) -> None:
        try:
            process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, cwd=where,
                                       start_new_session=True)
        except OSError as e:
            self._end(job, "failed", error=f"cannot run {argv[0]}: {e.strerror or e}")
            return
        self._process = process
        answer = bytearray()
        too_long = threading.Event()

        def stdout() -> None:
            while chunk := process.stdout.read(65536):
                if len(answer) + len(chunk) > ANSWER_MAX:
                    too_long.set()
                    _kill(process, signal.SIGKILL)
                    continue
                answer.extend(chunk)

        def stderr() -> None:
            for raw in process.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                if line.strip():
                    with self._lock:
                        job.progress.append(line[:LINE_MAX])
        readers = [threading.Thread(target=fn, daemon=True) for fn in (stdout, stderr)]
        for reader in readers:
            reader.start()
        stopped = not _exited(process, self.timeout)
        if stopped:
            _kill(process, signal.SIGTERM)
            if not _exited(process, GRACE):
                _kill(process, signal.SIGKILL)
                _exited(process, None)
        _kill(process, signal.SIGKILL)          # what it left running in its group,
        process.wait()                          # signalled before its leader is reaped
        for reader in readers:
            reader.join(GRACE)
        self._process = None
        if stopped:
            self._end(job, "stopped", error=f"stopped after {self.timeout:g} s "
                                            f"(rules.backtest_timeout)")
        elif too_long.is_set():
            self._end(job, "failed", error=f"its answer is longer than {ANSWER_MAX} bytes")
        elif process.returncode != 0:
            last = job.progress[-1] if job.progress else "nothing on stderr"
            self._end(job, "failed", error=f"{last} (exit status {process.returncode})")
        else:
            try:
                result = digest(json.loads(bytes(answer)))
            except ValueError as e:     # JSONDecodeError, UnicodeDecodeError, its shape
                self._end(job, "failed", error=f"the backtest's answer is not usable: "
                                               f"{str(e)[:200]}")
            else:
                self._end(job, "done", result=result)

    def _end(self, job: Job, state: str, error: str | None = None,
             result: dict | None = None) -> None:
        with self._lock:
            job.state, job.error, job.result = state, error, result
            job.finished = self.clock()

    def close(self) -> None:
        """Stop the run going on, if any (the console exits)."""
        process = self._process
        if process is not None and process.poll() is None:
            _kill(process, signal.SIGKILL)


#: seconds between two looks at whether a run has exited (it is not reaped meanwhile)
LOOK = 0.1


def _exited(process: subprocess.Popen, timeout: float | None) -> bool:
    """Whether the run has exited within ``timeout`` seconds (None: however long), without
    reaping it: its process group keeps its id until it is signalled."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        try:
            if os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG):
                return True
        except ChildProcessError:       # reaped already
            return True
        if deadline is not None and time.monotonic() >= deadline:
            return False
        time.sleep(LOOK)


def _kill(process: subprocess.Popen, sig: int) -> None:
    """``sig`` to the run's process group (its own session), if it is still there."""
    try:
        os.killpg(process.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
