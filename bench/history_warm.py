"""``fleetwatch history sql``'s first answer: a Spark of the command's own (cold, what every
command paid before the demo kept a warm Spark) against a warm Spark Connect server (the
demo's: fleetwatch/lake/cluster.py ``serve``, local[2], driver 1g), on the same small lake.

Writes ``--events`` landing lines (fleetwatch/lake/synth.py), starts the Connect server (its
start-up timed: the demo pays it once, in the background), compacts the lake through it
(set-up, not timed), then times whole commands as a user runs them, in alternating order per
round: ``fleetwatch history sql QUERY`` with ``history.master: local[2]`` (cold: a JVM
started, the lake read, the answer), with ``--remote`` the server's URL (warm), and with
``history.answerer`` the socket of a ``fleetwatch history serve`` on that server (the
demo's: a session kept warm, the command importing no PySpark). Also
timed: how long after the command the one line "starting a local Spark" comes when
``history.remote`` names a port where nothing answers (the command is killed then). The
answers must agree (checked).

    python bench/history_warm.py [--events 20000] [--rounds 3] [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import os
import select
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from results import write_section  # noqa: E402  (bench/results.py)

HEADING = "## History first answer: a local Spark against the warm one"
QUERY = "SELECT metric, count(*) AS n FROM metrics GROUP BY metric ORDER BY metric"
FW = [sys.executable, "-m", "fleetwatch"]


def config(path: Path, lake: Path, remote: str = "", answerer: str = "") -> Path:
    path.write_text(f"routers: [tcp://127.0.0.1:1]\nhistory:\n  lake: {lake}\n"
                    f"  master: local[2]\n  conf:\n    spark.driver.memory: 1g\n"
                    + (f"  remote: {remote}\n" if remote else "")
                    + (f"  answerer: {answerer}\n" if answerer else ""))
    return path


def answerer(cfg: Path, log: Path) -> subprocess.Popen:
    """``history serve`` on ``cfg``'s warm Spark, once it answers on its socket."""
    out = open(log, "wb")
    proc = subprocess.Popen([*FW, "history", "serve", "--config", str(cfg)], stdout=out,
                            stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while b"answering history sql" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"history serve did not start: {log.read_text()}")
        time.sleep(0.2)
    return proc


def timed(*argv: str) -> tuple[float, str]:
    """Seconds of ``fleetwatch ARGV`` from start to exit, and its stdout."""
    began = time.monotonic()
    res = subprocess.run([*FW, *argv], capture_output=True, text=True, timeout=900)
    took = time.monotonic() - began
    if res.returncode != 0:
        raise SystemExit(f"fleetwatch {' '.join(argv)} exited {res.returncode}: {res.stderr}")
    return took, res.stdout


def line_after(cfg: Path) -> tuple[float, str]:
    """Seconds until ``history sql`` says on stderr that it starts a local Spark."""
    began = time.monotonic()
    proc = subprocess.Popen([*FW, "history", "sql", "--config", str(cfg), QUERY],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        ready, _, _ = select.select([proc.stderr], [], [], 60)
        line = os.read(proc.stderr.fileno(), 4096).decode().splitlines()[0] if ready else ""
        return time.monotonic() - began, line
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--results", type=Path, default=ROOT / "bench" / "RESULTS.md")
    args = ap.parse_args()
    from fleetwatch.cli.demo.ports import free_port
    from fleetwatch.lake import cluster
    from fleetwatch.lake.synth import write_files
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="fw-bench-warm-") as tmp:
        tmp = Path(tmp)
        lake = tmp / "lake"
        write_files(str(lake / "landing"), args.events, files=4, hosts=50)
        began = time.monotonic()
        warm, proc = cluster.serve(str(tmp / "warm"), "local[2]", "1g", port=free_port())
        try:
            url = cluster.connected(warm, proc)
            start_up = time.monotonic() - began
            print(f"warm Spark {url} up in {start_up:.1f} s", flush=True)
            timed("history", "compact", "--quiet", "--config", str(config(tmp / "c.yaml",
                  lake)), "--remote", url)
            cold_cfg = config(tmp / "cold.yaml", lake)
            served_cfg = config(tmp / "served.yaml", lake, url, str(tmp / "history.sock"))
            serving = answerer(served_cfg, tmp / "serve.log")
            cold, hot, served, first, answers = [], [], [], None, set()
            try:
                for r in range(args.rounds):
                    runs = [("cold", cold_cfg, ()), ("warm", cold_cfg, ("--remote", url)),
                            ("answerer", served_cfg, ())]
                    for name, cfg, extra in (runs if r % 2 == 0 else runs[::-1]):
                        took, out = timed("history", "sql", "--json", "--config", str(cfg),
                                          *extra, QUERY)
                        answers.add(out)
                        if name == "warm" and first is None:
                            first = took
                        {"cold": cold, "warm": hot, "answerer": served}[name].append(took)
                        print(f"round {r + 1}: {name} {took:.2f} s", flush=True)
            finally:
                serving.terminate()
                serving.wait(30)
            if len(answers) != 1:
                raise SystemExit(f"the answers differ: {answers}")
            said, line = line_after(config(tmp / "absent.yaml", lake,
                                           f"sc://127.0.0.1:{free_port()}"))
            print(f"the line after {said:.2f} s: {line}", flush=True)
        finally:
            cluster.stop(warm.directory)
    c, w, a = statistics.median(cold), statistics.median(hot), statistics.median(served)
    body = "\n".join([
        "| what | seconds |", "|---|---|",
        f"| warm Spark's start (`serve`, local[2], driver 1g; the demo pays it once, in the "
        f"background) | {start_up:.1f} |",
        f"| `history sql`, a local Spark (cold), median of {len(cold)} | {c:.2f} "
        f"(min {min(cold):.2f}, max {max(cold):.2f}) |",
        f"| `history sql` through the warm Spark, first answer | {first:.2f} |",
        f"| `history sql` through the warm Spark, median of {len(hot)} | {w:.2f} "
        f"(min {min(hot):.2f}, max {max(hot):.2f}) |",
        f"| `history sql` answered by `history serve` on the warm Spark (history.answerer), "
        f"median of {len(served)} | {a:.2f} (min {min(served):.2f}, max {max(served):.2f}) |",
        f"| \"starting a local Spark\" on stderr, history.remote not answering | {said:.2f} |",
        "", f"**cold / warm: {c / w:.1f}x** (medians)"])
    notes = (f"{args.events} landing lines (synth, 50 hosts), compacted through the server. "
             f"Whole commands timed as a user runs them (Python's start and the imports "
             f"included). Load average at the start: "
             f"{load:.1f} on {os.cpu_count()} cores (a shared, loaded machine: the cold "
             f"figure grows with the load more than the warm one).")
    command = f"python bench/history_warm.py --events {args.events} --rounds {args.rounds}"
    write_section(args.results, HEADING, command, body, notes)
    print(body)


if __name__ == "__main__":
    main()
