"""The alerting sink's CPU per NOTIFY, in process, at fixed batch sizes.

bench/notify_rtt.py times the whole round trip, but its batches grow with the machine's
load (a sink behind takes more per transaction), so its CPU per NOTIFY moves with the
load too. Here :meth:`sinks.alerting.sink.AlertingSink.write` gets batches of exactly 1,
10 and 100 NOTIFYs (a SQLite state database in a temporary directory, WAL, the commit
fsynced as in production); CPU time (``time.process_time``) per NOTIFY, median of the
rounds. Fair on a loaded machine, unlike the latencies.

    .venv/bin/python bench/notify_cpu.py [--notifies 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fleetwatch import protocol  # noqa: E402
from fleetwatch.protocol import Relayed  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402
from fleetwatch.store import db  # noqa: E402

UUID = "a1" * 16


def cpu_per_notify(batch: int, count: int) -> float:
    """CPU seconds per NOTIFY written in batches of ``batch`` (``count`` in all)."""
    with tempfile.TemporaryDirectory(prefix="fw-notify-cpu-") as tmp:
        sink = AlertingSink(db.engine(f"sqlite:///{tmp}/state.db"), deliver=False)
        sink.start()
        try:
            batches = [[Relayed(UUID, "r1", protocol.make(
                "NOTIFY", UUID, severity="error", text=f"bench {i:06d} " + "x" * 80))
                for i in range(start, start + batch)] for start in range(0, count, batch)]
            sink.write(batches.pop())           # warm: tables, caches, statements
            t0 = time.process_time()
            for b in batches:
                sink.write(b)
            return (time.process_time() - t0) / (len(batches) * batch)
        finally:
            sink.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--notifies", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    for batch in (1, 10, 100):
        runs = [cpu_per_notify(batch, args.notifies) for _ in range(args.rounds)]
        print(f"batches of {batch:3d}: {statistics.median(runs) * 1e6:6.0f} us CPU per NOTIFY "
              f"(rounds {', '.join(f'{r * 1e6:.0f}' for r in runs)})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
