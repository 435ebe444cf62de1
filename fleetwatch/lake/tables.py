"""Landing lines to table rows, as Spark DataFrames (no I/O decisions: compact.py does those).

:func:`read_landing` parses landing files with the explicit landing schema and flattens what
the tables need; a line is *bad* when Spark could not parse it (cut short by a crash, not
JSON, a field of the wrong type), when it lacks msg_id or ts, when its ts is outside the
codec's range (1970 to 9999, SPEC 4), when its type has no table, or when its body's uuid
is not the stamped one.

:func:`messages` keeps one line per msg_id, deterministically: the one received first (then
the lowest router id), so a rerun picks the same copy of a resent message as a clean run.
Duplicates are rare (resends after a sink crash, replays), so they are found first by their
ids alone and only those lines are resolved; the rest flows through without a shuffle.
:func:`rows` turns messages into a table's columns (a STATS into one row per numeric
metric and per good labelled series: fleetwatch/lake/labels.py; a router's STATS into one
``drops`` row per good entry: fleetwatch/lake/drops.py).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from fleetwatch.protocol import TS_END, TS_MIN
from fleetwatch.lake import drops, labels
from fleetwatch.lake.schema import (CORRUPT, COLUMNS, LANDING, PATH, SOURCE_TYPES,
                                   TABLE_OF_TYPE)


#: table -> the flattened landing columns it needs (besides msg_id, ts, date, uuid, router)
NEEDS = {
    "metrics": ("hostname", "source", "metrics", "series"),
    "heartbeats": ("name", "interval"),
    "results": ("plugin", "status", "output", "long_output", "perfdata", "command_id",
                "slot", "started", "duration"),
    "notifications": ("severity", "text", "source"),
    "registrations": ("type", "name", "hostname", "version", "plugins"),
    "drops": ("source", "drops"),
}


def read_landing(spark: SparkSession, paths: list[str]) -> DataFrame:
    """Landing files as flat rows: type, uuid, router, received, path (an array: the line's
    ``path`` split, else [router]), msg_id, ts (timestamp), date, every body field any
    table needs, and ``bad`` (true for a line no table takes)."""
    raw = (spark.read.schema(LANDING).option("mode", "PERMISSIVE")
           .option("columnNameOfCorruptRecord", CORRUPT).json(paths))
    msg = F.col("msg")
    fields = {name for needs in NEEDS.values() for name in needs} - {"type"}
    ok = (F.col(CORRUPT).isNull() & msg["msg_id"].isNotNull() & msg["ts"].isNotNull()
          & F.col("uuid").isNotNull() & F.col("type").isin(*TABLE_OF_TYPE)
          & (msg["ts"] >= TS_MIN) & (msg["ts"] < TS_END)     # the codec's range (SPEC 4)
          & (msg["uuid"].isNull() | (msg["uuid"] == F.col("uuid"))))
    ok = F.coalesce(ok, F.lit(False))
    ts = F.when(ok, F.timestamp_seconds(msg["ts"]))
    # a line names its path only when it came through sites (sinks/history/lines.py)
    path = F.coalesce(F.split(F.nullif(F.col("path"), F.lit("")), ","),
                      F.when(F.col("router").isNotNull(), F.array(F.col("router"))))
    path = path.cast(PATH)             # elements nullable, as the tables declare them
    return raw.select(
        "type", "uuid", "router", "received", path.alias("path"),
        msg["msg_id"].alias("msg_id"),
        ts.alias("ts"),
        F.date_format(ts, "yyyy-MM-dd").alias("date"),
        *(msg[name].alias(name) for name in sorted(fields)),
        (~ok).alias("bad"))


def duplicated_ids(landing: DataFrame) -> DataFrame:
    """msg_ids on more than one good line of ``landing`` (a hash aggregate of the ids only:
    usually empty, so the tables need no per-row deduplication)."""
    return (landing.where(~F.col("bad")).groupBy("msg_id").count()
            .where(F.col("count") > 1).select("msg_id"))


def messages(landing: DataFrame, table: str, dups: DataFrame | None = None,
             dedupe_all: bool = False) -> DataFrame:
    """The good lines of ``table``'s types, one per msg_id: the one received first (then
    the lowest router id). ``dups`` (small, broadcast) are the msg_ids to resolve, the
    other lines pass through without a shuffle; ``dedupe_all`` resolves every msg_id (one
    shuffle of the rows, for a landing area made mostly of duplicates)."""
    cols = ("ts", "date", "uuid", "router", "received", "path", *NEEDS[table])
    good = lines(landing, table)
    order = F.struct(F.col("received"), F.col("router"))
    first = F.min_by(F.struct(*cols), order).alias("m")
    if dedupe_all:
        return good.groupBy("msg_id").agg(first).select("msg_id", "m.*")
    if dups is None:
        return good.select("msg_id", *cols)
    ids = F.broadcast(dups)
    single = good.join(ids, "msg_id", "left_anti").select("msg_id", *cols)
    resolved = (good.join(ids, "msg_id", "left_semi").groupBy("msg_id").agg(first)
                .select("msg_id", "m.*"))
    return single.unionByName(resolved)


def lines(landing: DataFrame, table: str) -> DataFrame:
    """The good lines of ``landing`` that ``table`` takes rows from: those of its types
    (for ``drops``, the STATS that hold a ``drops``)."""
    good = landing.where(~F.col("bad") & F.col("type").isin(*SOURCE_TYPES[table]))
    return good.where(F.col("drops").isNotNull()) if table == "drops" else good


def already_stored(stored: DataFrame, msgs: DataFrame) -> DataFrame:
    """The msg_ids of ``msgs`` that ``stored`` (a table's affected partitions) holds: a scan
    of the stored msg_id column against the broadcast new ids, no shuffle of either."""
    return (stored.select("msg_id").join(F.broadcast(msgs.select("msg_id")), "msg_id",
                                         "left_semi").distinct())


def rows(msgs: DataFrame, table: str) -> DataFrame:
    """``msgs`` (from :func:`messages`) as rows of ``table``, columns in table order."""
    if table == "drops":
        return drops.rows(msgs)
    if table == "metrics":
        msgs = labels.rows(msgs)
    elif table == "registrations":
        msgs = msgs.withColumn("kind", F.col("type"))
    return msgs.select(*(name for name, _, _ in COLUMNS[table]))
