"""How soon a device's linkDown trap turns its interface's check CRITICAL: from Net-SNMP's
``snmptrap`` starting to the poller's ``if_NODE`` RESULT, status 2, on the router's tail.

On 127.0.0.1 (tests/support: a real snmpd as the switch, a real router, the tail as
``fleetwatch tail`` reads it), an agent polls the switch every 60 s as its device and takes
its traps. Each round sends one linkDown of ``lo`` and waits for the CRITICAL RESULT, then
for the OK one of the poll the trap brings forward (the switch's ``lo`` is up), so that the
next round starts from OK. Baseline, the same rounds: Net-SNMP's own ``snmptrapd`` printing
the same trap (``snmptrap`` to it, from its start to the line on snmptrapd's output). Both
include ``snmptrap``'s own start (about 6 ms of a process).

    .venv/bin/python bench/snmp_trap.py [--traps 30] [--results bench/RESULTS.md] [--json]

Target: the interface CRITICAL within a second of the trap (issue 37), at the median and
the 95th percentile.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.append(str(Path(__file__).resolve().parent))
from results import percentile, write_section  # noqa: E402  (bench/results.py)

import zmq  # noqa: E402

from support.fleet import Fleet  # noqa: E402
from support.snmpd import COMMUNITY, Snmpd, find, free_udp_port  # noqa: E402
from support.snmptraps import LINK_DOWN, Sender, link_varbinds  # noqa: E402
from support.tail import Tail  # noqa: E402

HEADING = "## A device's trap to its interface's check"


def lo_index() -> int:
    return int(Path("/sys/class/net/lo/ifindex").read_text())


class Trapd:
    """Net-SNMP's trap daemon on ``port``, printing each trap it takes on a pseudo-terminal
    (on a pipe, its stdio would hold the lines)."""

    def __init__(self, root: Path, port: int):
        conf = root / "snmptrapd.conf"
        conf.write_text(f"authCommunity log {COMMUNITY}\n")
        (root / "trapd").mkdir()
        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            [find("snmptrapd"), "-f", "-C", "-c", str(conf), "-m", "", "-On", "-Lo", "-n",
             f"udp:127.0.0.1:{port}"], stdout=slave, stderr=slave,
            env={"SNMP_PERSISTENT_DIR": str(root / "trapd"), "PATH": "/usr/bin:/bin"})
        os.close(slave)
        self.seen = b""
        if not self.printed(b"NET-SNMP version", 10):
            raise SystemExit("snmptrapd did not start")

    def printed(self, word: bytes, timeout: float) -> bool:
        """Read its output until ``word`` appears after what was read before (False at the
        timeout)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [],
                                        max(0.0, deadline - time.monotonic()))
            if ready:
                self.seen += os.read(self.master, 65536)
                if word in self.seen:
                    self.seen = self.seen[self.seen.index(word) + len(word):]
                    return True
        return False

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        os.close(self.master)


def measure(traps: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="fw-trap-bench-"))
    fleet, ctx = Fleet(root), zmq.Context()
    switch = Snmpd(root / "snmpd").start()
    trapd = None
    try:
        secret = root / "community"
        secret.write_text(COMMUNITY + "\n")
        port, baseline_port = free_udp_port(), free_udp_port()
        router = fleet.router(sink_types=("registry",))
        tail = Tail(ctx, [router["endpoints"]["tail"]])
        fleet.agent([router], devices={
            "hosts": [{"name": "sw-bench", "address": "127.0.0.1", "interval": 60,
                       "snmp": {"port": switch.port, "community_file": str(secret)}}],
            "traps": {"listen": f"127.0.0.1:{port}", "communities_file": str(secret)}})

        def result(status: int):
            return lambda m: m.type == "RESULT" and m.get("plugin") == "if_lo" and \
                m.get("status") == status
        tail.next(result(0), 60, "the switch's first poll")
        sender = Sender(root / "sender", port)
        trapd = Trapd(root, baseline_port)
        baseline_sender = Sender(root / "sender-baseline", baseline_port)
        varbinds = link_varbinds(lo_index(), 1, 2)
        ours, theirs = [], []
        for _ in range(traps):
            started = time.monotonic()
            sent = sender.send(LINK_DOWN, varbinds, community=COMMUNITY)
            assert sent.returncode == 0, sent.stderr
            tail.next(result(2), 10, "the interface CRITICAL")
            ours.append(time.monotonic() - started)
            tail.next(result(0), 10, "the poll the trap brought forward")
            started = time.monotonic()
            baseline_sender.send(LINK_DOWN, varbinds, community=COMMUNITY)
            if not trapd.printed(b".1.3.6.1.6.3.1.1.5.3", 10):
                raise SystemExit("snmptrapd printed no trap")
            theirs.append(time.monotonic() - started)
        return {"traps": traps, "ours": ours, "baseline": theirs}
    finally:
        if trapd is not None:
            trapd.stop()
        fleet.stop_all()
        switch.stop()
        ctx.destroy(0)


def figures(m: dict) -> dict:
    def ms(values, p):
        return round(1000 * (statistics.median(values) if p == 50 else percentile(values, p)), 1)
    out = {"traps": m["traps"]}
    for side in ("ours", "baseline"):
        out[side] = {"median_ms": ms(m[side], 50), "p95_ms": ms(m[side], 95),
                     "max_ms": round(1000 * max(m[side]), 1)}
    out["ratio"] = round(out["ours"]["median_ms"] / out["baseline"]["median_ms"], 2)
    out["within_a_second"] = out["ours"]["p95_ms"] < 1000
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traps", type=int, default=30)
    parser.add_argument("--results", type=Path)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if find("snmpd") is None or find("snmptrapd") is None:
        print("snmp_trap: Net-SNMP's snmpd and snmptrapd are needed (make install)")
        return 1
    f = figures(measure(args.traps))
    rows = [("poller: snmptrap -> the `if_lo` RESULT (CRITICAL) on the router's tail",
             f["ours"]),
            ("baseline: snmptrap -> snmptrapd's line", f["baseline"])]
    body = "| | median (ms) | p95 (ms) | max (ms) |\n|---|---|---|---|\n" + "\n".join(
        f"| {name} | **{v['median_ms']}** | {v['p95_ms']} | {v['max_ms']} |"
        for name, v in rows) + f"\n| **poller / baseline (median)** | **{f['ratio']}x** | | |"
    notes = (f"{f['traps']} linkDown traps (SNMPv2c) of `lo`, one at a time, each after the "
             "OK result of the poll the previous one brought forward. The poller's path: "
             "the trap decoded, its NOTIFY spooled (fsync) and sent, the interface's check "
             "made from the last poll's row and sent to the router, which relays it. "
             f"Within a second at the 95th percentile: {'yes' if f['within_a_second'] else 'no'}.")
    if args.results:
        write_section(args.results, HEADING, "     .venv/bin/python bench/snmp_trap.py "
                      f"--traps {args.traps} --results {args.results}".strip(), body, notes)
    print(json.dumps(f, indent=2) if args.json else body + "\n\n" + notes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
