"""Whether a unit's service user could execute what its ``ExecStart=`` names.

systemd answers a unit whose command it cannot run with ``203/EXEC`` and a restart loop;
``fleetwatch service install`` asks first (:func:`problem`) and refuses with one line. What
is followed: the command, each symlink on the way to the real file (a virtualenv's
``bin/python`` is a link to the interpreter it was made from), and a script's ``#!``
interpreter, the same way. Each path visited must be outside the directories the unit hides
(``ProtectHome=``, ``PrivateTmp=``: :func:`fleetwatch.cli.units.hidden_paths`), every directory
above it searchable by the user, the file executable, and a script readable.

Permission bits only (owner, group, other; ACLs are not read). A user that does not exist
yet is checked as "other", which is what a new system user with its own group is.
"""

from __future__ import annotations

import os
import stat
import typing
from dataclasses import dataclass

#: PATH of a service (systemd.exec(5), "Environment variables in spawned processes"), for
#: a ``#!/usr/bin/env NAME`` script
UNIT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: shebangs followed at most (a script run by a script...), symlinks per path at most
MAX_INTERPRETERS = 4
MAX_LINKS = 40


@dataclass(frozen=True)
class User:
    """Who the service runs as; ``uid`` None: a user not created yet."""

    name: str
    uid: int | None = None
    gids: frozenset[int] = frozenset()


def problem(command: str, user: User, hidden: typing.Sequence[str]) -> str | None:
    """Why ``user`` could not execute ``command`` under a unit hiding ``hidden`` (path
    prefixes ending in ``/``), or None when it could."""
    path, what = command, "the command"
    for _ in range(MAX_INTERPRETERS):
        script = _shebang(path)
        found = _reach(path, what, user, hidden, readable=script is not None)
        if found:
            return found
        if script is None:
            return None
        path, what = script, f"the interpreter of {path}"
    return f"{command}: more than {MAX_INTERPRETERS} interpreters deep"


def _reach(path: str, what: str, user: User, hidden: typing.Sequence[str],
           readable: bool) -> str | None:
    steps = _links(path)
    for step in steps:
        for prefix in hidden:
            if step.startswith(prefix) or step == prefix.rstrip("/"):
                via = "" if step == path else f" (through {path})"
                return f"{what}, {step}{via}, is under {prefix}, which the unit hides"
    real = steps[-1]
    for step in steps:
        for parent in _parents(step):
            found = _denied(parent, user, stat.S_IXUSR, "searchable")
            if found:
                return f"{what}, {real}: {found}"
    try:
        info = os.stat(real)
    except OSError as e:
        return f"{what}, {real}: {e.strerror}"
    if not stat.S_ISREG(info.st_mode):
        return f"{what}, {real}, is not a regular file"
    for bit, word in ((stat.S_IXUSR, "executable"), (stat.S_IRUSR, "readable")):
        if bit == stat.S_IRUSR and not readable:
            continue
        found = _denied(real, user, bit, word, info)
        if found:
            return f"{what}, {found}"
    return None


def _parents(path: str) -> list[str]:
    """The directories above ``path``, from ``/`` down, as the kernel walks them."""
    found = []
    while path != os.path.dirname(path):
        path = os.path.dirname(path)
        found.append(path)
    return found[::-1]


def _links(path: str) -> list[str]:
    """``path``, each target its symlinks lead to, and its real path, in order."""
    steps = [os.path.abspath(path)]
    for _ in range(MAX_LINKS):
        if not os.path.islink(steps[-1]):
            break
        target = os.readlink(steps[-1])
        steps.append(os.path.normpath(os.path.join(os.path.dirname(steps[-1]), target)))
    real = os.path.realpath(path)
    if real != steps[-1]:
        steps.append(real)
    return steps


def _denied(path: str, user: User, owner_bit: int, word: str,
            info: os.stat_result | None = None) -> str | None:
    try:
        info = info or os.stat(path)
    except OSError as e:
        return f"{path}: {e.strerror}"
    if user.uid == info.st_uid:
        allowed = info.st_mode & owner_bit
    elif info.st_gid in user.gids:
        allowed = info.st_mode & (owner_bit >> 3)
    else:
        allowed = info.st_mode & (owner_bit >> 6)
    if allowed:
        return None
    return (f"{path} is not {word} by user {user.name} "
            f"(mode {stat.S_IMODE(info.st_mode):04o}, owner {info.st_uid}:{info.st_gid})")


def _shebang(path: str) -> str | None:
    """The interpreter a script names on its ``#!`` line, resolved as the kernel and
    ``env`` would; None for a binary or an unreadable file (checked by the caller)."""
    try:
        with open(path, "rb") as f:
            line = f.readline(256)
    except OSError:
        return None
    if not line.startswith(b"#!"):
        return None
    words = line[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        name = words[2] if words[1] == "-S" and len(words) > 2 else words[1]
        for directory in UNIT_PATH.split(":"):
            candidate = os.path.join(directory, name)
            if os.access(candidate, os.X_OK):
                return candidate
        return os.path.join("/usr/bin", name)
    return words[0]
