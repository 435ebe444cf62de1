"""Proof of delivery for the history lake: rows of the ``deliveries`` table read from the
state database (SQLAlchemy Core, no PySpark; compaction writes them with the lifecycle's,
docs/concepts/lake.md "The deliveries table").

The state database keeps one ``deliveries`` row per attempt to send an alert
(:func:`sinks.alerting.delivery.store.record`) for ``alerting.delivery.keep``, 30 days by
default; the lake keeps them as long as its other tables. One lake row per state row, named
for good by ``event_id`` ``delivery/ID/STARTED`` (its id, and when it started to the
microsecond: SQLite gives an id again once a purge emptied the table, and the id alone would
then name an older attempt the lake holds). :func:`rows` reads those attempted (``started``)
since a time: :func:`fleetwatch.lake.lifecycle.export` calls it with the deliveries' own
watermark less its ``LAG``, so the overlap gives rows already stored, which compaction drops
by ``event_id`` as it does the lifecycle's.

No secret is copied because the state table holds none: ``answer`` is the first line of
what the service answered (:class:`sinks.alerting.delivery.channels.Receipt`, 300
characters at most) or why the send failed, which names a URL without its query or user
info and a secret's file, never its content.

The agent's uuid is not a column: an alert's key begins with it only for the agents' alerts
(a channel's own alert is ``channel/NAME``, a test ``test/...``). ``alert`` names the
``lifecycle`` row of the alert sent (``alert/ID``), which has it.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.engine import Connection

from fleetwatch.store import schema

NAME = "deliveries"


def event_id(id_: int, started: float) -> str:
    """``delivery/ID/STARTED``: what names an attempt in the lake."""
    return f"delivery/{id_}/{started:.6f}"


def rows(conn: Connection, since: float | None, now: float) -> list[dict]:
    """The ``deliveries`` rows of the attempts started in ``[since, now]`` (``since``
    None: all up to ``now``) as rows of the lake's table (without ``date``)."""
    t = schema.deliveries
    window = (t.c.started <= now) if since is None else \
        (t.c.started >= since) & (t.c.started <= now)
    out = []
    for r in conn.execute(select(t).where(window).order_by(t.c.id)).mappings():
        out.append({"ts": r["started"], "event_id": event_id(r["id"], r["started"]),
                    "channel": r["channel"], "key": r["key"], "action": r["action"],
                    "hostname": r["hostname"], "check_name": r["check_name"],
                    "alert": f"alert/{r['event_id']}", "attempt": r["attempt"],
                    "grouped": r["grouped"], "outcome": r["outcome"], "status": r["status"],
                    "message_id": r["message_id"], "answer": r["answer"],
                    "latency": r["latency"], "worker": r["worker"]})
    return out
