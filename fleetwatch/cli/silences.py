"""``fleetwatch silences [--json] [--all] [--remove ID]``: the silences, or end one now."""

from __future__ import annotations

import json
import sys
import time

from fleetwatch.config import load
from fleetwatch.display import iso, table
from fleetwatch.cli.operator import DEFAULT_PATH, OperatorConfig
from fleetwatch.cli.silence import EX_UNAVAILABLE, Unavailable, database_error, writer

FIELDS = ("id", "host", "check", "created", "until", "reason", "created_by", "removed",
          "suppressed")


def add_arguments(parser) -> None:
    parser.add_argument("--config", default=DEFAULT_PATH, metavar="PATH",
                        help=f"operator config (default {DEFAULT_PATH})")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--all", action="store_true", help="also the silences that ended")
    parser.add_argument("--remove", type=int, metavar="ID", help="end silence ID now")


def remove(url: str, silence_id: int, now: float) -> bool:
    from sqlalchemy.exc import SQLAlchemyError
    from sinks.alerting import state as alertstate
    eng = writer(url)
    try:
        with eng.begin() as conn:
            return alertstate.end_silence(conn, silence_id, now)
    except SQLAlchemyError as e:
        raise database_error(url, e) from None
    finally:
        eng.dispose()


def run(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    now = clock()
    if args.remove is not None:
        try:
            ended = remove(config.state_url, args.remove, now)
        except Unavailable as e:
            print(f"fleetwatch silences: {e}", file=sys.stderr)
            return EX_UNAVAILABLE
        if not ended:
            print(f"fleetwatch silences: no running silence {args.remove}", file=sys.stderr)
            return 1
        print(f"silence {args.remove} removed")
        return 0
    from fleetwatch.optional import MissingDependency
    from sinks.state.reader import StateError, read
    try:
        rows = read(config.state_url, "silences", now=now, ended=args.all)
    except (MissingDependency, StateError) as e:
        print(f"fleetwatch silences: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    out = []
    for row in rows:
        entry = {k: row.get(k) for k in FIELDS if k != "check"}
        entry["check"] = row.get("check_name")
        entry["active"] = row.get("removed") is None and row["created"] <= now < row["until"]
        for k in ("created", "until", "removed"):
            entry[k] = iso(entry[k])
        out.append(entry)
    if args.json:
        print(json.dumps({"silences": out}, indent=2, ensure_ascii=False))
        return 0
    for entry in out:
        entry["state"] = "active" if entry["active"] else \
            "removed" if entry["removed"] is not None else "ended"
        entry["ends"] = entry["removed"] or entry["until"]
    print(table(out, ["id", "host", "check", "state", "ends", "created_by", "suppressed",
                      "reason"]))
    return 0
