"""OTLP intake: data points per second one agent takes from a local OpenTelemetry SDK
exporter, and the agent's CPU per 1,000 points, against the agent's own STATS path (a local
process's STATS through the ipc intake, as many values a message) and the SDK's own export
cost, measured in the same run.

    python bench/otlp.py [--rounds 3] [--seconds 4] [--points 100] [--write]

A fake router (bench/agent_footprint.py's, which counts what it receives) and a real
``fleetwatch agent`` with ``otlp.enabled`` on a free 127.0.0.1 port. Each round has two
phases of ``--seconds``, one after the other, each a sender in this process sending as
fast as the agent answers, one request at a time:

- OTLP: the SDK's ``OTLPMetricExporter`` (protobuf over HTTP, as an application has it)
  exporting a collection of ``--points`` data points (60 % counter points, 20 % histogram
  points with 10 bounds, 20 % gauges), the same collection each time (cumulative);
- intake: ``agent.client.Client.stats`` with ``--points`` values a STATS (the ACK awaited).

Per phase: points per second, the agent's CPU (all its threads, the ended ones too: the
kernel's ticks) per 1,000 points, and the sender's (this process: for OTLP, the SDK's
encoding and its HTTP client). The table gives the medians over the rounds. Needs the
``otlp`` extra and the test extra's opentelemetry-sdk and exporter. ``--write`` puts the
figures under "## OTLP intake" in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from results import wait, write_section  # noqa: E402  (bench/results.py)

from fleetwatch.cli.demo.ports import free_port  # noqa: E402

RESULTS = HERE / "RESULTS.md"
HEADING = "## OTLP intake"


def agent_cpu(pid: int) -> float:
    """CPU seconds of process ``pid``, its threads' (those that ended too: the listener's
    thread per request) included: the kernel's tick counts, 10 ms apart."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def collection(points: int):
    """``points`` data points from the SDK, as its reader collects them: MetricsData."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource.create({"service.name": "bench"}),
                             metric_readers=[reader])
    meter = provider.get_meter("bench")
    counter, gauge = meter.create_counter("bench.requests"), meter.create_gauge("bench.temp")
    hist = meter.create_histogram("bench.latency", unit="s", explicit_bucket_boundaries_advisory=[
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5])
    for i in range(points):
        share = i * 10 // points
        if share < 6:
            counter.add(i, {"route": f"/r{i}"})
        elif share < 8:
            hist.record(i / points, {"route": f"/r{i}"})
        else:
            gauge.set(i, {"room": f"r{i}"})
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def phase(send, seconds: float, pid: int) -> dict:
    """Call ``send()`` (the points it sent) for ``seconds``; rates and CPU."""
    agent0, own0, t0 = agent_cpu(pid), time.process_time(), time.monotonic()
    points = 0
    while time.monotonic() - t0 < seconds:
        points += send()
    elapsed = time.monotonic() - t0
    agent, own = agent_cpu(pid) - agent0, time.process_time() - own0
    return {"rate": points / elapsed, "agent_ms": 1e6 * agent / points,
            "sender_ms": 1e6 * own / points, "points": points}


def measure(rounds: int, seconds: float, points: int) -> dict:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics.export import MetricExportResult

    from agent.client import Client

    tmp = Path(tempfile.mkdtemp(prefix="fw-otlp-"))
    procs: list[subprocess.Popen] = []
    log = open(tmp / "router.log", "w")
    try:
        router = subprocess.Popen([sys.executable, str(HERE / "agent_footprint.py"),
                                   "--fake-router"], stdout=subprocess.PIPE, stderr=log,
                                  text=True)
        procs.append(router)
        port = free_port()
        cfg = {"routers": [router.stdout.readline().strip()], "state_dir": str(tmp / "state"),
               "hostname": "bench", "stats_interval": 10.0, "log_level": "WARNING",
               "otlp": {"enabled": True, "listen": f"127.0.0.1:{port}", "interval": 1.0}}
        (tmp / "agent.yaml").write_text(yaml.safe_dump(cfg))
        agent = subprocess.Popen([sys.executable, "-m", "fleetwatch", "agent", "--config",
                                  str(tmp / "agent.yaml")], cwd=ROOT,
                                 stdout=log, stderr=log)
        procs.append(agent)
        data = collection(points)
        exporter = OTLPMetricExporter(endpoint=f"http://127.0.0.1:{port}/v1/metrics",
                                      timeout=10)
        values = {f"bench.value.{i}": float(i) for i in range(points)}
        client = Client(endpoint=f"ipc://{tmp / 'state' / 'intake.sock'}", timeout=10)
        wait(lambda: exporter.export(data) == MetricExportResult.SUCCESS or
             agent.poll() is not None, 30, "the agent's OTLP listener")

        def otlp() -> int:
            if exporter.export(data) != MetricExportResult.SUCCESS:
                raise SystemExit("an export failed: " + (tmp / "router.log").read_text())
            return points

        def intake() -> int:
            client.stats(values)
            return points
        intake()
        runs = [{"otlp": phase(otlp, seconds, agent.pid),
                 "intake": phase(intake, seconds, agent.pid)} for _ in range(rounds)]
        time.sleep(1.5)         # one more otlp.interval: the last series go out
        client.close()
        exporter.shutdown()
        if agent.poll() is not None:
            raise SystemExit("the agent stopped:\n" + (tmp / "router.log").read_text())
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(10)
        log.close()
    lines = [ln for ln in (tmp / "router.log").read_text().splitlines() if ln.startswith("{")]
    out = {"rounds": runs, "router_saw": lines[-1] if lines else "{}"}
    for path in ("otlp", "intake"):
        out[path] = {k: statistics.median(r[path][k] for r in runs)
                     for k in ("rate", "agent_ms", "sender_ms")}
    return out


def report(r: dict, points: int) -> tuple[str, str]:
    o, i = r["otlp"], r["intake"]

    def row(label, m):
        return (f"| {label} | {m['rate']:,.0f} | {m['agent_ms']:.1f} | "
                f"{m['sender_ms']:.1f} |")
    body = "\n".join([
        "| path | points/s | agent CPU ms per 1,000 points | sender CPU ms per 1,000 points |",
        "|---|---|---|---|",
        row(f"OTLP/HTTP protobuf, the SDK's exporter, {points} points an export", o),
        row(f"the agent's STATS intake (ipc), {points} values a STATS", i),
        f"| ratio OTLP / intake | {o['rate'] / i['rate']:.2f} | "
        f"{o['agent_ms'] / i['agent_ms']:.2f} | {o['sender_ms'] / i['sender_ms']:.2f} |",
        f"| ratio agent / SDK (OTLP) | | {o['agent_ms'] / o['sender_ms']:.2f} | |"])
    notes = (f"Medians of {len(r['rounds'])} rounds; one sender at a time, each request "
             f"answered before the next. The agent sends the OTLP series once a second "
             f"(otlp.interval 1: the latest value of each), the intake's STATS one each. The "
             f"fake router received {r['router_saw']}.")
    return body, notes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are given)")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds of each phase")
    parser.add_argument("--points", type=int, default=100, help="data points a request")
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    args = parser.parse_args()
    command = f"python bench/otlp.py {' '.join(sys.argv[1:])}".strip()
    points = min(max(10, args.points), 250)         # within otlp.max_series (1,000)
    result = measure(max(1, args.rounds), min(args.seconds, 120.0), points)
    body, notes = report(result, points)
    print(f"{command}\n\n{body}\n\n{notes}")
    if args.write:
        write_section(RESULTS, HEADING, command, body, notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
