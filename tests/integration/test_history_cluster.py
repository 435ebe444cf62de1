"""The history side on a real Spark standalone cluster: a master and one worker started by
``fleetwatch history cluster start --connect`` from the installed PySpark's own scripts and
jars, with a Spark Connect server (the wheel's SparkConnectServer class and spark-connect
jar) whose application runs on that cluster, all on 127.0.0.1 with ports the kernel
picked, shared by the whole module (a cluster is heavy on a 2-core machine) and stopped by
``cluster stop`` (each daemon's process group).

Compaction (killed after staging, then run again), the ready-made queries and ``history
sql`` run on the cluster, and through Spark Connect, in child processes (one SparkContext
per process: the test process holds the ``local[2]`` one) and must give exactly what
``local[2]`` gives on the same lake.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(400)

from sinks.history import cluster as clusters  # noqa: E402
from support.cli import fw  # noqa: E402
from support import notebookrun  # noqa: E402
from support.historyanswers import answers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from test_history_compact import landing_area, lake_is_settled, tables  # noqa: E402

#: a small JVM that starts fast: these jobs are tiny
FAST = {"spark.driver.memory": "1g", "spark.executor.memory": "1g",
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.sql.shuffle.partitions": "2"}


def fleetwatch(*argv: str, env: dict | None = None, timeout: float = 200.0):
    return subprocess.run([sys.executable, "-m", "fleetwatch", *argv], capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A master and one worker (2 cores, 2 GB) for the module; stopped, daemons gone."""
    where = tmp_path_factory.mktemp("spark-cluster")
    res = fleetwatch("history", "cluster", "start", "--dir", str(where), "--workers", "1",
                     "--connect", timeout=200)
    state = clusters.Cluster.load(str(where))
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        assert f"master {state.master} (web UI {state.ui}), 1 worker" in res.stdout
        assert f"Spark Connect server {state.connect}: history.remote" in res.stdout
        yield state
    finally:
        pids = state.alive() if state else {}
        stopped = fleetwatch("history", "cluster", "stop", "--dir", str(where), timeout=60)
        assert stopped.returncode == 0, stopped.stderr
        assert not any(clusters.is_daemon(pid) for pid in pids.values())


def config(tmp_path: Path, lake: Path, master: str) -> Path:
    """An operator config for ``lake`` on ``master`` (an sc:// URL: ``history.remote``)."""
    path = tmp_path / f"fleetwatch-{abs(hash(master))}.yaml"
    where = f"remote: {master}" if master.startswith("sc://") else f"master: {master}"
    path.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {lake}\n"
                    f"  {where}\n  conf: {json.dumps(FAST)}\n")
    return path


def test_the_cluster_is_on_loopback_and_says_so(cluster):
    assert cluster.master.startswith("spark://127.0.0.1:") and cluster.master[-1].isdigit()
    res = fleetwatch("history", "cluster", "status", "--dir", cluster.directory, "--json")
    state = json.loads(res.stdout)
    assert res.returncode == 0 and state["workers"] == 1 and state["master"] == cluster.master
    assert state["applications"] == ["fleetwatch Spark Connect"]
    assert cluster.connect.startswith("sc://127.0.0.1:")
    again = fleetwatch("history", "cluster", "start", "--dir", cluster.directory)
    assert again.returncode == 1
    assert again.stderr.strip() == (f"fleetwatch history cluster: a cluster already runs from "
                                    f"{cluster.directory} ({cluster.master}): fleetwatch "
                                    f"history cluster stop first")
    gone = fleetwatch("history", "cluster", "status", "--dir", str(Path(cluster.directory) / "x"))
    assert gone.returncode == 1 and gone.stdout.startswith("no cluster runs from ")


def where(cluster, through: str) -> str:
    return cluster.master if through == "master" else cluster.connect


@pytest.mark.parametrize("through", ["master", "connect"])
def test_compaction_on_the_cluster_killed_then_rerun_equals_local(spark, cluster, tmp_path,
                                                                  through):
    """The same landing area compacted by local[2] in this process, and on the cluster by
    ``fleetwatch history compact`` (a session of its own on the master, or a session of
    the Spark Connect server) SIGKILLed right after its executors staged the output
    (FLEETWATCH_HISTORY_CRASH=staged), then run again: the same tables, every landing file
    processed once."""
    from sinks.history.compact import compact
    from sinks.history.config import HistorySettings
    local, remote = tmp_path / "local", tmp_path / "cluster"
    want = landing_area(local)
    shutil.copytree(local, remote)
    compact(spark, HistorySettings(lake=str(local)), out=lambda line: None)

    cfg = config(tmp_path, remote, where(cluster, through))
    killed = fleetwatch("history", "compact", "--config", str(cfg),
                        env={"FLEETWATCH_HISTORY_CRASH": "staged"})
    assert killed.returncode == -9, killed.stdout + killed.stderr
    assert f"read: {want['events']} events" in killed.stdout
    assert list((remote / "_compaction" / "staging").iterdir())
    assert not (remote / "tables" / "metrics").exists()

    rerun = fleetwatch("history", "compact", "--config", str(cfg))
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "staged output removed" in rerun.stdout
    assert f"{want['duplicates']} duplicates dropped" in rerun.stdout
    lake_is_settled(remote)
    assert tables(spark, remote) == tables(spark, local)
    assert len(list((remote / "_compaction" / "manifest" / "settled").iterdir())) == 1
    done = sorted(p.name for p in (remote / "landing" / "done").iterdir())
    assert done == sorted(p.name for p in (local / "landing" / "done").iterdir())


@pytest.mark.parametrize("through", ["master", "connect"])
def test_queries_and_sql_on_the_cluster_equal_local(spark, cluster, history_lake, tmp_path,
                                                    capsys, through):
    """Availability, metric buckets, timelines... (tests/support/historyanswers.py) and
    ``history sql --json`` on the cluster (a session on the master, or through Spark
    Connect), against the same on local[2]."""
    from sinks.history.query import History
    want = answers(History(spark, str(history_lake.path)))
    script = ROOT / "tests" / "support" / "historyanswers.py"
    argv = [sys.executable, str(script), str(history_lake.path), where(cluster, through)]
    res = subprocess.run(argv + (["--remote"] if through == "connect" else []),
                         capture_output=True, text=True, timeout=200, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name
    assert want["availability"] and want["metric"]

    query = ("SELECT hostname, date, count(*) AS n, round(avg(value), 3) AS avg FROM metrics "
             "GROUP BY hostname, date ORDER BY hostname, date")
    code, out, err = fw(capsys, "history", "sql", "--config",
                        str(config(tmp_path, history_lake.path, "local[2]")), "--json", query)
    assert code == 0, err
    remote = fleetwatch("history", "sql", "--config",
                        str(config(tmp_path, history_lake.path, where(cluster, through))),
                        "--json", query)
    assert remote.returncode == 0, remote.stderr
    assert json.loads(remote.stdout) == json.loads(out) != []


def printed_here(spark, lake, monkeypatch, capsys) -> list[str]:
    """Each code cell's stdout, the cells executed in this process on local[2] (as
    tests/integration/test_notebook.py does)."""
    monkeypatch.setenv("FLEETWATCH_HISTORY", str(lake.path))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    ns, out = {"__name__": "__main__"}, []
    capsys.readouterr()
    for i, cell in enumerate(notebookrun.code_cells()):
        exec(compile(cell, f"code cell {i + 1}", "exec"), ns)
        out.append(capsys.readouterr().out)
    import matplotlib.pyplot as plt
    plt.close("all")
    return out


@pytest.mark.parametrize("through", ["master", "connect"])
def test_the_notebook_in_a_jupyter_kernel_on_the_cluster(spark, cluster, history_lake,
                                                         tmp_path, monkeypatch, capsys,
                                                         through):
    """The fleet notebook executed by a real Jupyter kernel whose Spark is the cluster (a
    session on the master, or through Spark Connect): its known answers, and every cell
    printing what it prints on local[2] (but the first, which names the master)."""
    pytest.importorskip("matplotlib")
    cfg = config(tmp_path, history_lake.path, where(cluster, through))
    nb = notebookrun.execute(str(cfg), tmp_path)
    notebookrun.check(nb, history_lake)
    got = notebookrun.printed(nb)
    assert f"on {cluster.master}" in got[0]
    assert notebookrun.images(nb) >= 5
    assert got[1:] == printed_here(spark, history_lake, monkeypatch, capsys)[1:]
