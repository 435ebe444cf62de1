"""Check timelines of the history lake: a check's results collapsed into state changes and
segments.

Consecutive results of one status are one segment that lasts until the next status change
(the last one until ``until``). States are raw plugin statuses (no ``max_check_attempts``
soft states); a result without a status counts as UNKNOWN.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from fleetwatch.lake.times import secs

STATES = ("OK", "WARNING", "CRITICAL", "UNKNOWN")


def state_name(status):
    """The state name of a status column (UNKNOWN outside 0..3)."""
    names = F.array(*[F.lit(s) for s in STATES])
    return F.when(status.between(0, 3), F.element_at(names, status + 1)).otherwise("UNKNOWN")


def state_changes(results: DataFrame) -> DataFrame:
    """Results with ``t`` (epoch s) and ``prev`` (the check's previous status), keeping only
    those whose status differs from the previous one (a check's first result too)."""
    order = Window.partitionBy("uuid", "plugin").orderBy("t", "msg_id")
    return (results.select("uuid", "plugin", secs().alias("t"), "ts", "msg_id", "output",
                           F.coalesce(F.col("status"), F.lit(3)).alias("status"))
            .withColumn("prev", F.lag("status").over(order))
            .filter(F.col("prev").isNull() | (F.col("prev") != F.col("status"))))


def segments(results: DataFrame, since: float | None, until: float) -> DataFrame:
    """One row per run of a status: uuid, plugin, status, state, start, end, seconds, output."""
    order = Window.partitionBy("uuid", "plugin").orderBy("t")
    seg = (state_changes(results)
           .withColumn("end", F.coalesce(F.lead("t").over(order), F.lit(float(until))))
           .withColumn("start", F.greatest(F.col("t"), F.lit(float(since))) if since is not None
                       else F.col("t"))
           .withColumn("end", F.least(F.col("end"), F.lit(float(until))))
           .filter(F.col("end") > F.col("start")))
    return seg.select("uuid", "plugin", "status", state_name(F.col("status")).alias("state"),
                      F.timestamp_seconds("start").alias("start"),
                      F.timestamp_seconds("end").alias("end"),
                      (F.col("end") - F.col("start")).alias("seconds"), "output")
