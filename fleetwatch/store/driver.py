"""Statements of a hot path run on the driver's cursor, not through SQLAlchemy's execution.

SQLAlchemy's execution of a compiled statement costs about 30 us on this machine kind (its
events, execution context and result object); the same statement on the DBAPI cursor costs
about 3 us. The alerting sink runs four of them for each NOTIFY in its transaction, which
with the commit's fsync is its whole round trip (bench/notify_rtt.py, issue 31 item 14).

A :class:`Prepared` statement is written with SQLAlchemy Core like any other (its types
convert the values both ways: a JSON column's, a Boolean's on SQLite), compiled once per
dialect, and run inside the caller's SQLAlchemy transaction on that connection's own
cursor, so it commits or rolls back with everything else. A driver's error comes out as
SQLAlchemy's (:class:`sqlalchemy.exc.DBAPIError`), so callers handle one kind; a lost
connection invalidates the pooled one, as SQLAlchemy does.

Statements on this path are not seen by SQLAlchemy's ``before_cursor_execute`` events.
"""

from __future__ import annotations

import threading
from collections import namedtuple
from collections.abc import Mapping

from sqlalchemy.engine import Connection
from sqlalchemy.exc import DBAPIError


class _Compiled:
    """One statement compiled for one dialect: its SQL, how to pass its parameters and how
    to read its rows."""

    def __init__(self, statement, dialect):
        compiled = statement.compile(dialect=dialect)
        self.sql = compiled.string
        binds = compiled.binds
        # the parameters' order for a positional paramstyle (SQLite's "?"), else by name
        self.names = list(compiled.positiontup) if compiled.positional else None
        processors = ((name, _processor(bind.type, dialect)) for name, bind in binds.items())
        self.binds = [(name, proc) for name, proc in processors if proc is not None]
        for name, bind in binds.items():
            if getattr(bind, "expanding", False) or bind.callable is not None:
                raise ValueError(f"{name}: an expanding or computed parameter cannot be "
                                 f"prepared for the driver")
        self.defaults = {name: bind.value for name, bind in binds.items()
                         if bind.value is not None}
        self.columns = list(getattr(statement, "exported_columns", ()))
        self.row = _row_class([c.key for c in self.columns]) if self.columns else None
        self.dialect = dialect
        #: the type codes of the driver's columns (its cursor's description) -> the
        #: converters of the values (PostgreSQL's numeric types: by their codes)
        self._readers: dict[tuple, list] = {}

    def parameters(self, params: Mapping):
        values = dict(self.defaults)
        values.update(params)
        for name, proc in self.binds:
            if name in values:
                values[name] = proc(values[name])
        if self.names is None:
            return values
        return [values[name] for name in self.names]

    def rows(self, cursor) -> list:
        if self.row is None:            # (a textual statement: its rows as they come)
            return cursor.fetchall()
        codes = tuple(d[1] for d in cursor.description)
        readers = self._readers.get(codes)
        if readers is None:
            readers = self._readers[codes] = [
                c.type.dialect_impl(self.dialect).result_processor(self.dialect, code)
                for c, code in zip(self.columns, codes)]
        if any(readers):
            return [self.row(*(v if r is None else r(v) for r, v in zip(readers, raw)))
                    for raw in cursor.fetchall()]
        return [self.row(*raw) for raw in cursor.fetchall()]


def _row_class(names: list[str]) -> type:
    """A named tuple of ``names`` that is read like SQLAlchemy's rows: by attribute, by
    position and through ``_mapping``."""
    base = namedtuple("Row", names, rename=True)
    return type("Row", (base,), {"__slots__": (),
                                 "_mapping": property(lambda self: self._asdict())})


def _processor(type_, dialect):
    return type_.dialect_impl(dialect).bind_processor(dialect)


class Prepared:
    """A Core statement (or :func:`sqlalchemy.text`) run on the DBAPI cursor of the
    connection it is given, compiled once per dialect. Its rows are named tuples of its
    columns, converted by their types (attributes and ``_asdict()``, as SQLAlchemy's rows
    have); a textual statement's are the driver's tuples."""

    def __init__(self, statement):
        self.statement = statement
        self._compiled: dict[tuple[str, str], _Compiled] = {}
        self._lock = threading.Lock()

    def _for(self, dialect) -> _Compiled:
        key = (dialect.name, dialect.driver)   # (drivers differ in their paramstyle)
        compiled = self._compiled.get(key)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.setdefault(key, _Compiled(self.statement, dialect))
        return compiled

    def execute(self, conn: Connection, params: Mapping | None = None) -> list:
        """Run the statement with ``params`` in ``conn``'s transaction; its rows (a statement
        that returns none: [])."""
        compiled = self._for(conn.dialect)
        # the connection's transaction is begun (SQLAlchemy's "begin" event) when its first
        # statement runs: a prepared statement may be the first
        if not conn.in_transaction():
            conn.begin()
        return _run(conn, compiled.sql, compiled.parameters(params or {}), compiled.rows)


def execute_sql(conn: Connection, sql: str) -> None:
    """Run ``sql`` (a statement without parameters or rows: ``BEGIN IMMEDIATE``) on
    ``conn``'s driver connection, outside SQLAlchemy's transaction bookkeeping (its
    ``begin`` event's own statement)."""
    _run(conn, sql, ())


def _run(conn: Connection, sql: str, args, rows=None) -> list:
    """``sql`` with ``args`` on a cursor of ``conn``'s driver connection; ``rows(cursor)``
    when it returned some, else []. A driver's error is raised as SQLAlchemy's."""
    cursor = conn.connection.dbapi_connection.cursor()
    try:
        cursor.execute(sql, args)
        return rows(cursor) if rows is not None and cursor.description is not None else []
    except conn.dialect.loaded_dbapi.Error as e:
        raise _wrapped(conn, cursor, sql, args, e) from e
    finally:
        cursor.close()


def _wrapped(conn: Connection, cursor, sql: str, args, e: Exception) -> DBAPIError:
    """``e`` as SQLAlchemy would have raised it; a connection it says is lost is
    invalidated, so the pool does not hand it out again."""
    dialect = conn.dialect
    lost = dialect.is_disconnect(e, conn.connection.dbapi_connection, cursor)
    if lost:
        conn.invalidate(e)
    return DBAPIError.instance(sql, args, e, dialect.loaded_dbapi.Error,
                               connection_invalidated=lost, dialect=dialect)
