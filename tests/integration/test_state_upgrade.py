"""A state database made by an older fleetwatch keeps working: starting a writer brings it to
this version's schema through the Alembic migrations (fleetwatch/store/migrations), with its rows,
on SQLite and PostgreSQL: a new database, one of each shape the versions before the
migrations made (no ``alembic_version``), one at each revision since (every released
schema), several writers starting at once, and a database a newer version migrated (left
as it is by a writer, refused by ``fleetwatch state migrate``)."""

from __future__ import annotations

import logging
import re
import threading

import pytest
from sqlalchemy import (JSON, Boolean, Column, Float, ForeignKey, Index, Integer, MetaData,
                        String, Table, func, inspect, select, text)

pytest.importorskip("sqlalchemy")
pytest.importorskip("alembic")

from alembic.autogenerate import compare_metadata  # noqa: E402
from alembic.runtime.migration import MigrationContext  # noqa: E402

from fleetwatch import __version__  # noqa: E402
from fleetwatch.store import db, migrations, schema  # noqa: E402
from support.staterev import as_newer  # noqa: E402

#: The shapes of the state database before the migrations, from the history of the schema
#: (``git log -p`` of sinks/db.py, sinks/outbox.py, sinks/alerting/outbox.py and
#: fleetwatch/store/schema.py): each commit's tables, and the nullable columns it did not have yet.
#: Tables were only ever added, and nullable columns: no type or index changed.
LATER_COLUMNS = {                   # commit -> the columns it added to existing tables
    "9fb0749": {"agents": {"parents"}, "check_state": {"unreachable"},
                "host_state": {"unreachable"}},
    "1a08381": {"agents": {"ephemeral", "gone"}, "host_state": {"gone", "deregistered"}},
    "9cefc66": {"checks": {"received_at", "boot", "seq"},
                "check_state": {"received", "boot", "seq"}, "host_state": {"clock_skew"}},
}
#: the columns the revisions after the baseline added: no shape before the migrations had them
REVISED = {"agents": {"site"}}                                          # 0002
SHAPES = [                          # (commit, the tables it had)
    ("5e1aa49", {"agents", "agent_routers", "plugins", "notifications"}),
    ("258cc7b", {"checks", "check_state", "host_state", "silences", "suppressed",
                 "alert_events", "outbox"}),
    ("f267c91", {"acknowledgements", "check_freshness"}),
    ("9fb0749", {"downtimes", "downtime_suppressed", "notified_problems"}),
    ("1a08381", set()),
    ("4596a83", {"web_users", "web_tokens", "web_audit"}),
    ("9cefc66", set()),
    ("a92aeba", {"web_sessions"}),
]


def shape(commit: str) -> MetaData:
    """The tables a fleetwatch of ``commit`` made, each with its columns of then."""
    commits = [c for c, _ in SHAPES]
    upto = commits.index(commit) + 1
    tables = set().union(*(made for _, made in SHAPES[:upto]))
    lacking: dict[str, set[str]] = {t: set(c) for t, c in REVISED.items()}
    for later in commits[upto:]:
        for table, columns in LATER_COLUMNS.get(later, {}).items():
            lacking.setdefault(table, set()).update(columns)
    old = MetaData()
    for table in schema.metadata.sorted_tables:
        if table.name in tables:
            Table(table.name, old,
                  *(_column(c) for c in table.columns if c.name not in lacking.get(table.name, ())),
                  *(Index(i.name, *(c.name for c in i.columns)) for i in table.indexes))
    return old


def _column(c: Column) -> Column:
    return Column(c.name, c.type, *(ForeignKey(k.target_fullname, ondelete=k.ondelete)
                                    for k in c.foreign_keys),
                  primary_key=c.primary_key, nullable=c.nullable, unique=c.unique,
                  autoincrement=c.autoincrement)


def value(column: Column):
    """A value of ``column``'s type (keys point at the other tables' one row)."""
    kind = column.type
    if isinstance(kind, Boolean):
        return True
    if isinstance(kind, Integer):
        return 1
    if isinstance(kind, Float):
        return 1.5
    if isinstance(kind, JSON):
        return {"a": 1}
    return "u1"


def fill(eng, old: MetaData) -> dict[str, dict]:
    """One row in each table of ``old``; the rows by table."""
    rows = {}
    with eng.begin() as conn:
        for table in old.sorted_tables:
            rows[table.name] = {c.name: value(c) for c in table.columns}
            conn.execute(table.insert().values(**rows[table.name]))
    return rows


def differences(eng) -> list:
    """What alembic's autogenerate finds between fleetwatch/store/schema.py and the database."""
    with eng.connect() as conn:
        return compare_metadata(MigrationContext.configure(conn), schema.metadata)


def revision(eng) -> list[str]:
    with eng.connect() as conn:
        return list(conn.scalars(text("SELECT version_num FROM alembic_version")))


def _old_host_state(eng) -> None:
    """``host_state`` as an older version made it: without its nullable columns (those a
    newer version may have added), and one row."""
    old = MetaData()
    Table("host_state", old, *(Column(c.name, c.type, primary_key=c.primary_key)
                               for c in schema.host_state.columns if not c.nullable))
    old.create_all(eng)
    with eng.begin() as conn:
        conn.execute(old.tables["host_state"].insert().values(
            uuid="u1", name="", up=True, last_heard=1.0, deadline=16.0, since=1.0, routers={},
            notified=False, pending=False, updated=1.0))


def test_an_owner_starting_on_an_older_database_adds_the_new_columns(url):
    eng = db.engine(url)
    try:
        _old_host_state(eng)
        db.create(eng, "alerting")
        with eng.connect() as conn:
            have = {c["name"] for c in inspect(conn).get_columns("host_state")}
            row = conn.execute(select(schema.host_state)).one()
        assert have == {c.name for c in schema.host_state.columns}
        assert row.uuid == "u1" and row.last_heard == 1.0       # the old row is still there
        db.create(eng, "alerting")                                # and again: nothing to add
        assert revision(eng) == [migrations.HEAD]
    finally:
        eng.dispose()


def test_a_table_an_older_version_made_without_a_not_null_column_is_refused(tmp_path):
    """A column added to an existing table must be nullable or have a server default, so
    rows already there stay valid: the baseline adds only those (no version made another
    shape), and says which column otherwise, changing nothing."""
    eng = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        old = MetaData()
        Table("silences", old, Column("id", Integer, primary_key=True),
              Column("host", String(255), nullable=False))
        old.create_all(eng)
        with pytest.raises(RuntimeError, match="silences.created: a column added"):
            db.create(eng, "silences")
        assert inspect(eng).get_table_names() == ["silences"]
    finally:
        eng.dispose()


def test_a_new_database_comes_to_the_schema_of_sinks_state(url, monkeypatch):
    """Empty -> head; then the models and the migrated database agree (a change to
    fleetwatch/store/schema.py without a revision fails here), and a second start reads the
    revision and migrates nothing."""
    eng = db.engine(url)
    try:
        db.create(eng, "registry")
        assert revision(eng) == [migrations.HEAD]
        assert set(inspect(eng).get_table_names()) == set(schema.metadata.tables) | {
            "alembic_version"}
        assert differences(eng) == []

        def no(conn):
            raise AssertionError("migrated a database already at its revision")
        monkeypatch.setattr(migrations, "upgrade", no)
        db.create(eng, "alerting")
    finally:
        eng.dispose()


@pytest.mark.parametrize("commit", [c for c, _ in SHAPES])
def test_a_database_of_each_earlier_shape_comes_to_head_with_its_rows(url, commit):
    eng = db.engine(url)
    try:
        old = shape(commit)
        old.create_all(eng)
        rows = fill(eng, old)
        db.create(eng, "alerting")
        assert revision(eng) == [migrations.HEAD]
        assert differences(eng) == []
        with eng.connect() as conn:
            for name, row in rows.items():
                table = schema.metadata.tables[name]
                (found,) = conn.execute(select(*(table.c[c] for c in row))).all()
                assert dict(found._mapping) == row, name
                added = [c for c in table.columns if c.name not in row]
                if added:                       # the columns it lacked: NULL in its rows
                    assert set(conn.execute(select(*added)).one()) == {None}, name
            assert conn.scalar(select(func.count()).select_from(schema.checks)) == \
                (1 if "checks" in rows else 0)
    finally:
        eng.dispose()


def test_writers_starting_at_once_on_an_older_database_migrate_it_once(url):
    """Four writers on a database of the first shape at the same moment (a lock each waits
    on: PostgreSQL's advisory lock, SQLite's BEGIN IMMEDIATE): none fails, one migrates."""
    eng = db.engine(url)
    old = shape("5e1aa49")
    old.create_all(eng)
    rows = fill(eng, old)
    eng.dispose()
    errors: list[Exception] = []
    engines = [db.engine(url) for _ in range(4)]
    start = threading.Barrier(4)

    def create(writer, owner):
        try:
            start.wait(30)
            db.create(writer, owner)
        except Exception as e:      # collected, asserted below
            errors.append(e)
    threads = [threading.Thread(target=create, args=(e, owner))
               for e, owner in zip(engines, ["registry", "alerting", "web", "silences"])]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        assert revision(engines[0]) == [migrations.HEAD]
        assert differences(engines[0]) == []
        with engines[0].connect() as conn:
            assert conn.execute(select(schema.agents.c.uuid)).all() == [(rows["agents"]["uuid"],)]
    finally:
        for e in engines:
            e.dispose()


def test_a_database_a_newer_version_migrated_is_left_as_it_is_or_refused(url, caplog):
    """Going back to an older version, or an older sink beside newer ones in a rolling
    upgrade: revisions add, so a writer works on the newer schema, and says so once at
    start naming the release that made it; ``fleetwatch state migrate`` refuses to go
    down, saying the same."""
    eng = db.engine(url)
    try:
        db.create(eng, "alerting")
        as_newer(eng, "ffff", "9.9.0")
        said = (f"state database at revision ffff (fleetwatch 9.9.0), newer than this "
                f"fleetwatch {__version__} knows (its newest: {migrations.HEAD})")
        with caplog.at_level(logging.WARNING, logger="fleetwatch.store.db"):
            assert db.create(eng, "registry") == ("ffff", "ffff")
        assert caplog.messages == [f"{said}: left as it is (revisions only add: this "
                                   f"release works on it)"]
        with pytest.raises(db.NewerSchema, match=re.escape(
                f"{said}: upgrade fleetwatch; a state database is never downgraded")):
            db.create(eng, "state", refuse_newer=True)
        assert revision(eng) == ["ffff"]
    finally:
        eng.dispose()


@pytest.mark.parametrize("start", list(migrations.RELEASES))
def test_a_database_at_each_revision_since_the_baseline_comes_to_head_with_its_rows(
        url, start):
    """Every released schema (each revision, 0001 the baseline's first) with a row in each
    of its tables is migrated to this release's, the rows kept, and the release that did
    it recorded."""
    from alembic import command
    eng = db.engine(url)
    try:
        with eng.begin() as conn:
            command.upgrade(migrations.config(connection=conn), start)
        then = MetaData()
        then.reflect(eng)
        then.remove(then.tables["alembic_version"])
        rows = fill(eng, then)
        assert db.create(eng, "state") == (start, migrations.HEAD)
        assert revision(eng) == [migrations.HEAD]
        assert differences(eng) == []
        with eng.connect() as conn:
            for name, row in rows.items():
                table = schema.metadata.tables[name]
                found = conn.execute(select(*(table.c[c] for c in row))).all()
                assert [dict(r._mapping) for r in found] == [row], name
            made = conn.execute(select(schema.state_releases.c.version).where(
                schema.state_releases.c.revision == migrations.HEAD)).scalar()
        assert made == (__version__ if start != migrations.HEAD else None)   # not migrated
    finally:
        eng.dispose()
