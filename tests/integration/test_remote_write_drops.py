"""The lake takes ``drops`` from a sink's own STATS too (SPEC 4.1, 4.7.2: the remote_write
sink's queue), filed under the sink's id, and from nobody else who is not a router: an agent
(straight or behind a site) claiming ``source: "sink"``, or a sink claiming to be a router,
gives bad entries only. Real PySpark on hand-written landing lines (the end-to-end path is
tests/integration/test_remote_write.py)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("pyspark", reason="the history extra is not installed")
pytestmark = pytest.mark.timeout(240)

from fleetwatch.lake.query import History  # noqa: E402
from fleetwatch.lake.settings import HistorySettings  # noqa: E402

T = 1_795_000_000.0
AGENT, ROUTER, SINK, SITE = "u-web1", "router-1", "sink-remote_write", "site-a"
ENTRY = {"uuid": AGENT, "type": "STATS", "sink": "remote_write", "count": 40,
         "first": T + 10, "last": T + 50}


def line(kind: str, uuid: str, ts: float, path: str | None = None, **body) -> str:
    """A landing line of ``kind`` stamped ``uuid`` by ROUTER (``path``: the envelope's, when
    it names more than ROUTER)."""
    hops = {"path": path} if path else {}
    return json.dumps({"type": kind, "uuid": uuid, "router": ROUTER, **hops,
                       "received": ts + 0.01,
                       "msg": {"msg_id": f"{kind}-{uuid}-{ts}", "uuid": uuid, "ts": ts,
                               **body}}) + "\n"


def test_a_sinks_own_drops_land_under_its_id_and_nobody_elses(spark, tmp_path):
    from fleetwatch.lake.compact import compact
    lake = tmp_path / "lake"
    (lake / "landing").mkdir(parents=True)
    stats = {"metrics": {"sink.remote_write.samples_dropped_full": 800.0}}
    lines = [
        line("HELLO", AGENT, T - 60, hostname="web1", heartbeat=2.0),
        line("STATS", AGENT, T + 5, metrics={"cpu.user": 1.0}),
        # the sink's own STATS, from control: STATS/SINK/ROUTER,SINK
        line("STATS", SINK, T + 60, path=f"{ROUTER},{SINK}", source="sink", drops=[ENTRY],
             **stats),
        # a sink saying it is a router (control refuses that source; here as if it had not)
        line("STATS", SINK, T + 61, path=f"{ROUTER},{SINK}", source="router", drops=[ENTRY],
             **stats),
        # an agent saying it is a sink, straight and behind a site
        line("STATS", AGENT, T + 62, source="sink", drops=[ENTRY], **stats),
        line("STATS", AGENT, T + 63, path=f"{ROUTER},{SITE}", source="sink", drops=[ENTRY],
             **stats)]
    (lake / "landing" / "20000101T000000-h-0.jsonl").write_text("".join(lines))
    summary = compact(spark, HistorySettings(lake=str(lake)), out=lambda text: None)
    assert summary.bad == 0 and summary.bad_drops == 3

    h = History(spark, str(lake))
    got = [r.asDict() for r in h.drops().collect()]
    assert [(r["router"], r["uuid"], r["hostname"], r["type"], r["sink"], r["count"])
            for r in got] == [(SINK, AGENT, "web1", "STATS", "remote_write", 40)]
    assert (got[0]["first"].timestamp(), got[0]["last"].timestamp()) == (T + 10, T + 50)
    hour = T - T % 3600
    (bucket,) = h.gaps("web1", hour, hour + 3600, "1h", sink="remote_write").collect()
    # (the agent's three STATS landed, its forged drops not counted)
    assert (bucket["stats"], bucket["dropped"], bucket["verdict"]) == (3, 40.0, "dropped")
