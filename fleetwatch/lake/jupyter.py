"""JupyterLab on the fleet notebook (``fleetwatch history notebook``).

:func:`prepare` makes the notebook directory: a copy of notebooks/fleet-history.ipynb (kept
once there: the operator's edits are not overwritten) and ``history.yaml``, the ``history:``
section the command runs with (the operator config's, with ``--lake``, ``--master`` and
``--remote`` applied), which the notebook's first cell opens through ``FLEETWATCH_HISTORY``.
:func:`start` runs JupyterLab (``python -m jupyterlab`` of this interpreter, so its kernels
run this fleetwatch and PySpark) on 127.0.0.1 at a port the kernel picks, with a random
token, in a process group of its own that gets SIGTERM when the starting process ends
however it ends (:mod:`fleetwatch.lifeline`), and returns once the server's runtime file
says where it listens. Nothing leaves the machine: no update check, no news, no extension
manager asking PyPI, no terminals. No PySpark import.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fleetwatch.lifeline import die_with_parent

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "fleet-history.ipynb"
SETTINGS = "history.yaml"
#: what the notebook's first cell reads: an operator config, or a lake directory
ENV = "FLEETWATCH_HISTORY"
QUIET = ("--LabApp.extension_manager=readonly",
         "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
         "--LabApp.news_url=None", "--ServerApp.terminals_enabled=False")


class JupyterError(RuntimeError):
    """JupyterLab did not start; ``str()`` is the one line to show."""


@dataclass
class Lab:
    proc: subprocess.Popen
    url: str              # http://127.0.0.1:PORT/lab/tree/fleet-history.ipynb?token=...
    port: int
    token: str
    directory: str

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM to its process group (server and kernels), SIGKILL past ``timeout``."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            if self.proc.poll() is not None:
                return
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue


def prepare(directory: str, settings) -> Path:
    """The notebook directory for ``settings`` (a HistorySettings); returns the notebook."""
    os.makedirs(directory, exist_ok=True)
    notebook = Path(directory) / NOTEBOOK.name
    if not notebook.exists():
        shutil.copyfile(NOTEBOOK, notebook)
    section = {k: v for k, v in dataclasses.asdict(settings).items() if v not in ("", {})}
    # JSON is YAML: one line the loader reads back exactly
    (Path(directory) / SETTINGS).write_text(json.dumps({"history": section}) + "\n")
    return notebook


def start(directory: str, host: str = "127.0.0.1", timeout: float = 60.0,
          log=subprocess.DEVNULL, clock=time.monotonic) -> Lab:
    """JupyterLab over ``directory`` (made by :func:`prepare`); stop it with ``Lab.stop``."""
    directory = os.path.abspath(directory)
    runtime = os.path.join(directory, ".jupyter-runtime")
    os.makedirs(runtime, exist_ok=True)
    token = secrets.token_hex(24)
    env = {**os.environ, ENV: os.path.join(directory, SETTINGS),
           "JUPYTER_RUNTIME_DIR": runtime}
    argv = [sys.executable, "-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={host}",
            "--ServerApp.port=0", f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={directory}", *QUIET]
    if os.geteuid() == 0:
        argv.append("--ServerApp.allow_root=True")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, env=env, cwd=directory,
                            start_new_session=True,   # Lab.stop: the server and its kernels
                            preexec_fn=die_with_parent())   # and SIGTERM if we are killed
    info = os.path.join(runtime, f"jpserver-{proc.pid}.json")
    deadline = clock() + timeout
    while clock() < deadline:
        if proc.poll() is not None:
            raise JupyterError(f"JupyterLab exited at start with status {proc.returncode}")
        try:
            with open(info, encoding="utf-8") as f:
                port = json.load(f)["port"]
            break
        except (FileNotFoundError, ValueError, KeyError):
            time.sleep(0.2)
    else:
        Lab(proc, "", 0, token, directory).stop()
        raise JupyterError(f"JupyterLab did not start within {timeout:.0f} s")
    url = f"http://{host}:{port}/lab/tree/{NOTEBOOK.name}?token={token}"
    return Lab(proc, url, port, token, directory)
