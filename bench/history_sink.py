"""History sink throughput against the router's relay rate, measured in the same run.

Every role in its own process on tcp://127.0.0.1: ``--senders`` agent DEALERs send STATS (8
metrics, about 200 B bodies, the bulk of a fleet's traffic) as fast as they can to a real
``fleetwatch router`` that routes STATS to the history sink type. Rounds alternate between
two consumers of the router's history PUSH:

- *counter*: a PULL that only counts frames (relay.py's counter): the rate at which the
  router relays this traffic, the sink's target;
- *sink*: a real ``fleetwatch sink history`` (the common loop's raw hook: envelope and body
  checks without decoding, sinks/history/lines.py; one write per batch into LAKE/landing/,
  fsynced within a second as nothing here is ACKed): its rate is lines landed / (last
  batch's ``received`` - first batch's), read back from the landing files.

The consumer runs on the last CPU, the router and the senders on the others (with 2 cores:
one each), in both variants. The ratio sink / counter (medians) is the figure: 1.0 (less
the noise between rounds) with no line missing means the sink keeps up with a router at
full rate. A sink that does not keep up makes the router drop (counted), which the table
shows as lines missing.

    python bench/history_sink.py [--rounds 3] [--senders 2] [--messages 200000]
                                 [--workdir DIR] [--results bench/RESULTS.md]
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

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from relay import counter, pin, pin_process  # noqa: E402  (bench/relay.py)
from results import write_section  # noqa: E402  (bench/results.py)

HEADING = "## History sink"
METRICS = {f"cpu{i}.percent": 12.5 + i for i in range(8)}


def sender(endpoint: str, uuid: str, count: int, ready, go, cpus=None) -> None:
    pin(cpus)
    import zmq
    import zmq.backend

    from agent.links import connection_id
    from fleetwatch import protocol
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.routing_id = connection_id()
    sock.sndhwm = 0
    sock.connect(endpoint)
    sock.send_multipart(protocol.encode(protocol.make("HELLO", uuid, hostname="bench",
                                                       heartbeat=60.0)))
    assert sock.poll(10_000), "no WELCOME"
    sock.recv_multipart()
    # every message its own msg_id: the sink drops repeated ids before writing
    msgs = [protocol.encode(protocol.make("STATS", uuid, hostname=f"host-{uuid}",
                                          metrics=METRICS)) for _ in range(count)]
    send, more = sock.send, zmq.SNDMORE
    ready.set()
    go.wait()
    for sig, type_, body in msgs:
        send(sig, more)
        send(type_, more)
        send(body)
    sock.close(linger=-1)
    ctx.term()


class Router:
    def __init__(self, workdir: Path):
        import yaml
        ready = workdir / "router.ready.json"
        ready.unlink(missing_ok=True)
        cfg = {"id": "bench-router",
               "bind": {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                        "tail": "tcp://127.0.0.1:*", "sinks": {"history": "tcp://127.0.0.1:*"}},
               "routes": {"STATS": ["history"]},
               "ready_file": str(ready), "stats_interval": 3600.0, "log_level": "WARNING",
               "limits": {"rate": 1e9, "burst": 1e9, "hellos_per_second": 1e6}}
        (workdir / "router.yaml").write_text(yaml.safe_dump(cfg))
        self.log = open(workdir / "router.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", "router", "--config",
                                      str(workdir / "router.yaml")], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not ready.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"router did not start; see {workdir / 'router.log'}")
            time.sleep(0.02)
        self.endpoints = json.loads(ready.read_text())["endpoints"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        self.log.close()


class Sink:
    def __init__(self, workdir: Path, router: Router, batch: int):
        import yaml
        self.lake = workdir / "lake"
        cfg = {"routers": [router.endpoints["control"]], "name": "bench-history",
               "batch": batch, "hello_interval": 0.1, "stats_interval": 3600.0,
               "history": {"lake": str(self.lake)}}
        path = workdir / "sink.yaml"
        path.write_text(yaml.safe_dump(cfg))
        self.log_path = workdir / "sink.log"
        self.log_path.write_text("")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen([sys.executable, "-m", "fleetwatch", "sink", "history",
                                      "--config", str(path)], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while "welcomed us" not in self.log_path.read_text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"sink did not start; see {self.log_path}")
            time.sleep(0.05)
        time.sleep(0.2)          # its PULL connects right after the WELCOME

    def landed(self) -> tuple[int, float, float]:
        """Lines landed, first and last batch's ``received``."""
        n, first, last = 0, float("inf"), 0.0
        for p in (self.lake / "landing").glob("*.jsonl*"):
            for line in p.read_bytes().splitlines():
                try:
                    received = json.loads(line)["received"]
                except (ValueError, KeyError):
                    continue
                n += 1
                first, last = min(first, received), max(last, received)
        return n, first, last

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(15)
        self.log.close()


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_round(kind: str, senders: int, per_sender: int, workdir: Path, batch: int):
    """One round: returns (msg/s, messages consumed, messages sent, the sink's CPU seconds
    from go to its last line, or None for the counter)."""
    for old in workdir.glob("lake/landing/*"):
        old.unlink()
    router = Router(workdir)
    cpus = sorted(os.sched_getaffinity(0))
    # the consumer (counter or sink) gets the last CPU, the router and senders the others:
    # as in production, where the sink is not on the router's cores
    own, load = ({cpus[-1]}, set(cpus[:-1])) if len(cpus) > 1 else (None, None)
    if load:
        pin_process(router.proc.pid, load)
    expected = senders * per_sender
    sink = count = None
    try:
        if kind == "sink":
            sink = Sink(workdir, router, batch)
            if own:
                pin_process(sink.proc.pid, own)
        else:
            parent, child = mp.Pipe()
            count = mp.Process(target=counter, args=(router.endpoints["sinks"]["history"],
                                                     expected, 3, child, None, own))
            count.start()
            assert parent.poll(15) and parent.recv() == "ready", "counter did not connect"
        go, readies = mp.Event(), [mp.Event() for _ in range(senders)]
        procs = [mp.Process(target=sender, args=(router.endpoints["agents"], f"bench-{i:03d}",
                                                 per_sender, readies[i], go, load))
                 for i in range(senders)]
        for p in procs:
            p.start()
        for ev in readies:
            assert ev.wait(15), "sender did not start"
        cpu = cpu_seconds(sink.proc.pid) if sink else None
        go.set()
        for p in procs:
            p.join(120)
        if kind == "counter":
            assert parent.poll(120), "counter never finished"
            n, first, last = parent.recv()
            count.join(10)
        else:
            previous, stable_since = -1, time.monotonic()
            while time.monotonic() - stable_since < 1.5:      # nothing new for 1.5 s
                time.sleep(0.3)
                n = sink.landed()[0]
                if n != previous:
                    previous, stable_since = n, time.monotonic()
                if n >= expected:
                    break
            cpu = cpu_seconds(sink.proc.pid) - cpu
            sink.stop()
            n, first, last = sink.landed()
        rate = (n - 1) / (last - first) if n > 1 and last > first else 0.0
        return rate, n, expected, cpu
    finally:
        if sink and sink.proc.poll() is None:
            sink.stop()
        router.stop()


def summary(rates: list[float]) -> str:
    return (f"{min(rates) / 1e3:.1f}k / {statistics.median(rates) / 1e3:.1f}k / "
            f"{max(rates) / 1e3:.1f}k")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--senders", type=int, default=2)
    ap.add_argument("--messages", type=int, default=200_000, help="STATS per round")
    ap.add_argument("--batch", type=int, default=500, help="the sink's batch setting")
    ap.add_argument("--workdir", help="where the router's sockets and the sink's lake go "
                                      "(default: the system's temporary directory)")
    ap.add_argument("--results", help="write the figures into this markdown file")
    args = ap.parse_args(argv)
    mp.set_start_method("fork")
    per_sender = args.messages // args.senders
    rates = {"counter": [], "sink": []}
    ratios, missing, per_line = [], 0, []
    with tempfile.TemporaryDirectory(prefix="fw-bench-history-", dir=args.workdir) as tmp:
        for i in range(args.rounds):
            got = {}
            for kind in (("counter", "sink") if i % 2 == 0 else ("sink", "counter")):
                rate, n, expected, cpu = run_round(kind, args.senders, per_sender, Path(tmp),
                                                   args.batch)
                rates[kind].append(rate)
                got[kind] = rate
                busy = ""
                if kind == "sink":
                    missing += expected - n
                    per_line.append(cpu / n if n else float("inf"))
                    busy = f", {per_line[-1] * 1e6:.1f} us CPU per line"
                print(f"  round {i + 1} {kind:<7} {rate / 1e3:7.1f}k msg/s ({n}/{expected}"
                      f"{busy})", flush=True)
            ratios.append(got["sink"] / got["counter"] if got["counter"] else 0.0)
    ratio = statistics.median(rates["sink"]) / statistics.median(rates["counter"])
    cost = statistics.median(per_line)
    capacity = 1 / cost / statistics.median(rates["counter"]) if cost else 0.0
    table = "\n".join([
        "| STATS per round | router relay rate (to a counting PULL) min / median / max | "
        "history sink: lines landed per s | sink / router (medians) | per round | "
        "lines missing (router drops) | sink CPU per line (median) | capacity / router |",
        "|---|---|---|---|---|---|---|---|",
        f"| {args.messages} ({args.senders} senders) | {summary(rates['counter'])} | "
        f"{summary(rates['sink'])} | **{ratio:.2f}** | {min(ratios):.2f}-{max(ratios):.2f} | "
        f"{missing} | {cost * 1e6:.1f} us | {capacity:.2f} |"])
    print(f"\n{table}")
    if args.results:
        command = "python bench/history_sink.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        write_section(Path(args.results), HEADING, command.strip(), table, NOTES)
    return 0


NOTES = """\
Method: see the docstring of bench/history_sink.py. The sink runs the common loop
(sinks/loop.py) with its default batch of 500 through the loop's raw hook: per wake-up it
reads up to 500 messages frame by frame (sinks/receiver.py: three `recv` and one RCVMORE read
per message), checks each ENVELOPE (cached per frame) and each body only as far as a landing
line needs (sinks/history/lines.py: no CR or LF, one `{...}` balanced outside its strings, the
stamped uuid; bytes methods, the json module's C scanner only for a body with escapes), and
writes the batch's lines with one `write`. Nothing here is ACKed, so the lines are fsynced at
most once a second. *Sink CPU per line*: the sink process's CPU time (its loop and libzmq's
I/O thread, both on the sink's core) from go to its last line, per line landed; *capacity /
router*: one over that, divided by the router's median rate (what one sink on one core could
take). Once a sink falls behind, the router's PUSH queue (10,000) and the sink's PULL queue
(10,000) fill and the router drops the rest, counted: the lines missing.

Reading the figures: a sink that drains everything lands at the rate the router relays to it
in its own round, so the ratio of medians measures the router's variance between rounds as
much as the sink (the machine may be shared with other work); *lines missing* says whether
the sink kept up (0: it landed every line the router relayed; the sink that decoded every
body, 2026-11-22, missed 460,000 of 600,000 at a ratio of 0.08), and *capacity / router* how
much room is left on the sink's core.

How much the ratio of medians moves from run to run (2026-11-24, idle machine, 200,000
STATS per round, no line missing in any run): 3 rounds 0.98 and 0.98; 5 rounds 1.00 and
0.98 (the table above); with the lake on tmpfs (`--workdir /dev/shm`: no disk writeback
competing for the 2 cores) 3 rounds 1.00, 5 rounds 1.00. Single rounds range from 0.96 to
1.03. A sink that keeps up cannot land faster than the router relays to it, so the figure
is 1.0 less the noise between rounds; what shows that the sink is not the bottleneck is
that it lands every line (none missing) with a quarter of its core to spare (capacity /
router 1.35).

Where the time went, and what changed (per message, one process reading a filled PULL of
100,000 such STATS): decoding the body (fleetwatch/protocol.py `decode_relayed`) 21-28 us,
the json C scanner alone 4-7 us, the quick look at the bytes 40 % of the scanner's time (the
whole check and the line 2.1-2.6 us); reading the frames 1.7-2.3 us with one RCVMORE read
per message, 3.1-3.6 us with one per frame (`recv_multipart` was 10 % of the old profile);
the write about 1 us.
An `fdatasync` per batch cost up to 8 us per line when other work kept the disk busy (4 ms
each): lines nobody waits for are now fsynced within a second and before their file closes,
a batch holding NOTIFY or REGISTER still before its ACKs (sinks/history/landing.py)."""


if __name__ == "__main__":
    sys.exit(main())
