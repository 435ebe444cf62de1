"""``fleetwatch state show|migrate``: the state database's revision, and its migration.

    fleetwatch state show                   # its revision, the release that made it, this one's
    fleetwatch state migrate                # bring it to this release's revision now
    fleetwatch state migrate --url postgresql://fleetwatch@db/fleetwatch --json

The writers (the sinks, the console, the commands that write) migrate the database as they
start (docs/development/state-database.md); ``state migrate`` does it as a step of an
upgrade (docs/operating/upgrading.md), before any writer of the new release starts, and
says which revision the database is at and which fleetwatch release made it. It refuses a
database at a revision newer than this release knows, naming that revision and the
release that made it: a state database is never downgraded (a writer of the older release
leaves such a database as it is and works on it, with a warning, so that a rolling
upgrade can run sinks of both). ``state show`` reads and changes nothing.

The database is the operator config's ``state_url`` (``--config``), or ``--url``.

Exit status: 0 when the database is (now) at this release's revision, or shown; 1 when
``migrate`` refused a newer one; 2 for a usage error; 69 (EX_UNAVAILABLE) when the database
cannot be used (``show``: none there yet); 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from fleetwatch.cli.operator import OperatorConfig, add_config
from fleetwatch.config import load

VERBS = ("show", "migrate")
#: ``migrate`` refused a database newer than this release
EXIT_NEWER = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, help_ in (
            ("show", "the database's revision, the fleetwatch release that made it, and "
                     "this release's"),
            ("migrate", "bring the database to this release's revision now (refused for "
                        "a newer one: a state database is never downgraded)")):
        sub = verbs.add_parser(verb, help=help_, description=help_)
        sub.add_argument("--url", metavar="URL",
                         help="the database's SQLAlchemy URL (default: the operator "
                              "config's state_url)")
        sub.add_argument("--json", action="store_true", help="print one JSON document")
        add_config(sub)


def run(args) -> int:
    from fleetwatch.optional import MissingDependency
    from fleetwatch.store import state_db
    from fleetwatch.store.reader import safe_url
    url = args.url or load(OperatorConfig, args.config).state_url
    where = safe_url(url)
    try:
        db = state_db()
    except MissingDependency as e:
        return _fail(args, str(e), os.EX_UNAVAILABLE)
    if args.verb == "show" and not db.exists(url):
        return _fail(args, f"no state database at {where} (has no sink run yet?)",
                     os.EX_UNAVAILABLE)
    from sqlalchemy.exc import SQLAlchemyError
    from fleetwatch.store import migrations
    eng = None
    try:
        eng = db.engine(url, writer=args.verb == "migrate")
        before = None
        if args.verb == "migrate":
            before, _ = db.create(eng, "state", refuse_newer=True)
        with eng.connect() as conn:
            found = migrations.describe(conn)
            was = migrations.release_of(conn, before) if before else None
    except db.NewerSchema as e:
        return _fail(args, str(e), EXIT_NEWER)
    except (db.SchemaError, SQLAlchemyError, ImportError, OSError) as e:
        line = (str(e).splitlines() or [""])[0]
        return _fail(args, f"cannot use the state database {where}: {line}",
                     os.EX_UNAVAILABLE)
    finally:
        if eng is not None:
            eng.dispose()
    found["url"] = where
    if args.verb == "migrate":
        found["migrated"], found["migrated_from"] = before != found["revision"], before
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print(describe(found, was))
    return 0


def describe(found: dict, was: str | None = None) -> str:
    """One line of what ``found`` (:func:`fleetwatch.store.migrations.describe`, with
    ``url`` and after ``migrate`` ``migrated`` and ``migrated_from``) says; ``was``: the
    release that made ``migrated_from``."""
    at = f"revision {found['revision']} ({_made(found['version'])})"
    this = f"this fleetwatch {found['release']} knows up to {found['head']}"
    if found.get("migrated"):
        start = found["migrated_from"]
        return (f"state database {found['url']}: migrated from "
                + (f"revision {start} ({_made(was)})" if start else "no revision")
                + f" to {at}")
    if "migrated" in found:
        return f"state database {found['url']}: at {at}, nothing to migrate"
    if found["revision"] is None:
        return (f"state database {found['url']}: no revision yet (new, or made before the "
                f"migrations); {this}: the first writer or `state migrate` migrates it")
    then = {"behind": "behind: the first writer or `state migrate` migrates it",
            "current": "current",
            "newer": "newer: this release's writers leave it as it is and work on it, "
                     "`state migrate` refuses it"}[found["state"]]
    return f"state database {found['url']}: {at}; {this}: {then}"


def _made(version: str | None) -> str:
    return f"fleetwatch {version}" if version else "a fleetwatch of unknown version"


def _fail(args, line: str, code: int) -> int:
    print(f"fleetwatch state {args.verb}: {line}", file=sys.stderr)
    return code
