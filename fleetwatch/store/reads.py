"""The readers of the state database: plain functions of a connection, returning rows as dicts.

Each takes an open :class:`~sqlalchemy.engine.Connection` (and its own keyword arguments)
and tolerates a database whose tables do not exist yet (no owner has run): it reads as
empty. The operator commands and the scheduler call them through
:class:`fleetwatch.store.reader.Reader` (``reader.read(reads.agents)``), which opens the
connection and turns database errors into one-line messages; a sink or a test with a
connection of its own calls them directly.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from sqlalchemy import and_, exists, func, inspect, null, select, true, tuple_
from sqlalchemy.engine import Connection

from fleetwatch.store import schema
from fleetwatch.store.db import has_tables, known

#: the event dict's fields that have a column of ``alert_events`` (``check``: ``check_name``);
#: the others are kept in its ``details``
EVENT_FIELDS = ("key", "kind", "action", "severity", "uuid", "hostname", "check", "status",
                "summary", "text", "created")


def present(conn: Connection, table) -> tuple[list, list[str]]:
    """The columns of ``table`` the database has, and the names of those it lacks yet (a
    database an older version made, before an owner started and added them): a reader
    selects the first and reads the others as None."""
    _, whole = known(conn)
    if table.name in whole:
        return list(table.columns), []
    have = {c["name"] for c in inspect(conn).get_columns(table.name)}
    missing = [c.name for c in table.columns if c.name not in have]
    if not missing:
        whole.add(table.name)
    return [c for c in table.columns if c.name in have], missing


#: a scope: the uuids of the agents to read (None: every agent)
Uuids = Sequence[str] | None
#: a scope of checks: (uuid, plugin) pairs (None: every check of the agents in scope)
Pairs = Sequence[tuple[str, str]] | None


def scoped(stmt, table, uuids: Uuids = None, pairs: Pairs = None, name: str = "plugin"):
    """``stmt`` cut to the agents ``uuids`` and the checks ``pairs`` (``name``: the column
    of the check's name in ``table``), as the console reads one page of the fleet."""
    if uuids is not None:
        stmt = stmt.where(table.c.uuid.in_(list(uuids)))
    if pairs is not None:
        stmt = stmt.where(tuple_(table.c.uuid, table.c[name]).in_(list(pairs)))
    return stmt


def _dicts(result, extra: dict | None = None) -> list[dict]:
    """A result's rows as dicts (zipped with its keys: a third of ``dict(row._mapping)``'s
    cost, which counts at 50,000 checks), each with ``extra``."""
    keys = list(result.keys())
    if extra:
        return [{**dict(zip(keys, r)), **extra} for r in result]
    return [dict(zip(keys, r)) for r in result]


def _rows(conn: Connection, table, where=None, order=(), uuids: Uuids = None,
          pairs: Pairs = None) -> list[dict]:
    columns, missing = present(conn, table)
    stmt = scoped(select(*columns).order_by(*order), table, uuids, pairs)
    if where is not None:
        stmt = stmt.where(where)
    return _dicts(conn.execute(stmt), dict.fromkeys(missing))


def agents(conn: Connection, gone: bool = False, uuids: Uuids = None) -> list[dict]:
    """Every agent the registry knows (those of ``uuids``): uuid, hostname, version,
    first/last seen, the parents it declared, ephemeral, routers; not those deregistered
    (``agents.gone``) unless ``gone``."""
    if not has_tables(conn, "agents"):
        return []
    rows = _rows(conn, schema.agents, uuids=uuids)
    out = {r["uuid"]: dict(r, routers={}) for r in rows if gone or r.get("gone") is None}
    if has_tables(conn, "agent_routers"):
        routers = schema.agent_routers
        for r in conn.execute(scoped(select(routers), routers, uuids)):
            if r.uuid in out:
                out[r.uuid]["routers"][r.router] = r.last_seen
    return list(out.values())


def alerts(conn: Connection, limit: int | None = 50,
           severities: Sequence[str] | None = None, uuid: str | None = None,
           msg_ids: Sequence[str] | None = None) -> list[dict]:
    """The latest notifications (of the agent ``uuid``; those of ``msg_ids``), newest
    first; hostname the registry's (``agents``, from the agent's HELLO), the one sent with
    the notification only while the registry has none."""
    if not has_tables(conn, "notifications"):
        return []
    n, a = schema.notifications, schema.agents
    if has_tables(conn, "agents"):
        stmt = select(n, a.c.hostname.label("agent_hostname")).outerjoin(a, a.c.uuid == n.c.uuid)
    else:
        stmt = select(n)
    if severities is not None:
        stmt = stmt.where(n.c.severity.in_(list(severities)))
    if uuid is not None:
        stmt = stmt.where(n.c.uuid == uuid)
    if msg_ids is not None:
        stmt = stmt.where(n.c.msg_id.in_(list(msg_ids)))
    stmt = stmt.order_by(n.c.received_at.desc(), n.c.msg_id).limit(limit)
    rows = []
    for r in conn.execute(stmt):
        row = dict(r._mapping)
        registered = row.pop("agent_hostname", None)
        row["hostname"] = registered or row["hostname"]
        rows.append(row)
    return rows


def as_event(row) -> dict:
    """An ``alert_events`` row back as the event dict the channels format."""
    m = row._mapping if hasattr(row, "_mapping") else row
    event = {k: m[k] for k in EVENT_FIELDS if k != "check" and k in m}
    event["check"] = m["check_name"]
    event.update(m.get("details") or {})
    return event


def alert_events(conn: Connection, limit: int | None = 50,
                 severities: Sequence[str] | None = None, uuid: str | None = None,
                 ids: Sequence[int] | None = None) -> list[dict]:
    """The latest alert events (of the agent ``uuid``; those of ``ids``), newest first,
    each with ``deliveries``: one per channel (channel, state, attempts, sent_at,
    next_attempt, last_error)."""
    if not has_tables(conn, "alert_events", "outbox"):
        return []
    e, o = schema.alert_events, schema.outbox
    stmt = select(e).order_by(e.c.created.desc(), e.c.id.desc()).limit(limit)
    if severities is not None:
        stmt = stmt.where(e.c.severity.in_(list(severities)))
    if uuid is not None:
        stmt = stmt.where(e.c.uuid == uuid)
    if ids is not None:
        stmt = stmt.where(e.c.id.in_(list(ids)))
    events = []
    for r in conn.execute(stmt):
        event = as_event(r)
        event["id"] = r.id
        event["deliveries"] = []
        events.append(event)
    by_id = {event["id"]: event for event in events}
    if by_id:
        rows = conn.execute(select(o).where(o.c.event_id.in_(list(by_id))).order_by(o.c.id))
        for r in rows:
            pending = r.state == "pending"
            by_id[r.event_id]["deliveries"].append({
                "channel": r.channel, "state": r.state, "attempts": r.attempts,
                "sent_at": r.sent_at, "next_attempt": r.next_attempt if pending else None,
                "last_error": r.last_error})
    return events


DELIVERY_FIELDS = ("id", "started", "channel", "event_id", "outbox_id", "key", "action",
                   "hostname", "check_name", "attempt", "grouped", "outcome", "status",
                   "message_id", "latency", "answer", "worker")


def deliveries(conn: Connection, limit: int | None = 50, channel: str | None = None,
               event_ids: Sequence[int] | None = None) -> tuple[list[dict], int]:
    """(the latest attempts to send an alert (to ``channel``; of the events
    ``event_ids``), newest first, at most ``limit``; how many match in all): the
    ``deliveries`` table, what each service answered (:data:`DELIVERY_FIELDS`)."""
    if not has_tables(conn, "deliveries"):
        return [], 0
    d = schema.deliveries
    where = []
    if channel is not None:
        where.append(d.c.channel == channel)
    if event_ids is not None:
        where.append(d.c.event_id.in_(list(event_ids)))
    total = conn.execute(select(func.count()).select_from(d).where(*where)).scalar_one()
    stmt = select(*(d.c[f] for f in DELIVERY_FIELDS)).where(*where) \
        .order_by(d.c.started.desc(), d.c.id.desc()).limit(limit)
    return [dict(r._mapping) for r in conn.execute(stmt)], total


CHANNEL_FIELDS = ("name", "type", "state", "since", "failures", "last_ok", "last_attempt",
                  "last_status", "last_error", "fallback", "configured")


def channels(conn: Connection) -> list[dict]:
    """Each alert channel's health as the alerting sinks judged it (the ``channels`` table:
    :mod:`sinks.alerting.delivery.health`), by name."""
    if not has_tables(conn, "channels"):
        return []
    t = schema.channels
    return [dict(r._mapping) for r in conn.execute(
        select(*(t.c[f] for f in CHANNEL_FIELDS)).order_by(t.c.name))]


def kept_back(conn: Connection, keys: Sequence[str]) -> dict[str, dict]:
    """key -> what kept that alert back, for the keys a silence muted (``suppressed``:
    {"silence": ID}) or a downtime held (``downtime_suppressed``: {"downtime": ID})."""
    out: dict[str, dict] = {}
    keys = sorted(set(keys))
    for name, by, what in (("suppressed", "silence_id", "silence"),
                           ("downtime_suppressed", "downtime_id", "downtime")):
        if not keys or not has_tables(conn, name):
            continue
        t = schema.metadata.tables[name]
        for r in conn.execute(select(t.c.key, t.c[by]).where(t.c.key.in_(keys))
                              .order_by(t.c[by])):
            out.setdefault(r.key, {what: r[1]})
    return out


def alert_total(conn: Connection, severities: Sequence[str] | None = None,
                uuid: str | None = None) -> int:
    """How many alerts ``fleetwatch alerts --limit 0`` lists (of the agent ``uuid``): every
    alert event, and every notification that no event was made of (``key``
    ``UUID/notify/MSG_ID``)."""
    e, n = schema.alert_events, schema.notifications
    total, events = 0, has_tables(conn, "alert_events", "outbox")     # as alert_events()
    if events:
        stmt = select(func.count()).select_from(e)
        if severities is not None:
            stmt = stmt.where(e.c.severity.in_(list(severities)))
        if uuid is not None:
            stmt = stmt.where(e.c.uuid == uuid)
        total += conn.execute(stmt).scalar_one()
    if has_tables(conn, "notifications"):
        stmt = select(func.count()).select_from(n)
        if severities is not None:
            stmt = stmt.where(n.c.severity.in_(list(severities)))
        if uuid is not None:
            stmt = stmt.where(n.c.uuid == uuid)
        if events:
            stmt = stmt.where(~exists().where(and_(
                e.c.kind == "notify", e.c.key == n.c.uuid + "/notify/" + n.c.msg_id)))
        total += conn.execute(stmt).scalar_one()
    return total


def plugins(conn: Connection, uuids: Uuids = None, pairs: Pairs = None) -> list[dict]:
    """Every declared plugin (in scope): uuid, source, name, spec (interval, timeout...),
    declared_at."""
    if not has_tables(conn, "plugins"):
        return []
    t = schema.plugins
    stmt = scoped(select(t).order_by(t.c.uuid, t.c.name, t.c.source), t, uuids, pairs, "name")
    return _dicts(conn.execute(stmt))


def gone(conn: Connection) -> set[str]:
    """The uuids of the agents that left: deregistered (``agents.gone``), or judged GONE by
    the alerting sinks (``host_state.gone``: also ephemeral ones gone silent). Nothing is
    scheduled for them (:func:`scheduler.service.read_registry`)."""
    out: set[str] = set()
    for table, where in ((schema.agents, None), (schema.host_state, "")):
        if not has_tables(conn, table.name) or present(conn, table)[1].count("gone"):
            continue
        stmt = select(table.c.uuid).where(table.c.gone.is_not(None))
        if where is not None:
            stmt = stmt.where(table.c.name == where)
        out.update(conn.execute(stmt).scalars())
    return out


def checks(conn: Connection, uuid: str | None = None, uuids: Uuids = None,
           pairs: Pairs = None) -> list[dict]:
    """The latest result of every check (of one agent if ``uuid``; in scope), by uuid and
    plugin."""
    if not has_tables(conn, "checks"):
        return []
    t = schema.checks
    stmt = scoped(select(t).order_by(t.c.uuid, t.c.plugin), t, uuids, pairs)
    if uuid is not None:
        stmt = stmt.where(t.c.uuid == uuid)
    return _dicts(conn.execute(stmt))


def judged(conn: Connection, prefix: str, since: float) -> list[dict]:
    """The latest result of the checks named ``prefix...`` (``rule:``: the rules on series'
    results, which the alerting sinks write) judged at ``since`` or later, each with its
    agent's ``hostname`` and ``site`` (None when the registry has not named it): uuid,
    plugin, status, last_result, hostname, site."""
    if not has_tables(conn, "checks", "agents"):
        return []
    t, a = schema.checks, schema.agents
    have = {c.name for c in present(conn, a)[0]}
    site = a.c.site if "site" in have else null()
    here = a.c.gone.is_(None) if "gone" in have else true()
    return _dicts(conn.execute(
        select(t.c.uuid, t.c.plugin, t.c.status, t.c.last_result, a.c.hostname,
               site.label("site"))
        .select_from(t.outerjoin(a, and_(a.c.uuid == t.c.uuid, here)))
        .where(t.c.plugin.startswith(prefix, autoescape=True), t.c.last_result >= since)
        .order_by(t.c.uuid, t.c.plugin)))


def check_state(conn: Connection, uuids: Uuids = None, pairs: Pairs = None) -> list[dict]:
    """The Nagios state of every check the alerting sinks evaluated (``check_state``);
    ``unreachable``: the parent holding its problem back, None when none (or not recorded
    by this database yet)."""
    if not has_tables(conn, "check_state"):
        return []
    t = schema.check_state
    return _rows(conn, t, order=(t.c.uuid, t.c.plugin), uuids=uuids, pairs=pairs)


def host_state(conn: Connection, uuids: Uuids = None) -> list[dict]:
    """UP/DOWN of every agent ("" name) and heartbeating local process (``host_state``);
    ``unreachable``: the parent that makes a silent agent UNREACHABLE, as in
    :func:`check_state`."""
    if not has_tables(conn, "host_state"):
        return []
    t = schema.host_state
    return _rows(conn, t, t.c.last_heard > 0, (t.c.uuid, t.c.name), uuids)


def silences(conn: Connection, now: float | None = None, ended: bool = False) -> list[dict]:
    """Silences, newest first: those still running at ``now`` (all if ``ended``), each
    with ``suppressed``: how many distinct alerts it muted."""
    if not has_tables(conn, "silences"):
        return []
    t, muted = schema.silences, schema.suppressed
    now = time.time() if now is None else now
    stmt = select(t).order_by(t.c.id.desc())
    if not ended:
        stmt = stmt.where(t.c.until > now, t.c.removed.is_(None))
    rows = _dicts(conn.execute(stmt))
    counts: dict[int, int] = {}
    if rows and has_tables(conn, "suppressed"):
        counts = dict(conn.execute(
            select(muted.c.silence_id, func.count())
            .where(muted.c.silence_id.in_([r["id"] for r in rows]))
            .group_by(muted.c.silence_id)).all())
    for row in rows:
        row["suppressed"] = counts.get(row["id"], 0)
    return rows


def acknowledgements(conn: Connection, now: float | None = None,
                     ended: bool = False, uuids: Uuids = None) -> list[dict]:
    """Acknowledgements (of the agents ``uuids``), newest first: those running at ``now``
    (all if ``ended``). One whose expiry has passed counts as ended even before a sink's
    tick has marked it."""
    if not has_tables(conn, "acknowledgements"):
        return []
    t = schema.acknowledgements
    stmt = scoped(select(t).order_by(t.c.id.desc()), t, uuids)
    if not ended:
        now = time.time() if now is None else now
        stmt = stmt.where(t.c.ended.is_(None), (t.c.expire.is_(None)) | (t.c.expire > now))
    return _dicts(conn.execute(stmt))


def check_freshness(conn: Connection, uuids: Uuids = None, pairs: Pairs = None) -> list[dict]:
    """When each check (in scope) was last heard (the alerting sinks' clock) and since when
    it is stale (``stale_at``; None: not stale), from ``check_freshness``."""
    if not has_tables(conn, "check_freshness"):
        return []
    t = schema.check_freshness
    stmt = scoped(select(t).order_by(t.c.uuid, t.c.plugin), t, uuids, pairs)
    return _dicts(conn.execute(stmt))


def downtimes(conn: Connection, now: float | None = None, ended: bool = False) -> list[dict]:
    """Downtimes, newest first: those not removed and not over at ``now`` (all if
    ``ended``), each with ``held``: how many distinct alerts it held back."""
    if not has_tables(conn, "downtimes"):
        return []
    t, held = schema.downtimes, schema.downtime_suppressed
    now = time.time() if now is None else now
    stmt = select(t).order_by(t.c.id.desc())
    if not ended:
        stmt = stmt.where(t.c.removed.is_(None), t.c.end.is_(None)
                          | (t.c.end + func.coalesce(t.c.flexible, 0.0) > now))
    rows = _dicts(conn.execute(stmt))
    counts: dict[int, int] = {}
    if rows and has_tables(conn, "downtime_suppressed"):
        counts = dict(conn.execute(
            select(held.c.downtime_id, func.count())
            .where(held.c.downtime_id.in_([r["id"] for r in rows]))
            .group_by(held.c.downtime_id)).all())
    for row in rows:
        row["held"] = counts.get(row["id"], 0)
    return rows
