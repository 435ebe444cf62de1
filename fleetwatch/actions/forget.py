"""Forget an agent that is gone for good: every row of its uuid leaves the state database.

What an agent that deregisters or an ephemeral one gone silent gets from the alerting sinks
after ``alerting.forget_after`` (docs/operating/dynamic-fleets.md), done by hand now: the
registry's rows (``agents``, ``agent_routers``, ``plugins``) and the alerting sinks' (its
checks' results, states and freshness, its heartbeat state, its open problems) go in one
transaction (:func:`fleetwatch.store.forget.forget`); its running acknowledgements end.
Notifications and alert events stay (they are what happened). The agent is named by a uuid
the registry or the alerting sinks know, or by a hostname (any case) of exactly one agent of
the registry (:func:`find`; :class:`NotOne` otherwise).
"""

from __future__ import annotations

from fleetwatch.actions.database import Unavailable, write

__all__ = ["NotOne", "Unavailable", "find", "forget"]


class NotOne(Exception):
    """The host names no agent, or several: ``forget`` exits 1."""


def find(conn, host: str) -> tuple[str, str | None, float | None]:
    """(uuid, hostname, last heard) of the one agent ``host`` names: a uuid the registry or
    the alerting sinks know, else a hostname of the registry (deregistered agents too)."""
    from sqlalchemy import func, select
    from fleetwatch.store import schema
    from fleetwatch.store.db import has_tables
    a, h = schema.agents, schema.host_state
    names: dict[str, str | None] = {}
    if has_tables(conn, "agents"):
        names = dict(conn.execute(select(a.c.uuid, a.c.hostname).where(
            (a.c.uuid == host) | (func.lower(a.c.hostname) == host.lower()))).all())
    heard: dict[str, float] = {}
    if has_tables(conn, "host_state"):
        heard = dict(conn.execute(select(h.c.uuid, h.c.last_heard).where(h.c.name == "", (
            h.c.uuid == host) | h.c.uuid.in_(sorted(names)))).all())
    if host in names or host in heard:
        return host, names.get(host), heard.get(host) or None
    if not names:
        raise NotOne(f"no agent {host!r} is known (neither a hostname nor a uuid of the "
                     f"registry or the alerting sinks)")
    if len(names) > 1:
        raise NotOne(f"{host!r} names {len(names)} agents ({', '.join(sorted(names))}): "
                     f"forget each by its uuid")
    uuid = next(iter(names))
    return uuid, names[uuid], heard.get(uuid) or None


def forget(state_url: str, host: str, now: float) -> dict:
    """Forget the agent ``host`` names (a hostname or uuid): what ``forget --json`` prints,
    ``uuid``, ``hostname``, ``last_heard`` (epoch seconds or None) and ``removed`` (table ->
    rows); :class:`NotOne`, :class:`Unavailable`."""
    def change(conn):
        from fleetwatch.store.forget import forget as forget_rows
        uuid, hostname, heard = find(conn, host)
        return {"uuid": uuid, "hostname": hostname, "last_heard": heard,
                "removed": forget_rows(conn, [uuid], now)}
    return write(state_url, change, "acks")
