"""Alert channels as an operator sees them: each one's health (working, failing since when
and why, its fallback), and a test message sent through one.

The alerting sinks keep the ``channels`` table (:mod:`sinks.alerting.delivery.health`): the
channels they have, and what their sends said of each. :func:`listed` reads it as
``fleetwatch channels --json`` prints it (:func:`document`). :func:`test` puts a test alert
in the outbox for one channel only, as an alert is put there (so that the sinks send it
with the channel's own settings and secrets, which the operator's machine does not hold),
and :func:`outcome` reads what became of it: the attempts and the service's answers
(``deliveries``).
"""

from __future__ import annotations

from fleetwatch.actions.database import Unavailable, reading, write
from fleetwatch.display import iso

__all__ = ["Unavailable", "document", "listed", "outcome", "test"]

TIMES = ("since", "last_ok", "last_attempt", "configured")


def listed(state_url: str, reader=None) -> list[dict]:
    """Every channel an alerting sink has (or had), by name, its times in ISO 8601."""
    with reading(state_url, reader) as (reader, reads):
        rows = reader.read(reads.channels) or []
    return [{**r, **{k: iso(r[k]) for k in TIMES}} for r in rows]


def document(channels: list[dict]) -> dict:
    """What ``channels --json`` prints: ``{"channels": [...], "failing": N}``."""
    return {"channels": channels,
            "failing": sum(1 for c in channels if c["state"] == "failing")}


def test(state_url: str, name: str, by: str, now: float) -> int:
    """A test alert to channel ``name`` (only), made ``by`` (``login@host``): its event id;
    ValueError naming the known channels when no sink has one of that name."""
    from sqlalchemy import select

    from fleetwatch.store import reads, schema
    from sinks.alerting.delivery import store as outbox

    def change(conn):
        known = [c["name"] for c in reads.channels(conn)]
        if name not in known:
            raise ValueError(f"no channel {name!r}: the alerting sinks have "
                             f"{', '.join(known) or 'none (has none started yet?)'}")
        event = {"key": f"test/{name}/{now:.6f}", "kind": "test", "action": "trigger",
                 "severity": "info", "uuid": None, "hostname": None, "check": name,
                 "status": None, "summary": f"a test message to channel {name}, sent by {by} "
                                            f"with fleetwatch channels test",
                 "text": "Nothing is wrong: this message tests the channel.", "created": now}
        outbox.enqueue(conn, event, [], now, also=[name])
        return conn.execute(select(schema.alert_events.c.id).where(
            schema.alert_events.c.key == event["key"])).scalar_one()
    return write(state_url, change, owner="alerting")


def outcome(state_url: str, event_id: int, channel: str) -> list[dict]:
    """The attempts to send alert ``event_id`` to ``channel`` so far, newest first (as
    :func:`fleetwatch.actions.alerts.deliveries` gives them)."""
    from fleetwatch.actions.alerts import deliveries, delivery_document
    return delivery_document(*deliveries(state_url, None, channel,
                                         event_ids=[event_id]))["deliveries"]
