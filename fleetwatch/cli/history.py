"""``fleetwatch history SUBCOMMAND``: the history lake's operator commands (README "History").

Every subcommand reads the operator config's ``history:`` section (lake, Spark master and
settings; ``--config``, default /etc/fleetwatch/fleetwatch.yaml), which ``--lake`` and
``--master`` override. PySpark is imported only by the subcommand that runs, so a missing
``history`` extra, like a missing Java, is one clear line (exit 69), and ``--help`` works
without either.

Adding a subcommand: write ``_args_NAME(parser)`` for its own options and add one entry to
:data:`SUBCOMMANDS`; the function named there is called as ``fn(args, settings) -> int``
with the loaded :class:`sinks.history.config.HistorySettings`.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys

from fleetwatch.config import load
from fleetwatch.cli.operator import DEFAULT_PATH, OperatorConfig


def _args_compact(p: argparse.ArgumentParser) -> None:
    p.add_argument("--every", type=float, metavar="SECONDS",
                   help="compact again this many seconds after each run, until SIGTERM "
                        "(one Spark session for all runs; `make demo` uses this)")
    p.add_argument("--quiet", action="store_true", help="print only the final summary")


def _args_sql(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", metavar="QUERY",
                   help="Spark SQL over the views metrics, heartbeats, results, "
                        "notifications, registrations, heartbeat_spans and hosts")
    p.add_argument("--json", action="store_true",
                   help="print a JSON array of rows (timestamps as ISO 8601 UTC)")
    p.add_argument("--limit", type=int, default=1000, metavar="N",
                   help="print at most N rows (default 1000; 0: all)")


def _args_replay(p: argparse.ArgumentParser) -> None:
    p.add_argument("--to", required=True, choices=["graphite"], help="where to replay to")
    p.add_argument("--since", metavar="T", help="from T (epoch seconds, ISO 8601 UTC like "
                                                "2026-11-20T10:00Z, or 7d for 7 days ago)")
    p.add_argument("--until", metavar="T", help="until T, excluded (default: the newest)")
    p.add_argument("--host", metavar="HOST", help="one host (hostname or uuid)")
    p.add_argument("--sink-config", metavar="PATH",
                   help="the graphite sink's config: carbon, prefix, tags and batch from "
                        "its graphite: section (the flags below win)")
    p.add_argument("--carbon", metavar="HOST:PORT",
                   help="carbon's plaintext receiver (default 127.0.0.1:2003)")
    p.add_argument("--prefix", help="first node(s) of every path (default fleet; '' none)")
    p.add_argument("--tags", action="store_true", help="Graphite tagged series")
    p.add_argument("--batch", type=int, metavar="N", help="datapoints per connection")
    p.add_argument("--retry-for", type=float, default=300.0, metavar="SECONDS",
                   help="give up when carbon refuses a batch this long (default 300)")
    p.add_argument("--dry-run", action="store_true",
                   help="count the datapoints, send nothing")


def _args_expire(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", required=True, metavar="AGE",
                   help="drop date partitions whose day is older than AGE (400d, 8w)")
    p.add_argument("--dry-run", action="store_true", help="print what would be dropped")


#: name -> (function adding its options, "module:function" running it, one-line help)
SUBCOMMANDS: dict[str, tuple] = {
    "compact": (_args_compact, "sinks.history.compact:cli",
                "landing files -> Parquet tables (dedupe by msg_id, exactly once per file)"),
    "sql": (_args_sql, "sinks.history.query:sql_cli",
            "run Spark SQL over the tables and print a table (or --json)"),
    "replay": (_args_replay, "sinks.history.replay:cli",
               "backfill Graphite from the metrics and results tables, original timestamps"),
    "expire": (_args_expire, "sinks.history.expire:cli",
               "drop date partitions older than --older-than (--dry-run: list them)"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for name, (add_args, _, help_) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        p.add_argument("--config", metavar="PATH", default=DEFAULT_PATH,
                       help=f"operator config with a history: section (default {DEFAULT_PATH})")
        p.add_argument("--lake", metavar="PATH", help="the lake directory (wins over the config)")
        p.add_argument("--master", metavar="URL", help="spark.master (wins over the config)")
        add_args(p)


def settings_from(args):
    """The ``history:`` settings of ``args.config``, with the command line's overrides."""
    settings = load(OperatorConfig, args.config).history
    changes = {k: v for k, v in (("lake", args.lake), ("master", args.master)) if v}
    return dataclasses.replace(settings, **changes) if changes else settings


def run(args) -> int:
    from fleetwatch.optional import EX_UNAVAILABLE, MissingDependency, optional_import
    from sinks.history.spark import JavaMissing, java
    settings = settings_from(args)
    _, target, _ = SUBCOMMANDS[args.subcommand]
    module_name, _, function = target.partition(":")
    try:
        optional_import("pyspark", f"fleetwatch history {args.subcommand}")
        java()
        module = importlib.import_module(module_name)
    except (MissingDependency, JavaMissing) as e:
        print(f"fleetwatch history: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    return getattr(module, function)(args, settings)
