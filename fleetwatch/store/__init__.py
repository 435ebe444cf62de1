"""The state store: the state database, the tables the sinks write and the operator
commands, the scheduler and the console read.

==================================  =====================================================
:mod:`fleetwatch.store.schema`      every table, and which owner (sink type) writes which
:mod:`fleetwatch.store.migrations`  the schema's Alembic revisions, applied by writers at
                                    start
:mod:`fleetwatch.store.db`          engines, migration at start (``create``), the shared
                                    writes
:mod:`fleetwatch.store.reads`       the readers: functions of a connection
                                    (``reads.agents``)
:mod:`fleetwatch.store.reader`      :class:`~fleetwatch.store.reader.Reader`: runs a reader
                                    at a URL
==================================  =====================================================

The sink types that write it subclass :class:`sinks.database.DatabaseSink`; the store
imports nothing of the sink types that write it (the alerting sink's outbox works its
tables in :mod:`sinks.alerting.delivery.store`). SQLAlchemy is an optional dependency: the
commands reach the modules through :func:`state_db` and :func:`state_reads`, which name the extra to
install when it is missing.
"""

from __future__ import annotations

from fleetwatch.optional import optional_import


def state_db():
    """The :mod:`fleetwatch.store.db` module, for operator commands that use the state database."""
    return optional_import("fleetwatch.store.db", "reading the state database")


def state_reads():
    """The :mod:`fleetwatch.store.reads` module, for operator commands that read the state database:
    ``Reader(url).read(state_reads().agents)``."""
    return optional_import("fleetwatch.store.reads", "reading the state database")
