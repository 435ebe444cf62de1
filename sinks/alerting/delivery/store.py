"""The alert outbox: alerts recorded in the state database first, delivered from there.

Two tables of the state database (:mod:`fleetwatch.store.schema`), created with the alerting
sink's others and read by :func:`fleetwatch.store.reads.alert_events`:

``alert_events``  one row per alert event (the event dict of :mod:`.events`), whatever its
                  channels
``outbox``        one row per (event, channel): ``pending`` until ``sent``, or ``failed``

:func:`enqueue` runs inside the evaluation's own transaction, so a state change and its
alert commit together or not at all. The deliverer (:mod:`sinks.alerting.delivery.deliverer`) then
:func:`claim` s due rows in a short transaction: a conditional UPDATE sets ``claimed_by``
and ``lease_until``, so two sinks on one database never hold the same row, and a crashed
sink's claim simply expires. Rows of one (key, channel) go out in order: a row waits while
an earlier one of its key and channel is pending, so a resolve never overtakes its trigger.
A channel with ``group_wait`` (:mod:`sinks.alerting.delivery.grouping`) has its rows claimed with
the rest of their group, all in the one transaction.

Marking a row (:func:`mark`) requires the claim to still be ours; the deliverer sends only
while its lease has room for the channel's timeout, so a row is sent once unless a sink dies
between the server's "accepted" and the commit of "sent" (then at least once).
"""

from __future__ import annotations

import functools
import logging
import time

from sqlalchemy import (and_, bindparam, delete, exists, func, insert, or_, select, text,
                        update)
from sqlalchemy.engine import Connection

from fleetwatch.store import db
from fleetwatch.store.reads import EVENT_FIELDS, as_event
from fleetwatch.store.schema import ID, KEY, alert_events, deliveries, outbox
from sinks.alerting.delivery import grouping
from sinks.alerting.delivery.rules import route

log = logging.getLogger(__name__)

PENDING, SENT, FAILED = "pending", "sent", "failed"
#: an event's actions: a problem, its acknowledgement (:mod:`.acks`), its end
ACTIONS = ("trigger", "acknowledge", "resolve")
#: the PostgreSQL advisory lock under which sinks claim grouped channels' rows
GROUP_LOCK = 0x666C6F7767727031


def _text(value, limit: int | None = None) -> str | None:
    if value is None:
        return None
    value = value if isinstance(value, str) else str(value)
    return value[:limit] if limit else value


def event_row(event: dict, now: float) -> dict:
    """The ``alert_events`` row of an event dict (strings cut to their columns)."""
    status = event.get("status")
    created = event.get("created")
    return {
        "key": _text(event.get("key"), KEY.length) or "?",
        "kind": _text(event.get("kind"), 16) or "notify",
        "action": event["action"] if event.get("action") in ACTIONS else "trigger",
        "severity": _text(event.get("severity"), 16) or "error",
        "uuid": _text(event.get("uuid"), ID.length),
        "hostname": _text(event.get("hostname"), 255),
        "check_name": _text(event.get("check"), 255),
        "status": status if isinstance(status, int) and not isinstance(status, bool) else None,
        "summary": _text(event.get("summary")) or "",
        "text": _text(event.get("text")) or "",
        "created": float(created) if isinstance(created, (int, float)) else now,
        "details": {k: v for k, v in event.items() if k not in EVENT_FIELDS} or None,
    }


def enqueue(conn: Connection, event: dict, rules, now: float | None = None,
            also: list[str] | tuple[str, ...] = (),
            skip: tuple[str, ...] = ()) -> list[str]:
    """Record ``event`` and one pending outbox row per channel it is routed to; call it in
    the transaction that changed the state behind the event. Return those channels.

    ``rules`` is the :class:`sinks.alerting.delivery.config.DeliveryConfig` (or a list of rules). A
    resolve (or an acknowledge) also goes to every channel a trigger of its key went to since
    its last resolve, so a pager that was told of a problem hears of its recovery even when
    the rules route "ok" nowhere. ``also``: channels it goes to besides, ``skip``: never
    (a failing channel's alert: to its fallback, not to the channel,
    :mod:`sinks.alerting.delivery.health`).
    """
    now = time.time() if now is None else now
    row = event_row(event, now)
    # parameters at execute time: SQLAlchemy reuses the compiled statement (.values(**row)
    # would build a new one per event, about 0.5 ms)
    event_id = conn.execute(alert_events.insert(), row).inserted_primary_key[0]
    channels = route(event, rules)
    channels += [c for c in also if c not in channels]
    if row["action"] in ("resolve", "acknowledge"):
        for channel in _told_channels(conn, row["key"], event_id):
            if channel not in channels:
                channels.append(channel)
    known = getattr(rules, "channels", None)
    channels = [c for c in channels if (known is None or c in known) and c not in skip]
    if channels:
        conn.execute(outbox.insert(), [
            {"event_id": event_id, "key": row["key"], "channel": c, "state": PENDING,
             "attempts": 0, "next_attempt": now, "created": now} for c in channels])
    return channels


def enqueue_all(conn: Connection, events: list[dict], rules, now: float | None = None) -> None:
    """:func:`enqueue` each of ``events``, in their order, a few statements for them all:
    inserts of all their ``alert_events`` rows, then of all their outbox rows, on the
    driver's cursor (:func:`fleetwatch.store.db.insert_many`; a batch's notifications: one
    statement each was most of the alerting sink's work per NOTIFY, bench/notify_rtt.py).
    A resolve or an acknowledge reads the channels earlier events of its key went to, and
    the rows' ids come back by key: a list with either, or a key twice, is enqueued one
    event at a time."""
    now = time.time() if now is None else now
    rows = [event_row(event, now) for event in events]
    if any(r["action"] != "trigger" for r in rows) or len({r["key"] for r in rows}) < len(rows):
        for event in events:
            enqueue(conn, event, rules, now)
        return
    if not rows:
        return
    ids = dict((key, event_id) for event_id, key in
               db.insert_many(conn, alert_events, rows, returning=("id", "key")))
    known = getattr(rules, "channels", None)
    pending = []
    for event, row in zip(events, rows):
        event_id = ids[row["key"]]
        pending += [{"event_id": event_id, "key": row["key"], "channel": c, "state": PENDING,
                     "attempts": 0, "next_attempt": now, "created": now}
                    for c in route(event, rules) if known is None or c in known]
    db.insert_many(conn, outbox, pending)


def _told_channels(conn: Connection, key: str, before: int) -> list[str]:
    """The channels any trigger of ``key`` since its last resolve went to (events before
    ``before``), in the order they were first told: a change of severity routed elsewhere,
    a later notification or an escalation (:mod:`sinks.alerting.escalation.store`) leaves no
    channel with a problem it never hears the end of."""
    return list(conn.scalars(_told_stmt(), {"key": key, "before": before}))


@functools.lru_cache(maxsize=1)
def _told_stmt():
    e = alert_events
    last_resolve = select(func.coalesce(func.max(e.c.id), 0)).where(
        e.c.key == bindparam("key"), e.c.action == "resolve",
        e.c.id < bindparam("before")).scalar_subquery()
    triggers = select(e.c.id).where(e.c.key == bindparam("key"), e.c.action == "trigger",
                                    e.c.id < bindparam("before"), e.c.id > last_resolve)
    return select(outbox.c.channel).where(outbox.c.event_id.in_(triggers)) \
        .group_by(outbox.c.channel).order_by(func.min(outbox.c.id))


# ---------------------------------------------------------------- the deliverer's side

def claim(conn: Connection, worker: str, now: float, lease: float, limit: int,
          channels, groups: dict | None = None) -> list[dict]:
    """Take up to ``limit`` due rows of ``channels`` for ``worker`` until ``now + lease``,
    with the rest of their groups.

    Returns the claimed rows (outbox columns plus ``event``). A row is due when pending,
    its ``next_attempt`` has come, nobody holds a live lease on it, and no earlier row of
    its (key, channel) is pending. ``groups`` (:func:`sinks.alerting.delivery.grouping.waits`) names
    the channels that group, ``{channel: (group_wait, group_by)}``: a row of one is due
    only ``group_wait`` after it was recorded, and with a due row comes every row of its
    group that is pending, free, not waiting for its key's earlier row, and either due or
    never tried (at most :data:`sinks.alerting.delivery.grouping.MAX_SIZE`): the whole group is
    claimed in this one transaction, so it is one deliverer's.
    """
    channels = list(channels)
    if not channels:
        return []
    groups = {c: g for c, g in (groups or {}).items() if c in channels and g[0] > 0}
    if groups and conn.dialect.name == "postgresql":
        # Sinks claiming groups take turns (SQLite's writers always do): otherwise two
        # could each lock part of one group's due rows and send it as two messages.
        conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": GROUP_LOCK})
    free = or_(outbox.c.lease_until.is_(None), outbox.c.lease_until < now)
    ready = or_(outbox.c.channel.in_([c for c in channels if c not in groups]),
                *(and_(outbox.c.channel == c, outbox.c.created <= now - wait)
                  for c, (wait, _) in groups.items()))
    due = and_(outbox.c.state == PENDING, outbox.c.next_attempt <= now, free, ready)
    stmt = select(outbox.c.id).where(due, outbox.c.channel.in_(channels), ~_waiting()) \
        .order_by(outbox.c.next_attempt, outbox.c.id).limit(limit)
    ids = list(conn.scalars(_locked(conn, stmt)))
    if not ids:
        return []
    until = now + lease
    # Conditional: a row another sink claimed since our SELECT (no row locks on SQLite's
    # side, but its writers are serialised; PostgreSQL re-checks the WHERE) is not taken.
    conn.execute(update(outbox).where(outbox.c.id.in_(ids), due)
                 .values(claimed_by=worker, lease_until=until))
    if groups:
        rest = _group_rest(conn, ids, groups, now, free)
        if rest:
            conn.execute(update(outbox).where(outbox.c.id.in_(rest), outbox.c.state == PENDING,
                                              free).values(claimed_by=worker, lease_until=until))
            ids += rest
    rows = conn.execute(select(outbox, alert_events).join(
        alert_events, alert_events.c.id == outbox.c.event_id).where(
        outbox.c.id.in_(ids), outbox.c.claimed_by == worker)
        .order_by(outbox.c.next_attempt, outbox.c.id)).all()
    out = []
    for r in rows:
        m = r._mapping
        out.append({"id": m[outbox.c.id], "event_id": m[outbox.c.event_id],
                    "channel": m[outbox.c.channel],
                    "attempts": m[outbox.c.attempts], "created": m[outbox.c.created],
                    "lease_until": until, "event": as_event({
                        **{c.name: m[c] for c in alert_events.columns}})})
    return out


def _waiting():
    """An earlier row of the same key and channel is pending (the row must wait for it)."""
    earlier = outbox.alias("earlier")
    return exists().where(earlier.c.key == outbox.c.key, earlier.c.channel == outbox.c.channel,
                          earlier.c.state == PENDING, earlier.c.id < outbox.c.id)


def _locked(conn: Connection, stmt):
    if conn.dialect.name == "postgresql":
        return stmt.with_for_update(skip_locked=True, of=outbox)
    return stmt


#: ``group_by`` key -> the ``alert_events`` column it compares
_GROUP_COLUMNS = {"host": alert_events.c.hostname, "severity": alert_events.c.severity,
                  "check": alert_events.c.check_name, "kind": alert_events.c.kind}


def _group_rest(conn: Connection, ids: list[int], groups: dict, now: float, free) -> list[int]:
    """The ids of the other rows of the groups of the claimed rows ``ids``."""
    leads = conn.execute(select(outbox.c.channel, *_GROUP_COLUMNS.values()).join(
        alert_events, alert_events.c.id == outbox.c.event_id).where(
        outbox.c.id.in_(ids), outbox.c.channel.in_(list(groups)))).all()
    seen, rest = set(), []
    for lead in leads:
        channel = lead[0]
        by = groups[channel][1]
        values = dict(zip(_GROUP_COLUMNS, lead[1:]))
        name = (channel, *(values[k] for k in by))
        if name in seen:
            continue
        seen.add(name)
        same = [_GROUP_COLUMNS[k].is_(None) if values[k] is None else _GROUP_COLUMNS[k] == values[k]
                for k in by]
        stmt = select(outbox.c.id).join(alert_events, alert_events.c.id == outbox.c.event_id) \
            .where(outbox.c.channel == channel, outbox.c.state == PENDING, free,
                   or_(outbox.c.attempts == 0, outbox.c.next_attempt <= now),
                   outbox.c.id.not_in(ids + rest), ~_waiting(), *same) \
            .order_by(outbox.c.id).limit(grouping.MAX_SIZE)
        rest += conn.scalars(_locked(conn, stmt))
    return rest


def mark(conn: Connection, row_id: int | list[int], worker: str, now: float, state: str,
         error: str | None = None, next_attempt: float | None = None,
         attempted: bool = True) -> int:
    """Record the outcome of an attempt on a row (or on the rows of a group) ``worker``
    holds; release the claim.

    ``state`` SENT or FAILED ends the row; PENDING schedules it again at ``next_attempt``
    (``attempted`` False: given back untried). Returns how many rows were still ours
    (0, false: the claim had expired).
    """
    ids = row_id if isinstance(row_id, list) else [row_id]
    values = {"state": state, "claimed_by": None, "lease_until": None}
    if attempted:
        values["attempts"] = outbox.c.attempts + 1
        values["last_error"] = error
    if state == SENT:
        values["sent_at"] = now
    if next_attempt is not None:
        values["next_attempt"] = next_attempt
    result = conn.execute(update(outbox).where(
        outbox.c.id.in_(ids), outbox.c.claimed_by == worker, outbox.c.state == PENDING)
        .values(**values))
    return result.rowcount or 0


def record(conn: Connection, rows: list[dict], worker: str, outcome: str, tried) -> None:
    """One ``deliveries`` row per outbox row of ``rows`` for the attempt ``tried`` made
    (:class:`sinks.alerting.delivery.deliverer.Tried`: when, how long, the service's
    answer), its ``outcome`` (``sent``, ``retry``, ``failed``): in the transaction that
    marks them, so that the proof and the outbox's state agree."""
    conn.execute(insert(deliveries), [{
        "outbox_id": r["id"], "event_id": r["event_id"],
        "key": _text(r["event"].get("key"), KEY.length) or "?",
        "action": _text(r["event"].get("action"), 16) or "?",
        "hostname": _text(r["event"].get("hostname"), 255),
        "check_name": _text(r["event"].get("check"), 255),
        "channel": r["channel"], "attempt": r["attempts"] + 1, "grouped": len(rows),
        "worker": worker, "started": tried.started, "latency": tried.latency,
        "outcome": outcome, "status": _text(tried.status, 32),
        "message_id": _text(tried.message_id, 255), "answer": tried.answer}
        for r in rows])


def thread_of(conn: Connection, key: str, channel: str) -> str | None:
    """The service's id for the message of ``key``'s latest problem sent to ``channel`` (a
    Slack ``CHANNEL/TS``), which its acknowledgement and recovery follow up; None when
    none was sent (or the service gave no id), or when the problem went out in a group's
    message (which its follow-up must not mark as its own)."""
    return conn.execute(select(deliveries.c.message_id).where(
        deliveries.c.key == key, deliveries.c.channel == channel,
        deliveries.c.action == "trigger", deliveries.c.outcome == SENT,
        deliveries.c.grouped == 1, deliveries.c.message_id.is_not(None))
        .order_by(deliveries.c.started.desc(), deliveries.c.id.desc()).limit(1)).scalar()


def release(conn: Connection, worker: str) -> int:
    """Give back every row ``worker`` still holds, untried."""
    return conn.execute(update(outbox).where(outbox.c.claimed_by == worker,
                                             outbox.c.state == PENDING)
                        .values(claimed_by=None, lease_until=None)).rowcount or 0


def purge(conn: Connection, before: float) -> int:
    """Delete alerts recorded before ``before`` whose rows are all sent or failed, and the
    deliveries attempted before then."""
    conn.execute(delete(deliveries).where(deliveries.c.started < before))
    old = select(alert_events.c.id).where(
        alert_events.c.created < before,
        ~exists().where(outbox.c.event_id == alert_events.c.id, outbox.c.state == PENDING))
    ids = list(conn.scalars(old))
    if not ids:
        return 0
    conn.execute(delete(outbox).where(outbox.c.event_id.in_(ids)))
    conn.execute(delete(alert_events).where(alert_events.c.id.in_(ids)))
    return len(ids)


def fail_orphans(conn: Connection, channels: list[str], before: float, now: float) -> int:
    """Fail pending rows of channels no longer configured once they are too old to send."""
    result = conn.execute(update(outbox).where(
        outbox.c.state == PENDING, outbox.c.channel.not_in(channels), outbox.c.created < before)
        .values(state=FAILED, last_error="channel no longer configured", claimed_by=None,
                lease_until=None, next_attempt=now))
    return result.rowcount or 0


def pending_count(conn: Connection) -> int:
    return conn.execute(select(func.count()).select_from(outbox)
                        .where(outbox.c.state == PENDING)).scalar() or 0
