"""The state database as the actions use it: one transaction per change, reads through a
:class:`fleetwatch.store.reader.Reader`, and one error for a database that cannot be used.

A change (an acknowledgement, a downtime, a silence, an agent forgotten) is
``change(conn)`` in a transaction of its own (:func:`write`), with the caller's record of it
in the same one (the console's audit row: both kept, or neither); checks that may refuse
it (a host never seen: :func:`query.known.refuse_unknown`) read before it, without the
write lock. Whatever goes wrong with the database itself is :class:`Unavailable`, one line
naming it (its password never: :func:`fleetwatch.store.reader.safe_url`): the commands exit 69,
the console answers 503.
"""

from __future__ import annotations

from contextlib import contextmanager


class Unavailable(Exception):
    """The state database cannot be written or read: one line on stderr, exit status 69."""


def writer(url: str, owner: str = "silences"):
    """A writing engine on the state database, ``owner``'s tables (the ``silences`` table)
    created if missing."""
    from fleetwatch.optional import MissingDependency
    from fleetwatch.store import state_db
    try:
        db = state_db()
    except MissingDependency as e:
        raise Unavailable(str(e)) from None
    from fleetwatch.store.reader import safe_url
    if not db.exists(url):
        raise Unavailable(f"no state database at {safe_url(url)} (has no sink run yet?)")
    try:
        eng = db.engine(url)
        db.create(eng, owner)
    except (db.SchemaError, ImportError) as e:
        raise Unavailable(f"cannot use the state database {safe_url(url)}: "
                          f"{(str(e).splitlines() or [''])[0]}") from None
    return eng


def database_error(url: str, e: Exception) -> Unavailable:
    from fleetwatch.store.reader import safe_url
    return Unavailable(f"cannot use the state database {safe_url(url)}: "
                       f"{e.__class__.__name__}: {(str(e).splitlines() or [''])[0]}")


def write(url: str, change, owner: str = "silences", also=None, first=None):
    """``change(conn)`` in one transaction on the state database (``owner``'s tables made if
    missing), and ``also(conn, its answer)`` in the same one (the console's record of it:
    both kept, or neither); its answer. A database error is :class:`Unavailable`.

    ``first(conn)``: reads that may refuse the change (:func:`query.known.refuse_unknown`),
    run before it in a transaction of their own that takes no write lock: a glob read
    every host's names (0.3 s at 10,000 hosts), which under the lock would hold every
    sink's writes back as long."""
    from sqlalchemy.exc import SQLAlchemyError
    eng = writer(url, owner)
    try:
        if first is not None:
            from fleetwatch.store import db
            reader = db.engine(url, writer=False)
            try:
                with reader.connect() as conn:
                    first(conn)
            finally:
                reader.dispose()
        with eng.begin() as conn:
            done = change(conn)
            if also is not None:
                also(conn, done)
            return done
    except SQLAlchemyError as e:
        raise database_error(url, e) from None
    finally:
        eng.dispose()


@contextmanager
def reading(url: str, reader=None):
    """(a :class:`~fleetwatch.store.reader.Reader`, the state reads) for the block: ``reader``
    (the console's, over its engine) or one of its own on ``url``, closed after;
    :class:`Unavailable` when the database cannot be read."""
    from fleetwatch.optional import MissingDependency
    from fleetwatch.store import state_reads
    from fleetwatch.store.reader import Reader, StateError
    try:
        reads = state_reads()
        reader = reader or Reader(url)
        try:
            yield reader, reads
        finally:
            reader.close()
    except (MissingDependency, StateError) as e:
        raise Unavailable(str(e)) from None
