"""``fleetwatch demo --spark-cluster``: the demo's history side on a local Spark standalone
cluster (a real master and worker from the installed PySpark): the master's web UI printed,
the compaction timer's application on it compacting the demo's lake, the notebook's command
printed; stopping the demo stops the cluster's daemons too."""

from __future__ import annotations

import json
import signal
import psutil
import pytest

from support.fleet import wait_for

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(300)


def test_demo_runs_its_history_on_a_spark_cluster(fleet):
    from sinks.history import cluster
    demo_dir = fleet.root / "demo"
    demo = fleet.start("demo", "demo", "--dir", str(demo_dir), "--insecure",
                       "--spark-cluster")
    manifest = demo_dir / "demo.json"
    daemons: dict = {}
    try:
        wait_for(lambda: manifest.exists() or not demo.alive(), 90, what="demo.json")
        assert demo.alive(), demo.log()
        info = json.loads(manifest.read_text())
        spark = info["spark"]
        assert spark["master"].startswith("spark://127.0.0.1:"), spark
        log = demo.log()
        assert "The history side runs on a Spark standalone cluster:" in log
        assert f"{spark['master']}   web UI {spark['ui']}" in log
        assert f"history notebook --config {demo_dir / 'fleetwatch.yaml'}" in log
        operator = (demo_dir / "fleetwatch.yaml").read_text()
        assert f"master: {spark['master']}" in operator and "spark.cores.max: '1'" in operator

        # the compaction timer is an application of the cluster, and compacts there
        wait_for(lambda: "fleetwatch-history" in [
            a["name"] for a in cluster.master_state(spark["ui"])["activeapps"]], 90, 1.0,
            "the compaction timer's application on the master")
        compact_log = demo_dir / "logs" / "history-compact.log"
        wait_for(lambda: " done in " in compact_log.read_text()
                 or "no closed landing files" in compact_log.read_text(), 150, 1.0,
                 "a compaction on the cluster")
        daemons = cluster.Cluster.load(spark["dir"]).alive()
        assert set(daemons) == {"master", "worker-1"}
    finally:
        demo.signal(signal.SIGTERM)
        demo.popen.wait(60)
    assert "all processes stopped." in demo.log()
    wait_for(lambda: not any(psutil.pid_exists(p) and cluster.is_daemon(p)
                             for p in daemons.values()), 30, 0.5, "the Spark daemons gone")
