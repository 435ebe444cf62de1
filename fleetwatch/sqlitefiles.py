"""Whether this process can write a SQLite database's files (the state database's), asked
before SQLite is.

SQLite maps the ``-shm`` file (WAL's shared index) into every process that uses the
database. One it cannot open for writing is mapped read-only, and every write then fails
with "attempt to write a readonly database", which names no file; one made unwritable
under a running process (``chattr +i``) kills that process with SIGBUS at its next write,
which no code of it can catch (:func:`fleetwatch.logs.setup` leaves the fatal signal's
line on stderr; the unit's ``Restart=on-failure`` or the demo starts it again). So a writer
checks at start and refuses with one line naming the file and why (:class:`Unwritable`,
exit status ``os.EX_IOERR``).

``os.access``, not ``open``: closing a descriptor of a file releases every POSIX lock this
process holds on it, and SQLite's locks live on these files.
"""

from __future__ import annotations

import os

#: the exit status of a process refused here


class Unwritable(OSError):
    """A file of a SQLite database (or its directory) this process cannot write; ``str()``
    is one line."""


def check(path: str) -> None:
    """Raise :class:`Unwritable` unless the database ``path``, its ``-wal`` and ``-shm``
    (those that exist) and its directory are writable by this process."""
    directory = os.path.dirname(os.path.abspath(path))
    for name, role in ((path, "the database"), (f"{path}-wal", "its write-ahead log"),
                       (f"{path}-shm", "its shared memory, which SQLite maps"),
                       (directory, "its directory, where SQLite makes its -wal and -shm")):
        if os.path.lexists(name) and not os.access(name, os.W_OK):
            raise Unwritable(f"{name} ({role}) is not writable by this process "
                             f"(uid {os.geteuid()}): {why(name)}")


def why(name: str) -> str:
    """What makes ``name`` unwritable, as far as its mode and file system tell."""
    try:
        st, fs = os.stat(name), os.statvfs(name)
    except OSError as e:
        return e.strerror or str(e)
    if fs.f_flag & os.ST_RDONLY:
        return "its file system is mounted read-only"
    mode = f"mode {st.st_mode & 0o7777:04o}, owner {st.st_uid}:{st.st_gid}"
    uid = os.geteuid()
    granted = (uid == 0 or st.st_mode & 0o002
               or (st.st_uid == uid and st.st_mode & 0o200)
               or (st.st_gid in (os.getegid(), *os.getgroups()) and st.st_mode & 0o020))
    if granted:
        return f"{mode}, so an attribute forbids it (immutable? lsattr {name})"
    return f"{mode}"
