"""This machine's own root booted under systemd-nspawn, for running the units under a real
systemd (docs/development/decisions.md#a-real-systemd): read-only underneath, a throwaway overlay on top, no
network (``--private-network``), gone at poweroff. Root only.

fleetwatch is built for the container on the host before booting (the container has no
network): a wheelhouse, and a virtualenv made from the system's Python outside /root, /home
and /tmp (what the units can execute). Both are kept between runs under :data:`BASE`, keyed
by a hash of the sources, so a second run reuses them.
"""

from __future__ import annotations

import configparser
import fcntl
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

from support.fleet import wait_for

REPO = Path(__file__).resolve().parents[2]
#: the virtualenvs and the mount points; outside /tmp, /root and /home on purpose
BASE = Path(os.environ.get("FLEETWATCH_NSPAWN_DIR", "/var/lib/fleetwatch-nspawn-test"))
SYSTEM_PYTHON = "/usr/bin/python3"
#: what the units need (the history *sink* writes JSON lines; pyspark stays out), and the
#: deployment's prometheus sink and devices (tests/integration/test_ansible_systemd.py)
EXTRAS = "sinks,scheduler,graphite,prometheus,snmp"
#: carbon-cache as the Ansible role installs it (fleetwatch_carbon_packages), in the wheelhouse
CARBON = ("carbon==1.1.10", "whisper==1.1.10", "twisted==26.10.0")
#: a clean environment for what runs inside
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
       "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "SYSTEMD_PAGER": "", "SYSTEMD_COLORS": "0"}


def why_not() -> str | None:
    """Why nspawn cannot run here, or None."""
    if os.geteuid() != 0:
        return "systemd-nspawn needs root"
    for tool in ("systemd-nspawn", "nsenter", "mount", "umount"):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt-get install systemd-container, or make install)"
    if not os.access(SYSTEM_PYTHON, os.X_OK):
        return f"no {SYSTEM_PYTHON} to make the services' virtualenv from"
    return None


# ---------------------------------------------------------------- the virtualenv

def _sources() -> list[Path]:
    """What a wheel is built from: the packages setup.cfg lists and the build files."""
    cfg = configparser.ConfigParser()
    cfg.read(REPO / "setup.cfg")
    tops = {line.split(".")[0].strip() for line in cfg["options"]["packages"].splitlines()
            if line.strip() and not line.strip().startswith("#")}
    found = [REPO / name for name in ("setup.cfg", "pyproject.toml", "README.md")
             if (REPO / name).exists()]
    for top in sorted(tops):
        found += sorted(p for p in (REPO / top).rglob("*")
                        if p.is_file() and "__pycache__" not in p.parts)
    return found


def _key(files: list[Path]) -> str:
    digest = hashlib.sha256(f"{EXTRAS} {CARBON}\n".encode())
    digest.update(subprocess.run([SYSTEM_PYTHON, "--version"], capture_output=True,
                                 text=True, timeout=30).stdout.encode())
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


@dataclass(frozen=True)
class Build:
    """fleetwatch for the container: its wheels and a virtualenv installed from them."""

    wheels: Path
    venv: Path

    @property
    def fleetwatch(self) -> str:
        return str(self.venv / "bin/fleetwatch")

    @property
    def wheel(self) -> Path:
        return next(self.wheels.glob("fleetwatch-*.whl"))


def build() -> Build:
    """The build of the current sources, made if not there yet (about 15 s; pip's cache and
    the configured index serve the dependencies): a wheelhouse of fleetwatch and everything
    it needs with :data:`EXTRAS` (an offline ``pip install --no-index --find-links`` inside
    the container), and a virtualenv of the system's Python installed from it."""
    files = _sources()
    path, _ = _once("build", _key(files), lambda path: _build(files, path))
    return Build(path / "wheels", path / "venv")


def _once(kind: str, key: str, make) -> tuple[Path, str]:
    """:data:`BASE`/KIND-KEY made by ``make(path)`` if not there yet, and what ``make``
    returned (kept in its ``.complete`` marker). pytest-xdist's workers ask at the same
    moment: under one lock, one makes, the others wait and reuse; an earlier KIND (other
    sources) is removed first, one at a time being kept."""
    BASE.mkdir(mode=0o755, parents=True, exist_ok=True)
    with open(BASE / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = BASE / f"{kind}-{key}"
        marker = path / ".complete"
        if marker.exists():
            return path, marker.read_text()
        for old in BASE.glob(f"{kind}-*"):
            shutil.rmtree(old, ignore_errors=True)
        try:
            said = make(path)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        marker.write_text(said)
        return path, said


def _build(files: list[Path], path: Path) -> str:
    done = Build(path / "wheels", path / "venv")
    src = BASE / f"src-{os.getpid()}"       # a copy: pip builds in the tree it is given
    pip = [str(done.venv / "bin/pip"), "--disable-pip-version-check", "--quiet"]
    try:
        for f in files:
            (src / f.relative_to(REPO)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(f, src / f.relative_to(REPO))
        subprocess.run([SYSTEM_PYTHON, "-m", "venv", str(done.venv)], check=True,
                       timeout=120, capture_output=True)
        # carbon's setup.py installs under /opt/graphite without GRAPHITE_NO_PREFIX
        subprocess.run([*pip, "wheel", "--wheel-dir", str(done.wheels), f"{src}[{EXTRAS}]",
                        *CARBON], check=True, timeout=600, capture_output=True,
                       env={**os.environ, "GRAPHITE_NO_PREFIX": "True"})
        subprocess.run([*pip, "install", "--no-index", "--find-links", str(done.wheels),
                        f"{done.wheel}[{EXTRAS}]"], check=True, timeout=300,
                       capture_output=True)
    except subprocess.CalledProcessError as e:
        raise AssertionError(f"building {path} failed: {e.stderr}") from None
    finally:
        shutil.rmtree(src, ignore_errors=True)
    return ""


def agent_deb() -> tuple[Path, Path, Path]:
    """``make dist``'s sdist, wheel and agent package of the current sources and commit
    (packaging/dist.py, about 40 s), built once for the modules that install the package
    and kept under :data:`BASE` (:func:`_once`, as :func:`build`)."""
    files = _sources() + sorted(p for p in (REPO / "packaging").rglob("*") if p.is_file()
                                and "__pycache__" not in p.parts)
    # the files' date: dist.py's SOURCE_DATE_EPOCH, or the last commit's time
    epoch = os.environ.get("SOURCE_DATE_EPOCH") or subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True,
        text=True, timeout=30).stdout.strip()

    def make(path: Path) -> str:
        res = subprocess.run([sys.executable, str(REPO / "packaging/dist.py"), "--out",
                              str(path / "out"), "--work", str(path / "work")],
                             capture_output=True, text=True, timeout=600)
        if res.returncode != 0:
            raise AssertionError(f"packaging/dist.py failed:\n{res.stdout}\n"
                                 f"{res.stderr[-4000:]}")
        shutil.rmtree(path / "work", ignore_errors=True)
        return res.stdout           # the three paths it made, a line each
    _, made = _once("deb", f"{_key(files)}-{epoch}", make)
    return tuple(Path(line) for line in made.split())


def booted(log: Path, shared: tuple[Path, ...] = ()) -> Container:
    """A booted container (skips the test where nspawn cannot run); close() it. ``shared``:
    host directories under /tmp or /var/tmp to show inside too (:class:`Container`)."""
    import pytest
    reason = why_not()
    if reason:
        pytest.skip(reason)
    box = Container(log, shared)
    try:
        return box.boot()
    except RuntimeError as e:
        pytest.skip(f"cannot boot a container here: {e}")
    except BaseException:
        box.close()
        raise


# ---------------------------------------------------------------- the container

def overlaid(shared: tuple[Path, ...]) -> list[Path]:
    """The directories to overlay so that each of ``shared`` under /tmp or /var/tmp shows
    inside at its own path: the top one under /tmp (or /var/tmp) holding it, once.
    systemd-nspawn makes an overlay's mount point with one mkdir, not ``mkdir -p``, and the
    container's /tmp is empty: ``/tmp/a/fleetwatch`` itself would fail with "Creating mount
    point for overlay ... No such file or directory" where ``/tmp/a`` succeeds."""
    tops: list[Path] = []
    for d in shared:
        path = Path(os.path.abspath(d))
        for base in (Path("/tmp"), Path("/var/tmp")):
            if path.is_relative_to(base) and path != base:
                top = base / path.relative_to(base).parts[0]
                if top not in tops:
                    tops.append(top)
    return tops


class Container:
    """One booted container; :meth:`close` powers it off and unmounts, whatever happened."""

    def __init__(self, log: Path, shared: tuple[Path, ...] = ()):
        #: host directories the container's own /tmp would hide, shown at the same path
        #: through a throwaway overlay (writes inside never reach the host)
        self.shared = overlaid(shared)
        self.name = f"fwtest-{os.getpid()}"
        self.root = BASE / f"root-{os.getpid()}"
        self.log = log
        self.mounted = False
        self.nspawn: subprocess.Popen | None = None
        self.pid1 = 0

    def boot(self, timeout: float = 60) -> Container:
        """Mount / read-only at :attr:`root` and boot it; raises RuntimeError when the
        bind mount is refused (no privilege for it here)."""
        self.root.mkdir(parents=True, exist_ok=True)
        for argv in (["mount", "--bind", "/", str(self.root)],
                     ["mount", "-o", "remount,bind,ro", str(self.root)]):
            res = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            if res.returncode != 0:
                self.close()
                raise RuntimeError(f"{' '.join(argv)}: {res.stderr.strip()}")
            self.mounted = True
        with open(self.log, "wb") as out:
            self.nspawn = subprocess.Popen(
                self.argv(), stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True)
        self.pid1 = wait_for(self._systemd, timeout, 0.1, "the container's systemd")
        wait_for(lambda: self.sh("systemctl is-system-running", timeout=10).stdout.strip()
                 in ("running", "degraded"), timeout, 0.2, "the container to boot")
        return self

    def argv(self) -> list[str]:
        """The systemd-nspawn command line that boots :attr:`root`."""
        return ["systemd-nspawn", "-D", str(self.root), "--volatile=overlay",
                "--register=no", "--keep-unit", "--link-journal=no",
                f"--uuid={uuid.uuid4().hex}", "--private-network", "-M", self.name,
                *(f"--overlay={d}::{d}" for d in self.shared), "-b"]

    def _systemd(self) -> int:
        if self.nspawn.poll() is not None:
            raise AssertionError(f"systemd-nspawn exited {self.nspawn.returncode}:\n"
                                 f"{self.log.read_text(errors='replace')[-3000:]}")
        try:
            children = Path(f"/proc/{self.nspawn.pid}/task/{self.nspawn.pid}/children")
            for pid in children.read_text().split():
                if Path(f"/proc/{pid}/comm").read_text().strip() == "systemd":
                    return int(pid)
        except OSError:
            pass
        return 0

    def sh(self, script: str, timeout: float = 60, check: bool = False
           ) -> subprocess.CompletedProcess:
        """Run a bash script inside (as root, in the container's namespaces)."""
        res = subprocess.run(["nsenter", "-t", str(self.pid1), "-a", "bash", "-c", script],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             timeout=timeout, env=ENV, start_new_session=True)
        if check and res.returncode != 0:
            raise AssertionError(f"inside the container, exit {res.returncode}: {script}\n"
                                 f"{res.stdout}\n{res.stderr}")
        return res

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """``systemctl show`` properties of a unit."""
        out = self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props),
                      check=True).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str) -> list[tuple[int, str]]:
        """(priority, message) of each line the unit's processes logged."""
        out = self.sh(f"journalctl -u {unit} -o json --no-pager", check=True).stdout
        lines = []
        for text in out.splitlines():
            entry = json.loads(text)
            message = entry.get("MESSAGE", "")
            if isinstance(message, list):      # not UTF-8: journald sends the bytes
                message = bytes(message).decode("utf-8", "replace")
            if entry.get("SYSLOG_IDENTIFIER", "").startswith("fleetwatch-"):
                lines.append((int(entry.get("PRIORITY", 6)), message))
        return lines

    def close(self, timeout: float = 60) -> None:
        """Power off (kill PID 1 if it does not go), then unmount; safe to call twice."""
        if self.nspawn is not None and self.nspawn.poll() is None:
            if self.pid1:
                try:
                    self.sh("systemctl poweroff", timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            try:
                self.nspawn.wait(timeout)
            except subprocess.TimeoutExpired:
                if self.pid1:
                    os.kill(self.pid1, signal.SIGKILL)
                try:
                    self.nspawn.wait(30)
                except subprocess.TimeoutExpired:
                    self.nspawn.kill()
                    self.nspawn.wait(30)
        if self.mounted:
            res = subprocess.run(["umount", str(self.root)], capture_output=True, timeout=60)
            if res.returncode != 0:
                subprocess.run(["umount", "--lazy", str(self.root)], timeout=60)
            self.mounted = False
        try:
            self.root.rmdir()
        except OSError:
            pass
