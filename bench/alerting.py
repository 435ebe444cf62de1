"""Alerting: RESULTs per second one alerting sink evaluates, on SQLite and on PostgreSQL.

The sink's own write path (``AlertingSink.write``: check state machine, flap history, host
state, the ``checks`` table and the outbox, in one transaction per batch) is fed batches of
RESULT messages as the sink loop hands them over: AGENTS agents x PLUGINS plugins, each
result a status drawn so that about one check in ten changes state now and then (soft and
hard transitions, recoveries, alerts into the outbox). No channels are configured, so
nothing is delivered; the alert events and outbox rows are written all the same.

Baseline, same run and same database: the same results stored as plain rows (one INSERT
per result, same batches, one transaction per batch), i.e. what keeping the results costs
without evaluating them. The ratio says what the evaluation costs over that.

    .venv/bin/python bench/alerting.py [--count 20000] [--batch 100] [--results FILE]

PostgreSQL runs in a throwaway cluster (tests/support/pg.py) started with fsync off, as the tests
run it; SQLite is a file with the sink's own settings (WAL, synchronous=FULL).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sqlalchemy import Column, Float, Integer, MetaData, String, Table  # noqa: E402

from fleetwatch import protocol  # noqa: E402
from fleetwatch.protocol import Relayed  # noqa: E402
from sinks.state import db  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402

AGENTS, PLUGINS = 200, 5


def results(n: int, seed: int = 7) -> list[Relayed]:
    """``n`` RESULTs round-robin over the checks; ~10 % of checks flip status now and then."""
    rng = random.Random(seed)
    checks = [(f"agent-{a:04d}", f"check_{p}") for a in range(AGENTS) for p in range(PLUGINS)]
    status = {c: 0 for c in checks}
    out, t = [], 1_800_000_000.0
    for i in range(n):
        uuid, plugin = checks[i % len(checks)]
        if rng.random() < 0.1:
            status[(uuid, plugin)] = rng.choice((0, 0, 1, 2))
        t += 0.001
        s = status[(uuid, plugin)]
        msg = protocol.make("RESULT", uuid, clock=lambda: t, command_id=f"s:{i:024x}",
                            plugin=plugin, status=s, output=f"CHECK {('OK', 'WARNING', 'CRITICAL')[s]}"
                            f" - value {i % 97}", perfdata=[{"label": "v", "value": i % 97,
                                                             "uom": "", "warn": "50",
                                                             "crit": "90", "min": 0,
                                                             "max": None}],
                            started=t, duration=0.01)
        out.append(Relayed(uuid, "router-1", msg))
    return out


def run_sink(url: str, batches: list[list[Relayed]]) -> float:
    """Seconds the sink takes to evaluate every batch (tables created before timing)."""
    sink = AlertingSink(db.engine(url), clock=time.time, deliver=False)
    sink.start()
    try:
        start = time.perf_counter()
        for batch in batches:
            sink.write(batch)
        return time.perf_counter() - start
    finally:
        sink.close()


def run_plain(url: str, batches: list[list[Relayed]]) -> float:
    """Seconds to INSERT the same results as plain rows, one transaction per batch."""
    meta = MetaData()
    table = Table("bench_results", meta, Column("id", Integer, primary_key=True),
                  Column("uuid", String(64)), Column("plugin", String(255)),
                  Column("status", Integer), Column("output", String), Column("ts", Float))
    eng = db.engine(url)
    meta.create_all(eng)
    try:
        start = time.perf_counter()
        for batch in batches:
            with eng.begin() as conn:
                for r in batch:
                    m = r.message
                    conn.execute(table.insert(), {"uuid": r.uuid, "plugin": m.get("plugin"),
                                                  "status": m.get("status"),
                                                  "output": m.get("output"), "ts": m.ts})
        return time.perf_counter() - start
    finally:
        eng.dispose()


def measure(name: str, make_url, batches, n: int) -> dict:
    sink_s = run_sink(make_url(), batches)
    plain_s = run_plain(make_url(), batches)
    row = {"db": name, "sink": n / sink_s, "plain": n / plain_s}
    row["ratio"] = row["sink"] / row["plain"]
    print(f"{name:<11} sink {row['sink']:>8,.0f} results/s   plain inserts "
          f"{row['plain']:>8,.0f}/s   ratio {row['ratio']:.2f}", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20000, help="RESULTs per database")
    ap.add_argument("--batch", type=int, default=100, help="results per sink batch")
    ap.add_argument("--results", metavar="FILE", help="write the figures into this file "
                                                      "(bench/RESULTS.md)")
    args = ap.parse_args()
    msgs = results(args.count)
    batches = [msgs[i:i + args.batch] for i in range(0, len(msgs), args.batch)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fw-bench-alerting-") as tmp:
        counter = iter(range(1000))
        rows.append(measure("SQLite", lambda: f"sqlite:///{tmp}/state-{next(counter)}.db",
                            batches, args.count))
        from support.pg import PgCluster, find_bindir
        bindir = find_bindir()
        if bindir is None:
            print("PostgreSQL   skipped: no PostgreSQL binaries (apt-get install postgresql)")
        else:
            cluster = PgCluster(bindir).start()
            try:
                rows.append(measure("PostgreSQL", cluster.create_database, batches,
                                    args.count))
            finally:
                cluster.stop()
    if args.results:
        from results import write_section
        body = "\n".join(
            ["| database | sink evaluates (results/s) | plain INSERTs (rows/s) | ratio |",
             "|---|---|---|---|"] +
            [f"| {r['db']} | {r['sink']:,.0f} | {r['plain']:,.0f} | {r['ratio']:.2f} |"
             for r in rows])
        write_section(Path(args.results), "## Alerting sink: results evaluated per second",
                      f"python bench/alerting.py --count {args.count} --batch {args.batch}"
                      f" --results bench/RESULTS.md", body,
                      f"{AGENTS} agents x {PLUGINS} plugins, batches of {args.batch} as the "
                      "sink loop hands them over; about one check in ten changes state now "
                      "and then, so soft/hard transitions, recoveries and outbox rows are "
                      "written. PostgreSQL is the tests' throwaway cluster (fsync off).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
