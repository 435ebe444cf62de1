"""The history lake for notebooks and ``fleetwatch history sql``: tables and ready-made queries.

:class:`History` opens a lake (a path, or the operator config's ``history:`` section) and
gives one DataFrame per table (``h.metrics``, ``h.heartbeats``, ``h.results``,
``h.notifications``, ``h.registrations``, ``h.heartbeat_spans``; ``h.table("lifecycle")``,
``h.table("deliveries")``) plus the queries operators ask for again and again. Every query
returns a lazy DataFrame (``.show()``, ``.toPandas()``, ``.collect()``); the rules that
decide their numbers are written down here and in docs/concepts/history.md, because two
reasonable people would compute availability or time-in-state differently:

- Times (``since``, ``until``) are epoch seconds, datetimes (naive ones are UTC), ISO 8601
  strings (``2026-11-20``, ``2026-11-20T10:00:00Z``) or a duration back from now (``90m``,
  ``12h``, ``7d``). A window is ``since <= ts < until``; the ``date`` partitions outside it are
  never read.
- A host is named by hostname or uuid. Hostnames come from the agents' HELLOs and their own
  REGISTERs (``name`` ``agent``), keyed by the stamped uuid, never from a body's claim
  (fleetwatch/lake/hostnames.py): a ``metrics`` row is named by the latest of them at or
  before it (its STATS's own ``hostname`` is ``claimed_hostname``), a uuid as a whole
  (``hosts``, timelines, availability) by its latest; tables without a hostname (results,
  heartbeats, notifications) are matched through the uuid.
- ``metric()`` buckets are aligned to the epoch (a ``1d`` bucket is a UTC day); ``p95`` is
  the smallest value with at least 95 % of the bucket at or below it (nearest rank: Spark's
  ``percentile_approx``, exact for buckets under 10,000 points).
- Check timelines collapse consecutive results of one status into one segment that lasts
  until the next status change. The state at ``since`` is the last result up to ``lookback``
  before it; the last segment lasts until ``until`` (default: the latest result in the
  selection). States are raw plugin statuses (no ``max_check_attempts`` soft states).
- Availability: a host is up from one heartbeat to the next when they are at most
  ``intervals`` heartbeat intervals apart; a longer gap counts as down, whole. ``since`` and
  ``until`` act as heartbeats of that rule (a host first heard 10 minutes after ``since`` was
  down those 10 minutes). The interval is the heartbeat's own ``interval`` unless given
  (a heartbeat without one counts with 2 s, the agent's default).
  Per UTC day: ``uptime_pct = 100 * up_seconds / seconds``, where ``seconds`` is the part
  of the day inside the window (default window: first to last heartbeat of the selection).
  The answer is read from ``heartbeat_spans`` (fleetwatch/lake/spans.py) whenever they give
  exactly this one, else from every heartbeat. ``exclude_downtime=True``: the down time
  inside a downtime of the host (the ``lifecycle`` table: fixed and recurring downtimes of
  the host, not of a check, cut at their removal) counts as up, as in Checkmk's reports.
- ``lifecycle()``: what compaction copied from the state database (alert events, mutes,
  acks, downtime windows: fleetwatch/lake/lifecycle.py), in time order; ``deliveries()``:
  every attempt to send an alert and what the service answered (fleetwatch/lake/
  deliveries.py), in time order.
- ``drops()``: what routers dropped per agent, message type and sink type (the ``drops``
  table, from the routers' own STATS: fleetwatch/lake/drops.py), each entry from its first
  to its last drop; ``gaps()`` puts them beside what landed, per bucket, with a verdict
  (``ok``, ``no data``, ``dropped``), a drop entry's count spread evenly over the time it
  spans (an estimate: fleetwatch/lake/gaps.py).

This module is the facade (the lake, its tables, host names, the query methods); the
queries are built from fleetwatch/lake/times.py (times and windows), metrics.py (buckets,
percentiles), timelines.py (check state segments), availability.py (uptime from
heartbeats or spans) and gaps.py (landed beside dropped).
"""

from __future__ import annotations

import functools
import os
import re
from datetime import datetime, timezone

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from fleetwatch.lake import deliveries, hostnames, lifecycle, spans
from fleetwatch.lake.availability import bounds, downtime_windows, spans_in, tile, uptime
from fleetwatch.lake.gaps import LANDED, Drop, begins, buckets, report
from fleetwatch.lake.metrics import aggregate, downsample, named, not_internal
from fleetwatch.lake.schema import PARTITION, TABLE_NAMES, TABLES
from fleetwatch.lake.spans import counted_interval
from fleetwatch.lake.timelines import segments, state_changes, state_name
from fleetwatch.lake.times import day_of, epoch, overlapping, seconds, secs, window


class History:
    """One lake, its tables as DataFrames, and the ready-made queries (module docstring)."""

    def __init__(self, spark: SparkSession, lake: str, use_spans: bool = True):
        self.spark, self.lake = spark, str(lake).rstrip("/")
        #: availability from ``heartbeat_spans`` where they give the exact answer (False:
        #: always from every heartbeat, as over a lake compaction never wrote them for)
        self.use_spans = use_spans
        self._hosts: list | None = None

    @classmethod
    def open(cls, where=None, spark: SparkSession | None = None) -> "History":
        """A lake given as a path, an operator config file (``*.yaml``), an operator config
        or its ``history:`` settings, or None for the default operator config
        (/etc/fleetwatch/fleetwatch.yaml). Spark comes from those settings (``master``,
        ``conf``) unless ``spark`` is given; a bare path gets ``local[*]``."""
        from fleetwatch.lake import spark as sparks
        if where is None or str(where).endswith((".yaml", ".yml")):
            from fleetwatch.config import OPERATOR_CONFIG, load_section
            from fleetwatch.lake.settings import HistorySettings
            where = load_section(HistorySettings, str(where or OPERATOR_CONFIG), "history")
        settings = getattr(where, "history", where)
        if hasattr(settings, "lake"):
            lake = settings.lake
            spark = spark or sparks.from_settings(settings)
        else:
            lake = str(where)
            spark = spark or sparks.session()
        return cls(spark, lake)

    # ------------------------------------------------------------ tables
    def path(self, name: str) -> str:
        return f"{self.lake}/tables/{name}"

    def table(self, name: str) -> DataFrame:
        """Table ``name`` (empty, with its columns, before compaction first wrote it)."""
        df = self._stored(name)
        return self.spark.createDataFrame([], TABLES[name]) if df is None else df

    def _stored(self, name: str) -> DataFrame | None:
        """Table ``name``, or None if compaction never wrote it."""
        try:
            df = self.spark.read.schema(TABLES[name]).parquet(self.path(name))
            df.schema       # Spark Connect analyses lazily: ask now, where a missing path says so
            return df
        except AnalysisException as e:
            if e.getCondition() != "PATH_NOT_FOUND":
                raise
            return None

    @property
    def metrics(self) -> DataFrame:
        """The ``metrics`` table with ``hostname`` bound to the agents' HELLOs and own
        REGISTERs (:func:`fleetwatch.lake.hostnames.bind`) and the STATS's own as
        ``claimed_hostname``."""
        stored = self.table("metrics")
        bound = hostnames.bind(stored.withColumn("claimed_hostname", F.col("hostname")),
                               self.registrations)
        cols = [c for name in stored.columns
                for c in ((name, "claimed_hostname") if name == "hostname" else (name,))]
        return bound.select(*cols)

    heartbeats = property(lambda self: self.table("heartbeats"))
    results = property(lambda self: self.table("results"))
    notifications = property(lambda self: self.table("notifications"))
    registrations = property(lambda self: self.table("registrations"))
    heartbeat_spans = property(lambda self: self.table("heartbeat_spans"))

    def _drops_named(self, df: DataFrame | None = None) -> DataFrame:
        """The ``drops`` table (or ``df``, rows of it) with ``hostname`` after ``uuid``: the
        agent's latest HELLO's or own REGISTER's, null if the lake holds none."""
        df = self.table("drops") if df is None else df
        names = F.broadcast(hostnames.latest(self.registrations))
        cols = [c for name in df.columns
                for c in ((name, "hostname") if name == "uuid" else (name,))]
        return df.join(names, "uuid", "left").select(*cols)

    def register(self, names=None) -> list[str]:
        """Each table (and ``hosts``) as a temporary view under its name, for :meth:`sql`;
        with ``names``, only those (each view is a few round trips to a Spark Connect
        server: all of them took 2 s of a warm answer's 8, bench/RESULTS.md)."""
        views = {"metrics": lambda: self.metrics, "drops": lambda: self._drops_named(),
                 "hosts": self._hosts_query}
        wanted = [n for n in (*TABLE_NAMES, "hosts") if names is None or n in names]
        for name in wanted:
            views.get(name, lambda: self.table(name))().createOrReplaceTempView(name)
        return wanted

    def sql(self, query: str) -> DataFrame:
        """Spark SQL over the views of :meth:`register` the query names (a word of it that
        is a view's name, in any case: one named but not used costs a little, one used is
        never missing)."""
        words = {w.lower() for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", query)}
        self.register(words)
        return self.spark.sql(query)

    # ------------------------------------------------------------ hosts
    def _hosts_query(self) -> DataFrame:
        seen = self.registrations.select("uuid", "ts").unionByName(
            self.table("metrics").filter(not_internal()).select("uuid", "ts"))
        return (seen.groupBy("uuid").agg(F.max("ts").alias("last_seen"),
                                         F.min(secs()).alias("first_seen"))
                .join(hostnames.latest(self.registrations), "uuid", "left")
                .select("uuid", "hostname", "last_seen", "first_seen"))

    def _host_rows(self) -> list:
        if self._hosts is None:
            self._hosts = self._hosts_query().collect()
        return self._hosts

    def hosts(self) -> DataFrame:
        """uuid, hostname (its latest HELLO's or own REGISTER's; null if the lake holds
        none), last_seen; read once per :class:`History` (:meth:`refresh` forgets it)."""
        return self.spark.createDataFrame([tuple(r)[:3] for r in self._host_rows()],
                                          "uuid string, hostname string, last_seen timestamp")

    def refresh(self) -> None:
        """Forget the hostnames learnt so far (the lake grew)."""
        self._hosts = None

    def first_seen(self, host: str) -> float | None:
        """When the lake first heard of a hostname (or a uuid): the earliest ``ts`` (epoch
        seconds) of its HELLOs, REGISTERs and STATS; None if it holds none."""
        found = [r["first_seen"] for r in self._host_rows()
                 if host in (r["uuid"], r["hostname"]) and r["first_seen"] is not None]
        return min(found) if found else None

    def uuids(self, host: str) -> list[str]:
        """The uuids a hostname (or a uuid) stands for."""
        found = sorted({r["uuid"] for r in self._host_rows()
                        if host in (r["uuid"], r["hostname"])})
        return found or [host]

    def _named(self, df: DataFrame) -> DataFrame:
        names = F.broadcast(self.hosts().select("uuid", "hostname"))
        return (df.join(names, "uuid", "left")
                .withColumn("hostname", F.coalesce(F.col("hostname"), F.col("uuid"))))

    def named_rows(self, df: DataFrame, host: str) -> DataFrame:
        """The rows of ``df`` (its ``hostname`` bound by :func:`hostnames.bind`) named
        ``host``, or of uuid ``host``. Only the uuids some HELLO or own REGISTER named
        ``host`` are read: files are sorted by uuid, so Parquet skips the other hosts'
        pages."""
        ever = [r["uuid"] for r in hostnames.named(self.registrations, host).collect()]
        return df.filter(F.col("uuid").isin(*ever, host)
                         & ((F.col("hostname") == host) | (F.col("uuid") == host)))

    def _of(self, df: DataFrame, host: str | None) -> DataFrame:
        return df if host is None else df.filter(F.col("uuid").isin(*self.uuids(host)))

    # ------------------------------------------------------------ metrics
    def metric(self, host: str, metric: str, bucket="5m", since=None, until=None,
               labels: dict[str, str] | None = None) -> DataFrame:
        """``metric`` of ``host`` downsampled: bucket, count, avg, max, p95. ``host``: a
        uuid, or a hostname: the rows its HELLOs and REGISTERs named (at or before each
        row). ``labels``: only the labelled series that have them (else every row of the
        name: give them for a labelled series, whose label sets would mix)."""
        df = window(self.metrics, epoch(since), epoch(until))
        df = self.named_rows(df.filter(named(metric, labels)), host)
        return downsample(df, seconds(bucket))

    def top_hosts(self, metric: str, n: int = 10, since=None, until=None,
                  by: str = "avg", labels: dict[str, str] | None = None) -> DataFrame:
        """The ``n`` hosts with the highest ``by`` (avg, max, min, p95, last) of ``metric``
        (with ``labels``, as in :meth:`metric`): hostname, uuid, value, samples."""
        value = aggregate(by)
        df = window(self.metrics, epoch(since), epoch(until))
        df = df.filter(named(metric, labels) & not_internal())
        return (df.groupBy("uuid")
                .agg(F.max_by("hostname", "ts").alias("hostname"), value.alias("value"),
                     F.count("value").alias("samples"))
                .select(F.coalesce("hostname", "uuid").alias("hostname"), "uuid", "value",
                        "samples")
                .orderBy(F.desc("value"), "hostname", "uuid").limit(n))

    # ------------------------------------------------------------ checks
    def _results(self, host, check, since, until, lookback) -> DataFrame:
        start = None if since is None else since - seconds(lookback)
        df = self._of(window(self.results, start, until), host)
        return df if check is None else df.filter(F.col("plugin") == check)

    def latest_result(self, since=None) -> float:
        """Epoch seconds of the newest result (after ``since``), 0 for none: where
        timelines end by default, whatever host or check they show."""
        latest = window(self.results, epoch(since), None).agg(F.max(secs())).first()[0]
        return 0.0 if latest is None else float(latest)

    def check_timeline(self, host=None, check=None, since=None, until=None,
                       lookback="1d") -> DataFrame:
        """Each check's states as segments: hostname, uuid, plugin, state, status, start,
        end, seconds, output (of the first result of the segment)."""
        since, until = epoch(since), epoch(until)
        if until is None:
            until = self.latest_result(since)
        df = self._results(host, check, since, until, lookback)
        return (self._named(segments(df, since, until))
                .select("hostname", "uuid", "plugin", "state", "status", "start", "end",
                        "seconds", "output")
                .orderBy("hostname", "plugin", "start"))

    def time_in_state(self, host=None, check=None, since=None, until=None,
                      lookback="1d") -> DataFrame:
        """Seconds and percent of the window each check spent in each state."""
        seg = self.check_timeline(host, check, since, until, lookback)
        per = Window.partitionBy("uuid", "plugin")
        return (seg.groupBy("hostname", "uuid", "plugin", "state", "status")
                .agg(F.sum("seconds").alias("seconds"))
                .withColumn("percent", F.col("seconds") * 100.0
                            / F.sum("seconds").over(per))
                .orderBy("hostname", "plugin", "status"))

    def alerts(self, host=None, check=None, since=None, until=None,
               lookback="1d") -> DataFrame:
        """Check state changes: ts, hostname, uuid, plugin, from_state (null: first result),
        to_state, status, output; a check's first result only when it is not OK."""
        since, until = epoch(since), epoch(until)
        df = state_changes(self._results(host, check, since, until, lookback))
        df = df.filter(F.col("prev").isNotNull() | (F.col("status") != 0))
        if since is not None:
            df = df.filter(F.col("t") >= since)
        return (self._named(df)
                .select("ts", "hostname", "uuid", "plugin",
                        F.when(F.col("prev").isNotNull(), state_name(F.col("prev")))
                        .alias("from_state"), state_name(F.col("status")).alias("to_state"),
                        "status", "output")
                .orderBy("ts", "hostname", "plugin"))

    # ------------------------------------------------------------ heartbeats, notifications
    def availability(self, host=None, since=None, until=None, interval=None,
                     intervals: float = 3.0, process: str | None = None,
                     exclude_downtime: bool = False) -> DataFrame:
        """Uptime per host and UTC day: hostname, uuid, date, seconds, up_seconds,
        down_seconds, uptime_pct (rule in the module docstring). ``process``: a local
        process's heartbeats instead of the agent's. ``exclude_downtime``: time down
        inside a downtime of the host (the ``lifecycle`` table) counts as up."""
        return (self._named(self.uptime(host, since, until, interval, intervals, process,
                                        exclude_downtime))
                .select("hostname", "uuid", "date", "seconds", "up_seconds", "down_seconds",
                        "uptime_pct")
                .orderBy("hostname", "uuid", "date"))

    def uptime(self, host=None, since=None, until=None, interval=None,
               intervals: float = 3.0, process: str | None = None,
               exclude_downtime: bool = False) -> DataFrame:
        """:meth:`availability` by uuid only (no hostnames, no order): uuid, date, seconds,
        up_seconds, down_seconds, uptime_pct. Read from ``heartbeat_spans`` when they give
        the exact answer (fleetwatch/lake/spans.py), else from every heartbeat."""
        since, until = epoch(since), epoch(until)
        every = None if interval is None else seconds(interval)
        sender = F.col("name").isNull() if process is None else F.col("name") == process
        short = since is not None and until is not None and until - since < spans.GAP
        stored = None if short or not self.use_spans else self._stored(spans.NAME)
        if stored is not None:
            runs = spans_in(self._of(stored, host).filter(sender), since, until, every)
            window_, shortest = bounds(runs, "first", "last", "min_eff", since, until, every)
            if intervals * shortest >= spans.GAP:
                excused = self._downtimes(host, *window_) if exclude_downtime else None
                return tile(self.spark, runs.drop("min_eff"), *window_, intervals, excused)
        df = self._of(window(self.heartbeats, since, until), host).filter(sender)
        beats = df.select(secs().alias("t"), counted_interval(every).alias("eff"))
        (since, until), shortest = bounds(beats, "t", "t", "eff", since, until, every)
        excused = self._downtimes(host, since, until) if exclude_downtime else None
        return uptime(self.spark, df, since, until, every, intervals, shortest, excused)

    def _downtimes(self, host, since: float, until: float) -> DataFrame | None:
        """(uuid, start, end): the hosts' time in their downtimes within the window, or
        None for none (:func:`fleetwatch.lake.availability.downtime_windows`). A flexible
        downtime's windows are not counted: the lake does not say when it began to cover."""
        stored = self._stored(lifecycle.NAME)
        if stored is None or until <= since:
            return None
        rows = (stored.filter((F.col("kind") == "downtime") & F.col("check_name").isNull()
                              & (F.col(PARTITION) <= day_of(until)) & (secs("start") < until)
                              & F.get_json_object("details", "$.flexible").isNull())
                .select("id", "hostname", secs("start").alias("start"),
                        secs("end").alias("end")).collect())
        hosts = [(r["uuid"], r["hostname"]) for r in self._host_rows()]
        if host is not None:
            hosts += [(u, None) for u in self.uuids(host) if u not in {h for h, _ in hosts}]
        found = downtime_windows(rows, hosts, since, until)
        if not found:
            return None
        return self.spark.createDataFrame(found, "uuid string, start double, end double")

    def lifecycle(self, host=None, kind=None, since=None, until=None) -> DataFrame:
        """The alert lifecycle in time order (the ``lifecycle`` table, copied by compaction
        from the state database): ts, kind (alert, muted, held, ack, downtime), action,
        hostname, uuid, check_name, severity, status, text, author, comment, start, end,
        reason, id, key, event_id, details. ``kind``: one or a list. ``host``: its alerts,
        mutes and acks (by uuid or hostname), and the downtimes whose host glob names it."""
        df = window(self.table(lifecycle.NAME), epoch(since), epoch(until))
        if kind is not None:
            df = df.filter(F.col("kind").isin(*([kind] if isinstance(kind, str) else kind)))
        names = F.broadcast(self.hosts().select("uuid", F.col("hostname").alias("named")))
        df = (df.join(names, "uuid", "left")
              .withColumn("hostname", F.coalesce("hostname", "named", "uuid")))
        if host is not None:
            globs = [r["hostname"] for r in df.filter(F.col("kind") == "downtime")
                     .select("hostname").distinct().collect()]
            uuids = self.uuids(host)
            hosts = [(r["uuid"], r["hostname"]) for r in self._host_rows()
                     if r["uuid"] in uuids] or [(host, host)]
            naming = [g for g in globs if downtime_windows(
                [{"id": 0, "hostname": g, "start": 0.0, "end": 1.0}], hosts, 0.0, 1.0)]
            df = df.filter(F.col("uuid").isin(*uuids) | (F.col("hostname") == host)
                           | ((F.col("kind") == "downtime") & F.col("hostname").isin(*naming)))
        return (df.select("ts", "kind", "action", "hostname", "uuid", "check_name", "severity",
                          "status", "text", "author", "comment", "start", "end", "reason",
                          "id", "key", "event_id", "details")
                .orderBy("ts", "event_id"))

    def deliveries(self, channel=None, host=None, since=None, until=None) -> DataFrame:
        """Every attempt to send an alert, in time order (the ``deliveries`` table, copied
        by compaction from the state database): ts, channel, hostname, check_name, action,
        attempt, outcome, status, message_id, answer, latency, grouped, key, alert,
        event_id, worker. ``channel``: one or a list. ``host``: a hostname or a uuid, as the
        alert named its host (its name, else its uuid), the lake's names of it too."""
        df = window(self.table(deliveries.NAME), epoch(since), epoch(until))
        if channel is not None:
            df = df.filter(F.col("channel").isin(
                *([channel] if isinstance(channel, str) else channel)))
        if host is not None:
            uuids = self.uuids(host)
            names = {r["hostname"] for r in self._host_rows()
                     if r["uuid"] in uuids and r["hostname"]}
            df = df.filter(F.col("hostname").isin(host, *uuids, *sorted(names)))
        return (df.select("ts", "channel", "hostname", "check_name", "action", "attempt",
                          "outcome", "status", "message_id", "answer", "latency", "grouped",
                          "key", "alert", "event_id", "worker")
                .orderBy("ts", "event_id"))

    # ------------------------------------------------------------ drops and gaps
    def drops(self, host=None, since=None, until=None, sink=None) -> DataFrame:
        """What routers dropped, in time order: router, uuid, hostname (its latest HELLO's
        or own REGISTER's, null if unknown), type, sink, count, first, last, reported; the
        entries whose ``[first, last]`` meets ``[since, until)``. ``sink``: one sink type or
        a list."""
        df = overlapping(self.table("drops"), epoch(since), epoch(until))
        df = self._of(df, host)
        if sink is not None:
            df = df.filter(F.col("sink").isin(*([sink] if isinstance(sink, str) else sink)))
        return (self._drops_named(df)
                .select("router", "uuid", "hostname", "type", "sink", "count", "first", "last",
                        "reported")
                .orderBy("first", "uuid", "type", "sink", "router"))

    def gaps(self, host: str, since, until, every="1h", sink=None) -> DataFrame:
        """"No data or dropped?" for ``host`` over ``[since, until)``, per bucket of
        ``every`` (aligned to the epoch, cut to the window): start, end, the messages that
        landed (heartbeats, results, stats: STATS messages, notifications), ``dropped``
        (what routers dropped for the host, for ``sink`` only if given: an *estimate*, each
        drop entry's count spread evenly from its first drop to its last), ``verdict`` (ok,
        no data, dropped) and ``drops`` (per type and sink: type, sink, count). The rules
        are fleetwatch/lake/gaps.py's. The buckets start at the host's first message (or its
        first drop) when that is later than ``since``: before it the host did not exist, it
        was not silent. ValueError for a window or a bucket size that does not make buckets
        (at most 10,000)."""
        since, until, every = epoch(since), epoch(until), seconds(every)
        if since is None or until is None:
            raise ValueError("gaps: expected both since and until")
        buckets(since, until, every)            # a bad window or size: before any Spark job
        uuids = self.uuids(host)
        entries = [Drop(*r) for r in self.drops(host, since, until, sink)
                   .select("type", "sink", "count", secs("first").alias("first"),
                           secs("last").alias("last")).collect()]
        since = begins(since, [self.first_seen(host), *(d.first for d in entries)])
        counted = [(r["kind"], int(r["bucket"]), r["n"])
                   for r in self._landed(uuids, since, until, every).collect()] \
            if since < until else []
        rows = report(since, until, every, {(k, b): n for k, b, n in counted}, entries)
        columns = ["start", "end", *LANDED, "dropped", "verdict", "drops"]
        return self.spark.createDataFrame(
            [tuple(_utc(r[c]) if c in ("start", "end") else r[c] for c in columns)
             for r in rows], GAPS_SCHEMA)

    def _landed(self, uuids: list[str], since: float, until: float, every: float) -> DataFrame:
        """kind (of gaps.LANDED), bucket (floor(ts / every)), n: the messages of ``uuids``
        that landed in ``[since, until)`` (a STATS is one message of several metric rows)."""
        parts = [window(self.table(table), since, until).filter(F.col("uuid").isin(*uuids))
                 .select(F.lit(kind).alias("kind"), F.floor(secs() / every).alias("bucket"),
                         "msg_id")
                 for kind, table in LANDED.items()]
        return (functools.reduce(DataFrame.unionByName, parts).groupBy("kind", "bucket")
                .agg(F.count_distinct("msg_id").alias("n")))

    def notification_history(self, host=None, severity=None, since=None,
                             until=None) -> DataFrame:
        """NOTIFYs in time order: ts, hostname, uuid, severity, source, text. ``severity``:
        one or a list."""
        df = self._of(window(self.notifications, epoch(since), epoch(until)), host)
        if severity is not None:
            wanted = [severity] if isinstance(severity, str) else list(severity)
            df = df.filter(F.col("severity").isin(*wanted))
        return (self._named(df).select("ts", "hostname", "uuid", "severity", "source", "text")
                .orderBy("ts", "hostname"))

    def notification_counts(self, since=None, until=None) -> DataFrame:
        """NOTIFYs per UTC day and severity: date, severity, count."""
        df = window(self.notifications, epoch(since), epoch(until))
        return (df.groupBy(PARTITION, "severity").count()
                .withColumnRenamed(PARTITION, "date").orderBy("date", "severity"))


#: the columns of :meth:`History.gaps`
GAPS_SCHEMA = ("start timestamp, end timestamp, "
               + "".join(f"{kind} bigint, " for kind in LANDED)
               + "dropped double, verdict string, "
               "drops array<struct<type: string, sink: string, count: double>>")


def _utc(t: float) -> datetime:
    return datetime.fromtimestamp(t, timezone.utc)


def uncompacted(lake: str) -> int:
    """Lines in the landing area of a lake no compaction ever wrote a table of (0 once one
    has: from then on the tables are what there is, and the open files are always late)."""
    from sinks.history.landing import count_lines
    from fleetwatch.lake.manifest import Lake
    where = Lake(lake)
    if any(os.path.isdir(where.table(name)) for name in TABLE_NAMES):
        return 0
    return count_lines(where.landing)
