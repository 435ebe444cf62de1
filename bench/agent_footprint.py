"""Agent footprint: RSS and CPU of a real agent against a fake router, next to a baseline.

    python bench/agent_footprint.py [--seconds 60] [--write]

Runs ``fleetwatch agent`` (stats_interval 10 s, default heartbeats every 2 s) against a fake
router process (a ROUTER answering HELLO, HEARTBEAT and ACKing NOTIFY/REGISTER), and, in the
same run, a baseline: a bare python process that imports zmq, psutil and yaml and sleeps.
Samples RSS and CPU time of both with psutil; CPU is counted after a warm-up (start-up
imports excluded). Targets: agent RSS < 35 MiB, CPU < 0.5 % of one core. ``--write`` puts
the figures under "## Agent footprint" in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "RESULTS.md"
HEADING = "## Agent footprint"
RSS_TARGET_MB = 35.0
CPU_TARGET = 0.5
MB = 1024 * 1024


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
        self.cpu_start = None

    def cpu(self) -> float:
        """CPU seconds used: nanosecond schedstat on Linux, else psutil's tick counts."""
        try:
            with open(f"/proc/{self.proc.pid}/schedstat") as f:
                return int(f.read().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            t = self.proc.cpu_times()
            return t.user + t.system

    def sample(self) -> None:
        self.rss.append(self.proc.memory_info().rss)


def measure(seconds: float, warmup: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fw-bench-"))
    router_log = open(tmp / "router.log", "w")
    router = subprocess.Popen([sys.executable, __file__, "--fake-router"],
                              stdout=subprocess.PIPE, stderr=router_log, text=True)
    endpoint = router.stdout.readline().strip()
    cfg = {"routers": [endpoint], "state_dir": str(tmp / "state"), "hostname": "bench",
           "stats_interval": 10.0, "log_level": "WARNING"}
    (tmp / "agent.yaml").write_text(yaml.safe_dump(cfg))
    agent_log = open(tmp / "agent.log", "w")
    agent = subprocess.Popen([sys.executable, "-m", "fleetwatch", "agent", "--config",
                              str(tmp / "agent.yaml")], stdout=agent_log, stderr=agent_log)
    baseline = subprocess.Popen([sys.executable, "-c",
                                 "import zmq, psutil, yaml, time; time.sleep(100000)"])
    procs = {"agent": Sampler(agent.pid), "baseline": Sampler(baseline.pid)}
    try:
        time.sleep(warmup)
        for s in procs.values():
            s.cpu_start = s.cpu()
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            time.sleep(1.0)
            for s in procs.values():
                s.sample()
        elapsed = time.monotonic() - started
        out = {"seconds": round(elapsed, 1)}
        for name, s in procs.items():
            out[name] = {"rss_mb": max(s.rss) / MB, "rss_final_mb": s.rss[-1] / MB,
                         "cpu_percent": 100.0 * (s.cpu() - s.cpu_start) / elapsed}
        assert agent.poll() is None, (tmp / "agent.log").read_text()
    finally:
        for p in (agent, baseline, router):
            p.terminate()
        for p in (agent, baseline, router):
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        router_log.close()
        agent_log.close()
    lines = (tmp / "router.log").read_text().strip().splitlines()
    out["router_saw"] = lines[-1] if lines else "{}"
    out["agent_exit"] = agent.returncode
    return out


def report(r: dict, command: str) -> str:
    a, b = r["agent"], r["baseline"]
    ok_rss = "meets" if a["rss_mb"] < RSS_TARGET_MB else "MISSES"
    ok_cpu = "meets" if a["cpu_percent"] < CPU_TARGET else "MISSES"
    return "\n".join([
        f"Command: `{command}`",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d')}; window {r['seconds']} s "
        f"after warm-up.",
        "",
        "| process | max RSS (MiB) | CPU (% of one core) |",
        "|---|---|---|",
        f"| agent (stats every 10 s, heartbeat 2 s) | {a['rss_mb']:.1f} | "
        f"{a['cpu_percent']:.3f} |",
        f"| baseline (python + zmq, psutil, yaml, sleeping) | {b['rss_mb']:.1f} | "
        f"{b['cpu_percent']:.3f} |",
        f"| ratio agent / baseline | {a['rss_mb'] / b['rss_mb']:.2f} | |",
        "",
        f"Targets: RSS < {RSS_TARGET_MB:.0f} MiB ({ok_rss}), CPU < {CPU_TARGET} % ({ok_cpu}). "
        f"The fake router received {r['router_saw']}; the agent exited "
        f"{r['agent_exit']} on SIGTERM.",
    ])


def write_section(text: str) -> None:
    """Replace (or add) only this benchmark's section of RESULTS.md."""
    old = RESULTS.read_text() if RESULTS.exists() else "# Benchmark results\n"
    section = f"{HEADING}\n\n{text}\n"
    pattern = re.compile(rf"^{re.escape(HEADING)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(old):
        new = pattern.sub(lambda _: section + "\n", old).rstrip("\n") + "\n"
    else:
        new = old.rstrip("\n") + "\n\n" + section
    RESULTS.write_text(new)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="measuring window")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--write", action="store_true", help="update bench/RESULTS.md")
    parser.add_argument("--fake-router", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.fake_router:
        fake_router()
        return 0
    command = f"cd {HERE.parent} && {sys.executable} bench/agent_footprint.py " + " ".join(
        sys.argv[1:])
    result = measure(min(args.seconds, 600.0), args.warmup)
    text = report(result, command.strip())
    print(text)
    if args.write:
        write_section(text)
    a = result["agent"]
    return 0 if a["rss_mb"] < RSS_TARGET_MB and a["cpu_percent"] < CPU_TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
