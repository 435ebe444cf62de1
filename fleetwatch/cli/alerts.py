"""``fleetwatch alerts``: the alerts the alerting sinks recorded, newest first, with their
delivery state per channel (pending, sent at, attempts, last error, failed).

An alert is an event of the outbox (``alert_events``: a check's HARD state change or
recovery, a host DOWN/UP, flapping, a notification) or a recorded NOTIFY that no event was
made of (before evaluation ran, or an older database). A NOTIFY and its event are shown as
one entry, with the notification's own fields (``msg_id``, ``text``, ``received_at``...).
A problem's trigger since its last recovery carries how the problem is handled now
(``handled``: ack, downtime, unreachable, host, stale; :mod:`query.handling`), and
the running acknowledgement that covers it (``ack``: by, comment, until;
``fleetwatch ack``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from fleetwatch.config import load
from fleetwatch.display import iso, table
from query import fleet, handling
from fleetwatch.cli.operator import OperatorConfig, add_config
from fleetwatch.cli.silence import Unavailable
from fleetwatch.protocol import SEVERITIES

FIELDS = ("msg_id", "uuid", "hostname", "severity", "text", "source", "router", "sent_at",
          "received_at", "kind", "action", "key", "check", "status", "summary", "deliveries",
          "kept_back")
#: Nagios states among the NOTIFY severities, for --severity
RANK = {**{s: i for i, s in enumerate(SEVERITIES)}, "ok": 1, "unknown": 3}


def add_arguments(parser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--limit", type=_count, default=50, metavar="N",
                        help="show the N latest (default 50; 0: all); --json says how many "
                             "there are (total) and whether it left some out (truncated)")
    parser.add_argument("--severity", choices=SEVERITIES, metavar="S",
                        help=f"only S and more severe ({', '.join(SEVERITIES)}; a check's "
                             f"UNKNOWN counts as error)")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of alerts, 0 for all; got {text!r}")
    return value


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


def delivery_cell(deliveries: list[dict], kept_back: dict | None = None) -> str:
    """``pager: sent; mail: pending (3 attempts: connection refused)``; ``muted by silence
    3`` or ``held by downtime 1`` for a notification one kept back; ``-`` if routed nowhere."""
    if kept_back:
        return handling.kept_back(kept_back)
    parts = []
    for d in deliveries:
        part = f"{d['channel']}: {d['state']}"
        if d["state"] != "sent" and d.get("attempts"):
            error = " ".join(str(d.get("last_error") or "").split())[:60]
            part += f" ({d['attempts']} attempt{'s' if d['attempts'] != 1 else ''}" \
                    f"{': ' + error if error else ''})"
        parts.append(part)
    return "; ".join(parts) or "-"


def gather(config: OperatorConfig, now: float, limit: int | None,
           severities: list[str] | None = None, uuid: str | None = None,
           reader=None) -> tuple[list[dict], int]:
    """(the alerts (of the agent ``uuid``), newest first, at most ``limit``; how many there
    are in all), as ``alerts --json`` prints them (the console lists them through this
    too, with its ``reader``: :class:`sinks.state.reader.Reader` over its engine);
    Unavailable (:mod:`fleetwatch.cli.silence`) when the state database cannot be read."""
    from fleetwatch.optional import MissingDependency
    from sinks.state import state_reads
    from sinks.state.reader import Reader, StateError
    try:
        reads = state_reads()
        reader = reader or Reader(config.state_url)
        try:
            notifications = reader.read(reads.alerts, limit=limit, severities=severities,
                                        uuid=uuid)
            events = reader.read(reads.alert_events, limit=limit, severities=severities,
                                 uuid=uuid)
            total = reader.read(reads.alert_total, severities=severities, uuid=uuid) or 0
            merged = merge(notifications, events, limit)
            # the state of the agents listed only (all of them past fleet.SCOPE_MAX)
            uuids = sorted({a["uuid"] for a in merged if a.get("uuid")})
            rows = reader.read(fleet.read, now=now, uuids=uuids, results=False) or fleet.Rows()
            kept = reader.read(reads.kept_back, keys=[a["key"] for a in merged
                                                      if a["kind"] == "notify"
                                                      and not a["deliveries"]]) or {}
        finally:
            reader.close()
    except (MissingDependency, StateError) as e:
        raise Unavailable(str(e)) from None
    alerts = [{**{k: row.get(k) for k in FIELDS}, "kept_back": kept.get(row["key"])}
              for row in merged]
    handling.acks_on_alerts(alerts, rows.acks)
    handling.on_alerts(alerts, fleet.handled_by_key(alerts, rows, now))
    for alert in alerts:
        alert["sent_at"], alert["received_at"] = iso(alert["sent_at"]), iso(alert["received_at"])
        alert["deliveries"] = [{**d, "sent_at": iso(d.get("sent_at")),
                                "next_attempt": iso(d.get("next_attempt"))}
                               for d in alert["deliveries"] or []]
    return alerts, max(total, len(alerts))     # (an alert recorded between the reads)


def run(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    try:
        alerts, total = gather(config, clock(), args.limit or None, at_least(args.severity))
    except Unavailable as e:
        print(f"fleetwatch alerts: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if args.json:
        print(json.dumps({"alerts": alerts, "total": total, "truncated": total > len(alerts)},
                         indent=2, ensure_ascii=False))
        return 0
    for alert in alerts:
        alert["what"] = alert["check"] or alert["kind"]
        alert["delivery"] = delivery_cell(alert["deliveries"], alert["kept_back"])
        how = handling.cell(alert["handled"])
        handled = f"[{how}] " if how else ""
        alert["text"] = " ".join(f"{handled}{alert['text'] or ''}".split())[:80]
    print(table(alerts, ["received_at", "severity", "hostname", "what", "text", "delivery"]))
    if total > len(alerts):
        print(f"(the latest {len(alerts)} of {total} alerts; --limit 0 for all)",
              file=sys.stderr)
    return 0
