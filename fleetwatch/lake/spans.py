"""``heartbeat_spans``: each sender's heartbeats folded into spans, kept by compaction.

A span is a run of one sender's heartbeats (uuid, name) within one UTC day in which every
heartbeat comes less than :data:`GAP` seconds after the one before it: a healthy agent
sending every 2 s gives one span per day, a host that was down for an hour two. A span
keeps its first and last heartbeat and the intervals the availability rule needs (the
interval its first and its last heartbeat count with, and the shortest one in it), so the
availability query reads a few rows per host and day instead of every heartbeat.

The answer from spans is the one from the heartbeats, exactly, when (``intervals`` x the
shortest interval counted) >= GAP and the window is at least GAP long
(:func:`fleetwatch.lake.query.History.uptime` checks both and reads the heartbeats
otherwise):

- a gap inside a span is shorter than GAP, so the rule counts it as up whatever the
  interval; the gap between two spans is a real gap between two heartbeats, judged by the
  rule with the interval of the heartbeat before it (the span's ``last_interval``);
- a span that starts before ``since`` is cut at ``since``: its first heartbeat inside the
  window came less than GAP after one before ``since``, so ``since`` up to it is up in
  the rule too; the same holds at ``until``, and a window at least GAP long has a
  heartbeat of every span that crosses it.

Compaction keeps the spans of a date whole: the new heartbeats of the run and the date's
stored spans are folded again into one set (:func:`fold`: a stored span is a run of
heartbeats, so folding it with new ones gives the spans of all of them, and a heartbeat
folded twice changes nothing), written as the date's new file, which replaces the old
ones in the same commit as the heartbeats (:mod:`fleetwatch.lake.manifest`). A lake
compacted before this table existed gets the spans of its older dates from their stored
heartbeats at its next compaction.
"""

from __future__ import annotations

import os

from pyspark.sql import DataFrame, Observation, Window
from pyspark.sql import functions as F

from fleetwatch.lake.manifest import Lake
from fleetwatch.lake.schema import ORDER, PARTITION, TABLES
from sinks.alerting.hosts.rules import DEFAULT_INTERVAL

NAME = "heartbeat_spans"
#: heartbeats closer than this (seconds) share a span: three times the agent's default
#: heartbeat interval, the shortest gap the availability rule can call down by default
GAP = 3 * DEFAULT_INTERVAL


def counted_interval(interval=None):
    """The interval a heartbeat counts with: ``interval`` if given, else the one it
    announced (a missing or non-positive one: the agent's default)."""
    said = F.when(F.col("interval") > 0, F.col("interval"))
    given = F.lit(float(interval)) if interval else F.lit(None).cast("double")
    return F.coalesce(given, said, F.lit(DEFAULT_INTERVAL))


def of_heartbeats(heartbeats: DataFrame) -> DataFrame:
    """Each row of the ``heartbeats`` table as a span of one heartbeat."""
    eff = counted_interval()
    return heartbeats.select(PARTITION, "uuid", "name", F.col("ts").alias("first"),
                             F.col("ts").alias("last"), eff.alias("first_interval"),
                             eff.alias("last_interval"), eff.alias("min_interval"))


def fold(spans: DataFrame) -> DataFrame:
    """Spans (of one heartbeat or more, overlapping or not) folded into the fewest: two
    whose heartbeats come less than GAP apart become one."""
    key = [PARTITION, "uuid", "name"]
    order = Window.partitionBy(*key).orderBy("first", "last")
    before = order.rowsBetween(Window.unboundedPreceding, -1)
    first, reach = F.unix_micros("first"), F.max(F.unix_micros("last")).over(before)
    starts = (reach.isNull() | (first - reach >= int(GAP * 1e6))).cast("int")
    islands = spans.select("*", starts.alias("starts")).select(
        "*", F.sum("starts").over(order.rowsBetween(Window.unboundedPreceding, 0))
        .alias("island"))
    return (islands.groupBy(*key, "island")
            .agg(F.min("first").alias("first"), F.max("last").alias("last"),
                 F.min_by("first_interval", "first").alias("first_interval"),
                 F.max_by("last_interval", "last").alias("last_interval"),
                 F.min("min_interval").alias("min_interval"))
            .select(*TABLES[NAME].fieldNames()))


def stage(spark, lake: Lake, run: str, new_dates: list[str]) -> tuple[dict, int]:
    """Write the new spans of ``new_dates`` (the dates this run added heartbeats to, read
    from its staging) and of any date whose heartbeats have no spans yet; return the
    intent entry (date -> {"add": new files, "remove": the date's old span files}) and
    the number of spans written."""
    stored = {d: sorted(lake.partition_files(NAME, d)) for d in new_dates}
    stored = {d: files for d, files in stored.items() if files}
    backfill = missing(lake)
    parts = []
    read = spark.read.schema(TABLES["heartbeats"])
    if new_dates:
        base = os.path.join(lake.staging(run), "heartbeats")
        parts.append(of_heartbeats(read.option("basePath", base).parquet(
            *(os.path.join(base, f"date={d}") for d in new_dates))))
    if backfill:
        parts.append(of_heartbeats(read.option("basePath", lake.table("heartbeats")).parquet(
            *(lake.partition("heartbeats", d) for d in backfill))))
    if stored:
        parts.append(spark.read.schema(TABLES[NAME]).option("basePath", lake.table(NAME))
                     .parquet(*(os.path.join(lake.partition(NAME, d), f)
                                for d, files in stored.items() for f in files)))
    if not parts:
        return {}, 0
    spans = parts[0]
    for part in parts[1:]:
        spans = spans.unionByName(part)
    counted = Observation(NAME)
    # one file per date, a host's spans together and in time order
    (fold(spans).observe(counted, F.count(F.lit(1)).alias("n"))
     .repartition(PARTITION).sortWithinPartitions(PARTITION, *ORDER[NAME])
     .write.partitionBy(PARTITION).parquet(os.path.join(lake.staging(run), NAME)))
    return ({date: {"add": files, "remove": stored.get(date, [])}
             for date, files in lake.staged_files(run, NAME).items()}, counted.get["n"])


def missing(lake: Lake) -> list[str]:
    """The dates whose stored heartbeats have no spans yet."""
    return sorted(set(lake.dates("heartbeats")) - set(lake.dates(NAME)))

