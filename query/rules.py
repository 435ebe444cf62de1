"""The rules on series as the console shows them: each rule the alerting sinks declared (the
``rules`` table, :mod:`sinks.alerting.series.store`) with its hosts' states.

A rule's result is a check of each host it applies to, ``rule:NAME`` (:mod:`sinks.alerting.
series`), judged as any check is: its state is its latest result's (OK, WARNING, CRITICAL,
UNKNOWN), UNKNOWN while the sinks mark it stale, as :mod:`query.pages` says of every check.

- :func:`listed`: every declared rule with how many of its hosts are in each state, counted
  in SQL (one ``GROUP BY`` over the rules' checks: a list of 1,000 rules over 10,000 hosts
  reads counts, not rows);
- :func:`rule`: one rule, its definition and its hosts, problems first, each with its
  state, output and since when; the hosts its selector takes that have no result yet
  (the sinks hold a rule of a host that is not UP, or have not judged it yet) are PENDING.

Every function takes an open connection and reads a database without the tables (no
alerting sink with rules has run yet) as empty.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from fleetwatch.store import schema
from fleetwatch.store.db import has_tables
from query.pages import CHECK_STATES, _gone, _result_state, _stale

#: a rule's check: ``rule:NAME``
PREFIX = "rule:"
#: the states of a rule's hosts, worst first (as the console lists checks)
STATES = CHECK_STATES


def declared(conn: Connection, names: list[str] | None = None) -> list[dict]:
    """The rules the sinks declared (``names``: those only), by name: name, expr, hosts
    (the selector's terms), warning, critical (level texts, ``""`` for none), for,
    keep_firing_for, stale_after (seconds), max_check_attempts, sink, configured."""
    if not has_tables(conn, "rules"):
        return []
    t = schema.rules
    stmt = select(t).order_by(t.c.name)
    if names is not None:
        stmt = stmt.where(t.c.name.in_(names))
    return [{"name": r.name, "expr": r.expr,
             "hosts": [h for h in (r.hosts or []) if isinstance(h, str)],
             "warning": r.warning, "critical": r.critical, "for": r.hold,
             "keep_firing_for": r.keep_firing, "stale_after": r.stale_after,
             "max_check_attempts": r.max_attempts,
             "sink": r.sink, "configured": r.configured} for r in conn.execute(stmt)]


def counts(conn: Connection, names: list[str] | None = None) -> dict[str, dict[str, int]]:
    """rule name -> state -> how many hosts (of agents not deregistered) its check is in."""
    if not has_tables(conn, "checks"):
        return {}
    c = schema.checks
    fresh, stale = _stale(conn, c.c.uuid, c.c.plugin)
    state = _result_state(c, stale)
    source = c.outerjoin(*fresh) if fresh is not None else c
    where = [c.c.uuid.not_in(_gone(conn))]
    if names is not None:
        where.append(c.c.plugin.in_([PREFIX + n for n in names]))
    else:
        where.append(c.c.plugin.like(PREFIX + "%"))
    stmt = select(c.c.plugin, state, func.count()).select_from(source).where(*where) \
        .group_by(c.c.plugin, state)
    out: dict[str, dict[str, int]] = {}
    for plugin, name, n in conn.execute(stmt):
        found = out.setdefault(plugin[len(PREFIX):], {})
        found[name] = found.get(name, 0) + n
    return out


def listed(conn: Connection, names: list[str] | None = None) -> list[dict]:
    """Each declared rule (:func:`declared`) with ``states``: (state, count) worst first,
    none of count 0, and ``judged``: how many hosts it has a result of."""
    rules = declared(conn, names)
    found = counts(conn, [r["name"] for r in rules]) if rules else {}
    for r in rules:
        mine = found.get(r["name"], {})
        r["states"] = [(s, mine[s]) for s in STATES if mine.get(s)]
        r["judged"] = sum(mine.values())
    return rules


def _rank(state: str) -> int:
    return STATES.index(state) if state in STATES else len(STATES)


def rule(conn: Connection, name: str) -> dict | None:
    """The declared rule ``name`` (:func:`declared`) and its ``host_states``: each with uuid,
    hostname, state, status, output, since (when its status last changed), hard (None
    while never judged), last_result; problems first (CRITICAL, UNKNOWN, WARNING, then
    OK, then PENDING), then the oldest change first, then by hostname. None: no such rule."""
    found = declared(conn, [name])
    if not found:
        return None
    out = found[0]
    hosts: list[dict] = []
    if has_tables(conn, "checks", "agents"):
        c, a = schema.checks, schema.agents
        s = schema.check_state if has_tables(conn, "check_state") else None
        fresh, stale = _stale(conn, c.c.uuid, c.c.plugin)
        source = c.outerjoin(a, a.c.uuid == c.c.uuid)
        if fresh is not None:
            source = source.outerjoin(*fresh)
        columns = [c.c.uuid, a.c.hostname, c.c.status, c.c.output, c.c.last_result,
                   _result_state(c, stale).label("state")]
        if s is not None:
            source = source.outerjoin(s, (s.c.uuid == c.c.uuid) & (s.c.plugin == c.c.plugin))
            columns += [s.c.last_change, s.c.since, s.c.hard]
        stmt = select(*columns).select_from(source).where(
            c.c.plugin == PREFIX + name, c.c.uuid.not_in(_gone(conn)))
        for r in conn.execute(stmt):
            row = r._mapping
            since = row.get("last_change") or row.get("since") or row["last_result"]
            hosts.append({"uuid": row["uuid"], "hostname": row["hostname"],
                          "state": row["state"], "status": row["status"],
                          "output": row["output"], "since": since,
                          "hard": row.get("hard"), "last_result": row["last_result"]})
    hosts.sort(key=lambda h: (_rank(h["state"]), h["since"] or 0, h["hostname"] or "",
                              h["uuid"]))
    out["host_states"] = hosts + pending(conn, out["hosts"], {h["uuid"] for h in hosts})
    return out


def pending(conn: Connection, terms: list[str], judged: set[str]) -> list[dict]:
    """The registered agents the selector ``terms`` takes that have no result of the rule
    (``judged``: the uuids that have one), by hostname, PENDING."""
    from sinks.alerting.series.config import Host, selector
    if not has_tables(conn, "agents"):
        return []
    try:
        chosen = selector(terms)
    except ValueError:          # (a sink validated them; a table written by hand)
        return []
    a = schema.agents
    out = []
    for r in conn.execute(select(a.c.uuid, a.c.hostname, a.c.site, a.c.parents)
                          .where(a.c.gone.is_(None))):
        if r.uuid in judged:
            continue
        parents = tuple(p for p in r.parents or () if isinstance(p, str))
        if chosen(Host(r.hostname or r.uuid, r.site, parents)):
            out.append({"uuid": r.uuid, "hostname": r.hostname, "state": "PENDING",
                        "status": None, "output": None, "since": None, "hard": None,
                        "last_result": None})
    return sorted(out, key=lambda h: (h["hostname"] or "", h["uuid"]))
