"""The scopes of the console's pages and the counts of states, chosen in SQL.

A page of a fleet of 10,000 hosts and 50,000 checks reads its own rows: these queries pick
which agents (``uuids``) and which checks (``pairs``: (uuid, plugin)) a page shows, and
:func:`query.fleet.read` then reads only those; the counts of the overview are ``GROUP BY``
queries. The states are the ones :func:`query.fleet.assemble` gives, written as SQL
``CASE`` expressions:

- a host: GONE (left), DOWN (its heartbeats stopped: not up, or up past the deadline no sink
  has acted on yet), UNREACHABLE (DOWN behind a parent the sinks recorded), UP, and UNKNOWN
  while no alerting sink has heard it;
- a check: UNKNOWN while stale (no result for its freshness threshold), PENDING before its
  first result, else its result's OK, WARNING, CRITICAL or UNKNOWN.

Every function takes an open connection and reads a database with missing tables (no sink
has run yet) as empty. SQLAlchemy Core only: the same SQL runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

from sqlalchemy import (String, and_, case, cast, exists, false, func, literal, null, or_,
                        select, true, union)
from sqlalchemy.engine import Connection

from fleetwatch.store import schema
from fleetwatch.store.db import has_tables
from fleetwatch.store.reads import present
from query.fleet import JUDGED
from query.globbing import glob, has_wildcards

#: the host states, in the order the console lists their counts
HOST_STATES = ("DOWN", "UNREACHABLE", "UP", "UNKNOWN", "GONE")
#: the check states, worst first
CHECK_STATES = ("CRITICAL", "UNKNOWN", "WARNING", "OK", "PENDING")
#: the orders of the hosts page (``-NAME``: the other way); ``state`` is worst first, ``since``
#: the oldest change first, then each by hostname
HOST_SORTS = ("hostname", "state", "since", "last_seen")


def column_or_null(conn: Connection, table, name: str, type_=String):
    """``table.c[name]`` (of a table or an alias of it), or a NULL of ``type_`` when the
    database predates that column."""
    base = getattr(table, "element", table)
    if name not in base.c or name in present(conn, base)[1]:
        return null().cast(type_)
    return table.c[name]


def heartbeats_stopped(h, now: float):
    """A ``host_state`` row's heartbeats have stopped (as the sinks' expiry says, at now):
    not up, or up past the deadline no sink has acted on yet."""
    return or_(h.c.up == false(), and_(h.c.deadline > 0, h.c.deadline < now))


def state_since(h, now: float):
    """Since when a ``host_state`` row's state holds, as query.fleet says it: past its
    deadline with no sink's word yet, since that deadline."""
    return case((and_(h.c.up == true(), h.c.deadline > 0, h.c.deadline < now), h.c.deadline),
                else_=h.c.since)


def like_escaped(text: str) -> str:
    """``text`` for a LIKE ... ESCAPE '\\': its wildcards literal."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def declares(parents, parent: str):
    """Whether a ``parents`` JSON list (a column) names ``parent`` (``host`` or
    ``host/check``), matched as the list's text."""
    quoted = '"' + parent.replace("\\", "\\\\").replace('"', '\\"')
    text = cast(parents, String)
    return or_(text.contains(quoted + '"', autoescape=True),
               text.contains(quoted + "/", autoescape=True))


def _host_join(conn: Connection, now: float):
    """(agents outer-joined to their own ``host_state`` row, the host's state as a CASE),
    for the agents not deregistered."""
    a, h = schema.agents, schema.host_state
    if not has_tables(conn, "host_state"):
        return a, literal("UNKNOWN")
    gone, parent = column_or_null(conn, h, "gone"), column_or_null(conn, h, "unreachable")
    down = heartbeats_stopped(h, now)
    state = case((h.c.uuid.is_(None), "UNKNOWN"), (gone.is_not(None), "GONE"),
                 (and_(down, parent.is_not(None), parent != ""), "UNREACHABLE"),
                 (down, "DOWN"), else_="UP")
    joined = a.outerjoin(h, and_(h.c.uuid == a.c.uuid, h.c.name == "", h.c.last_heard > 0))
    return joined, state


def _agents_where(conn: Connection):
    gone = column_or_null(conn, schema.agents, "gone")
    return gone.is_(None)


def host_counts(conn: Connection, now: float) -> dict[str, int]:
    """How many agents are in each host state (:data:`HOST_STATES`)."""
    if not has_tables(conn, "agents"):
        return {}
    joined, state = _host_join(conn, now)
    stmt = select(state.label("state"), func.count()).select_from(joined) \
        .where(_agents_where(conn)).group_by(state)
    return {row[0]: row[1] for row in conn.execute(stmt)}


def _gone(conn: Connection):
    """The uuids of the agents deregistered (a SELECT)."""
    a = schema.agents
    return select(a.c.uuid).where(column_or_null(conn, a, "gone").is_not(None))


def _declared(conn: Connection):
    """The distinct (uuid, name) of the checks the agents not deregistered declared (one
    plugin declared by the agent and a local process is one check), and of those the
    alerting sinks judged for them (:func:`judged_name`)."""
    p, a, c = schema.plugins, schema.agents, schema.checks
    return union(select(p.c.uuid, p.c.name).join(a, a.c.uuid == p.c.uuid)
                 .where(_agents_where(conn)),
                 select(c.c.uuid, c.c.plugin).join(a, a.c.uuid == c.c.uuid)
                 .where(_agents_where(conn), judged_name(c.c.plugin))).subquery("declared")


def judged_name(plugin):
    """Whether the check ``plugin`` (a column) is one the alerting sinks judge themselves
    (:data:`query.fleet.JUDGED`: a rule's, a Prometheus alert's; no agent declares it), as
    SQL: they are listed and counted with the declared checks."""
    return or_(*(func.substr(plugin, 1, len(prefix)) == prefix for prefix in JUDGED))


def _stale(conn: Connection, uuid, plugin, uuids=None):
    """(the freshness table joined on ``uuid``, ``plugin`` (of the agents ``uuids`` only,
    if given), or None; whether the check is stale, as a SQL expression)."""
    if not has_tables(conn, "check_freshness"):
        return None, false()
    f = schema.check_freshness
    on = and_(f.c.uuid == uuid, f.c.plugin == plugin)
    if uuids is not None:
        on = and_(on, f.c.uuid.in_(uuids))
    return (f, on), and_(
        f.c.stale_at.is_not(None), or_(f.c.heard.is_(None), f.c.stale_at >= f.c.heard))


def _result_state(c, stale):
    return case((stale, "UNKNOWN"), (c.c.status == 0, "OK"), (c.c.status == 1, "WARNING"),
                (c.c.status == 2, "CRITICAL"), else_="UNKNOWN")


def _check_join(conn: Connection, uuids: list[str] | None = None):
    """(declared checks outer-joined to their result and freshness, the state as a CASE);
    of the agents ``uuids`` only, if given: said to each table, as PostgreSQL does not carry
    it from the declarations to the outer joins' other sides (it would scan them whole)."""
    d, c = _declared(conn), schema.checks
    on = and_(c.c.uuid == d.c.uuid, c.c.plugin == d.c.name)
    joined = d.outerjoin(c, on if uuids is None else and_(on, c.c.uuid.in_(uuids)))
    fresh, stale = _stale(conn, d.c.uuid, d.c.name, uuids)
    if fresh is not None:
        joined = joined.outerjoin(*fresh)
    state = case((stale, "UNKNOWN"), (c.c.uuid.is_(None), "PENDING"),
                 else_=_result_state(c, false()))
    return d, joined, state


def check_counts(conn: Connection) -> dict[str, int]:
    """How many declared checks are in each state (:data:`CHECK_STATES`): those with a
    result counted from ``checks`` (declared, of an agent not deregistered), then those
    declared and never run (PENDING, UNKNOWN when stale). Two scans, no join of every
    declaration to its result: a third of the time at 50,000 checks."""
    if not has_tables(conn, "agents", "plugins", "checks"):
        return {}
    c, p = schema.checks, schema.plugins
    fresh, stale = _stale(conn, c.c.uuid, c.c.plugin)
    state = _result_state(c, stale)
    source = c.outerjoin(*fresh) if fresh is not None else c
    declared = or_(exists().where(p.c.uuid == c.c.uuid, p.c.name == c.c.plugin),
                   judged_name(c.c.plugin))
    counts: dict[str, int] = {}
    for name, n in conn.execute(select(state, func.count()).select_from(source).where(
            declared, c.c.uuid.not_in(_gone(conn))).group_by(state)):
        counts[name] = counts.get(name, 0) + n
    never = select(p.c.uuid, p.c.name).distinct().where(
        ~exists().where(c.c.uuid == p.c.uuid, c.c.plugin == p.c.name),
        p.c.uuid.not_in(_gone(conn))).subquery()
    fresh, stale = _stale(conn, never.c.uuid, never.c.name)
    state = case((stale, "UNKNOWN"), else_="PENDING")
    source = never.outerjoin(*fresh) if fresh is not None else never
    for name, n in conn.execute(select(state, func.count()).select_from(source).group_by(state)):
        counts[name] = counts.get(name, 0) + n
    return counts


def check_counts_of(conn: Connection, uuids: list[str]) -> dict[str, dict[str, int]]:
    """uuid -> how many of its declared checks are in each state, for the agents ``uuids``
    (a page of hosts: counted here, not read check by check)."""
    if not uuids or not has_tables(conn, "agents", "plugins", "checks"):
        return {}
    declared, joined, state = _check_join(conn, uuids)
    stmt = select(declared.c.uuid, state, func.count()).select_from(joined) \
        .where(declared.c.uuid.in_(uuids)).group_by(declared.c.uuid, state)
    counts: dict[str, dict[str, int]] = {}
    for uuid, name, n in conn.execute(stmt):
        counts.setdefault(uuid, {})[name] = n
    return counts


def hosts(conn: Connection, now: float, *, search: str = "", state: str | None = None,
          parent: str | None = None, site: str | None = None, after: str = "",
          offset: int = 0, limit: int = 100, by_name: bool = True,
          sort: str = "hostname", handled: str = "all",
          held=None, count: bool = True) -> tuple[list[str], int | None]:
    """(the uuids of one page of agents, how many match in all): those whose hostname
    contains ``search`` (or whose uuid starts with it; a glob, :func:`has_wildcards`,
    matches the whole hostname or uuid, ignoring case), in host ``state``, declaring
    ``parent``, behind the site router ``site`` (``""``: attached to a central router),
    whose own problem is handled (``handled`` yes: among the uuids ``held`` selects,
    :func:`query.problems.hosts` gives them) or not (no: every other host); in the order
    ``sort`` (:data:`HOST_SORTS`) from ``offset`` (``by_name``: the console's pages) or by
    uuid after the cursor ``after`` (the API's, which does not ``count``: None)."""
    if not has_tables(conn, "agents"):
        return [], 0
    a = schema.agents
    joined, host_state = _host_join(conn, now)
    where = [_agents_where(conn)]
    if search and has_wildcards(search):
        dialect = conn.dialect.name
        where.append(or_(glob(a.c.hostname, search, dialect, fold=True),
                         glob(a.c.uuid, search, dialect, fold=True)))
    elif search:
        pattern = "%" + like_escaped(search) + "%"
        where.append(or_(a.c.hostname.ilike(pattern, escape="\\"),
                         a.c.uuid.like(pattern[1:], escape="\\")))
    if state:
        where.append(host_state == state.upper())
    if handled in ("yes", "no"):
        if held is None:
            where.append(false() if handled == "yes" else true())
        else:
            where.append(a.c.uuid.in_(held) if handled == "yes" else a.c.uuid.not_in(held))
    if parent:
        where.append(declares(a.c.parents, parent))
    if site is not None:
        where.append(func.coalesce(column_or_null(conn, a, "site"), "") == site)
    total = conn.execute(select(func.count()).select_from(joined).where(*where)) \
        .scalar_one() if count else None
    stmt = select(a.c.uuid).select_from(joined).where(*where)
    if by_name:
        stmt = stmt.order_by(*_host_order(conn, sort, host_state, now), a.c.hostname,
                             a.c.uuid).offset(offset)
    else:
        stmt = stmt.where(a.c.uuid > after).order_by(a.c.uuid)
    return list(conn.execute(stmt.limit(limit)).scalars()), total


def _host_order(conn: Connection, sort: str, host_state, now: float) -> list:
    """The ORDER BY of ``sort`` (before the hostname, the uuid that every order ends with);
    an order the database cannot give yet (no ``host_state``) is the hostname's."""
    a, h = schema.agents, schema.host_state
    key = sort.lstrip("-")
    if key == "state":
        column = case({name: i for i, name in enumerate(HOST_STATES)}, value=host_state,
                      else_=len(HOST_STATES))
    elif key == "since" and has_tables(conn, "host_state"):
        # as query.fleet says it: a host past its deadline that no sink has acted on yet is
        # DOWN since that deadline
        column = state_since(h, now)
    elif key == "last_seen":
        column = a.c.last_seen
    else:
        column = a.c.hostname
    return [column.desc() if sort.startswith("-") else column]


def parents(conn: Connection, now: float) -> list[dict]:
    """The parents the agents declared, each with how many agents declare it and how many
    of those are in each host state: the hosts page grouped by parent. A parent is named as
    declared (``host`` or ``host/check``)."""
    if not has_tables(conn, "agents"):
        return []
    a = schema.agents
    joined, host_state = _host_join(conn, now)
    stmt = select(a.c.parents, host_state).select_from(joined) \
        .where(_agents_where(conn), a.c.parents.is_not(None))
    groups: dict[str, dict] = {}
    for declared, state in conn.execute(stmt):
        for name in declared if isinstance(declared, list) else ():
            if not isinstance(name, str):
                continue
            group = groups.setdefault(name, {"parent": name, "hosts": 0, "states": {}})
            group["hosts"] += 1
            group["states"][state] = group["states"].get(state, 0) + 1
    return sorted(groups.values(), key=lambda g: g["parent"])


def sites(conn: Connection, now: float) -> list[dict]:
    """The sites the agents are behind (as the registry recorded from their HELLOs; ``""``:
    attached to a central router), each with how many agents and how many of those are in
    each host state: the hosts page grouped by site. One GROUP BY."""
    if not has_tables(conn, "agents"):
        return []
    a = schema.agents
    joined, host_state = _host_join(conn, now)
    site = func.coalesce(column_or_null(conn, a, "site"), "")
    stmt = select(site, host_state, func.count()).select_from(joined) \
        .where(_agents_where(conn)).group_by(site, host_state)
    groups: dict[str, dict] = {}
    for name, state, n in conn.execute(stmt):
        group = groups.setdefault(name, {"site": name, "hosts": 0, "states": {}})
        group["hosts"] += n
        group["states"][state] = group["states"].get(state, 0) + n
    return sorted(groups.values(), key=lambda g: g["site"])


def checks(conn: Connection, now: float, *, uuid: str | None = None,
           state: str | None = None, after: tuple[str, str] | None = None,
           limit: int = 100) -> list[tuple[str, str]]:
    """One page of declared checks as (uuid, plugin) pairs, in that order after the cursor
    ``after``: of one agent (``uuid``), in one ``state``.

    Without a state, the page lies among the next ``limit`` agents with a check after the
    cursor's (each has one at least): the declarations are cut to those agents before
    they are made distinct and sorted, which PostgreSQL would otherwise do for every
    check after the cursor (17 ms at 50,000 checks, for 100 of them)."""
    if not has_tables(conn, "agents", "plugins", "checks"):
        return []
    declared, joined, check_state = _check_join(conn)
    stmt = select(declared.c.uuid, declared.c.name).select_from(joined)
    if uuid:
        stmt = stmt.where(declared.c.uuid == uuid)
    if state:
        stmt = stmt.where(check_state == state.upper())
    elif not uuid:
        p, a = schema.plugins, schema.agents
        ahead = select(p.c.uuid).distinct().join(a, a.c.uuid == p.c.uuid) \
            .where(_agents_where(conn), p.c.uuid > (after[0] if after else "")) \
            .order_by(p.c.uuid).offset(limit - 1).limit(1)
        last = conn.execute(ahead).scalar()
        if last is not None:
            stmt = stmt.where(declared.c.uuid <= last)
    if after:
        stmt = stmt.where(or_(declared.c.uuid > after[0],
                              and_(declared.c.uuid == after[0], declared.c.name > after[1])))
    stmt = stmt.order_by(declared.c.uuid, declared.c.name).limit(limit)
    return [tuple(r) for r in conn.execute(stmt)]
