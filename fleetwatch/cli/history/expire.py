"""``fleetwatch history expire --older-than 400d [--dry-run]``: drop the tables' old date
partitions (:mod:`fleetwatch.lake.expire` says which, and how safely). Exit status: 2 for a
bad ``--older-than``, 75 (EX_TEMPFAIL) while a compaction runs."""

from __future__ import annotations

import argparse
import os
import sys

HELP = "drop date partitions older than --older-than (--dry-run: list them)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", required=True, metavar="AGE",
                   help="drop date partitions whose day is older than AGE (400d, 8w)")
    p.add_argument("--dry-run", action="store_true", help="print what would be dropped")


def run(args, settings) -> int:
    from fleetwatch.lake.lock import Busy
    from fleetwatch.lake.expire import expire
    from fleetwatch.lake.times import seconds
    try:
        older_than = seconds(args.older_than)
        expire(settings.lake, older_than, dry_run=args.dry_run)
    except ValueError as e:
        print(f"fleetwatch history expire: {e}", file=sys.stderr)
        return 2
    except Busy as e:
        print(f"fleetwatch history expire: {e}; try again later", file=sys.stderr)
        return os.EX_TEMPFAIL
    return 0
