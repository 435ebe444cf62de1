"""Scheduler dispatch: RUN commands per second one scheduler sends to 1,000 simulated agents,
and the delay from a run's slot to its RESULT at a sink (p50, p99).

Processes on 127.0.0.1: a real router; the simulated agents (``--agent-procs`` processes
sharing 1,000 DEALER sockets: HELLO, then each RUN answered at once with a RESULT echoing
its slot); a real ``fleetwatch scheduler`` (jitter 0) reading a SQLite registry in which
every agent declares K plugins at a 1 s interval, so the offered load is 1,000 K RUN/s; and
this script as the alerting sink (a PULL on the router's alerting endpoint), timing each
RESULT against its slot. Baseline, same run, same load: a raw loop (one thread, a heap of
slots, one DEALER) sending the same RUNs at the same slots through the same router, with no
APScheduler, threads, queue or registry.

The "dispatch" rounds measure the scheduler alone: its RUNs go straight to a ROUTER in this
process (no router, no agents taking the 2 cores), timed from slot to arrival.

    python bench/scheduler.py [--agents 1000] [--per-agent 1,2,5] [--dispatch-per-agent 5,10]
                              [--seconds 10] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

import psutil
import yaml
import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fleetwatch import protocol  # noqa: E402
from results import percentile, wait  # noqa: E402  (bench/results.py)
from scheduler import slots  # noqa: E402

WARMUP = 4.0     # seconds from a sender's start to the measured window
DRAIN = 2.0      # seconds after the window for the last RESULTs
INTERVAL = 1.0


# ---------------------------------------------------------------- roles in other processes

def agents_role(endpoint: str, uuids_file: str) -> None:
    """Simulated agents: one DEALER each, HELLO until WELCOME, every RUN answered at once."""
    uuids = Path(uuids_file).read_text().split()
    ctx = zmq.Context()
    poller = zmq.Poller()
    owner: dict[zmq.Socket, str] = {}
    for u in uuids:
        s = ctx.socket(zmq.DEALER)
        s.linger = 0
        s.connect(endpoint)
        poller.register(s, zmq.POLLIN)
        owner[s] = u
    waiting = set(owner)
    next_hello = 0.0
    ready = False
    while True:
        now = time.monotonic()
        if waiting and now >= next_hello:
            for s in waiting:
                s.send_multipart(protocol.encode(protocol.make(
                    "HELLO", owner[s], hostname=f"sim-{owner[s][:8]}", heartbeat=600.0)))
            next_hello = now + 1.0
        for s, _ in poller.poll(100):
            for _ in range(64):
                try:
                    frames = s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                if frames[1] == b"RUN":
                    run = json.loads(frames[2])
                    s.send_multipart(protocol.encode(protocol.make(
                        "RESULT", owner[s], command_id=run["command_id"],
                        plugin=run["plugin"], status=0, output="OK", slot=run.get("slot"))),
                        zmq.NOBLOCK)
                elif frames[1] == b"WELCOME":
                    waiting.discard(s)
        if not waiting and not ready:
            print("ready", flush=True)
            ready = True


def raw_role(control: str, jobs_file: str, start: float, stop: float) -> None:
    """The baseline: the same RUNs at the same slots from a heap, one thread, one socket."""
    jobs = json.loads(Path(jobs_file).read_text())
    heap = []
    for uuid, plugin, interval in jobs:
        phase = slots.phase(uuid, plugin, interval)
        heap.append((slots.next_slot(start, phase, interval), uuid, plugin, interval))
    heapq.heapify(heap)
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.sndhwm = 100_000
    sock.connect(control)
    me = "raw-loop"
    while heap:
        slot, uuid, plugin, interval = heap[0]
        if slot >= stop:
            break
        left = slot - time.time()
        if left > 0:
            time.sleep(min(left, 0.05))
            continue
        heapq.heapreplace(heap, (round(slot + interval, 3), uuid, plugin, interval))
        msg = protocol.make("RUN", me, command_id=slots.command_id(uuid, plugin, slot),
                            plugin=plugin, slot=slot)
        sock.send_multipart(protocol.encode_control(msg, uuid), zmq.NOBLOCK)
        while sock.poll(0):          # ERROR answers, if any: not measured
            sock.recv_multipart()
    sock.close()


# ---------------------------------------------------------------- the bench

class Bench:
    def __init__(self, root: Path, agents: int, agent_procs: int):
        self.root, self.n = root, agents
        self.procs: list[subprocess.Popen] = []
        self.uuids = [str(uuidlib.uuid4()) for _ in range(agents)]
        self.state_url = f"sqlite:///{root / 'state.db'}"
        self.agent_procs = agent_procs

    def start(self, name: str, argv: list[str], pipe: bool = False) -> subprocess.Popen:
        log = open(self.root / f"{name}.log", "wb")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE if pipe else log,
                                stderr=log if pipe else subprocess.STDOUT)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def close(self) -> None:
        for p in self.procs:
            self.stop(p)

    def up(self) -> None:
        ready = self.root / "router.ready.json"
        cfg = {"id": "router-bench", "ready_file": str(ready), "stats_interval": 60.0,
               "bind": {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                        "tail": "tcp://127.0.0.1:*",
                        "sinks": {t: "tcp://127.0.0.1:*" for t in
                                  ("registry", "alerting", "graphite", "history")}},
               "limits": {"hellos_per_second": 2000.0}, "log_level": "WARNING"}
        (self.root / "router.yaml").write_text(yaml.safe_dump(cfg))
        self.start("router", [sys.executable, "-m", "fleetwatch", "router", "--config",
                              str(self.root / "router.yaml")])
        wait(ready.exists, 15, "router ready file")
        self.endpoints = json.loads(ready.read_text())["endpoints"]
        ctx = zmq.Context.instance()
        self.pull = ctx.socket(zmq.PULL)
        self.pull.linger = 0
        self.pull.rcvhwm = 1_000_000
        self.pull.connect(self.endpoints["sinks"]["alerting"])
        share = math.ceil(self.n / self.agent_procs)
        sims = []
        for i in range(self.agent_procs):
            part = self.root / f"uuids-{i}.txt"
            part.write_text("\n".join(self.uuids[i * share:(i + 1) * share]))
            sims.append(self.start(f"agents-{i}", [
                sys.executable, __file__, "--role", "agents", "--endpoint",
                self.endpoints["agents"], "--file", str(part)], pipe=True))
        for sim in sims:
            line = sim.stdout.readline()
            if line.strip() != b"ready":
                raise SystemExit(f"simulated agents did not attach: {line!r}")

    def declare(self, per_agent: int) -> list[tuple[str, str, float]]:
        """Every agent declares ``per_agent`` plugins at 1 s (the real registry sink class)."""
        from fleetwatch.protocol import Relayed
        from fleetwatch.store import db
        from sinks.registry import RegistrySink
        sink = RegistrySink(db.engine(self.state_url))
        sink.start()
        plugins = [{"name": f"check_{k}", "interval": INTERVAL, "timeout": 10}
                   for k in range(per_agent)]
        batch = [Relayed(u, "router-bench", protocol.make(
            "REGISTER", u, name="agent", hostname=f"sim-{u[:8]}", plugins=plugins))
            for u in self.uuids]
        for i in range(0, len(batch), 500):
            sink.write(batch[i:i + 500])
        sink.close()
        return [(u, p["name"], INTERVAL) for u in self.uuids for p in plugins]

    def measure(self, sock: zmq.Socket, body_at: int, sender: subprocess.Popen, t0: float,
                seconds: float, jobs: list[tuple[str, str, float]]) -> dict:
        """Read ``sock`` (frame ``body_at`` is a JSON body with command_id and slot) until
        the window [t0 + WARMUP, + seconds) has drained; time each first arrival."""
        lo, hi = t0 + WARMUP, t0 + WARMUP + seconds
        first: dict[str, tuple[float, float]] = {}
        ps = psutil.Process(sender.pid)
        cpu_lo = cpu_hi = None          # (process CPU seconds, wall clock) at lo and hi
        while time.time() < hi + DRAIN:
            if cpu_lo is None and time.time() >= lo:
                cpu_lo = (sum(ps.cpu_times()[:2]), time.time())
            if cpu_hi is None and time.time() >= hi:
                cpu_hi = (sum(ps.cpu_times()[:2]), time.time())
            if not sock.poll(50):
                continue
            while True:
                try:
                    frames = sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                now = time.time()
                if len(frames) <= body_at:
                    continue
                body = json.loads(frames[body_at])
                slot = body.get("slot")
                if slot is not None and lo <= slot < hi and body["command_id"] not in first:
                    first[body["command_id"]] = (now, slot)
        expected = sum(math.ceil((hi - slots.phase(u, p, i)) / i)
                       - math.ceil((lo - slots.phase(u, p, i)) / i) for u, p, i in jobs)
        delays = [now - slot for now, slot in first.values()]
        return {"offered": len(jobs) / INTERVAL, "rate": len(first) / seconds,
                "expected": expected, "received": len(first),
                "p50": percentile(delays, 50) * 1000, "p99": percentile(delays, 99) * 1000,
                "cpu": (cpu_hi[0] - cpu_lo[0]) / (cpu_hi[1] - cpu_lo[1]) * 100}

    def target(self, direct: bool) -> tuple[str, zmq.Socket, int]:
        """Where senders send and where arrivals are read: the router's control socket and
        the RESULTs at the sink PULL, or (``direct``) a ROUTER here that reads the RUNs."""
        if not direct:
            return self.endpoints["control"], self.pull, 2
        if not hasattr(self, "drain"):
            self.drain = zmq.Context.instance().socket(zmq.ROUTER)
            self.drain.linger = 0
            self.drain.rcvhwm = 1_000_000
            port = self.drain.bind_to_random_port("tcp://127.0.0.1")
            self.drain_endpoint = f"tcp://127.0.0.1:{port}"
        return self.drain_endpoint, self.drain, 4      # rid, SIGNATURE, TYPE, TARGET, BODY

    def scheduler_round(self, jobs, seconds: float, direct: bool = False) -> dict:
        endpoint, sock, body_at = self.target(direct)
        cfg = {"routers": [endpoint], "id": "sched-bench", "state_url": self.state_url,
               "jitter": 0.0, "refresh_interval": 600.0, "stats_interval": 5.0}
        path = self.root / "scheduler.yaml"
        path.write_text(yaml.safe_dump(cfg))
        t0 = time.time()
        proc = self.start("scheduler", [sys.executable, "-m", "fleetwatch", "scheduler",
                                        "--config", str(path)])
        try:
            result = self.measure(sock, body_at, proc, t0, seconds, jobs)
        finally:
            self.stop(proc)
        counters = [ln for ln in (self.root / "scheduler.log").read_text().splitlines()
                    if "counters:" in ln]
        result["counters"] = counters[-1].split("counters: ")[1] if counters else ""
        return result

    def raw_round(self, jobs, seconds: float, direct: bool = False) -> dict:
        endpoint, sock, body_at = self.target(direct)
        path = self.root / "jobs.json"
        path.write_text(json.dumps(jobs))
        t0 = time.time()
        proc = self.start("raw", [sys.executable, __file__, "--role", "raw", "--endpoint",
                                  endpoint, "--file", str(path), "--start", str(t0),
                                  "--stop", str(t0 + WARMUP + seconds + 0.5)])
        try:
            return self.measure(sock, body_at, proc, t0, seconds, jobs)
        finally:
            self.stop(proc)


def line(name: str, r: dict, what: str) -> str:
    return (f"  {name:<9} {r['rate']:7.0f} RUN/s of {r['offered']:.0f} offered "
            f"({r['received']}/{r['expected']} slots), {what} p50 {r['p50']:.1f} ms "
            f"p99 {r['p99']:.1f} ms, sender CPU {r['cpu']:.0f}% of a core")


def write_results(path: Path, command: str, rows: list[tuple[str, dict, dict]],
                  agents: int) -> None:
    from results import write_section      # bench/results.py
    body = ["| path | offered RUN/s | scheduler RUN/s | raw loop RUN/s | scheduler p50 / p99 | "
            "raw p50 / p99 | scheduler CPU | raw CPU |",
            "|---|---|---|---|---|---|---|---|"]
    for kind, s, r in rows:
        body.append(f"| {kind} | {s['offered']:.0f} | {s['rate']:.0f} "
                    f"({s['received']}/{s['expected']}) | {r['rate']:.0f} | "
                    f"{s['p50']:.1f} / {s['p99']:.1f} ms | {r['p50']:.1f} / {r['p99']:.1f} ms "
                    f"| {s['cpu']:.0f}% | {r['cpu']:.0f}% |")
    notes = (f"{agents} simulated agents; every agent declares K plugins at a 1 s interval "
             f"(offered = {agents} K RUN/s) in a SQLite registry; a real `fleetwatch "
             f"scheduler` (jitter 0) sends the RUNs. Path \"agents\": through one real router "
             f"to the simulated agents (DEALERs in 2 processes answering each RUN with a "
             f"RESULT at once), the delay being slot -> RESULT at a PULL on the router's "
             f"alerting endpoint. Path \"dispatch\": the RUNs go straight to a ROUTER in the "
             f"benchmark process, the delay being slot -> RUN received: the scheduler's own "
             f"capacity, without the router and agents competing for the 2 cores. \"raw "
             f"loop\" is the baseline, same run, same slots and command ids: one thread "
             f"sending from a heap of slots, no APScheduler, threads, queue or registry. "
             f"RUN/s counts distinct command ids that arrived for slots in the window; CPU is "
             f"the sender process's, in % of one core.")
    write_section(path, "## Scheduler dispatch", command, "\n".join(body), notes)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=["bench", "agents", "raw"], default="bench")
    ap.add_argument("--endpoint")
    ap.add_argument("--file")
    ap.add_argument("--start", type=float)
    ap.add_argument("--stop", type=float)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--agent-procs", type=int, default=2)
    ap.add_argument("--per-agent", default="1,2,5",
                    help="plugins per agent at 1 s, one round each (comma separated)")
    ap.add_argument("--dispatch-per-agent", default="5,10",
                    help="the same, RUNs sent straight to a ROUTER here (no router, agents)")
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--results", type=Path, help="write the figures into this RESULTS.md")
    args = ap.parse_args()
    if args.role == "agents":
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        agents_role(args.endpoint, args.file)
        return 0
    if args.role == "raw":
        raw_role(args.endpoint, args.file, args.start, args.stop)
        return 0
    rows = []
    with tempfile.TemporaryDirectory(prefix="fw-bench-sched-") as tmp:
        bench = Bench(Path(tmp), args.agents, args.agent_procs)
        try:
            bench.up()
            print(f"{args.agents} simulated agents attached", flush=True)
            rounds = [("agents", int(k)) for k in args.per_agent.split(",") if k] + \
                     [("dispatch", int(k)) for k in args.dispatch_per_agent.split(",") if k]
            for kind, k in rounds:
                jobs = bench.declare(k)
                direct = kind == "dispatch"
                s = bench.scheduler_round(jobs, args.seconds, direct)
                r = bench.raw_round(jobs, args.seconds, direct)
                rows.append((kind, s, r))
                what = "slot->RUN received" if direct else "slot->RESULT"
                print(f"{kind}, {k} plugin(s) per agent:\n{line('scheduler', s, what)}\n"
                      f"{line('raw loop', r, what)}\n  ratio scheduler/raw: rate "
                      f"{s['rate'] / r['rate']:.2f}, p50 {s['p50'] / r['p50']:.1f}x, p99 "
                      f"{s['p99'] / r['p99']:.1f}x, CPU {s['cpu'] / r['cpu']:.1f}x\n"
                      f"  scheduler counters: {s['counters']}", flush=True)
        finally:
            bench.close()
    if args.results:
        command = " ".join(["python bench/scheduler.py", *sys.argv[1:]])
        write_results(args.results, command, rows, args.agents)
    return 0


if __name__ == "__main__":
    sys.exit(main())
