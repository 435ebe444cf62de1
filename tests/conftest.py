import os
import sys
from pathlib import Path

import pytest
import zmq

sys.path.insert(0, str(Path(__file__).parent))

#: every Spark JVM the tests start, the standalone cluster's daemons too, runs with the C1
#: compiler alone and the serial collector (tests/support/spark-conf/spark-defaults.conf)
os.environ.setdefault("SPARK_CONF_DIR", str(Path(__file__).parent / "support" / "spark-conf"))
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC "
                                                 "-XX:ReservedCodeCacheSize=240m")

from support.fleet import Fleet  # noqa: E402

#: support modules with fixtures (``routers``: fake routers for a real agent)
pytest_plugins = ["support.agentrouter", "support.snmpd"]


@pytest.fixture
def fleet(tmp_path, request):
    """A :class:`fleet.Fleet` in a fresh directory; every process is stopped afterwards."""
    f = Fleet(tmp_path)
    yield f
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(f.logs())
    f.stop_all()


@pytest.fixture(scope="session")
def pg_cluster():
    """A throwaway PostgreSQL cluster on 127.0.0.1 (tests/support/pg.py), stopped after the session;
    skipped only when the PostgreSQL binaries are not installed (``make install`` does)."""
    from support.pg import PgCluster, find_bindir
    bindir = find_bindir()
    if bindir is None:
        pytest.skip("PostgreSQL binaries not found in /usr/lib/postgresql/*/bin "
                    "(apt-get install postgresql, or make install)")
    cluster = PgCluster(bindir).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def pg_url(pg_cluster):
    """The SQLAlchemy URL of a fresh, empty PostgreSQL database for this test (left in
    place: processes of the test may still hold connections; the cluster goes at the end)."""
    return pg_cluster.create_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path):
    """A state database URL: a SQLite file, then a fresh PostgreSQL database (each test
    taking ``url`` runs on both, as the alerting state and the outbox must work on both)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state.db'}"
    pytest.importorskip("psycopg")
    return request.getfixturevalue("pg_url")


@pytest.fixture
def eng(url):
    """An engine on ``url`` with the alerting sink's tables (the outbox's too) created."""
    from fleetwatch.store import db
    e = db.engine(url)
    db.create(e, "alerting")
    yield e
    e.dispose()


@pytest.fixture
def deliverers(eng):
    """``start(config, n=1, **kw)``: ``n`` deliverer threads over ``eng``, as that many
    alerting sinks would run them (``sink-0``...), with the delivery ``config`` (``kw``: more
    of :class:`Deliverer`'s arguments, a ``clock``); those started (a list) returned, and
    every one stopped after the test."""
    from sinks.alerting.delivery.deliverer import Deliverer
    running = []

    def start(config, n: int = 1, **kw):
        from fleetwatch.store import db
        these = [Deliverer(db.engine(eng.url.render_as_string(hide_password=False)), config,
                           name=f"sink-{len(running) + i}", **kw) for i in range(n)]
        for d in these:
            d.start()
        running.extend(these)
        return these
    yield start
    for d in running:
        d.stop()
        d.engine.dispose()


@pytest.fixture
def keys(tmp_path):
    """A CURVE key tree in the test's directory (tests/support/keys.py): the routers' key,
    empty allowlists."""
    from support.keys import Keys
    return Keys(tmp_path)


@pytest.fixture
def zctx():
    """A context for a test's own sockets, destroyed (linger 0) afterwards."""
    ctx = zmq.Context()
    yield ctx
    ctx.destroy(linger=0)


@pytest.fixture
def carbon(tmp_path):
    """A real carbon-cache (the demo's) on 127.0.0.1 keeping 1 s points for an hour, in the
    test's directory (tests/support/graphite.py has the sink and the waits)."""
    from fleetwatch.cli.demo.carbon import Carbon
    c = Carbon(tmp_path / "carbon", retentions="1s:1h").start()
    yield c
    c.stop()


@pytest.fixture
def graphite_web(carbon, tmp_path):
    """A real graphite-web (the demo's: gunicorn on 127.0.0.1) over the ``carbon`` fixture's
    whisper files and cache; its ``url`` is the render API's base."""
    from fleetwatch.cli.demo.graphiteweb import GraphiteWeb, missing
    if missing():                       # the test extra installs it
        pytest.skip(missing())
    web = GraphiteWeb.over(tmp_path / "graphite-web", carbon).start()
    yield web
    web.stop()


@pytest.fixture(scope="session")
def spark():
    """One local[2] SparkSession for every history test in the run (a session takes about
    10 s to start): fleetwatch/lake/spark.py's settings, 2 shuffle partitions."""
    pytest.importorskip("pyspark", reason="the history extra is not installed")
    from fleetwatch.lake.spark import session
    # C1 JIT only and the serial collector, as every JVM of the suite: SPARK_CONF_DIR above
    s = session("local[2]", {"spark.driver.memory": "1g"})
    yield s
    s.stop()


@pytest.fixture(scope="session")
def history_lake(spark, tmp_path_factory):
    """The generated lake of tests/support/lakegen.py with its known answers, shared by the query,
    replay and notebook tests: read only (a test that changes a lake makes its own). Made once
    per run: pytest-xdist's workers share one, the first to need it writes it."""
    import fcntl

    from support.lakegen import Lake, make_lake
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent                  # the run's directory, above each worker's
    path, written = shared / "history-lake", shared / "history-lake.base"
    with open(shared / "history-lake.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not written.exists():
            written.write_text(repr(make_lake(spark, path).base))
    return Lake(path, float(written.read_text()))


@pytest.fixture
def history_config(tmp_path, history_lake) -> str:
    """An operator config (fleetwatch.yaml) whose ``history:`` names the generated lake, for
    the ``fleetwatch history`` commands run in-process."""
    path = tmp_path / "fleetwatch.yaml"
    path.write_text(f"routers: [tcp://127.0.0.1:5556]\nhistory:\n  lake: {history_lake.path}\n"
                    f"  master: local[2]\n")
    return str(path)


INTEGRATION = Path(__file__).parent / "integration"


#: the modules that take longest, longest first (``--durations=40`` of a whole
#: run, docs/development/testing.md; the order of a fresh CI run's per-module seconds,
#: 2026-12-05): pytest-xdist hands modules to its workers in the order collected, so these
#: start at once and the short ones fill the gaps at the end
LONGEST = ["test_history_cluster", "test_ansible_systemd", "test_web",
           "test_demo", "test_history_compact", "test_demo_spark", "test_history_drops",
           "test_durable_e2e", "test_web_oncall", "test_backtest_bench", "test_history_cli",
           "test_history_path", "test_devices_e2e", "test_package", "test_systemd",
           "test_fleetsim", "test_history_replay", "test_history_query", "test_notebook",
           "test_history_jupyter"]


def pytest_collection_modifyitems(config, items):
    """Every test under tests/integration is ``slow`` (it starts processes or opens sockets):
    ``-m "not slow"`` leaves tests/unit. The longest modules are run first: ``make test``
    runs ``--dist loadfile`` (a module's tests on one worker, so that its fixtures, a
    deployment or a cluster, are made once) in the order collected."""
    for item in items:
        if INTEGRATION in Path(item.path).parents:
            item.add_marker(pytest.mark.slow)

    def rank(item):
        stem = Path(item.path).stem
        if stem in LONGEST:         # a unit module among them too (a benchmark's --quick)
            return LONGEST.index(stem)
        return len(LONGEST) + (INTEGRATION not in Path(item.path).parents)
    items.sort(key=rank)            # stable: within a rank, the order collected


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
