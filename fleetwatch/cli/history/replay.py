"""``fleetwatch history replay --to graphite``: backfill carbon from the lake at the original
timestamps (:mod:`fleetwatch.lake.replay` says which datapoints, named how). Progress goes to
stderr, the summary to stdout. Exit status: 2 for a bad option, 1 when carbon stayed away
longer than ``--retry-for`` (run the same command again: points already sent are stored
once)."""

from __future__ import annotations

import argparse
import sys

HELP = "backfill Graphite from the metrics and results tables, original timestamps"
#: exit status when carbon refused the batches for longer than --retry-for
EX_CARBON_GONE = 1


def add_arguments(p: argparse.ArgumentParser) -> None:
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


def target_from(args):
    """The :class:`fleetwatch.lake.replay.Target` of ``args``: the graphite sink's config if
    given, flags on top. Raises ValueError for a bad ``--carbon``."""
    from fleetwatch.lake.replay import Target
    base = Target()
    if args.sink_config:
        from fleetwatch.config import load
        from sinks.config import SinkConfig
        g = load(SinkConfig, args.sink_config).graphite
        base = Target(g.host, g.port, g.prefix, g.tags, g.batch, g.timeout)
    host, port = base.host, base.port
    if args.carbon:
        host, _, port_text = args.carbon.rpartition(":")
        if not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"--carbon: expected HOST:PORT, got {args.carbon!r}")
        port = int(port_text)
    return Target(host, port, base.prefix if args.prefix is None else args.prefix,
                  base.tags or args.tags, args.batch or base.batch, base.timeout)


def run(args, settings) -> int:
    from fleetwatch.lake.query import History
    from fleetwatch.lake.times import epoch
    from fleetwatch.lake.replay import CarbonGone, Replay
    from fleetwatch.lake.spark import from_settings
    try:
        target = target_from(args)
        since, until = epoch(args.since), epoch(args.until)
    except ValueError as e:
        print(f"fleetwatch history replay: {e}", file=sys.stderr)
        return 2
    replay = Replay(History(from_settings(settings), settings.lake), target,
                    retry_for=args.retry_for)
    try:
        counts = replay.run(since, until, args.host, dry_run=args.dry_run)
    except CarbonGone as e:
        print(f"fleetwatch history replay: {e}; run the same command again when carbon "
              f"is back (points already sent are stored once)", file=sys.stderr)
        return EX_CARBON_GONE
    skipped = {k: v for k, v in counts.items() if k not in ("rows", "datapoints", "batches")}
    print(f"replayed {counts['datapoints']} datapoints from {counts['rows']} rows in "
          f"{counts['batches']} batches to {target.host}:{target.port}"
          + (f"; {', '.join(f'{k} {v}' for k, v in sorted(skipped.items()))}" if skipped
             else ""))
    return 0
