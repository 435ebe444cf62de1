"""``fleetwatch alerts``: the alerts the alerting sinks recorded, newest first, with their
delivery state per channel (pending, sent at, attempts, last error, failed).

:func:`fleetwatch.actions.alerts.gather` reads them, for this command and the console.
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

from fleetwatch.actions import alerts as alerting
from fleetwatch.actions.alerts import Unavailable, at_least
from fleetwatch.config import load
from fleetwatch.display import Stamp, table
from query import handling
from fleetwatch.cli.operator import OperatorConfig, add_config
from fleetwatch.protocol import SEVERITIES


def add_arguments(parser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--limit", type=_count, default=50, metavar="N",
                        help="show the N latest (default 50; 0: all); --json says how many "
                             "there are (total) and whether it left some out (truncated)")
    parser.add_argument("--severity", choices=SEVERITIES, metavar="S",
                        help=f"only S and more severe ({', '.join(SEVERITIES)}; a check's "
                             f"UNKNOWN counts as error)")
    parser.add_argument("--deliveries", action="store_true",
                        help="list every attempt to send an alert instead, newest first: "
                             "the channel, the outcome (sent, retry, failed), what the "
                             "service answered and its id for the message, how long it took")
    parser.add_argument("--channel", metavar="NAME",
                        help="with --deliveries: only the attempts on channel NAME")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number of alerts, 0 for all; got {text!r}")
    return value


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


def run(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    if args.channel is not None and not args.deliveries:
        print("fleetwatch alerts: --channel goes with --deliveries", file=sys.stderr)
        return os.EX_USAGE
    if args.deliveries:
        return _deliveries(args, config)
    try:
        alerts, total = alerting.gather(config.state_url, clock(), args.limit or None,
                                        at_least(args.severity))
    except Unavailable as e:
        print(f"fleetwatch alerts: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if args.json:
        print(json.dumps(alerting.document(alerts, total), indent=2, ensure_ascii=False))
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


def _deliveries(args, config) -> int:
    """``alerts --deliveries``: the attempts to send, newest first."""
    try:
        rows, total = alerting.deliveries(config.state_url, args.limit or None, args.channel)
    except Unavailable as e:
        print(f"fleetwatch alerts: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if args.json:
        print(json.dumps(alerting.delivery_document(rows, total), indent=2,
                         ensure_ascii=False))
        return 0
    for r in rows:
        r["started"] = Stamp(r["started"])
        r["what"] = f"{r['hostname'] or '?'}/{r['check_name']}" if r["check_name"] \
            else r["hostname"] or r["key"]
        r["ms"] = f"{r['latency'] * 1000:.0f}"
        r["answer"] = " ".join(str(r["answer"] or "").split())[:60]
    print(table(rows, ["started", "channel", "what", "action", "attempt", "outcome", "status",
                       "ms", "message_id", "answer"]))
    if total > len(rows):
        print(f"(the latest {len(rows)} of {total} attempts; --limit 0 for all)",
              file=sys.stderr)
    return 0
