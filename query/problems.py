"""The problems list in SQL: every problem of the fleet as one row, how it is handled, and
the console's and the API's filters, orders, groups and pages over them.

A problem and its handling are what :mod:`query.handling` says they are (that module judges
the rows a page shows, for their details); here the same rules are SQL, so that a list of
a fleet of 10,000 hosts and 50,000 checks is filtered, sorted, grouped and cut to a page
by the database. Each row is

- ``host``: an agent DOWN (its heartbeats stopped, or it is past its deadline), or
  UNREACHABLE (DOWN behind a parent the sinks recorded);
- ``process``: a local process DOWN, of an agent not deregistered;
- ``check``: a declared check whose result is not OK, or stale (UNKNOWN), or a check the
  alerting sinks judge themselves (:data:`query.fleet.JUDGED`: a rule's, a Prometheus
  alert's) whose result is not OK;

with ``handled`` when an acknowledgement runs for it, a downtime covers it now, it is held
because of a parent (``unreachable``) or its host is DOWN or UNREACHABLE. The downtimes
that may cover something now are few: each is read (:func:`query.handling.read_downtimes`)
and becomes a predicate (its globs as SQL, :mod:`query.globbing`; its time judged here, a
flexible one's as the problems' start within its windows).

The default order is :func:`query.handling.worst_first`'s: hosts, processes, then checks
CRITICAL, UNKNOWN, WARNING; HARD before SOFT; the newest first; then by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import ClassVar

from sqlalchemy import (Float, Integer, String, and_, case, false, func, literal,
                        null, or_, select, true, union, union_all)
from sqlalchemy.engine import Connection

from fleetwatch.store import schema
from fleetwatch.store.db import has_tables
from query import filters, handling, pages
from query.globbing import glob
from query.pages import (column_or_null, declares, heartbeats_stopped, like_escaped,
                         state_since)

#: the states of a problem, worst first
STATES = ("DOWN", "UNREACHABLE", "CRITICAL", "UNKNOWN", "WARNING")
#: the states of a check in the checks list, worst first
CHECK_STATES = ("CRITICAL", "UNKNOWN", "WARNING", "PENDING", "OK")
#: the orders of a list (``-NAME``: the other way); ``state`` is worst first, ``since`` the
#: longest problem first
SORTS = ("state", "since", "hostname", "check", "output")
#: what a list may be grouped by
GROUPS = ("host", "parent", "site")
#: which problems a list shows: those nothing handles, those handled, or all
HANDLED = ("no", "yes", "all")
#: each field of a filter by its name in a URL
URL_NAMES = {"states": "state", "host": "host", "check": "check", "parent": "parent",
             "site": "site", "handled": "handled", "text": "q", "sort": "sort", "group": "group"}


@dataclass(frozen=True)
class Filter:
    """What a list of problems shows: in ``states`` (none: any), of hosts whose hostname or
    uuid matches the glob ``host`` (ignoring case, as downtimes name hosts), of checks (or
    processes) matching the glob ``check``, of hosts declaring ``parent`` or behind the
    site ``site``, handled or not (``handled``: :data:`HANDLED`), with ``text`` in the
    hostname, the check's name or its output (ignoring case); in the order ``sort``,
    grouped by ``group`` (``""``: not)."""
    #: the states it may name
    STATES: ClassVar[tuple[str, ...]] = STATES
    #: which rows it lists: the problems (:func:`page`)
    CHECKS: ClassVar[bool] = False

    states: tuple[str, ...] = ()
    host: str = ""
    check: str = ""
    parent: str = ""
    site: str = ""
    handled: str = "no"
    text: str = ""
    sort: str = "state"
    group: str = ""

    @classmethod
    def parse(cls, params: Mapping) -> Filter:
        """The filter a URL's query says (``state`` repeated or comma-separated, ``host``,
        ``check``, ``parent``, ``site``, ``handled``, ``q``, ``sort``, ``group``); a
        ValueError saying the first value that is not one."""
        found = cls(filters.words(params, "state", cls.STATES), filters.line(params, "host"),
                    filters.line(params, "check"), filters.line(params, "parent"),
                    filters.line(params, "site"),
                    filters.line(params, "handled") or cls.handled, filters.line(params, "q"),
                    filters.order(filters.line(params, "sort") or "state", SORTS),
                    filters.line(params, "group"))
        if found.handled not in HANDLED:
            raise ValueError(f"handled {found.handled[:20]!r}: expected no, yes or all")
        if found.group and found.group not in GROUPS:
            raise ValueError(f"group {found.group[:20]!r}: expected one of {', '.join(GROUPS)}")
        return found

    def query(self, **changes) -> list[tuple[str, str]]:
        """The URL query of this filter (with ``changes``), its defaults left out: what a
        link to the same view (another page, another order) carries."""
        return filters.url_query(self, URL_NAMES, **changes)

    @property
    def narrowed(self) -> bool:
        """Whether it shows fewer rows than its list unfiltered (the unhandled problems,
        every check): a filter is set."""
        return any((self.states, self.host, self.check, self.parent, self.site, self.text,
                    self.handled != type(self).handled))


@dataclass(frozen=True)
class CheckFilter(Filter):
    """What the checks list shows: every declared check (OK and PENDING too, handled or
    not), filtered, sorted and grouped as the problems are (:class:`Filter`)."""
    STATES: ClassVar[tuple[str, ...]] = CHECK_STATES
    CHECKS: ClassVar[bool] = True

    handled: str = "all"


@dataclass
class Page:
    """One page of a list: ``rows`` (kind, uuid, hostname, name: the check or process,
    state, since, handled, group), how many match in all (``total``), and how many match
    in each group the page shows (``groups``: name -> count, in the list's order; empty
    when not grouped)."""
    rows: list[dict]
    total: int
    groups: dict


# ---------------------------------------------------------------- the rows

def _acked(conn: Connection, key, now: float):
    """An acknowledgement of the problem ``key`` (a SQL string) runs at ``now``: ``key IN``
    the running ones' keys, a list the database builds once per query (SQLite hashes it,
    PostgreSQL too), not a search of them for each problem (the table has no index on
    ``key``: that was 0.1 s a page at 1,000 problems and 300 acknowledgements)."""
    if not has_tables(conn, "acknowledgements"):
        return false()
    k = schema.acknowledgements
    return key.in_(select(k.c.key).where(k.c.ended.is_(None),
                                         or_(k.c.expire.is_(None), k.c.expire > now)))


def _rows(conn: Connection, now: float, checks: bool = False,
          uuids: list[str] | None = None, hosts_only: bool = False, worst: bool = False):
    """Every problem as a row (a UNION ALL subquery), before its downtimes are judged;
    ``checks``: every declared check instead, whatever its state (``worst``: every one
    but the OK ones, :func:`_worst_first`); ``uuids``: of those agents only;
    ``hosts_only``: the hosts' own problems only (DOWN, UNREACHABLE)."""
    a, h, hh = schema.agents, schema.host_state.alias("h"), schema.host_state.alias("hh")
    here = column_or_null(conn, a, "gone", Float).is_(None)
    if uuids is not None:
        here = and_(here, a.c.uuid.in_(uuids))
    site = column_or_null(conn, a, "site")

    def unreach(t):
        u = column_or_null(conn, t, "unreachable")
        return and_(u.is_not(None), u != "")

    def host_word(t):
        """The agent's own state when it is a problem (DOWN, UNREACHABLE), else NULL."""
        return case((and_(t.c.uuid.is_not(None), column_or_null(conn, t, "gone", Float).is_(None),
                          heartbeats_stopped(t, now)),
                     case((unreach(t), "UNREACHABLE"), else_="DOWN")), else_=null())

    common = [a.c.uuid, a.c.hostname, a.c.parents, site.label("site")]
    parts = []
    if has_tables(conn, "host_state") and not checks:
        since = state_since(h, now)
        parts.append(select(
            literal("host").label("kind"), *common, null().cast(String).label("name"),
            case((unreach(h), "UNREACHABLE"), else_="DOWN").label("state"),
            literal(0).label("rank"), literal(0).label("soft"), since.label("since"),
            since.label("problem"), null().cast(String).label("output"),
            null().cast(Integer).label("status"),
            _acked(conn, a.c.uuid + "/host", now).label("acked"),
            case((unreach(h), column_or_null(conn, h, "unreachable")),
                 else_=null()).label("parent"),
            null().cast(String).label("host_down"))
            .select_from(a.join(h, and_(h.c.uuid == a.c.uuid, h.c.name == "")))
            .where(here, column_or_null(conn, h, "gone", Float).is_(None),
                   heartbeats_stopped(h, now)))
    if hosts_only:
        return parts[0].subquery("problem") if parts else None
    if has_tables(conn, "host_state") and not checks:
        p = schema.host_state.alias("p")
        since = state_since(p, now)
        parts.append(select(
            literal("process").label("kind"), *common, p.c.name.label("name"),
            literal("DOWN").label("state"), literal(1).label("rank"), literal(0).label("soft"),
            since.label("since"), since.label("problem"),
            null().cast(String).label("output"), null().cast(Integer).label("status"),
            false().label("acked"), null().cast(String).label("parent"),
            host_word(hh).label("host_down"))
            .select_from(a.join(p, and_(p.c.uuid == a.c.uuid, p.c.name != ""))
                         .outerjoin(hh, and_(hh.c.uuid == a.c.uuid, hh.c.name == "")))
            .where(here, column_or_null(conn, p, "gone", Float).is_(None),
                   heartbeats_stopped(p, now)))
    if has_tables(conn, "plugins", "checks"):
        parts.append(_check_rows(conn, now, common, host_word(hh) if has_tables(
            conn, "host_state") else null().cast(String), hh, here, every=checks,
            uuids=uuids, worst=worst))
    if not parts:
        return None
    return union_all(*parts).subquery("problem")


def _check_rows(conn: Connection, now: float, common: list, host_down, hh, here,
                every: bool = False, uuids: list[str] | None = None, worst: bool = False):
    """The checks whose result is not OK or that are stale (``every``: every check
    declared, OK and PENDING too; ``every`` and ``worst``: every one declared but the OK
    ones, PENDING too), as rows of :func:`_rows`, of the agents ``here`` (:func:`_rows`'s
    condition: not deregistered, of ``uuids`` if given; ``uuids`` said to the candidates
    too, which are read before the join)."""
    a, c, p = schema.agents, schema.checks, schema.plugins
    fresh = has_tables(conn, "check_freshness")
    f = schema.check_freshness
    stale_of = and_(f.c.stale_at.is_not(None), or_(f.c.heard.is_(None),
                                                   f.c.stale_at >= f.c.heard))

    def mine(uuid) -> list:
        """A candidate's condition: of ``uuids``, if given."""
        return [] if uuids is None else [uuid.in_(uuids)]
    if every and not worst:             # declared, and judged by the alerting sinks
        cand = union(select(p.c.uuid, p.c.name.label("plugin")).where(*mine(p.c.uuid)),
                     select(c.c.uuid, c.c.plugin).where(pages.judged_name(c.c.plugin),
                                                        *mine(c.c.uuid))) \
            .subquery("candidate")
    else:
        candidates = [select(c.c.uuid, c.c.plugin).where(
            c.c.status != 0, *mine(c.c.uuid))]
        if fresh:
            candidates.append(select(f.c.uuid, f.c.plugin).where(
                stale_of, *mine(f.c.uuid)))
        if worst:                       # declared, no result yet: PENDING
            candidates.append(select(p.c.uuid, p.c.name).where(
                ~select(c.c.uuid).where(c.c.uuid == p.c.uuid, c.c.plugin == p.c.name)
                .exists(), *mine(p.c.uuid)))
        cand = union(*candidates).subquery("candidate") if len(candidates) > 1 \
            else candidates[0].subquery("candidate")
    joined = cand.join(a, a.c.uuid == cand.c.uuid) \
        .outerjoin(c, and_(c.c.uuid == cand.c.uuid, c.c.plugin == cand.c.plugin))
    stale = false()
    if fresh:
        joined = joined.outerjoin(f, and_(f.c.uuid == cand.c.uuid, f.c.plugin == cand.c.plugin))
        stale = stale_of
    judged = has_tables(conn, "check_state")
    s = schema.check_state
    if judged:
        joined = joined.outerjoin(s, and_(s.c.uuid == cand.c.uuid, s.c.plugin == cand.c.plugin))
    if has_tables(conn, "host_state"):
        joined = joined.outerjoin(hh, and_(hh.c.uuid == cand.c.uuid, hh.c.name == ""))
    # (a problem's candidate has a result or is stale: OK and PENDING are the checks list's)
    state = case((stale, "UNKNOWN"), (c.c.uuid.is_(None), "PENDING"), (c.c.status == 0, "OK"),
                 (c.c.status == 1, "WARNING"), (c.c.status == 2, "CRITICAL"), else_="UNKNOWN")
    rank = case((stale, 3), (c.c.uuid.is_(None), 5), (c.c.status == 0, 6),
                (c.c.status == 1, 4), (c.c.status == 2, 2), else_=3)
    ran = func.coalesce(c.c.started, c.c.last_result)
    if judged:
        evaluated = s.c.last_result.is_not(None)
        soft = case((and_(evaluated, s.c.hard == false()), 1), else_=0)
        since = case((and_(evaluated, s.c.hard == true()), s.c.since), else_=ran)
        problem = case((and_(s.c.hard == true(), s.c.hard_status != 0), s.c.since),
                       else_=null())
        parent = case((and_(column_or_null(conn, s, "unreachable").is_not(None),
                            column_or_null(conn, s, "unreachable") != ""),
                       column_or_null(conn, s, "unreachable")), else_=null())
    else:
        soft, since, problem, parent = literal(0), ran, null().cast(Float), null().cast(String)
    declared = true() if every and not worst else or_(
        select(p.c.uuid).where(p.c.uuid == cand.c.uuid, p.c.name == cand.c.plugin).exists(),
        pages.judged_name(cand.c.plugin))
    return select(
        literal("check").label("kind"), *common, cand.c.plugin.label("name"),
        state.label("state"), rank.label("rank"), soft.label("soft"), since.label("since"),
        problem.label("problem"),
        case((stale, "stale: no result"), else_=c.c.output).label("output"),
        case((stale, 3), else_=c.c.status).label("status"),
        _acked(conn, cand.c.uuid + "/check/" + cand.c.plugin, now).label("acked"),
        parent.label("parent"), host_down.label("host_down")) \
        .select_from(joined) \
        .where(here, declared)


# ---------------------------------------------------------------- downtimes

def _downtimes(conn: Connection, u, now: float, tz=None):
    """Whether a downtime covers a row of ``u`` now (a SQL condition): each downtime that
    may cover something now, its globs as SQL, its time judged here."""
    from sinks.alerting.downtimes import rules
    found = handling.read_downtimes(conn, now)
    dialect = conn.dialect.name
    below = _below(conn, found)
    preds = []
    for d in found:
        if d.removed is not None and now >= d.removed:
            continue
        if d.flexible is None:
            if rules.cover(d, now, None, tz) is None:
                continue
            when = true()
        else:
            windows = rules.occurrences(d, now - d.flexible, now + 1e-6, tz)
            if not windows:
                continue
            started = u.c.problem
            when = and_(started.is_not(None), started <= now, started > now - d.flexible,
                        or_(*(and_(started >= b, started < e) for b, e in windows)))
        pattern = d.host.lower()
        named = or_(glob(u.c.uuid, pattern, dialect, fold=True),
                    glob(u.c.hostname, pattern, dialect, fold=True))
        if below.get(d.id):
            named = or_(named, u.c.hostname.in_(below[d.id]))
        what = true() if d.check is None else \
            and_(u.c.name.is_not(None), glob(u.c.name, d.check, dialect))
        preds.append(and_(named, what, when))
    return or_(*preds) if preds else false()


def _below(conn: Connection, downtimes) -> dict[int, list[str]]:
    """downtime id -> the hostnames a downtime with ``children`` covers as hosts below one
    it names: each host (transitively, :data:`query.fleet.MAX_DEPTH` levels) that declared
    as a parent a host its glob matches (a parent's name as declared, an agent or not).
    The parents are read out of the ``parents`` lists in SQL (JSON in the database's own
    code), level by level from the names the glob matches: a few small queries, where
    decoding every host's list here and building the sinks' dependency graph took half a
    second at 10,000 hosts. A cycle of parents ends where it closes."""
    followed = [d for d in downtimes if d.children]
    if not followed:
        return {}
    from query.fleet import MAX_DEPTH
    a = schema.agents
    each = _parents_of(conn, a.c.parents)
    source = a.join(each, true())
    here = and_(a.c.parents.is_not(None), a.c.hostname.is_not(None),
                column_or_null(conn, a, "gone", Float).is_(None))
    # every parent named (``host`` or ``host/check``), by the host it names
    named: dict[str, list[str]] = {}
    for value in conn.execute(select(each.c.value).distinct().select_from(source)
                              .where(here)).scalars():
        named.setdefault(str(value).split("/", 1)[0], []).append(str(value))
    out = {}
    for d in followed:
        pattern = d.host.lower()
        level = {host for host in named if fnmatchcase(host.lower(), pattern)}
        found: set[str] = set()
        for _ in range(MAX_DEPTH):
            values = sorted(v for host in level for v in named.get(host, ()))
            if not values:
                break
            level = set(conn.execute(select(a.c.hostname).distinct().select_from(source)
                                     .where(here, each.c.value.in_(values))).scalars()) - found
            found |= level
        out[d.id] = sorted(found)
    return out


def _parents_of(conn: Connection, column):
    """``column``'s JSON list as rows (``value``): SQLite's json_each, PostgreSQL's
    json_array_elements_text."""
    if conn.dialect.name == "sqlite":
        return func.json_each(column).table_valued("value").alias("parent")
    return func.json_array_elements_text(column).table_valued("value") \
        .render_derived("parent")


# ---------------------------------------------------------------- the list

def _filtered(conn: Connection, now: float, f: Filter, tz=None,
              uuids: list[str] | None = None, judged: bool = True, hosts_only: bool = False,
              worst: bool = False):
    """(the rows with their handling, as a subquery, and the conditions of ``f``), or
    None when the database has none of the tables yet; of the agents ``uuids`` only, if
    given; of the hosts' own problems only (``hosts_only``); of the checks but the OK
    ones (``worst``, :func:`_worst_first`). Not ``judged``: the rows without their
    handling (which ``f`` must not filter by: ``handled`` all), what ordering and
    counting them needs."""
    u = _rows(conn, now, checks=f.CHECKS, uuids=uuids, hosts_only=hosts_only, worst=worst)
    if u is None:
        return None
    if not judged:
        return u, _conditions(conn, u, f)
    covered = select(u, case((_downtimes(conn, u, now, tz), 1), else_=0).label("downtime")) \
        .subquery("covered")
    # an OK or PENDING check (of the checks list) is no problem: nothing handles it
    handled = and_(covered.c.state.not_in(("OK", "PENDING")),
                   or_(covered.c.acked == true(), covered.c.downtime == 1,
                       covered.c.parent.is_not(None), covered.c.host_down.is_not(None)))
    judged = select(covered, case((handled, 1), else_=0).label("handled")).subquery("judged")
    where = _conditions(conn, judged, f)
    if f.handled != "all":
        where.append(judged.c.handled == (1 if f.handled == "yes" else 0))
    return judged, where


def handled_hosts(conn: Connection, now: float, tz=None):
    """The uuids of the hosts whose own problem (DOWN, UNREACHABLE) is handled, as the
    problems list judges it (acknowledged, in a downtime, or behind a parent that is
    down): a SELECT, for the hosts list's ``handled`` filter; None before any host state."""
    found = _filtered(conn, now, Filter(handled="yes"), tz, hosts_only=True)
    if found is None:
        return None
    judged, where = found
    return select(judged.c.uuid).where(*where)


def hosts(conn: Connection, now: float, *, handled: str = "all", tz=None,
          **kwargs) -> tuple[list[str], int | None]:
    """The hosts list (:func:`query.pages.hosts`, its arguments) with its ``handled``
    filter: yes the hosts :func:`handled_hosts` selects, no every other host, all any.
    The handled hosts are judged once, their uuids given to both the count and the page
    (as a subquery each judged them again: 0.26 s a page at 10,000 hosts on PostgreSQL)."""
    held = handled_hosts(conn, now, tz) if handled in ("yes", "no") else None
    if held is not None:
        found = list(conn.execute(held.limit(HELD_LISTED + 1)).scalars())
        if len(found) <= HELD_LISTED:   # (more, and the subquery again: bound parameters)
            held = found
    return pages.hosts(conn, now, handled=handled, held=held, **kwargs)


#: handled hosts given to the hosts list's queries by their uuids, at most (more: as a
#: subquery, SQLite allowing 32,766 bound parameters a statement)
HELD_LISTED = 2000


def _conditions(conn: Connection, judged, f: Filter) -> list:
    """The conditions of ``f`` but ``handled`` over the rows ``judged``."""
    dialect = conn.dialect.name
    where = []
    if f.states:
        where.append(judged.c.state.in_(f.states))
    if f.host:
        where.append(or_(glob(judged.c.hostname, f.host, dialect, fold=True),
                         glob(judged.c.uuid, f.host, dialect, fold=True)))
    if f.check:
        where.append(glob(judged.c.name, f.check, dialect))
    if f.parent:
        where.append(declares(judged.c.parents, f.parent))
    if f.site:
        where.append(judged.c.site == f.site)
    if f.text:
        where.append(or_(*(column.ilike(f"%{like_escaped(f.text)}%", escape="\\")
                           for column in (judged.c.hostname, judged.c.name,
                                          judged.c.output))))
    return where


def _order(j, sort: str) -> list:
    """The ORDER BY of ``sort`` then the default order (worst first, newest first, names)."""
    since = func.coalesce(j.c.since, 0.0)
    default = [j.c.rank, j.c.soft, since.desc(), func.coalesce(j.c.hostname, ""), j.c.uuid,
               func.coalesce(j.c.name, "")]
    key = sort.lstrip("-")
    first = {"state": None, "since": since, "hostname": func.coalesce(j.c.hostname, ""),
             "check": func.coalesce(j.c.name, ""),
             "output": func.coalesce(j.c.output, "")}[key]
    if first is None:
        if sort.startswith("-"):
            return [j.c.rank.desc(), j.c.soft.desc(), since] + default[3:]
        return default
    return [first.desc() if sort.startswith("-") else first] + default


def _group(conn: Connection, j, group: str):
    """(the source with one row per group a problem is in, the group's name as SQL)."""
    if group == "host":
        return j, func.coalesce(j.c.hostname, j.c.uuid)
    if group == "site":
        return j, func.coalesce(j.c.site, "")
    # a host with several parents is in each of their groups; one without, in ""
    each = _parents_of(conn, j.c.parents)
    return j.outerjoin(each, true()), func.coalesce(each.c.value, "")


COLUMNS = ("kind", "uuid", "hostname", "name", "state", "since", "status", "output",
           "acked", "downtime", "parent", "host_down", "handled")


def page(conn: Connection, now: float, f: Filter = Filter(), offset: int = 0,
         limit: int = 100, tz=None) -> Page:
    """One page of the problems ``f`` shows, in its order (its groups first, by name).

    The page and how many match are one query (a window over the rows filtered). When
    ``f`` does not filter by handling (``handled`` all: the checks list's default), that
    query leaves the handling out, and the page's rows alone are judged after it: judging
    every one of 50,000 checks (its acknowledgement, each downtime's globs) to show 100
    took seconds on SQLite. The checks list worst first reads the checks that are not OK
    alone while its page is among them (:func:`_worst_first`)."""
    lean = f.handled == "all"
    worst = _worst_first(conn, now, f, tz, offset, limit) if lean else None
    if worst is not None:
        found_rows, total = worst
    else:
        found = _filtered(conn, now, f, tz, judged=not lean)
        if found is None:
            return Page([], 0, {})
        j, where = found
        source, name = _group(conn, j, f.group) if f.group else (j, literal(""))
        order = ([name] if f.group else []) + _order(j, f.sort)
        in_group = func.count().over(partition_by=name) if f.group else literal(0)
        columns = KEY if lean else COLUMNS
        stmt = select(*(j.c[c] for c in columns), name.label("grouped"),
                      func.count().over().label("matching"), in_group.label("in_group")) \
            .select_from(source).where(*where).order_by(*order).offset(offset).limit(limit)
        found_rows = [dict(r._mapping) for r in conn.execute(stmt)]
        if found_rows:
            total = found_rows[0]["matching"]
        elif offset:
            total = conn.execute(select(func.count()).select_from(source)
                                 .where(*where)).scalar_one()
        else:
            total = 0
    if lean and found_rows:
        judged = _judged(conn, now, f, tz, found_rows, worst=worst is not None)
        found_rows = [{**judged[tuple(r[k] for k in KEY)], **r} for r in found_rows
                      if tuple(r[k] for k in KEY) in judged]
    groups = {r["grouped"]: r["in_group"] for r in found_rows} if f.group else {}
    rows = []
    for row in found_rows:
        del row["matching"], row["in_group"]
        row["acked"], row["handled"] = bool(row["acked"]), bool(row["handled"])
        row["downtime"] = bool(row["downtime"])
        row["group"] = row.pop("grouped") if f.group else None
        rows.append(row)
    return Page(rows, total, groups)


#: what identifies a row of the list
KEY = ("kind", "uuid", "name")


def _worst_first(conn: Connection, now: float, f: Filter, tz, offset: int,
                 limit: int) -> tuple[list[dict], int] | None:
    """A page of the checks list in its default order (worst first) read from the checks
    that are not OK alone, when they make it: the rows (as :func:`page` reads them, lean)
    and how many match; None when they do not (another order, groups, a page past them
    that a filter leaves OK checks in).

    Worst first puts every check that is not OK (CRITICAL, stale, WARNING, PENDING)
    before every OK one, so while a page ends among them, or the filter leaves no OK
    check, the OK ones need not be read: ordering and counting all 50,000 checks of
    10,000 hosts in SQL took 0.3 s on SQLite, their candidates (a check's status, its
    staleness, a check declared without a result) a few milliseconds. Unfiltered, the
    OK ones are counted only: every check declared by a host that is here."""
    only_worse = bool(f.states) and "OK" not in f.states
    if not (f.CHECKS and f.sort == "state" and not f.group) or \
            (f.narrowed and not only_worse):
        return None
    found = _filtered(conn, now, f, tz, judged=False, worst=True)
    if found is None:
        return None
    j, where = found
    stmt = select(*(j.c[c] for c in KEY), literal("").label("grouped"),
                  func.count().over().label("matching"), literal(0).label("in_group")) \
        .where(*where).order_by(*_order(j, f.sort)).limit(offset + limit)
    rows = [dict(r._mapping) for r in conn.execute(stmt)]
    worse = rows[0]["matching"] if rows else 0
    if only_worse:
        return rows[offset:], worse
    if offset + limit > worse:
        return None                     # the page reaches the OK checks: all are ordered
    return rows[offset:], _declared_checks(conn)


def _declared_checks(conn: Connection) -> int:
    """How many checks the checks list has unfiltered: each declared by a host that is
    here (not deregistered), and each the alerting sinks judge of such a host."""
    a, c, p = schema.agents, schema.checks, schema.plugins
    # (IN, not a join: SQLite made the join of the distinct pairs 50 ms, this 30)
    here = select(a.c.uuid).where(column_or_null(conn, a, "gone", Float).is_(None))
    pairs = union(select(p.c.uuid, p.c.name).where(p.c.uuid.in_(here)),
                  select(c.c.uuid, c.c.plugin).where(pages.judged_name(c.c.plugin),
                                                     c.c.uuid.in_(here))) \
        .subquery("declared")
    return conn.execute(select(func.count()).select_from(pairs)).scalar_one()


def _judged(conn: Connection, now: float, f: Filter, tz, keys: list[dict],
            worst: bool = False) -> dict:
    """(kind, uuid, name) -> the row with its handling (:data:`COLUMNS`), of the rows
    ``keys`` only: the page's agents' rows judged (``worst``: their checks that are not
    OK, the rows :func:`_worst_first` chose from), the others left out."""
    j, where = _filtered(conn, now, f, tz, uuids=sorted({k["uuid"] for k in keys}),
                         worst=worst)
    wanted = {tuple(k[c] for c in KEY) for k in keys}
    out = {}
    for r in conn.execute(select(*(j.c[c] for c in COLUMNS)).where(*where)):
        row = dict(r._mapping)
        key = tuple(row[c] for c in KEY)
        if key in wanted:
            out[key] = row
    return out


def counts(conn: Connection, now: float, tz=None) -> dict[tuple[str, str], tuple[int, int]]:
    """(kind, state) -> (how many unhandled, how many handled) of every problem: the
    overview's tactical summary in one GROUP BY over the rows :func:`page` lists."""
    found = _filtered(conn, now, Filter(handled="all"), tz)
    if found is None:
        return {}
    j, where = found
    out: dict[tuple[str, str], list[int]] = {}
    for kind, state, handled, n in conn.execute(
            select(j.c.kind, j.c.state, j.c.handled, func.count()).where(*where)
            .group_by(j.c.kind, j.c.state, j.c.handled)):
        out.setdefault((kind, state), [0, 0])[1 if handled else 0] += n
    return {k: (v[0], v[1]) for k, v in out.items()}


def listed(conn: Connection, now: float, f: Filter = Filter(), offset: int = 0,
           limit: int = 100, tz=None) -> Page:
    """:func:`page`, each row the problem as :func:`query.handling.problems` makes it (the
    details a list shows: its type, attempt, output, how it is handled), with its
    ``group``: the page's agents and checks read and judged (:func:`query.fleet.read`). A
    row that changed between the two reads is shown as the list read it. The checks list's
    rows (:class:`CheckFilter`) are the checks as :func:`query.fleet.assemble` makes them,
    with the state and handling the list judged (``handled``: the reasons, or None)."""
    from fleetwatch.display import iso
    from query import fleet
    found = page(conn, now, f, offset, limit, tz)
    if not found.rows:
        return found
    judged = fleet.assemble(fleet.read(conn, now, *scope(found.rows)), now)
    if f.CHECKS:
        by_pair = {(c["uuid"], c["plugin"]): c for c in judged["checks"]}
        by_key = {key(p): p for p in judged["problems"]}
        rows = []
        for r in found.rows:
            check = by_pair.get((r["uuid"], r["name"])) or _as_read(r)
            problem = by_key.get(key(r))
            rows.append({**check, "kind": "check", "check": r["name"], "plugin": r["name"],
                         "state": r["state"], "since": iso(r["since"]), "group": r["group"],
                         "handled": problem["handled"] if problem else None})
        return Page(rows, found.total, found.groups)
    by_key = {key(p): p for p in judged["problems"]}
    rows = []
    for r in found.rows:
        shown = by_key.get(key(r)) or _as_read(r)
        rows.append({**shown, "group": r["group"]})
    return Page(rows, found.total, found.groups)


def _as_read(r: dict) -> dict:
    from fleetwatch.display import iso
    return {"kind": r["kind"], "uuid": r["uuid"], "hostname": r["hostname"],
            "check": r["name"] if r["kind"] == "check" else None,
            "process": r["name"] if r["kind"] == "process" else None, "state": r["state"],
            "status": r["status"], "state_type": None, "flapping": None, "attempt": None,
            "max_attempts": None, "since": iso(r["since"]), "output": r["output"],
            "handled": None}


def scope(rows: list[dict]) -> tuple[list[str], list[tuple[str, str]]]:
    """The agents and checks a page's rows need read (:func:`query.fleet.read`) for their
    details."""
    uuids = sorted({r["uuid"] for r in rows})
    pairs = sorted({(r["uuid"], r["name"]) for r in rows if r["kind"] == "check"})
    return uuids, pairs


def key(row: dict) -> tuple:
    """What identifies a problem: (kind, uuid, the check or process); the same for a row
    of :func:`page` and one of :func:`query.handling.problems`."""
    if "kind" in row and "name" in row and "check" not in row:
        return (row["kind"], row["uuid"], row["name"])
    return (row["kind"], row["uuid"], row.get("check") or row.get("process"))
