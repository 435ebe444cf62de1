"""The routers a message passed (SPEC 4.10) in the history tables: compaction keeps the
landing lines' path in the five message tables' ``path`` column (an array, the relaying
router first), the queries and replay read it, and a lake compacted by the version before the
column (the code of commit BEFORE, run from ``git archive``) reads and compacts on.

Spark tests: the session-scoped ``spark`` fixture (tests/conftest.py), tiny lakes.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from fleetwatch.lake import synth
from fleetwatch.lake.settings import HistorySettings

pytestmark = pytest.mark.timeout(480)

ROOT = Path(__file__).resolve().parents[2]
#: the last commit whose compaction wrote no ``path`` column
BEFORE = "9ff175cfe77966bbf1540dc84831b06e3480d669"
QUIET = {"out": lambda line: None}
T0 = 1_795_000_000.0
MESSAGE_TABLES = ("metrics", "heartbeats", "results", "notifications", "registrations")


def paths_by_uuid(spark, lake: Path, table: str) -> dict[str, set]:
    from fleetwatch.lake.schema import TABLES
    rows = spark.read.schema(TABLES[table]).parquet(str(lake / "tables" / table)).collect()
    out: dict[str, set] = {}
    for r in rows:
        out.setdefault(r["uuid"], set()).add((r["router"], None if r["path"] is None
                                              else tuple(r["path"])))
    return out


def notify(n: int, router: str = "central-1", path: str | None = None,
           received: float | None = None) -> str:
    doc = {"msg": {"msg_id": f"m{n:04d}", "uuid": f"a{n % 3}", "ts": T0 + n,
                   "severity": "info", "text": f"n{n}"},
           "type": "NOTIFY", "uuid": f"a{n % 3}", "router": router,
           "received": T0 + n + 0.5 if received is None else received}
    if path is not None:
        doc["path"] = path
    return json.dumps(doc) + "\n"


def test_compaction_keeps_the_path_and_queries_read_it(spark, tmp_path):
    """Synthetic traffic whose odd hosts are behind sites: every message table holds
    [router, site] for them, [router] for the others; the copy kept of a message relayed
    twice (a resend) is the one received first, path and all; SQL finds a site's messages;
    replay from the tables gives the path back."""
    from fleetwatch.lake import bodies
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.query import History
    from fleetwatch.lake.schema import TABLES
    lake = tmp_path / "lake"
    landing = lake / "landing"
    synth.write_files(str(landing), 300, files=2, hosts=4, metrics_per_stats=2, sites=2)
    (landing / "20000101T000001-again-00000000.jsonl").write_text(
        notify(1, path="central-1,site-1,site-9") + notify(1, "central-2", received=T0 + 9))
    compact(spark, HistorySettings(lake=str(lake)), **QUIET)

    for table in MESSAGE_TABLES:
        schema = spark.read.parquet(str(lake / "tables" / table)).schema
        assert schema["path"].dataType == TABLES[table]["path"].dataType, table
        got = paths_by_uuid(spark, lake, table)
        for host in range(4):
            uuid = synth.uuid_of(host)
            if uuid not in got:
                continue
            want = ({(r, (r, f"site-{host // 2}")) for r in ("r0", "r1")} if host % 2
                    else {(r, (r,)) for r in ("r0", "r1")})
            assert got[uuid] <= want and got[uuid], (table, uuid, got[uuid])
    assert paths_by_uuid(spark, lake, "notifications")["a1"] >= \
        {("central-1", ("central-1", "site-1", "site-9"))}

    h = History(spark, str(lake))
    behind = h.sql("SELECT DISTINCT uuid, element_at(path, -1) AS site FROM heartbeats "
                   "WHERE array_contains(path, 'site-1') AND size(path) = 2").collect()
    assert sorted(tuple(r) for r in behind) == [(synth.uuid_of(3), "site-1")]
    assert h.metrics.where("get(path, 1) = 'site-1'").count() > 0     # the view keeps it
    events = list(bodies.events(bodies.since(spark, str(lake), 0.0, ["NOTIFY"])))
    kept = next(e for e in events if e.msg_id == "m0001")
    assert kept.path == ("central-1", "site-1", "site-9") and kept.router == "central-1"
    assert {e.path for e in events if e.uuid == synth.uuid_of(0)} <= {("r0",), ("r1",)}


def old_code(tmp_path: Path) -> Path:
    """The fleetwatch and sinks packages as of BEFORE, in a directory of their own."""
    where = tmp_path / "before"
    where.mkdir()
    archive = tmp_path / "before.tar"
    res = subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), BEFORE,
                          "fleetwatch", "sinks"], capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"the previous version is not in this checkout: {res.stderr.strip()}")
    with tarfile.open(archive) as tar:
        tar.extractall(where, filter="data")
    return where


def test_a_lake_compacted_by_the_previous_version_reads_and_compacts_on(spark, tmp_path):
    """The previous version's compaction (no ``path`` column) writes the tables; then lines
    with paths land in the same dates and the new compaction merges the old small files
    with them (``max_small_files: 1``), and runs again on more: old rows read as null, new
    ones with their path, the queries and replay work over both."""
    from fleetwatch.lake import bodies
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.query import History
    before = old_code(tmp_path)
    lake = tmp_path / "lake"
    landing = lake / "landing"
    synth.write_files(str(landing), 200, files=1, hosts=4, metrics_per_stats=2, name="old")
    cfg = tmp_path / "fleetwatch.yaml"
    conf = {"spark.sql.adaptive.enabled": "false"}   # C1 JIT: tests/support/spark-conf
    cfg.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {lake}\n"
                   f"  master: local[1]\n  conf: {json.dumps(conf)}\n")
    res = subprocess.run([sys.executable, "-m", "fleetwatch", "history", "compact", "--config",
                          str(cfg)], capture_output=True, text=True, timeout=240, cwd=before,
                         env={**os.environ, "PYTHONPATH": str(before)})
    assert res.returncode == 0 and "done in" in res.stdout, res.stdout + res.stderr
    old = spark.read.parquet(str(lake / "tables" / "notifications"))
    assert "path" not in old.columns and old.count() > 0     # the old version's tables

    settings = HistorySettings(lake=str(lake), max_small_files=1)
    for first, name in ((1000, "new"), (2000, "newer")):
        synth.write_files(str(landing), 200, files=1, hosts=4, metrics_per_stats=2,
                          first=first, name=name, sites=2)
        summary = compact(spark, settings, **QUIET)
        assert summary.bad == 0 and summary.rows > 0
    assert any(t.merged for t in summary.tables.values())      # old files rewritten

    h = History(spark, str(lake))
    for table in MESSAGE_TABLES:
        rows = h.table(table).select("msg_id", "router", "path").collect()
        olds = [r for r in rows if int(r["msg_id"][1:]) < 1000]
        news = [r for r in rows if int(r["msg_id"][1:]) >= 1000]
        assert olds and all(r["path"] is None for r in olds), table
        assert news and all(r["path"] and r["path"][0] == r["router"] for r in news), table
    counts = h.notification_counts().collect()
    assert sum(r["count"] for r in counts) == h.notifications.count() > 0
    through = h.sql("SELECT count(*) FROM results WHERE array_contains(path, 'site-1')")
    assert through.collect()[0][0] > 0
    assert h.uptime(synth.uuid_of(1)).count() > 0
    events = list(bodies.events(bodies.since(spark, str(lake), 0.0)))
    assert {e.path for e in events if int(e.msg_id[1:]) < 1000} == {("r0",), ("r1",)}
    assert {("r1", "site-0"), ("r1", "site-1")} <= {e.path for e in events}
    shutil.rmtree(before)
