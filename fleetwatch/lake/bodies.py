"""The tables' rows made back into messages, for a replay (:mod:`fleetwatch.lake.follow`) whose
point is older than what the landing files still hold.

One query per message table for the rows that landed at or after a time (``received``; a row
compacted before the tables kept it, by its ``ts``), each message one row: a STATS from its
``metrics`` rows grouped by msg_id (:func:`stats`: its numeric metrics, and its labelled series
as its ``series``: the table keeps no other), the others one row each. The body holds the
fields the table keeps (msg_id, uuid, ts and the table's columns, ``perfdata`` and ``plugins``
as JSON again; null fields left out), not the fields it drops (``retry``, ``dup``, a HELLO's
``heartbeat``...). The rows come sorted in the lake's order
(:func:`fleetwatch.lake.landed.order`) and are read a partition at a time.
"""

from __future__ import annotations

import json
import os
from functools import reduce

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fleetwatch.lake.landed import MESSAGE_TABLES, Event
from fleetwatch.lake.schema import SOURCE_TYPES, TABLES
from fleetwatch.lake.tables import NEEDS
from fleetwatch.lake.times import secs

#: table -> the body fields it keeps besides msg_id, uuid and ts (what compaction takes)
FIELDS = {table: tuple(f for f in NEEDS[table] if f != "type") for table in MESSAGE_TABLES}
#: body fields the tables keep as JSON text
JSON_TEXT = ("perfdata", "plugins")


def tables_of(types) -> list[str]:
    """The message tables holding any of ``types`` (all of them for none)."""
    return [t for t in MESSAGE_TABLES if not types or set(SOURCE_TYPES[t]) & set(types)]


def messages(spark: SparkSession, lake: str, table: str) -> DataFrame | None:
    """Table ``table`` as one row per message: msg_id, type, uuid, router, received, path
    (null in rows compacted before the tables kept it), at (the lake's order: received,
    else ts), ts (epoch seconds), body (JSON text); None if never written."""
    path = os.path.join(lake, "tables", table)
    if not os.path.isdir(path):
        return None
    df = spark.read.schema(TABLES[table]).parquet(path)
    if table == "metrics":
        df = stats(df)
    if table == "registrations":
        type_ = F.col("kind")
    else:
        type_ = F.lit(SOURCE_TYPES[table][0])
    body = F.to_json(F.struct(F.col("msg_id"), F.col("uuid"), secs().alias("ts"),
                              *(F.col(f) for f in FIELDS[table])))
    return df.select("msg_id", type_.alias("type"), "uuid", "router", "received", "path",
                     F.coalesce(F.col("received"), secs()).alias("at"), secs().alias("ts"),
                     body.alias("body"))


def stats(rows: DataFrame) -> DataFrame:
    """``metrics`` rows grouped back into STATS: the message's columns, ``metrics`` (its rows
    without labels, {name: value}) and ``series`` (its labelled rows as entries {name,
    labels, value, kind}; null when it has none, so the body leaves it out)."""
    flat = F.col("labels").isNull()
    series = F.collect_list(F.when(~flat, F.struct(F.col("metric").alias("name"), "labels",
                                                   "value", "kind")))
    return (rows.groupBy("msg_id", "uuid", "router", "received", "path", "ts", "hostname",
                         "source")
            .agg(F.map_from_entries(F.collect_list(F.when(flat, F.struct("metric", "value"))))
                 .alias("metrics"),
                 F.when(F.size(series) > 0, series).alias("series")))


def since(spark: SparkSession, lake: str, at: float, types=(), uuids=()) -> DataFrame | None:
    """Every message of the tables landed at or after ``at`` (of ``types``, from ``uuids``
    when given), in the lake's order; None when no table holds such types."""
    parts = [df for df in (messages(spark, lake, t) for t in tables_of(types)) if df is not None]
    if not parts:
        return None
    df = reduce(DataFrame.unionByName, parts).where(F.col("at") >= F.lit(at))
    if types:
        df = df.where(F.col("type").isin(*types))
    if uuids:
        df = df.where(F.col("uuid").isin(*uuids))
    return df.orderBy("at", "ts", "msg_id")


def find(spark: SparkSession, lake: str, msg_id: str) -> Event | None:
    """The message ``msg_id`` as the tables hold it, or None."""
    parts = [df.where(F.col("msg_id") == msg_id).limit(1)
             for df in (messages(spark, lake, t) for t in MESSAGE_TABLES) if df is not None]
    rows = reduce(DataFrame.unionByName, parts).collect() if parts else []
    events = sorted((event(r) for r in rows), key=lambda e: (e.received or 0.0, e.router))
    return events[0] if events else None


def event(row) -> Event:
    """A row of :func:`messages` as an :class:`Event`."""
    body = json.loads(row["body"])
    for name in JSON_TEXT:
        if isinstance(body.get(name), str):
            try:
                body[name] = json.loads(body[name])
            except ValueError:
                pass            # kept as the text the table holds
    path = tuple(row["path"] or ()) or (row["router"],)      # compacted before: the router
    return Event(row["msg_id"], row["type"], row["uuid"], row["router"], row["received"], body,
                 path=path)


def events(df: DataFrame, progress=None, every: int = 10_000):
    """The rows of ``df`` (from :func:`since`) as events, a partition at a time;
    ``progress(n)`` every ``every`` events."""
    n = 0
    for row in df.toLocalIterator(prefetchPartitions=True):
        yield event(row)
        n += 1
        if progress is not None and n % every == 0:
            progress(n)
