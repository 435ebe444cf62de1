"""The base of the sink types that write the state database (:mod:`fleetwatch.store`):
the registry and alerting sinks. On SQLite, the database's checkpoints run on a thread of
the sink's (:mod:`fleetwatch.store.checkpoint`), not in the commits its ACKs wait for."""

from __future__ import annotations

import contextlib
import time
from collections import Counter

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from fleetwatch.store.checkpoint import FALLBACK_PAGES, Checkpointer
from fleetwatch.store.db import SchemaError, create, engine, sqlite_path
from sinks.base import WriteError


class DatabaseSink:
    """Base of the sink types that write the state database (:class:`sinks.base.Sink`).

    Holds the engine, the injected clock and the sink's counters; brings the database to
    this version's schema at start (:func:`create`) and, on a SQLite file, starts its
    :class:`~fleetwatch.store.checkpoint.Checkpointer`. Subclasses set ``type``,
    ``handles``, ``acks`` and ``write``.
    """

    type = ""

    def __init__(self, engine: Engine, clock=time.time):
        self.engine, self.clock = engine, clock
        self.counts: Counter = Counter()
        self._held: Connection | None = None
        self.checkpointer: Checkpointer | None = None

    @classmethod
    def from_config(cls, config, clock=time.time):
        return cls(engine(config.state_url), clock)

    def start(self) -> None:
        path = sqlite_path(self.engine.url)
        if path is not None:
            self.checkpointer = Checkpointer(path, self.counts)
            # before the first connection: every one of this engine's commits leaves the
            # checkpoints to the thread (the deliverer's too)
            event.listen(self.engine, "connect", _checkpoints_elsewhere)
        try:
            create(self.engine, self.type)
        except SchemaError as e:
            raise WriteError(str(e)) from e
        if self.checkpointer is not None:
            self.checkpointer.start()

    @contextlib.contextmanager
    def transaction(self):
        """A transaction on the connection this sink holds (its loop's thread only), committed
        when the block ends, rolled back if it raises. Not one taken from the pool and
        given back each time: about 45 us of each of the alerting sink's transactions, one
        per NOTIFY (bench/notify_rtt.py). A connection the database dropped is replaced at
        the next transaction (SQLAlchemy invalidates it, then connects again)."""
        if self._held is None or self._held.closed:
            self._held = self.engine.connect()
        with self._held.begin():
            yield self._held
        if self.checkpointer is not None:
            self.checkpointer.wrote()

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.stop()
            self.checkpointer = None
        if self._held is not None:
            self._held.close()
            self._held = None
        self.engine.dispose()


def _checkpoints_elsewhere(dbapi_conn, _record) -> None:
    dbapi_conn.execute(f"PRAGMA wal_autocheckpoint={FALLBACK_PAGES}")
