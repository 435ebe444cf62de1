"""``fleetwatch rules backtest`` on a lake made here, whose pages are known: an hour of three
agents (heartbeats every 10 s, results every minute, a notification, STATS), played first
through a real registry sink and a real alerting sink on a real state database (what
"really" paged, with a downtime and a silence an operator set), landed as the history sink
lands it and compacted with that state database's lifecycle (the session's ``local[2]``
Spark). The backtest then replays the lake through another policy and must find exactly
the pages worked out below, added and avoided, each for its reason; replayed through the
production policy itself, it must page what production paged, at the same times.

The same run on the Spark standalone cluster is in tests/integration/test_history_cluster.py
(it shares that module's cluster).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import time
from pathlib import Path

import pytest
from sqlalchemy import insert

from fleetwatch import protocol
from fleetwatch.config import build
from fleetwatch.lake.settings import HistorySettings
from fleetwatch.protocol import Relayed
from fleetwatch.store import db, schema
from sinks.alerting.config import AlertingConfig
from sinks.alerting.sink import AlertingSink
from sinks.registry import RegistrySink
from support.clock import Clock

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(300)

BASE = 1_794_960_000.0              # a UTC midnight
SPAN = 3600.0
#: the three agents: uuid -> hostname
WEB1, WEB2, DB1 = "a1" * 16, "b2" * 16, "c3" * 16
HOSTS = {WEB1: "web-1", WEB2: "web-2", DB1: "db-1"}
#: (uuid, plugin) -> the minutes (k: a result at BASE + 60 k + 1) it is CRITICAL
CRITICAL = {(WEB1, "load"): range(10, 15), (WEB2, "load"): range(20, 21),
            (WEB2, "disk"): range(30, 38), (DB1, "mysql"): range(40, 45),
            (WEB1, "http"): range(41, 45), (DB1, "backup"): range(50, 53)}
#: db-1 sends no heartbeat in [BASE + 1800, BASE + 1900)
SILENT = (DB1, 1800, 1900)
#: web-1's disk use climbs past 90 % from this second on (the rule's added page)
DISK_FULL = 3000
#: what production ran: every non-OK result pages at once
PRODUCTION = {"max_check_attempts": 1, "flap_detection": False}
#: the policy tried: three attempts, web-1's http behind db-1's mysql
TRIED = {"max_check_attempts": 3, "flap_detection": False,
         "dependencies": [{"hosts": "web-1", "checks": "http", "parents": ["db-1/mysql"]}]}
#: a rule on web-1's disk (sinks.alerting.series), in the policy tried
RULE = {"name": "disk_high", "hosts": ["web-1"], "expr": "avg(disk.root.used_percent, 2m)",
        "critical": "> 90"}
TICK = 5.0


# ---------------------------------------------------------------- the hour

def messages() -> list[tuple[float, Relayed]]:
    """The hour's messages as routers relayed them, with the time each landed, in order."""
    out = []

    def add(t: float, type_: str, uuid: str, **fields) -> None:
        body = {"msg_id": f"m{len(out):08d}", "uuid": uuid, "ts": BASE + t, **fields}
        out.append((BASE + t + 0.01, Relayed(uuid, "r1", protocol.Message(type_, body))))
    for uuid, name in HOSTS.items():
        add(0, "HELLO", uuid, hostname=name, heartbeat=10.0, version="1.0")
        add(0.5, "REGISTER", uuid, name="agent", hostname=name, version="1.0")
    for t in range(0, int(SPAN), 10):
        for uuid in HOSTS:
            if not (uuid == SILENT[0] and SILENT[1] <= t < SILENT[2]):
                add(t, "HEARTBEAT", uuid, interval=10.0)
        add(t + 3, "STATS", WEB1, hostname="web-1", source="agent",
            metrics={"disk.root.used_percent": 95.0 if t >= DISK_FULL else 50.0})
    for k in range(60):
        for (uuid, plugin), bad in CRITICAL.items():
            status = 2 if k in bad else 0
            add(60 * k + 1, "RESULT", uuid, command_id=f"s:{plugin}:{k}", plugin=plugin,
                status=status, output=f"{plugin.upper()} {'CRITICAL' if status else 'OK'}",
                started=BASE + 60 * k + 1, duration=0.1, slot=BASE + 60 * k)
    add(1502, "NOTIFY", WEB1, severity="error", text="deploy failed", source="deployer")
    return sorted(out, key=lambda m: (m[0], m[1].message.msg_id))


def produce(url: str) -> None:
    """What really paged: the hour through a real registry sink and a real alerting sink on
    the state database at ``url`` (production's policy, a tick every 5 s of its clock),
    with a downtime of web-2 and a silence of db-1's backup set beforehand."""
    eng = db.engine(url)
    db.create(eng, "alerting")
    with eng.begin() as conn:
        conn.execute(insert(schema.downtimes).values(
            host="web-2", check_name=None, start=BASE + 1830, end=BASE + 2400, every=None,
            duration=None, flexible=None, children=False, comment="disk swap", author="ann",
            created=BASE + 1700))
        conn.execute(insert(schema.silences).values(
            host="db-1", check_name="backup", created=BASE + 2950, until=BASE + 3300,
            reason="backup rework", created_by="bob"))
    eng.dispose()
    clock = Clock(BASE)
    registry = RegistrySink(db.engine(url), clock)
    registry.start()
    sink = AlertingSink(db.engine(url), clock, build(AlertingConfig, PRODUCTION),
                        deliver=False)
    sink.start()
    ticked = BASE
    for at, group in itertools.groupby(messages(), key=lambda m: m[0]):   # a batch a moment
        while ticked + TICK <= at:
            ticked += TICK
            clock.now = ticked
            sink.tick()
        clock.now = at
        batch = [relayed for _, relayed in group]
        for to, types in ((registry, ("HELLO", "REGISTER")),
                          (sink, ("HEARTBEAT", "RESULT", "NOTIFY"))):
            if any(r.message.type in types for r in batch):
                to.write([r for r in batch if r.message.type in types])
    while ticked + TICK <= BASE + SPAN:
        ticked += TICK
        clock.now = ticked
        sink.tick()
    sink.close()
    registry.close()


def land(lake: Path) -> None:
    """The hour's messages as the history sink lands them: one closed landing file."""
    landing = lake / "landing"
    landing.mkdir(parents=True)
    with open(landing / "20261110T000000-history_t-00000001.jsonl", "w") as f:
        for at, r in messages():
            f.write(json.dumps({"msg": r.message.body, "type": r.message.type, "uuid": r.uuid,
                                "router": r.router, "received": round(at, 3)},
                               separators=(",", ":")) + "\n")


def make_lake(spark, where: Path) -> Path:
    """The lake of the hour, compacted with production's lifecycle; its path."""
    from fleetwatch.lake.compact import compact
    lake, url = where / "lake", f"sqlite:///{where / 'production.db'}"
    produce(url)
    land(lake)
    compact(spark, HistorySettings(lake=str(lake), state_url=url),
            wall=lambda: BASE + SPAN + 600, out=lambda line: None)
    return lake


def policy_file(where: Path, settings: dict) -> Path:
    path = where / f"alerting-{len(list(where.glob('alerting-*')))}.yaml"
    section = {**settings, "rules": [RULE]}
    path.write_text(json.dumps({"alerting": section}))
    return path


def backtest(*argv: str) -> tuple[int, str, str]:
    """``fleetwatch rules backtest ARGV`` in this process: (status, stdout, stderr)."""
    from fleetwatch.cli import rules
    parser = argparse.ArgumentParser(prog="fleetwatch rules")
    rules.add_arguments(parser)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = rules.run(parser.parse_args(["backtest", *argv]))
    return code, out.getvalue(), err.getvalue()


# ---------------------------------------------------------------- what is known

def iso(t: float) -> str:
    from fleetwatch.display import iso as stamp
    return str(stamp(BASE + t))


def page(host: str, subject: str, start: float, end: float | None, severity="critical",
         **extra) -> dict:
    return {"hostname": host, "subject": subject, "start": iso(start),
            "end": None if end is None else iso(end), "severity": severity, **extra}


#: the policy tried pages these (times after BASE: a result's page at its landing, a host's
#: DOWN at the first 5 s tick after its 30 s timeout)
PAGES = [page("web-1", "load", 721.01, 901.01),                 # the 3rd CRITICAL
         page("web-1", "notify", 1502.01, None, "error"),
         page("db-1", "host", 1825.0, 1900.01),
         page("db-1", "mysql", 2521.01, 2701.01),
         page("db-1", "backup", 3121.01, 3181.01),
         page("web-1", "rule:disk_high", 3120.0, None)]         # still open at the end
#: production paged these
REAL = [page("web-1", "load", 601.01, 901.01),
        page("web-2", "load", 1201.01, 1261.01),
        page("web-1", "notify", 1502.01, None, "error"),
        page("web-2", "disk", 1801.01, 2400.0),     # its resolve held until the downtime ended
        page("db-1", "host", 1825.0, 1900.01),
        page("db-1", "mysql", 2401.01, 2701.01),
        page("web-1", "http", 2461.01, 2701.01)]
ADDED = [page("db-1", "backup", 3121.01, 3181.01, then="silence 1", held="silenced"),
         page("web-1", "rule:disk_high", 3120.0, None, then=None, held=None)]
AVOIDED = [page("web-2", "load", 1201.01, 1261.01,
                by="the check policy (max_check_attempts, flapping)", held=None),
           page("web-2", "disk", 1801.01, 2400.0, by="downtime 1 (web-2, 'disk swap')",
                held="in downtime"),
           page("web-1", "http", 2461.01, 2701.01, by="parent db-1/mysql",
                held="parent down")]


def picked(pages: list[dict], *extra: str) -> list[dict]:
    keys = ("hostname", "subject", "start", "end", "severity", *extra)
    return sorted(({k: p[k] for k in keys} for p in pages), key=lambda p: p["start"])


# ---------------------------------------------------------------- the tests

@pytest.fixture(scope="module")
def hour(spark, tmp_path_factory) -> tuple[Path, Path]:
    """The lake of the hour and an operator config naming it (local[2]: this process's)."""
    where = tmp_path_factory.mktemp("backtest")
    lake = make_lake(spark, where)
    config = where / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {lake}\n"
                      f"  master: local[2]\n")
    return lake, config


def test_the_policy_tried_pages_exactly_these(hour, tmp_path):
    """Three attempts and a parent instead of production's first result: the pages of the
    hour after its first 5 minutes (the warm-up), those added (the silence production had
    is not in the lake) and those avoided, each with its reason."""
    lake, config = hour
    began = time.monotonic()
    code, out, err = backtest("--config", str(config), "--rules",
                              str(policy_file(tmp_path, TRIED)), "--since", str(BASE + 300),
                              "--until", str(BASE + SPAN), "--warmup", "5m", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["since"] == iso(300) and doc["until"] == iso(SPAN)
    assert picked(doc["pages"]) == picked(PAGES)
    assert picked(doc["real"]) == picked(REAL)
    assert picked(doc["added"], "then", "held") == picked(ADDED, "then", "held")
    assert picked(doc["avoided"], "by", "held") == picked(AVOIDED, "by", "held")
    summary = {(r["subject"], r["hostname"]): (r["pages"], r["real"], r["added"],
                                               r["avoided"]) for r in doc["summary"]}
    assert summary[("load", "web-1")] == (1, 1, 0, 0)
    assert summary[("load", "web-2")] == (0, 1, 0, 1)
    assert summary[("http", "web-1")] == (0, 1, 0, 1)
    assert summary[("backup", "db-1")] == (1, 0, 1, 0)
    counts = doc["counts"]
    assert counts["messages"] == counts["HELLO"] + counts["REGISTER"] + counts["HEARTBEAT"] \
        + counts["RESULT"] + counts["NOTIFY"] + counts.get("STATS", 0)
    assert counts["RESULT"] == 6 * 60 and counts["NOTIFY"] == 1
    assert counts["downtime_windows"] == 1
    # (a step's heartbeats of one agent are folded into its last: one here, each 10 s)
    assert counts["HEARTBEAT"] == 3 * 360 - 10
    assert "backtest: replaying from" in err
    assert 0 < doc["seconds"]["evaluation"] < doc["seconds"]["total"] < time.monotonic() - began
    # the warm-up replays from BASE: the first result's page would begin before since
    assert doc["pages"][0]["start"] >= iso(300)


def test_the_production_policy_pages_what_production_paged(spark, hour):
    """Replayed through production's own policy, the backtest pages what production paged,
    each page beginning and ending at the same moment, but for the one a silence muted
    (the lake keeps no silences): the text report says so."""
    from fleetwatch.cli.rules import render
    from fleetwatch.lake.backtest import Backtest
    from fleetwatch.lake.query import History
    lake, _ = hour
    report = Backtest(History(spark, str(lake)), build(AlertingConfig, PRODUCTION), warmup=0,
                      out=lambda line: None).run(BASE, BASE + SPAN)
    assert len(report.diff.real) == len(REAL)
    for real in report.diff.real:
        assert real.match is not None, real
        assert (real.match.start, real.match.end) == (real.start, real.end), real
    assert [p.subject for p, _ in report.diff.added] == ["backup"]

    lines = render(report, "sink-alerting.yaml").splitlines()
    assert lines[0] == (f"backtest of sink-alerting.yaml from {iso(0)} to {iso(SPAN)} (0s of "
                        f"warm-up before, 5s steps)")
    assert lines[lines.index("added (the policy tried pages, nothing paged in reality):")
                 + 1] == f"  {iso(3001.01)}  db-1  backup  critical  for 3m  (then muted by " \
                         f"silence 1)"
    assert not any(line.startswith("avoided") for line in lines)
    assert lines[1:lines.index("")] == [
        "SUBJECT  HOSTNAME  PAGES  FIRST                    PAGED  REAL  ADDED  AVOIDED",
        "backup   db-1      1      2026-11-18 00:50:01 UTC  3m     0     1      0",
        "disk     web-2     1      2026-11-18 00:30:01 UTC  9m59s  1     0      0",
        "host     db-1      1      2026-11-18 00:30:25 UTC  1m15s  1     0      0",
        "http     web-1     1      2026-11-18 00:41:01 UTC  4m     1     0      0",
        "load     web-1     1      2026-11-18 00:10:01 UTC  5m     1     0      0",
        "load     web-2     1      2026-11-18 00:20:01 UTC  1m     1     0      0",
        "mysql    db-1      1      2026-11-18 00:40:01 UTC  5m     1     0      0",
        "notify   web-1     1      2026-11-18 00:25:02 UTC  -      1     0      0"]
    assert lines[-1].startswith(f"{report.counts['messages']} messages replayed (720 ticks) in ")


def test_bad_times_and_configs_are_one_line(hour, tmp_path):
    lake, config = hour
    code, out, err = backtest("--config", str(config), "--since", "yesterday")
    assert code == 2 and err.startswith("fleetwatch rules backtest: expected a time")
    code, out, err = backtest("--config", str(config), "--since", str(BASE + 10),
                              "--until", str(BASE))
    assert (code, err) == (2, "fleetwatch rules backtest: --until: expected a time after "
                              "--since\n")
    code, out, err = backtest("--config", str(config), "--rules", str(tmp_path / "none.yaml"),
                              "--since", str(BASE))
    assert (code, err) == (78, f"fleetwatch rules backtest: {tmp_path}/none.yaml: no such "
                               f"file (--rules PATH: the policy to try, a config with an "
                               f"alerting: section)\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("alerting:\n  max_check_attempts: 0\n")
    from fleetwatch.config import ConfigError
    with pytest.raises(ConfigError, match="alerting.max_check_attempts"):
        backtest("--config", str(config), "--rules", str(bad), "--since", str(BASE))
    typo = policy_file(tmp_path, {})
    typo.write_text(typo.read_text().replace("avg(", "avgg("))
    with pytest.raises(ConfigError, match=r"alerting.rules\[0\].expr: rule disk_high: column "
                                          r"1: unknown function 'avgg'"):
        backtest("--config", str(config), "--rules", str(typo), "--since", str(BASE))


def test_slices_replay_what_one_sort_replays(spark, hour):
    """A range read in many slices (a few hundred rows each here, two million by default)
    replays the same messages in the same order as one slice: the same pages, the same
    counts; the slices cover the range in order, whole steps each."""
    from fleetwatch.lake.backtest import Backtest, plan
    from fleetwatch.lake.query import History
    lake, _ = hour
    history = History(spark, str(lake))
    slices = plan(history, BASE, BASE + SPAN, TICK, stats=True, slice_rows=500)
    assert len(slices) >= 4
    assert all(a.end == b.start for a, b in zip(slices, slices[1:]))
    assert all(s.start % TICK == 0 and s.dates == ("2026-11-18",) for s in slices)
    assert sum(s.rows for s in slices) == len(messages())      # (a metric a STATS here)
    reports = [Backtest(history, build(AlertingConfig, {**TRIED, "rules": [RULE]}), warmup=0,
                        slice_rows=n, out=lambda line: None).run(BASE, BASE + SPAN).to_json()
               for n in (500, 10**9)]
    assert [r["counts"].pop("slices") for r in reports] == [len(slices), 1]
    for r in reports:       # (and the state database's checkpoints, paced by the wall clock)
        del r["seconds"], r["counts"]["checkpoints"]
    assert reports[0] == reports[1]


def test_agents_registered_before_the_range_keep_their_names(spark, hour):
    """A backtest of the hour's second half: the agents said HELLO in its first second, long
    before; their last HELLO and REGISTER are replayed first, so the pages name their hosts
    as production's do. (Without a warm-up, db-1's silence from the range's first second is
    no page: its heartbeats before the range are not replayed.)"""
    from fleetwatch.lake.backtest import Backtest
    from fleetwatch.lake.query import History
    lake, _ = hour
    report = Backtest(History(spark, str(lake)), build(AlertingConfig, PRODUCTION), warmup=0,
                      out=lambda line: None).run(BASE + 1800, BASE + SPAN)
    assert report.counts["registered_before"] == 6
    assert sorted((p.hostname, p.subject) for p in report.diff.backtest) == [
        ("db-1", "backup"), ("db-1", "mysql"), ("web-1", "http"), ("web-2", "disk")]
