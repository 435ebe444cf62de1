"""Agents that leave: GONE (a DEREGISTER, or ephemeral and silent), their checks and told
problems ended without paging anyone, and, ``forget_after`` later, forgotten.

Two calls from the sink, each acting on a transaction it runs
(:class:`sinks.alerting.port.Port`):

- :func:`depart`, for a batch's DEREGISTERs and for the ephemeral agents the expiry pass
  found silent (:func:`sinks.alerting.hosts.rules.gone` is the state rule);
- :func:`forget`, from the tick (at most once a minute): every row of the agents GONE for
  ``forget_after`` (:func:`fleetwatch.store.forget.forget`), so the state database stays the size
  of the live fleet.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from sqlalchemy import delete, select, update

from sinks.alerting.delivery import events as alertevents
from sinks.alerting.hosts import rules as hoststate
from sinks.alerting.checks import store as checkstore
from sinks.alerting.hosts import store as hoststore
from fleetwatch.store import forget as forgetting, schema

if TYPE_CHECKING:
    from sinks.alerting.port import Port

log = logging.getLogger(__name__)

#: agents forgotten per tick, at most (the rest at the next tick)
FORGET_LIMIT = 1000
#: ``acknowledgements.end_reason`` of those ended because their agent left
GONE = "gone"


def depart(port: Port, leaving: dict[str, float | None]) -> None:
    """Agents ``leaving`` (uuid -> its DEREGISTER's ``ts``, or None: ephemeral and gone
    silent) are GONE (:func:`sinks.alerting.hosts.rules.gone`): the problems they had told are
    closed by a resolve that pages nobody (their acknowledgements end), their checks'
    results, states and freshness are removed (so nothing is stale, escalated or
    reminded; :mod:`sinks.alerting.freshness.store` expects nothing of them), and every
    ``host_state`` row of theirs (the agent's, its processes') is GONE, kept as a
    tombstone that a late heartbeat does not revive, until :func:`forget`."""
    uuids = sorted(leaving)
    names = port.hostnames(uuids)
    checks = hoststore.keys_of(port.conn, schema.check_state, uuids)
    checkstore.lock_checks(port.conn, checks, port.now)
    keys = set(hoststore.keys_of(port.conn, schema.host_state, uuids))
    states = port.lock_hosts(keys | {(u, "") for u in uuids})
    closed = _close_problems(port, uuids, leaving, names)
    for t in (schema.check_state, schema.check_freshness, schema.checks):
        port.conn.execute(delete(t).where(t.c.uuid.in_(uuids)))
    t = schema.acknowledgements                     # their problems are closed
    port.counts["ack_gone"] += port.conn.execute(update(t).where(
        t.c.uuid.in_(uuids), t.c.ended.is_(None)).values(
        ended=port.now, end_reason=GONE)).rowcount or 0
    port.forget_checks(checks)
    changed = {}
    for key, state in states.items():
        new = hoststate.gone(state, port.now, leaving[key[0]])
        changed[key] = (new, new.last_heard)
    port.save_hosts(changed)
    for uuid in uuids:
        deregistered = leaving[uuid] is not None
        port.counts["host_deregistered" if deregistered else "host_left"] += 1
        log.info("agent %s (%s) gone (%s): checks ended, %d problems closed", uuid,
                 names.get(uuid), "deregistered" if deregistered else
                 "ephemeral and silent", closed.get(uuid, 0))


def _close_problems(port: Port, uuids: list[str], leaving: dict,
                    names: dict) -> dict[str, int]:
    """Each problem the agents told is closed by a resolve that pages nobody; how many
    per agent."""
    t = schema.notified_problems
    problems = port.conn.execute(select(t).where(t.c.uuid.in_(uuids))
                                .order_by(t.c.key)).all()
    closed: dict[str, int] = {}
    for problem in problems:
        why = "deregistered" if leaving[problem.uuid] is not None else \
            "ephemeral and silent"
        event = alertevents.gone_event(problem, names.get(problem.uuid), why, port.now)
        port.deliver(event, problem.check_name)
        port.conn.execute(delete(t).where(t.c.key == problem.key))   # muted all the same
        closed[problem.uuid] = closed.get(problem.uuid, 0) + 1
    port.counts["problem_closed_gone"] += len(problems)
    return closed


def forget(port: Port) -> None:
    """Agents GONE for ``forget_after`` are forgotten: every row of theirs, the
    registry's too (:func:`fleetwatch.store.forget.forget`), so the state database stays
    the size of the live fleet however many instances came and went."""
    t = schema.host_state
    uuids = list(port.conn.execute(select(t.c.uuid).where(
        t.c.name == "", t.c.gone.is_not(None),
        t.c.gone <= port.now - port.config.forget_after).order_by(t.c.gone)
        .limit(FORGET_LIMIT)).scalars())
    if not uuids:
        return
    removed = forgetting.forget(port.conn, uuids, port.now)
    port.counts["host_forgotten"] += len(uuids)
    log.info("forgot %d agents gone for %.0fs or more (rows removed: %s)", len(uuids),
             port.config.forget_after, ", ".join(f"{k} {v}" for k, v in removed.items()))
