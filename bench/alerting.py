"""Alerting: RESULTs per second one alerting sink evaluates, on SQLite and on PostgreSQL,
without and with the alert lifecycle around them.

The sink's own write path (``AlertingSink.write``: check state machine, flap history, host
state, the ``checks`` table and the outbox, in one transaction per batch) is fed batches of
RESULT messages as the sink loop hands them over: AGENTS agents x PLUGINS plugins, each
result a status drawn so that about one check in ten changes state now and then (soft and
hard transitions, recoveries, alerts into the outbox). No channels are configured, so
nothing is delivered; the alert events and outbox rows are written all the same.

Baseline, same run and same database: the same results stored as plain rows (one INSERT
per result, same batches, one transaction per batch), i.e. what keeping the results costs
without evaluating them. The ratio says what the evaluation costs over that.

The lifecycle run evaluates the same results with everything an operator adds around them:
every host under a parent (``alerting.dependencies``: the parent is a host of its own, UP),
acknowledgements on a tenth of the checks, downtimes (fixed, recurring by day and by cron,
flexible; a few cover hosts now) and silences. Its ratio to the plain sink's figure of the
same round is what the lifecycle costs (the issue's limit: at most 20 %, a ratio of 0.80 or
more). Each figure is the median of ``--rounds`` rounds, the runs of a round in turn.

    .venv/bin/python bench/alerting.py [--count 20000] [--batch 100] [--rounds 3] [--results FILE]

PostgreSQL runs in a throwaway cluster (tests/support/pg.py) started with fsync off, as the tests
run it; SQLite is a file with the sink's own settings (WAL, synchronous=FULL).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from sqlalchemy import Column, Float, Integer, MetaData, String, Table  # noqa: E402

from fleetwatch import protocol  # noqa: E402
from fleetwatch.config import build  # noqa: E402
from fleetwatch.protocol import Relayed  # noqa: E402
from sinks.alerting.acks import rules as acks  # noqa: E402
from sinks.alerting.acks import store as ackstore  # noqa: E402
from sinks.alerting.downtimes import store as downtimestore  # noqa: E402
from sinks.alerting.silences import store as alertstate  # noqa: E402
from sinks.alerting.config import AlertingConfig  # noqa: E402
from sinks.alerting.downtimes.rules import Downtime  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402
from fleetwatch.store import db, schema  # noqa: E402

AGENTS, PLUGINS = 1000, 2
PARENT = "switch-1"


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


def hostname(uuid: str) -> str:
    return "host-" + uuid.rsplit("-", 1)[1]


def registry(url: str) -> None:
    """The agents the registry would know: every host by name, and their parent."""
    eng = db.engine(url)
    try:
        db.create(eng, "registry")
        rows = [{"uuid": f"agent-{a:04d}", "hostname": hostname(f"agent-{a:04d}"),
                 "version": "bench", "first_seen": 0.0, "last_seen": 0.0}
                for a in range(AGENTS)]
        rows.append({"uuid": "agent-parent", "hostname": PARENT, "version": "bench",
                     "first_seen": 0.0, "last_seen": 0.0})
        with eng.begin() as conn:
            conn.execute(schema.agents.insert(), rows)
    finally:
        eng.dispose()


def lifecycle(url: str, now: float) -> AlertingConfig:
    """Parents, acknowledgements, downtimes and silences in the database at ``url``; the
    alerting config that puts every host under the parent."""
    eng = db.engine(url)
    try:
        db.create(eng, "alerting")
        with eng.begin() as conn:
            for a in range(0, AGENTS, 10):                      # a tenth of the checks acked
                uuid = f"agent-{a:04d}"
                ackstore.add(conn, acks.check_key(uuid, "check_0"), uuid, "check_0", 2, now,
                             "bench", "on it", a % 20 == 0, True, now + 86400)
            for i in range(40):
                host = hostname(f"agent-{i * 25:04d}")
                downtimestore.add(conn, [
                    Downtime(0, host, None, now - 60, now + 7200, comment="covers now"),
                    Downtime(0, host, "check_1", now + 3600, now + 7200),
                    Downtime(0, host, None, now - 86400, None, every="sun 02:00-04:00"),
                    Downtime(0, host, None, now - 86400, None, every="30 3 * * *",
                             duration=3600.0),
                    Downtime(0, "host-9*", None, now - 60, now + 7200, flexible=600.0),
                ][i % 5])
            for i in range(10):
                alertstate.add_silence(conn, f"host-00{i}*", "check_1", now - 60, now + 7200,
                                       "bench", "bench")
            conn.execute(schema.host_state.insert().values(
                uuid="agent-parent", name="", up=True, last_heard=now, interval=5.0,
                deadline=now + 3600, since=now - 3600, routers={"router-1": now},
                notified=False, pending=False, updated=now))
    finally:
        eng.dispose()
    return build(AlertingConfig, {"dependencies": [{"hosts": "host-*", "parents": [PARENT]}]},
                 "bench", "alerting")


def run_sink(url: str, batches: list[list[Relayed]], config: AlertingConfig | None = None) \
        -> float:
    """Seconds the sink takes to evaluate every batch (tables created before timing)."""
    sink = AlertingSink(db.engine(url), clock=time.time, config=config, deliver=False)
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


def measure(name: str, make_url, batches, n: int, rounds: int) -> dict:
    figures: dict[str, list[float]] = {"sink": [], "lifecycle": [], "plain": []}
    for _ in range(rounds):
        url = make_url()
        registry(url)
        figures["sink"].append(n / run_sink(url, batches))
        url = make_url()
        registry(url)
        config = lifecycle(url, time.time())
        figures["lifecycle"].append(n / run_sink(url, batches, config))
        figures["plain"].append(n / run_plain(make_url(), batches))
        print(f"{name:<11} round: sink {figures['sink'][-1]:,.0f}/s, with the lifecycle "
              f"{figures['lifecycle'][-1]:,.0f}/s, plain {figures['plain'][-1]:,.0f}/s",
              flush=True)
    row = {"db": name, **{k: statistics.median(v) for k, v in figures.items()}}
    row["ratio"] = row["sink"] / row["plain"]
    row["cost"] = statistics.median(a / b for a, b in zip(figures["lifecycle"],
                                                          figures["sink"]))
    print(f"{name:<11} sink {row['sink']:>8,.0f} results/s   with the lifecycle "
          f"{row['lifecycle']:>8,.0f}/s (ratio {row['cost']:.2f})   plain inserts "
          f"{row['plain']:>8,.0f}/s (sink/plain {row['ratio']:.2f})", flush=True)
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=20000, help="RESULTs per database")
    ap.add_argument("--batch", type=int, default=100, help="results per sink batch")
    ap.add_argument("--rounds", type=int, default=3, help="rounds per database (medians)")
    ap.add_argument("--results", metavar="FILE", help="write the figures into this file "
                                                      "(bench/RESULTS.md)")
    args = ap.parse_args()
    msgs = results(args.count)
    batches = [msgs[i:i + args.batch] for i in range(0, len(msgs), args.batch)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="fw-bench-alerting-") as tmp:
        counter = iter(range(1000))
        rows.append(measure("SQLite", lambda: f"sqlite:///{tmp}/state-{next(counter)}.db",
                            batches, args.count, args.rounds))
        from support.pg import PgCluster, find_bindir
        bindir = find_bindir()
        if bindir is None:
            print("PostgreSQL   skipped: no PostgreSQL binaries (apt-get install postgresql)")
        else:
            cluster = PgCluster(bindir).start()
            try:
                rows.append(measure("PostgreSQL", cluster.create_database, batches,
                                    args.count, args.rounds))
            finally:
                cluster.stop()
    if args.results:
        from results import write_section
        body = "\n".join(
            ["| database | sink evaluates (results/s) | with the lifecycle (results/s) | "
             "lifecycle / sink | plain INSERTs (rows/s) | sink / plain |",
             "|---|---|---|---|---|---|"] +
            [f"| {r['db']} | {r['sink']:,.0f} | {r['lifecycle']:,.0f} | {r['cost']:.2f} | "
             f"{r['plain']:,.0f} | {r['ratio']:.2f} |" for r in rows])
        write_section(Path(args.results), "## Alerting sink: results evaluated per second",
                      f"python bench/alerting.py --count {args.count} --batch {args.batch}"
                      f" --rounds {args.rounds} --results bench/RESULTS.md", body,
                      f"{AGENTS} hosts x {PLUGINS} plugins, batches of {args.batch} as the "
                      "sink loop hands them over; about one check in ten changes state now "
                      "and then, so soft/hard transitions, recoveries and outbox rows are "
                      "written. With the lifecycle: every host under one parent (UP), 100 "
                      "acknowledgements, 40 downtimes (fixed, future, recurring by day and by "
                      "cron, flexible), 10 silences. Medians of the rounds; the lifecycle's "
                      "ratio is taken round by round (limit: 0.80). PostgreSQL is the tests' "
                      "throwaway cluster (fsync off).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
