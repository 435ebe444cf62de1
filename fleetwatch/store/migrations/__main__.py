"""Write a new revision of the state database: ``python -m fleetwatch.store.migrations revision
-m "checks: add the column x"``.

Alembic's autogenerate compares :mod:`fleetwatch.store.schema` with a scratch SQLite database
brought to :data:`~fleetwatch.store.migrations.HEAD`, writes ``versions/NNNN_<message>.py`` with
the operations it found (read and complete it: docs/development/state-database.md), and
:data:`~fleetwatch.store.migrations.HEAD` is moved to it.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

from fleetwatch.store import migrations


def revision(message: str) -> Path:
    from alembic import command
    from sqlalchemy import create_engine
    rev_id = f"{int(migrations.HEAD) + 1:04d}"
    with tempfile.TemporaryDirectory() as scratch:
        eng = create_engine(f"sqlite:///{Path(scratch) / 'head.db'}")
        try:
            with eng.begin() as conn:
                migrations.upgrade(conn)
                script = command.revision(migrations.config(connection=conn), message,
                                          autogenerate=True, rev_id=rev_id)
        finally:
            eng.dispose()
    init = migrations.HERE / "__init__.py"
    init.write_text(re.sub(r'^HEAD = "\d+"$', f'HEAD = "{rev_id}"', init.read_text(),
                           count=1, flags=re.M))
    return Path(script.path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m fleetwatch.store.migrations",
                                 description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    new = sub.add_parser("revision", help="write a revision from the schema's changes")
    new.add_argument("-m", "--message", required=True, help="what the revision changes")
    args = ap.parse_args(argv)
    path = revision(args.message)
    print(f"{path}: written, HEAD moved to it; read it and complete it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
