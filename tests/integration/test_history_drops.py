"""Gaps accounted for: the ``drops`` routers report in their own STATS reach the ``drops``
table once (good entries), bad entries are counted and skipped without costing the STATS;
``History.drops``, ``History.gaps``, ``fleetwatch history gaps`` and the ``drops`` view of
``history sql`` read them, and ``expire`` drops their old partitions. They name an agent
by its HELLO or, when the lake missed that, its own REGISTER.

Real PySpark (the session-scoped ``spark`` fixture of tests/conftest.py); compaction on tiny
landing files, the queries on the generated lake of tests/support/lakegen.py.
"""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(240)

from fleetwatch import cli  # noqa: E402
from fleetwatch.lake import synth  # noqa: E402
from fleetwatch.lake.settings import HistorySettings  # noqa: E402
from fleetwatch.lake.query import History  # noqa: E402
from support.lakegen import DAY, ROUTER  # noqa: E402

T = 1_795_000_000.0
AGENT = "u-web1"
#: a good entry: every case below is it with one thing changed
G = {"uuid": AGENT, "type": "HEARTBEAT", "sink": "history", "count": 17, "first": T,
     "last": T + 9.87}

#: (entry, is it one): each a position of one router STATS's drops
CASES = [
    (G, True),
    ({**G, "first": T + 5, "last": T + 5}, True),                   # first == last
    ({**G, "first": int(T), "last": int(T) + 5}, True),             # integers
    ({**G, "first": 1.795e9, "last": 1.7950001e9}, True),           # exponents
    ({**G, "type": "DEREGISTER", "sink": "my-sink_2", "count": 1}, True),
    ({**G, "count": "17"}, False),                                  # a string, not a number
    ({**G, "count": 17.0}, False),                                  # not an integer
    ({**G, "count": True}, False),
    ({**G, "count": 0}, False),
    ({**G, "count": -3}, False),
    ({**G, "count": 2 ** 70}, False),                               # past a bigint
    ({**G, "uuid": 5}, False),
    ({**G, "uuid": ""}, False),
    ({**G, "uuid": "web 1"}, False),                                # not an id
    ({**G, "uuid": "u-web1\n"}, False),
    ({**G, "uuid": "x" * 65}, False),
    ({**G, "type": "PEERS"}, False),                                # no agent's type
    ({**G, "type": "heartbeat"}, False),
    ({**G, "sink": None}, False),
    ({**G, "sink": "\x1b[2J"}, False),
    ({**G, "first": T + 10, "last": T}, False),                     # first after last
    ({**G, "first": str(T)}, False),
    ({**G, "last": 1e15}, False),                                   # past year 9999
    ({**G, "first": -1}, False),
    ({**G, "extra": 1}, True),                                      # more: ignored (SPEC 4)
    ({k: v for k, v in G.items() if k != "sink"}, False),           # one missing
    ([G], False),
    (json.dumps(G), False),                                         # its JSON as a string
    (None, False),
    (5, False),
]
#: how many bad entries each of these ``drops`` is (or none: no entries at all)
NOT_LISTS = [("oops", 1), ({"uuid": AGENT}, 1), (5, 1), ([], 0)]


def line(kind: str, uuid: str, ts: float, **body) -> str:
    """A landing line of ``kind`` from ``uuid`` (stamped so, relayed by ROUTER)."""
    return json.dumps({"type": kind, "uuid": uuid, "router": ROUTER, "received": ts + 0.01,
                       "msg": {"msg_id": f"{kind}-{uuid}-{ts}", "uuid": uuid, "ts": ts,
                               **body}}) + "\n"


def hello(uuid: str, hostname: str, ts: float) -> str:
    return line("HELLO", uuid, ts, hostname=hostname, heartbeat=2.0)


def rows_of(df, *cols):
    return [tuple(r[c] for c in cols) for r in df.collect()]


def landing(lake: Path) -> dict:
    """Router STATS holding every case, and the same STATS again (resent through another
    sink, received later), lists that are not lists, a ``drops`` with a key given twice (no
    JSON text Spark's variant takes), one past the 1,000th entry, drops in STATS that are not
    a router's own; a HELLO naming the agent. Returns what compaction must count."""
    (lake / "landing").mkdir(parents=True)
    cases = synth.router_stats(ROUTER, "s-cases", T + 20, [entry for entry, _ in CASES])
    lines = [hello(AGENT, "web1", T - 60), cases]
    lines += [synth.router_stats(ROUTER, f"s-not-{i}", T + 30, drops)
              for i, (drops, _) in enumerate(NOT_LISTS)]
    lines.append(synth.router_stats(ROUTER, "s-twice", T + 40, [G]).replace(
        '"sink":"history","count"', '"sink":"history","sink":"graphite","count"'))
    assert '"sink":"graphite"' in lines[-1]
    lines.append(synth.router_stats(ROUTER, "s-many", T + 50, [G] * 1001))
    lines.append(synth.router_stats(ROUTER, "s-agent", T + 60, [G], source="agent"))
    forged = synth.router_stats(AGENT, "s-forged", T + 70, [G]).replace(
        f'"router":"{AGENT}"', f'"router":"{ROUTER}"')
    lines.append(forged)                            # an agent's STATS: stamped with its uuid
    (lake / "landing" / "20000101T000000-h-0.jsonl").write_text("".join(lines))
    (lake / "landing" / "20000101T000001-h-1.jsonl").write_text(
        cases.replace(f'"received":{T + 20.01:.3f}', f'"received":{T + 80:.3f}'))
    good = [i for i, (_, ok) in enumerate(CASES) if ok]
    bad = (len(CASES) - len(good)) * 2 + sum(n for _, n in NOT_LISTS) + 1 + 1 + 1 + 1
    return {"good": good, "bad": bad, "stats": 1 + len(NOT_LISTS) + 4}


def test_compaction_keeps_good_entries_once_and_counts_the_bad(spark, tmp_path):
    from fleetwatch.lake.compact import compact
    lake = tmp_path / "lake"
    want = landing(lake)
    progress = []
    summary = compact(spark, HistorySettings(lake=str(lake)), out=progress.append)

    assert summary.bad == 0 and summary.bad_drops == want["bad"]
    read = next(line for line in progress if line.startswith("read: "))
    assert f"(0 bad lines, {want['bad']} bad drop entries, 1 msg_ids on several lines)" in read
    assert f"{want['bad']} bad drop entries, 2 duplicates dropped)" in progress[-1]
    settled = json.loads(next((lake / "_compaction" / "manifest" / "settled").iterdir())
                         .read_text())
    assert settled["counts"]["bad_drops"] == want["bad"]
    stored = spark.read.parquet(str(lake / "tables" / "drops"))
    rows = {(r["msg_id"], r["position"]): r for r in stored.collect()}
    assert sorted(rows) == [("s-cases", i) for i in want["good"]] + \
        [("s-many", i) for i in range(1000)]
    first = rows[("s-cases", 0)]
    assert (first["uuid"], first["type"], first["sink"], first["count"], first["router"]) == \
        (AGENT, "HEARTBEAT", "history", 17, ROUTER)
    assert (first["first"].timestamp(), first["last"].timestamp(), first["reported"].timestamp()
            ) == pytest.approx((T, T + 9.87, T + 20))
    assert rows[("s-cases", 4)]["sink"] == "my-sink_2"
    assert first["date"] == datetime.fromtimestamp(T + 9.87, timezone.utc).strftime("%Y-%m-%d")
    assert summary.tables["drops"].rows == len(rows)
    # the STATS carrying bad drops landed as ever (each has one metric)
    metrics = spark.read.parquet(str(lake / "tables" / "metrics"))
    assert metrics.select("msg_id").distinct().count() == want["stats"]

    # the queries name the agent by its HELLO
    h = History(spark, str(lake))
    got = h.drops(host="web1").collect()
    assert len(got) == len(rows) and {(r["hostname"], r["uuid"]) for r in got} == \
        {("web1", AGENT)}
    assert h.sql("SELECT count(*) AS n FROM drops WHERE hostname = 'web1'").first()["n"] == \
        len(rows)

    # the same lines again (a file put back): nothing new
    shutil.copy(sorted((lake / "landing" / "done").iterdir())[0],
                lake / "landing" / "20000101T000002-again-0.jsonl")
    again = compact(spark, HistorySettings(lake=str(lake)), out=lambda line: None)
    assert again.tables["drops"].rows == 0 and again.tables["drops"].duplicates > 0
    assert spark.read.parquet(str(lake / "tables" / "drops")).count() == len(rows)


def test_a_host_whose_hello_never_landed_is_named_by_its_register(spark, tmp_path, capsys):
    """The history sink missed db9's HELLO (it connected after the agent); the agent's own
    REGISTER, durable for history, landed: compaction, the queries, the drops view and
    ``history gaps db9`` all know the host. A local process's REGISTER under the same uuid,
    later and saying another hostname, names nothing, nor does one under a uuid no agent
    REGISTER or HELLO named, nor a STATS's claim."""
    from fleetwatch.lake.compact import compact
    lake = tmp_path / "lake"
    (lake / "landing").mkdir(parents=True)
    local = {"name": "backup", "plugins": []}
    lines = [line("REGISTER", "u-db9", T - 60, name="agent", hostname="db9", version="1.0",
                  plugins=[]),
             line("REGISTER", "u-db9", T - 30, hostname="evil", **local),
             line("REGISTER", "u-lone", T - 30, hostname="lonely", **local),
             line("STATS", "u-db9", T + 5, hostname="liar", metrics={"cpu.user": 3.0}),
             line("STATS", "u-lone", T + 5, hostname="lonely", metrics={"cpu.user": 4.0})]
    lines += [line("HEARTBEAT", "u-db9", T + i * 2.0, interval=2.0) for i in range(5)]
    lines.append(synth.router_stats(ROUTER, "s-db9", T + 60, [
        {**G, "uuid": "u-db9", "count": 3, "first": T + 10, "last": T + 20},
        {**G, "uuid": "u-lone", "count": 2, "first": T + 10, "last": T + 20}]))
    (lake / "landing" / "20000101T000000-h-0.jsonl").write_text("".join(lines))
    summary = compact(spark, HistorySettings(lake=str(lake)), out=lambda text: None)
    assert summary.bad == 0 and summary.tables["registrations"].rows == 3

    h = History(spark, str(lake))
    assert sorted(rows_of(h.hosts(), "uuid", "hostname")) == [("u-db9", "db9"),
                                                             ("u-lone", None)]
    assert h.uuids("db9") == ["u-db9"]
    assert h.uuids("evil") == ["evil"] and h.uuids("lonely") == ["lonely"]
    named = rows_of(h.metrics, "uuid", "hostname", "claimed_hostname")
    assert sorted(row for row in named if row[0] != ROUTER) == [
        ("u-db9", "db9", "liar"), ("u-lone", None, "lonely")]
    assert rows_of(h.metric("db9", "cpu.user", bucket="1h"), "count", "avg") == [(1, 3.0)]
    assert h.metric("evil", "cpu.user").count() == 0
    assert rows_of(h.drops(), "uuid", "hostname", "count") == [("u-db9", "db9", 3),
                                                              ("u-lone", None, 2)]
    assert rows_of(h.sql("SELECT hostname, count FROM drops WHERE hostname IS NOT NULL"),
                   "hostname", "count") == [("db9", 3)]
    hour = T - T % 3600                                   # buckets are aligned to the epoch
    (bucket,) = h.gaps("db9", hour, hour + 3600, "1h").collect()
    assert (bucket["heartbeats"], bucket["stats"], bucket["dropped"], bucket["verdict"]) == \
        (5, 1, 3.0, "dropped")

    config = tmp_path / "fleetwatch.yaml"
    config.write_text(f"routers: [tcp://127.0.0.1:5556]\nhistory:\n  lake: {lake}\n"
                      f"  master: local[2]\n")
    argv = ["history", "gaps", "--config", str(config), "--since", str(hour), "--until",
            str(hour + 3600), "--json"]
    assert cli.main(argv[:4] + ["db9"] + argv[4:]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert (doc["uuids"], err) == (["u-db9"], "")
    assert [(b["heartbeats"], b["dropped"]) for b in doc["buckets"]] == [(5, 3.0)]
    assert cli.main(argv[:4] + ["evil"] + argv[4:]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["uuids"] == ["evil"]
    assert err == ("fleetwatch history gaps: no HELLO or agent REGISTER in the lake names "
                   "evil and no agent has that uuid: taken as a uuid\n")


# ---------------------------------------------------------------- queries (generated lake)

@pytest.fixture(scope="module")
def h(spark, history_lake):
    return History(spark, str(history_lake.path))


def at(lake, offset: float) -> datetime:
    """A timestamp as PySpark's collect() gives it back (naive, local time)."""
    return datetime.fromtimestamp(lake.at(offset))


def test_drops_overlapping_a_window(h, history_lake):
    lake = history_lake
    assert [(r["hostname"], r["type"], r["sink"], r["count"]) for r in h.drops().collect()] == [
        ("web1", "STATS", "graphite", 2), ("web1", "HEARTBEAT", "history", 11),
        ("db1", "STATS", "graphite", 4)]
    web1 = h.drops("web1", since=lake.at(11 * 3600), until=lake.at(DAY)).collect()
    assert [(r["type"], r["first"], r["last"], r["router"]) for r in web1] == [
        ("HEARTBEAT", at(lake, 36600), at(lake, 42600), ROUTER)]
    # an entry with first == last is in a window that holds that instant, not one ending there
    assert h.drops("u-web1", since=lake.at(3000), until=lake.at(3001)).count() == 1
    assert h.drops("u-web1", since=lake.at(2000), until=lake.at(3000)).count() == 0
    # db1's entry ends on D1 (its partition) but started on D0
    assert [r["count"] for r in h.drops("db1", since=lake.at(DAY - 60),
                                        until=lake.at(DAY - 30)).collect()] == [4]
    assert [r["type"] for r in h.drops(sink="history").collect()] == ["HEARTBEAT"]
    assert h.drops(sink=["history", "graphite"]).count() == 3


def test_gaps_says_no_data_or_dropped(h, history_lake):
    lake = history_lake
    web1 = h.gaps("web1", lake.at(0), lake.at(DAY), "1h").collect()
    assert len(web1) == 24
    assert [r["start"] for r in web1[:2]] == [at(lake, 0), at(lake, 3600)]
    first = web1[0]
    assert (first["heartbeats"], first["results"], first["stats"], first["notifications"]) == \
        (7, 6, 40, 1)                   # 6 + the backup process's; 40 STATS of one metric
    assert (first["verdict"], first["dropped"]) == ("dropped", 2.0)
    assert [d.asDict() for d in first["drops"]] == [
        {"type": "STATS", "sink": "graphite", "count": 2.0}]
    # the heartbeat gap: 10:00 has its first heartbeat, 11:00 nothing; 11 drops over both
    assert [(r["heartbeats"], r["dropped"], r["verdict"]) for r in web1[10:13]] == [
        (1, 5.5, "dropped"), (0, 5.5, "dropped"), (6, 0.0, "ok")]
    assert {r["verdict"] for i, r in enumerate(web1) if i not in (0, 10, 11)} == {"ok"}
    # db1 heartbeats from 06:00; 2 of its 4 drops fall before midnight
    db1 = h.gaps("db1", lake.at(0), lake.at(DAY), "6h", sink="graphite").collect()
    assert [(r["heartbeats"], r["dropped"], r["verdict"]) for r in db1] == [
        (0, 0.0, "no data"), (36, 0.0, "ok"), (36, 0.0, "ok"), (36, 2.0, "dropped")]
    # a window from before the host existed starts at its first message (its HELLO at D0
    # 00:00), not with "no data" for the day before (issue 31 item 12); a host first heard
    # of after the window has no bucket in it
    db1 = h.gaps("db1", lake.at(-DAY), lake.at(DAY), "6h", sink="graphite").collect()
    assert [(r["start"], r["verdict"]) for r in db1] == [
        (at(lake, 0), "no data"), (at(lake, 6 * 3600), "ok"), (at(lake, 12 * 3600), "ok"),
        (at(lake, 18 * 3600), "dropped")]
    assert h.gaps("db1", lake.at(-DAY), lake.at(-3600), "1h").collect() == []
    # only what the lake misses: the graphite drops are not counted
    assert {r["verdict"] for r in h.gaps("db1", lake.at(DAY - 3600), lake.at(DAY), "1h",
                                         sink="history").collect()} == {"ok"}
    with pytest.raises(ValueError, match="at most 10000"):
        h.gaps("web1", lake.at(0), lake.at(DAY), "1s")


# ---------------------------------------------------------------- the command

def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def test_gaps_command_json_and_table(spark, history_config, history_lake, capsys):
    lake = history_lake
    argv = ["history", "gaps", "--config", history_config, "web1", "--since",
            iso(lake.at(9 * 3600)), "--until", iso(lake.at(13 * 3600))]
    assert cli.main(argv + ["--json"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)
    assert (doc["host"], doc["uuids"], doc["every"], doc["sink"]) == ("web1", ["u-web1"],
                                                                      3600.0, None)
    assert (doc["since"], doc["until"]) == (iso(lake.at(9 * 3600)), iso(lake.at(13 * 3600)))
    assert [(b["start"], b["heartbeats"], b["dropped"], b["verdict"]) for b in doc["buckets"]] \
        == [(iso(lake.at(9 * 3600)), 6, 0.0, "ok"), (iso(lake.at(10 * 3600)), 1, 5.5, "dropped"),
            (iso(lake.at(11 * 3600)), 0, 5.5, "dropped"), (iso(lake.at(12 * 3600)), 6, 0.0, "ok")]
    assert doc["buckets"][1]["drops"] == [{"type": "HEARTBEAT", "sink": "history",
                                           "count": 5.5}]
    assert err == ""

    argv = ["history", "gaps", "--config", history_config, "web1", "--since",
            str(lake.at(10 * 3600)), "--until", str(lake.at(14 * 3600)), "--every", "2h"]
    assert cli.main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "web1: 2 buckets of 2h"
    assert lines[1].split() == ["START", "END", "VERDICT", "HEARTBEATS", "RESULTS", "STATS",
                                "NOTIFICATIONS", "DROPPED", "DROPS"]
    assert lines[2].split()[6:] == ["dropped", "1", "0", "0", "0", "11", "HEARTBEAT",
                                    "history", "11"]
    assert lines[3].split()[6:] == ["ok", "12", "0", "0", "0", "-", "-"]
    assert lines[2].startswith(datetime.fromtimestamp(lake.at(10 * 3600), timezone.utc)
                               .strftime("%Y-%m-%d %H:%M:%S UTC"))


def test_gaps_command_errors_and_unknown_hosts(spark, history_config, capsys):
    base = ["history", "gaps", "--config", history_config]
    for bad in (["web1", "--since", "yesterday"], ["web1", "--every", "0"],
                ["web1", "--every", "1s", "--since", "30d"],
                ["web1", "--since", "2026-01-02", "--until", "2026-01-01"]):
        assert cli.main(base + bad) == 2, bad
        err = capsys.readouterr().err
        assert err.startswith("fleetwatch history gaps: ") and len(err.splitlines()) == 1
    # a name no HELLO or agent REGISTER gave: every bucket is "no data", and stderr says
    # why; a sender's control characters are never printed
    assert cli.main(base + ["we\x1b[2Jb9", "--since", "2h"]) == 0
    out, err = capsys.readouterr()
    assert "\x1b" not in out + err
    assert out.splitlines()[0] == "we\\x1b[2Jb9: 2 buckets of 1h" or \
        out.splitlines()[0] == "we\\x1b[2Jb9: 3 buckets of 1h"
    assert {line.split()[6] for line in out.splitlines()[2:]} == {"no"}      # "no data"
    assert err == ("fleetwatch history gaps: no HELLO or agent REGISTER in the lake names "
                   "we\\x1b[2Jb9 and no agent has that uuid: taken as a uuid\n")


def test_sql_sees_the_drops_table(spark, history_config, capsys):
    query = ("SELECT hostname, type, sink, count FROM drops "
             "WHERE hostname = 'web1' ORDER BY first")
    assert cli.main(["history", "sql", "--config", history_config, "--json", query]) == 0
    assert json.loads(capsys.readouterr().out) == [
        {"hostname": "web1", "type": "STATS", "sink": "graphite", "count": 2},
        {"hostname": "web1", "type": "HEARTBEAT", "sink": "history", "count": 11}]
