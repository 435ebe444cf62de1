"""Read-only access to the state database for the operator commands and the scheduler.

A reader is a function of :mod:`fleetwatch.store.reads` (``reads.agents``, ``reads.alerts``...),
passed as itself: ``Reader(url).read(reads.plugins)``, ``read(url, reads.silences, now=t)``.
SQLAlchemy is imported only when a command needs the database; without it the caller gets
:class:`fleetwatch.optional.MissingDependency` naming the extra to install (from
:func:`fleetwatch.store.state_reads`, or from :class:`Reader`). A SQLite file that does not
exist yet (no sink has run) reads as empty, and is not created; so does a database whose
tables the sinks have not created yet. Any database error is a :class:`StateError` whose
text is one line (and says nothing of the URL's password).

:func:`read` opens and closes an engine per call (a command reads once); a long-lived
reader (the scheduler, polling the registry) keeps a :class:`Reader` and its connection pool,
and a process that has an engine already (the console) lends it: ``Reader(url, engine)``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from fleetwatch.store import state_db

log = logging.getLogger(__name__)

#: a reader: a function of :mod:`fleetwatch.store.reads`, called with a connection and keywords
ReadFn = Callable[..., Any]


class StateError(Exception):
    """The state database could not be read; ``str()`` is one line."""


def safe_url(url: str) -> str:
    """``url`` with its password masked, for messages."""
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is shown as it is: it holds no usable password
        return url


class Reader:
    """Runs readers (functions of :mod:`fleetwatch.store.reads`) on the database at ``url``,
    through ``engine`` when one is lent (then :meth:`close` leaves it open: its pool is the
    lender's), else through one of its own."""

    def __init__(self, url: str, engine=None):
        self.url = url
        self.db = state_db()
        self._engine, self._lent = engine, engine is not None

    def read(self, fn: ReadFn, **kwargs):
        """``fn(connection, **kwargs)``: its rows (or count); nothing read before the
        database exists."""
        db = self.db
        from sqlalchemy.exc import SQLAlchemyError
        try:
            if not db.exists(self.url):
                return []
            if self._engine is None:
                self._engine = db.engine(self.url, writer=False)
            with self._engine.connect() as conn:
                return fn(conn, **kwargs)
        except (SQLAlchemyError, ImportError) as e:
            # ImportError: the URL names a driver that is not installed (psycopg)
            raise StateError(f"cannot read the state database {safe_url(self.url)}: "
                             f"{e.__class__.__name__}: "
                             f"{(str(e).splitlines() or [''])[0]}") from None

    def close(self) -> None:
        if self._engine is not None and not self._lent:
            self._engine.dispose()
            self._engine = None


def read(url: str, fn: ReadFn, **kwargs):
    """``fn``'s rows at ``url``, with an engine for this call only."""
    reader = Reader(url)
    try:
        return reader.read(fn, **kwargs)
    finally:
        reader.close()
