"""Files that hold secrets or private data are created 0600 (0640 where the
service group reads them), whatever the umask, through the code paths that make them.

The umask is set to 0022 (the common default, which would give 0644) around each creation.
"""

from __future__ import annotations

import os
import stat
import sys
from contextlib import contextmanager

import pytest

from support.fleet import agent_uuid_for, wait_for

pytestmark = pytest.mark.timeout(90)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@contextmanager
def umask(value: int):
    old = os.umask(value)
    try:
        yield
    finally:
        os.umask(old)


def test_state_db_and_its_wal_files_are_not_world_readable(fleet):
    """A real registry sink on a new SQLite file: state.db, -wal and -shm are 0640."""
    pytest.importorskip("sqlalchemy")
    router = fleet.router()
    with umask(0o022):
        fleet.sink("registry", [router])
    db = fleet.root / "state.db"
    files = [db, fleet.root / "state.db-wal", fleet.root / "state.db-shm"]
    wait_for(lambda: all(p.exists() for p in files), 20, what="state.db and its WAL files")
    assert {p.name: oct(mode(p)) for p in files} == {p.name: "0o640" for p in files}


def test_agent_spool_is_not_world_readable(fleet):
    router = fleet.router()
    agent_uuid_for(fleet)
    with umask(0o022):
        fleet.agent([router])
    state = fleet.root / "agent-state"
    files = [state / "spool.db", state / "spool.db-wal", state / "spool.db-shm"]
    wait_for(lambda: all(p.exists() for p in files), 20, what="the spool and its WAL files")
    assert {p.name: oct(mode(p)) for p in files} == {p.name: "0o640" for p in files}


def test_demo_configs_and_logs_are_private(fleet):
    """The demo's configs (the alerting sink's holds a webhook routing key) and the logs of
    its processes are 0600."""
    from fleetwatch.cli import demo
    from fleetwatch.cli.demo.plan import Child

    root = fleet.root / "demo"
    cfg = demo.DemoConfig(dir=str(root), routers=1, insecure=True,
                          alert_webhook="http://127.0.0.1:9/hook")
    with umask(0o022):
        children, _ = demo.plan(root, cfg)
        configs = sorted(root.glob("*.yaml"))
        assert "sink-alerting.yaml" in {p.name for p in configs}
        assert "routing_key" in (root / "sink-alerting.yaml").read_text()
        assert {p.name: oct(mode(p)) for p in configs} == {p.name: "0o600" for p in configs}
        child = Child("quick", children[0].config, [sys.executable, "-c", "print('hi')"],
                      root / "logs" / "quick.log")
        demo.start(child)
    try:
        assert child.popen.wait(30) == 0
    finally:
        if child.popen.poll() is None:
            child.popen.kill()
    assert (root / "logs" / "quick.log").read_text() == "hi\n"
    assert oct(mode(root / "logs" / "quick.log")) == "0o600"


def test_demo_json_holding_the_console_password_is_private(tmp_path):
    """demo.json names the console's demo user and password: 0600, like the configs."""
    from fleetwatch.cli import demo
    root = tmp_path / "demo"
    root.mkdir()
    console = {"url": "http://127.0.0.1:1/", "user": "admin", "password": "s3cret"}
    with umask(0o022):
        demo.record(root, {"console": console})
    assert oct(mode(root / "demo.json")) == "0o600"
    assert "s3cret" in (root / "demo.json").read_text()
    assert [p.name for p in root.iterdir()] == ["demo.json"]      # nothing left beside it


def test_site_buffer_segments_are_not_world_readable(tmp_path):
    """A site router's buffer spilled to disk holds every host's results: 0640."""
    from router.sitebuffer import SUFFIX, SiteBuffer
    with umask(0o022):
        buf = SiteBuffer(max_messages=2, spool_dir=str(tmp_path / "spool"), spool_bytes=1 << 20)
        for i in range(7):
            buf.push(b"envelope", b"body %d" % i)
    segments = sorted((tmp_path / "spool").glob(f"*{SUFFIX}"))
    assert segments
    assert {p.name: oct(mode(p)) for p in segments} == {p.name: "0o640" for p in segments}


@pytest.mark.timeout(240)     # the session's Spark starts in it when run alone
def test_compacted_tables_are_not_world_readable(spark, tmp_path):
    """The lake's Parquet files, written by Spark whatever its umask, are 0640 like the
    landing files they come from (a real compaction of a few notifications)."""
    from fleetwatch.lake import synth
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.settings import HistorySettings
    lake = tmp_path / "lake"
    (lake / "landing").mkdir(parents=True)
    (lake / "landing" / "20260101T000000-x-00000000.jsonl").write_text(
        "".join(ln for ln in synth.lines(100) if '"type":"NOTIFY"' in ln))
    with umask(0o022):
        compact(spark, HistorySettings(lake=str(lake)), out=lambda line: None)
    files = [p for p in (lake / "tables").rglob("*") if p.is_file()]
    assert any(p.suffix == ".parquet" for p in files)
    assert {str(p): oct(mode(p)) for p in files} == {str(p): "0o640" for p in files}
