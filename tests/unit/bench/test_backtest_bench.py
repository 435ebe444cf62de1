"""bench/backtest.py: its lake (every host sends every kind, in the bench's mix; a HELLO of
every host first), a policy whose host timeout and rules' staleness outlast the longest gaps
of that mix (a quiet fleet: nothing times out), and a tiny run (``--quick``: 20 hosts, an
half hour, local Spark; marked slow, as it starts a JVM)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT  # noqa: E402
_path = list(sys.path)
sys.path.append(str(ROOT / "bench"))

import backtest  # noqa: E402
sys.path[:] = _path      # backtest.py puts bench/ first: bench/web.py is not web/


def test_every_host_sends_every_kind_and_says_hello_first(tmp_path):
    chunks = list(backtest.land(str(tmp_path), hosts=10, days=1 / 24, period=3.0, files=2,
                                chunk_days=1 / 48))
    assert [(count, landed) for _, count, landed in chunks] == [(10 * 600 + 10, 1800),
                                                               (10 * 600, 3600)]
    kinds: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    first: dict[str, float] = {}
    declared = {}
    for path in sorted(Path(tmp_path, "landing").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            d = json.loads(line)
            kinds[d["uuid"]][d["type"]] += 1
            first[d["uuid"]] = min(first.get(d["uuid"], d["received"]), d["received"])
            if d["type"] in ("HELLO", "REGISTER"):
                declared[d["uuid"]] = [p["name"] for p in d["msg"]["plugins"]]
    assert len(kinds) == 10
    for uuid, seen in kinds.items():
        assert seen["HEARTBEAT"] > 600 and seen["STATS"] > 250 and seen["RESULT"] > 100
        assert seen["HELLO"] >= 1 and len(declared[uuid]) == 1     # its one check
    assert max(first.values()) < backtest.MIDNIGHT + 1.1            # the HELLOs


def test_the_policy_outlasts_the_mixs_longest_gaps():
    period = 3.0
    config = backtest.policy(period)
    assert config.host_timeout > backtest.longest_gap("HEARTBEAT") * period
    # a check is stale past twice its interval (and its 10 s timeout)
    assert 2 * backtest.check_interval(period) >= backtest.longest_gap("RESULT") * period
    assert [r.name for r in config.rules] == ["cpu_high", "disk_full_soon"]
    for rule in backtest.rules(period):
        assert float(rule["stale_after"].rstrip("s")) > backtest.longest_gap("STATS") * period


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_a_quick_run_measures_both_sides():
    pytest.importorskip("pyspark", reason="the history extra is not installed")
    from fleetwatch.lake.spark import JavaMissing, java
    try:
        java()
    except JavaMissing as e:
        pytest.skip(str(e))
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "backtest.py"), "--quick",
                           "--json"], capture_output=True, text=True, timeout=110, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    (base,), (run,) = doc["runs"]["baseline"], doc["runs"]["backtest"]
    assert base["messages"] == run["messages"] > 3500      # 20 hosts, one every 10 s
    assert run["ticks"] == 360 and run["counts"]["rules_rule_evaluated"] > 0
    assert 0 < run["evaluation"] < run["total"]
    f = doc["figures"]
    assert 0 < f["evaluation_share"] < 1 and f["ratio"] > 0
