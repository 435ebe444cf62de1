"""Availability in the history lake: uptime per (uuid, UTC day) from heartbeats, or from the
runs ``heartbeat_spans`` keeps (fleetwatch/lake/spans.py).

A host is up from one heartbeat to the next when they are at most ``intervals`` heartbeat
intervals apart; a longer gap counts as down, whole. ``since`` and ``until`` act as
heartbeats of that rule (a host first heard 10 minutes after ``since`` was down those 10
minutes). The interval is the heartbeat's own ``interval`` unless given (a heartbeat without
one counts with 2 s, the agent's default). Per UTC day:
``uptime_pct = 100 * up_seconds / seconds``, where ``seconds`` is the part of the day inside
the window. With downtimes to excuse (:func:`downtime_windows`, from the ``lifecycle``
table), the down time inside a downtime of the host counts as up.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from sinks.alerting.hosts.rules import DEFAULT_INTERVAL
from fleetwatch.lake.schema import PARTITION
from fleetwatch.lake.spans import counted_interval
from fleetwatch.lake.times import DAY, day_of, secs


def uptime(spark: SparkSession, heartbeats: DataFrame, since: float, until: float,
           interval: float | None = None, intervals: float = 3.0,
           shortest: float | None = None, excused: DataFrame | None = None) -> DataFrame:
    """seconds, up_seconds, down_seconds and uptime_pct per (uuid, UTC day) of
    ``heartbeats`` (already limited to the window); the rule is in the module docstring.

    Only the gaps longer than the shortest allowed one (``intervals`` x the shortest
    interval: ``interval``, else ``shortest``, else read from the data) can be down, and two
    heartbeats in one bucket of that width are closer than that. So each (uuid, bucket)
    is first reduced to its first and last heartbeat, which is a map-side aggregation,
    and only those runs are sorted per uuid (:func:`tile`): about 2 per bucket instead of
    every heartbeat.
    """
    if interval:    # every heartbeat counts with it: nothing to carry but the times
        hb = heartbeats.select("uuid", secs().alias("t"))
        shortest = interval
        said = [F.lit(float(interval)).alias("eff_first"), F.lit(float(interval)).alias("eff")]
    else:
        hb = heartbeats.select("uuid", secs().alias("t"), counted_interval().alias("eff"))
        if shortest is None:
            shortest = hb.agg(F.min("eff")).first()[0] or DEFAULT_INTERVAL
        said = [F.min_by("eff", "t").alias("eff_first"), F.max_by("eff", "t").alias("eff")]
    width = intervals * shortest
    runs = (hb.groupBy("uuid", F.floor(F.col("t") / width).alias("b"))
            .agg(F.min("t").alias("first"), F.max("t").alias("last"), *said))
    return tile(spark, runs, since, until, intervals, excused)


def spans_in(table: DataFrame, since: float | None, until: float | None,
             interval: float | None = None) -> DataFrame:
    """``heartbeat_spans`` rows as runs for :func:`tile` (uuid, first, last, eff_first,
    eff, and min_eff, the shortest interval counted): those with a heartbeat in
    ``since <= ts < until``, cut at ``since`` and ``until`` (why that is exact, and when:
    fleetwatch/lake/spans.py)."""
    first, last = secs("first"), secs("last")
    if since is not None:
        table = table.filter((F.col(PARTITION) >= day_of(since)) & (last >= since))
        first = F.greatest(first, F.lit(float(since)))
    if until is not None:
        table = table.filter((F.col(PARTITION) <= day_of(until)) & (secs("first") < until))
        last = F.least(last, F.lit(float(until)))
    if interval:
        said = [F.lit(float(interval)).alias(c) for c in ("eff_first", "eff", "min_eff")]
    else:
        said = [F.col("first_interval").alias("eff_first"),
                F.col("last_interval").alias("eff"), F.col("min_interval").alias("min_eff")]
    return table.select("uuid", first.alias("first"), last.alias("last"), *said)


def tile(spark: SparkSession, runs: DataFrame, since: float, until: float,
         intervals: float = 3.0, excused: DataFrame | None = None) -> DataFrame:
    """The availability of runs of heartbeats (uuid, first, last, eff_first: the interval
    the first counts with, eff: the one the last counts with; the heartbeats of a run
    closer together than any gap the rule can call down): per (uuid, UTC day) over
    ``since`` .. ``until``. Each run gives its segments: [first, last) up,
    [last, next first) (to ``until`` for the last), and for a uuid's first run
    [since, first); they tile the window, so summing their overlap with each day gives the
    day's seconds and its up seconds. ``excused`` (uuid, start, end: a host's downtimes,
    not overlapping each other): the down time inside them counts as up."""
    if until <= since:
        return spark.createDataFrame([], "uuid string, date string, seconds double, "
                                         "up_seconds double, down_seconds double, "
                                         "uptime_pct double")
    order = Window.partitionBy("uuid").orderBy("first")
    runs = runs.select("*", F.coalesce(F.lead("first").over(order), F.lit(float(until)))
                       .alias("next"), F.lag("first").over(order).isNull().alias("is_first"))

    def segment(start, end, limit):
        up = F.lit(True) if limit is None else end - start <= limit * intervals
        return F.struct(start.alias("start"), end.alias("end"), up.alias("up"))
    inside = segment(F.col("first"), F.col("last"), None)
    gap = segment(F.col("last"), F.col("next"), F.col("eff"))
    head = segment(F.lit(float(since)), F.col("first"), F.col("eff_first"))
    segments = (runs.select("uuid", F.explode(
                    F.when(F.col("is_first"), F.array(head, inside, gap))
                    .otherwise(F.array(inside, gap))).alias("s"))
                .select("uuid", "s.*").filter(F.col("end") > F.col("start")))
    day = F.explode(F.sequence(F.floor(F.col("start") / DAY).cast("long"),
                               (F.ceil(F.col("end") / DAY) - 1).cast("long")))
    overlap = (F.least(F.col("end"), (F.col("d") + 1) * DAY)
               - F.greatest(F.col("start"), F.col("d") * DAY))
    # excused: a down stretch's part in a downtime, counted up (and not again in seconds)
    segments = (segments.withColumn("excused", F.lit(False)) if excused is None
                else _excuse(segments, excused))
    return (segments.select("uuid", "start", "end", "up", "excused", day.alias("d"))
            .select("uuid", "d", "up", "excused", overlap.alias("overlap"))
            .groupBy("uuid", "d")
            .agg(F.sum(F.when(~F.col("excused"), F.col("overlap")).otherwise(0.0))
                 .alias("seconds"),
                 F.sum(F.when(F.col("up"), F.col("overlap")).otherwise(0.0))
                 .alias("up_seconds"))
            .select("uuid", F.date_from_unix_date("d").cast("string").alias("date"),
                    "seconds", "up_seconds",
                    (F.col("seconds") - F.col("up_seconds")).alias("down_seconds"),
                    (F.col("up_seconds") * 100.0 / F.col("seconds")).alias("uptime_pct")))


def _excuse(segments: DataFrame, excused: DataFrame) -> DataFrame:
    """The parts of the down ``segments`` inside ``excused``, as segments of their own
    (``excused`` true; the others false): counted as up, and not again in the seconds."""
    w = excused.select("uuid", F.col("start").alias("w_start"), F.col("end").alias("w_end"))
    inside = (segments.filter(~F.col("up")).join(F.broadcast(w), "uuid")
              .filter((F.col("w_start") < F.col("end")) & (F.col("w_end") > F.col("start")))
              .select("uuid", F.greatest("start", "w_start").alias("start"),
                      F.least("end", "w_end").alias("end"), F.lit(True).alias("up"),
                      F.lit(True).alias("excused")))
    return segments.withColumn("excused", F.lit(False)).unionByName(inside)


def downtime_windows(rows, hosts, since: float, until: float) -> list[tuple[str, float, float]]:
    """(uuid, start, end) of the time each host spent in a downtime of the host (not of a
    check) within ``since`` .. ``until``, overlaps merged: from the ``lifecycle`` table's
    downtime rows (id, hostname: the host glob, start, end; a ``start`` row's end is the
    planned one, an ``end`` row's the actual one, so the earliest wins) and ``hosts``
    ((uuid, hostname) pairs, matched as the alerting sinks match:
    :func:`sinks.alerting.downtimes.rules.names`)."""
    from sinks.alerting.downtimes.rules import Downtime, names
    from sinks.alerting.silences.rules import Subject
    ends: dict[tuple, float] = {}
    for r in rows:
        key = (r["id"], r["hostname"], r["start"])
        end = until if r["end"] is None else r["end"]
        ends[key] = min(end, ends.get(key, end))
    found: dict[str, list[tuple[float, float]]] = {}
    for (id_, glob, start), end in ends.items():
        start, end = max(start, since), min(end, until)
        if end <= start:
            continue
        probe = Downtime(id_, glob, None, start, end)
        for uuid, hostname in hosts:
            if names(probe, Subject(uuid, hostname)):
                found.setdefault(uuid, []).append((start, end))
    out = []
    for uuid, spans_ in sorted(found.items()):
        merged: list[list[float]] = []
        for start, end in sorted(spans_):
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        out += [(uuid, start, end) for start, end in merged]
    return out


def bounds(df: DataFrame, first: str, last: str, interval: str, since: float | None,
           until: float | None, every: float | None):
    """((since, until), shortest interval): the window's missing ends and, unless
    ``every`` is given, the shortest interval, from ``df`` in one pass (columns ``first``,
    ``last`` and ``interval`` of its rows)."""
    if since is not None and until is not None and every is not None:
        return (since, until), every
    low, high, shortest = df.agg(F.min(first), F.max(last), F.min(interval)).first()
    since = (low or 0.0) if since is None else since
    until = (high or 0.0) if until is None else until
    return (since, until), every or shortest or DEFAULT_INTERVAL
