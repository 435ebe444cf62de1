"""Compaction's commit protocol on the lake's file system: staging, intent, manifest, settle.

A run (id ``RUN``, sortable by time) goes through these states, each made durable before the
next begins; a run killed at any point is finished or undone by :func:`recover` at the start
of the next one, so every landing file ends up in the tables exactly once:

1. **staging**: Spark writes the run's new files under ``_compaction/staging/RUN/TABLE/
   date=D/``. Nothing of it is visible in ``tables/``. Killed here: the staging directory
   is removed, the landing files are still in ``landing/`` and the next run reads them.
2. **intent** ``_compaction/RUN.intent.json``: the run's landing files and, per table and
   date, the staged files to move in and the small files they replace (a merge). Written
   atomically once every staged file is complete. From here on the run rolls forward.
3. **apply**: each staged file renamed into ``tables/TABLE/date=D/``, then the replaced
   files removed. Every step is idempotent (a file already moved or removed is skipped).
4. **manifest** ``_compaction/manifest/RUN.json``: the intent renamed. This rename is the
   commit: the run's landing files are processed.
5. **settle**: landing files moved to ``landing/done/`` (or deleted), the lifecycle
   watermark the run carries written to ``_compaction/lifecycle.json``, the staging directory
   removed, the manifest moved to ``manifest/settled/``. Compaction never reads a landing
   file named by a manifest; after settling none is left in ``landing/``.

Renames are atomic on a POSIX file system and every directory touched is fsynced, so the
lake must be a local or POSIX-like shared file system (not an object store).
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import shutil
import time

from fleetwatch import private
from sinks.history.landing import SUFFIX, fsync_dir

log = logging.getLogger(__name__)


def new_run_id(wall=time.time) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(wall())) + "-" + secrets.token_hex(3)


class Lake:
    """The lake's directories (docs/concepts/lake.md "Lake layout")."""

    def __init__(self, root: str):
        self.root = root
        self.landing = os.path.join(root, "landing")
        self.done = os.path.join(self.landing, "done")
        self.tables = os.path.join(root, "tables")
        self.work = os.path.join(root, "_compaction")
        self.staging_root = os.path.join(self.work, "staging")
        self.manifests = os.path.join(self.work, "manifest")
        self.settled = os.path.join(self.manifests, "settled")
        self.lock_path = os.path.join(self.work, "lock")
        #: the lifecycle export's watermark, from the last settled run that carried one
        self.lifecycle_mark = os.path.join(self.work, "lifecycle.json")

    def make_dirs(self) -> None:
        for path in (self.landing, self.tables, self.staging_root, self.settled):
            os.makedirs(path, exist_ok=True)

    def table(self, name: str) -> str:
        return os.path.join(self.tables, name)

    def partition(self, name: str, date: str) -> str:
        return os.path.join(self.tables, name, f"date={date}")

    def staging(self, run: str) -> str:
        return os.path.join(self.staging_root, run)

    def intent_path(self, run: str) -> str:
        return os.path.join(self.work, f"{run}.intent.json")

    def manifest_path(self, run: str) -> str:
        return os.path.join(self.manifests, f"{run}.json")

    # ---------------------------------------------------------------- listings
    def closed_landing(self) -> list[str]:
        """Closed landing files (names), oldest first (names start with their UTC time)."""
        try:
            return sorted(n for n in os.listdir(self.landing) if n.endswith(SUFFIX))
        except FileNotFoundError:
            return []

    def dates(self, name: str) -> list[str]:
        """The dates of table ``name`` whose partition holds Parquet files."""
        try:
            entries = os.listdir(self.table(name))
        except FileNotFoundError:
            return []
        return [e[len("date="):] for e in entries
                if e.startswith("date=") and self.partition_files(name, e[len("date="):])]

    def partition_files(self, name: str, date: str) -> dict[str, int]:
        """The Parquet files of one table partition: name -> size in bytes."""
        path = self.partition(name, date)
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:
            return {}
        return {e.name: e.stat().st_size for e in entries
                if e.is_file() and e.name.endswith(".parquet")}

    def staged_files(self, run: str, name: str) -> dict[str, list[str]]:
        """The Parquet files Spark wrote for ``name`` in run ``run``: date -> file names."""
        out: dict[str, list[str]] = {}
        root = os.path.join(self.staging(run), name)
        if not os.path.isdir(root):
            return out
        for entry in os.scandir(root):
            if entry.is_dir() and entry.name.startswith("date="):
                files = sorted(f for f in os.listdir(entry.path) if f.endswith(".parquet"))
                if files:
                    out[entry.name[len("date="):]] = files
        return out


def write_json(path: str, data: dict) -> None:
    """Write ``data`` to ``path`` atomically and durably."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# ---------------------------------------------------------------- the steps

def write_intent(lake: Lake, intent: dict) -> None:
    """Step 2: the run's staged output is complete; from now on it rolls forward."""
    write_json(lake.intent_path(intent["run"]), intent)


def apply(lake: Lake, intent: dict) -> None:
    """Step 3 (idempotent): staged files into the tables, replaced files out."""
    run = intent["run"]
    for name, dates in intent["tables"].items():
        for date, change in dates.items():
            target = lake.partition(name, date)
            os.makedirs(target, exist_ok=True)
            source = os.path.join(lake.staging(run), name, f"date={date}")
            for fname in change["add"]:
                src = os.path.join(source, fname)
                if os.path.exists(src):
                    # Spark writes with its JVM's umask (0644 under the usual 0022): the
                    # tables hold every host's data, 0640 like the landing files
                    os.chmod(src, private.GROUP)
                    os.rename(src, os.path.join(target, fname))
            fsync_dir(target)
            for fname in change["remove"]:
                try:
                    os.unlink(os.path.join(target, fname))
                except FileNotFoundError:
                    pass
                try:  # Hadoop's checksum file beside it, if any
                    os.unlink(os.path.join(target, f".{fname}.crc"))
                except FileNotFoundError:
                    pass
            fsync_dir(target)


def commit(lake: Lake, run: str) -> None:
    """Step 4: the rename that makes the run's landing files processed."""
    os.rename(lake.intent_path(run), lake.manifest_path(run))
    fsync_dir(lake.manifests)
    fsync_dir(lake.work)


def settle(lake: Lake, run: str, processed: str = "move") -> int:
    """Step 5 (idempotent): landing files out of ``landing/``; returns how many moved."""
    manifest = read_json(lake.manifest_path(run))
    os.makedirs(lake.done, exist_ok=True)
    moved = 0
    for fname in manifest["landing"]:
        src = os.path.join(lake.landing, fname)
        try:
            if processed == "delete":
                os.unlink(src)
            else:
                os.rename(src, os.path.join(lake.done, fname))
            moved += 1
        except FileNotFoundError:
            pass
    fsync_dir(lake.landing)
    if "lifecycle" in manifest:     # the lifecycle export's watermark (fleetwatch/lake/lifecycle.py)
        write_json(lake.lifecycle_mark, manifest["lifecycle"])
    shutil.rmtree(lake.staging(run), ignore_errors=True)
    os.rename(lake.manifest_path(run), os.path.join(lake.settled, f"{run}.json"))
    fsync_dir(lake.manifests)
    return moved


def recover(lake: Lake, processed: str = "move") -> list[str]:
    """Finish or undo what killed runs left: roll intents forward, settle manifests, remove
    staging without an intent. Returns one line per action, for the progress output."""
    done = []
    for fname in sorted(os.listdir(lake.work)):
        if fname.endswith(".intent.json"):
            run = fname[:-len(".intent.json")]
            apply(lake, read_json(lake.intent_path(run)))
            commit(lake, run)
            done.append(f"run {run} was killed after its intent: rolled forward")
    for fname in sorted(os.listdir(lake.manifests)):
        if fname.endswith(".json"):
            run = fname[:-len(".json")]
            moved = settle(lake, run, processed)
            done.append(f"run {run} was committed but not settled: {moved} landing files "
                        f"{'deleted' if processed == 'delete' else 'moved to done/'}")
    for run in sorted(os.listdir(lake.staging_root)):
        shutil.rmtree(lake.staging(run), ignore_errors=True)
        done.append(f"run {run} was killed before its intent: its staged output removed")
    return done
