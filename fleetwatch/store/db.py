"""The state database's engines and the writes its owners share (SQLAlchemy 2.0 Core).

:func:`engine` opens a database (SQLite: WAL, busy timeout, foreign keys, writers that
take the lock when a transaction begins); :func:`create` brings it to this version's schema
as a writer starts (:mod:`fleetwatch.store.migrations`); :func:`upsert`, :func:`insert_fresh` and
:func:`record_checks` are the idempotent writes of the sinks, :func:`insert_many` their
batched inserts (the base of the sink types that write here is
:class:`sinks.database.DatabaseSink`). The tables are in :mod:`fleetwatch.store.schema`, the
readers in :mod:`fleetwatch.store.reads`.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import weakref
from collections.abc import Sequence

from sqlalchemy import JSON, Table, bindparam, create_engine, event, inspect, select, text
from sqlalchemy.engine import URL, Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.sql.elements import TextClause

from fleetwatch import __version__, private, sqlitefiles
from fleetwatch.store import driver
from fleetwatch.store.driver import Prepared
from fleetwatch.store.schema import OWNED, checks

log = logging.getLogger(__name__)

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
    0640 (and SQLite gives its ``-wal`` and ``-shm`` the same mode), whatever the umask;
    files of it this process cannot write are refused here
    (:class:`fleetwatch.sqlitefiles.Unwritable`).
    """
    u = make_url(url)
    if u.get_backend_name() != "sqlite":
        return create_engine(u, pool_pre_ping=True)
    path = sqlite_path(u)
    if path and writer:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        private.create(path, private.GROUP)
        sqlitefiles.check(path)        # its -shm above all: SQLite maps it (Unwritable)
    eng = create_engine(u, connect_args={"timeout": SQLITE_BUSY_MS / 1000})

    @event.listens_for(eng, "connect")
    def _on_connect(dbapi_conn, _record):
        # The driver's own transaction handling is off; "begin" below starts them.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        try:
            if writer and path:
                wal(cur)
                # each commit fsynced (SQLite's default, said here so no build's default
                # changes it): the alerting sink ACKs a NOTIFY after its commit, and the
                # ACK promises the alert survives the machine's crash, not only the
                # process's (NORMAL, in WAL mode, would lose the last commits on power loss)
                cur.execute("PRAGMA synchronous=FULL")
            cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
            cur.execute("PRAGMA foreign_keys=ON")
            # the database file read, not mapped: a file changed under a mapping is a
            # SIGBUS, an error is a line (the -shm is always mapped: sqlitefiles.check)
            cur.execute("PRAGMA mmap_size=0")
        finally:
            cur.close()

    @event.listens_for(eng, "begin")
    def _on_begin(conn):
        # on the driver's cursor: every transaction begins here, the alerting sink's one per
        # NOTIFY too (:mod:`fleetwatch.store.driver`)
        driver.execute_sql(conn, "BEGIN IMMEDIATE" if writer else "BEGIN")

    return eng


class SchemaError(Exception):
    """The database cannot be brought to this version's schema (:func:`create`); its text
    says why, in one line."""


class NewerSchema(SchemaError):
    """The database is at a revision this release does not know, and going down was
    refused (:func:`create` with ``refuse_newer``); its text names that revision and the
    release that made it."""


#: PostgreSQL advisory lock key taken while migrating ("fwdb")
CREATE_LOCK = 0x66776462


def create(eng: Engine, owner: str, refuse_newer: bool = False,
           clock=time.time) -> tuple[str | None, str]:
    """Bring the database to the schema of this version, as ``owner`` (a key of
    :data:`~fleetwatch.store.schema.OWNED`) starts: its Alembic migrations
    (:mod:`fleetwatch.store.migrations`), for the whole database, not only the tables ``owner``
    writes. A database already there costs one read of its revision.

    A database made before the migrations (no ``alembic_version``) comes to the baseline
    revision with its rows: the tables missing are created, the columns it lacks added.
    One in a revision newer than this version knows (a newer fleetwatch ran on it, then
    this one went back) is left as it is, with a warning naming the release that made it:
    revisions add, so an older version keeps working on it (a rolling upgrade runs older
    sinks beside newer ones). With ``refuse_newer`` (``fleetwatch state migrate``) that is
    :class:`NewerSchema` instead: a state database is never downgraded. A migration says in
    ``state_releases`` which release made it (:func:`~fleetwatch.store.migrations.record`).
    Returns (the revision found, the revision now).

    Writers starting at once wait for each other: on PostgreSQL each takes a
    transaction-scoped advisory lock before reading the revision again, and migrates in
    that transaction (PostgreSQL's DDL is transactional); SQLite writers begin with
    ``BEGIN IMMEDIATE``, which holds the file's write lock for the whole migration. The
    next one finds the database at its revision and does nothing.
    """
    from fleetwatch.store import migrations
    if owner not in OWNED:
        raise KeyError(owner)
    try:
        with eng.begin() as conn:
            found = migrations.current(conn)
            if found == migrations.HEAD:
                return found, found
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CREATE_LOCK})
                found = migrations.current(conn)
                if found == migrations.HEAD:
                    return found, found
            if found is not None and found not in migrations.RELEASES:
                line = migrations.newer(conn, found)
                if refuse_newer:
                    raise NewerSchema(f"{line}: upgrade fleetwatch; a state database is "
                                      f"never downgraded")
                log.warning("%s: left as it is (revisions only add: this release works on "
                            "it)", line)
                return found, found
            migrations.upgrade(conn)
            migrations.record(conn, clock())
    except SQLAlchemyError as e:
        raise SchemaError(f"cannot create the {owner} tables: {e}") from e
    log.info("state database migrated from revision %s to %s (fleetwatch %s)",
             found or "none", migrations.HEAD, __version__)
    return found, migrations.HEAD


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


def _upsert_statement(conn: Connection, table: Table, update: Sequence[str]):
    """The dialect's ``INSERT ... ON CONFLICT (primary key) DO UPDATE`` of the columns
    ``update`` (``DO NOTHING`` without any), its rows given at execution; None for a dialect
    without one."""
    stmt = _dialect_insert(conn, table)
    if stmt is None:
        return None
    set_ = {c: stmt.excluded[c] for c in update}
    return stmt.on_conflict_do_update(index_elements=_keys(table), set_=set_) if set_ \
        else stmt.on_conflict_do_nothing(index_elements=_keys(table))


def upsert(conn: Connection, table: Table, row: dict, update: Sequence[str]) -> None:
    """Insert ``row``, or update the columns ``update`` of the row with its primary key."""
    stmt = _upsert_statement(conn, table, update)
    if stmt is not None:
        conn.execute(stmt, row)
        return
    where = _where_keys(table, row)
    if conn.execute(select(*table.primary_key.columns).where(*where)).first() is None:
        conn.execute(table.insert().values(**row))
    elif update:
        conn.execute(table.update().where(*where).values({c: row[c] for c in update}))


def upsert_many(conn: Connection, table: Table, rows: Sequence[dict],
                update: Sequence[str]) -> None:
    """:func:`upsert` of ``rows`` (each with the same columns, primary keys distinct) in one
    statement executed once for all of them: a sink writing a batch compiles it once, not
    once a row (SQLAlchemy's dialect ``on_conflict`` constructs are compiled anew at every
    execution, about 0.5 ms each)."""
    if not rows:
        return
    stmt = _upsert_statement(conn, table, update)
    if stmt is None:
        for row in rows:
            upsert(conn, table, row, update)
        return
    conn.execute(stmt, list(rows))


#: rows per statement of :func:`insert_fresh` and :func:`insert_many` at most (their bound
#: parameters: SQLite allows 32,766 from 3.32 on, PostgreSQL 65,535); a power of two
FRESH_CHUNK = 64


def _chunks(rows: Sequence[dict]):
    """``rows`` in chunks of a power of two each (37 rows: 32, 4 and 1), at most
    :data:`FRESH_CHUNK`: so that a few statements, each built and compiled once, serve
    every count."""
    start = 0
    while start < len(rows):
        n = min(FRESH_CHUNK, 1 << (len(rows) - start).bit_length() - 1)
        yield rows[start:start + n]
        start += n


def _numbered(chunk: Sequence[dict], columns: tuple[str, ...]) -> dict:
    return {f"{c}_{i}": row[c] for i, row in enumerate(chunk) for c in columns}


def insert_fresh(conn: Connection, table: Table, rows: Sequence[dict]) -> set:
    """Insert the ``rows`` whose primary key (one column) is not in ``table`` yet, a few
    statements for them all (:func:`_chunks`); return the keys of those inserted.

    On SQLite (3.35 and later) and PostgreSQL one ``INSERT ... VALUES (...), (...) ON
    CONFLICT (key) DO NOTHING RETURNING key``: a key another transaction has just inserted
    is not returned, whichever commits first (PostgreSQL waits for it), so two sinks never
    both take one row as theirs. Elsewhere the present keys are read first.
    """
    key = _keys(table)[0]
    fresh: set = set()
    if not rows:
        return fresh
    if conn.dialect.name not in ("sqlite", "postgresql"):
        present = set(conn.scalars(select(table.c[key]).where(
            table.c[key].in_([r[key] for r in rows]))))
        new = [r for r in rows if r[key] not in present]
        if new:
            conn.execute(table.insert(), new)
        return {r[key] for r in new}
    columns = tuple(rows[0])
    for chunk in _chunks(rows):
        statement = _insert_returning(table.name, key, columns, len(chunk))
        fresh.update(r[0] for r in statement.execute(conn, _numbered(chunk, columns)))
    return fresh


@functools.lru_cache(maxsize=32)
def _insert_returning(table: str, key: str, columns: tuple[str, ...], n: int) -> Prepared:
    """:func:`insert_fresh`'s statement for ``n`` rows, built once, run on the driver's
    cursor (:mod:`fleetwatch.store.driver`: it is on the alerting sink's hot path,
    bench/notify_rtt.py). Textual: the dialects' ``on_conflict`` constructs differ."""
    names = ", ".join(columns)
    values = ", ".join("(" + ", ".join(f":{c}_{i}" for c in columns) + ")" for i in range(n))
    return Prepared(text(f"INSERT INTO {table} ({names}) VALUES {values} "
                         f"ON CONFLICT ({key}) DO NOTHING RETURNING {key}"))


def insert_many(conn: Connection, table: Table, rows: Sequence[dict],
                returning: tuple[str, ...] = ()) -> list:
    """Insert ``rows`` (each with the same columns) a few statements for them all
    (:func:`_chunks`), on the driver's cursor (:mod:`fleetwatch.store.driver`); the ``returning``
    columns of each row inserted, in no promised order (match them by a column)."""
    if not rows:
        return []
    columns = tuple(rows[0])
    out: list = []
    for chunk in _chunks(rows):
        statement = _insert_values(table, columns, len(chunk), returning)
        out += statement.execute(conn, _numbered(chunk, columns))
    return out


@functools.lru_cache(maxsize=64)
def _insert_values(table: Table, columns: tuple[str, ...], n: int,
                   returning: tuple[str, ...]) -> Prepared:
    """:func:`insert_many`'s statement for ``n`` rows, built once (each parameter typed by
    its column, so that a JSON value is written as JSON in every row, not the first only)."""
    statement = table.insert().values([
        {c: bindparam(f"{c}_{i}", type_=table.c[c].type) for c in columns}
        for i in range(n)])
    if returning:
        statement = statement.returning(*(table.c[c] for c in returning))
    return Prepared(statement)


CHECK_COLUMNS = tuple(c.name for c in checks.columns)


def record_checks(conn: Connection, rows: Sequence[dict]) -> int:
    """Store each row as the latest result of its (uuid, plugin); return how many.

    The caller has judged each row newer than the stored one, under the lock of the
    check's state (:mod:`sinks.alerting.checks.ordering`, :mod:`sinks.alerting.evaluation`): which
    result is newer is not a sender's clock's to say, so it is not written in SQL here.
    """
    if conn.dialect.name in ("sqlite", "postgresql"):
        if rows:
            conn.execute(_upsert_check(), list(rows))
        return len(rows)
    for row in rows:
        where = _where_keys(checks, row)
        if conn.execute(select(checks.c.uuid).where(*where)).first() is None:
            conn.execute(checks.insert().values(**row))
        else:
            conn.execute(checks.update().where(*where).values(**row))
    return len(rows)


@functools.lru_cache(maxsize=1)
def _upsert_check() -> TextClause:
    """``INSERT ... ON CONFLICT DO UPDATE`` (SQLite >= 3.24, PostgreSQL).

    Textual and built once for the reason given in :func:`_insert_returning`.
    """
    names = ", ".join(CHECK_COLUMNS)
    values = ", ".join(f":{c}" for c in CHECK_COLUMNS)
    sets = ", ".join(f"{c} = excluded.{c}" for c in CHECK_COLUMNS if c not in ("uuid", "plugin"))
    return text(f"INSERT INTO checks ({names}) VALUES ({values}) "
                f"ON CONFLICT (uuid, plugin) DO UPDATE SET {sets}"
                ).bindparams(bindparam("perfdata", type_=JSON))


# ---------------------------------------------------------------- reading

#: engine -> the tables found to exist in its database, and the tables found to have every
#: column of the schema: a long-lived reader (the console) asks the catalog once for each,
#: not on every read (on PostgreSQL a catalog query costs a round trip and milliseconds).
#: Only what exists is kept: tables are never dropped, columns never removed, and what is
#: missing is asked again (a writer may create or migrate it meanwhile).
_KNOWN: "weakref.WeakKeyDictionary[Engine, tuple[set, set]]" = weakref.WeakKeyDictionary()


def known(conn: Connection) -> tuple[set, set]:
    """(the tables known to exist, those known to be whole) of ``conn``'s database."""
    try:
        return _KNOWN.setdefault(conn.engine, (set(), set()))
    except TypeError:               # an engine that cannot be weakly referenced: no memory
        return set(), set()


def has_tables(conn: Connection, *names: str) -> bool:
    """Whether every table of ``names`` exists (a reader finds none before its owner ran)."""
    tables, _ = known(conn)
    missing = [n for n in names if n not in tables]
    if not missing:
        return True
    insp = inspect(conn)
    found = [n for n in missing if insp.has_table(n)]
    tables.update(found)
    return len(found) == len(missing)
