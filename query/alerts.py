"""The alerts list in SQL: every alert the alerting sinks recorded as one row, filtered,
sorted and cut to a page by the database, for ``fleetwatch alerts``, the console's alerts
page and the API.

An alert is an event of the outbox (``alert_events``) or a recorded NOTIFY that no event
was made of (``notifications`` without an event of key ``UUID/notify/MSG_ID``), as
:mod:`fleetwatch.actions.alerts` merges them; here both are one ``UNION ALL``, each row
naming where it came from (``event`` and its id, or ``notify`` and its msg_id) and its
``key``, so that the page's rows are then read whole
(:func:`fleetwatch.actions.alerts.gather`). A notification's hostname is the registry's
(from the agent's HELLO) while it has one, as :func:`fleetwatch.store.reads.alerts` says
it; an event's is the one it was made with.

The default order is the newest first; by severity the worst first (a check's UNKNOWN with
error, OK with info: :data:`fleetwatch.actions.alerts.RANK`), then the newest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import Integer, String, and_, case, exists, func, literal, null, or_, \
    select, union_all
from sqlalchemy.engine import Connection

from fleetwatch.protocol import SEVERITIES
from fleetwatch.store import schema
from fleetwatch.store.db import has_tables
from query import filters
from query.globbing import glob
from query.pages import like_escaped

#: the severities an alert may have: the NOTIFY ones and the checks' ok and unknown
KNOWN = SEVERITIES + ("ok", "unknown")
#: each severity's weight (higher: worse), as ``alerts --severity`` ranks them
RANK = {**{s: i for i, s in enumerate(SEVERITIES)}, "ok": 1, "unknown": 3}
#: the orders of the list (``-NAME``: the other way): ``received`` the newest first,
#: ``severity`` the worst first
SORTS = ("received", "severity", "hostname", "check")
#: each field of a filter by its name in a URL (``uuid`` is not in one: ``host`` says it)
URL_NAMES = {"severities": "severity", "host": "host", "check": "check", "text": "q",
             "sort": "sort"}


@dataclass(frozen=True)
class AlertFilter:
    """Which alerts a list shows: of ``severities`` (none: any), of the agent ``uuid``
    (exactly: ``alerts`` of one host), of hosts whose hostname or uuid matches the glob
    ``host`` (ignoring case), of checks matching the glob ``check``, with ``text`` in the
    hostname, the check's name or the alert's text (ignoring case); in the order ``sort``."""
    severities: tuple[str, ...] = ()
    uuid: str = ""
    host: str = ""
    check: str = ""
    text: str = ""
    sort: str = "received"

    @classmethod
    def parse(cls, params: Mapping) -> AlertFilter:
        """The filter a URL's query says (``severity`` repeated or comma-separated,
        ``host``, ``check``, ``q``, ``sort``); a ValueError saying the first value that is
        not one."""
        return cls(filters.words(params, "severity", KNOWN, str.lower), "",
                   filters.line(params, "host"), filters.line(params, "check"),
                   filters.line(params, "q"),
                   filters.order(filters.line(params, "sort") or "received", SORTS))

    def query(self, **changes) -> list[tuple[str, str]]:
        """The URL query of this filter (with ``changes``), its defaults left out."""
        return filters.url_query(self, URL_NAMES, **changes)

    @property
    def narrowed(self) -> bool:
        return any((self.severities, self.uuid, self.host, self.check, self.text))


def _rows(conn: Connection):
    """Every alert as a row (a UNION ALL subquery): ``source`` (event, notify), ``ref`` (the
    event's id or the notification's msg_id, as text), ``key``, ``received``, ``severity``,
    ``uuid``, ``hostname``, ``name`` (the check), ``text``; None without the tables."""
    parts = []
    events = has_tables(conn, "alert_events", "outbox")     # as reads.alert_events
    e = schema.alert_events
    if events:
        parts.append(select(
            literal("event").label("source"), e.c.id.cast(String).label("ref"),
            e.c.key.label("key"), e.c.created.label("received"), e.c.severity.label("severity"),
            e.c.uuid.label("uuid"), e.c.hostname.label("hostname"),
            e.c.check_name.label("name"), e.c.summary.label("text"), e.c.id.label("event_id")))
    if has_tables(conn, "notifications"):
        n, a = schema.notifications, schema.agents
        key = n.c.uuid + "/notify/" + n.c.msg_id
        if has_tables(conn, "agents"):
            source = n.outerjoin(a, a.c.uuid == n.c.uuid)
            hostname = func.coalesce(a.c.hostname, n.c.hostname)
        else:
            source, hostname = n, n.c.hostname
        stmt = select(
            literal("notify").label("source"), n.c.msg_id.label("ref"), key.label("key"),
            n.c.received_at.label("received"), n.c.severity.label("severity"),
            n.c.uuid.label("uuid"), hostname.label("hostname"),
            null().cast(String).label("name"), n.c.text.label("text"),
            null().cast(Integer).label("event_id")).select_from(source)
        if events:
            stmt = stmt.where(~exists().where(and_(e.c.kind == "notify", e.c.key == key)))
        parts.append(stmt)
    if not parts:
        return None
    return union_all(*parts).subquery("alert")


def _where(u, f: AlertFilter, dialect: str) -> list:
    where = []
    if f.severities:
        where.append(u.c.severity.in_(f.severities))
    if f.uuid:
        where.append(u.c.uuid == f.uuid)
    if f.host:
        where.append(or_(glob(u.c.hostname, f.host, dialect, fold=True),
                         glob(u.c.uuid, f.host, dialect, fold=True)))
    if f.check:
        where.append(and_(u.c.name.is_not(None), glob(u.c.name, f.check, dialect)))
    if f.text:
        pattern = f"%{like_escaped(f.text)}%"
        where.append(or_(*(column.ilike(pattern, escape="\\")
                           for column in (u.c.hostname, u.c.name, u.c.text))))
    return where


def _order(u, sort: str) -> list:
    newest = [u.c.received.desc(), u.c.source, u.c.event_id.desc(), u.c.ref]
    key = sort.lstrip("-")
    backwards = sort.startswith("-")
    if key == "received":
        return [u.c.received.asc() if backwards else u.c.received.desc()] + newest[1:]
    if key == "severity":
        rank = case(RANK, value=u.c.severity, else_=0)
        first = rank.asc() if backwards else rank.desc()
    else:
        column = func.coalesce(u.c.hostname if key == "hostname" else u.c.name, "")
        first = column.desc() if backwards else column
    return [first] + newest


@dataclass
class Page:
    """One page of alerts: ``refs`` ((source, ref, key) in the list's order: ``event`` and
    the event's id, or ``notify`` and the msg_id) and how many match in all (``total``)."""
    refs: list[tuple[str, str, str]]
    total: int


def page(conn: Connection, f: AlertFilter = AlertFilter(), offset: int = 0,
         limit: int | None = 100) -> Page:
    """The alerts ``f`` shows from ``offset``, at most ``limit`` (None: all), and how
    many match: one query, the count a window over the rows filtered."""
    u = _rows(conn)
    if u is None:
        return Page([], 0)
    where = _where(u, f, conn.dialect.name)
    stmt = select(u.c.source, u.c.ref, u.c.key, func.count().over().label("matching")) \
        .where(*where).order_by(*_order(u, f.sort)).offset(offset)
    if limit is not None:
        stmt = stmt.limit(limit)
    rows = conn.execute(stmt).all()
    if rows:
        total = rows[0].matching
    elif offset:
        total = conn.execute(select(func.count()).select_from(u).where(*where)).scalar_one()
    else:
        total = 0
    return Page([(r.source, r.ref, r.key) for r in rows], total)
