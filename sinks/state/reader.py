"""Read-only access to the state database for the operator commands and the scheduler.

SQLAlchemy is imported only here, only when a command needs the database; without it the
caller gets :class:`sinks.MissingDependency` naming the extra to install. A SQLite file that
does not exist yet (no sink has run) reads as empty, and is not created; so does a database
whose tables the sinks have not created yet. Any database error is a :class:`StateError`
whose text is one line (and says nothing of the URL's password).

:func:`read` opens and closes an engine per call (a command reads once); a long-lived
reader (the scheduler, polling the registry) keeps a :class:`Reader` and its connection pool.
"""

from __future__ import annotations

import logging

from sinks.state import state_db

log = logging.getLogger(__name__)


class StateError(Exception):
    """The state database could not be read; ``str()`` is one line."""


def safe_url(url: str) -> str:
    """``url`` with its password masked, for messages."""
    try:
        from sqlalchemy.engine import make_url
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # an unparsable URL is shown as it is: it holds no usable password
        return url


class Reader:
    """Reads ``sinks.state.db.read_<what>`` (``agents``, ``alerts``, ``plugins``...) at ``url``."""

    def __init__(self, url: str):
        self.url = url
        self.db = state_db()
        self._engine = None

    def read(self, what: str, **kwargs) -> list[dict]:
        db = self.db
        from sqlalchemy.exc import SQLAlchemyError
        try:
            if not db.exists(self.url):
                return []
            if self._engine is None:
                self._engine = db.engine(self.url, writer=False)
            with self._engine.connect() as conn:
                return getattr(db, f"read_{what}")(conn, **kwargs)
        except (SQLAlchemyError, ImportError) as e:
            # ImportError: the URL names a driver that is not installed (psycopg)
            raise StateError(f"cannot read the state database {safe_url(self.url)}: "
                             f"{e.__class__.__name__}: "
                             f"{(str(e).splitlines() or [''])[0]}") from None

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


def read(url: str, what: str, **kwargs) -> list[dict]:
    """Rows from ``sinks.state.db.read_<what>`` at ``url``, with an engine for this call only."""
    reader = Reader(url)
    try:
        return reader.read(what, **kwargs)
    finally:
        reader.close()
