"""An agent's failover: how long a notification sent just after its router dies takes to
reach the alerting sink through the survivor.

Each round starts, on 127.0.0.1, two routers (the agent configured with the first, the
second learned from its WELCOME), an alerting sink on both and an agent with a 0.3 s
heartbeat, as tests/integration/test_fleet_e2e.py does (tests/support/fleet.py). Baseline,
same round: four notifications sent while both routers run, from their send to the sink's
``received_at`` of the last. Then router-1 is SIGKILLed and four sent at once (the agent
takes its live links in turn: some go to the dead router): from the kill to the last
``received_at``. A notification not acknowledged within the agent's resend wait goes out
again through another live link, and the agent gives a silent router up after 3 heartbeat
intervals (agent/links.py): whichever comes first bounds the failover.

    .venv/bin/python bench/failover.py [--rounds 5] [--heartbeat 0.3] [--results bench/RESULTS.md]

Target: the median failover under 3 heartbeats plus 1 s (what test_fleet_e2e asserted by the
wall clock until 2026-12-03, and failed on a loaded machine).
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.append(str(Path(__file__).resolve().parent))   # last: bench/web.py is not web/
from results import write_section  # noqa: E402  (bench/results.py)
from support.fleet import Fleet, intake_path, wait_for, wait_intake  # noqa: E402

HEADING = "## An agent's failover to the surviving router"
#: notifications sent at once: the agent takes its live links in turn, so some of them go to
#: the router just killed and wait for the agent to give it up
BATCH = 4


def received(fleet: Fleet, msg_id: str) -> float | None:
    """When the sink received ``msg_id``, by its own clock (epoch seconds), once recorded
    (the state database's ``received_at``: the alerts' listing rounds it to the second)."""
    rows = fleet.db_rows("SELECT received_at FROM notifications WHERE msg_id = ?", (msg_id,))
    return rows[0][0] if rows else None


def last(fleet: Fleet, msg_ids: list[str]) -> float:
    """When the last of ``msg_ids`` reached the sink (its ``received_at``)."""
    def every():
        times = [received(fleet, m) for m in msg_ids]
        return None not in times and max(times)
    return wait_for(every, 30, interval=0.05, what=f"{len(msg_ids)} notifications recorded")


def one_round(root: Path, heartbeat: float) -> tuple[float, float]:
    """(seconds from a send to the sink with both routers up, seconds from router-1's
    SIGKILL to the sink for a notification sent at once)."""
    from agent.client import Client
    fleet = Fleet(root)
    try:
        r2 = fleet.router("router-2")
        r1 = fleet.router("router-1", peers=[r2["endpoints"]["agents"]])
        fleet.sink("alerting", [r1, r2])
        fleet.agent([r1], heartbeat_interval=heartbeat)
        op = fleet.operator_config([r2])
        wait_intake(intake_path(fleet))
        uuid = wait_for(lambda: (root / "agent-state" / "uuid").exists()
                        and (root / "agent-state" / "uuid").read_text().strip(), 10,
                        what="the agent's uuid")
        wait_for(lambda: any(a["uuid"] == uuid and a["alive"]
                             for a in fleet.status(op)["agents"]),
                 20, interval=0.1, what="the agent attached to router-2")
        with Client(config_path=str(root / "agent.yaml"), timeout=10.0) as fw:
            # (a warm-up: the sink attached to both routers, each route used once)
            last(fleet, [fw.notify(f"warm-up {i}", severity="info") for i in range(BATCH)])
            sent = time.time()
            baseline = last(fleet, [fw.notify(f"both up {i}", severity="info")
                                    for i in range(BATCH)]) - sent
            r1["proc"].signal(signal.SIGKILL)
            killed = time.time()
            failover = last(fleet, [fw.notify(f"is anyone there {i}", severity="critical")
                                    for i in range(BATCH)]) - killed
        return baseline, failover
    finally:
        fleet.stop_all()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--heartbeat", type=float, default=0.3)
    parser.add_argument("--results", help="write the figures into this RESULTS.md")
    args = parser.parse_args(argv)
    baselines, failovers = [], []
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="fw-failover-") as tmp:
            base, fail = one_round(Path(tmp), args.heartbeat)
        baselines.append(base)
        failovers.append(fail)
        print(f"round {i + 1}: both up {base:.3f} s, failover {fail:.3f} s", flush=True)
    base, fail = statistics.median(baselines), statistics.median(failovers)
    target = 3 * args.heartbeat + 1.0
    verdict = "PASS" if fail < target else "FAIL"
    command = (f".venv/bin/python bench/failover.py --rounds {args.rounds} --heartbeat "
               f"{args.heartbeat}")
    body = "\n".join([
        "| what | median | ratio to both up | target | |",
        "|---|---|---|---|---|",
        f"| a notification, both routers up (baseline) | {base:.3f} s | 1.00x | | |",
        f"| a notification sent as router-1 is killed | {fail:.3f} s | {fail / base:.1f}x | "
        f"< {target:.1f} s (3 heartbeats + 1 s) | {verdict} |"])
    notes = (f"Medians of {args.rounds} rounds, each a fleet of its own (two routers, an "
             f"alerting sink, an agent with a {args.heartbeat} s heartbeat); times by the "
             f"sink's received_at. The agent gives a router up after 3 silent intervals.")
    print(body)
    if args.results:
        write_section(Path(args.results), HEADING, command, body, notes)
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    sys.exit(main())
