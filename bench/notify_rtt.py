"""NOTIFY round trip: agent -> router -> alerting sink (committed) -> ACK -> agent.

A real router and a real alerting sink run as processes on 127.0.0.1; this script plays the
agent's link (a DEALER speaking FWP/1: HELLO, then NOTIFY at a fixed rate) and times each
NOTIFY until its ACK comes back. Baseline, same run: a bare DEALER -> ROUTER echo at the same
rate, which is what two hops of ZeroMQ cost with no fleetwatch code in the path.

    .venv/bin/python bench/notify_rtt.py [--rate 1000] [--seconds 10]

Target: p99 under 5 ms on loopback at 1,000/s.
"""

from __future__ import annotations

import argparse
import math
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

import yaml
import zmq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fleetwatch import protocol  # noqa: E402
from results import percentile, wait  # noqa: E402  (bench/results.py)


def start(root: Path, name: str, *argv: str) -> subprocess.Popen:
    log = open(root / f"{name}.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "fleetwatch", *argv], stdout=log,
                            stderr=subprocess.STDOUT)


def paced(rate: float, seconds: float, sock: zmq.Socket, on_reply):
    """Yield send slots at ``rate`` per second for ``seconds``; between them, wait on ``sock``
    and hand every reply to ``on_reply`` the moment it arrives (so a round trip is timed to
    its arrival, not to the next send)."""
    start = time.perf_counter()
    n = int(rate * seconds)
    for i in range(n):
        due = start + i / rate
        while True:
            left = due - time.perf_counter()
            if left <= 0:
                break
            if sock.poll(math.ceil(left * 1000)):
                while sock.poll(0):
                    on_reply(sock.recv_multipart())
        yield i


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, all threads) process ``pid`` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fleet_rtt(root: Path, rate: float, seconds: float) -> tuple[list[float], dict]:
    """The round trips, and the router's and the sink's CPU per acknowledged NOTIFY
    (seconds) over the timed part: fair even on a loaded machine, unlike the latencies."""
    ready = root / "router.ready.json"
    router_cfg = {"id": "router-b", "ready_file": str(ready),
                  "bind": {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                           "tail": "tcp://127.0.0.1:*",
                           "sinks": {t: "tcp://127.0.0.1:*" for t in
                                     ("registry", "alerting", "graphite", "history")}}}
    (root / "router.yaml").write_text(yaml.safe_dump(router_cfg))
    procs = [start(root, "router", "router", "--config", str(root / "router.yaml"))]
    try:
        wait(ready.exists, 15, "router ready")
        eps = json.loads(ready.read_text())["endpoints"]
        (root / "sink.yaml").write_text(yaml.safe_dump({
            "routers": [eps["control"]], "state_url": f"sqlite:///{root / 'state.db'}",
            "hello_interval": 0.2}))
        procs.append(start(root, "sink", "sink", "alerting", "--config",
                           str(root / "sink.yaml")))
        router, sink = procs
        before: dict = {}

        def timed() -> None:
            before.update(router=cpu_seconds(router.pid), sink=cpu_seconds(sink.pid))

        rtts = time_notifies(eps["agents"], rate, seconds, root, timed)
        n = max(len(rtts), 1)
        return rtts, {"router": (cpu_seconds(router.pid) - before["router"]) / n,
                      "sink": (cpu_seconds(sink.pid) - before["sink"]) / n}
    finally:
        stop(*procs)


def stop(*procs: subprocess.Popen) -> None:
    """SIGTERM each process, then wait for it (SIGKILL after 10 s)."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()


def time_notifies(agents: str, rate: float, seconds: float, logs,
                  timed=lambda: None) -> list[float]:
    """Play an agent on the ``agents`` endpoint: HELLO, NOTIFYs until one is ACKed (the
    sink attached), then NOTIFYs at ``rate`` for ``seconds``; each one's round trip to its
    ACK (seconds). ``logs``: where the processes' logs are, for the error; ``timed``: called
    when the timed part begins."""
    ctx = zmq.Context.instance()
    me = str(uuidlib.uuid4())
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, me.encode())
    sock.linger = 0
    sock.connect(agents)
    sock.send_multipart(protocol.encode(protocol.make(
        "HELLO", me, hostname="bench", heartbeat=1.0)))
    assert sock.poll(5000), "no WELCOME"
    sock.recv_multipart()
    # Warm up until the sink is attached and ACKs flow.
    warm = protocol.make("NOTIFY", me, severity="info", text="warm-up")
    deadline = time.monotonic() + 30
    acked = False
    while not acked and time.monotonic() < deadline:
        sock.send_multipart(protocol.encode(warm))
        if sock.poll(500):
            while sock.poll(0):
                m = protocol.decode(sock.recv_multipart())
                acked = acked or (m.type == "ACK" and warm.msg_id in m.body["msg_ids"])
    if not acked:
        raise SystemExit(f"the alerting sink never acknowledged; see the logs in {logs}")
    sent: dict[str, float] = {}
    rtts: list[float] = []
    timed()

    def on_reply(frames: list[bytes]) -> None:
        now = time.perf_counter()
        m = protocol.decode(frames)
        if m.type == "ACK":
            for mid in m.body["msg_ids"]:
                t0 = sent.pop(mid, None)
                if t0 is not None:
                    rtts.append(now - t0)

    for i in paced(rate, seconds, sock, on_reply):
        msg = protocol.make("NOTIFY", me, severity="error", text=f"bench {i:06d} " + "x" * 80)
        frames = protocol.encode(msg)
        sent[msg.msg_id] = time.perf_counter()
        sock.send_multipart(frames)
    deadline = time.monotonic() + 10
    while sent and time.monotonic() < deadline:
        if sock.poll(100):
            on_reply(sock.recv_multipart())
    sock.close()
    lost = len(sent)
    if lost:
        print(f"  warning: {lost} NOTIFY not acknowledged within 10 s")
    return rtts


def baseline_rtt(rate: float, seconds: float) -> list[float]:
    """The same traffic echoed by a bare ROUTER in another process."""
    code = (
        "import zmq,sys\n"
        "ctx=zmq.Context();s=ctx.socket(zmq.ROUTER);s.linger=0\n"
        "p=s.bind_to_random_port('tcp://127.0.0.1');print(p,flush=True)\n"
        "while True:\n"
        "    if s.poll(1000): s.send_multipart(s.recv_multipart())\n"
        "    elif sys.stdin.closed: break\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE, text=True)
    try:
        port = int(proc.stdout.readline())
        ctx = zmq.Context.instance()
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(f"tcp://127.0.0.1:{port}")
        body = b"x" * 200
        sent: dict[bytes, float] = {}
        rtts = []

        def on_reply(frames: list[bytes]) -> None:
            rtts.append(time.perf_counter() - sent.pop(frames[1]))

        for i in paced(rate, seconds, sock, on_reply):
            key = i.to_bytes(8, "big")
            sent[key] = time.perf_counter()
            sock.send_multipart([protocol.SIGNATURE, key, body])
        deadline = time.monotonic() + 5
        while sent and time.monotonic() < deadline:
            if sock.poll(100):
                frames = sock.recv_multipart()
                rtts.append(time.perf_counter() - sent.pop(frames[1]))
        sock.close()
        return rtts
    finally:
        proc.kill()
        proc.wait()


def summary(rtts: list[float]) -> tuple[float, float]:
    return percentile(rtts, 50) * 1000, percentile(rtts, 99) * 1000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    fleet_runs, base_runs, cpus = [], [], []
    for r in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="fw-rtt-") as tmp:
            rtts, cpu = fleet_rtt(Path(tmp), args.rate, args.seconds)
        cpus.append(cpu)
        base = baseline_rtt(args.rate, args.seconds)
        fleet_runs.append(summary(rtts))
        base_runs.append(summary(base))
        print(f"round {r + 1}: fleet n={len(rtts)} p50 {fleet_runs[-1][0]:.2f} ms "
              f"p99 {fleet_runs[-1][1]:.2f} ms | baseline echo p50 {base_runs[-1][0]:.2f} ms "
              f"p99 {base_runs[-1][1]:.2f} ms | CPU per NOTIFY: sink "
              f"{cpu['sink'] * 1e6:.0f} us, router {cpu['router'] * 1e6:.0f} us | load "
              f"{os.getloadavg()[0]:.1f}", flush=True)
    p50 = statistics.median(x[0] for x in fleet_runs)
    p99 = statistics.median(x[1] for x in fleet_runs)
    b50 = statistics.median(x[0] for x in base_runs)
    b99 = statistics.median(x[1] for x in base_runs)
    print(f"NOTIFY round trip at {args.rate:.0f}/s (median of {args.rounds} rounds): "
          f"p50 {p50:.2f} ms, p99 {p99:.2f} ms (target p99 < 5 ms: "
          f"{'met' if p99 < 5 else 'NOT met'})")
    print(f"CPU per NOTIFY (median): sink "
          f"{statistics.median(c['sink'] for c in cpus) * 1e6:.0f} us, router "
          f"{statistics.median(c['router'] for c in cpus) * 1e6:.0f} us; load average "
          f"{os.getloadavg()[0]:.1f}")
    print(f"baseline DEALER->ROUTER echo: p50 {b50:.2f} ms, p99 {b99:.2f} ms; "
          f"ratio fleet/baseline p50 {p50 / b50:.1f}x, p99 {p99 / b99:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
