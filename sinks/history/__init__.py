"""The fleet's history: a sink that lands every message as JSON lines, Spark jobs that compact
them into Parquet tables, and queries for notebooks (docs/concepts/history.md,
sinks/history/README.md).

``from sinks.history import History`` works, but nothing here is imported until asked for:
the history sink (``sinks.history.sink``) runs without PySpark, and only the Spark side
(schema, spark, compact, query, replay, expire) needs the ``history`` extra.
"""

from __future__ import annotations

#: public name -> the module that defines it (imported on first access)
_LAZY = {"History": "sinks.history.query", "HistorySink": "sinks.history.sink"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from fleetwatch.optional import optional_import
    return getattr(optional_import(module, f"sinks.history.{name}"), name)


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
