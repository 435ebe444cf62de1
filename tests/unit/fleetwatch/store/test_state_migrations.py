"""The state database's Alembic migrations (fleetwatch/store/migrations): one line of revisions
ending at HEAD, a new database migrated to it agreeing with fleetwatch/store/schema.py (so a
schema change without a revision fails here), and the revisions shipped in the wheel.
tests/integration/test_state_upgrade.py migrates databases of every earlier shape, on
SQLite and PostgreSQL."""

from __future__ import annotations

import configparser
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

pytest.importorskip("sqlalchemy")
pytest.importorskip("alembic")

from alembic.autogenerate import compare_metadata  # noqa: E402
from alembic.runtime.migration import MigrationContext  # noqa: E402
from alembic.script import ScriptDirectory  # noqa: E402

from fleetwatch.store import db, migrations, schema  # noqa: E402
from support import ROOT  # noqa: E402


def test_the_revisions_are_one_line_ending_at_head():
    script = ScriptDirectory.from_config(migrations.config())
    assert script.get_heads() == [migrations.HEAD]
    assert [s.revision for s in script.walk_revisions()][-1] == "0001"       # the baseline
    assert migrations.known() == {s.revision for s in script.walk_revisions()}


def test_a_migrated_database_agrees_with_the_schema(tmp_path):
    """A change to fleetwatch/store/schema.py comes with a revision: otherwise autogenerate finds
    the difference here (python -m fleetwatch.store.migrations revision writes it)."""
    eng = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        db.create(eng, "registry")
        with eng.connect() as conn:
            assert migrations.current(conn) == migrations.HEAD
            assert compare_metadata(MigrationContext.configure(conn), schema.metadata) == []
    finally:
        eng.dispose()


def test_a_start_on_a_database_at_head_does_not_import_alembic(tmp_path):
    """A writer's start reads the revision and stops there: Alembic is imported only when
    there is something to migrate (the sinks' start cost)."""
    import subprocess
    url = f"sqlite:///{tmp_path / 'state.db'}"
    eng = db.engine(url)
    db.create(eng, "alerting")
    eng.dispose()
    code = ("import sys\nfrom fleetwatch.store import db\ne = db.engine(sys.argv[1])\n"
            "db.create(e, 'alerting')\nprint(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('alembic', 'mako')))")
    out = subprocess.run([sys.executable, "-c", code, url], capture_output=True, text=True,
                         check=True, cwd=ROOT, timeout=60).stdout
    assert out.strip() == "[]"


def test_the_migrations_ship_in_the_wheel():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "setup.cfg")
    shipped = [p.strip() for p in cfg["options.package_data"]["fleetwatch"].splitlines() if p.strip()]
    folder = Path(migrations.__file__).parent
    files = [p.relative_to(ROOT / "fleetwatch").as_posix() for p in folder.rglob("*")
             if p.is_file() and "__pycache__" not in p.parts and p.parent != folder]
    files += ["store/migrations/script.py.mako"]
    assert [f for f in files if not any(fnmatch(f, pattern) for pattern in shipped)] == []
    for extra in ("sinks", "scheduler", "web", "all"):     # wherever SQLAlchemy is
        assert any(r.strip().startswith("alembic") for r in
                   cfg["options.extras_require"][extra].splitlines()), extra


def test_without_alembic_a_writer_names_the_extra_to_install(tmp_path, monkeypatch):
    from fleetwatch.optional import MissingDependency
    monkeypatch.setitem(sys.modules, "alembic.command", None)
    eng = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    try:
        with pytest.raises(MissingDependency, match=r"fleetwatch\[sinks\]"):
            db.create(eng, "registry")
    finally:
        eng.dispose()
