"""Which fleetwatch release made each revision of the state database
(fleetwatch/store/migrations: ``RELEASES``, and ``state_releases`` for a newer release's),
and going down refused: ``fleetwatch state migrate`` on a database newer than this release
knows names its revision and the release that made it, while a writer's start leaves it as
it is with a warning (a rolling upgrade runs sinks of both releases). On SQLite here;
tests/integration/test_state_upgrade.py does both databases."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("sqlalchemy")
pytest.importorskip("alembic")

from alembic.script import ScriptDirectory  # noqa: E402
from sqlalchemy import text  # noqa: E402

from fleetwatch import __version__  # noqa: E402
from fleetwatch.cli import main  # noqa: E402
from fleetwatch.store import db, migrations  # noqa: E402
from query.versions import order  # noqa: E402
from support.staterev import as_newer  # noqa: E402

NEWER = "state database at revision 0999 (fleetwatch 9.1.0), newer than this fleetwatch " \
    f"{__version__} knows (its newest: {migrations.HEAD})"


def test_each_revision_names_the_release_that_introduced_it_in_order():
    script = ScriptDirectory.from_config(migrations.config())
    revisions = [s.revision for s in script.walk_revisions()][::-1]     # oldest first
    assert list(migrations.RELEASES) == revisions
    releases = list(migrations.RELEASES.values())
    assert releases == sorted(releases, key=order, reverse=True)     # never going back
    assert migrations.RELEASES[migrations.HEAD] == __version__ or \
        order(migrations.RELEASES[migrations.HEAD]) > order(__version__)


@pytest.fixture
def url(tmp_path):
    return f"sqlite:///{tmp_path / 'state.db'}"


def newer(url: str) -> None:
    """The database as a release 9.1.0 left it: a revision this one does not know."""
    eng = db.engine(url)
    try:
        db.create(eng, "registry")
        as_newer(eng, "0999", "9.1.0")
    finally:
        eng.dispose()


def test_a_migration_records_the_release_that_made_it(url):
    eng = db.engine(url)
    try:
        assert db.create(eng, "registry", clock=lambda: 5.0) == (None, migrations.HEAD)
        assert db.create(eng, "alerting") == (migrations.HEAD, migrations.HEAD)
        with eng.connect() as conn:
            rows = conn.execute(text("SELECT * FROM state_releases")).all()
            assert migrations.describe(conn) == {
                "revision": migrations.HEAD, "version": __version__, "head": migrations.HEAD,
                "release": __version__, "state": "current"}
        assert [tuple(r) for r in rows] == [(migrations.HEAD, __version__, 5.0)]
    finally:
        eng.dispose()


def test_a_writer_leaves_a_newer_database_as_it_is_naming_the_release(url, caplog):
    newer(url)
    eng = db.engine(url)
    try:
        with caplog.at_level(logging.WARNING, logger="fleetwatch.store.db"):
            assert db.create(eng, "alerting") == ("0999", "0999")
        assert caplog.messages == [f"{NEWER}: left as it is (revisions only add: this "
                                   f"release works on it)"]
        with pytest.raises(db.NewerSchema) as e:
            db.create(eng, "state", refuse_newer=True)
        assert str(e.value) == f"{NEWER}: upgrade fleetwatch; a state database is never " \
            f"downgraded"
    finally:
        eng.dispose()


def test_state_migrate_migrates_and_says_the_revision_and_release(url, capsys):
    assert main(["state", "show", "--url", url]) == 69          # no database yet
    assert "no state database at" in capsys.readouterr().err
    assert main(["state", "migrate", "--url", url]) == 0
    assert capsys.readouterr().out == (f"state database {url}: migrated from no revision to "
                                       f"revision {migrations.HEAD} (fleetwatch "
                                       f"{__version__})\n")
    assert main(["state", "migrate", "--url", url, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "revision": migrations.HEAD, "version": __version__, "head": migrations.HEAD,
        "release": __version__, "state": "current", "url": url, "migrated": False,
        "migrated_from": migrations.HEAD}


def test_state_migrate_from_an_older_revision_names_the_release_that_made_it(url, capsys):
    eng = db.engine(url)
    try:
        with eng.begin() as conn:
            from alembic import command
            command.upgrade(migrations.config(connection=conn), "0005")
    finally:
        eng.dispose()
    assert main(["state", "show", "--url", url]) == 0
    assert capsys.readouterr().out == (
        f"state database {url}: revision 0005 (fleetwatch 0.9.0); this fleetwatch "
        f"{__version__} knows up to {migrations.HEAD}: behind: the first writer or `state "
        f"migrate` migrates it\n")
    assert main(["state", "migrate", "--url", url]) == 0
    assert capsys.readouterr().out == (
        f"state database {url}: migrated from revision 0005 (fleetwatch 0.9.0) to revision "
        f"{migrations.HEAD} (fleetwatch {__version__})\n")


def test_state_migrate_refuses_a_newer_database_and_changes_nothing(url, capsys):
    newer(url)
    assert main(["state", "migrate", "--url", url]) == 1
    assert capsys.readouterr().err == (f"fleetwatch state migrate: {NEWER}: upgrade "
                                       f"fleetwatch; a state database is never downgraded\n")
    assert main(["state", "show", "--url", url, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["revision"], shown["version"], shown["state"]) == ("0999", "9.1.0", "newer")
