"""State rows locked for one transaction: what lets two alerting sinks share ``check_state``
and ``host_state``.

Two alerting sinks share those tables (PUSH spreads results and heartbeats between them), so
a transition must be decided by one of them only. Every evaluation reads its rows with
:func:`lock` (through :func:`sinks.alerting.checks.store.lock_checks` and
:func:`sinks.alerting.hosts.store.lock_hosts`) inside the write transaction: on PostgreSQL
``SELECT ... FOR UPDATE`` (a missing row is first inserted with ``ON CONFLICT DO NOTHING``,
so there is always a row to lock, and the second sink waits for the first's commit), on
SQLite the sinks' writer engine begins every transaction with ``BEGIN IMMEDIATE``
(:func:`fleetwatch.store.db.engine`), so whole transactions take turns. Rows are locked in key
order, checks before hosts, so two sinks cannot deadlock on them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from sqlalchemy import JSON, bindparam, select, text, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import TextClause

from fleetwatch.store import db, schema

#: keys remembered as having a row, per sink, at most
KNOWN_MAX = 1_000_000


# Statements on the hot path are built once: SQLAlchemy caches their compiled form, but
# building a statement object costs more than running it on SQLite.

@functools.lru_cache(maxsize=8)
def _lock_select(name: str, a: str, b: str, for_update: bool):
    """Rows by (a, b) keys in key order; ``FOR UPDATE`` on PostgreSQL (SQLite's writers
    already hold the database: BEGIN IMMEDIATE)."""
    t = schema.metadata.tables[name]
    stmt = select(t).where(tuple_(t.c[a], t.c[b]).in_(bindparam("keys", expanding=True))) \
        .order_by(t.c[a], t.c[b])
    return stmt.with_for_update() if for_update else stmt


@functools.lru_cache(maxsize=8)
def update_by_key(name: str, a: str, b: str):
    t = schema.metadata.tables[name]
    return update(t).where(t.c[a] == bindparam(f"k_{a}"), t.c[b] == bindparam(f"k_{b}"))


def _ensure(conn: Connection, table, rows: list[dict]) -> None:
    """Insert the rows whose key is missing (placeholders, so that there is a row to lock)."""
    if not rows:
        return
    if conn.dialect.name in ("sqlite", "postgresql"):
        conn.execute(_insert_missing(table.name), rows)
        return
    for row in rows:
        db.upsert(conn, table, row, update=())


@functools.lru_cache(maxsize=8)
def _insert_missing(name: str) -> TextClause:
    """``INSERT ... ON CONFLICT DO NOTHING``, built once (see
    :func:`fleetwatch.store.db._insert_returning`: the dialect construct is compiled again on
    every execution)."""
    table = schema.metadata.tables[name]
    cols = [c.name for c in table.columns]
    quoted = ", ".join(f'"{c}"' for c in cols)      # ("interval" is a keyword in SQL)
    values = ", ".join(f":{c}" for c in cols)
    stmt = text(f"INSERT INTO {name} ({quoted}) VALUES ({values}) ON CONFLICT DO NOTHING")
    return stmt.bindparams(*(bindparam(c.name, type_=JSON) for c in table.columns
                             if isinstance(c.type, JSON)))


def lock(conn: Connection, table, names: tuple[str, str], keys: Iterable[tuple[str, str]],
         placeholder, known: set | None) -> dict:
    """The rows of ``keys`` (a row made for each missing key), locked, by key.

    ``known`` holds keys this sink has seen rows for: their placeholder insert is skipped
    (rows are never deleted; if one was, it is made again below).
    """
    keys = sorted(set(keys))
    if not keys:
        return {}
    _ensure(conn, table, [placeholder(k) for k in keys if known is None or k not in known])
    a, b = names
    stmt = _lock_select(table.name, a, b, conn.dialect.name == "postgresql")

    def read(some):
        return {(r._mapping[a], r._mapping[b]): r
                for r in conn.execute(stmt, {"keys": list(some)})}
    found = read(keys)
    missing = [k for k in keys if k not in found]
    if missing:
        _ensure(conn, table, [placeholder(k) for k in missing])
        found.update(read(missing))
    if known is not None:
        if len(known) > KNOWN_MAX:
            known.clear()
        known.update(keys)
    return found

