"""Metric queries of the history lake: which STATS are a host's, per-bucket aggregates, and
the aggregate a ranking of hosts is by.

Buckets are aligned to the epoch (a ``1d`` bucket is a UTC day); ``p95`` is the smallest
value with at least 95 % of the bucket at or below it (nearest rank: Spark's
``percentile_approx``, exact for buckets under :data:`ACCURACY` points).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from fleetwatch.protocol import REPORTERS
from fleetwatch.lake.times import secs

#: percentile_approx accuracy: exact below this many values per group
ACCURACY = 10000
AGGREGATES = ("avg", "max", "min", "p95", "last")


def reporter() -> Column:
    """Whose own counters a ``metrics`` row carries (``router``, ``sink`` or
    ``scheduler``), from the router's stamp as :func:`fleetwatch.protocol.reporter` reads
    it live (SPEC 4.3); null for an agent's, whatever its ``source`` says. A row compacted
    before the ``path`` column is a router's only when its uuid is its router's."""
    path = F.col("path")
    last = F.coalesce(F.element_at(path, -1), F.col("router"))
    return (F.when(F.col("uuid") != last, F.lit(None))
            .when(path.isNull() | (F.size(path) == 1), F.lit("router"))
            .when(F.col("source").isin(*sorted(REPORTERS)), F.col("source")))


def not_internal():
    """Agents' STATS only: a router's, sink's or scheduler's own counters are not a host's
    metrics (who sent a row is the stamp's word: :func:`reporter`)."""
    return reporter().isNull()


def named(metric: str, labels: dict[str, str] | None = None) -> Column:
    """The ``metrics`` rows of ``metric``; with ``labels``, only the labelled series that
    have each of them (a row of a STATS's ``metrics`` has none)."""
    cond = F.col("metric") == metric
    for key, value in (labels or {}).items():
        cond &= F.coalesce(F.col("labels")[key] == value, F.lit(False))
    return cond


def aggregate(by: str) -> Column:
    """The aggregate of ``value`` named ``by`` (one of :data:`AGGREGATES`), per group."""
    values = {"avg": F.avg("value"), "max": F.max("value"), "min": F.min("value"),
              "p95": F.percentile_approx("value", 0.95, ACCURACY),
              "last": F.max_by("value", "ts")}
    if by not in values:
        raise ValueError(f"by: expected one of {', '.join(AGGREGATES)}, got {by!r}")
    return values[by]


def downsample(metrics: DataFrame, bucket: float) -> DataFrame:
    """count, avg, max and p95 of ``value`` per epoch-aligned bucket of ``bucket`` seconds."""
    start = F.floor(secs() / bucket) * bucket
    return (metrics.groupBy(F.timestamp_seconds(start).alias("bucket"))
            .agg(F.count("value").alias("count"), F.avg("value").alias("avg"),
                 F.max("value").alias("max"),
                 F.percentile_approx("value", 0.95, ACCURACY).alias("p95"))
            .orderBy("bucket"))
