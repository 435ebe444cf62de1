"""The state database: the tables the sinks write and the operator commands and the scheduler read.

=============================  ==========================================================
:mod:`sinks.state.schema`      every table, and which owner (sink type) writes which
:mod:`sinks.state.migrations`  the schema's Alembic revisions, applied by writers at start
:mod:`sinks.state.db`          engines, migration at start, the shared writes, DatabaseSink
:mod:`sinks.state.reads`       the readers: functions of a connection (``reads.agents``)
:mod:`sinks.state.reader`      :class:`~sinks.state.reader.Reader`: runs a reader at a URL
=============================  ==========================================================

It imports nothing of the sink types that write it (the alerting sink's outbox works its
tables in :mod:`sinks.alerting.delivery.store`). SQLAlchemy is an optional dependency: the commands
reach the modules through :func:`state_db` and :func:`state_reads`, which name the extra to
install when it is missing.
"""

from __future__ import annotations

from fleetwatch.optional import optional_import


def state_db():
    """The :mod:`sinks.state.db` module, for operator commands that use the state database."""
    return optional_import("sinks.state.db", "reading the state database")


def state_reads():
    """The :mod:`sinks.state.reads` module, for operator commands that read the state database:
    ``Reader(url).read(state_reads().agents)``."""
    return optional_import("sinks.state.reads", "reading the state database")
