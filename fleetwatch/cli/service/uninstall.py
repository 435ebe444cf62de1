"""``fleetwatch service uninstall``, step by step: stop and disable the unit, remove it, and
with ``--purge`` the config, the drop-ins and the state directory (kept while another
fleetwatch unit shares it). The system user is never removed.
"""

from __future__ import annotations

import glob
import os
import re
import shutil

from fleetwatch.cli import units
from fleetwatch.cli.service.task import Task


class Uninstall(Task):
    """One uninstall: :meth:`run` takes the steps in order."""

    def run(self) -> int:
        service = self.service
        unit_path = self.path(f"{units.UNIT_DIR}/{service.unit}")
        config_path = self.args.config or installed_config(unit_path) or service.config_path
        if self.root:
            for link in glob.glob(self.path(f"{units.UNIT_DIR}/*.wants/{service.unit}")):
                os.unlink(link)
                self.say(f"removed {link}", changed=True)
        elif os.path.exists(unit_path):
            now = ["--now"] if self.system.booted() else []
            self.systemctl("disable", *now, service.unit, check=False)
        if os.path.exists(unit_path):
            os.unlink(unit_path)
            self.say(f"removed {unit_path}", changed=True)
            if not self.root and self.system.booted():
                self.systemctl("daemon-reload", check=False)
        else:
            self.say(f"no unit {unit_path}")
        if self.args.purge:
            self.purge(config_path)
        else:
            state = f", {self.path('/var/lib/' + service.state_directory)}" \
                if service.state_directory else ""
            self.say(f"kept {self.path(config_path)}{state} (--purge removes them)")
        if not self.changed:
            self.say("nothing changed")
        return 0

    def purge(self, config_path: str) -> None:
        for path in (self.path(config_path),):
            if os.path.exists(path):
                os.unlink(path)
                self.say(f"removed {path}", changed=True)
        dropins = self.path(f"{units.UNIT_DIR}/{self.service.unit}.d")
        if os.path.isdir(dropins):
            shutil.rmtree(dropins)
            self.say(f"removed {dropins}", changed=True)
        state = self.service.state_directory
        if state == "fleetwatch":    # shared by the sinks and schedulers (and holds agent/)
            users = [os.path.basename(u) for u in
                     glob.glob(self.path(f"{units.UNIT_DIR}/fleetwatch-*.service"))]
            if users:
                self.say(f"kept {self.path(units.STATE_ROOT)} (used by {', '.join(users)})")
                return
        if state:
            path = self.path(f"/var/lib/{state}")
            if os.path.isdir(path):
                shutil.rmtree(path)
                self.say(f"removed {path}", changed=True)
        for empty in (self.path(units.STATE_ROOT), self.path(units.CONFIG_DIR)):
            try:
                os.rmdir(empty)
            except OSError:
                pass    # not empty, or not there


def installed_config(unit_path: str) -> str | None:
    """The ``--config`` path of an installed unit's ExecStart=, if it can be read."""
    try:
        with open(unit_path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return None
    found = re.search(r"^ExecStart=.*\s--config\s+(\S+)\s*$", text, re.M)
    return found.group(1) if found else None
