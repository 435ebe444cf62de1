"""Forgetting an agent: every row the state database keeps of its uuid, removed at once.

Called by the alerting sinks when an agent has been GONE (deregistered, or ephemeral and
silent) for ``alerting.forget_after`` (:func:`sinks.alerting.hosts.departures.forget`), and by
``fleetwatch forget`` by hand. The registry's rows (``agents``, ``agent_routers``,
``plugins``) and the alerting sinks' (its checks' results and states, its heartbeat state,
its open problems) go; what happened stays: notifications, alert events and their outbox,
acknowledgements (ended), silences and downtimes (they name hosts, not uuids). The tables
a database does not have yet are skipped, so this runs before any owner did.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, inspect, update
from sqlalchemy.engine import Connection

from fleetwatch.store import schema

#: the tables holding rows of an agent's uuid, children before ``agents``
TABLES = (schema.agent_routers, schema.plugins, schema.checks, schema.check_state,
          schema.check_freshness, schema.host_state, schema.notified_problems, schema.agents)
#: ``acknowledgements.end_reason`` of those ended because their agent was forgotten
END_REASON = "forgotten"


def forget(conn: Connection, uuids: Iterable[str], now: float) -> dict[str, int]:
    """Remove every row of ``uuids`` (see the module's docstring); end their running
    acknowledgements. Returns the rows removed per table (tables with none left out)."""
    uuids = sorted(set(uuids))
    if not uuids:
        return {}
    present = set(inspect(conn).get_table_names())
    removed: dict[str, int] = {}
    for table in TABLES:
        if table.name not in present:
            continue
        count = conn.execute(delete(table).where(table.c.uuid.in_(uuids))).rowcount or 0
        if count:
            removed[table.name] = count
    if schema.acknowledgements.name in present:
        t = schema.acknowledgements
        ended = conn.execute(update(t).where(t.c.uuid.in_(uuids), t.c.ended.is_(None))
                             .values(ended=now, end_reason=END_REASON)).rowcount or 0
        if ended:
            removed["acknowledgements ended"] = ended
    return removed
