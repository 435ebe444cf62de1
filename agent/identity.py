"""The agent's uuid: created once in STATE_DIR/uuid and kept across restarts.

The uuid is what the agent's HELLO tells each router (SPEC.md 7.3), so a restarted agent is
the same agent to them. A cloned VM carries its template's uuid: mint a new one with
``fleetwatch agent --new-uuid --config PATH`` (the old one is kept as ``uuid.old``).
"""

from __future__ import annotations

import logging
import os

from fleetwatch import protocol

log = logging.getLogger(__name__)

UUID_FILE = "uuid"
OLD_FILE = "uuid.old"
STATE_DIR_MODE = 0o750
UUID_MODE = 0o644


class IdentityError(Exception):
    """The uuid file exists but cannot be used; ``str()`` is the one line to print."""


def ensure_state_dir(state_dir: str) -> None:
    """Create the state directory (mode 0750) if it does not exist."""
    os.makedirs(state_dir, mode=STATE_DIR_MODE, exist_ok=True)


def _valid(text: str) -> bool:
    return protocol.ID_PATTERN.fullmatch(text) is not None


def _write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, fsynced, then renamed."""
    tmp = f"{path}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, UUID_MODE)
    try:
        os.write(fd, text.encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, UUID_MODE)
    os.replace(tmp, path)
    dfd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read(state_dir: str) -> str | None:
    """The stored uuid, or None when there is none yet."""
    path = os.path.join(state_dir, UUID_FILE)
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise IdentityError(f"{path}: cannot be read ({e})") from None
    if not _valid(text):
        raise IdentityError(f"{path}: does not hold a uuid (mint one with --new-uuid)")
    return text


def uuid4() -> str:
    """A new random uuid (``uuid`` imported here: an agent that has one never loads it)."""
    import uuid
    return str(uuid.uuid4())


def load_or_create(state_dir: str, factory=uuid4) -> str:
    """The agent's uuid, created (``factory()``) and stored the first time."""
    ensure_state_dir(state_dir)
    current = read(state_dir)
    if current is not None:
        return current
    new = str(factory())
    _write_atomic(os.path.join(state_dir, UUID_FILE), new + "\n")
    log.info("created agent uuid %s in %s", new, state_dir)
    return new


def renew(state_dir: str, factory=uuid4) -> tuple[str | None, str]:
    """Mint a new uuid, keeping the old one as ``uuid.old``; return (old, new)."""
    ensure_state_dir(state_dir)
    path = os.path.join(state_dir, UUID_FILE)
    try:
        old = read(state_dir)
    except IdentityError:
        old = None  # an unreadable file is exactly what a new uuid replaces
    if os.path.exists(path):
        os.replace(path, os.path.join(state_dir, OLD_FILE))
    new = str(factory())
    _write_atomic(path, new + "\n")
    log.info("replaced agent uuid %s with %s", old, new)
    return old, new


LOCK_FILE = "agent.lock"


class StateDirBusy(Exception):
    """Another agent holds the state directory."""


def lock(state_dir: str) -> int:
    """Hold an exclusive lock on STATE_DIR/agent.lock for the life of the process.

    Two agents on one state directory would share a uuid, a spool and an intake socket.
    Returns the descriptor to keep open; raises :class:`StateDirBusy` if it is held.
    """
    import fcntl

    ensure_state_dir(state_dir)
    path = os.path.join(state_dir, LOCK_FILE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateDirBusy(f"{state_dir} is in use by another running agent") from None
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd
