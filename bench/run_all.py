"""Run the benchmarks in turn (``make bench``); each prints its own figures.

``--latency`` runs only the latency benchmarks, those run before each stop (``make
bench-latency``, docs/development/benchmarks.md). Other arguments go to every benchmark."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCHES = ["relay.py", "notify_rtt.py", "notify_cpu.py", "agent_footprint.py", "scheduler.py",
           "graphite.py", "prometheus.py", "prometheus_flood.py", "alerting.py",
           "history_query.py", "history_warm.py", "history_sink.py", "compaction.py",
           "compaction_cluster.py", "compaction_path.py", "status_scale.py",
           "web.py", "mesh.py", "site.py", "failover.py", "channels.py", "rules.py",
           "backtest.py", "fleetsim.py", "otlp.py", "remote_write.py", "snmp.py",
           "snmp_trap.py"]
#: the latency benchmarks, run before each stop (the cheapest first)
LATENCY = ["notify_cpu.py", "notify_rtt.py", "relay.py", "alerting.py", "failover.py"]


def main() -> int:
    args = sys.argv[1:]
    benches = LATENCY if "--latency" in args else BENCHES
    args = [a for a in args if a != "--latency"]
    status = 0
    for name in benches:
        print(f"==== bench/{name}", flush=True)
        rc = subprocess.call([sys.executable, str(HERE / name), *args])
        status = status or rc
    return status


if __name__ == "__main__":
    sys.exit(main())
