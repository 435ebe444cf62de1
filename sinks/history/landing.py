"""Landing files: JSON lines appended in batches, one write and one fsync per batch.

A history sink holds at most one open file, ``LAKE/landing/NAME.jsonl.open``, locked with
``flock`` for as long as the process lives. :meth:`Landing.append` writes a whole batch with
one ``write``; a batch holding lines to be ACKed is made durable with ``fdatasync`` before
it returns (only then does the sink ACK). Other batches (STATS, HEARTBEAT, RESULT, HELLO:
nobody waits for them, and an fsync per batch cost the sink more than all else when the disk
was busy, bench/RESULTS.md "History sink") are fsynced with the next such batch, at least
every ``SYNC_SECONDS`` and before the file is closed. A file is closed when it reaches
``rotate_bytes`` or ``rotate_seconds`` after its first line: renamed to ``NAME.jsonl``
(atomic, directory fsynced), so compaction, which reads only ``*.jsonl``, never sees a file
still being written.

A crash leaves at most one ``.open`` file per sink. :func:`recover` closes every ``.open``
file whose lock it can take (its writer is dead; a live writer holds the lock), whatever
sink wrote it; its last line may be cut short, which compaction counts as a bad line. A
failed write is undone with ``ftruncate`` so the next batch starts on a line of its own; a
failed ``fsync`` abandons the file (closed as it is: after a failed fsync the kernel may have
dropped the dirty pages, so nothing written to it since the last good fsync is trusted, and
none of it was ACKed).
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import secrets
import time

log = logging.getLogger(__name__)

OPEN_SUFFIX = ".open"
SUFFIX = ".jsonl"
#: an abandoned ``.open`` file is closed by compaction only once untouched this long
STALE_SECONDS = 60.0
#: lines nobody waits for are fsynced at least this often (a power cut loses at most these)
SYNC_SECONDS = 1.0


def safe_name(name: str) -> str:
    """``name`` fit for a file name that Hadoop paths accept (no ``:``, no leading ``.``/``_``
    which Spark would treat as hidden)."""
    cleaned = re.sub(r"[^A-Za-z0-9.-]+", "_", name).strip("._") or "sink"
    return cleaned[:64]


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


def recover(directory: str, min_idle: float = 0.0, now=time.time) -> list[str]:
    """Close the ``.open`` files of dead writers in ``directory``: rename each non-empty one
    to its final name, remove empty ones. Files locked by a live writer, and files modified
    less than ``min_idle`` seconds ago, are left alone. Returns the closed files' paths."""
    closed = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return closed
    for name in names:
        if not name.endswith(OPEN_SUFFIX):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:       # closed by its writer meanwhile
            continue
        try:
            st = os.fstat(fd)
            if now() - st.st_mtime < min_idle or not _try_lock(fd):
                continue
            if not os.path.exists(path):  # closed between our open and our lock
                continue
            if st.st_size == 0:
                os.unlink(path)
            else:
                final = path[:-len(OPEN_SUFFIX)]
                os.rename(path, final)
                closed.append(final)
        finally:
            os.close(fd)
    if closed:
        fsync_dir(directory)
    return closed


def count_lines(directory: str) -> int:
    """Lines in the landing files of ``directory``, closed and open: what compaction has
    not taken yet (``done/`` is not read)."""
    total = 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0
    for name in names:
        if not name.endswith((SUFFIX, SUFFIX + OPEN_SUFFIX)):
            continue
        try:
            with open(os.path.join(directory, name), "rb") as f:
                total += sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 20), b""))
        except FileNotFoundError:       # compacted or closed meanwhile
            continue
    return total


class Landing:
    """The one open landing file of a writer, rotated by size and age."""

    def __init__(self, directory: str, name: str, rotate_bytes: int, rotate_seconds: float,
                 clock=time.monotonic, wall=time.time):
        self.directory, self.name = directory, safe_name(name)
        self.rotate_bytes, self.rotate_seconds = rotate_bytes, rotate_seconds
        self.clock, self.wall = clock, wall
        self.fd: int | None = None
        self.path = ""
        self.size = 0
        self.opened = 0.0
        #: bytes of the open file already fsynced, and when
        self.synced, self.synced_at = 0, 0.0
        #: how many files this writer closed (the sink's files_closed counter)
        self.closed = 0

    # ---------------------------------------------------------------- files
    def _open(self) -> None:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(self.wall()))
        base = f"{stamp}-{self.name}-{secrets.token_hex(4)}{SUFFIX}"
        path = os.path.join(self.directory, base + OPEN_SUFFIX)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o640)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # ours: nobody else has it yet
            fsync_dir(self.directory)   # the file survives a power cut before its first ACK
        except OSError:
            os.close(fd)
            os.unlink(path)
            raise
        self.fd, self.path, self.size, self.opened = fd, path, 0, self.clock()
        self.synced, self.synced_at = 0, self.opened

    def close(self) -> None:
        """Close the open file (renamed to its final name); nothing open is fine."""
        if self.fd is None:
            return
        fd, path, self.fd = self.fd, self.path, None
        try:
            if self.size == 0:
                os.unlink(path)
            else:
                if self.synced < self.size:     # durable before compaction can see it
                    os.fdatasync(fd)
                os.rename(path, path[:-len(OPEN_SUFFIX)])
                fsync_dir(self.directory)
                self.closed += 1
        finally:
            os.close(fd)    # releases the lock: a failed rename is left to recover()

    def due(self) -> bool:
        """Whether the open file has reached its age."""
        return self.fd is not None and self.clock() - self.opened >= self.rotate_seconds

    def tick(self) -> None:
        if self.due():
            self.close()
        elif self.fd is not None and self.clock() - self.synced_at >= SYNC_SECONDS:
            self.sync()

    def sync(self) -> None:
        """fsync what was written since the last sync; a failure abandons the file."""
        if self.fd is None or self.synced == self.size:
            return
        try:
            os.fdatasync(self.fd)
        except OSError:
            log.error("fsync of %s failed: closing it as it is (its unacked lines come "
                      "again)", self.path)
            self._abandon()
            raise
        self.synced, self.synced_at = self.size, self.clock()

    # ---------------------------------------------------------------- writing
    def append(self, data: bytes, sync: bool = True) -> None:
        """Append ``data`` (whole lines) and, with ``sync`` or ``SYNC_SECONDS`` after the
        last fsync, fsync it; raises OSError with nothing owed."""
        if not data:
            return
        if self.due():
            self.close()
        if self.fd is None:
            self._open()
        start = self.size
        try:
            view = memoryview(data)
            while view:
                written = os.write(self.fd, view)
                view = view[written:]
        except OSError:
            self._undo(start)
            raise
        self.size += len(data)
        if sync or self.clock() - self.synced_at >= SYNC_SECONDS:
            self.sync()
        if self.size >= self.rotate_bytes:
            self.close()

    def _undo(self, start: int) -> None:
        """Cut a partly written batch off, so the next batch starts on a fresh line."""
        try:
            os.ftruncate(self.fd, start)
        except OSError:
            log.error("cannot truncate %s after a failed write: closing it", self.path)
            self._abandon()

    def _abandon(self) -> None:
        self.synced = self.size     # no second fsync: after a failed one its success means nothing
        try:
            self.close()
        except OSError as e:
            log.error("cannot close %s: %s (recovered at the next start)", self.path, e)
