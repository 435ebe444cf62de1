"""fleetwatch.store.driver: statements of the alerting sink's hot path on the driver's cursor
(issue 31, item 14), on SQLite and on a real PostgreSQL: the same values in and out as
SQLAlchemy's own execution, in the caller's transaction, its errors SQLAlchemy's."""

from __future__ import annotations

import pytest
from sqlalchemy import bindparam, select, text
from sqlalchemy.exc import DBAPIError

from fleetwatch.store import db, schema
from fleetwatch.store.driver import Prepared


def event(key: str, details) -> dict:
    return {"key": key, "kind": "notify", "action": "trigger", "severity": "error",
            "uuid": None, "hostname": "web-1", "check_name": None, "status": None,
            "summary": "s", "text": "t", "created": 1.0, "details": details}


def test_rows_are_written_and_read_as_sqlalchemy_does(eng):
    """A JSON column's value in every row of a many-row insert (SQLAlchemy types only the
    first row's parameters of a multi-VALUES insert unless told), a Boolean read back as
    one on SQLite, numbers as numbers on PostgreSQL."""
    rows = [event("a", {"n": 1}), event("b", None), event("c", {"list": [1, "x"]})]
    with eng.begin() as conn:
        ids = dict((key, i) for i, key in db.insert_many(conn, schema.alert_events, rows,
                                                         returning=("id", "key")))
        conn.execute(schema.downtimes.insert().values(
            host="web-1", check_name=None, start=1.0, end=5.0, every=None, duration=None,
            flexible=None, children=True, comment="", author="me", created=1.0))
    assert set(ids) == {"a", "b", "c"}
    with eng.connect() as conn:
        got = {r.key: r.details for r in conn.execute(select(schema.alert_events))}
        t = schema.downtimes
        mine = Prepared(select(t).where(t.c.start <= bindparam("now"))).execute(
            conn, {"now": 2.0})
        theirs = conn.execute(select(t).where(t.c.start <= 2.0)).all()
    assert got == {"a": {"n": 1}, "b": None, "c": {"list": [1, "x"]}}
    assert [r._asdict() for r in theirs] == [r._mapping for r in mine]
    assert mine[0].children is True and mine[0].start == 1.0


def test_a_statement_is_part_of_the_callers_transaction(eng):
    rows = [{"msg_id": f"{i:032x}", "uuid": "u" * 32, "hostname": "h", "severity": "info",
             "text": "x", "source": None, "sent_at": 1.0, "received_at": 1.0,
             "router": "r1"} for i in range(3)]
    with pytest.raises(RuntimeError):
        with eng.begin() as conn:
            assert db.insert_fresh(conn, schema.notifications, rows) == \
                {r["msg_id"] for r in rows}
            raise RuntimeError("rolled back")
    with eng.begin() as conn:
        assert len(db.insert_fresh(conn, schema.notifications, rows + rows[:1])) == 3
        assert db.insert_fresh(conn, schema.notifications, rows) == set()


def test_a_drivers_error_is_sqlalchemys(eng):
    """So that the sink's transaction reports it as a failed write (counted, not ACKed,
    the agents resend), as it does for every other statement."""
    with eng.begin() as conn:
        with pytest.raises(DBAPIError) as e:
            Prepared(text("SELECT no_such_column FROM notifications")).execute(conn)
    assert "no_such_column" in str(e.value)


def test_a_held_connection_is_replaced_after_the_database_drops_it(url):
    """The sinks hold one connection (DatabaseSink.transaction); one the database dropped
    (on PostgreSQL: its session terminated, as a restart does) fails one transaction, as
    SQLAlchemy's error, and is replaced at the next."""
    from sinks.database import DatabaseSink
    sink = DatabaseSink(db.engine(url))
    sink.type = "alerting"
    sink.start()
    try:
        with sink.transaction() as conn:
            first = conn.connection.dbapi_connection
            pid = conn.execute(text("SELECT pg_backend_pid()")).scalar() \
                if conn.dialect.name == "postgresql" else None
        if pid is None:
            sink._held.invalidate()
        else:
            other = db.engine(url)
            with other.begin() as admin:
                admin.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            other.dispose()
            with pytest.raises(DBAPIError):
                with sink.transaction() as conn:
                    conn.execute(text("SELECT 1"))
        with sink.transaction() as conn:
            assert conn.connection.dbapi_connection is not first
            assert conn.execute(text("SELECT 1")).scalar() == 1
    finally:
        sink.close()
