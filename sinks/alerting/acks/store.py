"""The SQL side of acknowledgements: the ``acknowledgements`` rows read, added and ended.

``fleetwatch ack`` adds and removes rows (:func:`add`, :func:`remove`); every alerting sink
reads the active ones (:func:`of_checks`: those of a batch's checks, which the evaluation's
:class:`sinks.alerting.acks.rules.Cover` ends at their check's state change in the same
transaction, :func:`end`). :func:`tick` (the sinks' periodic call) ends acknowledgements
past their expiry or whose problem is gone, and enqueues each owed notice once: the row's
``announced`` is set by a conditional UPDATE, so of two sinks only one enqueues it.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import and_, exists, or_, select, update
from sqlalchemy.engine import Connection

from fleetwatch.display import iso
from sinks.alerting.acks import rules as acks
from sinks.alerting.acks.rules import Ack
from sinks.alerting.checks.rules import OK, SEVERITY
from fleetwatch.store import schema
from fleetwatch.store.driver import Prepared

if TYPE_CHECKING:
    from sinks.alerting.port import Port

log = logging.getLogger(__name__)


def _ack(r) -> Ack:
    return Ack(r.id, r.key, r.uuid, r.check_name, r.status, r.created, r.author, r.comment,
               bool(r.sticky), bool(r.notify), r.expire, r.announced, r.ended)


def current(conn: Connection, keys: Iterable[str] | None = None) -> list[Ack]:
    """The acknowledgements not ended (of ``keys`` only, if given), oldest first."""
    t = schema.acknowledgements
    stmt = select(t).where(t.c.ended.is_(None)).order_by(t.c.id)
    if keys is not None:
        keys = sorted(set(keys))
        if not keys:
            return []
        stmt = stmt.where(t.c.key.in_(keys))
    return [_ack(r) for r in conn.execute(stmt)]


def since(conn: Connection, ended_after: float) -> list[Ack]:
    """The acknowledgements not ended, and those ended after ``ended_after``, oldest first
    (what escalation looks at: :mod:`sinks.alerting.escalation.store`)."""
    t = schema.acknowledgements
    return [_ack(r) for r in conn.execute(select(t).where(
        or_(t.c.ended.is_(None), t.c.ended > ended_after)).order_by(t.c.id))]


def end(conn: Connection, ack_id: int, now: float, reason: str) -> bool:
    """End acknowledgement ``ack_id`` now; False if it had already ended."""
    t = schema.acknowledgements
    result = conn.execute(update(t).where(t.c.id == ack_id, t.c.ended.is_(None))
                          .values(ended=now, end_reason=reason))
    return bool(result.rowcount)


def add(conn: Connection, key: str, uuid: str, check: str | None, status: int, now: float,
        author: str, comment: str, sticky: bool, notify: bool, expire: float | None) -> int:
    """A new acknowledgement of ``key``; one still running for the key is replaced."""
    t = schema.acknowledgements
    conn.execute(update(t).where(t.c.key == key, t.c.ended.is_(None))
                 .values(ended=now, end_reason=acks.REPLACED))
    result = conn.execute(t.insert().values(
        key=key, uuid=uuid, check_name=check, status=status, sticky=sticky, notify=notify,
        comment=comment, author=author[:255], created=now, expire=expire))
    return int(result.inserted_primary_key[0])


def of_checks(conn: Connection, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Ack]:
    """The acknowledgements not ended of checks ``keys`` (``(uuid, plugin)``), by check: a
    :class:`sinks.alerting.acks.rules.Cover` of a batch's checks."""
    wanted = {acks.check_key(u, p): (u, p) for u, p in keys}
    return {wanted[ack.key]: ack for ack in current(conn, wanted)}


# ---------------------------------------------------------------- the tick

def tick(port: Port) -> None:
    """End expired acknowledgements and those whose problem is gone; enqueue owed notices.

    Each statement below is about open acknowledgements (``ended`` NULL): with none open, one
    read on the driver's cursor answers (the sink's tick runs on its loop every second,
    where each millisecond holds the NOTIFYs back: bench/RESULTS.md)."""
    conn, now = port.conn, port.now
    if not _any_open().execute(conn):
        return
    t, c, h = schema.acknowledgements, schema.check_state, schema.host_state
    expired = conn.execute(update(t).where(t.c.ended.is_(None), t.c.expire <= now)
                           .values(ended=t.c.expire, end_reason=acks.EXPIRED)).rowcount
    recovered_check = exists().where(c.c.uuid == t.c.uuid, c.c.plugin == t.c.check_name,
                                     c.c.status == OK)
    recovered_host = exists().where(h.c.uuid == t.c.uuid, h.c.name == "", h.c.up.is_(True))
    recovered = conn.execute(update(t).where(t.c.ended.is_(None), or_(
        and_(t.c.check_name.is_not(None), recovered_check),
        and_(t.c.check_name.is_(None), recovered_host)))
        .values(ended=now, end_reason=acks.RECOVERED)).rowcount
    port.counts["ack_expired"] += expired or 0
    port.counts["ack_recovered"] += recovered or 0
    owed = conn.execute(select(t).where(t.c.ended.is_(None), t.c.notify.is_(True),
                                        t.c.announced.is_(None)).order_by(t.c.id)).all()
    for ack in map(_ack, owed):
        taken = conn.execute(update(t).where(t.c.id == ack.id, t.c.announced.is_(None),
                                             t.c.ended.is_(None))
                             .values(announced=now)).rowcount
        if taken:
            port.deliver(notice(ack, port.hostname(ack.uuid), now), ack.check)
            port.counts["ack_announced"] += 1


@functools.lru_cache(maxsize=1)
def _any_open() -> Prepared:
    t = schema.acknowledgements
    return Prepared(select(t.c.id).where(t.c.ended.is_(None)).limit(1))


def notice(ack: Ack, hostname: str | None, now: float) -> dict:
    """The ``acknowledge`` event of ``ack``: its problem's key, severity and check."""
    what = f"check {ack.check}" if ack.check else "host DOWN"
    lasts = "until recovery" if ack.sticky or not ack.check else "until its state changes"
    if ack.expire is not None:
        lasts += f", at most until {iso(ack.expire)}"
    text = f"The {what} is acknowledged {lasts}; reminders are held back while it lasts."
    return {"key": ack.key, "kind": "check" if ack.check else "host", "action": "acknowledge",
            "severity": SEVERITY[ack.status] if 0 <= ack.status < len(SEVERITY) else "unknown",
            "uuid": ack.uuid, "hostname": hostname or ack.uuid, "check": ack.check,
            "status": ack.status if ack.check else None, "summary": acks.summary(ack)[:500],
            "text": text, "created": now, "ack_id": ack.id, "acknowledged_by": ack.author}
