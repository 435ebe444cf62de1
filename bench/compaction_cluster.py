"""Compaction on local[2] and on a Spark standalone cluster, against a bare Spark job.

The same synthetic landing events (bench/compaction.py's generator: one UTC day, 200
hosts) are compacted, each round on a fresh copy, four ways, each in a process of its own
(one SparkContext per process) whose Spark session is up before the clock starts:

- ``fleetwatch``: ``compact()`` as ``fleetwatch history compact`` runs it (dedupe by
  msg_id, the manifest's commit protocol, heartbeat_spans);
- ``bare``: a plain Spark job reading the same landing JSON with the same schema and
  writing the same five tables (the same rows, partitioned by date and sorted by host,
  the tables side by side from one cached read): no dedupe, no manifest, no spans, the
  limit for this work;

each on ``local[2]`` and on a standalone master with one worker of 2 cores started from
the installed PySpark (fleetwatch/lake/cluster.py, 127.0.0.1; owned: it ends with the
benchmark), stopped at the end. Prints events/s per way (median of ``--rounds``) and
fleetwatch's as a ratio to the bare job on the same master.

    python bench/compaction_cluster.py [--events 300000] [--files 8] [--rounds 3]
                                       [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import write_section  # noqa: E402  (bench/results.py)

HEADING = "## History compaction on a cluster"
JOBS = ("fleetwatch", "bare")
CONF = {"spark.driver.memory": "2g", "spark.executor.memory": "2g",
        "spark.sql.shuffle.partitions": "2"}


def bare(spark, paths: list[str], out: str) -> int:
    """The tables written straight from the landing lines; returns the events read."""
    from pyspark import StorageLevel
    from fleetwatch.lake import tables
    from fleetwatch.lake.schema import ORDER, PARTITION, TABLE_NAMES
    landing = tables.read_landing(spark, paths).persist(StorageLevel.MEMORY_AND_DISK)
    events = landing.count()
    names = [n for n in TABLE_NAMES if n in ORDER and n not in ("heartbeat_spans",
                                                                 "lifecycle", "drops")]

    def write(name):
        msgs = tables.messages(landing, name)     # no duplicates to resolve: no dedupe
        (tables.rows(msgs, name).coalesce(2).sortWithinPartitions(PARTITION, *ORDER[name])
         .write.mode("overwrite").partitionBy(PARTITION).parquet(os.path.join(out, name)))
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        list(pool.map(write, names))
    landing.unpersist()
    return events


def child(job: str, master: str, lake: str) -> dict:
    """One timed run in this process: {events, seconds}."""
    from fleetwatch.lake.spark import session
    spark = session(master, CONF)
    paths = sorted(str(p) for p in Path(lake, "landing").glob("*.jsonl"))
    t = time.monotonic()
    steps = {}
    if job == "fleetwatch":
        from fleetwatch.lake.compact import compact
        from fleetwatch.lake.settings import HistorySettings
        summary = compact(spark, HistorySettings(lake=lake, master=master,
                                                 processed="delete"), out=lambda line: None)
        events, steps = summary.events, summary.steps
    else:
        events = bare(spark, paths, os.path.join(lake, "bare"))
    seconds = time.monotonic() - t
    spark.stop()
    return {"events": events, "seconds": seconds, "steps": steps}


def measure(job: str, master: str, pristine: str, work: str) -> dict:
    lake = os.path.join(work, "lake")
    shutil.rmtree(lake, ignore_errors=True)
    shutil.copytree(pristine, lake)
    res = subprocess.run([sys.executable, __file__, "--child", job, master, lake],
                         capture_output=True, text=True, cwd=ROOT, timeout=1800)
    if res.returncode != 0:
        raise SystemExit(f"{job} on {master} failed: {res.stderr.strip()[-2000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", help="write the figures into this markdown file")
    ap.add_argument("--child", nargs=3, metavar=("JOB", "MASTER", "LAKE"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0

    from compaction import generate
    from fleetwatch.lake import cluster
    work = tempfile.mkdtemp(prefix="fw-bench-cluster-")
    try:
        pristine = os.path.join(work, "pristine")
        paths = generate(os.path.join(pristine, "landing"), args.events, args.files)
        size = sum(os.path.getsize(p) for p in paths)
        print(f"generated {args.events} events, {size / 1e6:.0f} MB", flush=True)
        c = cluster.start(os.path.join(work, "cluster"), workers=1, memory="3g",
                          owned=True)     # a killed benchmark takes its cluster along
        print(f"cluster {c.master} (web UI {c.ui})", flush=True)
        masters = {"local[2]": "local[2]", "standalone": c.master}
        runs: dict[tuple[str, str], list[dict]] = {}
        try:
            for r in range(args.rounds):
                for where, master in masters.items():
                    for job in (JOBS if r % 2 == 0 else JOBS[::-1]):
                        got = measure(job, master, pristine, work)
                        runs.setdefault((job, where), []).append(got)
                        steps = ", ".join(f"{k} {v:.1f}s" for k, v in got["steps"].items())
                        print(f"round {r + 1}: {job} on {where}: {got['seconds']:.1f}s, "
                              f"{got['events'] / got['seconds']:.0f} events/s"
                              + (f" ({steps})" if steps else ""), flush=True)
        finally:
            cluster.stop(c.directory)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def rate(job, where):
        return statistics.median(x["events"] / x["seconds"] for x in runs[job, where])
    lines = ["| master | fleetwatch compaction | bare Spark job | ratio |", "|---|---|---|---|"]
    for where in masters:
        fw, b = rate("fleetwatch", where), rate("bare", where)
        secs = statistics.median(x["seconds"] for x in runs["fleetwatch", where])
        bsecs = statistics.median(x["seconds"] for x in runs["bare", where])
        lines.append(f"| {where} | {fw / 1e3:.1f}k events/s ({secs:.1f} s) | "
                     f"{b / 1e3:.1f}k events/s ({bsecs:.1f} s) | **{fw / b:.2f}** |")
    body = "\n".join(lines)
    spread = rate("fleetwatch", "standalone") / rate("fleetwatch", "local[2]")
    extra = (f"{args.events} events ({size / 1e6:.0f} MB of landing JSON in {args.files} "
             f"files), medians of {args.rounds} rounds; standalone against local[2] "
             f"(fleetwatch): {spread:.2f}. Load average at the end: {os.getloadavg()[0]:.1f}.")
    print(f"\n{body}\n\n{extra}")
    if args.results:
        command = "python bench/compaction_cluster.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        write_section(Path(args.results), HEADING, command.strip(), body,
                      extra + "\n\n" + NOTES)
    return 0


NOTES = """\
Method: each run is a fresh process on a fresh copy of the landing files, timed from a
Spark session already up to the end of the job (the session's start, 7-12 s, is not
counted; on the cluster it includes an executor's start on the worker). The bare job
reads the landing JSON with the same schema and validity rules (fleetwatch/lake/tables.py
`read_landing`), caches it once, and writes the same five tables' rows side by side,
partitioned by date and sorted by host, with nothing of fleetwatch's own: no
deduplication by msg_id (its aggregation of the ids, the counts by type and date, the
observed row counts), no staging, intent and manifest, no heartbeat_spans. The standalone
cluster is one master and one worker of 2 cores on the same machine: master, worker,
executor and driver share its 2 cores, so it measures the cluster path's overhead, not a
cluster's speed. The machine is shared with other engineers' work: single rounds vary by
+-30 % and more, so read the ratios of several runs; the lead may rerun it on a quiet
machine."""


if __name__ == "__main__":
    sys.exit(main())
