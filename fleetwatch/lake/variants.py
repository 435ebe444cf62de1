"""Reading one JSON entry held as a Spark VARIANT (a router's drop entry, a labelled series):
a field's value cast to a type, and its JSON type, as Columns (they run wherever Spark's
executors run, without fleetwatch installed there).

The JSON type comes before the value: ``schema_of_variant`` names it (``STRING``, ``OBJECT<...>``,
``ARRAY<...>``; a number ``BIGINT``, ``DECIMAL`` or ``DOUBLE`` by how it is written; ``VOID``
for a JSON null; null for a field that is not there), so a string ``"17"`` is no number, as it
would be after a cast.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

#: the JSON types of a number, as ``schema_of_variant`` names them
NUMBERS = ("BIGINT", "DECIMAL", "DOUBLE")


def field(name: str, type_: str, entry: str = "e") -> Column:
    """Field ``name`` of the VARIANT column ``entry`` as ``type_`` (null when it is absent
    or does not cast)."""
    return F.try_variant_get(entry, f"$.{name}", type_)


def json_type(name: str, entry: str = "e") -> Column:
    """The JSON type of field ``name`` of ``entry``: ``STRING``, ``BIGINT``, ``OBJECT``...
    (the first word of ``schema_of_variant``); ``VOID`` for a null, null when absent."""
    return F.regexp_extract(F.schema_of_variant(field(name, "variant", entry)), r"^[A-Z]+", 0)
