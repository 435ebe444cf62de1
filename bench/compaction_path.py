"""What keeping the path costs compaction (issue 20): the same landing lines compacted by this
tree and by the version before the tables' ``path`` column (commit BEFORE, from ``git
archive``), each run a fresh process on a fresh copy of the lake, on local[2].

The landing lines come from fleetwatch/lake/synth.py with ``sites``: half the hosts behind sites,
their lines naming a path of two routers (``r0,site-1``), the others none (the column then
holds ``[router]``). The previous version reads the same lines and ignores ``path``. Prints,
per round, both times and the tables' bytes, then the medians and the ratios
(this tree / previous: time, also per round, where the two runs are nearest in time; bytes).

    python bench/compaction_path.py [--events 300000] [--files 8] [--rounds 3]
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
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import write_section  # noqa: E402  (bench/results.py)

HEADING = "## History compaction: the path column"
#: the last commit whose compaction wrote no ``path`` column
BEFORE = "9ff175cfe77966bbf1540dc84831b06e3480d669"
CONF = {"spark.driver.memory": "2g", "spark.sql.shuffle.partitions": "2"}
#: the child: one compaction of LAKE with the packages of TREE, timed; prints JSON
CHILD = """
import json, sys, time
sys.path.insert(0, sys.argv[1])
from fleetwatch.lake.spark import session
from fleetwatch.lake.compact import compact
from fleetwatch.lake.settings import HistorySettings
spark = session("local[2]", json.loads(sys.argv[3]))
t = time.monotonic()
summary = compact(spark, HistorySettings(lake=sys.argv[2], processed="delete"),
                  out=lambda line: None)
seconds = time.monotonic() - t
spark.stop()
print(json.dumps({"events": summary.events, "rows": summary.rows, "seconds": seconds}))
"""


def previous(work: str) -> str:
    """The fleetwatch and sinks packages of BEFORE, unpacked under ``work``."""
    tree = os.path.join(work, "before")
    archive = os.path.join(work, "before.tar")
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", archive, BEFORE, "fleetwatch",
                    "sinks"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    return tree


def tables_bytes(lake: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f))
               for d, _, files in os.walk(os.path.join(lake, "tables")) for f in files
               if f.endswith(".parquet"))


def measure(tree: str, pristine: str, work: str) -> dict:
    lake = os.path.join(work, "lake")
    shutil.rmtree(lake, ignore_errors=True)
    shutil.copytree(pristine, lake)
    res = subprocess.run([sys.executable, "-c", CHILD, tree, lake, json.dumps(CONF)],
                         capture_output=True, text=True, cwd=tree, timeout=1800,
                         env={**os.environ, "PYTHONPATH": tree})
    if res.returncode != 0:
        raise SystemExit(f"compaction with {tree} failed: {res.stderr.strip()[-2000:]}")
    got = json.loads(res.stdout.strip().splitlines()[-1])
    got["bytes"] = tables_bytes(lake)
    return got


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=300_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", help="write the figures into this markdown file")
    args = ap.parse_args(argv)
    from fleetwatch.lake import synth
    work = tempfile.mkdtemp(prefix="fw-bench-path-")
    try:
        pristine = os.path.join(work, "pristine")
        paths = synth.write_files(os.path.join(pristine, "landing"), args.events,
                                  files=args.files, hosts=200, sites=4)
        size = sum(os.path.getsize(p) for p in paths)
        print(f"generated {args.events} events ({size / 1e6:.0f} MB), half the hosts "
              f"behind 4 sites", flush=True)
        trees = {"this tree": str(ROOT), "previous": previous(work)}
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for name in order:
                got = measure(trees[name], pristine, work)
                runs[name].append(got)
                print(f"round {r + 1}: {name:9} {got['seconds']:6.1f}s, "
                      f"{got['rows']} rows, tables {got['bytes'] / 1e6:.1f} MB", flush=True)
        med = {name: (statistics.median(g["seconds"] for g in got),
                      statistics.median(g["bytes"] for g in got))
               for name, got in runs.items()}
        now, before = med["this tree"], med["previous"]
        lines = [f"- {name}: {s:.1f} s ({args.events / s:,.0f} events/s), tables "
                 f"{b / 1e6:.1f} MB (medians of {args.rounds})" for name, (s, b) in med.items()]
        pairs = [a["seconds"] / b["seconds"]
                 for a, b in zip(runs["this tree"], runs["previous"])]
        lines.append(f"- ratio this tree / previous: time {now[0] / before[0]:.2f} (per "
                     f"round: {', '.join(f'{p:.2f}' for p in pairs)}; their median "
                     f"{statistics.median(pairs):.2f}), bytes {now[1] / before[1]:.3f}")
        print("\n".join(lines))
        if args.results:
            write_section(
                args.results, HEADING,
                f"python bench/compaction_path.py --events {args.events} --files "
                f"{args.files} --rounds {args.rounds}", "\n".join(lines),
                f"The same landing lines (half the hosts behind sites) compacted on "
                f"local[2] by this tree and by the version before the `path` column "
                f"({BEFORE[:7]}), each run a fresh process, rounds alternating which goes "
                f"first; load average {os.getloadavg()[0]:.1f} at the end.")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
