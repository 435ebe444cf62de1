"""The local Spark cluster's bookkeeping (fleetwatch/lake/cluster.py) and where a driver binds
(fleetwatch/lake/spark.py), without starting a JVM."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fleetwatch.lake import cluster
from fleetwatch.lake.spark import defaults, on_loopback
from support import ROOT


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


@pytest.mark.parametrize("kw,message", [
    ({"workers": 0}, "--workers: expected 1 or more"),
    ({"cores": 0}, "--cores: expected 1 or more"),
    ({"memory": "lots"}, "--memory: expected a size such as 2g or 1500m, not 'lots'"),
    ({"memory": "0g"}, "--memory: expected a size such as 2g or 1500m, not '0g'")])
def test_start_refuses_bad_sizes_before_any_jvm(tmp_path, kw, message):
    with pytest.raises(cluster.ClusterError) as e:
        cluster.start(str(tmp_path), **kw)
    assert str(e.value) == message
    assert not list(tmp_path.iterdir())


def test_the_cluster_module_never_imports_pyspark():
    code = ("import sys, fleetwatch.lake.cluster, fleetwatch.cli.history.cluster; "
            "print('pyspark' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


def test_a_connect_session_takes_the_sql_settings_only():
    from fleetwatch.lake.spark import session_settings
    got = session_settings({"spark.driver.memory": "1g", "spark.sql.shuffle.partitions": "3"})
    assert got["spark.sql.session.timeZone"] == "UTC"
    assert got["spark.sql.shuffle.partitions"] == "3"
    assert all(k.startswith("spark.sql.") for k in got)
    # a JVM-wide setting: the server's own (a session cannot change it)
    assert "spark.sql.codegen.cache.maxEntries" not in got


def test_the_connect_server_keeps_generated_classes_compiled(monkeypatch):
    """The JVM-wide setting a Connect session cannot give is on the server's command."""
    started = []
    monkeypatch.setattr(cluster, "_daemon", lambda *args, **kw: started.append(args[4]))
    cluster._connect("/spark", "/tmp/c", "127.0.0.1", "local[2]", [])
    (argv,) = started
    assert "spark.sql.codegen.cache.maxEntries=1000" in argv


def test_remote_must_be_a_connect_url():
    from fleetwatch.lake.settings import HistorySettings
    HistorySettings(remote="sc://127.0.0.1:15002").validate()
    with pytest.raises(ValueError, match="^remote: expected a Spark Connect URL"):
        HistorySettings(remote="http://127.0.0.1:15002").validate()


def test_the_remote_option_must_be_a_connect_url(tmp_path, capsys):
    from support.cli import fw
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {tmp_path}\n")
    code, out, err = fw(capsys, "history", "sql", "--config", str(config), "--remote",
                        "127.0.0.1:15002", "SELECT 1")
    assert code == 2
    assert "fleetwatch history sql: --remote expects a Spark Connect URL such as " \
           "sc://HOST:15002" in out + err
