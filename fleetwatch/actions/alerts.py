"""The alerts the alerting sinks recorded, newest first, with their delivery state per
channel (pending, sent at, attempts, last error, failed) and how each is handled.

An alert is an event of the outbox (``alert_events``: a check's HARD state change or
recovery, a host DOWN/UP, flapping, a notification) or a recorded NOTIFY that no event was
made of (before evaluation ran, or an older database). A NOTIFY and its event are one entry,
with the notification's own fields (``msg_id``, ``text``, ``received_at``...)
(:func:`merge`). A problem's trigger since its last recovery carries how the problem is
handled now (``handled``: ack, downtime, unreachable, host, stale; :mod:`query.handling`),
and the running acknowledgement that covers it (``ack``: by, comment, until).
:func:`gather` reads them as ``fleetwatch alerts --json`` prints them (:func:`document`).
"""

from __future__ import annotations

from fleetwatch.actions.database import Unavailable, reading
from fleetwatch.display import iso
from query.alerts import RANK, AlertFilter

__all__ = ["FIELDS", "RANK", "Unavailable", "at_least", "deliveries", "delivery_document",
           "document", "gather", "merge"]

FIELDS = ("id", "msg_id", "uuid", "hostname", "severity", "text", "source", "router", "sent_at",
          "received_at", "kind", "action", "key", "check", "status", "summary", "deliveries",
          "kept_back")


def at_least(severity: str | None) -> list[str] | None:
    """The severities at or above ``severity`` (None: all)."""
    return None if severity is None else [s for s, r in RANK.items() if r >= RANK[severity]]


def merge(notifications: list[dict], events: list[dict], limit: int | None) -> list[dict]:
    """One entry per alert, newest first: events, each NOTIFY joined to its event."""
    by_msg = {n["msg_id"]: n for n in notifications}
    out = []
    for e in events:
        entry = {**e, "text": e.get("summary"), "received_at": e.get("created")}
        if e.get("kind") == "notify":
            msg_id = str(e.get("key", "")).rpartition("/notify/")[2] or None
            entry["msg_id"] = msg_id
            n = by_msg.pop(msg_id, None)
            if n is not None:
                entry.update({k: v for k, v in n.items() if v is not None or k not in entry})
        out.append(entry)
    for n in by_msg.values():
        out.append({**n, "kind": "notify", "action": "trigger", "deliveries": [],
                    "key": f"{n['uuid']}/notify/{n['msg_id']}"})
    out.sort(key=lambda a: a.get("received_at") or 0, reverse=True)
    return out[:limit]


def gather(state_url: str, now: float, limit: int | None,
           severities: list[str] | None = None, uuid: str | None = None,
           reader=None, f: AlertFilter | None = None,
           offset: int = 0, event_ids: list[int] | None = None) -> tuple[list[dict], int]:
    """(the alerts (of the agent ``uuid``), newest first, at most ``limit`` (None: all);
    how many there are in all); :class:`Unavailable` when the state database cannot be
    read. ``f``: the alerts a list's filter shows, in its order, from ``offset`` (instead
    of ``severities`` and ``uuid``). ``reader``: the console's
    (:class:`fleetwatch.store.reader.Reader` over its engine).

    Which alerts, their order and how many are one query (:func:`query.alerts.page`);
    the page's alerts are then read whole, an event with its deliveries and its NOTIFY.
    ``event_ids``: those alert events instead (one alert's page), newest first."""
    from query import alerts as listing
    from query import fleet, handling
    if f is None:
        f = AlertFilter(tuple(severities or ()), uuid or "")
    with reading(state_url, reader) as (reader, reads):
        if event_ids is not None:
            named = reader.read(reads.alert_events, limit=None, ids=event_ids) or []
            found = listing.Page([("event", str(e["id"]), e["key"]) for e in named],
                                 len(named))
        else:
            found = reader.read(listing.page, f=f, offset=offset, limit=limit) \
                or listing.Page([], 0)
        ids = [int(ref) for source, ref, _ in found.refs if source == "event"]
        msg_ids = [key.rpartition("/notify/")[2] for _, _, key in found.refs
                   if "/notify/" in key]
        events = reader.read(reads.alert_events, limit=None, ids=ids) if ids else []
        notifications = reader.read(reads.alerts, limit=None, msg_ids=msg_ids) \
            if msg_ids else []
        merged = merge(notifications or [], events or [], None)
        order = {(source, ref): i for i, (source, ref, _) in enumerate(found.refs)}
        merged = [a for a in merged if _ref(a) in order]
        merged.sort(key=lambda a: order[_ref(a)])
        # the state of the agents listed only (all of them past fleet.SCOPE_MAX)
        uuids = sorted({a["uuid"] for a in merged if a.get("uuid")})
        rows = reader.read(fleet.read, now=now, uuids=uuids, results=False) or fleet.Rows()
        kept = reader.read(reads.kept_back, keys=[a["key"] for a in merged
                                                  if a["kind"] == "notify"
                                                  and not a["deliveries"]]) or {}
    alerts = [{**{k: row.get(k) for k in FIELDS}, "kept_back": kept.get(row["key"])}
              for row in merged]
    handling.acks_on_alerts(alerts, rows.acks)
    handling.on_alerts(alerts, fleet.handled_by_key(alerts, rows, now))
    for alert in alerts:
        alert["sent_at"], alert["received_at"] = iso(alert["sent_at"]), iso(alert["received_at"])
        alert["deliveries"] = [{**d, "sent_at": iso(d.get("sent_at")),
                                "next_attempt": iso(d.get("next_attempt"))}
                               for d in alert["deliveries"] or []]
    return alerts, max(found.total, len(alerts))     # (an alert recorded between the reads)


def deliveries(state_url: str, limit: int | None, channel: str | None = None,
               event_ids: list[int] | None = None, reader=None) -> tuple[list[dict], int]:
    """(every attempt to send an alert, newest first, at most ``limit`` (None: all), to
    ``channel``, of the alert events ``event_ids``; how many match in all), as
    ``fleetwatch alerts --deliveries --json`` prints them (:func:`delivery_document`):
    the outcome, the service's status and its id for the message, how long the send
    took; :class:`Unavailable` when the state database cannot be read."""
    with reading(state_url, reader) as (reader, reads):
        found = reader.read(reads.deliveries, limit=limit, channel=channel,
                            event_ids=event_ids)
    return found or ([], 0)


def delivery_document(rows: list[dict], total: int) -> dict:
    """``{"deliveries": [...], "total": N, "truncated": bool}``: each attempt with
    ``started_at`` in ISO 8601 and ``latency_ms``."""
    out = []
    for r in rows:
        r = dict(r)
        r["started_at"] = iso(r.pop("started"))
        r["latency_ms"] = round(r.pop("latency") * 1000, 1)
        r["check"] = r.pop("check_name")
        out.append(r)
    return {"deliveries": out, "total": total, "truncated": total > len(out)}


def _ref(alert: dict) -> tuple[str, str]:
    """Where a merged alert came from, as :func:`query.alerts.page` names it: (``event``,
    its id) or (``notify``, the msg_id of a NOTIFY no event was made of)."""
    if alert.get("id") is not None:
        return ("event", str(alert["id"]))
    return ("notify", str(alert.get("msg_id")))


def document(alerts: list[dict], total: int) -> dict:
    """What ``alerts --json`` prints (and the API's ``/alerts``): the alerts, how many there
    are, and whether some were left out."""
    return {"alerts": alerts, "total": total, "truncated": total > len(alerts)}
