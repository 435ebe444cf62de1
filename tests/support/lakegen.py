"""A small history lake with known answers, written straight into Parquet tables with Spark
(``heartbeat_spans`` folded from the heartbeats, as compaction does).

Used by tests/integration/test_history_query.py, test_history_replay.py and test_notebook.py. Every
time is ``BASE + offset`` where BASE is a UTC midnight (by default three days ago, so the
points fit a carbon retention of a few days and an ``expire`` cut-off can fall among the
partitions). Days: D-1 (one HELLO), D0 and D1 (everything else).

Hosts (uuid -> hostname): u-web1 web1, u-web2 web2-old (its HELLO on D-1 said so; its STATS
later claim web2, a claim that names no host), u-db1 db1 (hostname from its HELLO and its
D1 STATS; its last STATS says ``source: router``, a body's word: still db1's), r-1 a router
(its STATS stamped with its own id, ``STATS/r-1/r-1``: never a host).

metrics ``cpu.user``: web1 every minute from D0 00:00, 40 points: 1..20 then 10, 20 .. 200
(20-minute buckets: avg 10.5 / max 20 / p95 19, then avg 105 / max 200 / p95 190; overall
avg 57.75); web2 10 points of 50 from D0 00:00; db1 5 points of 7 on D1 from 00:00; r-1 one
point of 1000 on D0. ``mem.used``: web1 one point of 123 at D1 01:00.

heartbeats (interval 600 s; 3 intervals = 1800 s): web1 every 600 s over D0 and D1 but none
between D0 10:00 and 12:00 (a 7200 s gap: down); web2 every 600 s on D0 only; db1 every
600 s from D0 06:00 to the end of D1. The last heartbeat is at D1 23:50, so the default
window is D0 00:00 .. D1 23:50. web1 also heartbeats as local process ``backup`` (interval
3600) at D0 00:00 and 01:00.

results: web1 ``load`` OK at 0, 600, WARNING 1200, CRITICAL 1800, 2400, OK 3000, 3600 (with
perfdata load1 = status / 2 + 0.25, started 1 s before ts); web2 ``http`` CRITICAL at 100;
db1 ``disk`` OK at D1+0, UNKNOWN at D1+600 (the latest result).

notifications: web2 info "deployed" at 200, web1 warning "disk filling" at 500, db1
critical "db down" at D1+100.

registrations: HELLO web2-old at D-1 23:00; HELLO web1 and db1 at D0 00:00; REGISTER web1
``agent`` with the load plugin at 10.

lifecycle (as compaction copies it from the state database): web1's ``load`` alert trigger
at 1800 and resolve at 3000; a downtime of ``web1`` from D0 11:00 to 13:00 (the second half
of its heartbeat gap: 3600 s of it are excused by ``availability(exclude_downtime=True)``).

drops (as routers report them, fleetwatch/lake/drops.py): router-a dropped web1's 11 missing
heartbeats for the history sink from D0 10:10 to 11:50 (``gaps`` with 1h buckets: 5.5 in
10:00 and 5.5 in 11:00, where nothing landed), 2 of web1's STATS for graphite at D0 00:50
exactly, and 4 of db1's STATS for graphite from D0 23:30 to D1 00:30 (in the D1 partition).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from fleetwatch.lake.schema import DERIVED, PARTITION, TABLES
from fleetwatch.lake.spans import NAME, fold, of_heartbeats

DAY = 86400
INTERVAL = 600.0
GAP = (36000, 43200)           # web1's silent heartbeat gap on D0 (10:00 .. 12:00)
ROUTER = "router-a"


def midnight_days_ago(days: int, now: float | None = None) -> float:
    now = time.time() if now is None else now
    return float((int(now) // DAY - days) * DAY)


@dataclass(frozen=True)
class Lake:
    path: Path
    base: float

    def at(self, offset: float) -> float:
        return self.base + offset


def _ts(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


def _day(t: float) -> str:
    return _ts(t).strftime("%Y-%m-%d")


class _Rows:
    """Rows of every table, each with date, ts and a fresh msg_id filled in."""

    def __init__(self):
        self.tables: dict[str, list[dict]] = {name: [] for name in TABLES
                                              if name not in (*DERIVED, "drops")}
        self.n = 0

    def add(self, table: str, t: float, uuid: str, **fields) -> None:
        self.n += 1
        self.tables[table].append({PARTITION: _day(t), "ts": _ts(t), "uuid": uuid,
                                   "msg_id": f"m{self.n:06d}", "router": ROUTER, **fields})


def rows(base: float) -> dict[str, list[dict]]:
    r = _Rows()
    # metrics
    for i in range(40):
        value = float(i + 1) if i < 20 else float(10 * (i - 19))
        r.add("metrics", base + 60 * i, "u-web1", hostname="web1", source="psutil",
              metric="cpu.user", value=value)
    for i in range(10):
        r.add("metrics", base + 60 * i, "u-web2", hostname="web2", source="psutil",
              metric="cpu.user", value=50.0)
    for i in range(5):
        r.add("metrics", base + DAY + 60 * i, "u-db1", hostname="db1",
              source="router" if i == 4 else None, metric="cpu.user", value=7.0)
    r.add("metrics", base + 30, "r-1", hostname=None, source="router", metric="cpu.user",
          value=1000.0, router="r-1")
    r.add("metrics", base + DAY + 3600, "u-web1", hostname="web1", source="psutil",
          metric="mem.used", value=123.0)
    # heartbeats
    for t in range(0, 2 * DAY, int(INTERVAL)):
        if not GAP[0] < t < GAP[1]:
            r.add("heartbeats", base + t, "u-web1", name=None, interval=INTERVAL)
        if t < DAY:
            r.add("heartbeats", base + t, "u-web2", name=None, interval=INTERVAL)
        if t >= 21600:
            r.add("heartbeats", base + t, "u-db1", name=None, interval=INTERVAL)
    for t in (0, 3600):
        r.add("heartbeats", base + t, "u-web1", name="backup", interval=3600.0)
    # results
    for t, status in ((0, 0), (600, 0), (1200, 1), (1800, 2), (2400, 2), (3000, 0), (3600, 0)):
        perf = [{"label": "load1", "value": status / 2 + 0.25, "uom": "", "warn": "1",
                 "crit": "2", "min": 0.0, "max": None}]
        r.add("results", base + t, "u-web1", plugin="load", status=status,
              output=f"LOAD {status}", long_output=None, perfdata=json.dumps(perf),
              command_id=f"s:{t:024d}", slot=base + t - 1, started=base + t - 1,
              duration=0.5)
    r.add("results", base + 100, "u-web2", plugin="http", status=2, output="HTTP CRITICAL",
          long_output=None, perfdata=None, command_id="cli:1", slot=None, started=None,
          duration=None)
    for t, status in ((DAY, 0), (DAY + 600, 3)):
        r.add("results", base + t, "u-db1", plugin="disk", status=status,
              output=f"DISK {status}", long_output="", perfdata="[]",
              command_id=f"s:{t:024d}", slot=None, started=base + t, duration=0.1)
    # notifications
    for t, uuid, severity, text in ((200, "u-web2", "info", "deployed"),
                                    (500, "u-web1", "warning", "disk filling"),
                                    (DAY + 100, "u-db1", "critical", "db down")):
        r.add("notifications", base + t, uuid, severity=severity, text=text, source="cron")
    # registrations
    for t, uuid, kind, name, hostname, plugins in (
            (-3600, "u-web2", "HELLO", None, "web2-old", None),
            (0, "u-web1", "HELLO", None, "web1", None),
            (0, "u-db1", "HELLO", None, "db1", None),
            (10, "u-web1", "REGISTER", "agent", None,
             json.dumps([{"name": "load", "interval": 600, "timeout": 10}]))):
        r.add("registrations", base + t, uuid, kind=kind, name=name, hostname=hostname,
              version="1.0", plugins=plugins)
    return r.tables


def lifecycle_rows(base: float) -> list[dict]:
    alert = dict(kind="alert", id=None, key="u-web1/check/load", uuid="u-web1",
                 hostname="web1", check_name="load", severity="critical", status=2,
                 text="LOAD 2", details='{"kind": "check"}')
    window = dict(kind="downtime", id=1, hostname="web1", author="ops", comment="reboot",
                  start=_ts(base + 39600), end=_ts(base + 46800),
                  details='{"every": null, "duration": null, "flexible": null, '
                          '"children": false}')
    rows = [{**alert, "id": 1, "action": "trigger", "ts": _ts(base + 1800),
             "event_id": "alert/1"},
            {**alert, "id": 2, "action": "resolve", "ts": _ts(base + 3000), "status": 0,
             "event_id": "alert/2"},
            {**window, "action": "start", "ts": _ts(base + 39600),
             "event_id": f"downtime/1/{base + 39600:.3f}/start"},
            {**window, "action": "end", "ts": _ts(base + 46800), "reason": "ended",
             "event_id": f"downtime/1/{base + 39600:.3f}/end"}]
    return [{**r, PARTITION: _day(base)} for r in rows]


def drops_rows(base: float) -> list[dict]:
    rows = []
    for i, (uuid, type_, sink, count, first, last) in enumerate((
            ("u-web1", "HEARTBEAT", "history", 11, 36600, 42600),
            ("u-web1", "STATS", "graphite", 2, 3000, 3000),
            ("u-db1", "STATS", "graphite", 4, DAY - 1800, DAY + 1800))):
        rows.append({PARTITION: _day(base + last), "uuid": uuid, "type": type_, "sink": sink,
                     "count": count, "first": _ts(base + first), "last": _ts(base + last),
                     "router": ROUTER, "reported": _ts(base + last + 5),
                     "msg_id": f"d{i}", "position": 0})
    return rows


def make_lake(spark, root, base: float | None = None) -> Lake:
    """Write the lake under ``root`` (tables only) and return where and when it is."""
    root = Path(root)
    base = midnight_days_ago(3) if base is None else float(base)
    tables = {**rows(base), "lifecycle": lifecycle_rows(base), "drops": drops_rows(base)}
    for name, table in tables.items():
        schema = TABLES[name]
        data = [tuple(row.get(f.name) for f in schema.fields) for row in table]
        (spark.createDataFrame(data, schema).coalesce(1).write.mode("overwrite")
         .partitionBy(PARTITION).parquet(str(root / "tables" / name)))
    heartbeats = spark.read.schema(TABLES["heartbeats"]).parquet(str(root / "tables/heartbeats"))
    (fold(of_heartbeats(heartbeats)).coalesce(1).write.mode("overwrite")
     .partitionBy(PARTITION).parquet(str(root / "tables" / NAME)))
    return Lake(root, base)
