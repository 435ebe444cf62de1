"""The remote_write sink's queue: samples in memory, spilled to disk past a bound, the oldest
dropped past another; kept across restarts. Plain logic and files, no sockets; thread-safe
(the sink's loop puts, the sender takes).

A *record* is one message's samples, encoded (:func:`record`): its agent's uuid, its type,
its time (ms) and each sample's shard hash and TimeSeries (:mod:`sinks.remote_write.wire`).
Records are appended to *segments* of about ``segment_bytes``; the queue is the segments,
oldest first. Each segment is in memory, on disk (a file ``NUMBER.seg`` in the queue's
directory), or both while the sender reads one from disk.

- :meth:`SpillQueue.put` (the loop) appends a record and never waits for the sender: when the
  segments in memory hold more than ``max_memory`` bytes, the oldest whole one the sender has
  not started is written to disk (*spilled*); when the files hold more than ``max_disk``
  bytes, the oldest one the sender has not started is deleted, its samples counted
  ``samples_dropped_full`` and its records handed to ``dropped`` (the sink's ledger of drops
  per agent, reported to the lake). With ``max_disk`` 0 nothing is spilled: the oldest
  segment in memory is dropped so. A spill the disk refuses (full, unwritable) drops that
  segment the same way (``spill_failed``).
- :meth:`SpillQueue.take` (the sender) hands out the oldest records not handed out yet, up to
  a number of samples, waiting a while for that many; :meth:`SpillQueue.done` says they were
  delivered (or given up): they leave the queue, a segment and its file once all its records
  have. So a record leaves only once sent: what the sender holds is never dropped.
- :meth:`SpillQueue.close` writes every record not done (handed out or not) to disk (past
  ``max_disk`` by up to ``max_memory``: the next start drops the oldest beyond it, reported
  as any drop; with ``max_disk`` 0 nothing is written, counted ``samples_dropped_at_exit``),
  and :meth:`SpillQueue.open` takes the files of the directory back, in order: a restart
  resumes where the last run stopped. The directory is locked (``flock``) while a queue has it open:
  two sinks never share one. Files are written whole under another name and renamed; at
  close they are fsynced, while running they are not (a crash of the sink loses nothing on
  disk; a crash of the machine may lose the newest spills). What was only in memory when the
  sink was killed (SIGKILL, OOM) is lost, counted by nobody: size ``max_memory`` to what you
  can lose so.

Delivery from the queue is at least once: records handed out when the sink stopped, sent
but not yet done, are sent again after the restart.
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import struct
import threading
import time
from collections import Counter, deque
from typing import Callable, Iterator, NamedTuple

log = logging.getLogger(__name__)

#: the first bytes of a segment file
MAGIC = b"FWRWSEG1"
#: a record's length in a file, before it
LENGTH = struct.Struct("<I")
#: a record's head: ts (ms), samples, uuid length, type length
HEAD = struct.Struct("<qIHB")
#: a sample's head in a record: shard hash, TimeSeries length
SAMPLE = struct.Struct("<II")
#: largest segment; the smallest, whatever the bounds
MAX_SEGMENT, MIN_SEGMENT = 4 * 1024 * 1024, 16 * 1024
#: the counters the queue keeps
COUNTERS = ("samples_dropped_full", "samples_dropped_at_exit", "segments_spilled",
            "segments_dropped", "spill_failed", "segments_resumed", "segments_damaged")


class Header(NamedTuple):
    """What the ledger of drops needs of a record."""

    uuid: str
    type: str
    ts_ms: int
    samples: int


def record(uuid: str, type_: str, ts_ms: int, samples: list[tuple[int, bytes]]) -> bytes:
    """One message's samples, (shard hash, TimeSeries) each, as a record."""
    u, t = uuid.encode(), type_.encode()
    parts = [HEAD.pack(ts_ms, len(samples), len(u), len(t)), u, t]
    for shard, data in samples:
        parts += (SAMPLE.pack(shard & 0xFFFFFFFF, len(data)), data)
    return b"".join(parts)


def header(rec: bytes) -> Header:
    ts_ms, n, lu, lt = HEAD.unpack_from(rec)
    start = HEAD.size
    return Header(rec[start:start + lu].decode(), rec[start + lu:start + lu + lt].decode(),
                  ts_ms, n)


def samples(rec: bytes) -> Iterator[tuple[int, bytes]]:
    """(shard hash, TimeSeries) of each sample of a record."""
    _, n, lu, lt = HEAD.unpack_from(rec)
    at, unpack, size = HEAD.size + lu + lt, SAMPLE.unpack_from, SAMPLE.size
    for _ in range(n):
        shard, length = unpack(rec, at)
        at += size
        yield shard, rec[at:at + length]
        at += length


class Segment:
    """Records, in memory and/or in a file. ``start``: records handed out (from 0);
    ``acked``: those done (from 0)."""

    def __init__(self, number: int):
        self.number = number
        self.records: list[bytes] | None = []
        self.path: str | None = None
        self.sealed = False
        self.nbytes = 0          # the records' bytes with their lengths (a file's size - 8)
        self.samples = 0
        self.start = self.acked = 0
        #: each record's header: what a drop reports, what take() counts
        self.heads: list[Header] = []

    @property
    def busy(self) -> bool:
        """The sender has records of it in hand or done: it may not be dropped or spilled."""
        return self.start > 0

    def add(self, rec: bytes, head: Header) -> None:
        self.records.append(rec)
        self.heads.append(head)
        self.nbytes += LENGTH.size + len(rec)
        self.samples += head.samples


class SpillQueue:
    """The queue (module docstring). ``dropped(headers)``: called with the records of each
    segment dropped, from the putting thread."""

    def __init__(self, directory: str, max_memory: int, max_disk: int,
                 dropped: Callable[[list[Header]], None] = lambda heads: None,
                 counts: Counter | None = None, segment_bytes: int | None = None):
        self.directory, self.max_memory, self.max_disk = directory, max_memory, max_disk
        self.dropped = dropped
        self.counts = counts if counts is not None else Counter()
        for key in COUNTERS:
            self.counts.setdefault(key, 0)
        bound = min(max_memory, max_disk) if max_disk else max_memory
        self.segment_bytes = segment_bytes or max(MIN_SEGMENT, min(MAX_SEGMENT, bound // 8))
        self.segments: deque[Segment] = deque()
        self.cond = threading.Condition()
        self.next_number = 1
        self.memory = 0        # bytes of the segments' records held in memory
        self.disk = 0          # bytes of the segments' files
        self.pending = 0       # samples not handed out
        self.total = 0         # samples queued (handed out but not done included)
        self.closed = False
        self._taken: list[tuple[Segment, int]] = []
        self._lock_fd: int | None = None

    # ---------------------------------------------------------------- sizes (any thread)
    def sizes(self) -> dict[str, int]:
        with self.cond:
            return {"queue_samples": self.total, "queue_bytes": self.memory + self.disk,
                    "queue_memory_bytes": self.memory, "queue_disk_bytes": self.disk,
                    "queue_segments": len(self.segments)}

    def waiting(self) -> int:
        """Samples queued and not handed out."""
        with self.cond:
            return self.pending

    # ---------------------------------------------------------------- life cycle
    def open(self) -> None:
        """Lock the directory (made if missing) and take back its segment files, oldest
        first. OSError when it cannot be made, read or locked."""
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(self.directory, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
                raise OSError(e.errno, f"queue_dir {self.directory} is in use by another "
                                       f"remote_write sink") from None
            raise
        self._lock_fd = fd
        names = sorted((n for n in os.listdir(self.directory) if n.endswith(".seg")),
                       key=lambda n: (len(n), n))
        for name in os.listdir(self.directory):
            if name.endswith(".tmp"):
                os.unlink(os.path.join(self.directory, name))
        for name in names:
            self._resume(os.path.join(self.directory, name))
        if self.segments:
            log.info("resumed %d queued samples in %d segments from %s", self.total,
                     len(self.segments), self.directory)
        with self.cond:
            self._bound()   # a smaller max_disk than the last run's, or its stop's spill

    def _resume(self, path: str) -> None:
        stem = os.path.basename(path)[:-4]
        if not stem.isdigit():
            return
        seg = Segment(int(stem))
        good = _read(path, seg)
        if not good:
            self.counts["segments_damaged"] += 1
            log.warning("segment %s is damaged: its readable records kept", path)
        seg.records, seg.path, seg.sealed = None, path, True
        if not seg.heads:
            os.unlink(path)
            return
        self.segments.append(seg)
        self.next_number = max(self.next_number, seg.number + 1)
        self.disk += seg.nbytes + len(MAGIC)
        self.pending += seg.samples
        self.total += seg.samples
        self.counts["segments_resumed"] += 1

    def close(self) -> int:
        """Write every record not done to disk (fsynced; with ``max_disk`` 0, none: they
        are counted ``samples_dropped_at_exit``), release the directory. Returns the
        samples kept."""
        kept = 0
        with self.cond:
            self.closed = True
            self.cond.notify_all()
            self._taken = []
            for seg in self.segments:
                left = seg.samples - sum(h.samples for h in seg.heads[:seg.acked])
                if not self.max_disk:
                    self.counts["samples_dropped_at_exit"] += left
                    continue
                try:
                    if seg.path is None or seg.acked:
                        self._rewrite(seg)
                    kept += left
                except OSError as e:
                    self.counts["samples_dropped_at_exit"] += left
                    log.error("cannot keep %d queued samples in %s: %s", left,
                              self.directory, e)
            _fsync_dir(self.directory)
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
        return kept

    def _rewrite(self, seg: Segment) -> None:
        """The records of ``seg`` not done, to its file (fsynced)."""
        if seg.records is None:
            seg.records = _records(seg.path)
        left = seg.records[seg.acked:]
        if seg.path is not None:
            os.unlink(seg.path)
        if left:
            seg.path = _write(self.directory, seg.number, left, sync=True)

    # ---------------------------------------------------------------- putting (the loop)
    def put(self, rec: bytes, head: Header) -> None:
        """Append a record (never waits for the sender)."""
        with self.cond:
            tail = self.segments[-1] if self.segments else None
            if tail is None or tail.sealed:
                tail = Segment(self.next_number)
                self.next_number += 1
                self.segments.append(tail)
            tail.add(rec, head)
            self.memory += LENGTH.size + len(rec)
            self.pending += head.samples
            self.total += head.samples
            if tail.nbytes >= self.segment_bytes:
                tail.sealed = True
            self._bound()
            self.cond.notify()

    def _bound(self) -> None:
        while self.memory > self.max_memory:
            seg = next((s for s in self.segments if s.path is None and not s.busy), None)
            if seg is None:
                return          # what is over is in the sender's hands: it leaves soon
            seg.sealed = True
            if not self.max_disk:
                self._drop(seg)
                continue
            try:
                seg.path = _write(self.directory, seg.number, seg.records)
            except OSError as e:
                self.counts["spill_failed"] += 1
                log.error("cannot spill %d queued samples to %s: %s; dropped", seg.samples,
                          self.directory, e)
                self._drop(seg)
                continue
            self.counts["segments_spilled"] += 1
            self.memory -= seg.nbytes
            self.disk += seg.nbytes + len(MAGIC)
            seg.records = None
        while self.disk > self.max_disk:
            seg = next((s for s in self.segments if s.path is not None and not s.busy), None)
            if seg is None:
                return
            self._drop(seg)

    def _drop(self, seg: Segment) -> None:
        self.segments.remove(seg)
        self._forget(seg)
        self.pending -= seg.samples
        self.total -= seg.samples
        self.counts["samples_dropped_full"] += seg.samples
        self.counts["segments_dropped"] += 1
        self.dropped(seg.heads)

    def _forget(self, seg: Segment) -> None:
        """``seg``'s memory and file, gone."""
        if seg.records is not None:
            self.memory -= seg.nbytes
            seg.records = None
        if seg.path is not None:
            self.disk -= seg.nbytes + len(MAGIC)
            try:
                os.unlink(seg.path)
            except FileNotFoundError:
                pass
            seg.path = None

    # ---------------------------------------------------------------- taking (the sender)
    def take(self, limit: int, wait: float = 0.0) -> list[bytes]:
        """The oldest records not handed out, about ``limit`` samples (at least one record
        if any), after waiting up to ``wait`` s for that many. The previous take must be
        :meth:`done` first."""
        deadline = time.monotonic() + wait
        with self.cond:
            while self.pending < limit and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            out, n = [], 0
            for seg in self.segments:
                if n >= limit:
                    break
                if seg.start >= len(seg.heads):
                    continue
                if seg.records is None:
                    self._load(seg)
                first = seg.start
                while seg.start < len(seg.heads) and (n < limit or seg.start == first
                                                      and not out):
                    n += seg.heads[seg.start].samples
                    seg.start += 1
                out += seg.records[first:seg.start]
                self._taken.append((seg, seg.start - first))
            self.pending -= n
            return out

    def _load(self, seg: Segment) -> None:
        try:
            seg.records = _records(seg.path)
        except OSError as e:     # a file gone or unreadable under us: its samples are lost
            log.error("cannot read queued segment %s: %s", seg.path, e)
            seg.records = []
        self.memory += seg.nbytes
        if len(seg.records) < len(seg.heads):
            self.counts["segments_damaged"] += 1
            seg.records += [record(h.uuid, h.type, h.ts_ms, []) for h in
                            seg.heads[len(seg.records):]]

    def done(self) -> None:
        """The records of the last take were delivered or given up: they leave."""
        with self.cond:
            for seg, count in self._taken:
                gone = sum(h.samples for h in seg.heads[seg.acked:seg.acked + count])
                seg.acked += count
                self.total -= gone
            self._taken = []
            while self.segments and self.segments[0].sealed and \
                    self.segments[0].acked >= len(self.segments[0].heads):
                self._forget(self.segments.popleft())
            head = self.segments[0] if self.segments else None
            if head is not None and not head.sealed and head.acked == len(head.heads):
                self._forget(self.segments.popleft())       # the tail, all sent

    def headers(self) -> list[Header]:
        """Every record's header, oldest first (for tests and the bench)."""
        with self.cond:
            return [h for seg in self.segments for h in seg.heads[seg.acked:]]


# ---------------------------------------------------------------- files
def _write(directory: str, number: int, records: list[bytes], sync: bool = False) -> str:
    path = os.path.join(directory, f"{number:020d}.seg")
    tmp = path[:-4] + ".tmp"
    with open(tmp, "wb") as f:
        f.write(MAGIC)
        f.write(b"".join(LENGTH.pack(len(r)) + r for r in records))
        if sync:
            f.flush()
            os.fsync(f.fileno())
    os.rename(tmp, path)
    return path


def _records(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        data = f.read()
    out, at = [], len(MAGIC)
    if data[:len(MAGIC)] != MAGIC:
        return out
    while at + LENGTH.size <= len(data):
        (length,) = LENGTH.unpack_from(data, at)
        at += LENGTH.size
        if at + length > len(data):
            break
        out.append(data[at:at + length])
        at += length
    return out


def _read(path: str, seg: Segment) -> bool:
    """Fill ``seg`` (its headers and sizes) from the file; False when its end is damaged
    (the records before are kept)."""
    try:
        recs = _records(path)
    except OSError as e:
        log.error("cannot read queued segment %s: %s", path, e)
        return False
    size = os.path.getsize(path)
    for rec in recs:
        try:
            seg.add(rec, header(rec))
        except (struct.error, UnicodeDecodeError):
            return False
    return size == len(MAGIC) + seg.nbytes


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
