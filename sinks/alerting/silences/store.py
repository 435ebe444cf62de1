"""The SQL side of silences: rows added, ended and read; what they muted.

``fleetwatch silence`` adds and ends rows (:func:`add_silence`, :func:`end_silence`); every
alerting sink reads the active ones once per transaction that has an alert to deliver
(:func:`active_silences`), and records what one muted (:func:`record_suppressed`; a
downtime's holds go through the same :func:`record_muted`).
"""

from __future__ import annotations

import functools

from sqlalchemy import bindparam, select, update
from sqlalchemy.engine import Connection

from sinks.alerting.silences.rules import Silence
from fleetwatch.store import db, schema
from fleetwatch.store.driver import Prepared


@functools.lru_cache(maxsize=1)
def _active_silences() -> Prepared:
    """Read in every transaction that raises an alert: on the driver's cursor
    (:mod:`fleetwatch.store.driver`)."""
    t = schema.silences
    return Prepared(select(t).where(t.c.until > bindparam("now"),
                                    t.c.created <= bindparam("now"), t.c.removed.is_(None)))



def _silence(r) -> Silence:
    return Silence(r.id, r.host, r.check_name, r.created, r.until, r.reason, r.created_by)


def active_silences(conn: Connection, now: float) -> list[Silence]:
    return [_silence(r) for r in _active_silences().execute(conn, {"now": now})]


def add_silence(conn: Connection, host: str, check: str | None, created: float, until: float,
                reason: str, created_by: str) -> int:
    result = conn.execute(schema.silences.insert().values(
        host=host, check_name=check, created=created, until=until, reason=reason,
        created_by=created_by[:255]))
    return int(result.inserted_primary_key[0])


def end_silence(conn: Connection, silence_id: int, now: float) -> bool:
    """End a silence now; False if there is no such silence still running."""
    t = schema.silences
    result = conn.execute(update(t).where(t.c.id == silence_id, t.c.removed.is_(None),
                                          t.c.until > now).values(removed=now, until=now))
    return bool(result.rowcount)


def record_muted(conn: Connection, table, by: dict, event: dict) -> None:
    """Record that a silence (``suppressed``, ``by`` {"silence_id": ID}) or a downtime
    (``downtime_suppressed``, {"downtime_id": ID}) kept ``event`` back: once per silence or
    downtime, key, action and severity."""
    db.upsert(conn, table, {
        **by, "key": str(event["key"])[:512], "action": event["action"],
        "severity": event["severity"], "kind": event["kind"], "uuid": event.get("uuid"),
        "hostname": (event.get("hostname") or "")[:255] or None,
        "check_name": (event.get("check") or "")[:255] or None,
        "summary": event.get("summary") or "", "created": event["created"]}, update=())


def record_suppressed(conn: Connection, silence: Silence, event: dict) -> None:
    """Record that ``silence`` muted ``event``."""
    record_muted(conn, schema.suppressed, {"silence_id": silence.id}, event)

