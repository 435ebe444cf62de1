"""Who ends a local Spark cluster's daemons (fleetwatch/lake/cluster.py, fleetwatch/lifeline.py)
and how a history command finds its Spark Connect server missing, with stand-in processes
(no JVM): a child of a SIGKILLed parent gets its parent-death signal; a cluster whose owner
has ended is stopped by the next start in its directory, saying so; one with a live owner
or none is refused."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys

import pytest

from fleetwatch.lake import cluster
from support.cli import fw
from support.fleet import wait_for
from support import ROOT

#: a stand-in daemon: a process whose command line names a Spark class, as cluster.is_daemon
#: recognises one
FAKE = [sys.executable, "-c", "import time; time.sleep(60)",
        "org.apache.spark.deploy.master.Master"]


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    with open(f"/proc/{pid}/stat") as f:            # a zombie is gone too
        return f.read().rsplit(")", 1)[1].split()[0] == "Z"


def test_a_child_ends_with_its_sigkilled_parent():
    code = ("import subprocess, sys, time; from fleetwatch.lifeline import die_with_parent; "
            "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], "
            "preexec_fn=die_with_parent()); print(p.pid, flush=True); time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                              cwd=ROOT)
    child = int(parent.stdout.readline())
    try:
        assert not gone(child)
        parent.kill()
        parent.wait()
        wait_for(lambda: gone(child), 10, 0.05, "the child to get SIGTERM")
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)


@pytest.fixture
def daemons():
    procs = [subprocess.Popen(FAKE, start_new_session=True) for _ in range(2)]
    wait_for(lambda: all(cluster.is_daemon(p.pid) for p in procs), 10, 0.02, "stand-ins")
    yield procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait()


def ended_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def test_an_orphaned_cluster_is_stopped_by_the_next_start(tmp_path, daemons, monkeypatch):
    cluster.Cluster(str(tmp_path), "spark://127.0.0.1:1", "http://127.0.0.1:2",
                    pids={"master": daemons[0].pid, "worker-1": daemons[1].pid},
                    owner=[ended_pid(), 12345]).save()
    assert cluster.Cluster.load(str(tmp_path)).orphaned()

    def no_spark():
        raise cluster.ClusterError("stop here")
    monkeypatch.setattr(cluster, "spark_home", no_spark)
    said = []
    with pytest.raises(cluster.ClusterError, match="stop here"):
        cluster.start(str(tmp_path), say=said.append)
    assert said == [f"stopped the Spark cluster (pid {cluster.Cluster.load(str(tmp_path)).owner[0]}"
                    f"'s, which has ended) left running in {tmp_path}: master, worker-1"]
    for p in daemons:
        assert p.wait(10) == -signal.SIGTERM


def test_a_warm_spark_an_ended_demo_left_is_stopped_by_the_next(tmp_path, daemons,
                                                                monkeypatch, capsys):
    """The demo's warm Spark (cluster.serve: a Connect server alone) shares start()'s
    ownership: status names it, the next serve in its directory stops it."""
    url = "sc://127.0.0.1:1"
    cluster.Cluster(str(tmp_path), connect=url, pids={"connect": daemons[0].pid}).save()
    code, out, err = fw(capsys, "history", "cluster", "status", "--dir", str(tmp_path))
    assert (code, out, err) == (0, f"Spark Connect server {url}\n", "")
    cluster.Cluster(str(tmp_path), connect=url, pids={"connect": daemons[0].pid},
                    owner=[ended_pid(), 12345]).save()

    def no_spark():
        raise cluster.ClusterError("stop here")
    monkeypatch.setattr(cluster, "spark_home", no_spark)
    said = []
    with pytest.raises(cluster.ClusterError, match="stop here"):
        cluster.serve(str(tmp_path), say=said.append)
    assert said == [f"stopped the Spark cluster (pid {cluster.Cluster.load(str(tmp_path)).owner[0]}"
                    f"'s, which has ended) left running in {tmp_path}: connect"]
    assert daemons[0].wait(10) == -signal.SIGTERM


@pytest.mark.parametrize("owner", ["none", "alive"])
def test_a_running_cluster_with_an_owner_alive_or_none_is_refused(tmp_path, daemons, owner):
    me = [os.getpid(), cluster.started(os.getpid())]
    c = cluster.Cluster(str(tmp_path), "spark://127.0.0.1:1", "http://127.0.0.1:2",
                        pids={"master": daemons[0].pid}, owner=me if owner == "alive" else [])
    c.save()
    assert not c.orphaned()
    with pytest.raises(cluster.ClusterError) as e:
        cluster.start(str(tmp_path))
    assert str(e.value) == (f"a cluster already runs from {tmp_path} (spark://127.0.0.1:1): "
                            f"fleetwatch history cluster stop first")
    assert daemons[0].poll() is None
    # a recycled pid: the same number, another start time
    assert cluster.Cluster(str(tmp_path), owner=[os.getpid(), me[1] + 1]).orphaned()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_connect_server_not_there_is_one_line(tmp_path, capsys):
    pytest.importorskip("pyspark", reason="the history extra is not installed")
    pytest.importorskip("grpc", reason="the connect extra is not installed")
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {tmp_path}\n")
    url = f"sc://127.0.0.1:{closed_port()}"
    code, out, err = fw(capsys, "history", "sql", "--config", str(config), "--remote", url,
                        "SELECT 1")
    assert (code, out) == (69, "")
    assert err == f"fleetwatch history: no Spark Connect server answers at {url}: " \
                  f"Connection refused\n"


@pytest.mark.parametrize("url", ["sc://", "sc://host:port", "http://host:15002",
                                 "sc://host:15002/path"])
def test_a_bad_connect_url_is_one_line(tmp_path, capsys, url):
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {tmp_path}\n")
    code, out, err = fw(capsys, "history", "notebook", "--config", str(config), "--remote", url)
    assert code == 2
    assert err == (f"fleetwatch history notebook: --remote expects a Spark Connect URL such "
                   f"as sc://HOST:15002, not {url!r}\n")


def test_no_java_is_one_line_before_any_daemon(tmp_path, monkeypatch):
    pytest.importorskip("pyspark", reason="the history extra is not installed")
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    with pytest.raises(cluster.ClusterError) as e:
        cluster.start(str(tmp_path / "cluster"))
    assert str(e.value).startswith("Java 17 or 21 is needed for the history side "
                                   f"(JAVA_HOME={tmp_path / 'no-jdk'} has no bin/java)")
    assert not (tmp_path / "cluster").exists()
