"""The ``metrics`` table's rows of a STATS: one per numeric metric of its ``metrics`` and one
per good entry of its labelled ``series`` (Spark Columns; compact.py does the I/O).

A STATS's ``series`` (SPEC 4; :mod:`fleetwatch.series` says what an entry is) lands as its
JSON text (a string field of the landing schema, as ``drops``), so a bad entry costs that
entry, never the line. Each entry is read as a Spark VARIANT and checked by the rules every
sink applies (:func:`valid`: the JSON type of each field before its value,
:mod:`fleetwatch.lake.variants`); an entry that is not one is skipped, as a non-numeric
metric is. A good entry gives a row with ``metric`` its name, ``labels`` its labels (a
``map<string,string>``, ``{}`` for none; empty values left out, as the sinks do) and
``kind`` ``gauge`` or ``counter``; a row of ``metrics`` has both null.

One pass, no union (the table's messages are counted by an observation on them, which a
union would run twice): each message is first one row per *part*, a null standing for its
``metrics`` followed by its entries, then each part is exploded (its ``metrics`` map, or a
map of the entry's one name), so a STATS without ``series`` costs one more generator row.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, VariantType

from fleetwatch.series import KINDS, MAX_KEY, MAX_LABELS, MAX_NAME, MAX_VALUE
from fleetwatch.lake.variants import NUMBERS, field, json_type

#: a message's parts: its ``metrics`` (a null) then its series entries
_PARTS = ArrayType(VariantType())


def _entries() -> Column:
    """The entries of the ``series`` JSON text (none when absent or not a JSON array)."""
    items = F.try_variant_get(F.try_parse_json("series"), "$", "array<variant>")
    return F.coalesce(items, F.array().cast(_PARTS))


def _finite(value: Column) -> Column:
    return F.when(~F.isnan(value) & (F.abs(value) != float("inf")), value)


def _labels() -> Column:
    """An entry's labels as a map of strings (null when they are not an object of strings),
    ``{}`` when absent or null."""
    raw = field("labels", "map<string,variant>")
    strings = F.forall(F.map_values(raw), lambda v: F.schema_of_variant(v) == "STRING")
    as_text = F.transform_values(raw, lambda k, v: F.try_variant_get(v, "$", "string"))
    return (F.when(F.coalesce(json_type("labels"), F.lit("VOID")) == "VOID",
                   F.create_map().cast("map<string,string>"))
            .when(strings, as_text))


def valid(labels: Column) -> Column:
    """True for an entry ``e`` of the shape :mod:`fleetwatch.series` takes, with ``labels``
    (:func:`_labels`) its labels; never null."""
    name, kind = field("name", "string"), json_type("kind")
    ok = (F.try_variant_get("e", "$", "map<string,variant>").isNotNull()
          & (json_type("name") == "STRING") & F.length(name).between(1, MAX_NAME)
          & json_type("value").isin(*NUMBERS)
          & (kind.isNull() | (kind == "VOID") | field("kind", "string").isin(*KINDS))
          & labels.isNotNull() & (F.size(labels) <= MAX_LABELS)
          & F.forall(F.map_keys(labels), lambda k: F.length(k).between(1, MAX_KEY))
          & F.forall(F.map_values(labels), lambda v: F.length(v) <= MAX_VALUE))
    return F.coalesce(ok, F.lit(False))


def rows(msgs: DataFrame) -> DataFrame:
    """``msgs`` (STATS with ``metrics`` and ``series``) with one row per numeric metric and
    per good series entry, the message's columns beside ``metric``, ``value``, ``labels`` and
    ``kind``."""
    parts = F.concat(F.array(F.lit(None)).cast(_PARTS), _entries())
    msgs = msgs.select("*", F.explode(parts).alias("e"))
    flat = F.col("e").isNull()
    labels = _labels()
    name = field("name", "string")
    good = valid(labels)
    one = F.when(good, F.create_map(name, F.lit(None).cast("string")))
    kind = F.coalesce(field("kind", "string"), F.lit(KINDS[0]))
    msgs = msgs.select(
        "*", F.explode(F.when(flat, F.col("metrics")).otherwise(one)).alias("metric", "raw"),
        F.when(~flat, F.map_filter(labels, lambda k, v: v != "")).alias("labels"),
        F.when(~flat, kind).alias("kind"))
    value = F.when(flat, F.col("raw").try_cast("double")).otherwise(
        field("value", "double"))
    return msgs.withColumn("value", _finite(value)).where(F.col("value").isNotNull())
