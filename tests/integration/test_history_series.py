"""Labelled series (a STATS's ``series``, SPEC 4.7) in the history lake: a real history sink
behind a real router lands them as sent, compaction (local Spark) makes a ``metrics`` row of
each good entry with its ``labels`` and ``kind`` and skips the malformed, partitions written
before the columns read null and merge, the queries pick a label set, a STATS rebuilt from
the table carries its ``series`` again, and replay names them as the graphite sink does, into
a real carbon-cache.

The Spark tests share the session-scoped ``spark`` fixture (tests/conftest.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(240)

from fleetwatch import protocol  # noqa: E402
from fleetwatch.lake import bodies  # noqa: E402
from fleetwatch.lake.query import History  # noqa: E402
from fleetwatch.lake.settings import HistorySettings  # noqa: E402
from support.fleet import landed, wait_for  # noqa: E402
from support.graphite import DealerAgent  # noqa: E402

T = 1_795_000_000.0
HOSTILE_KEY = "k\x1b[2J\n"
#: (entry as sent, the row it makes: (metric, value, labels, kind), or None: skipped)
ENTRIES = [
    ({"name": "http.server.requests", "value": 7, "kind": "counter",
      "labels": {"service.name": "shop", "http.route": "/cart"}},
     ("http.server.requests", 7.0, {"service.name": "shop", "http.route": "/cart"}, "counter")),
    ({"name": "http.server.requests", "value": 2, "kind": "counter",
      "labels": {"service.name": "shop", "http.route": "/"}},
     ("http.server.requests", 2.0, {"service.name": "shop", "http.route": "/"}, "counter")),
    ({"name": "http.server.duration_bucket", "value": 5, "kind": "counter",
      "labels": {"le": "+Inf", "empty": ""}},                      # an empty value: no label
     ("http.server.duration_bucket", 5.0, {"le": "+Inf"}, "counter")),
    ({"name": "queue.depth", "value": 1.5}, ("queue.depth", 1.5, {}, "gauge")),
    ({"name": "hostile\x00", "value": 3, "labels": {HOSTILE_KEY: "v\r\n<script>",
                                                    "host": "victim"}},
     ("hostile\x00", 3.0, {HOSTILE_KEY: "v\r\n<script>", "host": "victim"}, "gauge")),
    ({"name": "huge", "value": 4, "labels": {f"k{i:02d}": "v" * 255 for i in range(64)}},
     ("huge", 4.0, {f"k{i:02d}": "v" * 255 for i in range(64)}, "gauge")),
    ({"name": "too.many", "value": 1, "labels": {f"k{i}": "v" for i in range(65)}}, None),
    ({"name": "long.value", "value": 1, "labels": {"k": "v" * 256}}, None),
    ({"name": "number.label", "value": 1, "labels": {"k": 5}}, None),
    ({"name": "text.value", "value": "3"}, None),
    ({"name": "bad.kind", "value": 1, "kind": "histogram"}, None),
    ({"name": "", "value": 1}, None),
    ("junk", None),
]
GOOD = [row for _, row in ENTRIES if row is not None]


def rows_of(df, *cols):
    return [tuple(r[c] for c in cols) for r in df.collect()]


def stored(spark, lake: Path):
    from fleetwatch.lake.schema import TABLES
    return spark.read.schema(TABLES["metrics"]).parquet(str(lake / "tables" / "metrics"))


def test_series_land_compact_query_rebuild_and_replay(fleet, zctx, spark, tmp_path, carbon):
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.replay import Replay, Target
    router = fleet.router()
    lake = tmp_path / "lake"
    sink = fleet.sink("history", [router], history={"lake": str(lake), "rotate_seconds": 0.5})
    wait_for(lambda: "welcomed us" in sink.log(), 15, what="the history sink connected")
    agent = DealerAgent(zctx, router, "web1")
    ts = time.time() - 60
    sent = agent.send("STATS", ts=ts, hostname="web1", metrics={"cpu.percent": 12.5},
                      series=[entry for entry, _ in ENTRIES])
    only = agent.send("STATS", ts=ts + 1, hostname="web1", metrics={}, series=[
        {"name": "queue.depth", "value": 2, "labels": {"q": "mail"}}])
    flat = agent.send("STATS", ts=ts + 2, hostname="web1", metrics={"cpu.percent": 13},
                      series="not a list")
    wanted = {sent.msg_id, only.msg_id, flat.msg_id}
    wait_for(lambda: wanted <= {ln["msg"]["msg_id"] for ln in landed(lake)
                                if ln["type"] == "STATS"}, 30, what="the STATS landed")
    line = next(ln for ln in landed(lake) if ln["msg"]["msg_id"] == sent.msg_id)
    assert line["msg"]["series"] == [entry for entry, _ in ENTRIES]      # kept as sent
    sink.stop()

    summary = compact(spark, HistorySettings(lake=str(lake)), out=lambda text: None)
    assert summary.bad == 0
    df = stored(spark, lake).where(f"uuid = '{agent.uuid}'")
    got = {r["msg_id"]: [] for r in df.collect()}
    for r in df.collect():
        got[r["msg_id"]].append((r["metric"], r["value"], r["labels"], r["kind"]))
    assert sorted(got[sent.msg_id], key=repr) == sorted(
        [("cpu.percent", 12.5, None, None)] + GOOD, key=repr)
    assert got[only.msg_id] == [("queue.depth", 2.0, {"q": "mail"}, "gauge")]
    assert got[flat.msg_id] == [("cpu.percent", 13.0, None, None)]     # its series: no rows

    # the queries: a label set, the flat metric, SQL over the map
    h = History(spark, str(lake))
    shop = {"service.name": "shop", "http.route": "/cart"}
    assert rows_of(h.metric("web1", "http.server.requests", bucket="1h", since=ts - 3600,
                            labels=shop), "count", "avg") == [(1, 7.0)]
    assert rows_of(h.metric("web1", "http.server.requests", bucket="1h", since=ts - 3600),
                   "count", "avg") == [(2, 4.5)]                     # both label sets
    assert rows_of(h.metric("web1", "cpu.percent", bucket="1h", since=ts - 3600),
                   "count") == [(2,)]
    assert rows_of(h.top_hosts("queue.depth", since=ts - 3600, labels={"q": "mail"}),
                   "hostname", "value") == [("web1", 2.0)]
    assert rows_of(h.sql("SELECT value FROM metrics WHERE metric = 'http.server.requests' "
                         "AND labels['http.route'] = '/'"), "value") == [(2.0,)]

    # a STATS rebuilt from the table (tail --since, the backtest) carries its series
    events = {e.msg_id: e for e in bodies.events(
        bodies.since(spark, str(lake), 0, types=["STATS"], uuids=[agent.uuid]))}
    body = events[sent.msg_id].body
    assert body["metrics"] == {"cpu.percent": 12.5}
    assert sorted(((s["name"], s["value"], s["labels"], s["kind"]) for s in body["series"]),
                  key=repr) == sorted(GOOD, key=repr)
    assert "series" not in events[flat.msg_id].body
    assert events[only.msg_id].body["metrics"] == {}

    # replay names a labelled row as the live graphite sink names the series
    target = Target(port=carbon.port, prefix="test")
    counts = Replay(h, target, out=lambda text: None).run(since=ts - 3600)
    assert counts["bad_name"] == 1              # 64 labels of 255: a node past 200
    second = int(ts)
    path = "test.web1.http.server.requests.http_route__cart.service_name_shop"
    wait_for(lambda: carbon.path_of(path).exists(), 15, 0.1, "the replayed series' file")
    from fleetwatch.cli.demo.carbon import read_points
    wait_for(lambda: read_points(carbon.path_of(path)).get(second) == 7.0, 15, 0.1,
             "the replayed point")
    assert carbon.path_of("test.web1.hostile_.exported_host_victim.k_2J__v_script_").exists()
    assert not (carbon.whisper_dir / "test" / "victim").exists()


def test_partitions_written_before_the_columns_read_null_and_merge(spark, tmp_path):
    """A metrics partition compacted before ``labels`` and ``kind`` (its files lack them):
    read with the schema, its rows show null; a run that merges its small files with new
    labelled rows rewrites it with the columns, the old rows null."""
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.schema import COLUMNS
    from pyspark.sql.types import StructField, StructType
    lake = tmp_path / "lake"
    date = time.strftime("%Y-%m-%d", time.gmtime(T))
    old = StructType([StructField(n, t) for n, t, _ in COLUMNS["metrics"]
                      if n not in ("labels", "kind", "date")])
    from datetime import datetime, timezone
    row = (datetime.fromtimestamp(T, timezone.utc), "u-old", "old", None, "load.1", 0.5,
           "m-old", "r1", T, ["r1"])
    (spark.createDataFrame([row], old).coalesce(1).write
     .parquet(str(lake / "tables" / "metrics" / f"date={date}")))
    before = set((lake / "tables" / "metrics" / f"date={date}").glob("*.parquet"))
    assert rows_of(stored(spark, lake), "metric", "labels", "kind") == [("load.1", None, None)]
    h = History(spark, str(lake))
    assert rows_of(h.metric("u-old", "load.1", bucket="1d"), "count") == [(1,)]

    (lake / "landing").mkdir(parents=True)
    (lake / "landing" / "20000101T000000-h-0.jsonl").write_text(json.dumps({
        "type": "STATS", "uuid": "u-new", "router": "r1", "received": T + 1,
        "msg": {"msg_id": "m-new", "uuid": "u-new", "ts": T + 1, "metrics": {},
                "series": [{"name": "q", "value": 2, "labels": {"a": "b"}}]}}) + "\n")
    summary = compact(spark, HistorySettings(lake=str(lake), max_small_files=1),
                      out=lambda text: None)
    assert summary.tables["metrics"].merged == 1
    files = set((lake / "tables" / "metrics" / f"date={date}").glob("*.parquet"))
    assert files and not files & before                     # rewritten with the new rows
    for f in files:
        assert {c.name for c in spark.read.parquet(str(f)).schema.fields} >= {"labels", "kind"}
    assert sorted(rows_of(stored(spark, lake), "msg_id", "labels", "kind")) == [
        ("m-new", {"a": "b"}, "gauge"), ("m-old", None, None)]


def test_ten_thousand_label_sets_of_one_host_land_and_rebuild(spark, tmp_path):
    """The lake records what came (the agent bounds an application, the sinks their
    series): 10,000 label sets in STATS of 2,000 compact to 10,000 rows, and come back as
    five STATS."""
    from fleetwatch.lake.compact import compact
    lake = tmp_path / "lake"
    (lake / "landing").mkdir(parents=True)
    lines = []
    for n in range(5):
        series = [{"name": "flood", "value": i, "kind": "counter",
                   "labels": {"id": str(i), "\x07bell": "\x1b]0;x\x07"}}
                  for i in range(n * 2000, (n + 1) * 2000)]
        body = {"msg_id": f"m{n}", "uuid": "u-flood", "ts": T + n, "metrics": {},
                "series": series}
        assert len(protocol.encode(protocol.make("STATS", "u-flood", **{
            k: v for k, v in body.items() if k not in ("uuid", "ts")}))[-1]) < \
            protocol.MAX_BODY
        lines.append(json.dumps({"type": "STATS", "uuid": "u-flood", "router": "r1",
                                 "received": T + n, "msg": body}) + "\n")
    (lake / "landing" / "20000101T000000-h-0.jsonl").write_text("".join(lines))
    summary = compact(spark, HistorySettings(lake=str(lake)), out=lambda text: None)
    assert summary.tables["metrics"].rows == 10_000
    df = stored(spark, lake)
    assert df.selectExpr("to_json(labels)").distinct().count() == 10_000
    assert df.where("labels['\u0007bell'] = '\u001b]0;x\u0007'").count() == 10_000
    events = list(bodies.events(bodies.since(spark, str(lake), 0, types=["STATS"])))
    assert len(events) == 5 and sum(len(e.body["series"]) for e in events) == 10_000
