"""The alerting sink: records every notification once.

It takes NOTIFY, HEARTBEAT and RESULT (SPEC 4.1's routing table). A NOTIFY is inserted into
``notifications`` (its only writer) keyed by msg_id, so a duplicate -- a resend that reached
another alerting sink, or this one after a restart -- is not an error and adds no row; it is
ACKed all the same (SPEC 4.2).

HEARTBEAT and RESULT are accepted and counted only: check states, expiry of silent
processes and notification channels (SMTP, webhooks) through an outbox come in a later issue.
"""

from __future__ import annotations

import logging
from collections import Counter

from sqlalchemy.exc import SQLAlchemyError

from fleetwatch.protocol import Relayed
from sinks import db
from sinks.base import WriteError

log = logging.getLogger(__name__)


def notification_row(relayed: Relayed, now: float) -> dict:
    """The ``notifications`` row of a relayed NOTIFY (stamped uuid, not the body's)."""
    msg = relayed.message
    hostname, source = msg.get("hostname"), msg.get("source")
    return {
        "msg_id": msg.msg_id,
        "uuid": relayed.uuid,
        "hostname": hostname[:255] if isinstance(hostname, str) else None,
        "severity": msg.get("severity"),
        "text": msg.get("text"),
        "source": source[:255] if isinstance(source, str) else None,
        "sent_at": float(msg.ts),
        "received_at": now,
        "router": relayed.router,
    }


class AlertingSink(db.DatabaseSink):
    type = "alerting"
    handles = frozenset({"NOTIFY", "HEARTBEAT", "RESULT"})
    acks = frozenset({"NOTIFY"})

    def write(self, batch: list[Relayed]) -> None:
        now = self.clock()
        counts = Counter(r.message.type.lower() for r in batch)
        rows = [notification_row(r, now) for r in batch if r.message.type == "NOTIFY"]
        inserted = 0
        if rows:
            try:
                with self.engine.begin() as conn:
                    inserted = db.insert_new(conn, db.notifications, rows)
            except SQLAlchemyError as e:
                raise WriteError(f"alerting write failed: {e.__class__.__name__}: {e}") from e
        counts["notify_recorded"] = inserted
        counts["notify_already_recorded"] = len(rows) - inserted
        self.counts.update(counts)
