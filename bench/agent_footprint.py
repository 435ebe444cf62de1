"""Agent footprint: RSS and CPU of a real agent against a fake router, beside a bare Python
process and Prometheus' node_exporter measured in the same run.

    python bench/agent_footprint.py [--seconds 60] [--rounds 3] [--from-source] [--write]

Each round runs ``fleetwatch agent`` (stats_interval 10 s, default heartbeats every 2 s)
against a fake router process (a ROUTER answering HELLO, HEARTBEAT and ACKing NOTIFY and
REGISTER); beside it two agents with the OTLP intake on (``otlp.enabled``), one idle, one
after an export in protobuf and one in JSON (needs the ``otlp`` extra); a baseline, a bare
python that imports zmq, psutil and yaml and sleeps; and
``prometheus-node-exporter`` (Debian's package, installed by ``make system-packages``) on a
127.0.0.1 port, scraped every 10 s as the agent collects (skipped, with a line saying so,
when it is not installed). RSS and CPU of each are sampled every second with psutil; CPU
(all the process's threads) is counted after a warm-up (start-up excluded). The table
gives, per process, the median over the rounds of each round's largest RSS, and the ratios
of those medians.

Python processes run as an installed agent does, from bytecode caches (kept under the run's
temporary directory, filled by a start before the first round that is not measured);
``--from-source`` compiles the project's modules at every start instead (the figures of the
first measurements, taken with PYTHONDONTWRITEBYTECODE set). Targets: agent RSS < 25 MiB,
CPU < 0.5 % of one core. ``--write`` puts the figures under "## Agent footprint" in
bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from results import write_section  # noqa: E402  (bench/results.py)

from fleetwatch.cli.demo.ports import free_port  # noqa: E402

RESULTS = HERE / "RESULTS.md"
HEADING = "## Agent footprint"
RSS_TARGET_MB = 25.0
#: the most the OTLP intake, on and idle, may add to the agent's RSS (issue 36)
OTLP_TARGET_MB = 3.0
CPU_TARGET = 0.5
MB = 1024 * 1024
STATS_INTERVAL = 10.0
NODE_EXPORTER = ("prometheus-node-exporter", "node_exporter")


def fake_router() -> None:
    """Child process: a ROUTER that answers like a router; prints its endpoint, counts."""
    import zmq

    from fleetwatch import protocol

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(f"tcp://127.0.0.1:{port}", flush=True)
    counts: dict[str, int] = {}
    while True:
        rid, *frames = sock.recv_multipart()
        msg = protocol.decode(frames, protocol.AGENT_TYPES)
        counts[msg.type] = counts.get(msg.type, 0) + 1
        if msg.type == "STATS" and msg.get("series"):     # an OTLP intake's (bench/otlp.py)
            counts["series"] = counts.get("series", 0) + len(msg.get("series"))
        if msg.type == "HELLO":
            reply = protocol.make("WELCOME", "bench", router="bench", routers=[])
        elif msg.type == "HEARTBEAT":
            reply = protocol.make("HEARTBEAT", "bench")
        elif msg.type in ("NOTIFY", "REGISTER"):
            reply = protocol.make("ACK", "bench", msg_ids=[msg.msg_id])
        else:
            reply = None
        if reply is not None:
            sock.send_multipart([rid, *protocol.encode(reply)])
        sys.stderr.write(f"{counts}\n")
        sys.stderr.flush()


class Sampler:
    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.rss: list[int] = []
        self.cpu_start = 0.0

    def cpu(self) -> float:
        """CPU seconds used by all the process's threads: nanosecond schedstat on Linux,
        else psutil's tick counts."""
        try:
            tasks = Path(f"/proc/{self.proc.pid}/task")
            return sum(int((t / "schedstat").read_text().split()[0])
                       for t in tasks.iterdir()) / 1e9
        except (OSError, ValueError, IndexError):
            t = self.proc.cpu_times()
            return t.user + t.system

    def sample(self) -> None:
        self.rss.append(self.proc.memory_info().rss)


def export_once(url: str, proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """One OTLP export in protobuf and one in JSON to the agent listening at ``url`` (a
    counter, a histogram and a gauge, as an SDK's first export has them), once it listens."""
    from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service
    from opentelemetry.proto.metrics.v1 import metrics_pb2 as m
    from google.protobuf import json_format

    req = service.ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.add(key="service.name").value.string_value = "bench"
    metrics = rm.scope_metrics.add().metrics
    metrics.add(name="orders", sum=m.Sum(is_monotonic=True, aggregation_temporality=2,
                                         data_points=[m.NumberDataPoint(as_int=5)]))
    metrics.add(name="latency", histogram=m.Histogram(aggregation_temporality=2, data_points=[
        m.HistogramDataPoint(count=3, sum=0.4, bucket_counts=[1, 2, 0],
                             explicit_bounds=[0.1, 1.0])]))
    metrics.add(name="temp", gauge=m.Gauge(data_points=[m.NumberDataPoint(as_double=21.5)]))
    bodies = [(req.SerializeToString(), "application/x-protobuf"),
              (json_format.MessageToJson(req).encode(), "application/json")]
    deadline = time.monotonic() + timeout
    for body, content_type in bodies:
        while True:
            try:
                with urllib.request.urlopen(urllib.request.Request(
                        url, body, {"Content-Type": content_type}), timeout=5) as reply:
                    reply.read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the OTLP agent did not answer on {url}")
                time.sleep(0.1)


def node_exporter() -> str | None:
    return next(filter(None, map(shutil.which, NODE_EXPORTER)), None)


def scrape(url: str) -> int:
    """One scrape of node_exporter's /metrics, as Prometheus would; its size in bytes."""
    with urllib.request.urlopen(url, timeout=5) as reply:
        return len(reply.read())


def wait_listening(url: str, proc: subprocess.Popen, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            scrape(url)
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"node_exporter did not answer on {url}")
            time.sleep(0.1)


def python_env(tmp: Path, from_source: bool) -> dict:
    env = dict(os.environ)
    if from_source:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.pop("PYTHONPYCACHEPREFIX", None)
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    return env


def stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(5)


def one_round(tmp: Path, env: dict, seconds: float, warmup: float, exporter: str | None) -> dict:
    """Start router, agent, baseline (and node_exporter), sample them; their figures."""
    run = Path(tempfile.mkdtemp(prefix="round-", dir=tmp))
    logs = [open(run / name, "w") for name in ("router.log", "exporter.log")]
    procs: list[subprocess.Popen] = []
    try:
        router = subprocess.Popen([sys.executable, __file__, "--fake-router"], env=env,
                                  stdout=subprocess.PIPE, stderr=logs[0], text=True)
        procs.append(router)
        endpoint = router.stdout.readline().strip()

        def start_agent(name: str, **extra) -> subprocess.Popen:
            cfg = {"routers": [endpoint], "state_dir": str(run / f"{name}-state"),
                   "hostname": "bench", "stats_interval": STATS_INTERVAL,
                   "log_level": "WARNING", **extra}
            (run / f"{name}.yaml").write_text(yaml.safe_dump(cfg))
            log = open(run / f"{name}.log", "w")
            logs.append(log)
            proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", "agent", "--config",
                                     str(run / f"{name}.yaml")], env=env, cwd=ROOT,
                                    stdout=log, stderr=log)
            procs.append(proc)
            return proc
        agent = start_agent("agent")
        # the same agent with its OTLP intake on: idle, and after one export of each encoding
        ports = {"idle": free_port(), "used": free_port()}
        otlp = [start_agent(f"otlp-{use}", otlp={"enabled": True,
                                                 "listen": f"127.0.0.1:{port}"})
                for use, port in ports.items()]
        baseline = subprocess.Popen([sys.executable, "-c",
                                     "import zmq, psutil, yaml, time; time.sleep(100000)"],
                                    env=env)
        procs.append(baseline)
        samplers = {"agent": Sampler(agent.pid), "baseline": Sampler(baseline.pid),
                    "otlp_idle": Sampler(otlp[0].pid), "otlp_used": Sampler(otlp[1].pid)}
        export_once(f"http://127.0.0.1:{ports['used']}/v1/metrics", otlp[1])
        url = None
        if exporter:
            url = f"http://127.0.0.1:{free_port()}/metrics"
            ne = subprocess.Popen([exporter, f"--web.listen-address={url[7:-8]}"],
                                  stdout=logs[1], stderr=logs[1])
            procs.append(ne)
            wait_listening(url, ne)
            samplers["node_exporter"] = Sampler(ne.pid)
        time.sleep(warmup)
        for s in samplers.values():
            s.cpu_start = s.cpu()
        started = next_scrape = time.monotonic()
        scraped = 0
        while time.monotonic() - started < seconds:
            if url and time.monotonic() >= next_scrape:
                scraped = scrape(url)
                next_scrape += STATS_INTERVAL
            time.sleep(1.0)
            for s in samplers.values():
                s.sample()
        elapsed = time.monotonic() - started
        out = {name: {"rss_mb": max(s.rss) / MB,
                      "cpu_percent": 100.0 * (s.cpu() - s.cpu_start) / elapsed}
               for name, s in samplers.items()}
        out["seconds"] = round(elapsed, 1)
        out["scrape_bytes"] = scraped
        for name, proc in (("agent", agent), ("otlp-idle", otlp[0]), ("otlp-used", otlp[1])):
            if proc.poll() is not None:
                raise SystemExit(f"{name} stopped:\n" + (run / f"{name}.log").read_text())
    finally:
        stop(procs)
        for f in logs:
            f.close()
    lines = (run / "router.log").read_text().strip().splitlines()
    out["router_saw"] = lines[-1] if lines else "{}"
    out["agent_exit"] = agent.returncode
    return out


def measure(seconds: float, warmup: float, rounds: int, from_source: bool) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fw-footprint-"))
    exporter = node_exporter()
    try:
        env = python_env(tmp, from_source)
        if not from_source:         # fill the bytecode caches: a start that is not measured
            one_round(tmp, env, 1.0, 1.0, None)
        runs = [one_round(tmp, env, seconds, warmup, exporter) for _ in range(rounds)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out = {"rounds": runs, "exporter": exporter, "from_source": from_source,
           "seconds": runs[-1]["seconds"]}
    for name in ("agent", "otlp_idle", "otlp_used", "baseline", "node_exporter"):
        if name in runs[0]:
            rss = [r[name]["rss_mb"] for r in runs]
            out[name] = {"rss_mb": statistics.median(rss), "rss_range": (min(rss), max(rss)),
                         "cpu_percent": statistics.median(r[name]["cpu_percent"]
                                                          for r in runs)}
    return out


def report(r: dict) -> tuple[str, str]:
    """The table, and the notes under it."""
    a, b, ne = r["agent"], r["baseline"], r.get("node_exporter")
    idle, used = r["otlp_idle"], r["otlp_used"]

    def row(label, m):
        lo, hi = m["rss_range"]
        return f"| {label} | {m['rss_mb']:.1f} | {lo:.1f}-{hi:.1f} | {m['cpu_percent']:.3f} |"

    lines = ["| process | max RSS, median (MiB) | per round | CPU (% of one core) |",
             "|---|---|---|---|",
             row(f"agent (stats every {STATS_INTERVAL:.0f} s, heartbeat 2 s)", a),
             row("agent with OTLP on, idle", idle),
             row("agent with OTLP on, after an export in protobuf and one in JSON", used),
             row("baseline (python + zmq, psutil, yaml, sleeping)", b)]
    if ne:
        lines.append(row(f"node_exporter (scraped every {STATS_INTERVAL:.0f} s)", ne))
    lines.append(f"| OTLP on, idle - off | {idle['rss_mb'] - a['rss_mb']:+.1f} | | |")
    lines.append(f"| OTLP on, used - off | {used['rss_mb'] - a['rss_mb']:+.1f} | | |")
    lines.append(f"| ratio agent / baseline | {a['rss_mb'] / b['rss_mb']:.2f} | | |")
    if ne:
        lines.append(f"| ratio agent / node_exporter | {a['rss_mb'] / ne['rss_mb']:.2f} | | |")
    ok_rss = "meets" if a["rss_mb"] < RSS_TARGET_MB else "MISSES"
    ok_cpu = "meets" if a["cpu_percent"] < CPU_TARGET else "MISSES"
    last = r["rounds"][-1]
    notes = [
        f"{len(r['rounds'])} round{'s' * (len(r['rounds']) > 1)} of {r['seconds']} s after a "
        "warm-up; Python "
        + ("compiling the project's modules at each start (PYTHONDONTWRITEBYTECODE=1)."
           if r["from_source"] else "from bytecode caches, as an installed agent runs."),
        "node_exporter: " + (f"{r['exporter']}, default collectors, {last['scrape_bytes']} "
                             f"bytes a scrape." if ne else
                             "not installed (Debian prometheus-node-exporter: make "
                             "system-packages): skipped."),
        f"OTLP on (otlp.enabled, a listener on a 127.0.0.1 port): idle, +"
        f"{idle['rss_mb'] - a['rss_mb']:.1f} MiB (target +{OTLP_TARGET_MB:.0f} MiB, "
        f"{'meets' if idle['rss_mb'] - a['rss_mb'] <= OTLP_TARGET_MB else 'MISSES'}).",
        f"Targets: agent RSS < {RSS_TARGET_MB:.0f} MiB ({ok_rss}), CPU < {CPU_TARGET} % "
        f"({ok_cpu}). The fake router received {last['router_saw']} in the last round; the "
        f"agent exited {last['agent_exit']} on SIGTERM.",
    ]
    return "\n".join(lines), "\n".join(notes)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measuring window")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (medians are given)")
    parser.add_argument("--from-source", action="store_true",
                        help="no bytecode caches: compile the modules at every start")
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    parser.add_argument("--fake-router", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_router:
        fake_router()
        return 0
    command = f"python bench/agent_footprint.py {' '.join(sys.argv[1:])}".strip()
    result = measure(min(args.seconds, 600.0), args.warmup, max(1, args.rounds),
                     args.from_source)
    body, notes = report(result)
    print(f"{command}\n\n{body}\n\n{notes}")
    if args.write:
        write_section(RESULTS, HEADING, command, body, notes)
    a = result["agent"]
    return 0 if a["rss_mb"] < RSS_TARGET_MB and a["cpu_percent"] < CPU_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
