"""A site router's buffer of best-effort messages while its uplink is down (SPEC 4.10).

STATS, RESULT, HEARTBEAT (every type but the durable ones, which the agents keep) wait here,
as their ENVELOPE and BODY frames, in the order they came, and leave in that order once the
uplink is back. Memory holds the newest ``max_messages``; past it the oldest of them are
written to the disk spool as one *segment* file (when there is a spool directory), and the
spool's oldest segment is deleted, its messages counted dropped, once it holds more than
``spool_bytes``. Without a spool the oldest message in memory is dropped and counted. So the
order is always: the segment being delivered, the segments on disk (oldest first), memory.

Segments left by a previous run are delivered first (a restarted site router loses no more
than its memory). A segment is a sequence of records: two lengths (4 octets each,
big-endian), the envelope, the body. No sockets here: the uplink (router/uplink.py) peeks
and pops; tests give it a temporary directory.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from pathlib import Path

from fleetwatch import private

log = logging.getLogger(__name__)

RECORD = struct.Struct(">II")
SUFFIX = ".seg"


class SpoolError(Exception):
    """A spool directory that cannot be used; ``str()`` is one line (the router exits 78)."""


class SiteBuffer:
    """Messages in order: ``push``, ``peek``, ``pop``; counted in ``dropped``,
    ``spilled`` (written to disk) and ``delivered`` (popped)."""

    def __init__(self, max_messages: int, spool_dir: str = "", spool_bytes: int = 0):
        self.max_messages = max(1, max_messages)
        self.spool = Path(spool_dir) if spool_dir else None
        self.spool_bytes = spool_bytes
        #: the newest messages, (envelope, body)
        self.memory: deque[tuple[bytes, bytes]] = deque()
        #: segment files on disk, oldest first, as (path, messages, bytes)
        self.segments: deque[tuple[Path, int, int]] = deque()
        #: the oldest segment's messages, read back for delivery
        self.reading: deque[tuple[bytes, bytes]] = deque()
        self.dropped = self.spilled = self.delivered = 0
        self.disk_bytes = 0
        self.disk_messages = 0
        self.next_segment = 0
        if self.spool is not None:
            try:
                self.spool.mkdir(parents=True, exist_ok=True)
                probe = self.spool / ".writable"
                probe.write_bytes(b"")
                probe.unlink()
            except OSError as e:
                raise SpoolError(f"site.spool_dir: {spool_dir}: {e.strerror or e}") from None
            self._recover()

    def __len__(self) -> int:
        return len(self.reading) + self.disk_messages + len(self.memory)

    # ---------------------------------------------------------------- in
    def push(self, envelope: bytes, body: bytes) -> None:
        """Keep a message at the end; past the memory bound, spill or drop the oldest."""
        memory = self.memory
        memory.append((envelope, body))
        if len(memory) <= self.max_messages:
            return
        if self.spool is None or self.spool_bytes <= 0:
            memory.popleft()
            self.dropped += 1
            return
        # the older half of memory becomes one segment (a write per max_messages / 2)
        half = max(1, len(memory) // 2)
        self._write([memory.popleft() for _ in range(half)])
        while self.disk_bytes > self.spool_bytes and self.segments:
            path, count, size = self.segments.popleft()
            self._unlink(path)
            self.disk_bytes -= size
            self.disk_messages -= count
            self.dropped += count

    # ---------------------------------------------------------------- out
    def peek(self) -> tuple[bytes, bytes] | None:
        """The oldest message, left in place; None when empty."""
        if self.reading:
            return self.reading[0]
        while self.segments:
            path, count, size = self.segments.popleft()
            self.disk_bytes -= size
            self.disk_messages -= count
            records = self._read(path)
            self._unlink(path)
            if len(records) < count:
                self.dropped += count - len(records)
            if records:
                self.reading.extend(records)
                return self.reading[0]
        return self.memory[0] if self.memory else None

    def pop(self) -> None:
        """Remove the message :meth:`peek` returned."""
        if self.reading:
            self.reading.popleft()
        else:
            self.memory.popleft()
        self.delivered += 1

    def metrics(self) -> dict[str, int]:
        return {"router.site.buffered": len(self), "router.site.spooled": self.disk_messages,
                "router.site.spool_bytes": self.disk_bytes,
                "router.site.buffer_dropped": self.dropped,
                "router.site.spilled": self.spilled, "router.site.delivered": self.delivered}

    # ---------------------------------------------------------------- disk
    def _write(self, records: list[tuple[bytes, bytes]]) -> None:
        path = self.spool / f"{self.next_segment:012d}{SUFFIX}"
        self.next_segment += 1
        data = b"".join(RECORD.pack(len(e), len(b)) + e + b for e, b in records)
        try:
            with private.rewrite(path, private.GROUP) as f:    # every host's results
                f.write(data)
        except OSError as e:            # a full or broken disk: these are lost, counted
            self.dropped += len(records)
            log.warning("site buffer: cannot write %s (%s): %d messages dropped", path, e,
                        len(records))
            self._unlink(path)
            return
        self.segments.append((path, len(records), len(data)))
        self.disk_bytes += len(data)
        self.disk_messages += len(records)
        self.spilled += len(records)

    def _read(self, path: Path) -> list[tuple[bytes, bytes]]:
        try:
            data = path.read_bytes()
        except OSError as e:
            log.warning("site buffer: cannot read %s: %s", path, e)
            return []
        out, pos = [], 0
        while pos + RECORD.size <= len(data):
            n, m = RECORD.unpack_from(data, pos)
            pos += RECORD.size
            if pos + n + m > len(data):
                log.warning("site buffer: %s ends in a partial record: its rest dropped", path)
                break
            out.append((data[pos:pos + n], data[pos + n:pos + n + m]))
            pos += n + m
        return out

    def _recover(self) -> None:
        """Take back the segments a previous run left, oldest first."""
        for path in sorted(self.spool.glob(f"*{SUFFIX}")):
            try:
                number = int(path.stem)
                size = path.stat().st_size
            except (ValueError, OSError):
                continue
            count = len(self._read(path))
            self.segments.append((path, count, size))
            self.disk_bytes += size
            self.disk_messages += count
            self.next_segment = max(self.next_segment, number + 1)
        if self.segments:
            log.info("site buffer: %d messages left in %s by a previous run, to deliver",
                     self.disk_messages, self.spool)

    @staticmethod
    def _unlink(path: Path) -> None:
        try:
            os.unlink(path)
        except OSError:
            pass
