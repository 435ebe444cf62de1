"""``fleetwatch demo --spark-cluster``: the demo's history side on a local Spark standalone
cluster (a real master and worker from the installed PySpark): the master's web UI printed,
the compaction timer's application on it compacting the demo's lake, the notebook's command
printed; and a demo killed with SIGKILL leaves no Spark JVM of its directory (the daemons get
their parent-death signal: fleetwatch/lifeline.py). The demo stopped by a signal stopping the
cluster is cluster.stop, tested by test_history_cluster's fixture; a cluster a killed demo
left is stopped by the next start (tests/unit/fleetwatch/lake/test_cluster_lifecycle.py)."""

from __future__ import annotations

import json
import signal

import psutil
import pytest

from support.fleet import wait_for

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(400)


def spark_jvms(directory) -> list[int]:
    """The JVMs of a demo's Spark: master, worker and the executors, by their command line
    (the cluster's directory) or working directory (an executor's, in the worker's)."""
    found = []
    for p in psutil.process_iter(["name", "cmdline", "cwd"]):
        cmdline, cwd = " ".join(p.info["cmdline"] or []), p.info["cwd"] or ""
        if p.info["name"] == "java" and (str(directory) in cmdline
                                         or cwd.startswith(str(directory))):
            found.append(p.pid)
    return found


def test_demo_runs_its_history_on_a_spark_cluster_and_takes_it_when_killed(fleet):
    from fleetwatch.lake import cluster
    demo_dir = fleet.root / "demo"
    # the smallest fleet: what is claimed here is the history side's (one router, no site,
    # no alert receivers: the processes and the readiness waits a cluster needs none of)
    small = fleet.write("demo.yaml", {"routers": 1, "sites": 0, "receivers": False})
    demo = fleet.start("demo", "demo", "--config", str(small), "--dir", str(demo_dir),
                       "--insecure", "--spark-cluster")
    manifest = demo_dir / "demo.json"
    try:
        wait_for(lambda: manifest.exists() or not demo.alive(), 120, what="demo.json")
        assert demo.alive(), demo.log()
        info = json.loads(manifest.read_text())
        spark = info["spark"]
        assert spark["master"].startswith("spark://127.0.0.1:"), spark
        wait_for(lambda: "The history side runs on a Spark standalone cluster:" in
                 demo.log() or not demo.alive(), 30, what="the demo's summary")
        log = demo.log()
        assert "The history side runs on a Spark standalone cluster:" in log
        assert f"{spark['master']}   web UI {spark['ui']}" in log
        assert f"history notebook --config {demo_dir / 'fleetwatch.yaml'}" in log
        operator = (demo_dir / "fleetwatch.yaml").read_text()
        assert f"master: {spark['master']}" in operator and "spark.cores.max: '1'" in operator
        assert set(cluster.Cluster.load(spark["dir"]).alive()) == {"master", "worker-1"}

        # the compaction timer is an application of the cluster, and compacts there (from its
        # first run with work: the second, a minute after the demo started)
        wait_for(lambda: "fleetwatch-history" in [
            a["name"] for a in cluster.master_state(spark["ui"])["activeapps"]], 240, 1.0,
            "the compaction timer's application on the master")
        compact_log = demo_dir / "logs" / "history-compact.log"
        # (its application exists only for a run with work: one that compacts)
        wait_for(lambda: " done in " in compact_log.read_text(), 200, 1.0,
                 "a compaction on the cluster")
        assert len(spark_jvms(spark["dir"])) >= 3       # master, worker, an executor
    finally:
        demo.signal(signal.SIGKILL)
        demo.popen.wait(60)
    wait_for(lambda: not spark_jvms(demo_dir), 60, 0.5,
             "no Spark JVM of the SIGKILLed demo's directory")
