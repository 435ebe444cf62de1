"""Replay: backfill carbon from the lake, at the original timestamps (after a carbon outage, or
to fill a new carbon server); the command is ``fleetwatch history replay --to graphite``
(:mod:`fleetwatch.cli.history.replay`).

The datapoints are exactly those the live graphite sink sends (:mod:`sinks.graphite.sink`): the
same :class:`sinks.graphite.paths.Namer` names them (``<prefix>.<host>.<metric>``,
``<prefix>.<host>.checks.<plugin>.<label>`` and ``...checks.<plugin>.status``, a labelled
series as ``<prefix>.<host>.<name>.<key>_<value>...``, or tagged series with ``--tags``; a
router's or sink's own counters under ``<prefix>.fleetwatch.<uuid>``), graphyte builds the
lines, and :func:`sinks.graphite.sender.deliver` sends each batch on one connection and
returns once carbon has read all of it. A RESULT's timestamp is its ``started`` (else its
ts), as in the sink. Replaying twice is harmless: whisper keeps one value per metric and
second.

Rows come from the ``metrics`` and ``results`` tables within ``--since``/``--until`` (and
``--host``: a hostname or uuid). Each row is named as the live sink named it: after the
HELLO or the agent's own REGISTER (which says what that run's HELLOs say) of its uuid
latest at or before the row (:func:`fleetwatch.lake.hostnames.bind`, the rule the history
queries use too), never after a STATS's claimed hostname; ``--host`` picks the rows so
named. Before a uuid's first HELLO or REGISTER the lake uses its name where the live sink
used the first STATS's claim; a uuid with neither in the lake is named by its uuid (a
result so named is counted ``result_no_host``, as in the sink).

Carbon down: the batch is retried with a backoff doubling from 0.5 s to 30 s for at most
``retry_for`` seconds, then the replay stops with status 1 and says how far it got; rows
are not read in time order, so the way on is to run the same command again (harmless, as
above). Progress goes to stderr every few seconds.
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from dataclasses import dataclass

import graphyte
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fleetwatch.series import Entry
from sinks.graphite.sender import deliver
from fleetwatch.lake import hostnames
from fleetwatch.lake.query import History
from fleetwatch.lake.times import epoch, secs, window
from sinks.graphite.paths import Namer, Point
from fleetwatch.lake.metrics import reporter


@dataclass(frozen=True)
class Target:
    """Where and how to send: the graphite sink's settings that shape the lines."""

    host: str = "127.0.0.1"
    port: int = 2003
    prefix: str = "fleet"
    tags: bool = False
    batch: int = 5000
    timeout: float = 10.0


class CarbonGone(Exception):
    """carbon refused or dropped a batch for longer than ``retry_for``."""


# ---------------------------------------------------------------- rows -> points (no Spark)

def metric_points(namer: Namer, row) -> tuple[list[Point], Counter]:
    """A ``metrics`` row (uuid, hostname bound by ``hostnames.bind``, reporter, metric,
    value, labels, kind, t) as the sink names it: a router's, sink's or scheduler's own
    counters (the stamp's word, :func:`fleetwatch.lake.metrics.reporter`) under its id; a
    labelled series (``labels`` not null) as the sink names a STATS's ``series``."""
    internal = row["reporter"] is not None
    owner = row["uuid"] if internal else row["hostname"] or row["uuid"]
    if row["labels"] is None:
        return namer.stats({row["metric"]: row["value"]}, row["t"], owner, internal)
    entry = Entry(row["metric"], tuple(sorted(row["labels"].items())), row["value"],
                  row["kind"] == "counter")
    return namer.stats(None, row["t"], owner, internal, series=[entry])


def result_points(namer: Namer, row) -> tuple[list[Point], Counter]:
    """A ``results`` row (uuid, hostname bound by ``hostnames.bind``, plugin, status,
    perfdata JSON text, t) as the sink names it."""
    perfdata, bad = [], Counter()
    if row["perfdata"]:
        try:
            perfdata = json.loads(row["perfdata"])
        except ValueError:
            bad["perfdata_bad"] += 1
    if not row["hostname"]:
        bad["result_no_host"] += 1
    owner = row["hostname"] or row["uuid"]
    points, counts = namer.result(row["plugin"], row["status"], perfdata, row["t"], owner)
    return points, counts + bad


# ---------------------------------------------------------------- the lake side

def of_host(history: History, df: DataFrame, host: str | None) -> DataFrame:
    return df if host is None else history.named_rows(df, host)


def metric_rows(history: History, since, until, host) -> DataFrame:
    df = of_host(history, window(history.metrics, since, until), host)  # named by bind
    return df.select("uuid", "hostname", reporter().alias("reporter"), "metric", "value",
                     "labels", "kind", secs().alias("t"))


def result_rows(history: History, since, until, host) -> DataFrame:
    df = hostnames.bind(window(history.results, since, until), history.registrations)
    return of_host(history, df, host).select(
        "uuid", "hostname", "plugin", F.coalesce(F.col("status"), F.lit(3)).alias("status"),
        "perfdata", F.coalesce(F.col("started"), secs()).alias("t"))


class Replay:
    """One replay run: rows of the lake -> lines -> carbon, in batches, with progress."""

    def __init__(self, history: History, target: Target, out=None, send=deliver,
                 retry_for: float = 300.0, progress_every: float = 5.0,
                 clock=time.monotonic, sleep=time.sleep):
        self.history, self.target = history, target
        self.out = out or (lambda line: print(line, file=sys.stderr, flush=True))
        self.send, self.retry_for, self.progress_every = send, retry_for, progress_every
        self.clock, self.sleep = clock, sleep
        self.namer = Namer(target.tags)
        self.graphyte = graphyte.Sender(target.host, target.port,
                                        prefix=target.prefix or None, timeout=target.timeout,
                                        raise_send_errors=True)
        self.counts: Counter = Counter()
        self.pending: list[bytes] = []

    def run(self, since=None, until=None, host: str | None = None,
            dry_run: bool = False) -> Counter:
        since, until = epoch(since), epoch(until)
        sources = ((metric_rows(self.history, since, until, host), metric_points),
                   (result_rows(self.history, since, until, host), result_points))
        total = sum(df.count() for df, _ in sources)
        self.out(f"replay: {total} rows to {self.target.host}:{self.target.port}"
                 f"{' (dry run)' if dry_run else ''}")
        started = next_report = self.clock()
        for df, points_of in sources:
            for row in df.toLocalIterator(prefetchPartitions=True):
                self.counts["rows"] += 1
                points, counts = points_of(self.namer, row)
                self.counts.update(counts)
                self._queue(points, dry_run)
                if self.clock() >= next_report:
                    next_report = self.clock() + self.progress_every
                    self._progress(total, started)
        while self.pending:
            self._flush(dry_run)
        self._progress(total, started)
        return self.counts

    def _queue(self, points: list[Point], dry_run: bool) -> None:
        for p in points:
            try:
                self.pending.append(self.graphyte.build_message(p.name, p.value, p.ts,
                                                                dict(p.tags)))
            except (ValueError, TypeError):  # sanitised names make this unreachable
                self.counts["bad_name"] += 1
        while len(self.pending) >= self.target.batch:
            self._flush(dry_run)

    def _flush(self, dry_run: bool) -> None:
        """Send the first ``batch`` pending lines (fewer at the end)."""
        chunk = self.pending[:self.target.batch]
        if not chunk:
            return
        if not dry_run:
            self._deliver(b"".join(chunk))
        self.counts["datapoints"] += len(chunk)
        del self.pending[:len(chunk)]

    def _deliver(self, data: bytes) -> None:
        delay, give_up = 0.5, self.clock() + self.retry_for
        while True:
            try:
                self.send(data, self.target.host, self.target.port, self.target.timeout)
                self.counts["batches"] += 1
                return
            except OSError as e:
                self.counts["send_failures"] += 1
                if self.clock() + delay > give_up:
                    raise CarbonGone(f"carbon {self.target.host}:{self.target.port}: {e}; "
                                     f"gave up after {self.retry_for:.0f}s with "
                                     f"{self.counts['datapoints']} datapoints sent") from None
                self.out(f"replay: carbon {self.target.host}:{self.target.port}: {e}; "
                         f"retrying in {delay:.1f}s")
                self.sleep(delay)
                delay = min(delay * 2, 30.0)

    def _progress(self, total: int, started: float) -> None:
        rate = self.counts["datapoints"] / max(1e-9, self.clock() - started)
        self.out(f"replay: {self.counts['rows']}/{total} rows, {self.counts['datapoints']} "
                 f"datapoints sent ({rate:.0f}/s)")
