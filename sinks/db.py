"""The state database: one SQLAlchemy 2.0 Core schema, each table written by one owner.

=================  ==========  =====================================================
table              owner       rows
=================  ==========  =====================================================
``agents``         registry    one per agent uuid: hostname, version, first/last seen
``agent_routers``  registry    (uuid, router): when a router last relayed for it
``plugins``        registry    (uuid, source, name): plugins declared in REGISTER
``notifications``  alerting    one per NOTIFY msg_id
=================  ==========  =====================================================

Times are seconds since the Unix epoch (floats): portable, and formatted only on display.
Readers (``fleetwatch status``, ``alerts``) use the helpers at the end, which tolerate a
database whose tables do not exist yet.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections import Counter
from collections.abc import Iterable, Sequence

from sqlalchemy import (JSON, Column, Float, ForeignKey, Index, MetaData, String, Table,
                        Text, create_engine, event, inspect, select, text)
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.elements import TextClause

log = logging.getLogger(__name__)

metadata = MetaData()
ID = String(64)

agents = Table(
    "agents", metadata,
    Column("uuid", ID, primary_key=True),
    Column("hostname", String(255)),
    Column("version", String(64)),
    Column("first_seen", Float, nullable=False),
    Column("last_seen", Float, nullable=False),
)

agent_routers = Table(
    "agent_routers", metadata,
    Column("uuid", ID, ForeignKey("agents.uuid", ondelete="CASCADE"), primary_key=True),
    Column("router", ID, primary_key=True),
    Column("last_seen", Float, nullable=False),
)

plugins = Table(
    "plugins", metadata,
    Column("uuid", ID, ForeignKey("agents.uuid", ondelete="CASCADE"), primary_key=True),
    Column("source", String(255), primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("spec", JSON, nullable=False),
    Column("declared_at", Float, nullable=False),
)

notifications = Table(
    "notifications", metadata,
    Column("msg_id", ID, primary_key=True),
    Column("uuid", ID, nullable=False),
    Column("hostname", String(255)),
    Column("severity", String(16), nullable=False),
    Column("text", Text, nullable=False),
    Column("source", String(255)),
    Column("sent_at", Float, nullable=False),
    Column("received_at", Float, nullable=False),
    Column("router", ID, nullable=False),
    Index("ix_notifications_received_at", "received_at"),
)

#: owner -> the tables it creates and writes
OWNED = {
    "registry": (agents, agent_routers, plugins),
    "alerting": (notifications,),
}

SQLITE_BUSY_MS = 10_000


def sqlite_path(url: str | URL) -> str | None:
    """The file of a SQLite URL, or None (another database, or in memory)."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or not u.database or u.database == ":memory:":
        return None
    return u.database


def exists(url: str) -> bool:
    """False only for a SQLite file that does not exist (a fleet with no sink run yet)."""
    path = sqlite_path(url)
    return path is None or os.path.exists(path)


def engine(url: str, writer: bool = True) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys.

    A ``writer`` creates the SQLite file's directory and takes the write lock when a
    transaction begins (``BEGIN IMMEDIATE``), so two sinks on one file wait for each other
    (up to the busy timeout) instead of failing on a lock upgrade.
    """
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return create_engine(u, pool_pre_ping=True)
    path = sqlite_path(u)
    if path and writer:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    eng = create_engine(u, connect_args={"timeout": SQLITE_BUSY_MS / 1000})

    @event.listens_for(eng, "connect")
    def _on_connect(dbapi_conn, _record):
        # The driver's own transaction handling is off; "begin" below starts them.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            if writer and path:
                cur.execute("PRAGMA journal_mode=WAL")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
        finally:
            cur.close()

    @event.listens_for(eng, "begin")
    def _on_begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")

    return eng


def create(eng: Engine, owner: str) -> None:
    """Create the tables ``owner`` writes (and nothing else), if missing."""
    from sinks.base import WriteError
    try:
        metadata.create_all(eng, tables=list(OWNED[owner]))
    except SQLAlchemyError as e:
        raise WriteError(f"cannot create the {owner} tables: {e}") from e


# ---------------------------------------------------------------- writing

def _dialect_insert(conn: Connection, table: Table):
    name = conn.dialect.name
    if name == "sqlite":
        from sqlalchemy.dialects.sqlite import insert
    elif name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        return None
    return insert(table)


def _keys(table: Table) -> list[str]:
    return [c.name for c in table.primary_key.columns]


def _where_keys(table: Table, row: dict):
    return [table.c[k] == row[k] for k in _keys(table)]


def upsert(conn: Connection, table: Table, row: dict, update: Sequence[str]) -> None:
    """Insert ``row``, or update the columns ``update`` of the row with its primary key."""
    stmt = _dialect_insert(conn, table)
    if stmt is not None:
        stmt = stmt.values(**row)
        set_ = {c: stmt.excluded[c] for c in update}
        stmt = stmt.on_conflict_do_update(index_elements=_keys(table), set_=set_) if set_ \
            else stmt.on_conflict_do_nothing(index_elements=_keys(table))
        conn.execute(stmt)
        return
    where = _where_keys(table, row)
    if conn.execute(select(*table.primary_key.columns).where(*where)).first() is None:
        conn.execute(table.insert().values(**row))
    elif update:
        conn.execute(table.update().where(*where).values({c: row[c] for c in update}))


def insert_new(conn: Connection, table: Table, rows: Iterable[dict]) -> int:
    """Insert the ``rows`` whose primary key is not in ``table`` yet; return how many."""
    rows = list(rows)
    if not rows:
        return 0
    key = _keys(table)[0]
    if conn.dialect.name in ("sqlite", "postgresql"):
        result = conn.execute(_insert_ignoring(table.name, key, tuple(rows[0])), rows)
        return max(result.rowcount, 0) if result.rowcount is not None else len(rows)
    present = set(conn.scalars(select(table.c[key]).where(table.c[key].in_([r[key] for r in rows]))))
    fresh = [r for r in rows if r[key] not in present]
    if fresh:
        conn.execute(table.insert(), fresh)
    return len(fresh)


@functools.lru_cache(maxsize=32)
def _insert_ignoring(table: str, key: str, columns: tuple[str, ...]) -> TextClause:
    """``INSERT ... ON CONFLICT (key) DO NOTHING`` (SQLite and PostgreSQL), built once.

    A textual statement on purpose: SQLAlchemy 2.0 recompiles the dialect ``on_conflict``
    constructs on every execution (about 0.5 ms, as much as the commit's fsync), and this
    insert is on the alerting sink's hot path (bench/notify_rtt.py).
    """
    names = ", ".join(columns)
    values = ", ".join(f":{c}" for c in columns)
    return text(f"INSERT INTO {table} ({names}) VALUES ({values}) "
                f"ON CONFLICT ({key}) DO NOTHING")


class DatabaseSink:
    """Base of the sink types that write the state database (:class:`sinks.base.Sink`).

    Holds the engine, the injected clock and the sink's counters; creates the tables its
    ``type`` owns at start. Subclasses set ``type``, ``handles``, ``acks`` and ``write``.
    """

    type = ""

    def __init__(self, engine: Engine, clock=time.time):
        self.engine, self.clock = engine, clock
        self.counts: Counter = Counter()

    @classmethod
    def from_config(cls, config, clock=time.time):
        return cls(engine(config.state_url), clock)

    def start(self) -> None:
        create(self.engine, self.type)

    def close(self) -> None:
        self.engine.dispose()


# ---------------------------------------------------------------- reading

def has_tables(conn: Connection, *names: str) -> bool:
    insp = inspect(conn)
    return all(insp.has_table(n) for n in names)


def read_agents(conn: Connection) -> list[dict]:
    """Every agent the registry knows: uuid, hostname, version, first/last seen, routers."""
    if not has_tables(conn, "agents"):
        return []
    out = {r.uuid: dict(r._mapping, routers={}) for r in conn.execute(select(agents))}
    if has_tables(conn, "agent_routers"):
        for r in conn.execute(select(agent_routers)):
            if r.uuid in out:
                out[r.uuid]["routers"][r.router] = r.last_seen
    return list(out.values())


def read_alerts(conn: Connection, limit: int = 50, severities: Sequence[str] | None = None) -> list[dict]:
    """The latest notifications, newest first; hostname filled from ``agents`` if unknown."""
    if not has_tables(conn, "notifications"):
        return []
    n = notifications
    if has_tables(conn, "agents"):
        stmt = select(n, agents.c.hostname.label("agent_hostname")).outerjoin(
            agents, agents.c.uuid == n.c.uuid)
    else:
        stmt = select(n)
    if severities is not None:
        stmt = stmt.where(n.c.severity.in_(list(severities)))
    stmt = stmt.order_by(n.c.received_at.desc(), n.c.msg_id).limit(limit)
    rows = []
    for r in conn.execute(stmt):
        row = dict(r._mapping)
        fallback = row.pop("agent_hostname", None)
        row["hostname"] = row["hostname"] or fallback
        rows.append(row)
    return rows
