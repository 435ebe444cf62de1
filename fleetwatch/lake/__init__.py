"""The history lake: the Spark jobs that compact the history sinks' landing files into
Parquet tables, and what reads them: queries and views for notebooks (``History``), gaps,
replay into carbon, expiry, ``tail --since``, a Spark cluster and a Jupyter kernel of the
demo's (README.md beside this file; docs/concepts/history.md).

The operator commands (``fleetwatch history ...``, :mod:`fleetwatch.cli.history`) and
notebooks use it; the history sink (:mod:`sinks.history`) writes what it reads and never
imports it. ``from fleetwatch.lake import History`` works, but nothing here is imported
until asked for: only the Spark side (schema, spark, compact, query, replay, expire) needs
the ``history`` extra.
"""

from __future__ import annotations

#: public name -> the module that defines it (imported on first access)
_LAZY = {"History": "fleetwatch.lake.query"}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from fleetwatch.optional import optional_import
    return getattr(optional_import(module, f"fleetwatch.lake.{name}"), name)


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
