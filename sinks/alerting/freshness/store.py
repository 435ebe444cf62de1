"""The freshness rule at work in the alerting sink: results heard, stale checks judged.

Two calls from the sink, each inside a transaction it runs
(:class:`sinks.alerting.port.Port`):

- :func:`heard`, from the results' evaluation: each (uuid, plugin) that got a result is
  heard now (the sink's clock), and stale no more (``check_freshness``), under the
  ``check_state`` locks that evaluation holds.
- :func:`look`, from the sink's tick: every scheduled check (a plugin declared with an
  ``interval``, ``plugins``, read again when it changed: :class:`Scheduled`) that may be
  due is judged by :func:`sinks.alerting.freshness.rules.due` against its ``check_freshness``
  row and its agent's ``host_state``; those due (a :class:`Look`) are locked like any
  result's by the sink's evaluation, judged again on what is read under the lock
  (:meth:`Look.again`: another sink may have just done it), and given an UNKNOWN result
  "stale: no result for N s" through the check state machine: SOFT, then HARD, one alert
  across every alerting sink (an acknowledgement holds its alerts back as it does a real
  result's, :func:`sinks.alerting.holds.held_back`). The stale result does not move the check's
  order key (``last_result``), so any real result that comes later is applied and recovers
  it.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, exists, func, select, text, tuple_

from sinks.alerting.downtimes import store as downtimestore
from sinks.alerting.freshness import rules as freshness
from fleetwatch.store import db, schema

if TYPE_CHECKING:
    from sinks.alerting.port import Port

Key = tuple[str, str]
#: stale checks judged per tick, at most (the rest at the next tick)
LIMIT = 1000


@functools.lru_cache(maxsize=1)
def _heard_stmt():
    """Heard now: an upsert built once (a textual statement: this is on the results' path,
    where a dialect ``on_conflict`` construct would be compiled again at each batch)."""
    return text("INSERT INTO check_freshness (uuid, plugin, heard, stale_at, updated) "
                "VALUES (:uuid, :plugin, :now, NULL, :now) ON CONFLICT (uuid, plugin) DO "
                "UPDATE SET heard = excluded.heard, stale_at = NULL, updated = excluded.updated")


def heard(conn, keys, now: float) -> None:
    """Each check of ``keys`` got a result at ``now``: not stale, its silence starts again."""
    rows = [{"uuid": u, "plugin": p, "now": now} for u, p in sorted(set(keys))]
    if rows:                            # (the sink made its tables at its start)
        conn.execute(_heard_stmt(), rows)


def _positive(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def declared(conn) -> dict[Key, freshness.Watch]:
    """Every scheduled check (declared with a positive ``interval``, ``plugins``) of an
    agent that is not GONE (:mod:`sinks.alerting.hosts.rules`: it expects nothing of it); a plugin
    declared by several sources of one agent is one check (the first source's spec, the
    latest declaration)."""
    if not db.has_tables(conn, "plugins"):
        return {}
    t, h = schema.plugins, schema.host_state
    watches: dict[Key, freshness.Watch] = {}
    gone = exists().where(h.c.uuid == t.c.uuid, h.c.name == "", h.c.gone.is_not(None))
    rows = conn.execute(select(t.c.uuid, t.c.name, t.c.spec, t.c.declared_at).where(~gone)
                        .order_by(t.c.uuid, t.c.name, t.c.source))
    for r in rows:
        spec = r.spec if isinstance(r.spec, dict) else {}
        interval = _positive(spec.get("interval"))
        if interval is None:
            continue                    # on demand only: nothing to expect
        key = (r.uuid, r.name)
        old = watches.get(key)
        if old is not None:
            watches[key] = replace(old, declared=max(old.declared, r.declared_at))
            continue
        watches[key] = freshness.Watch(interval, _positive(spec.get("timeout")),
                                       _positive(spec.get("freshness")), r.declared_at)
    return watches


class Scheduled:
    """The scheduled checks, read again when ``plugins`` changed (its row count or latest
    declaration), and every ``ttl`` seconds all the same: reading and decoding every spec
    at each tick would cost more than a tick (about 1 s for 100,000 checks on SQLite). At
    each reading a check without a ``check_freshness`` row gets one (never heard), so that
    each tick reads only the rows that may be due."""

    def __init__(self, ttl: float = 60.0, clock=time.monotonic):
        self.ttl, self.clock = ttl, clock
        self.watches: dict[Key, freshness.Watch] = {}
        self.shortest = math.inf            # the smallest threshold of them all
        self._next: float | None = None
        self._mark = None

    def _changed(self, conn) -> bool:
        if self._mark is None and not db.has_tables(conn, "plugins"):
            return False
        t = schema.plugins
        mark = tuple(conn.execute(select(func.count(), func.max(t.c.declared_at))).one())
        changed, self._mark = mark != self._mark, mark
        return changed

    def get(self, conn, now: float) -> dict[Key, freshness.Watch]:
        if self._changed(conn) or self._next is None or self.clock() >= self._next:
            self.watches = declared(conn)
            self.shortest = min((w.limit for w in self.watches.values()), default=math.inf)
            f = schema.check_freshness
            have = {(r.uuid, r.plugin) for r in conn.execute(select(f.c.uuid, f.c.plugin))}
            missing = [{"uuid": u, "plugin": p, "now": now}
                       for u, p in sorted(self.watches) if (u, p) not in have]
            if missing:
                conn.execute(_placeholder_stmt(), missing)
            self._next = self.clock() + self.ttl
        return self.watches

    def candidates(self, conn, now: float) -> dict[Key, freshness.Watch]:
        """The checks that may be due at ``now``: stale, never heard, or not heard for the
        smallest threshold; with their ``check_freshness`` row."""
        watches = self.get(conn, now)
        if not watches:
            return {}
        f = schema.check_freshness
        stmt = select(f.c.uuid, f.c.plugin, f.c.heard, f.c.stale_at).where(
            f.c.heard.is_(None) | (f.c.heard < bindparam("cutoff")) | f.c.stale_at.is_not(None))
        cutoff = now - self.shortest if math.isfinite(self.shortest) else now
        out = {}
        for r in conn.execute(stmt, {"cutoff": cutoff}):
            watch = watches.get((r.uuid, r.plugin))
            if watch is not None:
                out[(r.uuid, r.plugin)] = replace(watch, heard=r.heard, stale_at=r.stale_at)
        return out


@functools.lru_cache(maxsize=1)
def _placeholder_stmt():
    return text("INSERT INTO check_freshness (uuid, plugin, heard, stale_at, updated) "
                "VALUES (:uuid, :plugin, NULL, NULL, :now) ON CONFLICT (uuid, plugin) "
                "DO NOTHING")


def _with_rows(conn, watches: dict[Key, freshness.Watch], keys: list[Key]):
    """``watches`` of ``keys`` with their ``check_freshness`` row as it is now."""
    f = schema.check_freshness
    stmt = select(f.c.uuid, f.c.plugin, f.c.heard, f.c.stale_at).where(
        tuple_(f.c.uuid, f.c.plugin).in_(bindparam("keys", expanding=True)))
    found = {(r.uuid, r.plugin): r for r in conn.execute(stmt, {"keys": keys})}
    out = {}
    for key in keys:
        row = found.get(key)
        out[key] = watches[key] if row is None else \
            replace(watches[key], heard=row.heard, stale_at=row.stale_at)
    return out


def hosts(conn, uuids) -> dict[str, freshness.Host]:
    """The agents' own heartbeat state (``host_state`` name ""), for :func:`freshness.held`."""
    uuids = sorted(set(uuids))
    if not uuids or not db.has_tables(conn, "host_state"):
        return {}
    t = schema.host_state
    stmt = select(t.c.uuid, t.c.up, t.c.last_heard).where(t.c.name == "", t.c.last_heard > 0)
    if len(uuids) <= LIMIT:             # (else all of them: no statement of 100,000 values)
        stmt = stmt.where(t.c.uuid.in_(uuids))
    return {r.uuid: freshness.Host(bool(r.up), r.last_heard) for r in conn.execute(stmt)}


@dataclass(frozen=True)
class Look:
    """The tick's stale checks: those due (``due``, judged before their rows are locked),
    their watches, their agents' heartbeat state and the time silence is counted from at
    the earliest (``floor``: when the sink started)."""

    due: list[Key]
    watches: dict[Key, freshness.Watch]
    known: dict[str, freshness.Host]
    floor: float

    def again(self, port: Port) -> dict[Key, freshness.Watch]:
        """Those still due on their ``check_freshness`` rows read again (the caller holds
        their ``check_state`` locks: another sink may have just judged them), in order."""
        watches = _with_rows(port.conn, self.watches, self.due)
        return {k: watches[k] for k in self.due
                if freshness.due(watches[k], port.now, self.known.get(k[0]), self.floor)}

    def mark(self, port: Port, keys: list[Key]) -> None:
        """``keys`` got their stale result now."""
        if keys:
            port.conn.execute(_stale_stmt(), [{"uuid": u, "plugin": p, "now": port.now}
                                              for u, p in keys])
            port.counts["check_stale"] += len(keys)


def look(port: Port, scheduled: Scheduled) -> Look | None:
    """The tick's freshness pass: the scheduled checks due a stale result (None: none);
    the sink's evaluation gives them their UNKNOWN result
    (:meth:`sinks.alerting.evaluation.Evaluation.stale`)."""
    conn, now = port.conn, port.now
    floor = port.started_at or now
    watches = scheduled.candidates(conn, now)
    if not watches:
        return None
    known = hosts(conn, (u for u, _ in watches))
    for uuid in downtimestore.hosts_in_downtime(port, (u for u, _ in watches)):
        known[uuid] = replace(known.get(uuid) or freshness.Host(), downtime=True)
    due = sorted(k for k, w in watches.items()
                 if freshness.due(w, now, known.get(k[0]), floor))[:LIMIT]
    return Look(due, watches, known, floor) if due else None


@functools.lru_cache(maxsize=1)
def _stale_stmt():
    return text("INSERT INTO check_freshness (uuid, plugin, heard, stale_at, updated) "
                "VALUES (:uuid, :plugin, NULL, :now, :now) ON CONFLICT (uuid, plugin) DO "
                "UPDATE SET stale_at = excluded.stale_at, updated = excluded.updated")
