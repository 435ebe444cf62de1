"""The SQL side of alert evaluation: state rows locked, read and saved; silences; lookups.

Two alerting sinks share ``check_state`` and ``host_state`` (PUSH spreads results and
heartbeats between them), so a transition must be decided by one of them only. Every
evaluation reads its rows with :func:`lock_checks` / :func:`lock_hosts` inside the write
transaction: on PostgreSQL ``SELECT ... FOR UPDATE`` (a missing row is first inserted with
``ON CONFLICT DO NOTHING``, so there is always a row to lock, and the second sink waits for
the first's commit), on SQLite the sinks' writer engine begins every transaction with
``BEGIN IMMEDIATE`` (:func:`sinks.state.db.engine`), so whole transactions take turns. Rows are
locked in key order, checks before hosts, so two sinks cannot deadlock on them.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterable

from sqlalchemy import JSON, bindparam, select, text, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.sql.elements import TextClause

from sinks.state import db, schema
from sinks.state.driver import Prepared
from sinks.alerting.checks import CheckState
from sinks.alerting.hosts import HostState
from sinks.alerting.silences import Silence

CheckKey = tuple[str, str]      # (uuid, plugin)
HostKey = tuple[str, str]       # (uuid, name); name "" is the agent itself

_CHECK_FIELDS = ("status", "hard", "attempt", "hard_status", "since", "last_change",
                 "last_result", "history", "percent", "flapping", "notified", "last_notified",
                 "flap_notified", "unreachable", "received", "boot", "seq")
_HOST_FIELDS = ("up", "last_heard", "interval", "since", "routers", "notified", "unreachable",
                "gone", "deregistered")
#: keys remembered as having a row, per sink, at most
KNOWN_MAX = 1_000_000
#: seconds a uuid without a hostname is remembered as such (its HELLO may be on its way
#: to the registry: a child's parents are found by its hostname)
UNKNOWN_TTL = 2.0


# Statements on the hot path are built once: SQLAlchemy caches their compiled form, but
# building a statement object costs more than running it on SQLite.

@functools.lru_cache(maxsize=8)
def _lock_select(name: str, a: str, b: str, for_update: bool):
    """Rows by (a, b) keys in key order; ``FOR UPDATE`` on PostgreSQL (SQLite's writers
    already hold the database: BEGIN IMMEDIATE)."""
    t = schema.metadata.tables[name]
    stmt = select(t).where(tuple_(t.c[a], t.c[b]).in_(bindparam("keys", expanding=True))) \
        .order_by(t.c[a], t.c[b])
    return stmt.with_for_update() if for_update else stmt


@functools.lru_cache(maxsize=8)
def _update_by_key(name: str, a: str, b: str):
    t = schema.metadata.tables[name]
    return update(t).where(t.c[a] == bindparam(f"k_{a}"), t.c[b] == bindparam(f"k_{b}"))


@functools.lru_cache(maxsize=1)
def _active_silences() -> Prepared:
    """Read in every transaction that raises an alert: on the driver's cursor
    (:mod:`sinks.state.driver`)."""
    t = schema.silences
    return Prepared(select(t).where(t.c.until > bindparam("now"),
                                    t.c.created <= bindparam("now"), t.c.removed.is_(None)))


@functools.lru_cache(maxsize=1)
def _due_hosts():
    t = schema.host_state
    # least recently looked at first: hosts held (behind a parent not decided, or
    # UNREACHABLE) are looked at again each tick, and must not keep the others waiting
    late = select(t.c.uuid, t.c.name).where(t.c.up.is_(True), t.c.deadline < bindparam("now"),
                                            t.c.last_heard > 0) \
        .order_by(t.c.updated).limit(bindparam("limit"))
    owed = select(t.c.uuid, t.c.name).where(t.c.pending.is_(True)) \
        .order_by(t.c.updated).limit(bindparam("limit"))
    return late, owed


def _ensure(conn: Connection, table, rows: list[dict]) -> None:
    """Insert the rows whose key is missing (placeholders, so that there is a row to lock)."""
    if not rows:
        return
    if conn.dialect.name in ("sqlite", "postgresql"):
        conn.execute(_insert_missing(table.name), rows)
        return
    for row in rows:
        db.upsert(conn, table, row, update=())


@functools.lru_cache(maxsize=8)
def _insert_missing(name: str) -> TextClause:
    """``INSERT ... ON CONFLICT DO NOTHING``, built once (see
    :func:`sinks.state.db._insert_returning`: the dialect construct is compiled again on
    every execution)."""
    table = schema.metadata.tables[name]
    cols = [c.name for c in table.columns]
    quoted = ", ".join(f'"{c}"' for c in cols)      # ("interval" is a keyword in SQL)
    values = ", ".join(f":{c}" for c in cols)
    stmt = text(f"INSERT INTO {name} ({quoted}) VALUES ({values}) ON CONFLICT DO NOTHING")
    return stmt.bindparams(*(bindparam(c.name, type_=JSON) for c in table.columns
                             if isinstance(c.type, JSON)))


def _lock(conn: Connection, table, names: tuple[str, str], keys: Iterable[tuple[str, str]],
          placeholder, known: set | None) -> dict:
    """The rows of ``keys`` (a row made for each missing key), locked, by key.

    ``known`` holds keys this sink has seen rows for: their placeholder insert is skipped
    (rows are never deleted; if one was, it is made again below).
    """
    keys = sorted(set(keys))
    if not keys:
        return {}
    _ensure(conn, table, [placeholder(k) for k in keys if known is None or k not in known])
    a, b = names
    stmt = _lock_select(table.name, a, b, conn.dialect.name == "postgresql")

    def read(some):
        return {(r._mapping[a], r._mapping[b]): r
                for r in conn.execute(stmt, {"keys": list(some)})}
    found = read(keys)
    missing = [k for k in keys if k not in found]
    if missing:
        _ensure(conn, table, [placeholder(k) for k in missing])
        found.update(read(missing))
    if known is not None:
        if len(known) > KNOWN_MAX:
            known.clear()
        known.update(keys)
    return found


# ---------------------------------------------------------------- checks

def lock_checks(conn: Connection, keys: Iterable[CheckKey], now: float,
                known: set | None = None) -> dict[CheckKey, CheckState]:
    """The state of each check, locked for this transaction (the initial state if new)."""
    blank = CheckState()
    fields = {f: getattr(blank, f) for f in _CHECK_FIELDS}
    rows = _lock(conn, schema.check_state, ("uuid", "plugin"), keys,
                 lambda k: {"uuid": k[0], "plugin": k[1], "max_attempts": 0, "updated": now,
                            **fields}, known)
    return {k: CheckState(**{f: getattr(r, f) for f in _CHECK_FIELDS}) for k, r in rows.items()}


def save_checks(conn: Connection, states: dict[CheckKey, tuple[CheckState, int]],
                now: float) -> None:
    """Write back ``(state, max_attempts)`` per check."""
    if not states:
        return
    conn.execute(_update_by_key("check_state", "uuid", "plugin"),
                 [{"k_uuid": u, "k_plugin": p, "max_attempts": attempts, "updated": now,
                   **{f: getattr(state, f) for f in _CHECK_FIELDS}}
                  for (u, p), (state, attempts) in sorted(states.items())])


def latest_outputs(conn: Connection, keys: list[CheckKey]) -> dict[CheckKey, tuple[str, str]]:
    """(output, long_output) of each check's latest result (``checks``)."""
    t = schema.checks
    return {(r.uuid, r.plugin): (r.output, r.long_output) for r in conn.execute(
        select(t.c.uuid, t.c.plugin, t.c.output, t.c.long_output)
        .where(tuple_(t.c.uuid, t.c.plugin).in_(keys)))}


# ---------------------------------------------------------------- hosts

def lock_hosts(conn: Connection, keys: Iterable[HostKey], now: float,
               known: set | None = None) -> dict[HostKey, HostState | None]:
    """The state of each host, locked; None for a host never heard before (nor GONE)."""
    rows = _lock(conn, schema.host_state, ("uuid", "name"), keys,
                 lambda k: {"uuid": k[0], "name": k[1], "up": True, "last_heard": 0.0,
                            "interval": None, "deadline": 0.0, "since": now, "routers": {},
                            "notified": False, "pending": False, "updated": now,
                            "unreachable": None, "gone": None, "deregistered": None,
                            "clock_skew": None}, known)
    return {k: None if not r.last_heard and r.gone is None else HostState(
        up=r.up, last_heard=r.last_heard, interval=r.interval, since=r.since,
        routers=dict(r.routers or {}), notified=r.notified, unreachable=r.unreachable,
        gone=r.gone, deregistered=r.deregistered)
        for k, r in rows.items()}


def save_hosts(conn: Connection, states: dict[HostKey, tuple[HostState, float]],
               now: float) -> None:
    """Write back ``(state, deadline)`` per host."""
    if not states:
        return
    conn.execute(_update_by_key("host_state", "uuid", "name"),
                 [{"k_uuid": u, "k_name": n, "deadline": deadline, "pending": state.pending,
                   "updated": now, **{f: getattr(state, f) for f in _HOST_FIELDS}}
                  for (u, n), (state, deadline) in sorted(states.items())])


def keys_of(conn: Connection, table, uuids: list[str]) -> list[tuple[str, str]]:
    """The keys of the rows of ``uuids`` in ``check_state`` or ``host_state``."""
    a, b = [c.name for c in table.primary_key.columns]
    return sorted((r[0], r[1]) for r in conn.execute(
        select(table.c[a], table.c[b]).where(table.c[a].in_(uuids))))


def due_hosts(conn: Connection, now: float, limit: int = 1000) -> list[HostKey]:
    """Hosts past their deadline while UP, and hosts owed an alert (held by a silence)."""
    late, owed = _due_hosts()
    keys = {(r.uuid, r.name) for r in conn.execute(late, {"now": now, "limit": limit})}
    keys.update((r.uuid, r.name) for r in conn.execute(owed, {"limit": limit}))
    return sorted(keys)


# ---------------------------------------------------------------- silences

def _silence(r) -> Silence:
    return Silence(r.id, r.host, r.check_name, r.created, r.until, r.reason, r.created_by)


def active_silences(conn: Connection, now: float) -> list[Silence]:
    return [_silence(r) for r in _active_silences().execute(conn, {"now": now})]


def add_silence(conn: Connection, host: str, check: str | None, created: float, until: float,
                reason: str, created_by: str) -> int:
    result = conn.execute(schema.silences.insert().values(
        host=host, check_name=check, created=created, until=until, reason=reason,
        created_by=created_by[:255]))
    return int(result.inserted_primary_key[0])


def end_silence(conn: Connection, silence_id: int, now: float) -> bool:
    """End a silence now; False if there is no such silence still running."""
    t = schema.silences
    result = conn.execute(update(t).where(t.c.id == silence_id, t.c.removed.is_(None),
                                          t.c.until > now).values(removed=now, until=now))
    return bool(result.rowcount)


def record_muted(conn: Connection, table, by: dict, event: dict) -> None:
    """Record that a silence (``suppressed``, ``by`` {"silence_id": ID}) or a downtime
    (``downtime_suppressed``, {"downtime_id": ID}) kept ``event`` back: once per silence or
    downtime, key, action and severity."""
    db.upsert(conn, table, {
        **by, "key": str(event["key"])[:512], "action": event["action"],
        "severity": event["severity"], "kind": event["kind"], "uuid": event.get("uuid"),
        "hostname": (event.get("hostname") or "")[:255] or None,
        "check_name": (event.get("check") or "")[:255] or None,
        "summary": event.get("summary") or "", "created": event["created"]}, update=())


def record_suppressed(conn: Connection, silence: Silence, event: dict) -> None:
    """Record that ``silence`` muted ``event``."""
    record_muted(conn, schema.suppressed, {"silence_id": silence.id}, event)


# ---------------------------------------------------------------- lookups (tables of others)

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
