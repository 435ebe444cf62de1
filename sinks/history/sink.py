"""The history sink: every message a router relays to it, as one JSON line in the landing area.

It takes every type an agent sends (the default routing table sends all of them here,
SPEC 4.1) and writes each batch the common loop (:mod:`sinks.loop`) hands it as one
``write`` + one ``fsync`` through :class:`sinks.history.landing.Landing`; the loop ACKs
NOTIFY and REGISTER only after :meth:`HistorySink.write` returned. A line (BRIEF 12,
sinks/history/README.md "Landing files")::

    {"type": "STATS", "uuid": STAMPED UUID, "router": ROUTER, "received": EPOCH, "msg": BODY}

No PySpark here: turning lines into tables is ``fleetwatch history compact``'s job.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections import Counter

from fleetwatch import protocol
from fleetwatch.protocol import Relayed
from sinks.base import WriteError
from sinks.history.landing import STALE_SECONDS, Landing, recover

log = logging.getLogger(__name__)

#: C encoder, built once (json.dumps with options builds one per call)
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


def landing_lines(batch: list[Relayed], received: float) -> bytes:
    """The landing lines of ``batch``; type, uuid and router are protocol ids (no quoting
    needed), the body is re-encoded by the C encoder."""
    stamp = f'"received":{received:.3f},"msg":'
    parts = []
    for r in batch:
        msg = r.message
        parts.append(f'{{"type":"{msg.type}","uuid":"{r.uuid}","router":"{r.router}",'
                     f'{stamp}{_encode(msg.body)}}}\n')
    return "".join(parts).encode("utf-8", "surrogatepass")


class HistorySink:
    type = "history"
    handles = frozenset(protocol.AGENT_TYPES)
    acks = frozenset({"NOTIFY", "REGISTER"})

    def __init__(self, lake: str, name: str, rotate_bytes: int = 64 << 20,
                 rotate_seconds: float = 60.0, ack: bool = True, wall=time.time,
                 clock=time.monotonic):
        self.lake, self.name, self.wall = lake, name, wall
        self.directory = os.path.join(lake, "landing")
        self.landing = Landing(self.directory, name, rotate_bytes, rotate_seconds, clock, wall)
        if not ack:
            self.acks = frozenset()
        #: the loop calls tick() this often between batches: closes a file that is due
        self.tick_interval = min(1.0, rotate_seconds / 4)
        self._counts: Counter = Counter()

    @property
    def counts(self) -> Counter:
        """Lines, bytes and batches written; landing files closed and recovered."""
        merged = Counter(self._counts)
        merged["files_closed"] = self.landing.closed
        return merged

    @classmethod
    def from_config(cls, config) -> "HistorySink":
        s = config.history
        name = (config.name or f"history@{socket.gethostname()}")[:protocol.MAX_ID]
        return cls(s.lake, name, s.rotate_bytes, s.rotate_seconds, s.ack)

    def start(self) -> None:
        try:
            os.makedirs(self.directory, exist_ok=True)
            closed = recover(self.directory)
        except OSError as e:
            raise WriteError(f"history lake {self.lake}: cannot use {self.directory}: "
                             f"{e.strerror or e}") from None
        self._counts["files_recovered"] += len(closed)
        for path in closed:
            log.warning("closed %s left open by a stopped sink (its last line may be cut "
                        "short; compaction counts it)", path)
        log.info("landing in %s (rotate at %d bytes or %g s)%s", self.directory,
                 self.landing.rotate_bytes, self.landing.rotate_seconds,
                 "" if self.acks else "; not ACKing")

    def write(self, batch: list[Relayed]) -> None:
        data = landing_lines(batch, self.wall())
        try:
            self.landing.append(data)
        except OSError as e:
            raise WriteError(f"landing file in {self.directory}: {e.strerror or e}") from None
        self._counts["lines"] += len(batch)
        self._counts["bytes"] += len(data)
        self._counts["batches"] += 1

    def tick(self) -> None:
        try:
            self.landing.tick()
        except OSError as e:
            raise WriteError(f"closing {self.landing.path}: {e.strerror or e}") from None

    def close(self) -> None:
        try:
            self.landing.close()
        except OSError as e:
            log.error("cannot close %s: %s (closed at the next start)", self.landing.path, e)


def recover_stale(lake: str) -> list[str]:
    """For compaction: close ``.open`` files of sinks that died and did not come back."""
    return recover(os.path.join(lake, "landing"), STALE_SECONDS)
