"""``fleetwatch history cluster start|stop|status [--workers N] [--dir DIR]``: a local Spark
standalone master and workers from the installed PySpark, for trying the history side on a
cluster on one machine (:mod:`fleetwatch.lake.cluster`). Their logs, pids and URLs live in
``--dir`` (default LAKE/_cluster). ``start`` prints the master's URL and web UI, and the
setting that points the history commands at it; with ``--connect`` it starts a Spark Connect
server on the cluster too and prints its ``sc://`` URL. Exit status: 0; 1 when the cluster did not
start, or runs already (start), or does not run (status); 69 without PySpark or Java."""

from __future__ import annotations

import argparse
import json
import os
import sys

HELP = "start, stop or show a local Spark standalone cluster (master and workers)"
#: the verb works without an operator config when --dir is given
CONFIG_OPTIONAL = True


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("start", "stop", "status"))
    p.add_argument("--workers", type=int, default=1, metavar="N",
                   help="start: workers to run (default 1)")
    p.add_argument("--cores", type=int, metavar="N",
                   help="start: cores each worker offers (default: the machine's, shared out)")
    p.add_argument("--memory", default="2g", metavar="SIZE",
                   help="start: memory each worker offers to executors (default 2g)")
    p.add_argument("--connect", action="store_true",
                   help="start: a Spark Connect server on the cluster too (its sc:// URL "
                        "for history.remote; it takes half the cluster's cores)")
    p.add_argument("--dir", metavar="DIR",
                   help="the cluster's logs, pids and URLs (default LAKE/_cluster)")
    p.add_argument("--json", action="store_true", help="status: print it as JSON")


def directory(args, settings) -> str:
    return args.dir or os.path.join(settings.lake, "_cluster")


def run(args, settings) -> int:
    from fleetwatch.lake import cluster
    where = os.path.abspath(directory(args, settings))
    if args.action == "start":
        try:
            c = cluster.start(where, workers=args.workers, cores=args.cores,
                              memory=args.memory, connect=args.connect, say=print)
        except cluster.ClusterError as e:
            print(f"fleetwatch history cluster: {e}", file=sys.stderr)
            return 1
        workers = sum(1 for name in c.pids if name.startswith("worker-"))
        print(f"master {c.master} (web UI {c.ui}), {workers} worker"
              f"{'s' if workers != 1 else ''}; logs in {c.directory}")
        print(f"use it: history.master: {c.master} in the operator config, or "
              f"--master {c.master}")
        if c.connect:
            print(f"Spark Connect server {c.connect}: history.remote: {c.connect}, or "
                  f"--remote {c.connect}")
        return 0
    if args.action == "stop":
        stopped = cluster.stop(where)
        print(f"stopped {', '.join(stopped)}" if stopped else f"no cluster runs from {where}")
        return 0
    state = cluster.status(where)
    if args.json:
        print(json.dumps(state))
    elif not state["running"]:
        print(f"no cluster runs from {state['directory']}")
    else:
        apps = ", ".join(state.get("applications", [])) or "none"
        if state["master"]:         # else a Connect server alone (the demo's warm Spark)
            print(f"master {state['master']} (web UI {state['ui']}): workers alive: "
                  f"{state.get('workers', '?')}, cores: {state.get('cores', '?')}, "
                  f"applications: {apps}")
        if state.get("connect"):
            print(f"Spark Connect server {state['connect']}")
        if "error" in state:
            print(f"fleetwatch history cluster: {state['error']}", file=sys.stderr)
    return 0 if state["running"] else 1
