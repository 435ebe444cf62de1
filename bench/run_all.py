"""Run the benchmarks in turn (``make bench``); each prints its own figures."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["relay.py", "notify_rtt.py", "agent_footprint.py", "scheduler.py", "graphite.py",
           "prometheus.py", "prometheus_flood.py", "alerting.py", "history_query.py",
           "history_warm.py", "history_sink.py", "compaction.py", "compaction_cluster.py",
           "compaction_path.py", "status_scale.py",
           "web.py", "mesh.py", "site.py",
           "fleetsim.py"]


def main() -> int:
    status = 0
    for name in BENCHES:
        print(f"==== bench/{name}", flush=True)
        rc = subprocess.call([sys.executable, str(HERE / name), *sys.argv[1:]])
        status = status or rc
    return status


if __name__ == "__main__":
    sys.exit(main())
