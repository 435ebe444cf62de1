"""The alert outbox: alerts recorded in the state database first, delivered from there.

Two tables, written by the alerting sink (defined on :data:`sinks.state.db.metadata`):

``alert_events``  one row per alert event (BRIEF point 8's dict), whatever its channels
``outbox``        one row per (event, channel): ``pending`` until ``sent``, or ``failed``

:func:`enqueue` runs inside the evaluation's own transaction, so a state change and its
alert commit together or not at all. The deliverer (:mod:`sinks.alerting.deliverer`) then
:func:`claim` s due rows in a short transaction: a conditional UPDATE sets ``claimed_by``
and ``lease_until``, so two sinks on one database never hold the same row, and a crashed
sink's claim simply expires. Rows of one (key, channel) go out in order: a row waits while
an earlier one of its key and channel is pending, so a resolve never overtakes its trigger.

Marking a row (:func:`mark`) requires the claim to still be ours; the deliverer sends only
while its lease has room for the channel's timeout, so a row is sent once unless a sink dies
between the server's "accepted" and the commit of "sent" (then at least once).
"""

from __future__ import annotations

import logging
import time

from sqlalchemy import (JSON, Column, Float, ForeignKey, Index, Integer, String, Table, Text,
                        and_, delete, exists, func, or_, select, text, update)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from sinks.state import db
from sinks.alerting.delivery import route

log = logging.getLogger(__name__)

PENDING, SENT, FAILED = "pending", "sent", "failed"
KEY = String(512)

alert_events = Table(
    "alert_events", db.metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", KEY, nullable=False),
    Column("kind", String(16), nullable=False),
    Column("action", String(16), nullable=False),
    Column("severity", String(16), nullable=False),
    Column("uuid", db.ID),
    Column("hostname", String(255)),
    Column("check_name", String(255)),
    Column("status", Integer),
    Column("summary", Text, nullable=False),
    Column("text", Text, nullable=False),
    Column("created", Float, nullable=False),
    Column("details", JSON),
    Index("ix_alert_events_created", "created"),
    Index("ix_alert_events_key", "key", "action"),
)

outbox = Table(
    "outbox", db.metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("event_id", Integer, ForeignKey("alert_events.id", ondelete="CASCADE"),
           nullable=False),
    Column("key", KEY, nullable=False),
    Column("channel", String(64), nullable=False),
    Column("state", String(8), nullable=False),
    Column("attempts", Integer, nullable=False, default=0),
    Column("next_attempt", Float, nullable=False),
    Column("claimed_by", String(128)),
    Column("lease_until", Float),
    Column("sent_at", Float),
    Column("last_error", Text),
    Column("created", Float, nullable=False),
    Index("ix_outbox_due", "state", "next_attempt"),
    Index("ix_outbox_order", "key", "channel", "id"),
    Index("ix_outbox_event", "event_id"),
)

TABLES = (alert_events, outbox)
EVENT_FIELDS = ("key", "kind", "action", "severity", "uuid", "hostname", "check", "status",
                "summary", "text", "created")


def create(eng: Engine) -> None:
    """Create the outbox tables if missing (under :func:`sinks.state.db.create`'s lock on PG)."""
    from sinks.base import WriteError
    try:
        with eng.begin() as conn:
            if conn.dialect.name == "postgresql":
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": db.CREATE_LOCK})
            db.metadata.create_all(conn, tables=list(TABLES))
    except SQLAlchemyError as e:
        raise WriteError(f"cannot create the outbox tables: {e}") from e


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
        "action": "resolve" if event.get("action") == "resolve" else "trigger",
        "severity": _text(event.get("severity"), 16) or "error",
        "uuid": _text(event.get("uuid"), db.ID.length),
        "hostname": _text(event.get("hostname"), 255),
        "check_name": _text(event.get("check"), 255),
        "status": status if isinstance(status, int) and not isinstance(status, bool) else None,
        "summary": _text(event.get("summary")) or "",
        "text": _text(event.get("text")) or "",
        "created": float(created) if isinstance(created, (int, float)) else now,
        "details": {k: v for k, v in event.items() if k not in EVENT_FIELDS} or None,
    }


def as_event(row) -> dict:
    """An ``alert_events`` row back as the event dict the channels format."""
    m = row._mapping if hasattr(row, "_mapping") else row
    event = {k: m[k] for k in EVENT_FIELDS if k != "check" and k in m}
    event["check"] = m["check_name"]
    event.update(m.get("details") or {})
    return event


def enqueue(conn: Connection, event: dict, rules, now: float | None = None) -> list[str]:
    """Record ``event`` and one pending outbox row per channel it is routed to; call it in
    the transaction that changed the state behind the event. Return those channels.

    ``rules`` is the :class:`sinks.alerting.delivery.DeliveryConfig` (or a list of rules). A
    resolve also goes to every channel its key's last trigger went to, so a pager that was
    told of a problem hears of its recovery even when the rules route "ok" nowhere.
    """
    now = time.time() if now is None else now
    row = event_row(event, now)
    # parameters at execute time: SQLAlchemy reuses the compiled statement (.values(**row)
    # would build a new one per event, about 0.5 ms)
    event_id = conn.execute(alert_events.insert(), row).inserted_primary_key[0]
    channels = route(event, rules)
    if row["action"] == "resolve":
        for channel in _last_trigger_channels(conn, row["key"], event_id):
            if channel not in channels:
                channels.append(channel)
    known = getattr(rules, "channels", None)
    if known is not None:
        channels = [c for c in channels if c in known]
    if channels:
        conn.execute(outbox.insert(), [
            {"event_id": event_id, "key": row["key"], "channel": c, "state": PENDING,
             "attempts": 0, "next_attempt": now, "created": now} for c in channels])
    return channels


def _last_trigger_channels(conn: Connection, key: str, before: int) -> list[str]:
    last = conn.execute(select(func.max(alert_events.c.id)).where(
        alert_events.c.key == key, alert_events.c.action == "trigger",
        alert_events.c.id < before)).scalar()
    if last is None:
        return []
    return list(conn.scalars(select(outbox.c.channel).where(outbox.c.event_id == last)
                             .order_by(outbox.c.id)))


# ---------------------------------------------------------------- the deliverer's side

def claim(conn: Connection, worker: str, now: float, lease: float, limit: int,
          channels) -> list[dict]:
    """Take up to ``limit`` due rows of ``channels`` for ``worker`` until ``now + lease``.

    Returns the claimed rows (outbox columns plus ``event``). A row is due when pending,
    its ``next_attempt`` has come, nobody holds a live lease on it, and no earlier row of
    its (key, channel) is pending.
    """
    channels = list(channels)
    if not channels:
        return []
    earlier = outbox.alias("earlier")
    waiting = exists().where(earlier.c.key == outbox.c.key,
                             earlier.c.channel == outbox.c.channel,
                             earlier.c.state == PENDING, earlier.c.id < outbox.c.id)
    free = or_(outbox.c.lease_until.is_(None), outbox.c.lease_until < now)
    due = and_(outbox.c.state == PENDING, outbox.c.next_attempt <= now, free)
    stmt = select(outbox.c.id).where(due, outbox.c.channel.in_(channels), ~waiting) \
        .order_by(outbox.c.next_attempt, outbox.c.id).limit(limit)
    if conn.dialect.name == "postgresql":
        stmt = stmt.with_for_update(skip_locked=True, of=outbox)
    ids = list(conn.scalars(stmt))
    if not ids:
        return []
    until = now + lease
    # Conditional: a row another sink claimed since our SELECT (no row locks on SQLite's
    # side, but its writers are serialised; PostgreSQL re-checks the WHERE) is not taken.
    conn.execute(update(outbox).where(outbox.c.id.in_(ids), due)
                 .values(claimed_by=worker, lease_until=until))
    rows = conn.execute(select(outbox, alert_events).join(
        alert_events, alert_events.c.id == outbox.c.event_id).where(
        outbox.c.id.in_(ids), outbox.c.claimed_by == worker)
        .order_by(outbox.c.next_attempt, outbox.c.id)).all()
    out = []
    for r in rows:
        m = r._mapping
        out.append({"id": m[outbox.c.id], "channel": m[outbox.c.channel],
                    "attempts": m[outbox.c.attempts], "created": m[outbox.c.created],
                    "lease_until": until, "event": as_event({
                        **{c.name: m[c] for c in alert_events.columns}})})
    return out


def mark(conn: Connection, row_id: int, worker: str, now: float, state: str,
         error: str | None = None, next_attempt: float | None = None,
         attempted: bool = True) -> bool:
    """Record the outcome of an attempt on a row ``worker`` holds; release the claim.

    ``state`` SENT or FAILED ends the row; PENDING schedules it again at ``next_attempt``
    (``attempted`` False: given back untried). False if the claim was no longer ours.
    """
    values = {"state": state, "claimed_by": None, "lease_until": None}
    if attempted:
        values["attempts"] = outbox.c.attempts + 1
        values["last_error"] = error
    if state == SENT:
        values["sent_at"] = now
    if next_attempt is not None:
        values["next_attempt"] = next_attempt
    result = conn.execute(update(outbox).where(
        outbox.c.id == row_id, outbox.c.claimed_by == worker, outbox.c.state == PENDING)
        .values(**values))
    return bool(result.rowcount)


def release(conn: Connection, worker: str) -> int:
    """Give back every row ``worker`` still holds, untried."""
    return conn.execute(update(outbox).where(outbox.c.claimed_by == worker,
                                             outbox.c.state == PENDING)
                        .values(claimed_by=None, lease_until=None)).rowcount or 0


def purge(conn: Connection, before: float) -> int:
    """Delete alerts recorded before ``before`` whose rows are all sent or failed."""
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


# ---------------------------------------------------------------- reading

def read_events(conn: Connection, limit: int = 50, severities=None) -> list[dict]:
    """The latest alert events, newest first, each with ``deliveries``: one per channel
    (channel, state, attempts, sent_at, next_attempt, last_error)."""
    if not db.has_tables(conn, "alert_events", "outbox"):
        return []
    stmt = select(alert_events).order_by(alert_events.c.created.desc(),
                                         alert_events.c.id.desc()).limit(limit)
    if severities is not None:
        stmt = stmt.where(alert_events.c.severity.in_(list(severities)))
    events = []
    for r in conn.execute(stmt):
        event = as_event(r)
        event["id"] = r.id
        event["deliveries"] = []
        events.append(event)
    by_id = {e["id"]: e for e in events}
    if by_id:
        rows = conn.execute(select(outbox).where(outbox.c.event_id.in_(list(by_id)))
                            .order_by(outbox.c.id))
        for r in rows:
            by_id[r.event_id]["deliveries"].append({
                "channel": r.channel, "state": r.state, "attempts": r.attempts,
                "sent_at": r.sent_at, "next_attempt": r.next_attempt if r.state == PENDING
                else None, "last_error": r.last_error})
    return events
