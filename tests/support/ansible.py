"""Reading what ansible-playbook printed: the PLAY RECAP per host and the tasks that changed;
where the roles are (ansible/ of this checkout); a config the roles wrote, loaded by its
process's config class."""

from __future__ import annotations

import re
from pathlib import Path

#: the Ansible roles, playbooks and example inventory of this checkout
ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP per host: {"router-1": {"ok": 19, "changed": 0, ...}}."""
    hosts = {}
    for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", output, re.M):
        hosts[host] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)}
    return hosts


def changed_tasks(output: str) -> list[str]:
    """The tasks that reported a change, for a readable failure."""
    found, task = [], ""
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip("* ")
        elif line.startswith("changed:"):
            found.append(f"{task}: {line[:160]}")
    return found


def load_config(cls_path: str, path: Path):
    """The file at ``path`` loaded by fleetwatch's config class ``MODULE:CLASS`` (its own
    checks run)."""
    from importlib import import_module

    from fleetwatch.config import load
    module, name = cls_path.split(":")
    return load(getattr(import_module(module), name), str(path))
