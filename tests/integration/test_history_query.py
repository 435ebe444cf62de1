"""The history queries, ``fleetwatch history sql`` and ``expire`` against a generated lake
(tests/support/lakegen.py: every expected number below follows from its docstring)."""

import json
import os
from datetime import datetime, timezone

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
# the first test also waits for the shared Spark session and the generated lake
pytestmark = pytest.mark.timeout(240)

from fleetwatch import cli  # noqa: E402
from support.lakegen import DAY, make_lake, midnight_days_ago  # noqa: E402
from fleetwatch.lake.compact import Busy, locked  # noqa: E402
from fleetwatch.lake.expire import cutoff, expire  # noqa: E402
from fleetwatch.lake.manifest import Lake  # noqa: E402
from fleetwatch.lake.query import History  # noqa: E402
from fleetwatch.lake.times import epoch, seconds  # noqa: E402


@pytest.fixture(scope="module")
def lake(history_lake):
    return history_lake


@pytest.fixture(scope="module")
def h(spark, lake):
    return History(spark, str(lake.path))


def utc(t: float) -> datetime:
    """A timestamp as PySpark's collect() gives it back (naive, local time)."""
    return datetime.fromtimestamp(t)


def rows(df, *cols):
    return [tuple(r[c] for c in cols) for r in df.collect()]


# ---------------------------------------------------------------- times

def test_durations_and_times():
    assert seconds("90") == 90 and seconds("5m") == 300 and seconds("400d") == 400 * DAY
    assert seconds("2w") == 14 * DAY and seconds(1.5) == 1.5
    with pytest.raises(ValueError):
        seconds("5 parsecs")
    assert epoch(None) is None and epoch(12) == 12.0 and epoch("1700000000") == 1.7e9
    assert epoch("2026-11-20") == datetime(2026, 11, 20, tzinfo=timezone.utc).timestamp()
    assert epoch("2026-11-20T10:00:00Z") == epoch("2026-11-20T11:00:00+01:00")
    assert epoch(datetime(2026, 11, 20)) == epoch("2026-11-20")
    assert epoch("7d", now=1_000_000.0) == 1_000_000.0 - 7 * DAY
    with pytest.raises(ValueError):
        epoch("yesterday")
    for far in (1e15, "1e15", "1e400", -5, "nan"):   # no date shows them: refused, not a crash
        with pytest.raises(ValueError, match="from 1970 to 9999"):
            epoch(far)


# ---------------------------------------------------------------- tables and hosts

def test_tables_and_hosts(h):
    assert h.metrics.count() == 40 + 10 + 5 + 1 + 1
    assert h.registrations.count() == 4
    # web2's HELLO said web2-old, its later STATS claim web2: the HELLO names it; the router
    # (STATS source router, no HELLO) is no host
    assert sorted(rows(h.hosts(), "uuid", "hostname")) == [
        ("u-db1", "db1"), ("u-web1", "web1"), ("u-web2", "web2-old")]
    assert h.uuids("web1") == ["u-web1"] and h.uuids("u-db1") == ["u-db1"]
    assert h.uuids("nobody") == ["nobody"]


def test_a_host_is_named_by_its_hello_never_by_a_stats_claim(h):
    """u-web2's only HELLO named it web2-old, its STATS claim web2. A
    body's hostname names no host (SECURITY.md: an agent can only send false data about
    itself): no query shows web2, the STATS count for web2-old, the claim stays visible."""
    assert "web2" not in {r["hostname"] for r in h.hosts().collect()}
    assert h.uuids("web2") == ["web2"]                  # no such host: taken as a uuid
    assert h.metric("web2", "cpu.user", bucket="1d").count() == 0
    assert rows(h.metric("web2-old", "cpu.user", bucket="1d"), "count", "avg") == [(10, 50.0)]
    assert "web2" not in {r["hostname"] for r in h.top_hosts("cpu.user").collect()}
    assert rows(h.sql("SELECT DISTINCT hostname, claimed_hostname FROM metrics "
                      "WHERE uuid = 'u-web2'"), "hostname", "claimed_hostname") == [
        ("web2-old", "web2")]


def test_a_row_is_named_by_the_hello_at_or_before_it(spark):
    from fleetwatch.lake.hostnames import bind, latest
    from fleetwatch.lake.schema import TABLES

    def at(t):
        return datetime.fromtimestamp(t, timezone.utc)
    # (ts, uuid, kind, REGISTER name, hostname): a local process's REGISTER (u2) and an
    # empty HELLO (u3) name nothing; the agent's own REGISTER (u4: its HELLO missed) does
    said = [(100, "u1", "HELLO", None, "a"), (150, "u1", "HELLO", None, "a"),
            (200, "u1", "HELLO", None, "b"), (50, "u2", "REGISTER", "backup", "x"),
            (60, "u3", "HELLO", None, ""), (80, "u4", "REGISTER", "agent", "y")]
    registrations = spark.createDataFrame(
        [("d", at(t), uuid, kind, name, hostname, None, None, f"m{t}", "r", None, None)
         for t, uuid, kind, name, hostname in said], TABLES["registrations"])
    claims = spark.createDataFrame([(uuid, at(t), "liar") for uuid, t in (
        ("u1", 50), ("u1", 100), ("u1", 199), ("u1", 200), ("u1", 300), ("u2", 60),
        ("u3", 70), ("u4", 90))], "uuid string, ts timestamp, hostname string")
    got = sorted((r["uuid"], r["ts"].timestamp(), r["hostname"])
                 for r in bind(claims, registrations).collect())
    assert got == [("u1", 50, "a"), ("u1", 100, "a"), ("u1", 199, "a"), ("u1", 200, "b"),
                   ("u1", 300, "b"), ("u2", 60, None), ("u3", 70, None), ("u4", 90, "y")]
    assert rows(latest(registrations), "uuid", "hostname") == [("u1", "b"), ("u4", "y")]



def test_a_later_hello_or_register_takes_over_from_its_ts(spark):
    """HELLOs and the agent's own REGISTERs are one stream of namings per uuid: whichever
    kind comes later with a new name takes over from its ts; consecutive namings with the
    same name are one term; a local process's REGISTER is none, whatever it says."""
    from fleetwatch.lake.hostnames import MAX_HOSTNAME, bind, latest, named, terms
    from fleetwatch.lake.schema import TABLES

    def at(t):
        return datetime.fromtimestamp(t, timezone.utc)
    # (ts, uuid, kind, REGISTER name, hostname)
    said = [(100, "v1", "HELLO", None, "a"), (200, "v1", "REGISTER", "agent", "b"),
            (210, "v1", "HELLO", None, "b"), (250, "v1", "REGISTER", "backup", "x"),
            (300, "v1", "HELLO", None, "c"), (400, "v1", "REGISTER", "agent", "d"),
            # named first by its REGISTER (its HELLO missed), then by a HELLO
            (100, "v2", "REGISTER", "agent", "p"), (200, "v2", "HELLO", None, "q"),
            (100, "v3", "REGISTER", "agent", "h" * 300)]
    registrations = spark.createDataFrame(
        [("d", at(t), uuid, kind, name, hostname, None, None, f"m{uuid}{t}", "r", None,
          None)
         for t, uuid, kind, name, hostname in said], TABLES["registrations"])
    claims = spark.createDataFrame([(uuid, at(t), "liar") for uuid, t in (
        ("v1", 50), ("v1", 199), ("v1", 200), ("v1", 250), ("v1", 299), ("v1", 300),
        ("v1", 399), ("v1", 400), ("v1", 900), ("v2", 50), ("v2", 199), ("v2", 200),
        ("v3", 100))], "uuid string, ts timestamp, hostname string")
    got = sorted((r["uuid"], r["ts"].timestamp(), r["hostname"])
                 for r in bind(claims, registrations).collect())
    assert got == [("v1", 50, "a"), ("v1", 199, "a"), ("v1", 200, "b"), ("v1", 250, "b"),
                   ("v1", 299, "b"), ("v1", 300, "c"), ("v1", 399, "c"), ("v1", 400, "d"),
                   ("v1", 900, "d"), ("v2", 50, "p"), ("v2", 199, "p"), ("v2", 200, "q"),
                   ("v3", 100, "h" * MAX_HOSTNAME)]

    def when(t):
        return None if t is None else t.timestamp()
    v1 = sorted((when(r["start"]) or 0, r["hostname"], when(r["end"]))
                for r in terms(registrations).filter("uuid = 'v1'").collect())
    assert v1 == [(0, "a", 200), (200, "b", 300), (300, "c", 400), (400, "d", None)]
    assert rows(latest(registrations).orderBy("uuid"), "uuid", "hostname") == [
        ("v1", "d"), ("v2", "q"), ("v3", "h" * MAX_HOSTNAME)]
    assert named(registrations, "x").count() == 0
    assert rows(named(registrations, "b"), "uuid") == [("v1",)]

def test_missing_table_is_empty(spark, tmp_path):
    empty = History(spark, str(tmp_path))
    assert empty.results.count() == 0
    assert empty.availability().count() == 0
    assert empty.check_timeline().count() == 0


# ---------------------------------------------------------------- metrics

def test_metric_downsampled(h, lake):
    got = rows(h.metric("web1", "cpu.user", bucket="20m"), "bucket", "count", "avg", "max",
               "p95")
    assert got == [(utc(lake.at(0)), 20, 10.5, 20.0, 19.0),
                   (utc(lake.at(1200)), 20, 105.0, 200.0, 190.0)]
    # by uuid, a window inside the first bucket, 5-minute buckets
    got = rows(h.metric("u-web1", "cpu.user", bucket="5m", since=lake.at(300),
                        until=lake.at(600)), "bucket", "count", "avg", "max", "p95")
    assert got == [(utc(lake.at(300)), 5, 8.0, 10.0, 10.0)]
    assert h.metric("web1", "cpu.user", since=lake.at(DAY)).count() == 0


def test_top_hosts(h, lake):
    assert rows(h.top_hosts("cpu.user", n=2), "hostname", "value", "samples") == [
        ("web1", 57.75, 40), ("web2-old", 50.0, 10)]
    assert rows(h.top_hosts("cpu.user", by="max"), "hostname", "value") == [
        ("web1", 200.0), ("web2-old", 50.0), ("db1", 7.0)]
    assert rows(h.top_hosts("cpu.user", by="p95"), "hostname", "value")[0] == ("web1", 180.0)
    # the first 10 minutes: web2's 50 beats web1's 1..10
    assert rows(h.top_hosts("cpu.user", since=lake.at(0), until=lake.at(600)),
                "hostname", "value") == [("web2-old", 50.0), ("web1", 5.5)]
    assert rows(h.top_hosts("cpu.user", by="last", since=lake.at(DAY)), "hostname",
                "value") == [("db1", 7.0)]
    with pytest.raises(ValueError):
        h.top_hosts("cpu.user", by="median")


# ---------------------------------------------------------------- checks

def test_check_timeline(h, lake):
    end = lake.at(DAY + 600)          # the latest result in the lake
    got = rows(h.check_timeline(), "hostname", "plugin", "state", "start", "end", "seconds")
    assert got == [
        ("db1", "disk", "OK", utc(lake.at(DAY)), utc(end), 600.0),
        ("web1", "load", "OK", utc(lake.at(0)), utc(lake.at(1200)), 1200.0),
        ("web1", "load", "WARNING", utc(lake.at(1200)), utc(lake.at(1800)), 600.0),
        ("web1", "load", "CRITICAL", utc(lake.at(1800)), utc(lake.at(3000)), 1200.0),
        ("web1", "load", "OK", utc(lake.at(3000)), utc(end), DAY + 600 - 3000.0),
        ("web2-old", "http", "CRITICAL", utc(lake.at(100)), utc(end), DAY + 500.0)]
    # a window starting inside WARNING: the state at `since` comes from before it
    got = rows(h.check_timeline("web1", "load", since=lake.at(1500), until=lake.at(2700)),
               "state", "seconds", "output")
    assert got == [("WARNING", 300.0, "LOAD 1"), ("CRITICAL", 900.0, "LOAD 2")]


def test_time_in_state(h, lake):
    got = rows(h.time_in_state(host="web1"), "plugin", "state", "seconds", "percent")
    total = DAY + 600.0
    ok = 1200 + DAY + 600 - 3000.0
    assert [g[:3] for g in got] == [("load", "OK", ok), ("load", "WARNING", 600.0),
                                    ("load", "CRITICAL", 1200.0)]
    assert [g[3] for g in got] == pytest.approx([100 * ok / total, 100 * 600 / total,
                                                 100 * 1200 / total])
    assert rows(h.time_in_state(check="load", since=lake.at(1500), until=lake.at(2700)),
                "state", "seconds", "percent") == [("WARNING", 300.0, 25.0),
                                                   ("CRITICAL", 900.0, 75.0)]


def test_alerts(h, lake):
    got = rows(h.alerts(), "ts", "hostname", "plugin", "from_state", "to_state")
    assert got == [(utc(lake.at(100)), "web2-old", "http", None, "CRITICAL"),
                   (utc(lake.at(1200)), "web1", "load", "OK", "WARNING"),
                   (utc(lake.at(1800)), "web1", "load", "WARNING", "CRITICAL"),
                   (utc(lake.at(3000)), "web1", "load", "CRITICAL", "OK"),
                   (utc(lake.at(DAY + 600)), "db1", "disk", "OK", "UNKNOWN")]
    # from 00:25: the change at 00:30 still knows it came from WARNING
    assert rows(h.alerts("web1", since=lake.at(1500)), "from_state", "to_state") == [
        ("WARNING", "CRITICAL"), ("CRITICAL", "OK")]


# ---------------------------------------------------------------- heartbeats

def test_availability(h, lake):
    d0, d1 = (datetime.fromtimestamp(lake.at(d), timezone.utc).strftime("%Y-%m-%d")
              for d in (0, DAY))
    got = rows(h.availability(), "hostname", "date", "seconds", "up_seconds", "down_seconds")
    last_day = DAY - 600.0             # the window ends at the last heartbeat, D1 23:50
    assert got == [
        ("db1", d0, DAY, DAY - 21600.0, 21600.0),     # first heard at 06:00
        ("db1", d1, last_day, last_day, 0.0),
        ("web1", d0, DAY, DAY - 7200.0, 7200.0),      # silent 10:00 .. 12:00
        ("web1", d1, last_day, last_day, 0.0),
        ("web2-old", d0, DAY, DAY - 600.0, 600.0),        # gone after 23:50
        ("web2-old", d1, last_day, 0.0, last_day)]
    pct = {(r["hostname"], r["date"]): r["uptime_pct"] for r in h.availability().collect()}
    assert pct[("db1", d0)] == 75.0 and pct[("web2-old", d1)] == 0.0
    # web1's downtime (11:00 .. 13:00) covers the second half of its silence
    planned = rows(h.availability(exclude_downtime=True), "hostname", "date", "seconds",
                   "up_seconds", "down_seconds")
    assert planned == [row if row[:2] != ("web1", d0) else ("web1", d0, DAY, DAY - 3600.0,
                                                            3600.0) for row in got]
    assert pct[("web1", d0)] == pytest.approx(100 * (DAY - 7200) / DAY)
    # with a 1 h interval the 2 h gap is within 3 intervals: up
    assert rows(h.availability("web1", interval="1h", until=lake.at(DAY)), "up_seconds") \
        == [(DAY,)]
    # a window of the first 12 hours
    assert rows(h.availability("db1", since=lake.at(0), until=lake.at(43200)),
                "seconds", "up_seconds") == [(43200.0, 43200.0 - 21600)]
    # the local process `backup` (not the agent's heartbeats)
    assert rows(h.availability(process="backup"), "hostname", "seconds", "uptime_pct") == [
        ("web1", 3600.0, 100.0)]


@pytest.mark.parametrize("args,source", [
    ({}, "heartbeat_spans"),
    ({"host": "web1", "interval": "1h", "until": DAY}, "heartbeat_spans"),
    ({"host": "db1", "until": 43200}, "heartbeat_spans"),
    ({"since": 3000, "until": DAY + 3001.5}, "heartbeat_spans"),
    ({"since": 36000}, "heartbeat_spans"),
    ({"process": "backup"}, "heartbeat_spans"),
    ({"since": 100, "until": 105}, "heartbeats"),        # a window under 6 s
    ({"interval": 1.0}, "heartbeats")])                  # 3 x 1 s: under 6 s
def test_availability_from_spans_and_from_heartbeats(spark, h, lake, args, source):
    """The lake's heartbeat_spans give what every heartbeat gives, whichever way the
    query is asked; they are read wherever that is exact."""
    args = {k: lake.at(v) if k in ("since", "until") else v for k, v in args.items()}
    beats = History(spark, str(lake.path), use_spans=False)
    assert h.availability(**args).collect() == beats.availability(**args).collect()
    read = {f.split("/tables/")[1].split("/")[0] for f in h.uptime(**args).inputFiles()}
    assert read == {source}


def reference_uptime(beats, since, until, intervals, interval=None):
    """The availability rule written plainly: {(uuid, day index): (seconds, up seconds)}."""
    out = {}

    def add(uuid, start, end, up):
        for d in range(int(start // DAY), int(-(-end // DAY))):
            part = min(end, (d + 1) * DAY) - max(start, d * DAY)
            if part > 0:
                seconds, ups = out.get((uuid, d), (0.0, 0.0))
                out[uuid, d] = (seconds + part, ups + (part if up else 0.0))
    for uuid in sorted({b[0] for b in beats}):
        mine = sorted((t, interval or (iv if iv and iv > 0 else 2.0))
                      for u, t, iv in beats if u == uuid)
        add(uuid, since, mine[0][0], mine[0][0] - since <= intervals * mine[0][1])
        for (t, eff), (t2, _) in zip(mine, mine[1:] + [(until, None)]):
            add(uuid, t, t2, t2 - t <= intervals * eff)
    return out


def random_beats(seed: int, since: float, until: float) -> list[tuple]:
    """(uuid, t, interval) heartbeats of 6 agents: mixed intervals, duplicates (two
    routers), gaps short, borderline and long, midnight crossings."""
    import random
    rng = random.Random(seed)
    beats = []
    for n in range(6):
        uuid, t = f"u{n}", since + rng.uniform(0, 400)
        iv = rng.choice([None, -1.0, 5.0, 10.0, 30.0])
        while t < until:
            beats.append((uuid, round(t, 3), iv))
            if rng.random() < 0.1:
                beats.append((uuid, round(t, 3), iv))          # the same beat, another router
            if rng.random() < 0.05:
                iv = rng.choice([None, 5.0, 10.0, 30.0])
            eff = iv if iv and iv > 0 else 2.0
            t += rng.choice([eff, eff * 0.5, eff * 3, eff * 3.5, eff * 40, rng.uniform(0, 5000),
                             rng.uniform(0, 6.5)])
    return beats


def beats_frame(spark, beats):
    """Heartbeats as rows of the heartbeats table (the columns the queries read)."""
    from fleetwatch.lake.times import day_of
    rows_ = [(day_of(t), u, None, datetime.fromtimestamp(t, timezone.utc), iv)
             for u, t, iv in beats]
    return spark.createDataFrame(rows_, "date string, uuid string, name string, ts timestamp, "
                                        "interval double")


def by_day(df) -> dict:
    return {(r["uuid"], int(datetime.fromisoformat(r["date"]).replace(
        tzinfo=timezone.utc).timestamp()) // DAY): (r["seconds"], r["up_seconds"])
        for r in df.collect()}


def assert_same(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for key in want:
        assert got[key] == pytest.approx(want[key], abs=1e-6), key


def test_uptime_matches_the_rule_on_random_heartbeats(spark):
    """The bucketed computation against the plain rule."""
    from fleetwatch.lake.availability import uptime
    since, until = 2 * DAY - 5000.0, 4 * DAY + 3000.0
    beats = random_beats(7, since, until)
    df = beats_frame(spark, beats)
    for interval in (None, 20.0):
        want = reference_uptime(beats, since, until, 3.0, interval)
        assert_same(by_day(uptime(spark, df, since, until, interval)), want)


def test_spans_give_the_rule_exactly(spark):
    """heartbeat_spans folded in three batches (as three compactions would, a batch
    overlapping the one before), then cut to windows that start and end inside spans,
    between them and at midnight: the same answer as the plain rule over the heartbeats
    of the window."""
    from fleetwatch.lake.availability import spans_in, tile
    from fleetwatch.lake.spans import GAP, fold, of_heartbeats
    since, until = 2 * DAY - 5000.0, 4 * DAY + 3000.0
    beats = sorted(random_beats(11, since, until), key=lambda b: b[1])
    third = len(beats) // 3
    stored = None
    for batch in (beats[:third + 50], beats[third:2 * third], beats[2 * third - 20:]):
        new = of_heartbeats(beats_frame(spark, batch))
        stored = fold(new if stored is None else new.unionByName(stored)).localCheckpoint()
    # a span is exactly a run of one day's heartbeats less than GAP apart
    for u in sorted({b[0] for b in beats}):
        times = sorted({t for v, t, _ in beats if v == u})
        expected = 1 + sum(1 for a, b in zip(times, times[1:])
                           if b - a >= GAP or int(a // DAY) != int(b // DAY))
        assert stored.filter(f"uuid = '{u}'").count() == expected, u
    windows = [(since, until), (2 * DAY, 3 * DAY), (2 * DAY + 1234.5, 4 * DAY - 77.7),
               (3 * DAY + 100.0, 3 * DAY + 100.0 + GAP)]
    for lo, hi in windows:
        inside = [b for b in beats if lo <= b[1] < hi]
        for interval in (None, 20.0):
            want = reference_uptime(inside, lo, hi, 3.0, interval)
            runs = spans_in(stored, lo, hi, interval).drop("min_eff")
            assert_same(by_day(tile(spark, runs, lo, hi)), want)


# ---------------------------------------------------------------- notifications

def test_notifications(h, lake):
    assert rows(h.notification_history(), "ts", "hostname", "severity", "text") == [
        (utc(lake.at(200)), "web2-old", "info", "deployed"),
        (utc(lake.at(500)), "web1", "warning", "disk filling"),
        (utc(lake.at(DAY + 100)), "db1", "critical", "db down")]
    assert rows(h.notification_history(severity=["critical", "warning"], host="db1"),
                "text") == [("db down",)]
    assert rows(h.notification_history(since=lake.at(300), until=lake.at(DAY)), "text") == [
        ("disk filling",)]
    d0, d1 = (datetime.fromtimestamp(lake.at(d), timezone.utc).strftime("%Y-%m-%d")
              for d in (0, DAY))
    assert rows(h.notification_counts(), "date", "severity", "count") == [
        (d0, "info", 1), (d0, "warning", 1), (d1, "critical", 1)]


# ---------------------------------------------------------------- fleetwatch history sql

def test_history_open_from_operator_config(spark, history_config, lake):
    h = History.open(history_config)
    assert h.lake == str(lake.path) and h.notifications.count() == 3


def test_sql_table_and_json(spark, history_config, capsys):
    query = ("SELECT h.hostname, count(*) AS n, max(m.ts) AS last FROM metrics m "
             "JOIN hosts h USING (uuid) GROUP BY h.hostname ORDER BY h.hostname")
    assert cli.main(["history", "sql", "--config", history_config, query]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["HOSTNAME", "N", "LAST"]
    assert [line.split()[:2] for line in lines[1:]] == [["db1", "5"], ["web1", "41"],
                                                        ["web2-old", "10"]]
    assert lines[1].index(" 5 ") == lines[0].index(" N ")        # aligned columns
    assert cli.main(["history", "sql", "--config", history_config, "--json", query]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data[0]["hostname"] == "db1" and data[0]["n"] == 5
    assert data[0]["last"].endswith("Z")


def test_sql_table_escapes_and_shows_times_with_the_zone(spark, history_config, lake, capsys):
    from fleetwatch.display import human
    query = ("SELECT concat(text, char(27), ']0;t', char(7), char(27), '[2J', char(13), "
             "char(10), 'forged') AS `te\x1bxt`, ts FROM notifications ORDER BY ts LIMIT 1")
    assert cli.main(["history", "sql", "--config", history_config, query]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\r" not in out and len(out.splitlines()) == 2
    assert out.splitlines()[0].split() == ["TE\\x1bXT", "TS"]
    assert out.splitlines()[1].split("  ")[0] == "deployed\\x1b]0;t\\x07\\x1b[2J\\r\\nforged"
    assert out.splitlines()[1].endswith(human(lake.at(200)))
    assert cli.main(["history", "sql", "--config", history_config, "--json", query]) == 0
    assert json.loads(capsys.readouterr().out)[0]["te\x1bxt"] == \
        "deployed\x1b]0;t\x07\x1b[2J\r\nforged"


def test_sql_registers_only_the_views_its_query_names(spark, history_config, capsys):
    """Each view is a few round trips to a warm Spark Connect server (issue 31, 15): a query
    over one table registers that one (its name in any case), and one naming none, none."""
    for view in [t.name for t in spark.catalog.listTables() if t.isTemporary]:
        spark.catalog.dropTempView(view)
    assert cli.main(["history", "sql", "--config", history_config,
                     "SELECT count(*) AS n FROM HeartBeats"]) == 0
    assert capsys.readouterr().out.split()[1] != "0"
    assert {t.name for t in spark.catalog.listTables() if t.isTemporary} == {"heartbeats"}
    assert cli.main(["history", "sql", "--config", history_config,
                     "SELECT h.hostname FROM hosts h LIMIT 1"]) == 0
    assert {t.name for t in spark.catalog.listTables() if t.isTemporary} == {
        "heartbeats", "hosts"}


def test_sql_limit_and_errors(spark, history_config, capsys):
    assert cli.main(["history", "sql", "--config", history_config, "--limit", "2",
                     "SELECT msg_id FROM heartbeats ORDER BY msg_id"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 3 and "first 2 rows" in err
    assert cli.main(["history", "sql", "--config", history_config,
                     "SELECT nope FROM metrics"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fleetwatch history sql: ") and len(err.splitlines()) == 1


# ---------------------------------------------------------------- fleetwatch history expire

def _dates(spark, root, table):
    return sorted({r["date"] for r in History(spark, str(root)).table(table).collect()})


def test_expire(spark, tmp_path, capsys):
    now = midnight_days_ago(0) + 3600.0           # 01:00 today
    lake = make_lake(spark, tmp_path, base=midnight_days_ago(3, now))
    day = [datetime.fromtimestamp(lake.at(d * DAY), timezone.utc).strftime("%Y-%m-%d")
           for d in (-1, 0, 1)]
    assert cutoff(3 * DAY, now) == day[1]
    # dry run: listed, nothing dropped
    listed = expire(str(lake.path), 3 * DAY, dry_run=True, wall=lambda: now)
    assert [(p.table, p.date) for p in listed] == [("registrations", day[0])]
    assert _dates(spark, lake.path, "registrations") == day[:2]
    # the lock: a compaction running means try later
    with locked(Lake(str(lake.path))):
        with pytest.raises(Busy):
            expire(str(lake.path), 3 * DAY, wall=lambda: now)
    dropped = expire(str(lake.path), 2 * DAY, wall=lambda: now)
    assert sorted((p.table, p.date) for p in dropped) == sorted(
        [("registrations", day[0])] + [(t, day[1]) for t in
                                       ("metrics", "heartbeats", "results", "notifications",
                                        "registrations", "heartbeat_spans", "lifecycle",
                                        "drops")])
    assert "dropped 9 partitions older than " + day[2] in capsys.readouterr().out
    for table in ("metrics", "heartbeats", "results", "notifications", "heartbeat_spans",
                  "drops"):
        assert _dates(spark, lake.path, table) == [day[2]]
    assert _dates(spark, lake.path, "registrations") == []
    assert History(spark, str(lake.path)).metrics.count() == 6    # db1's 5 and mem.used
    assert not (lake.path / "_compaction" / "expired").exists()
    with pytest.raises(ValueError):
        expire(str(lake.path), 3600)


def test_expire_cli(tmp_path, capsys):
    root = tmp_path / "lake"
    old = root / "tables" / "metrics" / "date=2001-01-01"
    new = root / "tables" / "metrics" / "date=2999-01-01"
    for d in (old, new):
        d.mkdir(parents=True)
        (d / "part-0.parquet").write_bytes(b"x" * 10)
    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:5556]\nhistory:\n  lake: {root}\n")
    argv = ["history", "expire", "--config", str(config), "--older-than", "400d"]
    assert cli.main(argv + ["--dry-run"]) == 0
    assert "would drop metrics date=2001-01-01 (1 files" in capsys.readouterr().out
    assert old.exists()
    assert cli.main(argv) == 0
    assert not old.exists() and new.exists()
    assert cli.main(argv[:-1] + ["12h"]) == 2
    assert "at least one day" in capsys.readouterr().err
    with locked(Lake(str(root))):
        assert cli.main(argv) == os.EX_TEMPFAIL
