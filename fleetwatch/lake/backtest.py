"""The backtest's lake side: what an alerting policy would have paged over a stretch of the
lake, against what really paged (``fleetwatch rules backtest``,
:mod:`fleetwatch.cli.rules`).

Spark reads, within ``[since - warmup, until)`` by the messages' ``ts``:

- the messages, in the order they landed (``received``, else ``ts``; then ``ts``, msg_id:
  :func:`fleetwatch.lake.landed.order`): HELLO and REGISTER (``registrations``), HEARTBEAT,
  RESULT, NOTIFY and, when the policy has rules (:mod:`sinks.alerting.series`), STATS
  (``metrics`` rows grouped back into messages, as :mod:`fleetwatch.lake.bodies` does). A
  sender's HEARTBEATs of one step go to the sink in one batch, where only the last counts
  (:func:`sinks.alerting.rows.heartbeats`): Spark folds them into that one first.
  A month of a fleet does not fit a driver, nor one sort: :func:`plan` counts the rows
  by the time they landed (one small aggregate), cuts that time into *slices* of at most
  ``slice_rows`` rows each (whole steps), and each slice is sorted on its own (reading only
  the date partitions holding its rows) and brought to the driver a partition of at most
  :data:`PARTITION_ROWS` rows at a time (:func:`rows`): the driver's memory is bounded
  whatever the range;
- the last HELLO of each agent and its last REGISTER of each name that landed before the
  range (:func:`registered`): the registry knew them when the range began, so they are
  replayed first, at its first moment;
- the ``lifecycle`` table: the alert events that really went out (what paged), the alerts
  a silence muted or a downtime held (``muted``, ``held``), and the downtimes' windows,
  which the replay writes into its state database so that they hold what they held.

The driver feeds the messages to a :class:`sinks.alerting.backtest.Replay` (a real
alerting sink on a throwaway state database, on the messages' own times), folds the alert
events of both sides into pages and compares them (:mod:`sinks.alerting.pages`).
Pages that began in the warm-up (``warmup`` seconds before ``since``, default an hour:
the state machines, the rules' windows and ``for`` start empty) are matched but not
reported.

What the lake does not keep, the backtest cannot replay: a HELLO's ``parents`` and
``ephemeral`` (an agent's own parents: the config's ``dependencies`` and the sites from the
envelope's path still apply), a RESULT's ``boot`` and ``seq`` (results are ordered by
``started``), DEREGISTER (the lake has no table for it: an agent that left looks silent,
DOWN), silences (the lake keeps what they muted, not the silences: a page the backtest
adds that a silence muted says so, ``then``) and acknowledgements (they end reminders, not
pages).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import reduce

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from fleetwatch.display import iso
from fleetwatch.lake.bodies import FIELDS, JSON_TEXT, stats
from fleetwatch.lake.query import History
from fleetwatch.lake.schema import PARTITION
from fleetwatch.lake.times import day_of, secs, window
from fleetwatch.protocol import Message, Relayed
from sinks.alerting.backtest import Replay
from sinks.alerting.pages import Diff, Hold, compare, pages
from sinks.alerting.config import AlertingConfig
from sinks.alerting.holds import DOWNTIME, SILENCED

#: default seconds replayed before ``since`` (not reported)
WARMUP = 3600.0
#: default seconds of a step (the sink's tick; the live sink's is alerting.tick_interval)
TICK = 5.0
#: message table -> the fields a message of it needs (rows without them are skipped)
REQUIRED = {"results": ("plugin", "status", "output", "command_id"),
            "notifications": ("severity", "text")}
COLUMNS = ("msg_id", "type", "uuid", "router", "path", "at", "ts", "body")
#: the lake's order of the messages (:func:`fleetwatch.lake.landed.order`)
ORDER = ("at", "ts", "msg_id")
#: the most rows one slice sorts (:func:`plan`): a few tens of seconds of Spark a slice
SLICE_ROWS = 2_000_000
#: the most rows of one sorted partition, about: toLocalIterator brings a partition whole to
#: the driver, two at a time (the next one prefetched)
PARTITION_ROWS = 100_000
#: seconds of the plan's buckets, about (a whole number of steps): a slice's shortest span
BUCKET = 600.0


# ---------------------------------------------------------------- messages

def tables(stats: bool) -> list[str]:
    """The tables the replay reads (``metrics`` when the policy has rules)."""
    return ["registrations", "heartbeats", "results", "notifications"] + \
        (["metrics"] if stats else [])


def _landed():
    """When a row landed, epoch seconds: ``received``, else the sender's ``ts``."""
    return F.coalesce(F.col("received"), secs())


def _messages(history: History, table: str, lo: float | None, until: float | None,
              tick: float, within: Slice | None = None) -> DataFrame:
    """Table ``table``'s messages with ``lo <= ts < until`` (and that landed in slice
    ``within``, if given): :data:`COLUMNS`, ``at`` when it landed (epoch seconds), ``ts``
    the sender's (epoch seconds), ``body`` JSON text."""
    df = window(history.table(table), lo, until)
    at = _landed()
    if within is not None:
        df = df.filter(F.col(PARTITION).isin(list(within.dates))
                       & (at >= F.lit(within.start)) & (at < F.lit(within.end)))
    for name in REQUIRED.get(table, ()):
        df = df.filter(F.col(name).isNotNull())
    if table == "metrics":
        df = stats(df)
    if table == "heartbeats":          # a step's last heartbeat per sender and router
        order = F.struct(at.alias("a"), F.col("ts"), F.col("msg_id"))
        df = (df.groupBy("uuid", "name", "router", F.floor(at / tick).alias("_step"))
              .agg(F.max_by(F.struct("msg_id", "path", "interval"), order).alias("_last"),
                   F.max("ts").alias("ts"), F.max(at).alias("received"))
              .select("uuid", "name", "router", "ts", "received", "_last.*"))
        at = F.col("received")
    type_ = F.col("kind") if table == "registrations" else F.lit(
        {"metrics": "STATS", "heartbeats": "HEARTBEAT", "results": "RESULT",
         "notifications": "NOTIFY"}[table])
    if table == "registrations":
        df = df.filter((F.col("kind") == "HELLO") | F.col("name").isNotNull())
    body = F.to_json(F.struct(F.col("msg_id"), F.col("uuid"), secs().alias("ts"),
                              *(F.col(f) for f in FIELDS[table])))
    return df.select("msg_id", type_.alias("type"), "uuid", "router", "path",
                     at.alias("at"), secs().alias("ts"), body.alias("body"))


@dataclass(frozen=True)
class Slice:
    """The messages that landed in ``[start, end)``, stored in the ``date`` partitions
    ``dates`` (by their ``ts``), about ``rows`` rows of the tables."""

    start: float
    end: float
    dates: tuple[str, ...]
    rows: int


def plan(history: History, lo: float, until: float | None, tick: float, stats: bool,
         slice_rows: int = SLICE_ROWS) -> list[Slice]:
    """The slices of ``[lo, until)``'s messages (module docstring), in time order: the rows
    are counted per date partition and bucket of :data:`BUCKET` seconds (a whole number of
    steps, so that a step's heartbeats, folded together, are in one slice) by the time they
    landed, and consecutive buckets make a slice until it holds ``slice_rows``."""
    width = tick * max(1, math.ceil(BUCKET / tick))
    parts = [window(history.table(t), lo, until)
             .select(F.col(PARTITION), F.floor(_landed() / width).alias("bucket"))
             for t in tables(stats)]
    buckets: dict[int, dict[str, int]] = {}
    for r in reduce(DataFrame.unionByName, parts).groupBy("bucket", PARTITION).count() \
            .collect():
        buckets.setdefault(int(r["bucket"]), {})[r[PARTITION]] = int(r["count"])
    out: list[Slice] = []
    first, dates, rows = None, set(), 0
    for b in sorted(buckets):
        if first is not None and rows + sum(buckets[b].values()) > slice_rows:
            out.append(Slice(first * width, b * width, tuple(sorted(dates)), rows))
            first, dates, rows = None, set(), 0
        if first is None:
            first = b
        dates.update(buckets[b])
        rows += sum(buckets[b].values())
    if first is not None:
        out.append(Slice(first * width, (max(buckets) + 1) * width, tuple(sorted(dates)),
                         rows))
    return out


def sliced(history: History, within: Slice, lo: float, until: float | None, tick: float,
           stats: bool) -> DataFrame:
    """Slice ``within``'s messages, sorted in the lake's order into partitions of about
    :data:`PARTITION_ROWS` rows (a range partitioning of its own: adaptive execution does
    not merge them)."""
    parts = [_messages(history, t, lo, until, tick, within) for t in tables(stats)]
    n = max(1, math.ceil(within.rows / PARTITION_ROWS))
    return (reduce(DataFrame.unionByName, parts).repartitionByRange(n, *ORDER)
            .sortWithinPartitions(*ORDER))


def rows(history: History, slices: list[Slice], lo: float, until: float | None, tick: float,
         stats: bool = False):
    """Every message of ``slices`` (:func:`plan`) the replay takes within ``[lo, until)``,
    in the lake's order, as rows of :data:`COLUMNS`: a slice at a time, each a partition at
    a time."""
    for within in slices:
        yield from _local(sliced(history, within, lo, until, tick, stats))


def _local(df: DataFrame):
    """``df``'s rows on the driver, a partition at a time (the next one prefetched): through
    its RDD's iterator where there is one, as a DataFrame's own toLocalIterator keeps each
    slice's rows in the driver's JVM after they are read (about 400 MB a slice of two million
    rows on Spark 4.3, until the heap runs out); Spark Connect has no RDDs, and its iterator
    streams the rows from the server instead."""
    try:
        rdd = df.rdd
    except PySparkNotImplementedError:
        return df.toLocalIterator(prefetchPartitions=True)
    return rdd.toLocalIterator(prefetchPartitions=True)


def registered(history: History, lo: float, tick: float) -> list:
    """The last HELLO of each agent and its last REGISTER of each name (an agent's own, a
    local process's) with ``ts`` before ``lo``, in the lake's order: what the registry knew
    when the range began (the table is small: every date partition before ``lo`` is read)."""
    df = _messages(history, "registrations", None, lo, tick)
    key = (F.col("uuid"), F.col("type"), F.get_json_object(F.col("body"), "$.name"))
    last = Window.partitionBy(*key).orderBy(*(F.col(c).desc() for c in ORDER))
    return (df.withColumn("_n", F.row_number().over(last)).filter(F.col("_n") == 1)
            .drop("_n").orderBy(*ORDER).collect())


def relayed(row) -> Relayed:
    """A row of :func:`messages` as the sink would have received it."""
    body = json.loads(row["body"])
    for name in JSON_TEXT:
        if isinstance(body.get(name), str):
            try:
                body[name] = json.loads(body[name])
            except ValueError:
                del body[name]          # not what the agent sent: as if absent
    path = tuple(row["path"] or ())
    return Relayed(row["uuid"], row["router"], Message(row["type"], body),
                   path=path if len(path) > 1 else ())


# ---------------------------------------------------------------- the lifecycle

def lifecycle(history: History, lo: float, until: float | None) -> list:
    """The ``lifecycle`` rows the backtest needs, in time order, read at once: the alerts
    that went out and those muted or held in ``[lo, until)``, and the downtimes' windows
    that began before ``until`` (those that began long before may still cover ``lo``)."""
    df = window(history.table("lifecycle"), None, until)
    recent = (F.col(PARTITION) >= day_of(lo)) & (secs() >= lo)
    df = df.filter((F.col("kind").isin("alert", "muted", "held") & recent)
                   | (F.col("kind") == "downtime"))
    return (df.select("kind", "action", "id", "key", "uuid", "hostname", "check_name",
                      "severity", "details", "comment", "author", "reason",
                      secs().alias("t"), secs("start").alias("start"),
                      secs("end").alias("end"))
            .orderBy("t", "id").collect())


def real_alerts(rows: list, until: float) -> list[dict]:
    """The alert events that really went out before ``until`` (``alert`` rows of
    :func:`lifecycle`), in time order, as :func:`sinks.alerting.pages.pages`
    takes them."""
    out = []
    for r in rows:
        if r["kind"] == "alert" and r["t"] < until:
            details = _details(r["details"])
            out.append({"key": r["key"], "kind": details.get("kind") or "check",
                        "action": r["action"], "severity": r["severity"], "uuid": r["uuid"],
                        "hostname": r["hostname"], "check": r["check_name"],
                        "created": r["t"]})
    return out


def real_holds(rows: list, until: float, alerts: list[dict]) -> list[Hold]:
    """What held alerts back in reality before ``until`` (``muted`` and ``held`` rows of
    :func:`lifecycle`): a silence or a downtime, each from the first alert of a key it held
    (the table keeps no more) to that key's next alert that went out (``alerts``, in time
    order: what was still wrong when the hold ended went out then), else to ``until``."""
    sent: dict[str, list[float]] = {}
    for a in alerts:
        sent.setdefault(a["key"], []).append(a["created"])
    out = []
    for r in rows:
        if r["kind"] not in ("muted", "held") or r["t"] >= until:
            continue
        t = r["t"]
        last = next((c for c in sent.get(r["key"], ()) if c > t), until)
        if r["kind"] == "muted":
            out.append(Hold(r["key"], SILENCED, f"silence {r['id']}", t, last))
        else:
            out.append(Hold(r["key"], DOWNTIME, f"downtime {r['id']}", t, last))
    return out


def downtime_windows(rows: list, lo: float) -> list[dict]:
    """The downtimes' windows (``downtime`` rows of :func:`lifecycle`) that last past
    ``lo``: each ends at its end row's time (removed, or ended), else at its planned end
    (none: it never ends)."""
    windows: dict[tuple, dict] = {}
    for r in rows:
        if r["kind"] != "downtime":
            continue
        details = _details(r["details"])
        w = windows.setdefault((r["id"], r["start"]), {
            "id": r["id"], "host": r["hostname"], "check": r["check_name"],
            "start": r["start"], "end": None, "flexible": details.get("flexible"),
            "children": bool(details.get("children")), "comment": r["comment"],
            "author": r["author"], "ended": False})
        if r["action"] == "end":
            w["end"], w["ended"] = r["end"], True
        elif not w["ended"]:
            w["end"] = r["end"]
    out = []
    for w in windows.values():
        if w["end"] is None or w["end"] > lo:
            del w["ended"]
            out.append(w)
    return sorted(out, key=lambda w: (w["start"], w["id"]))


def _details(text) -> dict:
    try:
        found = json.loads(text) if text else {}
    except ValueError:
        return {}
    return found if isinstance(found, dict) else {}


# ---------------------------------------------------------------- the run

@dataclass
class Report:
    """One backtest's answer: the pages compared (:class:`sinks.alerting.pages.Diff`),
    what was replayed (``counts``) and where the time went (``seconds``)."""

    since: float
    until: float
    warmup: float
    tick: float
    diff: Diff
    counts: Counter = field(default_factory=Counter)
    seconds: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"since": self.since, "until": self.until, "warmup": self.warmup,
                "tick": self.tick, **self.diff.to_json(),
                "counts": dict(sorted(self.counts.items())),
                "seconds": {k: round(v, 3) for k, v in self.seconds.items()}}


class Backtest:
    """A backtest of ``config`` (an :class:`AlertingConfig`: the policy tried) over
    ``history``'s lake. Progress goes to ``out`` every ``progress_every`` seconds."""

    def __init__(self, history: History, config: AlertingConfig, tick: float = TICK,
                 warmup: float = WARMUP, out=None, progress_every: float = 5.0,
                 clock=time.monotonic, tz=None, slice_rows: int = SLICE_ROWS):
        if not tick > 0:
            raise ValueError("tick: expected a positive number of seconds")
        if warmup < 0:
            raise ValueError("warmup: expected 0 or more seconds")
        if slice_rows < 1:
            raise ValueError("slice_rows: expected a positive number of rows")
        self.history, self.config, self.tick, self.warmup = history, config, tick, warmup
        self.slice_rows = slice_rows
        self.out = out or (lambda line: print(line, file=sys.stderr, flush=True))
        self.progress_every, self.clock, self.tz = progress_every, clock, tz

    def run(self, since: float, until: float | None = None) -> Report:
        """Replay ``[since - warmup, until)`` (``until`` None: up to the newest message)
        and compare."""
        began = self.clock()
        lo = since - self.warmup
        with Replay(self.config, lo, self.tick, tz=self.tz) as replay:
            stats = bool(self.config.rules)           # the rules' series: STATS too
            told = lifecycle(self.history, lo, until)
            replay.downtimes(downtime_windows(told, lo))
            self.out(f"backtest: replaying from {iso(lo)} ({self.warmup:.0f}s of warm-up "
                     f"before {iso(since)}) to {iso(until) if until else 'the newest message'}"
                     f"{', with STATS' if stats else ''}")
            before = registered(self.history, lo, self.tick)
            for row in before:           # what the registry knew when the range began
                replay.feed(lo, relayed(row))
            last, n, next_report = lo, len(before), self.clock() + self.progress_every
            slices = plan(self.history, lo, until, self.tick, stats, self.slice_rows)
            self.out(f"backtest: {sum(s.rows for s in slices)} rows of the lake in "
                     f"{len(slices)} slice(s) of at most {self.slice_rows} rows")
            for row in rows(self.history, slices, lo, until, self.tick, stats):
                replay.feed(row["at"], relayed(row))
                last, n = max(last, row["at"]), n + 1
                if self.clock() >= next_report:
                    next_report = self.clock() + self.progress_every
                    self._progress(n, last, lo, until)
            end = until if until is not None else max(last, since)
            replay.finish(end)
            self._progress(n, last, lo, end)
            evaluated = replay.busy
            backtest = pages(replay.alerts())
            holds = replay.holds()
            counts = Counter(replay.counts)
            counts.update(replay.sink.counts)
        alerts = real_alerts(told, end)
        diff = compare(backtest, pages(alerts), since, end, holds,
                       real_holds(told, end, alerts), slack=self.tick)
        counts["messages"] = n
        counts["registered_before"], counts["slices"] = len(before), len(slices)
        total = self.clock() - began
        return Report(since, end, self.warmup, self.tick, diff, counts,
                      {"total": total, "evaluation": evaluated,
                       "lake": max(0.0, total - evaluated)})

    def _progress(self, n: int, last: float, lo: float, until: float | None) -> None:
        done = ""
        if until is not None and until > lo:
            done = f" ({min(100.0, 100.0 * (last - lo) / (until - lo)):.0f}%)"
        self.out(f"backtest: {n} messages replayed, up to {iso(last)}{done}")

