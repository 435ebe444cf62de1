"""A PATH for a test's subprocess with some programs left out (java, to check what a machine
without Java is told) and stand-ins put first."""

from __future__ import annotations

import os
from pathlib import Path


def path_without(directory: Path, *missing: str, first: Path | None = None) -> str:
    """A PATH of ``first`` (if given) and ``directory``, where every program of /usr/bin but
    ``missing`` is linked (Debian merges /bin into /usr/bin)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in os.listdir("/usr/bin"):
        if name not in missing and not (directory / name).is_symlink():
            (directory / name).symlink_to(Path("/usr/bin") / name)
    return os.pathsep.join(([str(first)] if first else []) + [str(directory)])
