"""The state database: the sinks' tables (:mod:`sinks.state.db`) and the read-only access the
operator commands and the scheduler have to them (:mod:`sinks.state.reader`)."""

from __future__ import annotations

from fleetwatch.optional import optional_import


def state_db():
    """The :mod:`sinks.state.db` module, for operator commands that read the state database."""
    return optional_import("sinks.state.db", "reading the state database")
