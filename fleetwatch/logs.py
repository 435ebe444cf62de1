"""Logging set-up shared by every process, and throttled error logging."""

from __future__ import annotations

import logging
import sys
import time

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def setup(level: str = "INFO", name: str = "") -> None:
    """Log to stderr (the journal under systemd) at ``level``, prefixing ``name``."""
    fmt = f"%(asctime)s {name} %(levelname)s %(name)s: %(message)s" if name else FORMAT
    logging.basicConfig(level=getattr(logging, level.upper(), logging.INFO), format=fmt,
                        stream=sys.stderr, force=True)


class Throttle:
    """Log a recurring problem at most once per ``period`` seconds per key, with a count.

    Diamond's ``_throttle_error``: a flood of bad frames must not become a flood of logs.
    """

    def __init__(self, logger: logging.Logger, period: float = 10.0, clock=time.monotonic):
        self.log, self.period, self.clock = logger, period, clock
        self._next: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def warning(self, key: str, msg: str, *args) -> None:
        now = self.clock()
        if now < self._next.get(key, 0.0):
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return
        skipped = self._suppressed.pop(key, 0)
        if skipped:
            msg += " (%d similar suppressed)"
            args = (*args, skipped)
        self.log.warning(msg, *args)
        self._next[key] = now + self.period
