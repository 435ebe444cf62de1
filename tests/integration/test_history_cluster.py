"""The history side on a real Spark standalone cluster: a master and one worker started by
``fleetwatch history cluster start --connect`` from the installed PySpark's own scripts and
jars, with a Spark Connect server (the wheel's SparkConnectServer class and spark-connect
jar) whose application runs on that cluster, all on 127.0.0.1 with ports the kernel
picked, shared by the whole module (a cluster is heavy on a 2-core machine) and stopped by
``cluster stop`` (each daemon's process group).

Compaction (on the master killed after staging, then run again), the ready-made queries
and ``history sql`` run on the cluster, and through Spark Connect, in child processes (one
SparkContext per process: the test process holds the ``local[2]`` one; one child a flavour
for the compaction's rerun, the queries and the SQL) and must give exactly what
``local[2]`` gives on the same lake; the fleet notebook, executed by a real Jupyter kernel
(nbclient + ipykernel) on local Spark and on the cluster through Spark Connect, prints the
same in every cell. What local Spark gives is worked out once for the module (fixtures
``local_*``), each cluster run compared with it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(600)

from fleetwatch.lake import cluster as clusters  # noqa: E402
from fleetwatch.lake import jupyter  # noqa: E402
from fleetwatch.lake.settings import HistorySettings  # noqa: E402
from support import notebookrun  # noqa: E402
from support.historyanswers import answers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))
from test_history_compact import landing_area, lake_is_settled, tables  # noqa: E402

#: small JVMs: these jobs are tiny (the C1 JIT alone comes from tests/support/spark-conf,
#: for the driver and the executors, as for every JVM of the suite)
FAST = {"spark.driver.memory": "1g", "spark.executor.memory": "1g",
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


@pytest.fixture(scope="module")
def local_compaction(spark, tmp_path_factory):
    """A landing area as written, its expected counts, and what local[2] in this process
    makes of it: the tables' rows and the landing files done."""
    from fleetwatch.lake.compact import compact
    base = tmp_path_factory.mktemp("landing")
    landed, local = base / "landed", base / "local"
    want = landing_area(landed)
    shutil.copytree(landed, local)
    compact(spark, HistorySettings(lake=str(local)), out=lambda line: None)
    done = sorted(p.name for p in (local / "landing" / "done").iterdir())
    return landed, want, tables(spark, local), done


QUERY = ("SELECT hostname, date, count(*) AS n, round(avg(value), 3) AS avg FROM metrics "
         "GROUP BY hostname, date ORDER BY hostname, date")


@pytest.fixture(scope="module")
def local_answers(spark, history_lake, tmp_path_factory):
    """The queries' answers (tests/support/historyanswers.py) and ``history sql --json
    QUERY``'s rows on local[2], in this process."""
    from fleetwatch.lake.query import History
    from fleetwatch.cli import main
    want = answers(History(spark, str(history_lake.path)))
    assert want["availability"] and want["metric"]
    cfg = config(tmp_path_factory.mktemp("local-sql"), history_lake.path, "local[2]")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["history", "sql", "--config", str(cfg), "--json", QUERY]) == 0
    rows = json.loads(out.getvalue())
    assert rows
    return want, rows


@pytest.fixture(scope="module")
def on_cluster(cluster, history_lake, local_compaction, tmp_path_factory):
    """``run(through)``, once a flavour for the module: the queries and ``history sql`` on
    the generated lake, then the landing area of ``local_compaction`` copied to a lake of
    its own and compacted on the cluster, through the master (SIGKILLed first right after
    its executors staged the output, then run again) or through Spark Connect. The queries,
    the SQL and the compaction run to its end are one child process
    (tests/support/historyanswers.py: the same ``fleetwatch history sql`` and ``history
    compact`` commands, run by the CLI's ``main``, with the configs' settings: one Spark
    session for the three, so on the master one driver and one executor). Returns the lake
    compacted, the killed run (None through Spark Connect), the rerun's exit status and
    stdout, the answers, the SQL's exit status and stdout."""
    landed = local_compaction[0]
    done = {}

    def run(through: str) -> dict:
        if through in done:
            return done[through]
        base = tmp_path_factory.mktemp(f"on-{through}")
        remote = base / "cluster"
        shutil.copytree(landed, remote)
        cfg = config(base, remote, where(cluster, through))
        killed = None
        if through == "master":
            killed = fleetwatch("history", "compact", "--config", str(cfg),
                                env={"FLEETWATCH_HISTORY_CRASH": "staged"})
            staged = list((remote / "_compaction" / "staging").iterdir())
            metrics = (remote / "tables" / "metrics").exists()
        (base / "sql").mkdir()          # config() names its file by the master alone
        sql = config(base / "sql", history_lake.path, where(cluster, through))
        script = ROOT / "tests" / "support" / "historyanswers.py"
        argv = [sys.executable, str(script), str(sql), QUERY, str(cfg)]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=400, cwd=ROOT)
        assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
        ran = json.loads(res.stdout.splitlines()[-1])
        done[through] = {"lake": remote, "killed": killed, **ran}
        if killed is not None:
            done[through].update(staged=staged, metrics=metrics)
        return done[through]
    return run


@pytest.mark.parametrize("through", ["master", "connect"])
def test_compaction_on_the_cluster_killed_then_rerun_equals_local(spark, on_cluster,
                                                                  local_compaction, through):
    """The same landing area compacted by local[2] in this process, and on the cluster by
    ``fleetwatch history compact`` (a session of its own on the master, or a session of
    the Spark Connect server): through the master SIGKILLed right after its executors
    staged the output (FLEETWATCH_HISTORY_CRASH=staged), then run again; through Spark
    Connect once (what a kill leaves is the lake's, whoever ran the session: the killed
    run costs a Spark driver, and the suite is CPU-bound). The same tables, every
    landing file processed once."""
    _, want, local_tables, local_done = local_compaction
    ran = on_cluster(through)
    remote, killed, rerun = ran["lake"], ran["killed"], ran["rerun"]
    if through == "master":
        assert killed.returncode == -9, killed.stdout + killed.stderr
        assert f"read: {want['events']} events" in killed.stdout
        assert ran["staged"] and not ran["metrics"]

    assert rerun["returncode"] == 0, rerun["stdout"]
    if through == "master":
        assert "staged output removed" in rerun["stdout"]
    assert f"{want['duplicates']} duplicates dropped" in rerun["stdout"]
    lake_is_settled(remote)
    assert tables(spark, remote) == local_tables
    assert len(list((remote / "_compaction" / "manifest" / "settled").iterdir())) == 1
    assert sorted(p.name for p in (remote / "landing" / "done").iterdir()) == local_done


@pytest.mark.parametrize("through", ["master", "connect"])
def test_queries_and_sql_on_the_cluster_equal_local(on_cluster, local_answers, through):
    """Availability, metric buckets, timelines... (tests/support/historyanswers.py) and
    ``fleetwatch history sql --json`` on the cluster (a session on the master, or through
    Spark Connect; the child process of the compaction's rerun), against the same on
    local[2]."""
    want, rows = local_answers
    ran = on_cluster(through)
    got = ran["answers"]
    assert got.keys() == want.keys()
    for name in want:
        assert got[name] == want[name], name
    assert ran["sql"]["returncode"] == 0, ran["sql"]["stdout"]
    assert json.loads(ran["sql"]["stdout"]) == rows


@pytest.fixture(scope="module")
def local_notebook(history_lake, tmp_path_factory):
    """The fleet notebook executed by a real Jupyter kernel on local[1], in the notebook
    directory ``fleetwatch history notebook`` makes (jupyter.prepare): each code cell's
    stdout."""
    pytest.importorskip("jupyterlab", reason="the notebook extra is not installed")
    directory = tmp_path_factory.mktemp("notebooks")
    jupyter.prepare(str(directory), HistorySettings(lake=str(history_lake.path),
                                                    master="local[1]", conf=FAST))
    nb = notebookrun.execute(str(directory / jupyter.SETTINGS), directory)
    notebookrun.check(nb, history_lake)
    return nb


def test_the_notebook_runs_in_a_jupyter_kernel_on_local_spark(local_notebook):
    assert "on local[1]" in notebookrun.printed(local_notebook)[0]
    if importlib.util.find_spec("matplotlib"):
        assert notebookrun.images(local_notebook) >= 5     # the plots, through the kernel


def test_the_notebook_in_a_jupyter_kernel_on_the_cluster(cluster, history_lake, tmp_path,
                                                         local_notebook):
    """The fleet notebook executed by a real Jupyter kernel whose Spark is the cluster,
    through Spark Connect: its known answers, and every cell printing what it prints in a
    kernel on local Spark (but the first, which names the master). (A kernel with a session
    of its own on the master is not run again: the queries on the master are compared above,
    and that kernel cost the suite about 85 s on 2 cores.)"""
    pytest.importorskip("matplotlib")
    cfg = config(tmp_path, history_lake.path, where(cluster, "connect"))
    nb = notebookrun.execute(str(cfg), tmp_path)
    notebookrun.check(nb, history_lake)
    got = notebookrun.printed(nb)
    assert f"on {cluster.master}" in got[0]
    assert notebookrun.images(nb) >= 5
    assert got[1:] == notebookrun.printed(local_notebook)[1:]


def test_a_backtest_on_the_cluster_pages_exactly_as_known(spark, cluster, tmp_path):
    """``fleetwatch rules backtest --json`` in a child process whose Spark is the cluster,
    through Spark Connect, on the lake of tests/integration/test_backtest.py: the pages,
    those added and those avoided worked out there, exactly."""
    import test_backtest as known
    lake = known.make_lake(spark, tmp_path)
    cfg = config(tmp_path, lake, where(cluster, "connect"))
    res = fleetwatch("rules", "backtest", "--config", str(cfg), "--rules",
                     str(known.policy_file(tmp_path, known.TRIED)), "--since",
                     str(known.BASE + 300), "--until", str(known.BASE + known.SPAN),
                     "--warmup", "5m", "--json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert known.picked(doc["pages"]) == known.picked(known.PAGES)
    assert known.picked(doc["real"]) == known.picked(known.REAL)
    assert known.picked(doc["added"], "then", "held") == \
        known.picked(known.ADDED, "then", "held")
    assert known.picked(doc["avoided"], "by", "held") == \
        known.picked(known.AVOIDED, "by", "held")
