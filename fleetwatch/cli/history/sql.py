"""``fleetwatch history sql QUERY [--json] [--limit N]``: Spark SQL over the lake's views
(:meth:`sinks.history.query.History.sql`), printed as a table or JSON, timestamps in UTC.
Exit status: 2 when Spark refuses the query. A lake never compacted is said on stderr, with
the command that compacts it."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from fleetwatch.cli.history import open_lake, tell_uncompacted
from fleetwatch.display import table

HELP = "run Spark SQL over the tables and print a table (or --json)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY",
                   help="Spark SQL over the views metrics, heartbeats, results, "
                        "notifications, registrations, heartbeat_spans, lifecycle, drops "
                        "and hosts")
    p.add_argument("--json", action="store_true",
                   help="print a JSON array of rows (timestamps as ISO 8601 UTC)")
    p.add_argument("--limit", type=int, default=1000, metavar="N",
                   help="print at most N rows (default 1000; 0: all)")


def printable(df, iso: bool = False):
    """DataFrame ``df`` with timestamps as UTC text, so the output does not depend on the
    local time zone of this process: the operator tables' format (``2026-11-20 10:00:00
    UTC``, :data:`fleetwatch.display.HUMAN`), or ISO 8601 with ``iso``."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import TimestampNTZType, TimestampType
    pattern = "yyyy-MM-dd'T'HH:mm:ss.SSSXXX" if iso else "yyyy-MM-dd HH:mm:ss 'UTC'"
    return df.select(*(F.date_format(F.col(f"`{f.name}`"), pattern).alias(f.name)
                       if isinstance(f.dataType, (TimestampType, TimestampNTZType))
                       else F.col(f"`{f.name}`") for f in df.schema.fields))


def run(args, settings) -> int:
    from pyspark.errors import PySparkException

    # PySpark 4 logs each failed query on stderr as JSON before raising: one line is enough
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    history = open_lake(settings)
    try:
        df = printable(history.sql(args.query), iso=args.json)
        rows = df.limit(args.limit + 1).collect() if args.limit else df.collect()
    except PySparkException as e:
        print(f"fleetwatch history sql: {str(e).strip().splitlines()[0]}", file=sys.stderr)
        return 2
    cut = bool(args.limit) and len(rows) > args.limit
    rows = [r.asDict(recursive=True) for r in rows[:args.limit or None]]
    if args.json:
        print(json.dumps(rows, default=str, ensure_ascii=False))
    else:
        print(table(rows, df.columns) if df.columns else "")
    if cut:
        print(f"(first {args.limit} rows; --limit 0 for all)", file=sys.stderr)
    tell_uncompacted(args, settings)
    return 0
