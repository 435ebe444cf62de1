"""A state database made by an older fleetwatch keeps working: starting an owner adds the
columns a newer schema declares (sinks.state.db.upgrade), on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import Column, Float, Integer, MetaData, String, Table, inspect, select

pytest.importorskip("sqlalchemy")

from sinks.state import db, schema  # noqa: E402


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
    finally:
        eng.dispose()


def test_a_new_not_null_column_without_a_default_is_a_schema_mistake(tmp_path):
    eng = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        old, new = MetaData(), MetaData()
        Table("t", old, Column("id", Integer, primary_key=True))
        old.create_all(eng)
        table = Table("t", new, Column("id", Integer, primary_key=True),
                      Column("a", String(8)), Column("b", Float, nullable=False))
        with eng.begin() as conn, pytest.raises(RuntimeError, match="t.b: a column added"):
            db.upgrade(conn, [table])
    finally:
        eng.dispose()
