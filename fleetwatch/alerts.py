"""``fleetwatch alerts``: the notifications the alerting sink recorded, newest first."""

from __future__ import annotations

import json
import sys

from fleetwatch.config import load
from fleetwatch.display import iso, table
from fleetwatch.operator import DEFAULT_PATH, OperatorConfig
from fleetwatch.protocol import SEVERITIES

FIELDS = ("msg_id", "uuid", "hostname", "severity", "text", "source", "router", "sent_at",
          "received_at")


def add_arguments(parser) -> None:
    parser.add_argument("--config", default=DEFAULT_PATH, metavar="PATH",
                        help=f"operator config (default {DEFAULT_PATH})")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--limit", type=int, default=50, metavar="N",
                        help="show the N latest (default 50)")
    parser.add_argument("--severity", choices=SEVERITIES, metavar="S",
                        help=f"only S and more severe ({', '.join(SEVERITIES)})")


def at_least(severity: str | None) -> list[str] | None:
    """The severities at or above ``severity`` (None: all)."""
    return None if severity is None else list(SEVERITIES[SEVERITIES.index(severity):])


def run(args) -> int:
    config = load(OperatorConfig, args.config)
    from sinks import EX_UNAVAILABLE, MissingDependency
    from fleetwatch.statedb import StateError, read
    try:
        rows = read(config.state_url, "alerts", limit=max(args.limit, 0),
                    severities=at_least(args.severity))
    except (MissingDependency, StateError) as e:
        print(f"fleetwatch alerts: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    alerts = [{k: row.get(k) for k in FIELDS} for row in rows]
    for alert in alerts:
        alert["sent_at"], alert["received_at"] = iso(alert["sent_at"]), iso(alert["received_at"])
    if args.json:
        print(json.dumps({"alerts": alerts}, indent=2, ensure_ascii=False))
        return 0
    print(table(alerts, ["received_at", "severity", "hostname", "text", "msg_id"]))
    return 0
