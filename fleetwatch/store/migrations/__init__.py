"""The state database's migrations (Alembic): one schema version for the whole database.

Every change to :mod:`fleetwatch.store.schema` comes with a revision in ``versions/``
(docs/development/state-database.md says how to write one). The writers (the sinks, and
the commands and console that write their own rows) bring the database to :data:`HEAD` when
they start (:func:`fleetwatch.store.db.create`); readers never migrate. Run programmatically
on the connection the caller holds, inside its transaction: no ``alembic.ini``.

:data:`HEAD` is the newest revision, said here so that a start on a database already there
costs one small read and no import of Alembic (tests/unit/fleetwatch/store/test_state_migrations.py checks
it against ``versions/``).
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path

from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

# Alembic's INFO lines (its plugins set up, "non-transactional DDL" on SQLite, where the
# migration runs in the caller's BEGIN IMMEDIATE all the same) tell an operator nothing:
# :func:`fleetwatch.store.db.create` logs the migration in one line.
logging.getLogger("alembic").setLevel(logging.WARNING)

#: the newest revision in ``versions/``
HEAD = "0008"

#: Alembic's table of the database's revision (one row)
VERSION_TABLE = "alembic_version"

HERE = Path(__file__).resolve().parent


def config(**attributes):
    """Alembic's configuration for these migrations, without an ini file; ``attributes``
    reach ``env.py`` (``connection``: the one to migrate)."""
    cfg = _alembic("config").Config()
    cfg.set_main_option("script_location", str(HERE))
    cfg.attributes.update(attributes)
    return cfg


def current(conn: Connection) -> str | None:
    """The database's revision; None for a database no migration ran on (new, or made by
    a fleetwatch from before the migrations)."""
    if not inspect(conn).has_table(VERSION_TABLE):
        return None
    return conn.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()


@functools.lru_cache(maxsize=1)
def known() -> frozenset[str]:
    """Every revision in ``versions/``."""
    script = _alembic("script").ScriptDirectory.from_config(config())
    return frozenset(s.revision for s in script.walk_revisions())


def upgrade(conn: Connection) -> None:
    """Bring ``conn``'s database to :data:`HEAD`, in the transaction it is in."""
    _alembic("command").upgrade(config(connection=conn), "head")


def _alembic(module: str):
    """``alembic.<module>``; its absence is the ``sinks`` extra's to install."""
    from fleetwatch.optional import optional_import
    return optional_import(f"alembic.{module}", "migrating the state database")
