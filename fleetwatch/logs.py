"""Logging set-up shared by every process, and throttled error logging."""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
import time

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def setup(level: str = "INFO", name: str = "") -> None:
    """Log to stderr at ``level``, prefixing ``name``.

    When stderr is systemd's journal stream (``JOURNAL_STREAM``, systemd.exec(5)), each line
    starts with its syslog priority (``<3>`` error, ``<4>`` warning, ``<6>`` info, ``<7>``
    debug) instead of a timestamp: the journal keeps the level and adds the time itself."""
    handler = logging.StreamHandler(sys.stderr)
    if to_journal(sys.stderr):
        handler.setFormatter(JournalFormatter(f"{name} %(name)s: %(message)s" if name
                                              else "%(name)s: %(message)s"))
    else:
        handler.setFormatter(logging.Formatter(
            f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s" if name else FORMAT))
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO),
                        handlers=[handler], force=True)
    fatal_signals()


def fatal_signals(stream=None) -> None:
    """A fatal signal (SIGBUS, SIGSEGV, SIGFPE, SIGABRT, SIGILL) writes its name and every
    thread's stack to stderr (``Fatal Python error: Bus error``) before the process dies:
    no Python code runs then, and a process must never die of its environment without a
    line saying why (SQLite's ``-shm`` made immutable under it: fleetwatch/sqlitefiles.py)."""
    stream = stream or sys.stderr
    try:
        faulthandler.enable(file=stream, all_threads=True)
    except (AttributeError, ValueError, OSError) as e:
        # a stderr with no descriptor: only a process run inside another's (the tests')
        logging.getLogger(__name__).debug("no report of fatal signals on %r: %s", stream, e)


def set_level(level: str) -> None:
    """Change the level of every logger that follows the root (a config reload)."""
    logging.getLogger().setLevel(getattr(logging, level.upper(), logging.INFO))


def to_journal(stream, environ=None) -> bool:
    """Whether ``stream`` is the journal stream systemd connected (``JOURNAL_STREAM`` is
    ``DEVICE:INODE`` of it; a stream redirected since, e.g. to a file, is not)."""
    value = (os.environ if environ is None else environ).get("JOURNAL_STREAM", "")
    dev, _, ino = value.partition(":")
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (ValueError, OSError, AttributeError):
        return False


#: logging level -> syslog priority (sd-daemon(3) prefixes)
PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4),
              (logging.INFO, 6))


class JournalFormatter(logging.Formatter):
    """``<PRIORITY>`` on every line of a record (a traceback's lines included)."""

    def format(self, record: logging.LogRecord) -> str:
        prio = next((p for level, p in PRIORITIES if record.levelno >= level), 7)
        return "\n".join(f"<{prio}>{line}" for line in super().format(record).splitlines())


class Throttle:
    """Log a recurring problem at most once per ``period`` seconds per key, with a count.

    Diamond's ``_throttle_error``: a flood of bad frames must not become a flood of logs.
    """

    def __init__(self, logger: logging.Logger, period: float = 10.0, clock=time.monotonic):
        self.log, self.period, self.clock = logger, period, clock
        self._next: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args) -> None:
        self._log(logging.WARNING, key, msg, *args)

    def error(self, key: str, msg: str, *args) -> None:
        self._log(logging.ERROR, key, msg, *args)

    def _log(self, level: int, key: str, msg: str, *args) -> None:
        now = self.clock()
        if now < self._next.get(key, 0.0):
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            msg += " (%d similar suppressed)"
            args = (*args, skipped)
        self.log.log(level, msg, *args)
        self._next[key] = now + self.period
