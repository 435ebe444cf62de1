"""The baseline release: the fleetwatch the compatibility tests run beside this tree's.

The baseline is the previous release (:func:`previous`): the newest release tag in this
tree's history but not on its own commit, else the commit CHANGELOG.md's line
``Compatibility baseline: COMMIT`` names (until the first tag, the last tree before 1.0.0). Its
packages come from its own tree, ``git archive COMMIT``, into a directory of their own that
its processes find first on ``PYTHONPATH``: the suite's interpreter and third-party packages,
the baseline's fleetwatch code. What a wheel of it would hold is exactly those packages
with their data files (setup.cfg's ``packages``, whose data live inside them), so nothing
is built: this venv has no ``wheel`` for ``pip install``'s build, and pip's isolated build
would need an index, which the tests do not use. ``python -P`` keeps the working directory
(this checkout, when pytest runs from it) off ``sys.path``, where it would come first.

The directory is made once per run and commit, under the run's temporary directory and a
lock, so pytest-xdist's workers share it. A checkout without the commit (a shallow clone,
an unpacked sdist) cannot run these tests: :func:`missing` says why, to skip with.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from support import ROOT
from support.fleet import Fleet, Proc

#: the commit before issue 38's release when the changelog does not name one yet
DEFAULT = "8346784"
LINE = re.compile(r"^Compatibility baseline:\s*`?([A-Za-z0-9][A-Za-z0-9._/-]*)`?\s*$",
                  re.MULTILINE)


def commit(changelog: Path = ROOT / "CHANGELOG.md") -> str:
    """The baseline CHANGELOG.md names (its ``Compatibility baseline:`` line), else
    :data:`DEFAULT`."""
    if changelog.exists():
        found = LINE.search(changelog.read_text())
        if found:
            return found.group(1)
    return DEFAULT


def previous(changelog: Path = ROOT / "CHANGELOG.md", root: Path = ROOT) -> str:
    """The release this tree runs beside: the newest release tag (``vX.Y.Z``) in its history
    but not on its own commit (a tree at a tag is that release, whose previous one is the
    tag before), else the baseline ``changelog`` names (:func:`commit`: before the first
    tag, or in a clone without tags)."""
    def git(*args: str) -> str:
        res = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                             timeout=30)
        return res.stdout if res.returncode == 0 else ""
    head = git("rev-parse", "HEAD").strip()
    # an annotated tag's commit is its %(*objectname), a lightweight tag's its %(objectname)
    for line in git("tag", "--merged", "HEAD", "--list", "v[0-9]*", "--sort=-v:refname",
                    "--format=%(refname:short) %(objectname) %(*objectname)").splitlines():
        name, *shas = line.split()
        if head and shas[-1] != head:
            return name
    return commit(changelog)


def missing(rev: str) -> str | None:
    """Why the baseline ``rev`` cannot be had from this checkout, or None when it can."""
    try:
        res = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                              f"{rev}^{{commit}}"], capture_output=True, text=True)
    except OSError as e:
        return f"git cannot run ({e}): the compatibility tests need it and this history"
    if res.returncode == 0:
        return None
    shallow = (ROOT / ".git" / "shallow").exists()
    return (f"the baseline release {rev} (CHANGELOG.md) is not in this checkout's history"
            + (" (a shallow clone: fetch the whole history, e.g. fetch-depth: 0)" if shallow
               else "") + ": the compatibility tests need it")


def changed(rev: str, *paths: str) -> list[str]:
    """The files under ``paths`` that differ between ``rev`` and this working tree (those
    not committed and not ignored too)."""
    def git(*args: str) -> list[str]:
        return subprocess.run(["git", "-C", str(ROOT), *args, "--", *paths], check=True,
                              capture_output=True, text=True).stdout.split()
    return sorted(set(git("diff", "--name-only", rev))
                  | set(git("ls-files", "--others", "--exclude-standard")))


@dataclass(frozen=True)
class Release:
    """A fleetwatch release installed in ``path``: its packages, found first by its
    processes."""

    rev: str
    path: Path

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-P", "-m", "fleetwatch", *args]

    def env(self) -> dict[str, str]:
        return {"PYTHONPATH": str(self.path)}

    def version(self) -> str:
        """The ``fleetwatch.__version__`` its tree says (its agents' HELLO and REGISTER)."""
        text = (self.path / "fleetwatch" / "__init__.py").read_text()
        return re.search(r"^__version__\s*=\s*[\"']([^\"']+)", text, re.MULTILINE).group(1)

    def origin(self, module: str = "fleetwatch") -> Path:
        """Where ``module`` is imported from by this release's processes."""
        res = subprocess.run([sys.executable, "-P", "-c",
                              f"import {module}; print({module}.__file__)"],
                             env={**os.environ, **self.env()}, capture_output=True, text=True,
                             timeout=30, check=True)
        return Path(res.stdout.strip())


def install(rev: str, shared: Path) -> Release:
    """The release ``rev`` from its own tree, in ``shared``/baseline-REV (made once: the
    first caller extracts it, under a lock, the others wait and reuse it)."""
    path = shared / f"baseline-{rev}"
    with open(shared / f"baseline-{rev}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (path / ".complete").exists():
            _extract(rev, path)
    return Release(rev, path)


def _extract(rev: str, path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    archive = path.with_suffix(".tar")
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), rev,
                    *_packages(rev)], check=True, capture_output=True, timeout=120)
    with tarfile.open(archive) as tar:
        tar.extractall(path, filter="data")
    archive.unlink()
    (path / ".complete").write_text(rev + "\n")


def _packages(rev: str) -> list[str]:
    """The top-level packages ``rev``'s setup.cfg lists (what its wheel holds)."""
    cfg = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:setup.cfg"], check=True,
                         capture_output=True, text=True).stdout
    block = re.search(r"^packages\s*=\s*\n((?:[ \t]+\S.*\n|[ \t]*#.*\n)+)", cfg, re.MULTILINE)
    names = [ln.strip() for ln in block.group(1).splitlines()
             if ln.strip() and not ln.strip().startswith("#")]
    return sorted({n.split(".")[0] for n in names})


class ReleaseFleet(Fleet):
    """``fleet``'s directory and processes, with the processes this view starts (routers,
    sinks, agents, schedulers, the CLI) run from ``release``: configs written as the
    fleet's, every process stopped with the fleet's."""

    def __init__(self, fleet: Fleet, release: Release):     # noqa: super's attributes
        self.fleet, self.release = fleet, release

    @property
    def root(self) -> Path:
        return self.fleet.root

    @property
    def procs(self) -> list[Proc]:
        return self.fleet.procs

    @property
    def state_url(self) -> str:
        return self.fleet.state_url

    def start(self, name: str, *args: str, env: dict | None = None) -> Proc:
        proc = Proc(name, self.release.argv(*args), self.root / f"{name}.log",
                    {**self.release.env(), **(env or {})})
        self.procs.append(proc)
        return proc

    def cli(self, *args: str, timeout: float = 30.0, check: bool = True,
            input: str | None = None) -> subprocess.CompletedProcess:
        res = subprocess.run(self.release.argv(*args), capture_output=True, text=True,
                             timeout=timeout, input=input,
                             env={**os.environ, **self.release.env()})
        if check and res.returncode != 0:
            raise AssertionError(f"fleetwatch {self.release.rev} {' '.join(args)} exited "
                                 f"{res.returncode}:\n{res.stdout}\n{res.stderr}")
        return res

    def command(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """The release's CLI is a process (this process holds this tree's code)."""
        return self.cli(*args, check=check)
