"""A worker for the test of several sinks creating their tables in one new SQLite file at
once: it is started by ``spawn`` (a fresh interpreter), as forking the test process, which
runs threads of its own (Spark's, servers'), can leave a child stuck on a lock one of them
held."""

from __future__ import annotations

import sys


def create_each_at_once(urls: list[str], owner: str, start) -> None:
    """For each of ``urls`` in turn: wait at the barrier ``start`` with the other workers,
    then create ``owner``'s tables there; an error names the attempt and ends the worker."""
    from fleetwatch.store import db
    for attempt, url in enumerate(urls):
        start.wait(30)
        eng = db.engine(url)
        try:
            db.create(eng, owner)
        except Exception:
            print(f"attempt {attempt}: {owner} could not create its tables", file=sys.stderr)
            raise
        finally:
            eng.dispose()
