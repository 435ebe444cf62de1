"""Read-only access to the state database for the operator commands.

SQLAlchemy is imported only here, only when a command needs the database; without it the
caller gets :class:`sinks.MissingDependency` naming the extra to install. A SQLite file that
does not exist yet (no sink has run) reads as empty, and is not created.
"""

from __future__ import annotations

import logging

from sinks import state_db

log = logging.getLogger(__name__)


class StateError(Exception):
    """The state database could not be read; ``str()`` is one line."""


def read(url: str, what: str, **kwargs) -> list[dict]:
    """Rows from ``sinks.db.read_<what>`` (``agents`` or ``alerts``) at ``url``."""
    db = state_db()
    if not db.exists(url):
        return []
    from sqlalchemy.exc import SQLAlchemyError
    eng = db.engine(url, writer=False)
    try:
        with eng.connect() as conn:
            return getattr(db, f"read_{what}")(conn, **kwargs)
    except SQLAlchemyError as e:
        raise StateError(f"cannot read the state database {url}: "
                         f"{e.__class__.__name__}: {str(e).splitlines()[0]}") from None
    finally:
        eng.dispose()
