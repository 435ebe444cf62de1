"""What it costs a console to follow the routers' tail (for bench/web.py): a real router, a
sender of HEARTBEATs and RESULTs on HELLOed agent connections at a fixed rate, and a
consumer process subscribed to both types on the router's tail that receives and decodes
each message (:func:`fleetwatch.protocol.decode_tail`) and reports its own CPU time
(every thread: libzmq's I/O thread too) per message.

The console would do this work once, whatever the number of open pages; pushing each
change to the pages (server-sent events) is on top, and not measured here.

:func:`measure_health` measures what the console does follow: the health page's STATS
(:class:`web.health.Health`, the console's own code, in a process of its own), fed agents'
STATS at the rate of the fleet's (every agent each ``stats_interval``, 10 s), one agent in a
hundred with a drop counter not 0 (decoded and kept; the others are passed over undecoded).
"""

from __future__ import annotations

import json
import random
import select
import subprocess
import sys
import time
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from fleetwatch import protocol  # noqa: E402

#: agent connections the messages are spread over
AGENTS = 100
#: what both consumers start with: argv ENDPOINT COUNT ROOT, and their own CPU time
PROLOGUE = r"""
import json, resource, sys, time
sys.path.insert(0, sys.argv[3])

def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

endpoint, expected = sys.argv[1], int(sys.argv[2])
"""
#: the consumer: prints "ready", "first" (the sender's warm-up STATS arrived: the
#: subscription is in place), then one JSON line
CONSUMER = PROLOGUE + r"""
import zmq
from fleetwatch import protocol
ctx = zmq.Context()
sub = ctx.socket(zmq.SUB)
sub.linger = 0
sub.rcvhwm = 0
for topic in (b"HEARTBEAT/", b"RESULT/", b"STATS/"):
    sub.subscribe(topic)
sub.connect(endpoint)
print("ready", flush=True)
if not sub.poll(30000):
    print(json.dumps({"error": "no warm-up message on the tail in 30 s"}), flush=True)
    sys.exit(1)
print("first", flush=True)
n, bad, started, t0 = 0, 0, None, None
while n < expected and sub.poll(3000):
    frames = sub.recv_multipart()
    if frames[0].startswith(b"STATS/"):
        continue                                  # the warm-up
    if started is None:
        started, t0 = cpu(), time.perf_counter()  # from the first measured message
    try:
        protocol.decode_tail(frames)
        n += 1
    except protocol.ProtocolError:
        bad += 1
print(json.dumps({"received": n, "bad": bad, "cpu": cpu() - (started or cpu()),
                  "wall": time.perf_counter() - (t0 or time.perf_counter())}), flush=True)
sub.close(0)
ctx.term()
"""


#: the health consumer: prints "ready", "first" (the sender's warm-up STATS arrived), then
#: one JSON line
HEALTH = PROLOGUE + r"""
from web.health import Health
health = Health(lambda: [endpoint])
health.start()
print("ready", flush=True)
deadline = time.monotonic() + 30
while health.received == 0:                 # (a counter the thread moves: polled)
    if time.monotonic() > deadline:
        print(json.dumps({"error": "no warm-up STATS on the tail in 30 s"}), flush=True)
        sys.exit(1)
    time.sleep(0.01)
print("first", flush=True)
base, started, t0 = health.received, cpu(), time.perf_counter()
seen, still = base, time.monotonic()
while health.received - base < expected and time.monotonic() - still < 3:
    time.sleep(0.05)
    if health.received != seen:
        seen, still = health.received, time.monotonic()
print(json.dumps({"received": health.received - base, "bad": health.bad,
                  "cpu": cpu() - started, "wall": time.perf_counter() - t0,
                  "kept": health.snapshot()["agents_total"]}), flush=True)
health.stop()
"""


def tail_rate(hosts: int, checks_per_host: int, heartbeat: float = 10.0,
              check_interval: float = 60.0) -> tuple[float, float]:
    """(HEARTBEATs, RESULTs) a second on the tail of a fleet of ``hosts``."""
    return hosts / heartbeat, hosts * checks_per_host / check_interval


def _hello(ctx: zmq.Context, endpoint: str, count: int, timeout: float = 20.0) -> list:
    socks = []
    for n in range(count):
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.connect(endpoint)
        socks.append(sock)
    waiting = dict(enumerate(socks))
    deadline = time.monotonic() + timeout
    while waiting:
        if time.monotonic() > deadline:
            raise SystemExit(f"tail: {len(waiting)} agents not welcomed in {timeout:g} s")
        for n, sock in list(waiting.items()):
            sock.send_multipart(protocol.encode(protocol.make(
                "HELLO", f"tail-{n}", hostname=f"tail-{n}", heartbeat=10.0, role="agent")))
        poll_until = time.monotonic() + 1.0
        while waiting and time.monotonic() < poll_until:
            for n, sock in list(waiting.items()):
                while sock.poll(0):
                    if protocol.decode(sock.recv_multipart()).type == "WELCOME":
                        waiting.pop(n, None)
            if waiting:
                zmq.select([s for s in waiting.values()], [], [], 0.05)
    return socks


def _messages(count: int, beats: float, results: float, seed: int = 19) -> list:
    """(agent, frames) of ``count`` messages, HEARTBEATs and RESULTs in the ratio of the
    rates, encoded before the clock starts."""
    rnd = random.Random(seed)
    share = results / (beats + results)
    out = []
    for i in range(count):
        agent = i % AGENTS
        uuid = f"tail-{agent}"
        if rnd.random() < share:
            status = 0 if rnd.random() > 0.02 else 2
            msg = protocol.make("RESULT", uuid, command_id=f"{i:032x}", plugin="check_load",
                                status=status, output=f"OK - load average {rnd.random():.2f}",
                                long_output="", perfdata=[{"label": "load1", "value": 0.5,
                                                           "warn": "4", "crit": "8"}],
                                slot=time.time(), started=time.time(), duration=0.012)
        else:
            msg = protocol.make("HEARTBEAT", uuid, interval=10.0)
        out.append((agent, protocol.encode(msg)))
    return out


def _stats(count: int, dropping: float = 0.01, seed: int = 19) -> list:
    """(agent, frames) of ``count`` agents' STATS as the agent makes them (host metrics and
    the agent's own counters, agent/selfstats.py); ``dropping`` of the agents have dropped
    from their spools (a counter: in every STATS of theirs)."""
    from agent.selfstats import COUNTERS
    rnd = random.Random(seed)
    host = [f"cpu.{k}" for k in ("user", "system", "idle", "iowait", "steal")] + \
        [f"mem.{k}" for k in ("total", "available", "used", "percent")] + \
        [f"load.{k}" for k in ("1", "5", "15")] + \
        [f"disk.{m}.{k}" for m in ("root", "var") for k in ("total", "used", "percent")] + \
        [f"net.eth0.{k}" for k in ("bytes_sent", "bytes_recv", "errin", "errout")]
    out = []
    for i in range(count):
        agent = i % AGENTS
        metrics = {k: round(rnd.uniform(0, 100), 2) for k in host}
        metrics.update(dict.fromkeys(COUNTERS, 0))
        metrics.update({"agent.spool.size": 0, "agent.spool.superseded": 0,
                        "agent.spool.write_errors": 0, "agent.routers.alive": 1,
                        "agent.uptime": 86400.0,
                        "agent.spool.dropped": 7 if agent < max(1, AGENTS * dropping) else 0})
        out.append((agent, protocol.encode(protocol.make(
            "STATS", f"tail-{agent}", hostname=f"tail-{agent}", metrics=metrics))))
    return out


def measure_health(agents_endpoint: str, tail_endpoint: str, hosts: int, seconds: float,
                   stats_interval: float = 10.0, floor: float = 100.0) -> dict:
    """Send agents' STATS at the rate of ``hosts`` agents (at least ``floor`` a second) for
    ``seconds`` to :class:`web.health.Health` in a process of its own; its figures."""
    rate = max(hosts / stats_interval, floor)
    count = max(50, int(rate * seconds))
    got = _feed(HEALTH, agents_endpoint, tail_endpoint, _stats(count), rate)
    return {"rate": rate, "wanted": hosts / stats_interval, "sent": count,
            "received": got["received"], "kept": got["kept"],
            "per_message": got["cpu"] / max(1, got["received"]), "cpu": got["cpu"],
            "wall": got["wall"]}


def measure(agents_endpoint: str, tail_endpoint: str, hosts: int, checks_per_host: int,
            seconds: float, floor: float = 100.0) -> dict:
    """Send the tail's mix at its rate at ``hosts`` (at least ``floor`` a second) for
    ``seconds``; the consumer's figures and the rates."""
    beats, results = tail_rate(hosts, checks_per_host)
    rate = max(beats + results, floor)
    count = max(50, int(rate * seconds))
    got = _feed(CONSUMER, agents_endpoint, tail_endpoint, _messages(count, beats, results), rate)
    received = max(1, got["received"] - 1)       # timed from the first one received
    return {"heartbeats": beats, "results": results, "rate": rate, "sent": count,
            "received": got["received"], "sent_for": got["sent_for"],
            "per_message": got["cpu"] / received, "cpu": got["cpu"], "wall": got["wall"]}


def _feed(script: str, agents_endpoint: str, tail_endpoint: str, frames: list,
          rate: float) -> dict:
    """Start the consumer ``script`` on the tail, send ``frames`` at ``rate`` a second through
    the router's agent endpoint once it has seen a warm-up STATS; what it printed, with
    ``sent_for`` (seconds the sending took)."""
    count = len(frames)
    ctx = zmq.Context()
    consumer = subprocess.Popen([sys.executable, "-c", script, tail_endpoint, str(count),
                                 str(ROOT)], stdout=subprocess.PIPE, text=True)
    socks = []
    try:
        if consumer.stdout.readline().strip() != "ready":
            raise SystemExit(f"tail consumer exited {consumer.wait(10)}")
        socks = _hello(ctx, agents_endpoint, AGENTS)
        warm = protocol.encode(protocol.make("STATS", "tail-0", metrics={"warm": 1.0}))
        deadline = time.monotonic() + 30
        while not select.select([consumer.stdout], [], [], 0.02)[0]:
            if time.monotonic() > deadline:
                raise SystemExit("tail: the consumer saw no warm-up message in 30 s")
            socks[0].send_multipart(warm)
        if consumer.stdout.readline().strip() != "first":
            raise SystemExit(f"tail consumer exited {consumer.wait(10)}")
        started = time.perf_counter()
        for i, (agent, msg) in enumerate(frames):
            due = started + i / rate
            while time.perf_counter() < due:            # pace; drain the router's answers
                for sock in socks:
                    while sock.poll(0):
                        sock.recv_multipart()
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(min(pause, 0.001))   # pacing a sender, not waiting for one
            socks[agent].send_multipart(msg)
        sent_for = time.perf_counter() - started
        line = consumer.stdout.readline()
        consumer.wait(30)
    finally:
        if consumer.poll() is None:
            consumer.kill()
            consumer.wait(10)
        consumer.stdout.close()
        for sock in socks:
            sock.close(0)
        ctx.term()
    got = json.loads(line) if line.strip() else {"error": "the consumer said nothing"}
    if "error" in got:
        raise SystemExit(f"tail: {got['error']}")
    return {**got, "sent_for": sent_for}
