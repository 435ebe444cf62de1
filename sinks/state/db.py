"""The state database: one SQLAlchemy 2.0 Core schema, each table written by one owner.

=================  ==========  =====================================================
table              owner       rows
=================  ==========  =====================================================
``agents``         registry    one per agent uuid: hostname, version, first/last seen
``agent_routers``  registry    (uuid, router): when a router last relayed for it
``plugins``        registry    (uuid, source, name): plugins declared in REGISTER
``notifications``  alerting    one per NOTIFY msg_id
``checks``         alerting    (uuid, plugin): the latest RESULT of each check
``check_state``    alerting    (uuid, plugin): Nagios state (SOFT/HARD, flapping, told)
``host_state``     alerting    (uuid, name): UP/DOWN of an agent ("") or local process
``silences``       operator    muted hosts/checks (``fleetwatch silence``); sinks read
``suppressed``     alerting    (silence_id, key, action, severity): alerts a silence muted
``alert_events``   alerting    one per alert event (defined in sinks/alerting/outbox.py)
``outbox``         alerting    (event, channel): delivery state, claims (sinks/alerting/outbox.py)
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

from sqlalchemy import (JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData,
                        String, Table, Text, bindparam, create_engine, event, inspect, select,
                        text)
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.elements import TextClause

from fleetwatch import private

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

#: No foreign key to ``agents``: a RESULT may reach the alerting sink before the registry
#: has recorded its agent. ``last_result`` is the RESULT's ``ts``; a row is only replaced by
#: a RESULT that is newer by ``coalesce(started, last_result)`` (see :func:`record_checks`).
checks = Table(
    "checks", metadata,
    Column("uuid", ID, primary_key=True),
    Column("plugin", String(255), primary_key=True),
    Column("status", Integer, nullable=False),
    Column("output", Text, nullable=False),
    Column("long_output", Text, nullable=False),
    Column("perfdata", JSON, nullable=False),
    Column("command_id", ID, nullable=False),
    Column("slot", Float),
    Column("started", Float),
    Column("duration", Float),
    Column("last_result", Float, nullable=False),
    Column("router", ID, nullable=False),
)

#: Shared by every alerting sink: rows are read FOR UPDATE (PostgreSQL) or in a BEGIN
#: IMMEDIATE transaction (SQLite) before a transition (sinks/alerting/state.py).
check_state = Table(
    "check_state", metadata,
    Column("uuid", ID, primary_key=True),
    Column("plugin", String(255), primary_key=True),
    Column("status", Integer, nullable=False),
    Column("hard", Boolean, nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("max_attempts", Integer, nullable=False),
    Column("hard_status", Integer, nullable=False),
    Column("since", Float),
    Column("last_change", Float),
    Column("last_result", Float),
    Column("history", String(32), nullable=False),
    Column("percent", Float, nullable=False),
    Column("flapping", Boolean, nullable=False),
    Column("notified", Integer, nullable=False),
    Column("last_notified", Float),
    Column("flap_notified", Boolean, nullable=False),
    Column("updated", Float, nullable=False),
)

host_state = Table(
    "host_state", metadata,
    Column("uuid", ID, primary_key=True),
    Column("name", String(255), primary_key=True),
    Column("up", Boolean, nullable=False),
    Column("last_heard", Float, nullable=False),
    Column("interval", Float),
    Column("deadline", Float, nullable=False),
    Column("since", Float, nullable=False),
    Column("routers", JSON, nullable=False),
    Column("notified", Boolean, nullable=False),
    Column("pending", Boolean, nullable=False),
    Column("updated", Float, nullable=False),
    Index("ix_host_state_deadline", "deadline"),
    Index("ix_host_state_pending", "pending"),
)

silences = Table(
    "silences", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(255), nullable=False),
    Column("check_name", String(255)),
    Column("created", Float, nullable=False),
    Column("until", Float, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_by", String(255), nullable=False),
    Column("removed", Float),
    Index("ix_silences_until", "until"),
)

suppressed = Table(
    "suppressed", metadata,
    Column("silence_id", Integer, primary_key=True),
    Column("key", String(512), primary_key=True),
    Column("action", String(16), primary_key=True),
    Column("severity", String(16), primary_key=True),
    Column("kind", String(16), nullable=False),
    Column("uuid", ID),
    Column("hostname", String(255)),
    Column("check_name", String(255)),
    Column("summary", Text, nullable=False),
    Column("created", Float, nullable=False),
)

#: owner -> the tables it creates and writes
OWNED = {
    "registry": (agents, agent_routers, plugins),
    "alerting": (notifications, checks, check_state, host_state, silences, suppressed),
    "silences": (silences,),
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


def wal(cur) -> None:
    """Switch a new SQLite file to WAL. Two sinks opening one new file at once can both be
    refused "database is locked" at once, without the busy timeout (the switch needs the
    file to itself, and SQLite will not let two connections wait for each other for it):
    tried again until the busy timeout has passed."""
    import sqlite3
    deadline = time.monotonic() + SQLITE_BUSY_MS / 1000
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def engine(url: str, writer: bool = True) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and foreign keys.

    A ``writer`` creates the SQLite file's directory and takes the write lock when a
    transaction begins (``BEGIN IMMEDIATE``), so two sinks on one file wait for each other
    (up to the busy timeout) instead of failing on a lock upgrade. A new file is created
    0640 (and SQLite gives its ``-wal`` and ``-shm`` the same mode), whatever the umask.
    """
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return create_engine(u, pool_pre_ping=True)
    path = sqlite_path(u)
    if path and writer:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        private.create(path, private.GROUP)
    eng = create_engine(u, connect_args={"timeout": SQLITE_BUSY_MS / 1000})

    @event.listens_for(eng, "connect")
    def _on_connect(dbapi_conn, _record):
        # The driver's own transaction handling is off; "begin" below starts them.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            if writer and path:
                wal(cur)
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
        finally:
            cur.close()

    @event.listens_for(eng, "begin")
    def _on_begin(conn):
        conn.exec_driver_sql("BEGIN IMMEDIATE" if writer else "BEGIN")

    return eng


#: PostgreSQL advisory lock key taken while creating tables ("fwdb")
CREATE_LOCK = 0x66776462


def create(eng: Engine, owner: str) -> None:
    """Create the tables ``owner`` writes (and nothing else), if missing.

    On PostgreSQL, sinks starting at once on a new database would race between "does the
    table exist" and CREATE TABLE (a unique violation in ``pg_type``): each takes a
    transaction-scoped advisory lock first. SQLite writers already serialise (BEGIN
    IMMEDIATE).
    """
    from sinks.base import WriteError
    try:
        with eng.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CREATE_LOCK})
            metadata.create_all(conn, tables=list(OWNED[owner]))
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


CHECK_COLUMNS = tuple(c.name for c in checks.columns)


def record_checks(conn: Connection, rows: Sequence[dict]) -> int:
    """Store each row as the latest result of its (uuid, plugin) unless the stored one is
    newer or the same (by ``coalesce(started, last_result)``); return how many were stored.

    Idempotent, and order-proof: a late or duplicate RESULT never replaces a newer one.
    """
    stored = 0
    if conn.dialect.name in ("sqlite", "postgresql"):
        stmt = _upsert_newer_check()
        for row in rows:
            result = conn.execute(stmt, row)
            stored += 1 if result.rowcount else 0
        return stored
    for row in rows:
        where = _where_keys(checks, row)
        old = conn.execute(select(checks.c.started, checks.c.last_result).where(*where)).first()
        if old is None:
            conn.execute(checks.insert().values(**row))
        elif _check_order(old.started, old.last_result) < _check_order(row["started"],
                                                                         row["last_result"]):
            conn.execute(checks.update().where(*where).values(**row))
        else:
            continue
        stored += 1
    return stored


def _check_order(started: float | None, last_result: float) -> float:
    return last_result if started is None else started


@functools.lru_cache(maxsize=1)
def _upsert_newer_check() -> TextClause:
    """``INSERT ... ON CONFLICT DO UPDATE ... WHERE`` newer (SQLite >= 3.24, PostgreSQL).

    Textual and built once for the reason given in :func:`_insert_ignoring`.
    """
    names = ", ".join(CHECK_COLUMNS)
    values = ", ".join(f":{c}" for c in CHECK_COLUMNS)
    sets = ", ".join(f"{c} = excluded.{c}" for c in CHECK_COLUMNS if c not in ("uuid", "plugin"))
    order = "coalesce({0}.started, {0}.last_result)"
    return text(f"INSERT INTO checks ({names}) VALUES ({values}) "
                f"ON CONFLICT (uuid, plugin) DO UPDATE SET {sets} "
                f"WHERE {order.format('checks')} < {order.format('excluded')}"
                ).bindparams(bindparam("perfdata", type_=JSON))


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
    """The latest notifications, newest first; hostname the registry's (``agents``, from the
    agent's HELLO), the one sent with the notification only while the registry has none."""
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
        registered = row.pop("agent_hostname", None)
        row["hostname"] = registered or row["hostname"]
        rows.append(row)
    return rows


def read_alert_events(conn: Connection, limit: int = 50,
                      severities: Sequence[str] | None = None) -> list[dict]:
    """The latest alert events with their delivery state per channel (sinks/alerting/outbox.py)."""
    from sinks.alerting import outbox
    return outbox.read_events(conn, limit=limit, severities=severities)


def read_alert_total(conn: Connection, severities: Sequence[str] | None = None) -> int:
    """How many alerts ``fleetwatch alerts --limit 0`` lists: every alert event, and every
    notification that no event was made of (``key`` ``UUID/notify/MSG_ID``)."""
    from sqlalchemy import and_, exists, func
    from sinks.alerting.outbox import alert_events as e
    n = notifications
    total, events = 0, has_tables(conn, "alert_events", "outbox")     # as read_alert_events
    if events:
        stmt = select(func.count()).select_from(e)
        if severities is not None:
            stmt = stmt.where(e.c.severity.in_(list(severities)))
        total += conn.execute(stmt).scalar_one()
    if has_tables(conn, "notifications"):
        stmt = select(func.count()).select_from(n)
        if severities is not None:
            stmt = stmt.where(n.c.severity.in_(list(severities)))
        if events:
            stmt = stmt.where(~exists().where(and_(
                e.c.kind == "notify", e.c.key == n.c.uuid + "/notify/" + n.c.msg_id)))
        total += conn.execute(stmt).scalar_one()
    return total


def read_plugins(conn: Connection) -> list[dict]:
    """Every declared plugin: uuid, source, name, spec (interval, timeout...), declared_at."""
    if not has_tables(conn, "plugins"):
        return []
    stmt = select(plugins).order_by(plugins.c.uuid, plugins.c.name, plugins.c.source)
    return [dict(r._mapping) for r in conn.execute(stmt)]


def read_checks(conn: Connection, uuid: str | None = None) -> list[dict]:
    """The latest result of every check (of one agent if ``uuid``), by uuid and plugin."""
    if not has_tables(conn, "checks"):
        return []
    stmt = select(checks).order_by(checks.c.uuid, checks.c.plugin)
    if uuid is not None:
        stmt = stmt.where(checks.c.uuid == uuid)
    return [dict(r._mapping) for r in conn.execute(stmt)]


def read_check_state(conn: Connection) -> list[dict]:
    """The Nagios state of every check the alerting sinks evaluated (``check_state``)."""
    if not has_tables(conn, "check_state"):
        return []
    stmt = select(check_state).order_by(check_state.c.uuid, check_state.c.plugin)
    return [dict(r._mapping) for r in conn.execute(stmt)]


def read_host_state(conn: Connection) -> list[dict]:
    """UP/DOWN of every agent ("" name) and heartbeating local process (``host_state``)."""
    if not has_tables(conn, "host_state"):
        return []
    stmt = select(host_state).where(host_state.c.last_heard > 0) \
        .order_by(host_state.c.uuid, host_state.c.name)
    return [dict(r._mapping) for r in conn.execute(stmt)]


def read_silences(conn: Connection, now: float | None = None, ended: bool = False) -> list[dict]:
    """Silences, newest first: those still running at ``now`` (all if ``ended``), each
    with ``suppressed``: how many distinct alerts it muted."""
    if not has_tables(conn, "silences"):
        return []
    from sqlalchemy import func
    now = time.time() if now is None else now
    stmt = select(silences).order_by(silences.c.id.desc())
    if not ended:
        stmt = stmt.where(silences.c.until > now, silences.c.removed.is_(None))
    rows = [dict(r._mapping) for r in conn.execute(stmt)]
    counts: dict[int, int] = {}
    if rows and has_tables(conn, "suppressed"):
        counts = dict(conn.execute(
            select(suppressed.c.silence_id, func.count())
            .where(suppressed.c.silence_id.in_([r["id"] for r in rows]))
            .group_by(suppressed.c.silence_id)).all())
    for row in rows:
        row["suppressed"] = counts.get(row["id"], 0)
    return rows
