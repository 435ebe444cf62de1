"""One ``fleetwatch service`` install or uninstall: what its steps share (target paths under
``--root``, the report of each step, files written atomically, ``systemctl`` calls) and
:class:`Failure`, how a step stops the command with one line and an exit status.

:class:`fleetwatch.cli.service.install.Install` and
:class:`fleetwatch.cli.service.uninstall.Uninstall` are the steps themselves.
"""

from __future__ import annotations

import os
import sys

from fleetwatch.cli import units
from fleetwatch.cli.service.system import System



class Failure(Exception):
    """Stop with one line on stderr and an exit status."""

    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status


class Task:
    """One install or uninstall, step by step, each step reported on ``out``."""

    def __init__(self, service: units.Service, args, system: System, out):
        self.service, self.args, self.system, self.out = service, args, system, out
        self.root = os.path.abspath(args.root) if args.root else None
        self.changed = 0
        if self.root is None and system.euid() != 0:
            raise Failure(os.EX_NOPERM, f"{args.action}ing a system service needs root: run it "
                                     f"with sudo, or pass --root DIR to write the files into "
                                     f"a prefix")

    def path(self, target: str) -> str:
        """Where a target-system path is written: under ``--root`` if given."""
        return self.at(self.root, target)

    @staticmethod
    def at(root: str | None, target: str) -> str:
        """``target`` (a path of the target system) under ``root``, if one is given."""
        return os.path.join(root, target.lstrip("/")) if root else target

    def say(self, text: str, changed: bool = False) -> None:
        self.changed += changed
        print(text, file=self.out)

    def systemctl(self, *argv: str, check: bool = True) -> bool:
        root = [f"--root={self.root}"] if self.root else []
        res = self.system.run(["systemctl", *root, *argv])
        if res.returncode != 0:
            text = " ".join((res.stderr or res.stdout or "").split()) or f"exit {res.returncode}"
            if check:
                raise Failure(os.EX_UNAVAILABLE, f"systemctl {' '.join(argv)}: {text}")
            print(f"fleetwatch service: warning: systemctl {' '.join(argv)}: {text}",
                  file=sys.stderr)
            return False
        return True

    def write(self, target: str, text: str, mode: int, owner: tuple[int, int] | None = None,
              what: str = "") -> bool:
        path = self.path(target)
        try:
            with open(path, encoding="utf-8") as f:
                if f.read() == text:
                    self.say(f"unchanged {path}")
                    return False
        except FileNotFoundError:
            pass
        except (OSError, UnicodeDecodeError):
            pass  # unreadable: replaced below
        try:
            os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
            tmp = f"{path}.fleetwatch-tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, mode)
            if owner is not None:
                os.chown(tmp, *owner)
            os.replace(tmp, path)
        except OSError as e:
            raise Failure(os.EX_CANTCREAT, f"cannot write {path}: {e.strerror}") from None
        self.say(f"wrote {path}{what}", changed=True)
        return True
