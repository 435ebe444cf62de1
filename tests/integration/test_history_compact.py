"""Compaction: landing files into the Parquet tables, exactly once whatever kills it.

The Spark tests share the session-scoped ``spark`` fixture (tests/conftest.py) and keep
their lakes tiny: a compaction's cost here is Spark's per-job overhead, not the data.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleetwatch.lake import manifest, synth
from fleetwatch.lake.settings import HistorySettings
from fleetwatch.lake.manifest import Lake
from fleetwatch.lake.spans import GAP, NAME

ROOT = Path(__file__).resolve().parents[2]
QUIET = {"out": lambda line: None}
#: Spark settings for the subprocess runs: no whole-stage code generation, no adaptive
#: re-planning (each costs more than it saves on a few lines; the C1 JIT comes from
#: tests/support/spark-conf, as for every JVM of the suite)
FAST_JVM = {"spark.sql.codegen.wholeStage": "false", "spark.sql.adaptive.enabled": "false"}


# ---------------------------------------------------------------- a landing area

def landing_area(lake: Path, events: int = 400) -> dict:
    """Synthetic landing files plus what makes compaction earn its keep: the same messages
    again in another file (resent through another router, received later), a line cut short
    by a crash, a line that is not JSON, one whose body uuid is not the stamped one, one
    with a ts past year 9999, and an abandoned ``.open`` file of a dead sink. Returns the
    expected table sizes."""
    landing = lake / "landing"
    paths = synth.write_files(str(landing), events, files=3, days=2, hosts=5,
                              metrics_per_stats=3)
    lines = [ln for p in paths for ln in Path(p).read_text().splitlines()]
    resent = []
    for line in lines[::7]:
        doc = json.loads(line)
        doc["router"], doc["received"] = "r9", doc["received"] + 30
        resent.append(json.dumps(doc))
    (landing / "20000101T000001-again-00000000.jsonl").write_text("\n".join(resent) + "\n")
    bad = [json.dumps({"type": "NOTIFY", "uuid": "intruder", "router": "r0", "received": 1,
                       "msg": {"msg_id": "forged", "uuid": "victim", "ts": 1.8e9,
                               "severity": "info", "text": "x"}}),
           "this is not json",
           json.dumps({"type": "NOTIFY", "uuid": "u", "router": "r0", "received": 1,
                       "msg": {"msg_id": "far", "uuid": "u", "ts": 1e15,
                               "severity": "info", "text": "x"}})]
    stale = landing / "20000101T000002-dead-00000000.jsonl.open"
    stale.write_text("\n".join(bad) + "\n" + lines[0][:40])     # cut short
    os.utime(stale, (1e9, 1e9))
    expected = {"metrics": 0, "heartbeats": 0, "results": 0, "notifications": 0,
                "registrations": 0}
    beats: dict[tuple, set[float]] = {}
    for line in lines:
        doc = json.loads(line)
        table = {"STATS": "metrics", "HEARTBEAT": "heartbeats", "RESULT": "results",
                 "NOTIFY": "notifications"}.get(doc["type"], "registrations")
        expected[table] += len(doc["msg"]["metrics"]) if table == "metrics" else 1
        if table == "heartbeats":
            ts = doc["msg"]["ts"]
            beats.setdefault((doc["uuid"], doc["msg"].get("name"), ts // 86400), set()).add(ts)
    # heartbeat_spans: per sender and day, a new span after each gap of GAP or more
    spans = sum(1 + sum(1 for a, b in zip(ts, ts[1:]) if b - a >= GAP)
                for ts in map(sorted, beats.values()))
    return {"rows": expected, "events": len(lines) + len(resent) + 4, "bad": 4,
            "duplicates": len(resent), "spans": spans}


def settings(lake: Path, **kw) -> HistorySettings:
    return HistorySettings(lake=str(lake), **kw)


def tables(spark, lake: Path) -> dict[str, list[tuple]]:
    """Every table's rows, sorted: what two runs must agree on."""
    from fleetwatch.lake.schema import TABLE_NAMES, TABLES
    out = {}
    for name in TABLE_NAMES:
        path = lake / "tables" / name
        if path.is_dir():
            rows = spark.read.schema(TABLES[name]).parquet(str(path)).collect()
            out[name] = sorted((tuple(r) for r in rows), key=repr)
    return out


def lake_is_settled(lake: Path) -> None:
    work = lake / "_compaction"
    assert not list((lake / "landing").glob("*.jsonl*"))
    assert not list(work.glob("*.intent.json"))
    assert not list((work / "manifest").glob("*.json"))
    assert not list((work / "staging").iterdir())


# ---------------------------------------------------------------- a clean run

@pytest.fixture(scope="module")
def first_run(spark, tmp_path_factory) -> SimpleNamespace:
    """One compaction of :func:`landing_area`, the lake copied after each of its steps: each
    copy is exactly what a run SIGKILLed right there leaves on disk. The clean run the next
    test checks, and the tables every run killed after a step must end with; made before any
    test changes the lake."""
    from fleetwatch.lake.compact import compact
    root = tmp_path_factory.mktemp("first-run")
    lake, snaps = root / "lake", root / "snap"
    want = landing_area(lake)
    progress: list[str] = []

    def snapshot(step):
        shutil.copytree(lake, snaps / step)
    summary = compact(spark, settings(lake), out=progress.append, hook=snapshot)
    return SimpleNamespace(lake=lake, want=want, progress=progress, summary=summary,
                           snaps=snaps, tables=tables(spark, lake))


def test_compaction_writes_the_tables_once(spark, first_run):
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.schema import TABLES
    lake, want, progress, summary = (first_run.lake, first_run.want, first_run.progress,
                                     first_run.summary)

    assert summary.events == want["events"] and summary.bad == want["bad"]
    assert {k: v.rows for k, v in summary.tables.items()} == want["rows"]
    assert sum(v.duplicates for v in summary.tables.values()) == want["duplicates"]
    got = first_run.tables
    assert {k: len(v) for k, v in got.items()} == {**want["rows"], NAME: want["spans"]}
    for name, rows in got.items():
        schema = spark.read.parquet(str(lake / "tables" / name)).schema
        assert {f.name: f.dataType for f in schema} == \
            {f.name: f.dataType for f in TABLES[name]}, name
    notes = spark.read.parquet(str(lake / "tables" / "notifications"))
    assert notes.select("msg_id").distinct().count() == notes.count()
    assert notes.where("router = 'r9' or msg_id in ('forged', 'far')").count() == 0
    # each row keeps its line's received (synth: ts + 0.01), the copy received first
    kept = [(r.ts.timestamp(), r.received) for r in notes.select("ts", "received").collect()]
    assert kept and all(abs(received - (ts + 0.01)) < 1e-3 for ts, received in kept)
    metrics = spark.read.parquet(str(lake / "tables" / "metrics"))
    assert metrics.select("msg_id", "metric").distinct().count() == metrics.count()
    assert sorted(r.date for r in metrics.select("date").distinct().collect()) == \
        ["2026-11-18", "2026-11-19", "2026-11-20"]
    lake_is_settled(lake)
    assert len(list((lake / "landing" / "done").glob("*.jsonl"))) == 5
    assert progress[0] == f"recover: closed {lake}/landing/20000101T000002-dead-00000000" \
                          f".jsonl (its sink died)"
    steps = [line.split(":")[0] for line in progress[1:]]
    assert steps[:2] == ["compact", "read"] and steps[-2:] == ["commit", "compact"]
    assert sorted(steps[2:-2]) == sorted([*want["rows"], NAME])   # one line per table
    assert re.match(r"compact: run \S+ done in [\d.]+s: 5 files, \d+ events \(4 bad lines, "
                    rf"{want['duplicates']} duplicates dropped\)", progress[-1])

    # the same lines once more (a replay, or a file put back): nothing new is stored
    again = lake / "landing" / "20000101T000003-replay-00000000.jsonl"
    shutil.copy(sorted((lake / "landing" / "done").glob("*synth-00000*"))[0], again)
    second = compact(spark, settings(lake, processed="delete"), **QUIET)
    assert second.rows == 0 and second.events > 0
    assert sum(v.duplicates for v in second.tables.values()) == second.events
    assert not again.exists()
    assert {k: len(v) for k, v in tables(spark, lake).items()} == \
        {**want["rows"], NAME: want["spans"]}


# ---------------------------------------------------------------- killed runs

def test_a_run_killed_after_any_step_is_finished_by_the_next(spark, first_run):
    """A compaction of each copy :func:`first_run` made (what a run SIGKILLed after that
    step leaves) must end with the same tables as the clean run, and every landing file
    processed once."""
    from fleetwatch.lake.compact import STEPS, compact
    for step in STEPS:
        snap = first_run.snaps / step
        if step == "staged":
            assert not (snap / "tables" / "metrics").exists()     # nothing visible yet
        progress = []
        compact(spark, settings(snap), out=progress.append)
        assert tables(spark, snap) == first_run.tables, step
        lake_is_settled(snap)
        assert len(list((snap / "_compaction" / "manifest" / "settled").iterdir())) == 1
        assert progress[0].startswith("recover: run "), (step, progress)


def notify_file(lake: Path, index: int) -> Path:
    """A landing file of NOTIFYs only (one table: the least Spark work to wait for)."""
    path = lake / "landing" / f"20000101T00000{index}-cli-0.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(ln for ln in synth.lines(100, first=100 * index)
                            if '"type":"NOTIFY"' in ln))
    return path


def test_a_timer_s_run_with_nothing_to_do_starts_no_spark(spark, tmp_path):
    """``compact --every``'s session is made by its first run with work (the demo's first
    run, at its start, finds no closed landing file: no JVM for it)."""
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.spark import Lazy
    made = []
    lazy = Lazy(lambda: made.append("session") or spark)
    lake = tmp_path / "lake"
    assert compact(lazy, settings(lake), **QUIET).line() == "compact: no closed landing files"
    assert made == []
    notify_file(lake, 0)
    assert compact(lazy, settings(lake), **QUIET).files == 1
    assert compact(lazy, settings(lake), **QUIET).files == 0
    assert made == ["session"]                  # made once, kept for the next runs


@pytest.mark.timeout(240)     # two Spark JVMs start in it: ~50 s, more on a busy machine
def test_cli_killed_mid_run_then_rerun_on_a_timer(spark, tmp_path):
    """The real thing: ``fleetwatch history compact`` SIGKILLs itself after writing its
    staging output (FLEETWATCH_HISTORY_CRASH=staged); then ``compact --every`` (as the demo
    runs it) starts over cleanly, compacts what lands later, and stops on SIGTERM. The
    first run starts while the test holds the lake's lock: it waits, saying so."""
    from fleetwatch.lake.compact import locked
    from support.fleet import wait_for
    lake = tmp_path / "lake"
    paths = [notify_file(lake, 0), notify_file(lake, 1)]
    cfg = tmp_path / "fleetwatch.yaml"
    # a JVM that starts fast and does not optimise hard: these runs are tiny
    cfg.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {lake}\n"
                   f"  master: local[1]\n  conf: {json.dumps(FAST_JVM)}\n")
    argv = [sys.executable, "-m", "fleetwatch", "history", "compact", "--config", str(cfg)]
    # started while another compaction holds the lake (as the demo's periodic one may): it
    # waits for it, saying so, then runs
    err = tmp_path / "first.err"
    with locked(Lake(str(lake))), open(err, "wb") as errors:
        first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errors, cwd=ROOT,
                                 env={**os.environ, "FLEETWATCH_HISTORY_CRASH": "staged"})
        wait_for(lambda: "waiting for the compaction running since" in err.read_text()
                 or first.poll() is not None, 30, 0.1, "the waiting line")
    try:
        stdout = first.communicate(timeout=110)[0].decode()
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    res = subprocess.CompletedProcess(argv, first.returncode, stdout, err.read_text())
    assert "waiting for the compaction running since" in res.stderr, res.stderr
    assert res.returncode == -9, res.stdout + res.stderr
    assert "read: 8 events" in res.stdout and "notifications: 8 rows" in res.stdout
    assert all(p.exists() for p in paths)                        # not processed yet
    assert list((lake / "_compaction" / "staging").iterdir())    # its staged output
    assert not (lake / "tables" / "notifications").exists()

    log = tmp_path / "every.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([*argv, "--every", "0.5"], stdout=out,
                                stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
    try:
        wait_for(lambda: log.read_text().count(" done in ") >= 1, 100, 0.2, "the first run")
        assert "staged output removed" in log.read_text()
        notify_file(lake, 2)
        wait_for(lambda: log.read_text().count(" done in ") >= 2, 30, 0.2, "the next run")
        proc.terminate()
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    lines = [json.loads(ln) for p in (lake / "landing" / "done").iterdir()
             for ln in p.read_text().splitlines()]
    notes = sorted(ln["msg"]["msg_id"] for ln in lines if ln["type"] == "NOTIFY")
    assert len(notes) == len(set(notes)) == 12
    got = spark.read.parquet(str(lake / "tables" / "notifications")).select("msg_id")
    assert sorted(r.msg_id for r in got.collect()) == notes
    lake_is_settled(lake)


# ---------------------------------------------------------------- small files

def test_repeated_compactions_keep_partitions_to_a_few_files(spark, tmp_path):
    from fleetwatch.lake.compact import compact
    lake = tmp_path / "lake"
    conf = settings(lake, max_small_files=2)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    counts, merged, beats = [], 0, 0
    for run in range(5):
        lines = [ln for ln in synth.lines(60, first=1000 * run, hosts=2, days=0.1)
                 if '"type":"HEARTBEAT"' in ln]
        beats += len(lines)
        (lake / "landing").mkdir(parents=True, exist_ok=True)
        (lake / "landing" / f"20000101T00000{run}-t-0.jsonl").write_text("".join(lines))
        summary = compact(spark, conf, **QUIET)
        merged += summary.tables["heartbeats"].merged
        counts.append(len(Lake(str(lake)).partition_files("heartbeats", "2026-11-18")))
    assert merged >= 1
    assert max(counts) <= conf.max_small_files + partitions, counts
    stored = spark.read.parquet(str(lake / "tables" / "heartbeats"))
    assert stored.count() == stored.select("msg_id").distinct().count() == beats

    # each run folded its heartbeats into the date's spans: one file, the same spans as
    # one fold of every heartbeat
    from fleetwatch.lake.schema import TABLES
    from fleetwatch.lake.spans import fold, of_heartbeats
    assert len(Lake(str(lake)).partition_files(NAME, "2026-11-18")) == 1
    spans = tables(spark, lake)[NAME]
    heartbeats = spark.read.schema(TABLES["heartbeats"]).parquet(str(lake / "tables/heartbeats"))
    columns = spark.read.schema(TABLES[NAME]).parquet(str(lake / "tables" / NAME)).columns
    assert spans == sorted((tuple(r) for r in fold(of_heartbeats(heartbeats))
                            .select(*columns).collect()), key=repr)
    assert len(spans) < beats / 4          # 2 hosts heartbeating every few seconds
    # a lake compacted before heartbeat_spans existed gets them at its next run, even one
    # without landing files
    shutil.rmtree(lake / "tables" / NAME)
    progress = []
    assert compact(spark, conf, out=progress.append).files == 0
    assert any(line.startswith(f"{NAME}: ") for line in progress), progress
    assert tables(spark, lake)[NAME] == spans
    lake_is_settled(lake)
    assert compact(spark, conf, out=progress.append).run == ""       # nothing left to do


# ---------------------------------------------------------------- without Spark

def test_recover_rolls_intents_forward_and_removes_orphan_staging(tmp_path):
    lake = Lake(str(tmp_path))
    lake.make_dirs()
    (Path(lake.landing) / "a.jsonl").write_text("{}\n")
    staged = Path(lake.staging("R1")) / "notifications" / "date=2026-01-01"
    staged.mkdir(parents=True)
    (staged / "part-1.parquet").write_text("new")
    old = Path(lake.partition("notifications", "2026-01-01"))
    old.mkdir(parents=True)
    (old / "small-1.parquet").write_text("old")
    orphan = Path(lake.staging("R0")) / "metrics"
    orphan.mkdir(parents=True)
    intent = {"run": "R1", "landing": ["a.jsonl"], "tables": {"notifications": {
        "2026-01-01": {"add": ["part-1.parquet"], "remove": ["small-1.parquet"]}}}}
    manifest.write_intent(lake, intent)
    manifest.apply(lake, intent)             # killed half-way through: applied once already
    (staged).mkdir(parents=True, exist_ok=True)
    done = manifest.recover(lake)
    assert [d.split(":")[0] for d in done] == ["run R1 was killed after its intent",
                                               "run R1 was committed but not settled",
                                               "run R0 was killed before its intent"]
    assert sorted(os.listdir(old)) == ["part-1.parquet"]
    assert (old / "part-1.parquet").read_text() == "new"
    assert os.listdir(lake.done) == ["a.jsonl"] and os.listdir(lake.staging_root) == []
    assert os.listdir(lake.settled) == ["R1.json"]
    assert manifest.recover(lake) == []      # idempotent


def test_one_compaction_at_a_time(tmp_path):
    from fleetwatch.lake.compact import Busy, locked
    lake = Lake(str(tmp_path))
    with locked(lake):
        with pytest.raises(Busy, match="another compaction"):
            with locked(lake):
                pass
    with locked(lake):
        pass


def test_compact_refuses_with_no_wait_and_gives_up_after_its_wait(tmp_path, capsys):
    """``history compact`` while another compaction holds the lake: ``--no-wait`` refuses
    at once (exit 75) naming since when it runs; ``--wait`` says it waits, then gives up
    (75) when that run outlasts it. Neither starts Spark."""
    from fleetwatch import cli
    from fleetwatch.lake.compact import locked
    lake = tmp_path / "lake"
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:5556]\nhistory:\n  lake: {lake}\n")
    argv = ["history", "compact", "--config", str(config)]
    with locked(Lake(str(lake))):
        assert cli.main(argv + ["--no-wait"]) == os.EX_TEMPFAIL
        err = capsys.readouterr().err
        assert "another compaction is running on" in err and f"pid {os.getpid()})" in err
        assert "since " in err and "waiting" not in err
        assert cli.main(argv + ["--wait", "0.3"]) == os.EX_TEMPFAIL
        err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("fleetwatch history compact: waiting for the compaction "
                             "running since ") and "up to 0.3 s" in err[0]
    assert "still running after 0.3 s" in err[1]


def test_spark_settings():
    from fleetwatch.lake.spark import defaults, local_cores, merged
    assert local_cores("local[3]") == 3 and local_cores("local") == 1
    assert local_cores("local[*]") == os.cpu_count()
    local = defaults("local[2]")
    assert local["spark.driver.bindAddress"] == "127.0.0.1"
    assert local["spark.ui.enabled"] == "false" and local["spark.sql.shuffle.partitions"] == "2"
    assert local["spark.sql.codegen.cache.maxEntries"] == "1000"    # a compaction's classes
    assert "spark.driver.host" not in defaults("spark://m:7077")
    conf = merged("local[2]", {"spark.driver.extraJavaOptions": "-Xss4m",
                               "spark.sql.shuffle.partitions": "8"})
    assert conf["spark.driver.extraJavaOptions"].endswith("log4j2.properties -Xss4m")
    assert conf["spark.sql.shuffle.partitions"] == "8"


def test_history_command_line_errors(tmp_path):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "fleetwatch", "history", *args],
                              capture_output=True, text=True, cwd=ROOT, timeout=60)
    res = run("compact", "--config", str(tmp_path / "missing.yaml"))
    assert res.returncode == 78 and "missing.yaml" in res.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("routers: [tcp://r:1]\nhistory: {processed: keep}\n")
    res = run("compact", "--config", str(bad))
    assert res.returncode == 78 and "history.processed: expected move or delete" in res.stderr
    res = run("compact", "--help")
    assert res.returncode == 0 and "--every" in res.stdout
    assert run().returncode == 2


def test_schemas_are_documented():
    """docs/concepts/lake.md lists every table's columns, in order, with their types."""
    from fleetwatch.lake.schema import COLUMNS
    text = (ROOT / "docs" / "concepts" / "lake.md").read_text()
    for name, columns in COLUMNS.items():
        section = text.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]
        rows = re.findall(r"^\| `(\w+)` \| ([\w<>,]+) \|", section, re.M)
        assert rows == [(col, type_.simpleString()) for col, type_, _ in columns], name
