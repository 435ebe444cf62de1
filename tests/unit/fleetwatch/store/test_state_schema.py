"""The state database's schema in one place (fleetwatch/store/schema.py), its readers called as
functions (fleetwatch/store/reads.py), and a fleetwatch.store that imports no sink type."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")

from fleetwatch.store import reads, schema  # noqa: E402
from fleetwatch.store.reader import Reader, StateError, read  # noqa: E402

STATE = Path(schema.__file__).parent


def test_every_table_is_declared_in_the_schema_and_created_by_an_owner():
    owned = {t.name for tables in schema.OWNED.values() for t in tables}
    assert owned == set(schema.metadata.tables)
    assert {"alert_events", "outbox"} <= {t.name for t in schema.OWNED["alerting"]}


def test_the_state_package_imports_no_sink_type():
    """fleetwatch.store is below the sink types: the alerting sink's outbox imports its tables
    from here, never the other way round (no import cycle)."""
    found = []
    for path in sorted(STATE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            found += [f"{path.name}:{node.lineno}: {n}" for n in names
                      if n.split(".")[0] == "sinks" and not n.startswith("fleetwatch.store")
                      and n not in ("sinks.base",)]
    assert found == []


def test_readers_are_functions_of_a_connection(tmp_path):
    """Called as themselves; a database no sink has created reads as empty."""
    for name, fn in inspect.getmembers(reads, inspect.isfunction):
        if fn.__module__ == reads.__name__ and name not in ("as_event", "scoped") \
                and not name.startswith("_"):
            assert list(inspect.signature(fn).parameters)[0] == "conn", name
    url = f"sqlite:///{tmp_path / 'none.db'}"
    assert read(url, reads.agents) == [] and not (tmp_path / "none.db").exists()
    reader = Reader(url)
    try:
        assert reader.read(reads.silences, now=0.0, ended=True) == []
    finally:
        reader.close()


def test_a_reader_s_database_error_is_one_line(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"not a database" * 100)
    with pytest.raises(StateError, match=r"^cannot read the state database [^\n]*$"):
        read(f"sqlite:///{path}", reads.checks)
