"""A state database as a newer fleetwatch release left it (a revision this release does not
know, and the release that made it in ``state_releases``): for the tests of a writer
leaving it as it is and of ``fleetwatch state migrate`` refusing to go down."""

from __future__ import annotations


def as_newer(eng, revision: str, release: str) -> None:
    """Move the database of ``eng`` (at this release's revision) to ``revision``, made by
    ``release``."""
    from sqlalchemy import text
    with eng.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
        conn.execute(text("INSERT INTO state_releases (revision, version, migrated) "
                          "VALUES (:r, :v, 1.0)"), {"r": revision, "v": release})
