"""The test support's state reader, :meth:`support.fleet.Fleet.db_rows`: empty before the
sinks create the database or a table of their schema, and raising on every other SQL error
(a wait on a misspelt query would otherwise time out, and an assertion on it pass)."""

from __future__ import annotations

import sqlite3

import pytest

from support.fleet import Fleet


@pytest.fixture
def fleet(tmp_path):
    return Fleet(tmp_path)


def test_no_rows_before_the_database_or_a_schema_table_exists(fleet):
    assert fleet.db_rows("SELECT * FROM notifications") == []
    sqlite3.connect(fleet.root / "state.db").close()
    assert fleet.db_rows("SELECT * FROM notifications") == []
    assert fleet.db_rows("SELECT * FROM host_state WHERE name = ?", ("x",)) == []


def test_rows_of_a_table(fleet):
    with sqlite3.connect(fleet.root / "state.db") as conn:
        conn.execute("CREATE TABLE notifications (text TEXT)")
        conn.execute("INSERT INTO notifications VALUES ('disk full')")
    conn.close()
    assert fleet.db_rows("SELECT text FROM notifications WHERE text = ?", ("disk full",)) == \
        [("disk full",)]


@pytest.mark.parametrize("sql, args", [
    ("SELECT * FROM notificatons", ()),                    # a table of no sink's schema
    ("SELECT txet FROM notifications", ()),                # a misspelt column
    ("SELEC text FROM notifications", ()),                 # a syntax error
    ("SELECT text FROM notifications WHERE text = ?", ()),  # a missing argument
    ("SELECT text FROM notifications", ("extra",)),        # one argument too many
])
def test_any_other_sql_error_raises(fleet, sql, args):
    with sqlite3.connect(fleet.root / "state.db") as conn:
        conn.execute("CREATE TABLE notifications (text TEXT)")
    conn.close()
    with pytest.raises(sqlite3.Error):
        fleet.db_rows(sql, args)


def test_a_file_that_is_no_database_raises(fleet):
    (fleet.root / "state.db").write_bytes(b"not a database, " * 100)
    with pytest.raises(sqlite3.DatabaseError):
        fleet.db_rows("SELECT * FROM notifications")
