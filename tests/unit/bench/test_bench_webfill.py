"""bench/webfill.py: the fleet bench/web.py measures the console over holds what the brief
says (2 % of checks not OK, 0.5 % of hosts DOWN, parents every 100 hosts, a third of the
problems acknowledged, two deliveries an alert event), the same rows for the same seed, and
the rows fit the state database's tables; bench/webtail.py's tail rate."""

from __future__ import annotations

import sqlite3
import sys

from support import ROOT  # noqa: E402
sys.path.append(str(ROOT / "bench"))   # last: bench/web.py is not web/

import webfill  # noqa: E402
from fleetwatch.store import schema  # noqa: E402
from webtail import tail_rate  # noqa: E402

NOW = 1_800_000_000.0


def test_the_fleet_has_the_briefs_proportions():
    data = webfill.rows(2000, 5, NOW)
    agents, checks = data[schema.agents], data[schema.checks]
    assert len(agents) == 2000 and len(checks) == 10_000
    assert len({a["uuid"] for a in agents}) == 2000 == len(data["uuids"])
    not_ok = sum(1 for c in checks if c["status"] != 0)
    assert 100 <= not_ok <= 300                                   # about 2 %
    down = [h for h in data[schema.host_state] if not h["up"]]
    assert 1 <= len(down) <= 30                                   # about 0.5 %
    assert all(h["deadline"] > NOW + 3600 for h in data[schema.host_state] if h["up"])
    assert agents[0]["parents"] is None and agents[150]["parents"] == ["web00100"]
    problems = data[schema.notified_problems]
    assert len(problems) == len(down) + sum(
        1 for s in data[schema.check_state] if s["status"] and s["hard"])
    assert len(data[schema.acknowledgements]) == (len(problems) + 2) // 3
    events, outbox = data[schema.alert_events], data[schema.outbox]
    assert len(outbox) == 2 * len(events)
    assert {o["event_id"] for o in outbox} == {e["id"] for e in events}
    assert len(data[schema.downtimes]) == 4


def test_the_same_seed_gives_the_same_fleet():
    assert webfill.rows(50, 3, NOW)["uuids"] == webfill.rows(50, 3, NOW)["uuids"]
    assert webfill.rows(50, 3, NOW)[schema.checks] == webfill.rows(50, 3, NOW)[schema.checks]


def test_fill_writes_every_row(tmp_path):
    path = tmp_path / "state.db"
    uuids = webfill.fill(f"sqlite:///{path}", 30, 2, NOW)
    conn = sqlite3.connect(path)
    try:
        assert sorted(r[0] for r in conn.execute("SELECT uuid FROM agents")) == sorted(uuids)
        assert conn.execute("SELECT count(*) FROM check_state").fetchone() == (60,)
        assert conn.execute("SELECT count(*) FROM web_users").fetchone() == (0,)
    finally:
        conn.close()


def test_the_tail_rate_at_ten_thousand_hosts():
    beats, results = tail_rate(10_000, 5)
    assert beats == 1000.0 and round(results, 1) == 833.3
