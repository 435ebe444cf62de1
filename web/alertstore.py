"""The alerts Prometheus posted, in the state database (table ``prometheus_alerts``,
fleetwatch/store/schema.py): what the console's ``POST /api/v2/alerts`` keeps and the
alerting sinks judge (sinks/alerting/external).

:func:`put` keeps a post's alerts in one short transaction: each merged with the one of its
label set already held (:func:`web.intake.merge`), a new one inserted while the table holds
fewer than ``limit``. To make room, alerts resolved more than :data:`KEEP_RESOLVED` seconds
ago are deleted, then, if still full, resolved ones the oldest first; alerts still firing
are never pushed out by new ones: the new ones past the bound are refused (counted by the
caller, answered 429). Two posts of one new alert at once (two Prometheus servers of a pair)
may both try to insert it: the transaction is tried again, once, and then merges.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from fleetwatch.store import schema
from web.intake import Alert, merge

T = schema.prometheus_alerts
#: seconds a resolved alert is kept (the sinks have resolved its check long before; the
#: API lists it meanwhile)
KEEP_RESOLVED = 3600.0
#: fingerprints read per statement
CHUNK = 500


@dataclass
class Put:
    """What a post changed: alerts ``inserted``, ``updated`` (merged with the one held),
    ``refused`` (the table full of firing alerts)."""

    inserted: int = 0
    updated: int = 0
    refused: int = 0


def _alert(row) -> Alert:
    return Alert(row.fingerprint, row.labels, row.annotations, row.starts_at, row.ends_at,
                 row.timeout, row.generator_url)


def _values(alert: Alert) -> dict:
    return {"labels": alert.labels, "annotations": alert.annotations,
            "starts_at": alert.starts_at, "ends_at": alert.ends_at, "timeout": alert.timeout,
            "generator_url": alert.generator_url}


def put(engine: Engine, alerts: list[Alert], now: float, limit: int, sender: str) -> Put:
    """Keep ``alerts`` (posted at ``now`` by ``sender``), at most ``limit`` in the table."""
    for attempt in (1, 2):
        try:
            with engine.begin() as conn:
                return _put(conn, alerts, now, limit, sender[:255])
        except IntegrityError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _put(conn, alerts: list[Alert], now: float, limit: int, sender: str) -> Put:
    done = Put()
    conn.execute(delete(T).where(T.c.ends_at < now - KEEP_RESOLVED))
    latest: dict[str, Alert] = {}
    for alert in alerts:                # one label set twice in a post: merged in order
        held = latest.get(alert.fingerprint)
        latest[alert.fingerprint] = alert if held is None else merge(held, alert, now)
    prints = list(latest)               # (in the post's order: the first ones kept)
    held = {}
    for i in range(0, len(prints), CHUNK):
        held.update((r.fingerprint, _alert(r)) for r in conn.execute(
            select(T).where(T.c.fingerprint.in_(prints[i:i + CHUNK]))))
    fresh = [p for p in prints if p not in held]
    room = limit - conn.execute(select(func.count()).select_from(T)).scalar()
    if len(fresh) > room:
        room += _make_room(conn, len(fresh) - room, now)
    kept = fresh[:max(room, 0)]
    done.refused = len(fresh) - len(kept)
    if kept:
        conn.execute(insert(T), [{"fingerprint": p, **_values(latest[p]), "received": now,
                                  "updated": now, "sender": sender} for p in kept])
    for p, old in sorted(held.items()):
        new = merge(old, latest[p], now)
        conn.execute(update(T).where(T.c.fingerprint == p)
                     .values(**_values(new), updated=now, sender=sender,
                             # (another episode: one that starts after the old ended)
                             **({"received": now} if latest[p].starts_at > old.ends_at
                                else {})))
    done.inserted, done.updated = len(kept), len(held)
    return done


def _make_room(conn, wanted: int, now: float) -> int:
    """Delete up to ``wanted`` resolved alerts, the longest resolved first: how many."""
    oldest = select(T.c.fingerprint).where(T.c.ends_at <= now) \
        .order_by(T.c.ends_at, T.c.fingerprint).limit(wanted)
    gone = [r.fingerprint for r in conn.execute(oldest)]
    for i in range(0, len(gone), CHUNK):
        conn.execute(delete(T).where(T.c.fingerprint.in_(gone[i:i + CHUNK])))
    return len(gone)


def listed(engine: Engine, limit: int = 1000) -> list[dict]:
    """The alerts held, the newest posted first, with what the sinks made of each."""
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(
            select(T).order_by(T.c.updated.desc(), T.c.fingerprint).limit(limit)).mappings()]
