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

from fleetwatch import __version__

# Alembic's INFO lines (its plugins set up, "non-transactional DDL" on SQLite, where the
# migration runs in the caller's BEGIN IMMEDIATE all the same) tell an operator nothing:
# :func:`fleetwatch.store.db.create` logs the migration in one line.
logging.getLogger("alembic").setLevel(logging.WARNING)

#: the newest revision in ``versions/``
HEAD = "0009"

#: revision -> the fleetwatch release that introduced it (docs/operating/upgrading.md): a new
#: revision is added here with the release it will ship in (``__version__`` once bumped;
#: tests/unit/fleetwatch/store/test_state_releases.py checks the table against ``versions/``).
#: 0.9.0 is the last tree before 1.0.0 (CHANGELOG.md).
RELEASES = {
    "0001": "0.9.0", "0002": "0.9.0", "0003": "0.9.0", "0004": "0.9.0", "0005": "0.9.0",
    "0006": "0.9.0", "0007": "0.9.0", "0008": "0.9.0",
    "0009": "1.0.0",
}

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


def release_of(conn: Connection, revision: str) -> str | None:
    """The fleetwatch release that made ``revision``: this release's table
    (:data:`RELEASES`), else the database's word (``state_releases``, written by the
    release that migrated it: a newer one's revision), else None (unknown)."""
    if revision in RELEASES:
        return RELEASES[revision]
    if not inspect(conn).has_table("state_releases"):
        return None
    return conn.execute(text("SELECT version FROM state_releases WHERE revision = :r"),
                        {"r": revision}).scalar()


def newer(conn: Connection, revision: str) -> str:
    """The line that says the database is at ``revision``, newer than this release knows:
    ``state database at revision 0010 (fleetwatch 1.1.0), newer than this fleetwatch
    1.0.0 knows (its newest: 0009)``."""
    made = release_of(conn, revision)
    return (f"state database at revision {revision} ("
            + (f"fleetwatch {made}" if made else "a newer fleetwatch")
            + f"), newer than this fleetwatch {__version__} knows (its newest: {HEAD})")


#: what :func:`describe` says of a database: no revision yet (new, or made before the
#: migrations), behind this release, at its newest revision, newer than it knows
NONE, BEHIND, CURRENT, NEWER = "none", "behind", "current", "newer"


def describe(conn: Connection) -> dict:
    """The database's ``revision`` and the release that made it (``version``), this
    release's newest revision (``head``) and version (``release``), and ``state``: one of
    :data:`NONE`, :data:`BEHIND`, :data:`CURRENT`, :data:`NEWER`."""
    found = current(conn)
    state = NONE if found is None else CURRENT if found == HEAD else \
        BEHIND if found in RELEASES else NEWER
    return {"revision": found, "version": release_of(conn, found) if found else None,
            "head": HEAD, "release": __version__, "state": state}


def record(conn: Connection, now: float) -> None:
    """Say in ``state_releases`` that this release brought the database to :data:`HEAD`
    (after :func:`upgrade`, in its transaction)."""
    conn.execute(text("DELETE FROM state_releases WHERE revision = :r"), {"r": HEAD})
    conn.execute(text("INSERT INTO state_releases (revision, version, migrated) "
                      "VALUES (:r, :v, :t)"), {"r": HEAD, "v": __version__, "t": now})


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
