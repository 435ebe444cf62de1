"""``fleetwatch history gaps HOST [--since T] [--until T] [--every 1h] [--sink S] [--json]``:
"no data or dropped?" for one host, per bucket (:meth:`fleetwatch.lake.query.History.gaps`;
the rules are fleetwatch/lake/gaps.py's): what landed in the lake, what routers dropped for the
host (an estimate per bucket: a drop entry's count spread evenly over the time it spans), and
a verdict, ``ok``, ``no data`` or ``dropped``.

Printed as a table (times in UTC, control characters escaped, counts of drops to one
decimal) or with ``--json`` as one document (ISO 8601 UTC times, counts to three decimals).
Exit status: 2 for a bad time, bucket size or window. A host the lake knows by no HELLO, no
agent's own REGISTER and no uuid is said on stderr (it is taken as a uuid, as every history
query does).
"""

from __future__ import annotations

import argparse
import json
import sys

from fleetwatch.cli.history.session import open_lake, tell_uncompacted
from fleetwatch.cli.history.sql import printable
from fleetwatch.display import escape, iso, table

HELP = "per bucket for a host: what landed, what routers dropped, ok / no data / dropped"
#: the table's columns (``--json`` has the same fields, and ``drops`` as a list)
COLUMNS = ["start", "end", "verdict", "heartbeats", "results", "stats", "notifications",
           "dropped", "drops"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", metavar="HOST", help="the host: a hostname (from its agent's HELLOs "
                                                "and REGISTERs) or a uuid")
    p.add_argument("--since", metavar="T", default="1d",
                   help="from T (epoch seconds, ISO 8601 UTC like 2026-11-20T10:00Z, or 7d "
                        "for 7 days ago; default 1d)")
    p.add_argument("--until", metavar="T", help="until T, excluded (default: now)")
    p.add_argument("--every", metavar="D", default="1h",
                   help="bucket size, aligned to the epoch (90s, 5m, 1h, 1d: a UTC day; "
                        "default 1h; at most 10,000 buckets)")
    p.add_argument("--sink", metavar="TYPE",
                   help="only drops for this sink type (history: what the lake misses)")
    p.add_argument("--json", action="store_true",
                   help="print one JSON document (times ISO 8601 UTC)")


def run(args, settings) -> int:
    import time

    from pyspark.sql import functions as F
    from fleetwatch.lake.gaps import buckets
    from fleetwatch.lake.times import epoch, seconds
    try:
        now = time.time()
        since, until = epoch(args.since, now), epoch(args.until, now)
        until = now if until is None else until
        every = seconds(args.every)
        buckets(since, until, every)
    except ValueError as e:
        print(f"fleetwatch history gaps: {e}", file=sys.stderr)
        return 2
    history = open_lake(settings)
    gaps = printable(history.gaps(args.host, since, until, every, args.sink), iso=args.json)
    rows = [r.asDict(recursive=True) for r in gaps.collect()]
    known = history.hosts().filter((F.col("uuid") == args.host)
                                   | (F.col("hostname") == args.host)).count()
    if args.json:
        print(json.dumps({"host": args.host, "uuids": history.uuids(args.host),
                          "since": iso(since), "until": iso(until), "every": every,
                          "sink": args.sink, "buckets": [_rounded(r) for r in rows]},
                         indent=2, ensure_ascii=False))
    else:
        print(f"{escape(args.host)}: {len(rows)} buckets of {args.every}"
              + (f", drops for sink {escape(args.sink)}" if args.sink else ""))
        print(table([_cells(r) for r in rows], COLUMNS))
    if not known:
        print(f"fleetwatch history gaps: no HELLO or agent REGISTER in the lake names "
              f"{escape(args.host)!s} and no agent has that uuid: taken as a uuid",
              file=sys.stderr)
    tell_uncompacted(args, settings)
    return 0


def _rounded(row: dict) -> dict:
    return {**row, "dropped": round(row["dropped"], 3),
            "drops": [{**d, "count": round(d["count"], 3)} for d in row["drops"]]}


def _cells(row: dict) -> dict:
    return {**row, "dropped": _count(row["dropped"]) if row["dropped"] else "-",
            "drops": "; ".join(f"{d['type']} {d['sink']} {_count(d['count'])}"
                               for d in row["drops"]) or None}


def _count(n: float) -> str:
    """A spread count to one decimal, a whole one without (``5.5``, ``12``)."""
    text = f"{n:.1f}"
    return text[:-2] if text.endswith(".0") else text
