"""Times and windows of the history queries: how ``since``, ``until`` and durations are read,
and the rows of a table between two times.

A time is epoch seconds, a datetime (a naive one is UTC), a date, ISO 8601 text
(``2026-11-20``, ``2026-11-20T10:00:00Z``) or a duration back from now (``90m``, ``12h``,
``7d``): read by :mod:`fleetwatch.lake.instants` (no Spark: ``fleetwatch tail --since`` reads
them too). A window is ``since <= ts < until``; :func:`window` never reads the ``date``
partitions outside it. :func:`overlapping` does the same for rows that last from ``first`` to
``last`` (partitioned by the date of ``last``).
"""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from fleetwatch.lake.instants import DAY, day_of, epoch, seconds  # noqa: F401 (the queries' names)
from fleetwatch.lake.schema import PARTITION


def _instant(ts: float):
    return F.lit(datetime.fromtimestamp(ts, timezone.utc))


def secs(column: str = "ts"):
    """Epoch seconds (double) of a timestamp column."""
    return F.unix_micros(column) / 1e6


def window(df: DataFrame, since: float | None, until: float | None) -> DataFrame:
    """Rows with ``since <= ts < until``, reading only the date partitions that can hold them."""
    if since is not None:
        df = df.filter((F.col(PARTITION) >= day_of(since)) & (F.col("ts") >= _instant(since)))
    if until is not None:
        df = df.filter((F.col(PARTITION) <= day_of(until)) & (F.col("ts") < _instant(until)))
    return df


def overlapping(df: DataFrame, since: float | None, until: float | None,
                first: str = "first", last: str = "last") -> DataFrame:
    """Rows whose ``[first, last]`` meets ``[since, until)``: ``first < until`` and ``last >=
    since`` (a row with ``first == last`` is in when ``since <= first < until``). ``df`` is
    partitioned by the date of ``last``: the dates before ``since`` are never read."""
    if since is not None:
        df = df.filter((F.col(PARTITION) >= day_of(since)) & (F.col(last) >= _instant(since)))
    if until is not None:
        df = df.filter(F.col(first) < _instant(until))
    return df
