"""The local Spark cluster's bookkeeping (sinks/history/cluster.py) and where a driver binds
(sinks/history/spark.py), without starting a JVM."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from sinks.history import cluster
from sinks.history.spark import defaults, on_loopback


@pytest.mark.parametrize("master,loopback", [
    ("local[*]", True), ("local[2]", True), ("local", True),
    ("spark://127.0.0.1:7077", True), ("spark://localhost:7077", True),
    ("spark://127.0.0.1", True), ("spark://10.0.0.5:7077", False),
    ("spark://127.0.0.1:7077,127.0.0.2:7077", False), ("yarn", False),
    ("sc://127.0.0.1:15002", False)])
def test_a_driver_binds_loopback_where_its_master_is(master, loopback):
    assert on_loopback(master) is loopback
    conf = defaults(master)
    assert (conf.get("spark.driver.host") == "127.0.0.1") is loopback
    assert ("spark.sql.shuffle.partitions" in conf) is master.startswith("local")


def test_the_master_log_gives_its_urls():
    log = ("26/11/26 07:57:36 INFO Master: Starting Spark master at spark://127.0.0.1:33679\n"
           "26/11/26 07:57:36 INFO MasterWebUI: Bound MasterWebUI to 127.0.0.1, and started "
           "at http://localhost:41209\n")
    assert cluster.MASTER_URL.search(log).group(1) == "spark://127.0.0.1:33679"
    assert cluster.MASTER_UI.search(log).group(1) == "41209"


def test_state_round_trip_and_recycled_pids(tmp_path):
    assert cluster.Cluster.load(str(tmp_path)) is None
    assert cluster.status(str(tmp_path)) == {"running": False, "directory": str(tmp_path)}
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        c = cluster.Cluster(str(tmp_path), "spark://127.0.0.1:1", "http://127.0.0.1:2",
                            {"master": sleeper.pid, "worker-1": 2 ** 22 + 7})
        c.save()
        again = cluster.Cluster.load(str(tmp_path))
        assert again == c
        # a live pid that is no Spark daemon is not one: stop() leaves it alone
        assert again.alive() == {}
        assert cluster.stop(str(tmp_path)) == []
        assert sleeper.poll() is None
    finally:
        sleeper.kill()
        sleeper.wait()
    assert cluster.Cluster.load(str(tmp_path)).pids == {}


def test_start_refuses_no_workers(tmp_path):
    with pytest.raises(cluster.ClusterError, match="--workers: expected 1 or more"):
        cluster.start(str(tmp_path), workers=0)


def test_the_cluster_module_never_imports_pyspark():
    code = ("import sys, sinks.history.cluster, fleetwatch.cli.history.cluster; "
            "print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    assert out.stdout.strip() == "False", out.stderr
