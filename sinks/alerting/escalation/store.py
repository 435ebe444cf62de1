"""Escalation at work in the alerting sink: told problems counted, due ones escalated.

Two calls, each acting on a transaction the sink runs (:class:`sinks.alerting.port.Port`), on
the ``notified_problems`` table (one row per told problem, :mod:`sinks.alerting.escalation.rules`):

- :func:`told`, from :func:`sinks.alerting.holds.admit` for each alert it lets out (not for
  one held back): a check's or host's trigger gets its number (the event's
  ``notification``, which a rule's ``from_notification`` matches when it is routed) and is
  counted in its problem's row, made at the first; a resolve deletes the row. Every caller
  holds the problem's ``check_state`` / ``host_state`` row lock, so of two alerting sinks
  one counts at a time.
- :func:`look`, from the sink's tick, only when some rule has ``after``: the told problems
  opened at least the shortest ``after`` ago (an indexed read of open problems only) are
  judged with their acknowledgements (:func:`sinks.alerting.escalation.rules.due`); those due are
  locked like any evaluation's (checks, then hosts: :mod:`sinks.alerting.locks`), read
  again and judged again under the locks (another sink may just have escalated them, or
  the problem recovered), and each escalation event goes through :meth:`Port.deliver` to
  its rule's channels only. A silence or a downtime mutes it like any alert; a muted one
  is not recorded, so it goes out once the mute is over if the problem is still open and
  unacknowledged. One delivered is recorded in the row's ``escalated``: once per problem
  and rule across every alerting sink.
"""

from __future__ import annotations

import functools
import logging
from typing import TYPE_CHECKING

from sqlalchemy import Text, bindparam, cast, delete, or_, select, update

from sinks.alerting.acks import store as ackstore
from sinks.alerting.escalation import rules as tiers
from sinks.alerting.checks.rules import OK
from sinks.alerting.delivery.rules import Rule
from sinks.alerting.escalation.rules import Problem
from fleetwatch.store import schema

if TYPE_CHECKING:
    from sinks.alerting.port import Port

log = logging.getLogger(__name__)

#: problems escalated per tick, at most (the rest at the next tick)
LIMIT = 1000


def _problem(r) -> Problem:
    return Problem(r.key, r.uuid, r.check_name, r.kind, r.opened, r.notifications,
                   r.severity, r.status, r.summary, dict(r.escalated or {}))


# Statements on the alerts' path are built once (see sinks/alerting/locks.py).

@functools.lru_cache(maxsize=1)
def _statements():
    t = schema.notified_problems
    read = select(t).where(t.c.key == bindparam("k"))
    write = update(t).where(t.c.key == bindparam("k"))
    end = delete(t).where(t.c.key == bindparam("k"))
    return read, write, end


def told(port: Port, event: dict) -> None:
    """``event`` is being enqueued: a problem's trigger gets its number (``notification``)
    and is counted; a resolve ends the problem (the next one starts at 1)."""
    if not tiers.tracked(event):
        return
    read, write, end = _statements()
    key = str(event["key"])[:schema.KEY.length]
    if event["action"] == "resolve":
        port.conn.execute(end, {"k": key})
        return
    row = port.conn.execute(read, {"k": key}).first()
    problem = tiers.told(None if row is None else _problem(row), event, port.now)
    event["notification"] = problem.notifications
    values = {"notifications": problem.notifications, "severity": problem.severity,
              "status": problem.status, "summary": problem.summary,
              "escalated": problem.escalated, "updated": port.now}
    if row is None:
        port.conn.execute(schema.notified_problems.insert(), {
            "key": key, "uuid": problem.uuid, "check_name": problem.check,
            "kind": problem.kind, "opened": problem.opened, **values})
    else:
        port.conn.execute(write, {"k": key, **values})


# ---------------------------------------------------------------- the tick

def acks_of(conn, problems: dict[str, Problem]) -> dict[str, list]:
    """The acknowledgements of ``problems`` that may bear on their escalation now: those
    not ended, and those ended since the oldest of them was opened."""
    if not problems:
        return {}
    out: dict[str, list] = {}
    for ack in ackstore.since(conn, min(p.opened for p in problems.values())):
        if ack.key in problems:
            out.setdefault(ack.key, []).append(ack)
    return out


def _judge(port: Port, problems: dict[str, Problem], rules: list[tuple[Rule, str]]):
    """(problem, owed, due) of each problem past some rule's ``after`` and not escalated to
    it (:func:`sinks.alerting.escalation.rules.owed`), with the rules whose other conditions its
    escalation event matches (:func:`sinks.alerting.escalation.rules.due`). Cheap first: problems
    escalated to every rule are skipped before acknowledgements and hostnames are read."""
    waiting = {k: p for k, p in problems.items()
               if any(fp not in p.escalated for _, fp in rules)}
    acks = acks_of(port.conn, waiting)
    owed = []
    for key, problem in waiting.items():
        since = tiers.unacked_since(problem, acks.get(key, ()), port.now)
        rules_owed = tiers.owed(problem, rules, since, port.now)
        if rules_owed:
            owed.append((problem, since, rules_owed))
    names = port.hostnames({p.uuid for p, _, _ in owed})
    return [(problem, rules_owed,
             tiers.due(problem, rules_owed, since, names.get(problem.uuid), port.now))
            for problem, since, rules_owed in owed]


def wanted(delivery) -> bool:
    """Whether some rule of ``delivery`` (a :class:`DeliveryConfig`) has ``after``: else
    the tick does not look at all."""
    return any(r.after_seconds is not None for r in delivery.rules)


def look(port: Port) -> None:
    """The tick's escalation pass: due problems get their escalation events."""
    rules = [(r, tiers.fingerprint(r)) for r in port.config.delivery.rules
             if r.after_seconds is not None]
    if not rules:
        return
    conn, now = port.conn, port.now
    t = schema.notified_problems
    shortest = min(r.after_seconds for r, _ in rules)
    # not yet escalated to every rule: filtered by the database (reading and decoding
    # 10,000 rows cost 100 ms a tick on SQLite; this read costs a few)
    escalated = cast(t.c.escalated, Text)
    problems = {r.key: _problem(r) for r in conn.execute(select(t).where(
        t.c.opened <= now - shortest,
        or_(t.c.escalated.is_(None), *(~escalated.contains(fp) for _, fp in rules))))}
    owed = _judge(port, problems, rules)[:LIMIT]
    if not owed:
        return
    checks = [(p.uuid, p.check) for p, _, _ in owed if p.kind == "check"]
    hosts = [(p.uuid, p.check or "") for p, _, _ in owed if p.kind == "host"]
    check_states = port.lock_checks(checks)
    host_states = port.lock_hosts(hosts)
    keys = sorted(p.key for p, _, _ in owed)
    again = {r.key: _problem(r) for r in conn.execute(select(t).where(t.c.key.in_(keys)))}
    for problem, rules_owed, escalations in _judge(port, again, rules):
        if not _told(problem, check_states, host_states):
            # its state says nothing is told (a row left by a failure): no problem to page
            conn.execute(delete(t).where(t.c.key == problem.key))
            continue
        since = _open_since(problem, check_states, host_states)
        if since is None:
            continue                    # recovered (its resolve not told yet): no escalation
        # a rule the problem does not match (its severity, host, check, count) is marked
        # None: not read again until its next notification clears the marks (tiers.told)
        escalated = {**problem.escalated, **{fp: None for _, fp in rules_owed}}
        for rule, event in escalations:
            if port.deliver(event, problem.check, since, rules=[Rule(channels=rule.channels)]):
                escalated[tiers.fingerprint(rule)] = now
                port.counts["escalation_sent"] += 1
                log.info("problem %s escalated to %s after %s unacknowledged", problem.key,
                         ", ".join(rule.channels), tiers.span(rule.after_seconds))
            else:
                del escalated[tiers.fingerprint(rule)]      # muted: judged again
                port.counts["escalation_muted"] += 1
        if escalated != problem.escalated:
            conn.execute(update(t).where(t.c.key == problem.key)
                         .values(escalated=escalated, updated=now))


def _told(problem: Problem, checks: dict, hosts: dict) -> bool:
    """Whether ``problem``'s state row (locked) says a problem was told and not resolved."""
    if problem.kind == "check":
        state = checks.get((problem.uuid, problem.check))
        return state is not None and state.notified != OK
    state = hosts.get((problem.uuid, problem.check or ""))
    return state is not None and state.notified


def _open_since(problem: Problem, checks: dict, hosts: dict) -> float | None:
    """When ``problem`` began, by its state row (locked): None if it is no problem now."""
    if problem.kind == "check":
        state = checks.get((problem.uuid, problem.check))
        if state is None or state.notified == OK or state.status == OK:
            return None
        return state.since if state.since is not None else problem.opened
    state = hosts.get((problem.uuid, problem.check or ""))
    if state is None or state.up or not state.notified:
        return None
    return state.since
