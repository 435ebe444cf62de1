"""Files that hold secrets or private data, made with their mode whatever the umask.

A file is opened with ``O_CREAT`` and its final mode at once, then ``fchmod`` (the umask can
only narrow the mode ``open`` gives), so there is no moment when it is more open. SQLite
gives a database's ``-wal``, ``-shm`` and journal files the mode of the database file, so
creating the (empty) database file first with :func:`create` is enough for all of them.

A socket file (a Unix socket's bind) cannot be opened with a mode: it is made while
:func:`born_with` narrows the umask, so that it too is never more open than its mode.

Modes: :data:`PRIVATE` (0600) for what one user reads (the demo's configs, logs and
``demo.json``); :data:`GROUP` (0640) for what the service group reads too (the state
database, the spool, a site router's buffer, the lake's tables, like the files the services
make under ``UMask=0027``).
"""

from __future__ import annotations

import contextlib
import os
from typing import BinaryIO

PRIVATE = 0o600
GROUP = 0o640


@contextlib.contextmanager
def born_with(mode: int = PRIVATE):
    """The umask narrowed so that a file made meanwhile (a socket bound) has at most
    ``mode``; restored after. The umask is the process's: bind in the thread that calls."""
    old = os.umask(0o777 & ~mode)
    try:
        yield
    finally:
        os.umask(old)


def create(path: str | os.PathLike, mode: int = PRIVATE) -> bool:
    """Create ``path`` empty with ``mode`` unless it exists (then it is left as it is).

    True when this call created it."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    return True


def write(path: str | os.PathLike, text: str, mode: int = PRIVATE) -> None:
    """Replace ``path`` with ``text`` (UTF-8), mode ``mode``: written to a temporary file
    beside it and renamed, so a reader sees the old or the new file whole."""
    tmp = f"{os.fspath(path)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            fd = -1
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def append(path: str | os.PathLike, mode: int = PRIVATE) -> BinaryIO:
    """``path`` opened to append bytes (a log), created with ``mode``, or narrowed to it."""
    return _open(path, os.O_APPEND, mode, "ab")


def rewrite(path: str | os.PathLike, mode: int = PRIVATE) -> BinaryIO:
    """``path`` opened to write bytes from empty (a spool segment), created with ``mode``,
    or narrowed to it."""
    return _open(path, os.O_TRUNC, mode, "wb")


def _open(path: str | os.PathLike, flag: int, mode: int, how: str) -> BinaryIO:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | flag, mode)
    try:
        os.fchmod(fd, mode)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, how)
