"""One router at 10,000 agents: its memory, its heartbeat round trips, its CPU, a restart.

Processes on 127.0.0.1, in one run, one after the other:

1. the baseline: a bare zmq ROUTER (this file, ``--role bare``: the router's socket options,
   no Python state per peer) answering each HELLO with a WELCOME and each HEARTBEAT with a
   HEARTBEAT, held by ``--agents`` DEALERs beating for ``--baseline`` seconds;
2. a real ``fleetwatch router`` (its sink PUSH sockets drained by one PULL process, so its
   relay sends really go out), held by the same number of DEALERs for ``--minutes``;
3. with ``--storm``: the router restarted (SIGTERM, a new one on the same ports), its agents
   attaching again at its admission pace.

The agents are tests/support/dealers.py ``--measure`` processes of ``--per-process`` DEALERs
(2,500), each beating every ``--interval`` seconds (1) and timing the answers. Every
``--every`` seconds (5): the server's RSS (/proc), its CPU (% of one core, all its threads),
and the round trips of the window. Prints, per server: RSS before the agents, after the first
5 minutes (a third of the run when shorter) and at the end, RSS per agent above the idle
process, the router / bare ratios (targets: per agent at most 1.5x, end within 10 % of the
5-minute figure), round trip p50/p99/max in steady state (targets at 10,000 agents: p99 under
50 ms, max under 200 ms), CPU (under 60 %); with ``--storm`` the seconds until every agent is
attached again (target 15 s) and the attached agents' round-trip p99 meanwhile (under 100 ms).

    python bench/router_scale.py [--agents 10000] [--minutes 30] [--baseline 60] [--storm]
                                 [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import wait, write_section  # noqa: E402  (bench/results.py)

HEADING = "## Router at scale (memory, heartbeat round trips, restart)"
DEALERS = ROOT / "tests" / "support" / "dealers.py"
MIB = 1024 * 1024
TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- the bare ROUTER (a role)

def bare(ready: Path) -> int:
    """A ROUTER with the router's agents-socket options answering HELLO and HEARTBEAT."""
    import zmq

    from fleetwatch import protocol
    from router.config import RouterLimits
    limits = RouterLimits()
    ctx = zmq.Context(io_threads=1)
    sock = ctx.socket(zmq.ROUTER)
    sock.linger = 0
    sock.setsockopt(zmq.MAXMSGSIZE, limits.max_message_bytes)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.SNDHWM, limits.agent_hwm)
    sock.bind("tcp://127.0.0.1:0")
    answers = {b"HELLO": protocol.encode(protocol.make("WELCOME", "bare", router="bare",
                                                       routers=[])),
               b"HEARTBEAT": protocol.encode(protocol.make("HEARTBEAT", "bare"))}
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    ready.write_text(sock.last_endpoint.decode())
    while not stop:
        if not sock.poll(250):
            continue
        for _ in range(256):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            answer = answers.get(frames[2]) if len(frames) == 4 else None
            if answer is not None:
                try:
                    sock.send_multipart([frames[0], *answer], zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass        # gone or full: the agent's round trip shows it
    sock.close(0)
    ctx.term()
    return 0


def drain_sinks(endpoints: list[str]) -> int:
    """A PULL on every sink endpoint, reading and dropping, until SIGTERM."""
    import zmq
    ctx = zmq.Context()
    socks = []
    for ep in endpoints:
        s = ctx.socket(zmq.PULL)
        s.linger = 0
        s.rcvhwm = 100_000
        s.connect(ep)
        socks.append(s)
    poller = zmq.Poller()
    for s in socks:
        poller.register(s, zmq.POLLIN)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    while not stop:
        for s, _ in poller.poll(250):
            for _ in range(1000):
                try:
                    s.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
    for s in socks:
        s.close(0)
    ctx.term()
    return 0


# ---------------------------------------------------------------- process figures

def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Histogram:
    """Round trips in 0.1 ms buckets, merged from the agents' reports."""

    def __init__(self):
        self.counts: collections.Counter = collections.Counter()

    def add(self, hist: dict) -> None:
        for bucket, n in hist.items():
            self.counts[int(bucket)] += n

    def total(self) -> int:
        return sum(self.counts.values())

    def pct(self, p: float) -> float:
        """The ``p``-th percentile in ms (NaN when empty)."""
        total = self.total()
        if not total:
            return float("nan")
        rank, seen = p / 100 * total, 0
        for bucket in sorted(self.counts):
            seen += self.counts[bucket]
            if seen >= rank:
                return bucket / 10
        return max(self.counts) / 10

    def max(self) -> float:
        return max(self.counts) / 10 if self.counts else float("nan")

    def summary(self) -> str:
        return (f"p50 {self.pct(50):.1f} ms, p99 {self.pct(99):.1f} ms, "
                f"max {self.max():.1f} ms ({self.total()} answers)")


# ---------------------------------------------------------------- the agents

class Fleet:
    """``agents`` DEALERs in processes of ``per`` (tests/support/dealers.py --measure)."""

    def __init__(self, endpoint: str, agents: int, per: int, interval: float, prefix: str,
                 timeout: float):
        self.procs = []
        for i, start in enumerate(range(0, agents, per)):
            n = min(per, agents - start)
            self.procs.append(subprocess.Popen(
                [sys.executable, str(DEALERS), endpoint, str(n), f"{prefix}{i}",
                 "--heartbeat", str(interval), "--timeout", str(timeout), "--measure"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
        for proc in self.procs:
            line = proc.stdout.readline()
            if not line.startswith("ready"):
                self.stop()
                raise SystemExit(f"dealers: {line.strip() or 'exited'} (status {proc.poll()})")
        self.tell("go")

    def tell(self, command: str) -> None:
        for proc in self.procs:
            proc.stdin.write(command + "\n")
            proc.stdin.flush()

    def report(self) -> dict:
        """Every process's report, added up; ``hist`` merged."""
        self.tell("report")
        out = {"attached": 0, "sent": 0, "answered": 0, "refused": 0, "hist": {}}
        for proc in self.procs:
            r = json.loads(proc.stdout.readline())
            for key in ("attached", "sent", "answered", "refused"):
                out[key] += r[key]
            for bucket, n in r["hist"].items():
                out["hist"][bucket] = out["hist"].get(bucket, 0) + n
        return out

    def stop(self) -> None:
        for proc in self.procs:
            if proc.stdin and not proc.stdin.closed:
                proc.stdin.close()
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


# ---------------------------------------------------------------- the servers

class Bare:
    def __init__(self, workdir: Path):
        ready = workdir / "bare.ready"
        ready.unlink(missing_ok=True)
        self.proc = subprocess.Popen([sys.executable, __file__, "--role", "bare",
                                      "--ready", str(ready)])
        wait(lambda: ready.exists() and ready.read_text(), 15, "the bare ROUTER")
        self.endpoint = ready.read_text()
        self.pid = self.proc.pid

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


class Router:
    """A real ``fleetwatch router`` on fixed ports (so a restart keeps them)."""

    def __init__(self, workdir: Path, hellos: float | None, code: str | None = None):
        self.workdir, self.code = workdir, code
        self.ready = workdir / "router.ready.json"
        ep = {k: f"tcp://127.0.0.1:{free_port()}" for k in
              ("agents", "control", "tail", "registry", "alerting", "graphite", "history")}
        cfg = {"id": "scale-router", "ready_file": str(self.ready), "log_level": "WARNING",
               "bind": {"agents": ep["agents"], "control": ep["control"], "tail": ep["tail"],
                        "sinks": {t: ep[t] for t in
                                  ("registry", "alerting", "graphite", "history")}}}
        if hellos:
            cfg["limits"] = {"hellos_per_second": hellos}
        self.config = workdir / "router.yaml"
        self.config.write_text(yaml.safe_dump(cfg))
        self.endpoint = ep["agents"]
        self.start()
        self.drain = subprocess.Popen([sys.executable, __file__, "--role", "drain", "--ready",
                                       ",".join(ep[t] for t in ("registry", "alerting",
                                                                "graphite", "history"))])

    def start(self) -> None:
        self.ready.unlink(missing_ok=True)
        log = open(self.workdir / "router.log", "ab")
        env = dict(os.environ)
        if self.code:           # another copy of the router package (the code before a change)
            env["PYTHONPATH"] = self.code + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", "router", "--config",
                                      str(self.config)], stdout=log, stderr=subprocess.STDOUT,
                                     env=env, cwd=self.workdir)
        log.close()
        wait(lambda: self.ready.exists() or self.proc.poll() is not None, 15, "the router")
        if self.proc.poll() is not None:
            raise SystemExit(f"router exited; see {self.workdir / 'router.log'}")
        self.pid = self.proc.pid

    def restart(self, between) -> float:
        """Stop (SIGTERM), call ``between()``, start again; return the monotonic time the new
        one was ready."""
        self.proc.terminate()
        self.proc.wait(15)
        between()
        self.start()
        return time.monotonic()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        self.drain.terminate()
        self.drain.wait(10)


# ---------------------------------------------------------------- a phase

def hold(server, fleet: Fleet, seconds: float, every: float, agents: int, idle: int,
         label: str) -> dict:
    """Sample ``server`` every ``every`` seconds for ``seconds``; the phase's figures."""
    start, cpu0 = time.monotonic(), cpu_seconds(server.pid)
    fleet.report()                              # forget the attach phase's answers
    steady, samples, last = Histogram(), [], (start, cpu0)
    ref_at = min(300.0, seconds / 3)
    while time.monotonic() - start < seconds:
        time.sleep(min(every, max(0.0, seconds - (time.monotonic() - start))))
        now, cpu = time.monotonic(), cpu_seconds(server.pid)
        r = fleet.report()
        window = Histogram()
        window.add(r["hist"])
        steady.add(r["hist"])
        samples.append({"t": now - start, "rss": rss(server.pid),
                        "cpu": 100 * (cpu - last[1]) / (now - last[0]),
                        "p99": window.pct(99), "max": window.max(),
                        "attached": r["attached"]})
        last = (now, cpu)
        print(f"  {label} {now - start:6.0f}s rss {samples[-1]['rss'] / MIB:7.1f} MiB  cpu "
              f"{samples[-1]['cpu']:5.1f} %  p99 {window.pct(99):6.1f} max {window.max():7.1f}"
              f" ms  attached {r['attached']}", flush=True)
    ref = next((s for s in samples if s["t"] >= ref_at), samples[-1])
    end = samples[-1]
    return {"idle": idle, "ref": ref["rss"], "ref_t": ref["t"], "end": end["rss"],
            "per_agent": (end["rss"] - idle) / agents, "rtt": steady,
            "cpu": 100 * (cpu_seconds(server.pid) - cpu0) / (time.monotonic() - start),
            "samples": samples}


def storm(router: Router, fleet: Fleet, agents: int, timeout: float) -> dict:
    """Restart the router; seconds until every agent is attached again, round trips meanwhile."""
    fleet.report()
    stopped = time.monotonic()
    ready = router.restart(lambda: fleet.tell("detach"))
    rtt, attached = Histogram(), 0
    while time.monotonic() - ready < timeout:
        time.sleep(0.25)
        r = fleet.report()
        rtt.add(r["hist"])
        attached = r["attached"]
        if attached >= agents:
            break
    done = time.monotonic()
    return {"attached": attached, "from_ready": done - ready, "from_stop": done - stopped,
            "rtt": rtt}


def router_phase(args, workdir: Path, label: str, code: str | None, timeout: float) -> dict:
    router = Router(workdir, args.hellos, code)
    fleet = None
    try:
        idle = rss(router.pid)
        t0 = time.monotonic()
        fleet = Fleet(router.endpoint, args.agents, args.per_process, args.interval, "r",
                      timeout)
        took = time.monotonic() - t0
        print(f"{label}: {args.agents} attached in {took:.1f}s", flush=True)
        out = hold(router, fleet, args.minutes * 60, args.every, args.agents, idle, label)
        out["attach"] = took
        if args.storm:
            out["storm"] = storm(router, fleet, args.agents, timeout)
        return out
    finally:
        if fleet is not None:
            fleet.stop()
        router.stop()


# ---------------------------------------------------------------- main

def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--agents", type=int, default=10_000)
    p.add_argument("--per-process", type=int, default=2_500)
    p.add_argument("--interval", type=float, default=1.0, help="heartbeat interval (s)")
    p.add_argument("--minutes", type=float, default=30.0, help="the router's steady run")
    p.add_argument("--baseline", type=float, default=60.0, help="the bare ROUTER's run (s)")
    p.add_argument("--every", type=float, default=5.0, help="seconds between samples")
    p.add_argument("--storm", action="store_true", help="restart the router at the end")
    p.add_argument("--hellos", type=float, default=None,
                   help="the router's limits.hellos_per_second (default: its default)")
    p.add_argument("--no-baseline", action="store_true", help="skip the bare ROUTER")
    p.add_argument("--compare", metavar="DIR",
                   help="first run the router from the copy of the router package in DIR "
                        "(the code before a change), then this tree's, in the same run")
    p.add_argument("--results", type=Path, default=None)
    p.add_argument("--role", choices=("bare", "drain"), help=argparse.SUPPRESS)
    p.add_argument("--ready", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role == "bare":
        return bare(Path(args.ready))
    if args.role == "drain":
        return drain_sinks(args.ready.split(","))
    attach_timeout = 60 + args.agents / 100
    results = {}
    with tempfile.TemporaryDirectory(prefix="fw-scale-") as tmp:
        workdir = Path(tmp)
        if not args.no_baseline:
            server = Bare(workdir)
            fleet = None
            try:
                idle = rss(server.pid)
                t0 = time.monotonic()
                fleet = Fleet(server.endpoint, args.agents, args.per_process, args.interval,
                              "b", attach_timeout)
                took = time.monotonic() - t0
                print(f"bare ROUTER: {args.agents} attached in {took:.1f}s", flush=True)
                results["bare"] = hold(server, fleet, args.baseline, args.every, args.agents,
                                       idle, "bare")
                results["bare"]["attach"] = took
            finally:
                if fleet is not None:
                    fleet.stop()
                server.stop()
        variants = [("before", args.compare)] if args.compare else []
        for label, code in [*variants, ("router", None)]:
            results[label] = router_phase(args, workdir, label, code, attach_timeout)
    body = report(args, results)
    print(body)
    if args.results:
        command = "python bench/router_scale.py " + " ".join(argv if argv is not None
                                                              else sys.argv[1:])
        write_section(args.results, HEADING, command, body, NOTES)
    return 0


NOTES = """\
RSS per agent: (RSS at the end - RSS before any agent) / agents. Round trips: a HEARTBEAT
sent by a simulated agent to its answer, timed by the agents' processes (which share the
2 cores with the server: their own delay is in both servers' figures). CPU: the server
process's user + system time (all threads) over the steady run, % of one core.

Where a connection's memory goes (libzmq 4.3.5, the same in the bare ROUTER and the router):
each direction's pipe is a queue of 64-byte message slots allocated 256 at a time (16 KiB),
and keeps one spare block once it has turned over; the router sees three frames per message
each way, so a connection's pipes touch about 64 B x 3 x 2 a second at one heartbeat a
second until each holds two blocks (64 KiB), then stay there: RSS climbs for the first
minutes of a run, then levels off. Add the decoder's receive buffer (8 KiB and its
reference counts) and the encoder's (8 KiB): some 90 KiB per connection carrying traffic,
about 30 KiB for an idle one. The router's own Python state per agent (its Peer, envelopes,
clone record) is about 2 KiB."""


def report(args, results: dict) -> str:
    b = results.get("bare")
    names = [n for n in ("before", "router") if n in results]
    head = "| | bare ROUTER | " + " | ".join(
        f"router{' (before)' if n == 'before' else ''} | ratio" for n in names) + " |"
    rows = [head, "|---" * (2 + 2 * len(names)) + "|"]

    def row(label, fn, unit):
        bv = fn(b) if b else None
        cells = [f"{bv:.1f}{unit}" if bv is not None else ""]
        for n in names:
            v = fn(results[n])
            cells += [f"{v:.1f}{unit}", f"{v / bv:.2f}x" if bv else ""]
        rows.append(f"| {label} | " + " | ".join(cells) + " |")

    row("attach (s)", lambda x: x.get("attach", float("nan")), "")
    row("RSS idle", lambda x: x["idle"] / MIB, " MiB")
    row("RSS at reference", lambda x: x["ref"] / MIB, " MiB")
    row("RSS at end", lambda x: x["end"] / MIB, " MiB")
    row("RSS per agent", lambda x: x["per_agent"] / 1024, " KiB")
    if b:                       # the router's RSS when it had run as long as the bare ROUTER
        span = b["samples"][-1]["t"]

        def matched(x):
            s = min(x["samples"], key=lambda s: abs(s["t"] - span))
            return (s["rss"] - x["idle"]) / args.agents / 1024
        row(f"RSS per agent at {span:.0f} s", matched, " KiB")
    row("heartbeat p50", lambda x: x["rtt"].pct(50), " ms")
    row("heartbeat p99", lambda x: x["rtt"].pct(99), " ms")
    row("heartbeat max", lambda x: x["rtt"].max(), " ms")
    row("CPU", lambda x: x["cpu"], " %")
    lines = [f"{args.agents} agents (processes of {args.per_process}), heartbeat every "
             f"{args.interval:g} s; bare ROUTER {args.baseline:g} s, router "
             f"{args.minutes:g} min.", "", *rows, ""]
    for n in names:
        r = results[n]
        drift = (r["end"] - r["ref"]) / r["ref"] * 100
        series = " ".join(f"{s['rss'] / MIB:.0f}"
                          for s in r["samples"][::max(1, len(r["samples"]) // 12)])
        lines.append(f"{n}: RSS at {r['ref_t']:.0f} s {r['ref'] / MIB:.1f} MiB, at the end "
                     f"{r['end'] / MIB:.1f} MiB: {drift:+.1f} % (target within 10 %); over "
                     f"the run (MiB): {series}.")
        if "storm" in r:
            s = r["storm"]
            lines.append(f"{n} restarted: {s['attached']} of {args.agents} attached again "
                         f"{s['from_ready']:.1f} s after the new router was ready "
                         f"({s['from_stop']:.1f} s after SIGTERM; target 15 s); attached "
                         f"agents' heartbeats meanwhile: {s['rtt'].summary()} (target p99 "
                         f"< 100 ms).")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
