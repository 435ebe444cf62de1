"""What the alerting sinks read of the registry's tables: hostnames, ephemeral agents, and
each plugin's declared ``max_check_attempts``, cached per sink.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from sqlalchemy import select, tuple_
from sqlalchemy.engine import Connection

from fleetwatch.store import db, schema

CheckKey = tuple[str, str]      # (uuid, plugin)
#: seconds a uuid without a hostname is remembered as such (its HELLO may be on its way
#: to the registry: a child's parents are found by its hostname)
UNKNOWN_TTL = 2.0


class Lookups:
    """Hostnames and ephemeral agents (``agents``) and declared ``max_check_attempts``
    (``plugins``), all
    written by the registry sink: read when needed and cached for ``ttl`` seconds."""

    def __init__(self, ttl: float = 60.0, clock=time.monotonic, size: int = 100_000):
        self.ttl, self.clock, self.size = ttl, clock, size
        self._hostnames: dict[str, tuple[float, str | None]] = {}
        self._attempts: dict[CheckKey, tuple[float, int | None]] = {}
        self._ephemeral: dict[str, tuple[float, bool]] = {}
        self._tables: set[str] = set()

    def _has(self, conn: Connection, name: str) -> bool:
        if name not in self._tables and db.has_tables(conn, name):
            self._tables.add(name)
        return name in self._tables

    def _fresh(self, cache: dict, keys) -> list:
        now = self.clock()
        return [k for k in keys if k not in cache or cache[k][0] < now]

    def _store(self, cache: dict, key, value, ttl: float | None = None) -> None:
        if len(cache) >= self.size:
            cache.clear()
        cache[key] = (self.clock() + (self.ttl if ttl is None else ttl), value)

    def hostnames(self, conn: Connection, uuids: Iterable[str]) -> dict[str, str | None]:
        uuids = sorted(set(uuids))
        missing = self._fresh(self._hostnames, uuids)
        if missing:
            found = {}
            if self._has(conn, "agents"):
                t = schema.agents
                found = dict(conn.execute(select(t.c.uuid, t.c.hostname)
                                          .where(t.c.uuid.in_(missing))).all())
            for u in missing:       # not known yet: its HELLO may be on its way
                self._store(self._hostnames, u, found.get(u),
                            None if found.get(u) else min(self.ttl, UNKNOWN_TTL))
        return {u: self._hostnames.get(u, (0, None))[1] for u in uuids}

    def ephemeral(self, conn: Connection, uuids: Iterable[str]) -> set[str]:
        """Those of ``uuids`` whose agent said ``ephemeral: true`` (``agents.ephemeral``)."""
        uuids = sorted(set(uuids))
        missing = self._fresh(self._ephemeral, uuids)
        if missing:
            found = set()
            if self._has(conn, "agents"):
                t = schema.agents
                found = set(conn.execute(select(t.c.uuid).where(
                    t.c.uuid.in_(missing), t.c.ephemeral.is_(True))).scalars())
            for u in missing:
                self._store(self._ephemeral, u, u in found)
        return {u for u in uuids if self._ephemeral.get(u, (0, False))[1]}

    def max_attempts(self, conn: Connection,
                     keys: Iterable[CheckKey]) -> dict[CheckKey, int | None]:
        keys = sorted(set(keys))
        missing = self._fresh(self._attempts, keys)
        if missing:
            found: dict[CheckKey, int] = {}
            t = schema.plugins
            rows = conn.execute(select(t.c.uuid, t.c.name, t.c.spec).where(
                tuple_(t.c.uuid, t.c.name).in_(missing)).order_by(t.c.source)) \
                if self._has(conn, "plugins") else []
            for r in rows:
                value = r.spec.get("max_check_attempts") if isinstance(r.spec, dict) else None
                if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100:
                    found.setdefault((r.uuid, r.name), value)
            for k in missing:
                self._store(self._attempts, k, found.get(k))
        return {k: self._attempts.get(k, (0, None))[1] for k in keys}
