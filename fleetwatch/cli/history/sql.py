"""``fleetwatch history sql QUERY [--json] [--limit N]``: Spark SQL over the lake's views
(:meth:`fleetwatch.lake.query.History.sql`), printed as a table or JSON, timestamps in UTC.
Exit status: 2 when Spark refuses the query. A lake never compacted is said on stderr, with
the command that compacts it."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from fleetwatch.cli.history.session import open_lake, tell_uncompacted
from fleetwatch.display import table

HELP = "run Spark SQL over the tables and print a table (or --json)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY",
                   help="Spark SQL over the views metrics, heartbeats, results, "
                        "notifications, registrations, heartbeat_spans, lifecycle, "
                        "deliveries, drops and hosts")
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
    history = open_lake(settings)
    code = answer(history, args.query, args.json, args.limit, sys.stdout, sys.stderr)
    if code == 0:
        tell_uncompacted(args, settings)
    return code


def answer(history, query: str, as_json: bool, limit: int, out, err) -> int:
    """Print the answer to ``query`` on ``out`` (a table, or JSON with ``as_json``; at most
    ``limit`` rows, 0: all), what went wrong on ``err``; the exit status (2: Spark refused
    the query). This process's own Spark, or a warm one's (``history serve``)."""
    from pyspark.errors import PySparkException

    # PySpark 4 logs each failed query on stderr as JSON before raising: one line is enough
    logging.getLogger("SQLQueryContextLogger").setLevel(logging.CRITICAL)
    try:
        df = printable(history.sql(query), iso=as_json)
        rows = df.limit(limit + 1).collect() if limit else df.collect()
    except PySparkException as e:
        print(f"fleetwatch history sql: {str(e).strip().splitlines()[0]}", file=err)
        return 2
    cut = bool(limit) and len(rows) > limit
    rows = [r.asDict(recursive=True) for r in rows[:limit or None]]
    if as_json:
        print(json.dumps(rows, default=str, ensure_ascii=False), file=out)
    else:
        print(table(rows, df.columns) if df.columns else "", file=out)
    if cut:
        print(f"(first {limit} rows; --limit 0 for all)", file=err)
    return 0
