"""``fleetwatch history notebook [--dir DIR]``: JupyterLab on 127.0.0.1 with the fleet notebook
(notebooks/fleet-history.ipynb) on the lake of the operator config (:mod:`fleetwatch.lake.
jupyter`), until Ctrl-C or SIGTERM. The notebook directory (default LAKE/_notebooks) holds
the notebook's copy and ``history.yaml``, the settings this command runs with (``--lake``,
``--master``, ``--remote`` included), which the notebook opens. Prints the URL to open
(with its token). Exit status: 0 once stopped; 1 when JupyterLab did not start; 69 without
the ``notebook`` extra (JupyterLab), PySpark or Java."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

HELP = "open the fleet notebook in JupyterLab on 127.0.0.1, on the configured lake"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", metavar="DIR",
                   help="the notebook directory JupyterLab serves (default LAKE/_notebooks)")


def run(args, settings) -> int:
    from fleetwatch.optional import MissingDependency, optional_import
    from fleetwatch.lake import jupyter
    try:
        for module in ("jupyterlab", "ipykernel"):
            optional_import(module, "fleetwatch history notebook")
    except MissingDependency as e:
        print(f"fleetwatch history notebook: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    directory = args.dir or os.path.join(settings.lake, "_notebooks")
    notebook = jupyter.prepare(directory, settings)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with open(os.path.join(directory, "jupyterlab.log"), "ab") as log:
        try:
            lab = jupyter.start(directory, log=log)
        except jupyter.JupyterError as e:
            print(f"fleetwatch history notebook: {e} (log: {log.name})", file=sys.stderr)
            return 1
    try:
        print(f"JupyterLab on {notebook}, lake {settings.lake}; open:\n  {lab.url}\n"
              f"(Ctrl-C stops it; its log: {log.name})", flush=True)
        while not stop.wait(0.5):
            if lab.proc.poll() is not None:
                print(f"fleetwatch history notebook: JupyterLab exited with status "
                      f"{lab.proc.returncode} (log: {log.name})", file=sys.stderr)
                return 1
    finally:
        lab.stop()
    return 0
