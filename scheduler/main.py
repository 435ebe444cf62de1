"""``fleetwatch scheduler --config PATH [--list [--json]]``: run a scheduler, or show its jobs.

``--list`` reads the registry once and prints the job table (agent, plugin, interval,
timeout, next run) the scheduler would run, without starting anything: no socket, no key.
"""

from __future__ import annotations

import importlib.util
import json
import logging
import os
import signal
import sys
import time

from fleetwatch import logs
from fleetwatch.config import load
from fleetwatch.display import iso, table
from scheduler.config import DEFAULT_PATH, SchedulerConfig

log = logging.getLogger(__name__)



def add_arguments(parser) -> None:
    parser.add_argument("--config", default=DEFAULT_PATH, metavar="PATH",
                        help=f"scheduler config (default {DEFAULT_PATH})")
    parser.add_argument("--list", action="store_true",
                        help="print the job table from the registry and exit")
    parser.add_argument("--json", action="store_true", help="with --list: one JSON document")


def job_table(rows: list[dict], config: SchedulerConfig, now: float) -> dict:
    """The ``--list`` document: one entry per job, sorted by hostname and plugin."""
    from collections import Counter
    from scheduler.jobs import jobs_from_rows
    notes: Counter = Counter()
    jobs = jobs_from_rows(rows, config.min_interval, notes)
    entries = [{"hostname": j.hostname, "uuid": j.uuid, "plugin": j.plugin,
                "source": j.source, "interval": j.interval, "timeout": j.timeout,
                "next_run": iso(j.next_run(now))} for j in jobs.values()]
    entries.sort(key=lambda e: (e["hostname"] or "", e["uuid"], e["plugin"]))
    return {"jobs": entries, "on_demand": notes["on_demand"], "passive": notes["passive"]}


def list_jobs(config: SchedulerConfig, as_json: bool, now: float) -> int:
    from fleetwatch.store.reader import Reader, StateError
    from scheduler.service import read_registry
    reader = Reader(config.state_url)
    try:
        rows = read_registry(reader)
    except StateError as e:
        print(f"fleetwatch scheduler: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    finally:
        reader.close()
    doc = job_table(rows, config, now)
    if as_json:
        print(json.dumps(doc, indent=2))
        return 0
    shown = [{**e, "interval": f"{e['interval']:g}s",
              "timeout": f"{e['timeout']:g}s" if e["timeout"] else None} for e in doc["jobs"]]
    print(table(shown, ["hostname", "uuid", "plugin", "interval", "timeout", "next_run"]))
    if doc["on_demand"]:
        print(f"\n{doc['on_demand']} declared plugins have no interval (run on demand only)")
    if doc["passive"]:
        print(f"\n{doc['passive']} declared checks are passive (their agents make their "
              f"results: a device's SNMP checks)")
    return 0


def run(args) -> int:
    from fleetwatch.optional import MissingDependency
    if args.json and not args.list:
        print("fleetwatch scheduler: --json goes with --list", file=sys.stderr)
        return 2
    config = load(SchedulerConfig, args.config)   # ConfigError: the CLI exits 78
    try:
        if args.list:
            return list_jobs(config, args.json, time.time())
        logs.setup(config.log_level, config.sender_id)
        # one line per job run or job added would drown the log: the counters say it
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        logging.getLogger("apscheduler.executors").setLevel(logging.ERROR)
        from fleetwatch.security import check_own
        from fleetwatch.security import ClientKeys
        keys = ClientKeys(config.security)   # SecurityError: the CLI exits 78
        check_own(keys, "backend")
        if importlib.util.find_spec("apscheduler") is None:
            print("fleetwatch scheduler: needs the Python package 'apscheduler': "
                  "pip install 'fleetwatch[scheduler]'", file=sys.stderr)
            return os.EX_UNAVAILABLE
        from scheduler.service import Service
        service = Service(config, keys, config_path=args.config)
    except MissingDependency as e:
        print(f"fleetwatch scheduler: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, service.stop)
    signal.signal(signal.SIGHUP, service.reload)
    import zmq
    try:
        return service.run()
    except zmq.ZMQError as e:          # connecting to an endpoint libzmq refuses
        print(f"fleetwatch scheduler: {args.config}: routers: {e}", file=sys.stderr)
        return os.EX_CONFIG
