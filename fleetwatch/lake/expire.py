"""Expiry: drop the tables' old date partitions (``fleetwatch history expire --older-than
400d``, :mod:`fleetwatch.cli.history.expire`).

A partition ``tables/TABLE/date=D`` is dropped when its whole day is older than the cut-off:
``D`` before the UTC date of ``now - older_than`` (so ``--older-than 400d`` keeps the last
400 days, and the day the cut-off falls in). ``--dry-run`` prints the same list and drops
nothing. Landing files are not touched (compaction moves or deletes them itself).

Expire holds the lake's compaction lock (:func:`fleetwatch.lake.lock.locked`), so it
never removes a partition a compaction is merging; with a compaction running it exits 75
(EX_TEMPFAIL: try again later). Each partition is first renamed out of ``tables/`` into
``_compaction/expired/`` (one atomic rename: a query sees the partition whole or not at
all), then deleted; a run killed between the two leaves only that directory, which the
next run deletes. Like compaction, it works on a local or POSIX-like shared file system.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from sinks.history.landing import fsync_dir
from fleetwatch.lake.lock import locked
from fleetwatch.lake.manifest import Lake
from fleetwatch.lake.schema import PARTITION, TABLE_NAMES
from fleetwatch.lake.times import DAY

_PARTITION = re.compile(rf"^{PARTITION}=(\d{{4}}-\d{{2}}-\d{{2}})$")


@dataclass(frozen=True)
class Partition:
    table: str
    date: str
    path: str
    files: int
    bytes: int

    def describe(self) -> str:
        return (f"{self.table} {PARTITION}={self.date} ({self.files} files, "
                f"{self.bytes / 1e6:.1f} MB)")


def cutoff(older_than: float, now: float) -> str:
    """The first date kept: the UTC date of ``now - older_than``."""
    return datetime.fromtimestamp(now - older_than, timezone.utc).strftime("%Y-%m-%d")


def partitions(lake: Lake) -> list[Partition]:
    """Every date partition of every table, oldest first."""
    found = []
    for table in TABLE_NAMES:
        try:
            entries = list(os.scandir(lake.table(table)))
        except FileNotFoundError:
            continue
        for entry in entries:
            match = _PARTITION.match(entry.name)
            if not match or not entry.is_dir():
                continue
            files = [f for f in os.scandir(entry.path) if f.is_file()]
            data = [f for f in files if not f.name.startswith((".", "_"))]  # not .crc
            found.append(Partition(table, match.group(1), entry.path, len(data),
                                   sum(f.stat().st_size for f in files)))
    return sorted(found, key=lambda p: (p.date, p.table))


def expired(lake: Lake, first_kept: str) -> list[Partition]:
    return [p for p in partitions(lake) if p.date < first_kept]


def expire(root: str, older_than: float, dry_run: bool = False, out=print,
           wall=time.time) -> list[Partition]:
    """Drop (or with ``dry_run`` only list) the partitions older than ``older_than``
    seconds; return them. Raises :class:`fleetwatch.lake.lock.Busy`."""
    if older_than < DAY:
        raise ValueError("--older-than: expected at least one day (1d)")
    lake = Lake(root)
    first_kept = cutoff(older_than, wall())
    trash = os.path.join(lake.work, "expired")
    if dry_run:
        old = expired(lake, first_kept)
        for p in old:
            out(f"would drop {p.describe()}")
        out(f"{len(old)} partitions older than {first_kept} would be dropped (dry run)")
        return old
    with locked(lake, "expiry"):
        shutil.rmtree(trash, ignore_errors=True)  # what a killed run left
        old = expired(lake, first_kept)
        for p in old:
            target = os.path.join(trash, p.table, os.path.basename(p.path))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(p.path, target)
            fsync_dir(lake.table(p.table))
            shutil.rmtree(target)
            out(f"dropped {p.describe()}")
        shutil.rmtree(trash, ignore_errors=True)
    total = sum(p.bytes for p in old) / 1e6
    out(f"dropped {len(old)} partitions older than {first_kept} ({total:.1f} MB)")
    return old
