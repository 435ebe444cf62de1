"""Sites (SPEC 4.10): a site router's relay to its upstream, and the extra NOTIFY round trip
through one site level, each against a central router in the same run.

Throughput, in alternating rounds on tcp://127.0.0.1, every role in its own process (the
senders and the counter of bench/relay.py): 4 agent DEALERs send 200 B NOTIFYs as fast as
they can to

- *central*: a real ``fleetwatch router`` relaying them to its alerting PUSH -> a PULL that
  counts (bench/relay.py's router round);
- *site*: a real site router (``upstream:``) relaying them over its uplink DEALER -> a fake
  central router (a ROUTER that answers the link's HELLO and HEARTBEATs and counts the rest),
  so that the figure is the site router's alone;
- *through*: a real site router -> a real central router (``bind.sites``) -> its alerting
  PUSH -> the PULL counter: the whole path, the central router relaying a site's traffic.

The figure of a round is messages counted / (last - first arrival); the ratio is site /
central of the medians.

Round trip at a fixed rate (1,000/s by default): one DEALER playing an agent sends NOTIFYs
and times each until its ACK, through a real central router and a real alerting sink
(*direct*), or through a real site router in front of them (*site*: agent -> site -> centre
-> sink, and the ACK back the same way); rounds alternate; p50 and p99 of each, and the
difference (the site level's cost).

    .venv/bin/python bench/site.py [--rounds 4] [--rate 1000] [--seconds 10]
        [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

HEADING = "## Sites"
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from notify_rtt import start, stop, time_notifies  # noqa: E402  (bench/notify_rtt.py)
from relay import RouterRelay, counter, sender, summary  # noqa: E402  (bench/relay.py)
from results import percentile, wait, write_section  # noqa: E402  (bench/results.py)

LOOSE = {"rate": 1e9, "burst": 1e9, "hellos_per_second": 1e6}
SITE = "site-b"


# ---------------------------------------------------------------- throughput

def fake_centre(conn, expected: int) -> None:
    """A central router's ``sites`` ROUTER reduced to what a site needs: WELCOME to the
    link's HELLO, HEARTBEAT to its HEARTBEATs; every other message counted (4 frames each:
    routing id, SIGNATURE, ENVELOPE, BODY), frame by frame like bench/relay.py's counter."""
    import zmq

    from fleetwatch import protocol
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.rcvhwm = 100_000
    sock.bind("tcp://127.0.0.1:*")
    conn.send(sock.last_endpoint.decode())
    own_hello, own_beat = f"HELLO/{SITE}/{SITE}".encode(), f"HEARTBEAT/{SITE}/{SITE}".encode()

    def answer(rid: bytes, type_: str) -> None:
        msg = (protocol.make("WELCOME", "centre-b", router="centre-b", routers=[])
               if type_ == "WELCOME" else protocol.make("HEARTBEAT", "centre-b"))
        sock.send_multipart([rid, *protocol.encode_down(msg)])

    recv, noblock = sock.recv, zmq.NOBLOCK
    counted, first, last, ready = 0, 0.0, 0.0, False
    idle_since = None
    deadline = time.monotonic() + 120
    while counted < expected and time.monotonic() < deadline:
        try:
            rid = recv(noblock)
        except zmq.Again:
            now = time.perf_counter()
            if counted:
                idle_since = idle_since or now
                if now - idle_since > 0.5:        # the site dropped the rest
                    break
            time.sleep(0.0005)
            continue
        idle_since = None
        recv()
        envelope = recv()
        recv()
        if envelope == own_hello:
            answer(rid, "WELCOME")
            if not ready:
                ready = True
                conn.send("ready")
            continue
        if envelope == own_beat:
            answer(rid, "HEARTBEAT")
            continue
        counted += 1
        last = time.perf_counter()
        first = first or last
    conn.send((counted, first, last))
    sock.close(0)
    ctx.term()


def router(workdir: Path, name: str, bind: dict, **extra) -> tuple[subprocess.Popen, dict]:
    ready = workdir / f"{name}.ready.json"
    ready.unlink(missing_ok=True)
    cfg = {"id": name, "ready_file": str(ready), "stats_interval": 3600.0,
           "log_level": "WARNING", "limits": dict(LOOSE),
           "bind": {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                    "tail": "tcp://127.0.0.1:*", **bind}, **extra}
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    proc = start(workdir, name, "router", "--config", str(path))
    wait(lambda: ready.exists() or proc.poll() is not None, 15, f"{name} ready")
    if proc.poll() is not None:
        raise SystemExit(f"{name} did not start; see {workdir / (name + '.log')}")
    return proc, json.loads(ready.read_text())["endpoints"]


def throughput_round(kind: str, senders: int, per_sender: int, workdir: Path) -> tuple[float, int]:
    """One round: messages/s at the counter, and how many it counted."""
    expected = senders * per_sender
    parent, child = mp.Pipe()
    if kind == "central":
        relay = RouterRelay(workdir)
        procs, agents = [relay.proc], relay.endpoints["agents"]
        count = mp.Process(target=counter, args=(relay.endpoints["sinks"]["alerting"],
                                                 expected, relay.frames, child))
        count.start()
    elif kind == "through":
        centre, eps = router(workdir, "centre-b", {"sinks": {"alerting": "tcp://127.0.0.1:*"},
                                                   "sites": "tcp://127.0.0.1:*"},
                             routes={"NOTIFY": ["alerting"]})
        count = mp.Process(target=counter, args=(eps["sinks"]["alerting"], expected, 3, child))
        count.start()
        proc, site_eps = router(workdir, SITE, {"sinks": {}}, upstream=[eps["sites"]],
                                site={"interval": 0.5, "buffer_messages": 1_000_000})
        procs, agents = [proc, centre], site_eps["agents"]
        wait(lambda: uplink_up(site_eps["control"]), 15, "the site's uplink")
    else:
        count = mp.Process(target=fake_centre, args=(child, expected))
        count.start()
        assert parent.poll(15), "the fake centre did not start"
        centre = parent.recv()
        proc, eps = router(workdir, SITE, {"sinks": {}}, upstream=[centre],
                           site={"interval": 0.5, "buffer_messages": 1_000_000})
        procs, agents = [proc], eps["agents"]
    try:
        assert parent.poll(15) and parent.recv() == "ready", f"{kind}: counter not ready"
        go = mp.Event()
        readies = [mp.Event() for _ in range(senders)]
        workers = [mp.Process(target=sender, args=(agents, f"bench-{i:04d}", per_sender, 200,
                                                   True, readies[i], go))
                   for i in range(senders)]
        for w in workers:
            w.start()
        for ev in readies:
            assert ev.wait(15), "sender did not start"
        go.set()
        assert parent.poll(180), "counter never finished"
        n, first, last = parent.recv()
        for w in workers + [count]:
            w.join(10)
        return ((n - 1) / (last - first) if n > 1 and last > first else 0.0), n
    finally:
        stop(*procs)


def uplink_up(control: str) -> bool:
    """Whether the site router at ``control`` has its uplink up (its WELCOME tells the
    centre's durable routes, not the defaults it starts with)."""
    import zmq

    from fleetwatch import protocol
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(control)
    try:
        sock.send_multipart(protocol.encode_control(protocol.make(
            "HELLO", "bench", hostname="bench", heartbeat=1.0, role="cli")))
        if not sock.poll(1000):
            return False
        welcome = protocol.decode(sock.recv_multipart())
        return welcome.get("durable", {}).get("NOTIFY") == ["alerting"]
    finally:
        sock.close()


# ---------------------------------------------------------------- round trip

def rtt_round(kind: str, root: Path, rate: float, seconds: float) -> list[float]:
    """NOTIFY -> ACK round trips (seconds) through a central router and an alerting sink,
    with a site router in front of them when ``kind`` is ``site``."""
    sinks = {t: "tcp://127.0.0.1:*" for t in ("registry", "alerting")}
    centre, eps = router(root, "centre-b", {"sinks": sinks, "sites": "tcp://127.0.0.1:*"})
    procs = [centre]
    try:
        (root / "sink.yaml").write_text(yaml.safe_dump({
            "routers": [eps["control"]], "state_url": f"sqlite:///{root / 'state.db'}",
            "hello_interval": 0.2}))
        procs.append(start(root, "sink", "sink", "alerting", "--config", str(root / "sink.yaml")))
        agents = eps["agents"]
        if kind == "site":
            site, site_eps = router(root, SITE, {"sinks": {}}, upstream=[eps["sites"]],
                                    site={"interval": 0.5})
            procs.append(site)
            agents = site_eps["agents"]
        return time_notifies(agents, rate, seconds, root)
    finally:
        stop(*procs)


# ---------------------------------------------------------------- main

NOTES = """\
Method: throughput as bench/relay.py (4 sender processes, 200 B NOTIFYs as fast as they go,
a PULL counter that counts frames and naps when idle), rounds alternating *central* (a
router relaying to its alerting PUSH) and *site* (a site router relaying over its uplink
DEALER to a fake central ROUTER that only answers the link and counts) and *through* (a site
router and a real central router, counted at the central router's alerting PUSH). The site
router relays through the uplink's per-type sender (router/uplink.py: three Python calls a
message instead of three libzmq sends) and its DEALER. Round trip: one DEALER at a fixed
rate, NOTIFY -> ACK through a real central router and a real alerting sink (committed to
SQLite), with or without a real site router in front; rounds alternate; the site level's
cost is the difference of the medians.
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds per variant")
    ap.add_argument("--senders", type=int, default=4)
    ap.add_argument("--messages", type=int, default=200_000, help="messages per round")
    ap.add_argument("--rate", type=float, default=1000.0, help="NOTIFYs/s of the round trip")
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds per round trip round")
    ap.add_argument("--results", help="write the figures into this markdown file")
    args = ap.parse_args(argv)
    mp.set_start_method("fork")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    per_sender = max(1, args.messages // args.senders)
    rates: dict[str, list[float]] = {"central": [], "site": [], "through": []}
    rtts: dict[str, list[tuple[float, float]]] = {"direct": [], "site": []}
    with tempfile.TemporaryDirectory(prefix="fw-bench-site-") as tmp:
        for i in range(args.rounds):
            kinds = ("central", "site", "through")
            for kind in (kinds if i % 2 == 0 else kinds[::-1]):
                rate, n = throughput_round(kind, args.senders, per_sender, Path(tmp))
                rates[kind].append(rate)
                print(f"  round {i + 1} {kind:<7} {rate / 1e3:7.1f}k msg/s "
                      f"({n}/{args.senders * per_sender})", flush=True)
        for i in range(args.rounds):
            for kind in (("direct", "site") if i % 2 == 0 else ("site", "direct")):
                with tempfile.TemporaryDirectory(prefix="fw-rtt-site-") as root:
                    got = rtt_round(kind, Path(root), args.rate, args.seconds)
                p50, p99 = percentile(got, 50) * 1000, percentile(got, 99) * 1000
                rtts[kind].append((p50, p99))
                print(f"  round {i + 1} {kind:<7} n={len(got)} p50 {p50:.2f} ms "
                      f"p99 {p99:.2f} ms", flush=True)
    ratio = statistics.median(rates["site"]) / statistics.median(rates["central"])
    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
           for k, v in rtts.items()}
    table = "\n".join([
        "| figure | central router | site router | site / central |",
        "|---|---|---|---|",
        f"| relay msg/s, 200 B (min / median / max) | {summary(rates['central'])} | "
        f"{summary(rates['site'])} | {ratio:.2f} |",
        f"| site router -> central router -> sink, 200 B | | {summary(rates['through'])} | "
        f"{statistics.median(rates['through']) / statistics.median(rates['central']):.2f} |",
        f"| NOTIFY round trip at {args.rate:.0f}/s, p50 | {med['direct'][0]:.2f} ms | "
        f"{med['site'][0]:.2f} ms | +{med['site'][0] - med['direct'][0]:.2f} ms |",
        f"| NOTIFY round trip at {args.rate:.0f}/s, p99 | {med['direct'][1]:.2f} ms | "
        f"{med['site'][1]:.2f} ms | +{med['site'][1] - med['direct'][1]:.2f} ms |"])
    print(f"\n{args.rounds} rounds each, medians\n{table}")
    if args.results:
        command = "python bench/site.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_section(Path(args.results), HEADING, command.strip(), table, NOTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
