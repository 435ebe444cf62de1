"""Compaction: closed landing files into the Parquet tables, exactly once (the command is
``fleetwatch history compact``, :mod:`fleetwatch.cli.history.compact`).

One run, holding the lake's compaction lock (``_compaction/lock``, flock):

1. recover: finish or undo killed runs (:func:`fleetwatch.lake.manifest.recover`), close the
   ``.open`` files of history sinks that died and never came back;
2. read: the closed landing files (``max_files_per_run`` at most), parsed once with the
   explicit landing schema and cached; one aggregation counts events, bad lines and the
   dates each table gets (and, when routers reported drops, one more counts their bad
   entries and the dates of the good ones: :mod:`fleetwatch.lake.drops`);
3. per table, in parallel: one line per msg_id (:func:`fleetwatch.lake.tables.messages`),
   minus the msg_ids the table already holds for those dates, into rows; written under the
   run's staging directory, partitioned by date, at most one file per date per core, its
   rows sorted by host (``schema.ORDER``) so queries for one host skip the rest. A
   date partition holding ``max_small_files`` small files or more is merged: its small
   files are rewritten together with the new rows;
4. spans: the dates that got heartbeats get their ``heartbeat_spans`` folded again
   (:mod:`fleetwatch.lake.spans`), staged like the rest;
5. lifecycle (with ``state_url`` set): the alert lifecycle recorded in the state database
   since the watermark (:mod:`fleetwatch.lake.lifecycle`), and the deliveries since theirs
   (:mod:`fleetwatch.lake.deliveries`), each minus the event ids its table (``lifecycle``,
   ``deliveries``) holds for those dates, staged like the rest; the new watermark goes
   into the intent and is kept when the run settles;
6. commit: intent, apply, manifest, settle (:mod:`fleetwatch.lake.manifest`).

Progress goes to ``out`` (stdout in the CLI), one line per step, and a summary at the end.
``FLEETWATCH_HISTORY_CRASH=STEP`` (staged, intent, applied, committed) makes the process
SIGKILL itself right after that step: the tests use it to kill a run at a known point.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

from pyspark import StorageLevel
from pyspark.sql import Observation
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from fleetwatch.lake import deliveries, drops, lifecycle, manifest, spans, tables
from fleetwatch.lake.lock import Busy, locked  # noqa: F401 (their home was here)
from fleetwatch.lake.manifest import Lake
from fleetwatch.lake.spark import Lazy
from fleetwatch.lake.schema import (ORDER, PARTITION, SOURCE_TYPES, TABLE_NAMES, TABLE_OF_TYPE,
                                   TABLES)
from sinks.history.sink import recover_stale
from fleetwatch.lake.times import day_of

log = logging.getLogger(__name__)

CRASH_ENV = "FLEETWATCH_HISTORY_CRASH"
STEPS = ("staged", "intent", "applied", "committed")
#: msg_ids broadcast to the tasks at most (duplicated ids, or a table's new ids checked
#: against its stored partitions); past it, a shuffle join does the work
MAX_BROADCAST_IDS = 1_000_000
CACHE_COMPRESSED = "spark.sql.inMemoryColumnarStorage.compressed"


@dataclass
class TableResult:
    rows: int = 0              # rows written (new)
    messages: int = 0          # new messages (a STATS gives several rows)
    duplicates: int = 0        # lines dropped: msg_id seen in this run or already stored
    dates: int = 0
    merged: int = 0            # date partitions rewritten (small files merged)
    seconds: float = 0.0


@dataclass
class Summary:
    run: str = ""
    files: int = 0
    bytes: int = 0
    events: int = 0
    bad: int = 0
    #: entries of routers' ``drops`` that are not exactly an entry (fleetwatch/lake/drops.py)
    bad_drops: int = 0
    tables: dict[str, TableResult] = field(default_factory=dict)
    steps: dict[str, float] = field(default_factory=dict)   # step -> seconds
    recovered: list[str] = field(default_factory=list)
    #: the read step's counts: rows of (type, date, bad, count, drops: lines with drops)
    stats: list = field(default_factory=list, repr=False)
    #: the dates the good ``drops`` entries go to
    drop_dates: set = field(default_factory=set, repr=False)

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables.values())

    def line(self) -> str:
        if not self.run:
            return "compact: no closed landing files"
        total = sum(self.steps.values())
        dups = sum(t.duplicates for t in self.tables.values())
        return (f"compact: run {self.run} done in {total:.1f}s: {self.files} files, "
                f"{self.events} events ({self.bad} bad lines, {self.bad_entries()}"
                f"{dups} duplicates dropped), "
                f"{self.rows} rows into {len(self.tables)} tables, "
                f"{self.events / total if total else 0:.0f} events/s")

    def bad_entries(self) -> str:
        """``N bad drop entries, `` when there are some (else nothing)."""
        return f"{self.bad_drops} bad drop entries, " if self.bad_drops else ""


def crash_hook(step: str) -> None:
    """Kill this process right after ``step`` when FLEETWATCH_HISTORY_CRASH names it."""
    if os.environ.get(CRASH_ENV) == step:
        sys.stdout.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def compact(spark, settings, out=print, hook=crash_hook, wall=time.time,
            held: bool = False) -> Summary:
    """One compaction run of the lake in ``settings`` (a HistorySettings), under the lake's
    lock (:func:`fleetwatch.lake.lock.locked`; ``held``: the caller holds it already).
    ``spark``: a session, or a :class:`fleetwatch.lake.spark.Lazy` one, made only when the
    run has something to do."""
    lake = Lake(settings.lake)
    lake.make_dirs()
    summary = Summary()
    with contextlib.nullcontext() if held else locked(lake):
        t0 = time.monotonic()
        summary.recovered = manifest.recover(lake, settings.processed)
        summary.recovered += [f"closed {p} (its sink died)" for p in recover_stale(lake.root)]
        for line in summary.recovered:
            out(f"recover: {line}")
        names = lake.closed_landing()
        if settings.max_files_per_run:
            names = names[:settings.max_files_per_run]
        export = lifecycle.read(lake, settings.state_url, wall(), out)
        if not names and not spans.missing(lake) and not (export and export.news):
            out(summary.line())
            return summary
        if isinstance(spark, Lazy):
            spark = spark.get()
        summary.run = run = manifest.new_run_id(wall)
        paths = [os.path.join(lake.landing, n) for n in names]
        summary.files = len(names)
        summary.bytes = sum(os.path.getsize(p) for p in paths)
        summary.steps["recover"] = time.monotonic() - t0
        out(f"compact: run {run}: {len(names)} landing files ({summary.bytes / 1e6:.1f} MB)")
        changes = _tables(spark, lake, settings, run, paths, summary, out) if paths else {}
        t = time.monotonic()
        folded, n = spans.stage(spark, lake, run, sorted(changes.get("heartbeats", {})))
        if folded:
            changes[spans.NAME] = folded
            summary.steps["spans"] = time.monotonic() - t
            out(f"{spans.NAME}: {n} spans of heartbeats into {len(folded)} dates "
                f"in {summary.steps['spans']:.1f}s")
        if export is not None:
            for name, rows in ((lifecycle.NAME, export.rows),
                               (deliveries.NAME, export.deliveries)):
                staged = _copied(spark, lake, settings, run, name, rows, summary, out)
                if staged:
                    changes[name] = staged
        hook("staged")
        _commit(lake, settings, run, names, changes, summary, out, hook,
                None if export is None else export.mark)
    out(summary.line())
    return summary


def _tables(spark, lake: Lake, settings, run: str, paths: list[str], summary: Summary,
            out) -> dict:
    """Read the landing files and stage every table's new rows; return the intent's
    table entries."""
    batch = _read(spark, paths, summary, out)
    try:
        dates = _dates_by_table(summary)
        t = time.monotonic()
        todo = [name for name in TABLE_NAMES if dates.get(name)]
        # One thread per table: Spark runs their jobs side by side, so the fixed cost of
        # each job (planning, scheduling) overlaps instead of adding up.
        with ThreadPoolExecutor(max_workers=max(1, len(todo))) as pool:
            futures = {name: pool.submit(_table, spark, lake, settings, run, name,
                                         batch, sorted(dates[name]), summary, out)
                       for name in todo}
            changes = {name: futures[name].result() for name in todo}
        summary.steps["tables"] = time.monotonic() - t
    finally:
        batch.release()
    return changes


@dataclass
class Batch:
    """The run's parsed landing lines (cached) and what deduplication needs to know."""

    landing: object                 # DataFrame
    dups: object = None             # DataFrame of duplicated msg_ids (cached), or None
    dedupe_all: bool = False        # too many duplicates to broadcast: resolve every msg_id

    def release(self) -> None:
        for df in (self.landing, self.dups):
            if df is not None:
                df.unpersist()


def _read(spark, paths, summary: Summary, out) -> Batch:
    t = time.monotonic()
    # Compressing the cache costs as much as parsing the JSON, and it is read only by this
    # run's few jobs: build it uncompressed (spilled to disk past memory).
    compressed = spark.conf.get(CACHE_COMPRESSED)
    spark.conf.set(CACHE_COMPRESSED, "false")
    try:
        landing = tables.read_landing(spark, paths).persist(StorageLevel.MEMORY_AND_DISK)
        batch = Batch(landing)
        stats = (landing.groupBy("type", "date", "bad")
                 .agg(F.count(F.lit(1)).alias("count"), F.count("drops").alias("drops"))
                 .collect())
    finally:
        spark.conf.set(CACHE_COMPRESSED, compressed)
    summary.events = sum(r["count"] for r in stats)
    summary.bad = sum(r["count"] for r in stats if r["bad"])
    summary.stats = stats
    if _lines_of(stats, "drops"):
        for r in drops.counts(tables.lines(landing, "drops")):
            if r["ok"]:
                summary.drop_dates.add(r[PARTITION])
            else:
                summary.bad_drops += r["count"]
    dups = tables.duplicated_ids(landing).persist(StorageLevel.MEMORY_AND_DISK)
    ndups = dups.count()
    if ndups > MAX_BROADCAST_IDS:
        batch.dedupe_all = True
        dups.unpersist()
    elif ndups:
        batch.dups = dups
    else:
        dups.unpersist()
    summary.steps["read"] = time.monotonic() - t
    by_type: dict[str, int] = {}
    for r in stats:
        if not r["bad"]:
            by_type[r["type"]] = by_type.get(r["type"], 0) + r["count"]
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(by_type.items())) or "none"
    out(f"read: {summary.events} events in {summary.steps['read']:.1f}s "
        f"({summary.bad} bad lines, {summary.bad_entries()}{ndups} msg_ids on several "
        f"lines); {kinds}")
    return batch


def _dates_by_table(summary: Summary) -> dict[str, set[str]]:
    dates: dict[str, set[str]] = {}
    for r in summary.stats:
        if not r["bad"]:
            dates.setdefault(TABLE_OF_TYPE[r["type"]], set()).add(r["date"])
    if summary.drop_dates:
        dates["drops"] = set(summary.drop_dates)
    return dates


def _lines_of(stats, name: str) -> int:
    """Good lines table ``name`` takes rows from (for ``drops``: the STATS with drops)."""
    return sum(r["drops" if name == "drops" else "count"] for r in stats
               if not r["bad"] and r["type"] in SOURCE_TYPES[name])


def _table(spark, lake: Lake, settings, run: str, name: str, batch: Batch,
           dates: list[str], summary: Summary, out) -> dict:
    """Stage table ``name``'s new rows (and merged partitions); return its intent entry."""
    t = time.monotonic()
    result = summary.tables[name] = TableResult()
    existing, small = _partitions(lake, settings, name, dates)
    lines = _lines_of(summary.stats, name)
    msgs = tables.messages(batch.landing, name, batch.dups, batch.dedupe_all)
    reader = spark.read.schema(TABLES[name]).option("basePath", lake.table(name))
    known = None
    if existing:
        stored = reader.parquet(*existing)
        if lines <= MAX_BROADCAST_IDS:
            known = tables.already_stored(stored, msgs).persist()
            if known.count():
                msgs = msgs.join(F.broadcast(known), "msg_id", "left_anti")
        else:
            msgs = msgs.join(stored.select("msg_id").distinct(), "msg_id", "left_anti")
    counted_msgs, counted_rows = Observation(f"{name}-messages"), Observation(f"{name}-rows")
    msgs = msgs.observe(counted_msgs, F.count(F.lit(1)).alias("n"))
    new = tables.rows(msgs, name).observe(counted_rows, F.count(F.lit(1)).alias("n"))
    if small:
        new = new.unionByName(_small_rows(reader, lake, name, small))
    # a bounded number of files per date and run (one per task, as many tasks as cores),
    # each sorted so that a host's rows lie together (schema.ORDER)
    output = (new.coalesce(int(spark.conf.get("spark.sql.shuffle.partitions")))
              .sortWithinPartitions(PARTITION, *ORDER[name]))
    output.write.partitionBy("date").parquet(os.path.join(lake.staging(run), name))
    if known is not None:
        known.unpersist()
    result.messages = counted_msgs.get["n"]
    result.rows = counted_rows.get["n"]
    result.duplicates = lines - result.messages
    staged = lake.staged_files(run, name)
    result.dates = len(staged)
    result.merged = sum(1 for d in small if d in staged)
    result.seconds = time.monotonic() - t
    merged = f"; {result.merged} partitions merged" if result.merged else ""
    out(f"{name}: {result.rows} rows from {result.messages} messages "
        f"({result.duplicates} duplicates dropped) into {result.dates} dates{merged} "
        f"in {result.seconds:.1f}s")
    return {date: {"add": files, "remove": small.get(date, [])}
            for date, files in staged.items()}


def _partitions(lake: Lake, settings, name: str, dates) -> tuple[list[str], dict]:
    """The partitions of ``dates`` table ``name`` already has (paths), and those to merge:
    date -> its small files, where it holds ``max_small_files`` of them."""
    small_limit = settings.target_file_mb * 1024 * 1024
    existing, small = [], {}
    for date in dates:
        files = lake.partition_files(name, date)
        if files:
            existing.append(lake.partition(name, date))
        smalls = sorted(f for f, size in files.items() if size < small_limit)
        if len(smalls) >= settings.max_small_files:
            small[date] = smalls
    return existing, small


def _small_rows(reader, lake: Lake, name: str, small: dict):
    return reader.parquet(*(os.path.join(lake.partition(name, d), f)
                            for d, fs in small.items() for f in fs))


def _copied(spark, lake: Lake, settings, run: str, name: str, rows: list[dict],
            summary: Summary, out) -> dict:
    """Stage the rows of table ``name`` copied from the state database (``lifecycle``,
    ``deliveries``) that it does not hold yet (by ``event_id``, in the dates they fall
    in); return the intent's entry for the table."""
    t = time.monotonic()
    result = summary.tables[name] = TableResult()
    dated = [{**r, PARTITION: day_of(r["ts"])} for r in rows]
    dates = sorted({r[PARTITION] for r in dated})
    existing, small = _partitions(lake, settings, name, dates)
    reader = spark.read.schema(TABLES[name]).option("basePath", lake.table(name))
    stored = set()
    if existing:
        stored = {r[0] for r in reader.parquet(*existing).select("event_id").collect()}
    new = [r for r in dated if r["event_id"] not in stored]
    result.messages = result.rows = len(new)
    result.duplicates = len(rows) - len(new)
    if new:
        data = [tuple(_utc(r[f.name]) if isinstance(f.dataType, TimestampType) else r[f.name]
                      for f in TABLES[name].fields) for r in new]
        df = spark.createDataFrame(data, TABLES[name])
        if small:
            df = df.unionByName(_small_rows(reader, lake, name, small))
        (df.coalesce(1).sortWithinPartitions(PARTITION, *ORDER[name])
         .write.partitionBy(PARTITION).parquet(os.path.join(lake.staging(run), name)))
    staged = lake.staged_files(run, name)
    result.dates = len(staged)
    result.merged = sum(1 for d in small if d in staged)
    result.seconds = time.monotonic() - t
    out(f"{name}: {result.rows} rows from the state database ({result.duplicates} "
        f"already stored) into {result.dates} dates in {result.seconds:.1f}s")
    return {date: {"add": files, "remove": small.get(date, [])}
            for date, files in staged.items()}


def _utc(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, timezone.utc)


def _commit(lake: Lake, settings, run: str, names: list[str], changes: dict,
            summary: Summary, out, hook, mark: lifecycle.Mark | None = None) -> None:
    t = time.monotonic()
    intent = {"run": run, "landing": names, "tables": changes,
              "counts": {"events": summary.events, "bad": summary.bad,
                         "bad_drops": summary.bad_drops,
                         "rows": {k: v.rows for k, v in summary.tables.items()}}}
    if mark is not None:
        intent["lifecycle"] = mark.to_json()
    manifest.write_intent(lake, intent)
    hook("intent")
    manifest.apply(lake, intent)
    hook("applied")
    manifest.commit(lake, run)
    hook("committed")
    moved = manifest.settle(lake, run, settings.processed)
    summary.steps["commit"] = time.monotonic() - t
    out(f"commit: {sum(len(d) for d in changes.values())} partitions updated, {moved} "
        f"landing files {'deleted' if settings.processed == 'delete' else 'moved to done/'} "
        f"in {summary.steps['commit']:.1f}s")
