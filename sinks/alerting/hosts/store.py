"""The SQL side of a host's state: its ``host_state`` rows locked, read and saved; the
hosts the tick must look at.

An agent's row (name "") and its local processes' (their names) are read with
:func:`lock_hosts` inside the transaction that decides them (:mod:`sinks.alerting.locks`)
and written back with :func:`save_hosts`; :func:`due_hosts` is what the tick's expiry pass
looks at.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from sqlalchemy import bindparam, select
from sqlalchemy.engine import Connection

from sinks.alerting.hosts.rules import HostState
from sinks.alerting.locks import lock, update_by_key
from fleetwatch.store import schema

HostKey = tuple[str, str]       # (uuid, name); name "" is the agent itself

#: the columns of ``host_state`` that are a :class:`HostState`'s fields
FIELDS = ("up", "last_heard", "interval", "since", "routers", "notified", "unreachable",
          "gone", "deregistered")


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


def lock_hosts(conn: Connection, keys: Iterable[HostKey], now: float,
               known: set | None = None) -> dict[HostKey, HostState | None]:
    """The state of each host, locked; None for a host never heard before (nor GONE)."""
    rows = lock(conn, schema.host_state, ("uuid", "name"), keys,
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
    conn.execute(update_by_key("host_state", "uuid", "name"),
                 [{"k_uuid": u, "k_name": n, "deadline": deadline, "pending": state.pending,
                   "updated": now, **{f: getattr(state, f) for f in FIELDS}}
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

