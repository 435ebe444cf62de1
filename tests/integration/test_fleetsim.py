"""bench/fleetsim.py's short run: 400 simulated agents for 30 s against a real router, the
real sinks (graphite into a real carbon-cache when carbon is installed) and a real scheduler.

The figures it prints must add up: what the agents sent is what the routers received, what
the routers received is what they relayed to each sink type plus what they counted as
dropped, what they relayed is what each sink received, every ACK and RUN the routers
forwarded reached an agent, and every NOTIFY was ACKed or is still counted as not ACKed.
Timing is the benchmark's business, not this test's: nothing here asserts a latency or a
CPU figure. The window is 30 s so that every kind of traffic runs in steady state, three
periods of each (STATS every 10 s, RUNs of 10 s checks, NOTIFYs every 10 s). 400 agents
and not the benchmark's thousands: the counts must add up at any size, and the suite is
CPU-bound on 2 cores (docs/development/testing.md), where 1,000 cost about 150 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(420)
AGENTS = 400

FLEETSIM = Path(__file__).parents[2] / "bench" / "fleetsim.py"


@pytest.fixture(scope="module")
def run() -> dict:
    """The run's JSON document; its working directory (a few hundred MB of lake, whisper
    files and logs) is the simulator's own temporary one, removed when it ends."""
    res = subprocess.run(
        [sys.executable, str(FLEETSIM), "--agents", str(AGENTS), "--seconds", "30", "--settle", "5",
         "--check-interval", "10", "--notify-interval", "10", "--json"],
        capture_output=True, text=True, timeout=400)
    if res.returncode == 77:
        pytest.skip(res.stderr.strip())
    assert res.stdout.strip(), f"no output (exit {res.returncode}):\n{res.stderr[-4000:]}"
    return json.loads(res.stdout)


def test_every_strict_count_adds_up(run):
    failed = [c for c in run["checks"] if c["strict"] and not c["ok"]]
    assert not failed, json.dumps(failed, indent=1)
    names = {c["name"] for c in run["checks"] if c["strict"]}
    for type_ in ("HEARTBEAT", "STATS", "NOTIFY", "REGISTER", "RESULT"):
        assert f"{type_}: agents sent = routers received" in names
    assert "sink-alerting: routers relayed = sink received" in names
    assert "sink-registry: routers relayed = sink received" in names
    assert "NOTIFY: spooled = recorded by alerting (none lost, none twice)" in names
    assert "host DOWN alerts while the agents beat (no false DOWN) = 0" in names
    assert "HEARTBEAT: dropped to alerting in the measured window = 0" in names


def test_every_kind_of_traffic_ran(run):
    agents = run["agents"]
    assert sum(a["agents"] for a in agents) == AGENTS and len(agents) == 1
    sent = {t: sum(a["sent"].get(t, 0) for a in agents) for t in
            ("HELLO", "HEARTBEAT", "STATS", "NOTIFY", "REGISTER", "RESULT")}
    assert all(sent.values()), sent
    received = {t: sum(a["received"].get(t, 0) for a in agents) for t in
                ("WELCOME", "HEARTBEAT", "ACK", "RUN")}
    assert all(received.values()), received
    # every agent declared its plugins: the registry ACKed each REGISTER
    assert sum(a["counts"].get("acked.REGISTER", 0) for a in agents) == AGENTS


def test_every_component_is_measured(run):
    usage = run["usage"]
    for name in ("router-1", "sink-registry", "sink-alerting", "sink-history", "scheduler",
                 "agents"):
        assert name in usage, sorted(usage)
        assert usage[name]["rss_end_mib"] > 0
    assert run["routers"]["router-1"]["router.received.HEARTBEAT"] > 0
    assert run["scheduler"].get("sent", 0) > 0
    for sink in ("registry", "alerting", "history"):
        assert run["sinks"][sink].get("received", 0) > 0, sink
