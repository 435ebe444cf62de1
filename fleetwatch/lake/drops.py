"""The ``drops`` table: what routers dropped, per agent, from the ``drops`` of their own STATS
(Spark Columns; compact.py does the I/O).

A router counts, per (agent uuid, message type, sink type), the messages it could not hand to
a sink, and reports them in its own STATS (``source: "router"``, stamped with its own id) as
``drops``: a list of at most :data:`MAX_ENTRIES` objects, each

    {"uuid": "<agent uuid>", "type": "HEARTBEAT", "sink": "history", "count": 17,
     "first": 1795000000.12, "last": 1795000009.87}

with ``uuid`` and ``sink`` ids (:data:`fleetwatch.protocol.ID_PATTERN`), ``type`` an agent
message type, ``count`` an integer above 0, ``first <= last`` times the codec takes (epoch
seconds, router clock); other keys are ignored (a later router may add some). A sink that
drops what it took (the remote_write sink's queue, SPEC 4.7.2) reports in the same shape in
its own STATS (``source: "sink"``, its stamped id ending the envelope's path: SPEC 4.3), and
its entries are filed under its id as a router's are under the router's. Nothing else
is an entry: a key missing, a value of another JSON type (``"17"``, ``17.0`` or ``true`` for
``count``; a number for ``uuid``), an entry past the 1,000th, or ``drops`` on a STATS that
is neither a router's own (its stamped uuid the router that relayed it, its ``source``
``router``) nor a sink's own (:func:`reporter`): each is a *bad
entry*, counted by compaction and skipped; the STATS's metrics land as ever. A ``drops``
that is not a JSON array (or not one JSON text: a key repeated in an entry) is one bad entry.

The landing schema keeps ``drops`` as its JSON text (a string field, as ``plugins``), so a
bad entry never costs the line. Each entry is checked as a Spark VARIANT: its JSON type per
field (``schema_of_variant``: ``STRING``, ``BIGINT``, a number ``BIGINT``, ``DECIMAL`` or
``DOUBLE``; :mod:`fleetwatch.lake.variants`) before its value, so a string ``"17"`` is no
count, as it would be after a cast.
The check is a Column, not a Python function: it runs wherever Spark's executors run,
without fleetwatch installed there.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from fleetwatch.protocol import AGENT_TYPES, ID_PATTERN, TS_END, TS_MIN
from fleetwatch.lake.schema import COLUMNS, PARTITION
from fleetwatch.lake.variants import NUMBERS, field as _get, json_type as _json_type

#: entries one STATS may carry; those past it are bad
MAX_ENTRIES = 1000
#: what the router's own STATS says it is (its ``source``), and a sink's
SOURCE, SINK = "router", "sink"
#: an entry's fields -> the JSON types it may have, as ``schema_of_variant`` names them
#: (a JSON number is a BIGINT, a DECIMAL(p,s) or a DOUBLE there, by how it is written)
FIELDS = {"uuid": ("STRING",), "type": ("STRING",), "sink": ("STRING",), "count": ("BIGINT",),
          "first": NUMBERS, "last": NUMBERS}
#: an id as the protocol takes it, whole: ``\\z`` (Java's ``$`` also matches before a
#: final line break)
_ID = f"^(?:{ID_PATTERN.pattern})\\z"


def _entries(df: DataFrame) -> DataFrame:
    """``df`` (landing lines with ``drops``) with one row per entry: ``position`` and the
    entry ``e`` (a VARIANT; a VARIANT null, so bad, for a ``drops`` that is no JSON array);
    ``[]`` gives no row."""
    items = F.try_variant_get(F.try_parse_json("drops"), "$", "array<variant>")
    unreadable = F.array(F.parse_json(F.lit("null")))
    return df.select("*", F.posexplode(F.coalesce(items, unreadable)).alias("position", "e"))


def valid() -> Column:
    """True for an entry (row of :func:`_entries`, with its line's ``uuid``, ``router`` and
    ``source``) of the shape of the module docstring; never null."""
    # an object with each field (other keys are ignored, as in any body: SPEC 4)
    shaped = F.try_variant_get("e", "$", "map<string,variant>").isNotNull()
    for field, kinds in FIELDS.items():
        shaped &= _json_type(field).isin(*kinds)
    first, last = _get("first", "double"), _get("last", "double")
    ok = (shaped
          & _get("uuid", "string").rlike(_ID) & _get("sink", "string").rlike(_ID)
          & _get("type", "string").isin(*sorted(AGENT_TYPES))
          & (_get("count", "bigint") > 0)
          & (first >= TS_MIN) & (first <= last) & (last < TS_END)       # NaN: last < TS_END fails
          & (F.col("position") < MAX_ENTRIES) & reporter())
    return F.coalesce(ok, F.lit(False))


def reporter() -> Column:
    """Whether a landing line (``uuid``, ``router``, ``path``, ``source``) is a STATS whose
    ``drops`` count: a router's own (stamped with the relaying router's id, ``source``
    ``router``), or a sink's own, relayed from control (``STATS/ID/ROUTER,ID``: its id ends a
    path of two or more, ``source`` ``sink``; SPEC 4.3), never an agent's, whose stamped
    uuid never ends its path."""
    router = (F.col("uuid") == F.col("router")) & (F.col("source") == SOURCE)
    sink = ((F.size("path") > 1) & (F.element_at("path", -1) == F.col("uuid"))
            & (F.col("source") == SINK))
    return router | sink


def _last_date() -> Column:
    return F.date_format(F.timestamp_seconds(_get("last", "double")), "yyyy-MM-dd")


def counts(lines: DataFrame) -> list:
    """Rows of (date, ok, count) over every entry of ``lines`` (landing lines holding a
    ``drops``): the good entries per date of their ``last`` (the ``drops`` partitions they
    go to), the bad ones with ``ok`` false and no date."""
    entries = _entries(lines).withColumn("ok", valid())
    return (entries.groupBy(F.when(F.col("ok"), _last_date()).alias(PARTITION), "ok")
            .count().collect())


def rows(msgs: DataFrame) -> DataFrame:
    """``msgs`` (router STATS as :func:`fleetwatch.lake.tables.messages` gives them: msg_id,
    ts, uuid, router, source, drops) as ``drops`` rows, one per good entry, in table order."""
    entries = _entries(msgs).where(valid())
    first, last = _get("first", "double"), _get("last", "double")
    made = entries.select(
        _last_date().alias(PARTITION),
        _get("uuid", "string").alias("uuid"),
        _get("type", "string").alias("type"),
        _get("sink", "string").alias("sink"),
        _get("count", "bigint").alias("count"),
        F.timestamp_seconds(first).alias("first"),
        F.timestamp_seconds(last).alias("last"),
        F.col("uuid").alias("router"),          # the reporter: the router, or the sink
        F.col("ts").alias("reported"),
        F.col("msg_id"),
        F.col("position").cast("int").alias("position"))
    return made.select(*(name for name, _, _ in COLUMNS["drops"]))
