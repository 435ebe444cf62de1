"""SNMP polling: one poller (agent/devices/snmp.py's ``Poller``, each poll made into readings
by agent/devices/readings.py as the agent does) with 1,000 simulated devices of 50 interfaces
each, against Net-SNMP's own tools doing the same walks in the same run (issue 37).

    .venv/bin/python bench/snmp.py [--devices 1000] [--interfaces 50] [--rounds 3]
                                   [--concurrent 100] [--parallel 4] [--interval 60]
                                   [--quick] [--json] [--results bench/RESULTS.md]

**The devices**: one Net-SNMP ``snmpd`` (Debian's 5.9.3) listening on ``--devices`` UDP
ports of 127.0.0.1, each port a device (its addresses on the command line: ``agentaddress``
takes at most about 128 of them, its list is one 2,560-byte buffer). It runs in a network
namespace of the bench's own (``unshare --net``, ``-rn`` when not root), where the
interfaces are ``lo`` and ``--interfaces`` - 1 made for the run (veth pairs, one ifb for an
odd count): nothing of it outlives the bench, and the machine's interfaces are untouched.
Each device answers as a switch does: the system group and IF-MIB (ifTable, ifXTable), no
HOST-RESOURCES-MIB (a view leaves it out). Before each phase a few frames go out of each
veth end, so the octet counters grow between polls.

**The poller**: a process of its own (``--poller``: its CPU and peak RSS are the poller's
alone), one ``Poller`` (one pysnmp engine, at most ``--concurrent`` polls at once: the
agent's ``MAX_CONCURRENT`` by default) polling every device once a round, flat out, each
poll made into its reading (``Readings.update``) as it completes. Its first round (names
read, the tables' sizes unknown) is reported apart; the next rounds are the steady state
(the names are read again every ``NAMES_EVERY`` = 10 polls: not in 3 rounds).

**The baseline**: for each device, Net-SNMP's tools reading the same values with the same
OIDs as a steady-state poll: one ``snmpget`` of the system group, one ``snmpbulkwalk
-Cr<max-repetitions>`` of each column the poll walks (:func:`walked_columns`), ``--parallel``
devices at a time, each a process (as a Nagios or MRTG set-up runs them). Its CPU is the
tools' processes' (``getrusage(RUSAGE_CHILDREN)``), process starts included: the cost of
one ``snmpget`` of one OID is measured too (the floor a process costs).

Rounds alternate the order of the two phases; medians. The snmpd's CPU in each phase is
given apart (it is the machine's too). ``--quick``: 10 devices of 5 interfaces, one round
(tests/unit/bench/test_snmp_bench.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from results import wait, write_section  # noqa: E402  (bench/results.py)

sys.path.insert(1, str(ROOT))
from agent.devices import oids, snmp  # noqa: E402

HEADING = "## SNMP polling"
#: the devices' community, and the view it reads (a switch: no HOST-RESOURCES-MIB)
COMMUNITY = "fwbench"
HOST_RESOURCES = "1.3.6.1.2.1.25"
#: the devices' first UDP port (the namespace is the bench's own: no port is taken there)
FIRST_PORT = 20000
#: where Debian puts the daemon
SBIN = "/usr/sbin:/sbin"
#: frames sent out of each veth end before a phase, and their size (bytes)
FRAMES, FRAME_BYTES = 4, 1000
#: seconds a poller round may take at most before the bench gives up
ROUND_TIMEOUT = 900.0


def find(tool: str) -> str | None:
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":" + SBIN)


def can_unshare() -> bool:
    """Whether this machine lets the bench make its network namespace (root, or user
    namespaces), and has Net-SNMP's daemon and tools and iproute2."""
    if not all(find(t) for t in ("unshare", "ip", "snmpd", "snmpget", "snmpbulkwalk")):
        return False
    done = subprocess.run(unshare_argv() + ["ip", "link", "add", "fwprobe", "type", "veth",
                                            "peer", "name", "fwprobe1"],
                          capture_output=True, timeout=30)
    return done.returncode == 0


def unshare_argv() -> list[str]:
    return ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "-rn"]


def walked_columns() -> dict[str, str]:
    """{field: column OID} a steady-state poll walks on a device with 64-bit counters: the
    interfaces' counters and states, hrProcessorLoad, hrStorageTable's columns."""
    counters = {k: c for k, c in snmp.COUNTER_COLUMNS.items() if k not in snmp.OCTETS_32}
    return {**counters, **snmp.PROCESSOR_COLUMNS, **snmp.STORAGE_COLUMNS}


# ------------------------------------------------------------------------ the devices
def make_interfaces(count: int) -> list[str]:
    """``lo`` up and ``count`` - 1 interfaces more (veth pairs, an ifb for an odd count),
    up; the veth ends' names (frames go out of them)."""
    run = ["ip", "link"]
    subprocess.run(run + ["set", "lo", "up"], check=True)
    ends = []
    for i in range((count - 1) // 2):
        a, b = f"fwa{i}", f"fwb{i}"
        subprocess.run(run + ["add", a, "type", "veth", "peer", "name", b], check=True)
        ends += [a, b]
    made = list(ends)
    if (count - 1) % 2:
        subprocess.run(run + ["add", "fwc0", "type", "ifb"], check=True)
        made.append("fwc0")
    for name in made:
        subprocess.run(run + ["set", name, "up"], check=True)
    return ends


def send_frames(ends: list[str]) -> None:
    """A few broadcast frames out of each veth end (its out-octets, its peer's in-octets)."""
    frame = b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01" + b"\x88\xb5" + bytes(FRAME_BYTES - 14)
    for name in ends:
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW) as s:
            s.bind((name, 0))
            for _ in range(FRAMES):
                s.send(frame)


class Devices:
    """The snmpd answering on ``devices`` ports from FIRST_PORT, in ``root``."""

    def __init__(self, root: Path, devices: int):
        self.root, self.devices = root, devices
        self.ports = range(FIRST_PORT, FIRST_PORT + devices)
        self.env = {**os.environ, "SNMP_PERSISTENT_DIR": str(root / "persist")}
        self.popen: subprocess.Popen | None = None
        #: the veth ends (:func:`make_interfaces`)
        self.ends: list[str] = []

    def start(self) -> Devices:
        conf = self.root / "snmpd.conf"
        conf.write_text("\n".join([
            "view fwswitch included .1", f"view fwswitch excluded .{HOST_RESOURCES}",
            f"rocommunity {COMMUNITY} 127.0.0.1 -V fwswitch",
            "dontLogTCPWrappersConnects yes", ""]))
        self.log = open(self.root / "snmpd.log", "wb")
        self.popen = subprocess.Popen(
            [find("snmpd"), "-f", "-C", "-c", str(conf), "-m", "", "-I", "-smux", "-Lo",
             *(f"udp:127.0.0.1:{p}" for p in self.ports)],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env)
        for port in (self.ports[0], self.ports[-1]):
            wait(lambda: self.popen.poll() is not None or self.tool(
                "snmpget", port, oids.SYS_UPTIME, timeout=0.3).returncode == 0,
                30, f"snmpd on port {port}")
        if self.popen.poll() is not None:
            raise SystemExit("snmpd stopped:\n" + (self.root / "snmpd.log").read_text())
        return self

    def tool(self, program: str, port: int, *names: str, options=(), timeout: float = 1.0,
             retries: int = 1) -> subprocess.CompletedProcess:
        """Run a Net-SNMP tool against the device on ``port``, numeric OIDs out."""
        return subprocess.run(
            [find(program), "-m", "", "-On", "-t", f"{timeout:g}", "-r", str(retries),
             "-v2c", "-c", COMMUNITY, *options, f"127.0.0.1:{port}", *names],
            capture_output=True, text=True, env=self.env, timeout=60)

    def cpu(self) -> float:
        """The snmpd's CPU seconds so far (from /proc: it is our child, not yet reaped)."""
        fields = Path(f"/proc/{self.popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.popen is not None:
            end(self.popen, self.popen.terminate)
            self.log.close()


def end(popen: subprocess.Popen, ask, timeout: float = 10.0) -> None:
    """Ask ``popen`` to end (``ask()``), wait ``timeout`` seconds, kill it if it lingers."""
    if popen.poll() is None:
        ask()
        try:
            popen.wait(timeout)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(5)


# ------------------------------------------------------------------------ the poller
def poller_main(args) -> int:
    """The poller process: a round of polls for each line on stdin, one JSON line out."""
    from agent.devices.readings import Readings

    credentials = snmp.Credentials("2c", community=COMMUNITY)
    targets = [snmp.Target("127.0.0.1", p, credentials, max_repetitions=args.repetitions)
               for p in range(FIRST_PORT, FIRST_PORT + args.devices)]
    readings = {t: Readings() for t in targets}

    async def main():
        poller = snmp.Poller(max_concurrent=args.concurrent[0])

        async def one(target):
            # what the agent keeps of a poll is its Readings' previous one: the bench keeps
            # a summary of each, so that the peak RSS is the poller's, not the bench's
            poll = await poller.poll(target)
            return summary(poll, readings[target].update(poll))
        try:
            while (await asyncio.to_thread(sys.stdin.readline)).strip() == "round":
                before = dict(poller.counts)
                cpu, started = time.process_time(), time.monotonic()
                done = await asyncio.gather(*(one(t) for t in targets))
                cpu, wall = time.process_time() - cpu, time.monotonic() - started
                counts = {k: v - before.get(k, 0) for k, v in poller.counts.items()}
                values = [d["values"] for d in done if not d["error"]]
                print(json.dumps({
                    "cpu": cpu, "wall": wall, "polls": len(done), "counts": counts,
                    "failed": sum(1 for d in done if d["error"]),
                    "errors": sorted({d["error"] for d in done if d["error"]})[:3],
                    "values": statistics.median(values) if values else 0,
                    "interfaces": statistics.median(d["interfaces"] for d in done),
                    **{k: sum(d[k] for d in done) for k in ("metrics", "rates", "moving",
                                                            "checks")},
                    "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                }), flush=True)
        finally:
            poller.close()
    asyncio.run(main())
    return 0


def summary(poll, reading) -> dict:
    """What a round reports of a poll and its reading: its values (the system group's and
    the walked columns'), interfaces, metrics, rates (those moving) and checks."""
    walked = [k for k in snmp.COUNTER_COLUMNS if k not in snmp.OCTETS_32]
    rates = [v for k, v in reading.metrics.items()
             if k.endswith(("in_bps", "out_bps")) and k.startswith("if.")]
    return {"error": poll.error, "interfaces": len(poll.interfaces),
            "values": sum(v is not None for v in astuple(poll.system or snmp.System()))
            + sum(getattr(i, f) is not None for i in poll.interfaces.values() for f in walked),
            "metrics": len(reading.metrics), "rates": len(rates),
            "moving": sum(1 for v in rates if v > 0), "checks": len(reading.checks)}


class PollerProcess:
    """bench/snmp.py --poller with ``concurrent`` polls at once, a round at a time."""

    def __init__(self, args, concurrent: int, log):
        self.concurrent = concurrent
        self.popen = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--poller", "--devices",
             str(args.devices), "--concurrent", str(concurrent), "--repetitions",
             str(args.repetitions)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=log, text=True, cwd=ROOT)

    def round(self) -> dict:
        self.popen.stdin.write("round\n")
        self.popen.stdin.flush()
        ready, _, _ = select.select([self.popen.stdout], [], [], ROUND_TIMEOUT)
        line = self.popen.stdout.readline() if ready else ""
        if not line:
            raise SystemExit(f"the poller gave no round within {ROUND_TIMEOUT:g}s")
        return json.loads(line)

    def stop(self) -> None:
        end(self.popen, self.popen.stdin.close, 30.0)       # its stdin's end: it returns


# ------------------------------------------------------------------------ the baseline
def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def baseline_round(devices: Devices, parallel: int, repetitions: int) -> dict:
    """Each device read by the tools, ``parallel`` devices at a time."""
    columns = list(walked_columns().values())
    system = list(oids.SYSTEM_FIELDS.values())

    def device(port: int) -> tuple[int, int]:
        done = [devices.tool("snmpget", port, *system)]
        done += [devices.tool("snmpbulkwalk", port, c, options=[f"-Cr{repetitions}"])
                 for c in columns]
        failed = sum(1 for d in done if d.returncode != 0)
        values = sum(1 for d in done for line in d.stdout.splitlines()
                     if " = " in line and "No Such" not in line and "No more" not in line)
        return failed, values

    cpu, started = children_cpu(), time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        results = list(pool.map(device, devices.ports))
    cpu, wall = children_cpu() - cpu, time.monotonic() - started
    return {"cpu": cpu, "wall": wall, "devices": len(results),
            "processes": len(results) * (1 + len(columns)),
            "failed": sum(f for f, _ in results),
            "values": statistics.median(v for _, v in results)}


def process_floor(devices: Devices, count: int = 50) -> float:
    """CPU seconds of one ``snmpget`` of one OID (process start, one request): the median
    of ``count`` in a row."""
    costs = []
    for _ in range(count):
        before = children_cpu()
        devices.tool("snmpget", devices.ports[0], oids.SYS_UPTIME)
        costs.append(children_cpu() - before)
    return statistics.median(costs)


# ------------------------------------------------------------------------ a run
def udp_drops() -> int:
    """Datagrams the namespace dropped at a full receive buffer (``RcvbufErrors``): only
    the bench's processes are there."""
    names, values = [line.split()[1:] for line in Path("/proc/net/snmp").read_text()
                     .splitlines() if line.startswith("Udp:")]
    return int(values[names.index("RcvbufErrors")])


def phase(devices: Devices, measure) -> dict:
    """``measure()`` with the snmpd's CPU and the UDP drops meanwhile, frames sent first."""
    send_frames(devices.ends)
    cpu, drops = devices.cpu(), udp_drops()
    result = measure()
    result["snmpd_cpu"], result["drops"] = devices.cpu() - cpu, udp_drops() - drops
    return result


def measure(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fw-snmp-"))
    log = open(tmp / "poller.log", "w")
    devices, pollers = Devices(tmp, args.devices), []
    load = [os.getloadavg()[0]]
    try:
        devices.ends = make_interfaces(args.interfaces)
        devices.start()
        for concurrent in args.concurrent:
            pollers.append(PollerProcess(args, concurrent, log))
        first = {p.concurrent: phase(devices, p.round) for p in pollers}
        polls: dict[int, list] = {p.concurrent: [] for p in pollers}
        walks: list[dict] = []
        for r in range(args.rounds):
            order = [(polls[p.concurrent], p.round) for p in pollers] + [(walks, lambda: (
                baseline_round(devices, args.parallel, args.repetitions)))]
            for out, how in (order if r % 2 == 0 else order[::-1]):
                out.append(phase(devices, how))
        floor = process_floor(devices)
    finally:
        for poller in pollers:
            poller.stop()
        devices.stop()
        log.close()
    load.append(os.getloadavg()[0])
    errors = (tmp / "poller.log").read_text()[-2000:]
    shutil.rmtree(tmp, ignore_errors=True)
    return {"first": first, "polls": polls, "walks": walks, "floor": floor, "load": load,
            "poller_log": errors}


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def figures(m: dict, args) -> dict:
    """The baseline's figures, and each poller's (by its concurrency) with its ratios."""
    walks, n = m["walks"], args.devices
    base_cpu, base_wall = median(walks, "cpu"), median(walks, "wall")
    out = {
        "baseline_cpu_s": base_cpu, "baseline_device_ms": 1000 * base_cpu / n,
        "baseline_wall_s": base_wall, "baseline_devices_per_s": n / base_wall,
        "baseline_failed": max(r["failed"] for r in walks),
        "baseline_values": median(walks, "values"),
        "baseline_processes": walks[0]["processes"], "process_floor_ms": 1000 * m["floor"],
        "snmpd_baseline_cpu_s": median(walks, "snmpd_cpu"), "pollers": {}}
    for concurrent, polls in m["polls"].items():
        cpu, wall = median(polls, "cpu"), median(polls, "wall")
        requests = statistics.median(r["counts"].get("requests", 0) for r in polls)
        failed, first = max(r["failed"] for r in polls), m["first"][concurrent]
        out["pollers"][concurrent] = {
            "round_cpu_s": cpu, "poll_cpu_ms": 1000 * cpu / n, "round_wall_s": wall,
            "polls_per_s": n / wall, "core_share": cpu / args.interval,
            "holds": wall < args.interval and failed == 0, "failed": failed,
            "drops": max(r["drops"] for r in polls),
            "requests_per_poll": requests / n, "values_per_poll": median(polls, "values"),
            "interfaces": median(polls, "interfaces"), "metrics": median(polls, "metrics"),
            "max_rss_mib": max(r["max_rss_mib"] for r in polls),
            "first_cpu_s": first["cpu"], "first_wall_s": first["wall"],
            "first_failed": first["failed"],
            "cpu_ratio": cpu / base_cpu, "rate_ratio": base_wall / wall,
            "snmpd_cpu_s": median(polls, "snmpd_cpu"),
            "rates_moving": sum(r["moving"] for r in polls) / max(1, sum(r["rates"]
                                                                    for r in polls)),
            "snmpd_request_us": 1e6 * median(polls, "snmpd_cpu") / max(1.0, requests),
            "snmpd_requests_per_s": requests / wall}
    return out


def report(f: dict, m: dict, args) -> tuple[str, str]:
    n = args.devices
    rows = [
        "| | CPU a round (s) | CPU a device (ms) | wall a round (s) | devices/s | failed "
        f"polls | a core's share at {args.interval:g} s | snmpd CPU (s) |",
        "|---|---|---|---|---|---|---|---|"]
    for c, p in f["pollers"].items():
        rows += [
            f"| **poller**, {c} polls at once (`Poller` and `Readings`) | "
            f"**{p['round_cpu_s']:.1f}** | **{p['poll_cpu_ms']:.1f}** | "
            f"{p['round_wall_s']:.1f} | **{p['polls_per_s']:.1f}** | {p['failed']} | "
            f"**{p['core_share']:.0%}** | {p['snmpd_cpu_s']:.1f} |",
            f"| its first round (names read, sizes unknown) | {p['first_cpu_s']:.1f} | "
            f"{1000 * p['first_cpu_s'] / n:.1f} | {p['first_wall_s']:.1f} | "
            f"{n / p['first_wall_s']:.1f} | {p['first_failed']} | | |"]
    rows.append(
        f"| baseline: `snmpget` + {f['baseline_processes'] // n - 1} `snmpbulkwalk` a device, "
        f"{args.parallel} devices at a time | {f['baseline_cpu_s']:.1f} | "
        f"{f['baseline_device_ms']:.1f} | {f['baseline_wall_s']:.1f} | "
        f"{f['baseline_devices_per_s']:.1f} | {f['baseline_failed']} | "
        f"{f['baseline_cpu_s'] / args.interval:.0%} | {f['snmpd_baseline_cpu_s']:.1f} |")
    for c, p in f["pollers"].items():
        rows.append(f"| **poller ({c} at once) / baseline** | **{p['cpu_ratio']:.2f}x** | | | "
                    f"**{p['rate_ratio']:.2f}x** | | | |")
    first = next(iter(f["pollers"].values()))
    holds = "; ".join(
        f"{c} at once: {'holds' if p['holds'] else '**does not hold**'} (a round in "
        f"{p['round_wall_s']:.0f} s flat out, {p['failed']} failed polls, {p['drops']} "
        f"answers dropped at the poller's full UDP receive buffer, peak RSS "
        f"**{p['max_rss_mib']:.0f} MiB**; snmpd {p['snmpd_requests_per_s']:.0f} requests/s, "
        f"{p['snmpd_request_us']:.0f} us of CPU a request)" for c, p in f["pollers"].items())
    notes = (
        f"{n} devices (one snmpd, {n} UDP ports) of {first['interfaces']:.0f} interfaces, v2c, "
        f"max-repetitions {args.repetitions}; medians of {args.rounds} round(s) after the "
        f"first, the phases alternating. A poll: {first['requests_per_poll']:.1f} requests, "
        f"{first['values_per_poll']:.0f} values ({f['baseline_values']:.0f} read by the "
        f"tools), {first['metrics'] / n:.0f} metrics a device ({first['rates_moving']:.0%} of "
        f"the interfaces' rates above 0). A poll of each device every "
        f"{args.interval:g} s: {holds}. The baseline ran {f['baseline_processes']} processes a "
        f"round; one `snmpget` of one OID costs {f['process_floor_ms']:.1f} ms of CPU (a "
        f"process start). Load average {m['load'][0]:.1f} before, {m['load'][1]:.1f} after "
        "(1 min).")
    return "\n".join(rows), notes


def concurrency(text: str) -> list[int]:
    values = [int(v) for v in text.split(",")]
    if not values or min(values) < 1 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError("distinct numbers of polls at once, at least 1")
    return values


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--devices", type=int, default=1000)
    ap.add_argument("--interfaces", type=int, default=50, help="a device's, lo included")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrent", type=concurrency, default=[snmp.MAX_CONCURRENT],
                    help="the poller's polls at once (Poller's max_concurrent); a comma "
                    "list: a poller process for each, in the same rounds")
    ap.add_argument("--repetitions", type=int, default=25, help="GETBULK max-repetitions")
    ap.add_argument("--parallel", type=int, default=4, help="baseline devices at a time")
    ap.add_argument("--interval", type=float, default=60.0, help="seconds between polls")
    ap.add_argument("--quick", action="store_true", help="10 devices of 5 interfaces, 1 round")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--results", type=Path, default=None,
                    help="write the figures into this RESULTS.md")
    ap.add_argument("--poller", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--in-netns", action="store_true", help=argparse.SUPPRESS)
    argv = sys.argv[1:] if argv is None else argv
    args = ap.parse_args(argv)
    if args.poller:
        return poller_main(args)
    if not args.in_netns:
        if not can_unshare():
            sys.exit("bench/snmp.py needs Net-SNMP (snmpd, snmp), iproute2 and a network "
                     "namespace of its own (root, or user namespaces): not here")
        return subprocess.call(unshare_argv() + [sys.executable, str(Path(__file__).resolve()),
                                                 *argv, "--in-netns"])
    if args.quick:
        args.devices, args.interfaces, args.rounds, args.parallel = 10, 5, 1, 2
    if args.devices < 1 or args.interfaces < 1 or args.rounds < 1:
        ap.error("--devices, --interfaces and --rounds are at least 1")
    m = measure(args)
    f = figures(m, args)
    body, notes = report(f, m, args)
    if args.json:
        print(json.dumps({"figures": f, "runs": m}, indent=1))
    else:
        print(f"{body}\n\n{notes}")
    if args.results:
        command = ".venv/bin/python bench/snmp.py " + " ".join(
            a for a in argv if a != "--in-netns")
        write_section(args.results, HEADING, command.strip(), body, notes + "\n\n" + NOTES)
    return 0


NOTES = """\
Method: the poller's CPU is its process's (`time.process_time`, every thread), its RSS the
process's peak (`ru_maxrss`); the baseline's CPU the tools' processes' (`RUSAGE_CHILDREN`);
the snmpd's from /proc. "Holds" means a flat-out round of every device ends within the
interval with no failed poll. The poller's time goes to pysnmp's BER decoding (pyasn1: 78 % of
a steady-state round under cProfile, 2026-12-05), about 100 us a value on this machine.

Polls at once: each poll has one request in flight, and each answer (100 values, Net-SNMP's
`maxGetbulkResponses`) takes the loop 10 to 30 ms to decode, while pysnmp's request timeout
(1 s) runs from the send: with 100 polls at once the answers wait their turn past it (some
are dropped at the socket's full receive buffer, `RcvbufErrors`), the requests are sent again
and their answers add to the queue. The same rounds with 20 at once lose none, at the same
polls per second or more (the poller is bound by its CPU, not by round trips)."""

if __name__ == "__main__":
    sys.exit(main())
