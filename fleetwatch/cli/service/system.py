"""The running system as ``fleetwatch service`` sees it: the effective user, system users and
their ids, whether systemd runs this machine, and running a command (``useradd``,
``systemctl``). Tests pass a fake.
"""

from __future__ import annotations

import os
import pwd
import subprocess


class System:
    """What is asked of the running system; tests pass a fake."""

    def euid(self) -> int:
        return os.geteuid()

    def user_exists(self, name: str) -> bool:
        try:
            pwd.getpwnam(name)
            return True
        except KeyError:
            return False

    def booted(self) -> bool:
        """Whether systemd runs this machine (sd_booted(3)); not in most containers."""
        return os.path.isdir("/run/systemd/system")

    def ids(self, name: str) -> tuple[int, int]:
        entry = pwd.getpwnam(name)
        return entry.pw_uid, entry.pw_gid

    def groups(self, name: str, gid: int) -> list[int]:
        return os.getgrouplist(name, gid)

    def run(self, argv: list[str]) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            return subprocess.CompletedProcess(argv, 127, "", f"{argv[0]}: command not found")
