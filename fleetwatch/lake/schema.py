"""The explicit Spark schemas of the history lake: the landing JSON lines and the tables.

Spark never infers a schema here. Inference reads every file twice, turns a field that is
absent from one day's files into a missing column, and guesses types from whatever values
happened to arrive (an integer-only day makes ``value`` a long). Declared schemas make a
landing file read the same way on every run and every machine, and let the query side read
the tables without listing their files first.

Every table column is described in ``COLUMNS`` (name, type, meaning); the table in
``docs/concepts/lake.md`` is the same information for readers, and a test checks that
the two agree. Fields of a landing ``msg`` that hold nested JSON (``plugins``, ``perfdata``,
a router's ``drops``, a STATS's labelled ``series``) are declared as strings: Spark's JSON
reader then keeps their raw JSON text, which the tables store as is (a JSON string column)
or compaction reads entry by entry (``drops``, ``series``: a bad entry costs that entry, not
the line). ``metrics`` is a map of
strings so that one non-numeric value costs only that metric (``try_cast`` to double,
skipped when null), not the whole line; a line that is not JSON at all lands in
``_corrupt_record`` and is counted.

The ``metrics`` table's ``labels`` and ``kind`` columns came with labelled series (issue 36):
files written before them read null there, which is what a row of a STATS's ``metrics``
holds, so old partitions read as they are and merge with new rows.

A landing line names ``path`` (the routers a message passed, SPEC 4.10) only when it came
through sites; the message tables keep it in every row as an array (``PATH``), ``[router]``
for one router. Tables compacted before the column read it as null (Parquet files without a
column give null under a schema that has it), and compaction merges such files with new
rows as they are.
"""

from __future__ import annotations

from pyspark.sql.types import (ArrayType, BooleanType, DataType, DoubleType, IntegerType,
                               LongType, MapType, StringType, StructField, StructType,
                               TimestampType)

#: the column that holds a landing line Spark could not parse (PERMISSIVE mode)
CORRUPT = "_corrupt_record"
#: every table is partitioned by this column: YYYY-MM-DD (UTC) of the message's ts
PARTITION = "date"

#: The decoded message body, as the history sink writes it under ``msg``: the union of the
#: fields of every type a router relays to the history sink (fleetwatch/SPEC.md section 3).
MSG = StructType([
    StructField("msg_id", StringType()),
    StructField("uuid", StringType()),
    StructField("ts", DoubleType()),
    StructField("retry", LongType()),
    StructField("dup", BooleanType()),
    # HELLO, REGISTER, STATS
    StructField("hostname", StringType()),
    StructField("heartbeat", DoubleType()),
    StructField("version", StringType()),
    StructField("role", StringType()),
    StructField("sink", StringType()),
    StructField("instance", StringType()),
    StructField("plugins", StringType()),          # JSON array text
    # HEARTBEAT, REGISTER
    StructField("name", StringType()),
    StructField("interval", DoubleType()),
    # STATS
    StructField("metrics", MapType(StringType(), StringType())),
    StructField("source", StringType()),
    StructField("drops", StringType()),            # JSON text: a router's (fleetwatch/lake/drops.py)
    StructField("series", StringType()),           # JSON text: labelled series (lake/labels.py)
    # NOTIFY
    StructField("severity", StringType()),
    StructField("text", StringType()),
    # RESULT
    StructField("command_id", StringType()),
    StructField("plugin", StringType()),
    StructField("status", IntegerType()),
    StructField("output", StringType()),
    StructField("long_output", StringType()),
    StructField("perfdata", StringType()),         # JSON array text
    StructField("slot", DoubleType()),
    StructField("started", DoubleType()),
    StructField("duration", DoubleType()),
])

#: One landing line (docs/concepts/lake.md "Landing files").
LANDING = StructType([
    StructField("type", StringType()),
    StructField("uuid", StringType()),             # the router's stamp: the authenticated sender
    StructField("router", StringType()),
    StructField("path", StringType()),             # ROUTER,SITE,...: came through sites
    StructField("received", DoubleType()),         # sink clock, epoch seconds
    StructField("msg", MSG),
    StructField(CORRUPT, StringType()),
])

_S, _D, _I, _L, _T = (StringType(), DoubleType(), IntegerType(), LongType(),
                      TimestampType())
#: the type of the message tables' ``path`` column: router ids, the relaying one first
PATH = ArrayType(StringType())
#: the type of the ``metrics`` table's ``labels`` column
_LABELS = MapType(StringType(), StringType())
_DATE = ("date", _S, "partition: YYYY-MM-DD (UTC) of ts")
_TS = ("ts", _T, "the message's ts (sender clock), UTC")
_UUID = ("uuid", _S, "the agent, as stamped by the router")
_TAIL = [("msg_id", _S, "the message's id: duplicates (resends, replays) are dropped"),
         ("router", _S, "the router that relayed it"),
         ("received", _D, "when the history sink landed it (its clock), epoch seconds: "
                          "the lake's order; null in rows compacted before the column"),
         ("path", PATH, "the routers it passed, the relaying one first, the agent's "
                        "own last (SPEC 4.10): [router] when it passed one; null in rows "
                        "compacted before the column")]

#: table -> [(column, Spark type, meaning)] in storage order (``date`` is the partition).
COLUMNS: dict[str, list[tuple[str, DataType, str]]] = {
    "metrics": [_DATE, _TS, _UUID,
                ("hostname", _S, "STATS hostname as sent: a claim that names no host "
                                 "(History shows it as claimed_hostname)"),
                ("source", _S, "STATS source (collector or local process); null if absent"),
                ("metric", _S, "metric name, as sent (a labelled series' name)"),
                ("value", _D, "metric value; non-numeric values are skipped"),
                ("labels", _LABELS, "a labelled series' labels (STATS series: an OTLP "
                                    "point's attributes), {} for none; null for a metric "
                                    "of metrics, and in rows compacted before the column"),
                ("kind", _S, "a labelled series' kind: gauge or counter (cumulative); null "
                             "for a metric of metrics"),
                *_TAIL],
    "heartbeats": [_DATE, _TS, _UUID,
                   ("name", _S, "HEARTBEAT name (a local process); null for the agent's own"),
                   ("interval", _D, "seconds until the next heartbeat is due; null if absent"),
                   *_TAIL],
    "results": [_DATE, _TS, _UUID,
                ("plugin", _S, "the plugin run"),
                ("status", _I, "0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN"),
                ("output", _S, "first line of the plugin's output"),
                ("long_output", _S, "further lines; null if absent"),
                ("perfdata", _S, "perfdata as a JSON array text (SPEC RESULT); null if absent"),
                ("command_id", _S, "the RUN's command id (s:... scheduled, cli:... by hand)"),
                ("slot", _D, "scheduled time, epoch seconds; null for a manual run"),
                ("started", _D, "when the plugin started, epoch seconds"),
                ("duration", _D, "seconds the plugin ran"),
                *_TAIL],
    "notifications": [_DATE, _TS, _UUID,
                      ("severity", _S, "debug, info, warning, error or critical"),
                      ("text", _S, "the notification text"),
                      ("source", _S, "sending process; null if absent"),
                      *_TAIL],
    "registrations": [_DATE, _TS, _UUID,
                      ("kind", _S, "HELLO or REGISTER"),
                      ("name", _S, "REGISTER name (agent or a local process); null for HELLO"),
                      ("hostname", _S, "hostname sent with it; null if absent"),
                      ("version", _S, "software version sent with it; null if absent"),
                      ("plugins", _S, "declared plugins as a JSON array text; null if absent"),
                      *_TAIL],
    # derived by compaction from heartbeats (fleetwatch/lake/spans.py), not from messages
    "heartbeat_spans": [
        ("date", _S, "partition: YYYY-MM-DD (UTC) of the span's heartbeats"), _UUID,
        ("name", _S, "as in heartbeats: a local process, or null for the agent's own"),
        ("first", _T, "the span's first heartbeat, UTC"),
        ("last", _T, "its last heartbeat: each one in between came less than 6 s after "
                     "the one before"),
        ("first_interval", _D, "the interval its first heartbeat counts with (announced, "
                               "else 2 s)"),
        ("last_interval", _D, "the interval its last heartbeat counts with"),
        ("min_interval", _D, "the shortest interval among its heartbeats")],
    # copied by compaction from the state database (fleetwatch/lake/lifecycle.py)
    "lifecycle": [
        ("date", _S, "partition: YYYY-MM-DD (UTC) of ts"),
        ("ts", _T, "when it happened (the alerting sink's or the operator's clock), UTC"),
        ("event_id", _S, "what it is, for good (alert/ID, ack/ID/start...): a row is "
                         "stored once"),
        ("kind", _S, "alert, muted (by a silence), held (by a downtime), ack or downtime"),
        ("action", _S, "alert, muted, held: trigger, resolve, reminder...; ack and "
                       "downtime: start or end"),
        ("id", _L, "the row's id in the state database (muted, held: the silence's, the "
                   "downtime's)"),
        ("key", _S, "the alert's key (UUID/check/PLUGIN, UUID/host...); null for a downtime"),
        ("uuid", _S, "the agent; null for a downtime"),
        ("hostname", _S, "alert, muted, held: the host's name; downtime: its host glob"),
        ("check_name", _S, "the check (a downtime's: a glob); null for the host"),
        ("severity", _S, "alert, muted, held: critical, warning, info...; else null"),
        ("status", _I, "alert: the check's status; ack: the status acknowledged"),
        ("text", _S, "alert, muted, held: the one-line summary"),
        ("author", _S, "ack and downtime: who"),
        ("comment", _S, "ack and downtime: the operator's comment"),
        ("start", _T, "ack: created; downtime: the occurrence's start"),
        ("end", _T, "ack: its expiry (start) or end (end); downtime: the occurrence's "
                    "planned end (start) or actual end (end)"),
        ("reason", _S, "why an ack ended (changed, recovered, expired, removed, replaced), "
                       "a downtime ended or was removed"),
        ("details", _S, "the rest as a JSON object text (the alert's kind; sticky, notify; "
                        "every, duration, flexible, children)")],
    # copied by compaction from the state database (fleetwatch/lake/deliveries.py)
    "deliveries": [
        ("date", _S, "partition: YYYY-MM-DD (UTC) of ts"),
        ("ts", _T, "when the attempt to send started (the alerting sink's clock), UTC"),
        ("event_id", _S, "the attempt, for good (delivery/ID/STARTED: its id in the "
                         "state database, when it started): a row is stored once"),
        ("channel", _S, "the alert channel it was sent to (its name in alerting.delivery)"),
        ("key", _S, "the alert's key (UUID/check/PLUGIN, UUID/host, channel/NAME...)"),
        ("action", _S, "the alert's action: trigger, acknowledge or resolve"),
        ("hostname", _S, "the alert's host (its name, else its uuid); null for a channel's "
                         "own alert"),
        ("check_name", _S, "the alert's check (a channel's alert: the channel); null for "
                           "the host"),
        ("alert", _S, "the alert sent: the lifecycle table's event_id of it (alert/ID), "
                      "where its uuid, severity and summary are"),
        ("attempt", _I, "the attempt's number for this alert and channel (1: the first)"),
        ("grouped", _I, "how many alerts the one message sent held (1: this one alone)"),
        ("outcome", _S, "sent, retry (tried again later) or failed (for good)"),
        ("status", _S, "what the service answered, in its terms (HTTP 202, SMTP 250); "
                       "null when no answer came"),
        ("message_id", _S, "the service's id for the message (an email's Message-ID, a "
                           "PagerDuty dedup_key, a Slack CHANNEL/TS); null if none"),
        ("answer", _S, "the first line of the service's answer (300 characters at most) or "
                       "why the send failed; never a secret (a URL without its query)"),
        ("latency", _D, "seconds the send took"),
        ("worker", _S, "the alerting sink that sent it (alerting:PID:...)")],
    # the drops routers report in their own STATS (fleetwatch/lake/drops.py)
    "drops": [
        ("date", _S, "partition: YYYY-MM-DD (UTC) of last"),
        ("uuid", _S, "the agent whose messages were dropped"),
        ("type", _S, "their type: HELLO, REGISTER, STATS, HEARTBEAT, NOTIFY, RESULT or "
                     "DEREGISTER"),
        ("sink", _S, "the sink type they were not handed to (registry, alerting, graphite, "
                     "history...)"),
        ("count", _L, "how many were dropped between first and last"),
        ("first", _T, "the first of them (the router's clock), UTC"),
        ("last", _T, "the last of them (the router's clock), UTC"),
        ("router", _S, "the router, or the sink, that dropped them (its STATS's stamped "
                        "uuid)"),
        ("reported", _T, "the ts of the router's STATS that reported them, UTC"),
        ("msg_id", _S, "that STATS's msg_id: with position, what identifies a row"),
        ("position", _I, "the entry's place in that STATS's drops (from 0)")],
}

#: the tables compaction writes from something other than messages: from other tables
#: (``heartbeat_spans``) or from the state database (``lifecycle``, ``deliveries``)
DERIVED = ("heartbeat_spans", "lifecycle", "deliveries")

#: the table names, in the order compaction writes them
TABLE_NAMES: tuple[str, ...] = tuple(COLUMNS)

#: message type -> the table its rows go to (a router's own STATS also feeds ``drops``)
TABLE_OF_TYPE = {"STATS": "metrics", "HEARTBEAT": "heartbeats", "RESULT": "results",
                 "NOTIFY": "notifications", "HELLO": "registrations",
                 "REGISTER": "registrations"}
#: table -> the message types its rows come from
SOURCE_TYPES: dict[str, tuple[str, ...]] = {
    **{name: tuple(t for t, table in TABLE_OF_TYPE.items() if table == name)
       for name in TABLE_NAMES if name not in DERIVED and name != "drops"},
    "drops": ("STATS",)}

#: table -> the order of the rows inside each file compaction writes: a host's rows (and a
#: metric's, a check's) lie together, so Parquet's statistics let a query for one host or
#: one metric skip most pages (bench/RESULTS.md "History queries")
ORDER: dict[str, tuple[str, ...]] = {
    "metrics": ("uuid", "ts", "metric"),
    "heartbeats": ("uuid", "ts"),
    "results": ("uuid", "plugin", "ts"),
    "notifications": ("uuid", "ts"),
    "registrations": ("uuid", "ts"),
    "heartbeat_spans": ("uuid", "name", "first"),
    "lifecycle": ("kind", "ts"),
    "deliveries": ("channel", "ts"),
    "drops": ("uuid", "first", "type", "sink"),
}

#: table -> the columns that identify a row: a duplicate key is dropped (a STATS message
#: gives one row per metric and per labelled series, so its key is (msg_id, metric, labels))
KEYS: dict[str, tuple[str, ...]] = {name: ("msg_id",) for name in TABLE_NAMES
                                    if name not in DERIVED}
KEYS["metrics"] = ("msg_id", "metric", "labels")
KEYS["drops"] = ("msg_id", "position")


def table_schema(name: str) -> StructType:
    """The Spark schema of table ``name`` (``date`` first, as in ``COLUMNS``)."""
    return StructType([StructField(col, type_) for col, type_, _ in COLUMNS[name]])


#: table -> its schema
TABLES: dict[str, StructType] = {name: table_schema(name) for name in TABLE_NAMES}
