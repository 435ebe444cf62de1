"""Rules on series: the alerting sink's rule engine against Prometheus, the same series and
the same 20 rules, measured in the same run.

The fleet: HOSTS agents (10,000) each sending the 30 metrics an agent's default collectors
send (cpu, load, memory, swap, the root disk, disk and network counters, procs, uptime)
every STEP seconds (10), values from one deterministic generator (:func:`values`: noisy
gauges, counters with resets, a few hosts over each rule's level, a few disks filling);
20 rules apply to every host, evaluated every RULE_INTERVAL seconds (30).

**The engine** (:class:`sinks.alerting.series.engine.Engine`, in this process, on a
simulated clock): each STATS is encoded as a router publishes it on its tail, then
decoded (:func:`sinks.alerting.series.feed.lean`, as the sink's tail feed does) and fed;
the engine evaluates every rule of every host at each slot and is told its rows were
submitted. CPU (this thread's, ``time.thread_time``) of decode + feed per datapoint offered
(all 30 metrics of a STATS, those no rule reads too), and of evaluation per (host, rule)
evaluation. Memory: the process's RSS growth over the run, per series the engine holds.

**The baseline**: Debian's ``prometheus`` (2.42) on 127.0.0.1, an ephemeral port and a
temporary storage directory, scraping every STEP seconds a generated exposition of the same
series (``fleetwatch_<metric>{host, instance}``, as the prometheus sink names them; served
by a child process) and evaluating the same 20 rules as alerting rules (the critical level
and ``for``; PromQL's own functions: ``avg_over_time``, ``rate``, ``predict_linear``...)
every RULE_INTERVAL. Its CPU from /proc/PID/stat (all its threads) over spans of SPAN
seconds, its memory from its RSS growth. Each round has a span with the rules loaded and
one without (``POST /-/reload`` of the rule file between them, the order alternating round
by round); the difference is what its rule evaluation costs, the span without is what
ingesting the scrapes costs. Span boundaries are put where Prometheus is idle (away from
its scrapes and evaluations, read from its API), so each span holds whole scrapes and
evaluations: STEP / SPAN and RULE_INTERVAL / SPAN of them.

Both sides run at once: the engine simulates, at the start of each of its rounds, the same
age of data as Prometheus holds at the start of its round (WARMUP, then two spans a round):
the windows hold as many points on both sides. Figures: medians over the rounds (min-max),
ratios of the medians. Target (issue 35): no more CPU than Prometheus for the same work.

    .venv/bin/python bench/rules.py [--rounds 3] [--hosts 10000] [--warmup 120] [--span 60]
                                    [--quick] [--json] [--results bench/RESULTS.md]

A full run takes about 9 minutes; ``--quick`` (100 hosts, a 1 s step, 3 s rule interval)
about 20 s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(HERE))      # last: bench/web.py is not web/
from results import wait, write_section  # noqa: E402  (bench/results.py)

HEADING = "## Rules on series against Prometheus (rules)"
PREFIX = "fleetwatch_"
#: the metrics of an agent's default collectors (agent/collectors.py), one root disk
SERIES = (
    "cpu.percent", "cpu.user", "cpu.system", "cpu.iowait", "cpu.steal",
    "load.1", "load.5", "load.15",
    "memory.total", "memory.available", "memory.used_percent",
    "swap.total", "swap.used", "swap.used_percent",
    "disk.root.used_percent", "disk.root.free",
    "diskio.read_bytes", "diskio.write_bytes", "diskio.reads", "diskio.writes",
    "netio.bytes_sent", "netio.bytes_recv", "netio.packets_sent", "netio.packets_recv",
    "netio.errin", "netio.errout", "netio.dropin", "netio.dropout",
    "procs.count", "uptime.seconds",
)
#: (name, engine expression, critical, warning, for, Prometheus' alerting expression)
RULES = (
    ("cpu_high", "avg(cpu.percent, 5m)", "> 90", "> 80", "10m",
     "avg_over_time(fleetwatch_cpu_percent[5m]) > 90"),
    ("cpu_steal", "max(cpu.steal, 5m)", "> 50", "> 20", "5m",
     "max_over_time(fleetwatch_cpu_steal[5m]) > 50"),
    ("load_high", "load.5", "> 8", "> 4", "10m", "fleetwatch_load_5 > 8"),
    ("load_sustained", "avg(load.15, 15m)", "> 6", "> 3", "0",
     "avg_over_time(fleetwatch_load_15[15m]) > 6"),
    ("memory_full", "min(memory.used_percent, 10m)", "> 95", "> 90", "0",
     "min_over_time(fleetwatch_memory_used_percent[10m]) > 95"),
    ("memory_low", "last(memory.available, 5m)", "< 200000000", "< 500000000", "5m",
     "last_over_time(fleetwatch_memory_available[5m]) < 200000000"),
    ("swap_full", "swap.used_percent", "> 80", "> 50", "10m",
     "fleetwatch_swap_used_percent > 80"),
    ("swap_growing", "delta(swap.used, 15m)", "> 1000000000", "> 500000000", "0",
     "delta(fleetwatch_swap_used[15m]) > 1000000000"),
    ("disk_full", "disk.root.used_percent", "> 95", "> 90", "10m",
     "fleetwatch_disk_root_used_percent > 95"),
    ("disk_full_soon", "timeleft(disk.root.used_percent, 1h, 100)", "< 4h", "< 1d", "10m",
     "predict_linear(fleetwatch_disk_root_used_percent[1h], 4 * 3600) >= 100"),
    ("disk_free_forecast", "predict(disk.root.free, 30m, 1d)", "< 0", "< 10000000000", "0",
     "predict_linear(fleetwatch_disk_root_free[30m], 86400) < 0"),
    ("diskio_read", "rate(diskio.read_bytes, 5m)", "> 200000000", "> 100000000", "5m",
     "rate(fleetwatch_diskio_read_bytes[5m]) > 200000000"),
    ("diskio_write", "rate(diskio.write_bytes, 5m)", "> 200000000", "> 100000000", "5m",
     "rate(fleetwatch_diskio_write_bytes[5m]) > 200000000"),
    ("net_in", "rate(netio.bytes_recv, 5m)", "> 100000000", "> 50000000", "5m",
     "rate(fleetwatch_netio_bytes_recv[5m]) > 100000000"),
    ("net_out", "rate(netio.bytes_sent, 5m)", "> 100000000", "> 50000000", "5m",
     "rate(fleetwatch_netio_bytes_sent[5m]) > 100000000"),
    ("net_errors", "rate(netio.errin, 10m) + rate(netio.errout, 10m)", "> 1", "> 0.1", "0",
     "rate(fleetwatch_netio_errin[10m]) + rate(fleetwatch_netio_errout[10m]) > 1"),
    ("net_drops", "rate(netio.dropin, 10m) * 600", "> 100", "> 10", "0",
     "rate(fleetwatch_netio_dropin[10m]) * 600 > 100"),
    ("procs_many", "max(procs.count, 10m)", "> 1000", "> 500", "0",
     "max_over_time(fleetwatch_procs_count[10m]) > 1000"),
    ("stats_absent", "absent(cpu.percent, 5m)", "== 1", "", "0",
     "time() - timestamp(last_over_time(fleetwatch_cpu_percent[15m])) > 300"),
    ("stats_gappy", "count(cpu.percent, 5m)", "< 10", "< 20", "5m",
     "count_over_time(fleetwatch_cpu_percent[5m]) < 10"),
)
MB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")
ORIGIN = 1_800_000_000.0        # the engine's simulated clock starts here


# ---------------------------------------------------------------- the fleet's values
def uuid_of(h: int) -> str:
    return f"{h:032x}"


def hostname(h: int) -> str:
    return f"host{h:05d}.example.com"


def _noise(h: np.ndarray, m: int, k: int) -> np.ndarray:
    """Uniform in [0, 1), the same for the same (host, metric, step) in any process."""
    x = (h * 2654435761 + (m + 1) * 40503 + (k + 1) * 97 + 12345) & 0xFFFFFFFF
    x = (x * 2246822519) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 3266489917) & 0xFFFFFFFF
    return (x ^ (x >> 16)).astype(np.float64) / 2.0 ** 32


def values(hosts: int, k: int, step: float) -> np.ndarray:
    """The fleet's 30 metrics at step ``k``: shape (hosts, 30), in SERIES' order."""
    h = np.arange(hosts, dtype=np.uint64)
    hf = h.astype(np.float64)
    t = k * step
    u = [_noise(h, m, k) for m in range(len(SERIES))]
    on = lambda every, at: (h % every) == at  # noqa: E731  (the few hosts over a level)
    out = np.empty((hosts, len(SERIES)))
    cpu = np.where(on(500, 1), 92 + 5 * u[0], 15 + 30 * u[0])
    steal = np.where(on(700, 3), 60 + 10 * u[4], 0.5 * u[4])
    total = (4 + (h % 4) * 4).astype(np.float64) * 2 ** 30
    used = np.where(on(600, 5), 97 + u[10], 50 + 20 * u[10])
    swap_used = 1e8 + np.where(on(300, 7), 2e7, 1e4) * k
    disk = np.minimum(100.0, np.where(on(97, 0), 85 + 0.02 * t / 10,
                                      30 + (h % 50).astype(np.float64) + 1e-5 * t))
    resets = np.where(on(800, 9), k % 60, k).astype(np.float64)   # counters restarting
    speed = np.where(on(450, 11), 100.0, 1.0) * (1 + 4 * (hf % 1000) / 1000)

    def counter(per_s, m):
        # increasing: 1 + 0.9 * (u[k+1] - u[k]) > 0; a host's own offset
        return np.floor(speed * per_s * step * (resets + 0.9 * u[m])
                        + 1e3 * _noise(h, m, -1))

    out[:, 0] = cpu
    out[:, 1] = cpu * 0.7
    out[:, 2] = 3 + 5 * u[2]
    out[:, 3] = 1 + 3 * u[3]
    out[:, 4] = steal
    out[:, 5] = 0.5 + 2 * u[5]
    out[:, 6] = np.where(on(400, 2), 9 + u[6], 0.6 + 1.5 * u[6])
    out[:, 7] = 0.7 + u[7]
    out[:, 8] = total
    out[:, 9] = np.floor(total * (1 - used / 100))
    out[:, 10] = used
    out[:, 11] = 2.0 ** 31
    out[:, 12] = swap_used
    out[:, 13] = 100 * swap_used / 2.0 ** 31
    out[:, 14] = disk
    out[:, 15] = np.floor(1e11 * (1 - disk / 100))
    for col, per_s in ((16, 1e6), (17, 2e6), (18, 100), (19, 200), (20, 5e5), (21, 1e6),
                       (22, 1e3), (23, 2e3), (24, 1e-3), (25, 1e-3), (26, 1e-3), (27, 1e-3)):
        out[:, col] = counter(per_s, col)
    out[:, 28] = 150 + np.floor(50 * u[28])
    out[:, 29] = 86400 * (h % 30 + 1).astype(np.float64) + t
    return np.round(out, 2)


def prom_name(series: str) -> str:
    from sinks.prometheus.names import metric_name
    return PREFIX + metric_name(series)


# ---------------------------------------------------------------- the exposition (child)
def expose(hosts: int, step: float, origin: float) -> None:
    """Child process: serve the fleet's series at /metrics (text format), the values of
    the step the wall clock is in; print the port."""
    names = [prom_name(s) for s in SERIES]
    labels = [f'{{host="{hostname(h)}",instance="{uuid_of(h)}"}} ' for h in range(hosts)]
    cache: dict = {}
    lock = threading.Lock()

    def body() -> bytes:
        k = int((time.time() - origin) // step)
        with lock:
            if cache.get("k") != k:
                rows = values(hosts, k, step).T.tolist()
                parts = []
                for name, column in zip(names, rows):
                    parts.append(f"# HELP {name} latest value of a STATS metric\n"
                                 f"# TYPE {name} gauge\n")
                    parts.append("".join([f"{name}{lab}{v!r}\n"
                                          for lab, v in zip(labels, column)]))
                cache.update(k=k, body="".join(parts).encode())
            return cache["body"]

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            data = body()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(httpd.server_address[1], flush=True)
    httpd.serve_forever()


# ---------------------------------------------------------------- the engine
def engine_rules():
    from fleetwatch.config import build
    from sinks.alerting.series.config import RuleSpec
    return [build(RuleSpec, {"name": name, "expr": expr, "critical": crit, "warning": warn,
                             "for": hold, "hosts": "*"}, "bench", f"rules[{i}]").compiled()
            for i, (name, expr, crit, warn, hold, _) in enumerate(RULES)]


class EngineRun:
    """The engine fed the fleet on a simulated clock, step by step."""

    def __init__(self, hosts: int, step: float, interval: float):
        from sinks.alerting.series.config import Host
        from sinks.alerting.series.engine import Engine
        self.n, self.step, self.interval = hosts, step, interval
        self.engine = Engine(engine_rules(), started=ORIGIN, interval=interval,
                             refresh=600.0)
        self.known = {uuid_of(h): Host(hostname(h)) for h in range(hosts)}
        self.engine.hosts(self.known)
        self.k = 0
        self.rows = 0

    def frames(self, k: int) -> list[list[bytes]]:
        """Step ``k``'s STATS as a router's tail carries them (not timed)."""
        from fleetwatch import protocol
        rows = values(self.n, k, self.step).tolist()
        t = ORIGIN + k * self.step
        return [protocol.encode_tail(protocol.make(
                    "STATS", uuid_of(h), clock=lambda: t, msg_id=f"{k:08x}{h:024x}",
                    hostname=hostname(h), metrics=dict(zip(SERIES, row))),
                    uuid_of(h), "router-1", (k * self.n + h + 1, k + 1))
                for h, row in enumerate(rows)]

    def advance(self, seconds: float) -> dict:
        """Simulate ``seconds`` more: CPU of decode, feed and evaluation, and their counts."""
        from sinks.alerting.series.feed import lean
        engine, n, step = self.engine, self.n, self.step
        out = {"decode": 0.0, "feed": 0.0, "hosts": 0.0, "evaluate": 0.0, "points": 0,
               "evaluations": 0, "rows": 0}
        for _ in range(int(round(seconds / step))):
            k = self.k
            start = ORIGIN + k * step
            if (k * step) % self.interval == 0:          # a slot begins: evaluate first
                before = engine.counts["rule_evaluated"]
                t0 = time.thread_time()
                engine.hosts(self.known)    # as the sink's pass does (runner.py)
                t1 = time.thread_time()
                rows = engine.evaluate(start)
                engine.submitted(rows)
                out["evaluate"] += time.thread_time() - t0
                out["hosts"] += t1 - t0
                out["evaluations"] += engine.counts["rule_evaluated"] - before
                out["rows"] += len(rows)
            batch = self.frames(k)
            t0 = time.thread_time()
            decoded = [lean(f) for f in batch]
            t1 = time.thread_time()
            for h, (type_, uuid, _, _, body) in enumerate(decoded):   # spread over the step
                engine.feed(uuid, type_, body, start + step * h / n)
            out["feed"] += time.thread_time() - t1
            out["decode"] += t1 - t0
            out["points"] += n * len(SERIES)
            self.k += 1
        return out

    def critical_met(self) -> dict[str, int]:
        """Hosts whose rule is at its critical level now, by rule (Prometheus' ALERTS,
        pending or firing, say the same of its side)."""
        from sinks.alerting.series.expr import EvalError
        now = ORIGIN + self.k * self.step
        met: dict[str, int] = {}
        for uuid, rules in self.engine.applies.items():
            lookup = self.engine.series.get(uuid, {}).get
            for rule in rules:
                try:
                    value = rule.expr.evaluate(lookup, now, rule.stale_after)
                except EvalError:
                    continue
                if rule.critical is not None and rule.critical(value):
                    met[rule.name] = met.get(rule.name, 0) + 1
        return dict(sorted(met.items()))

    def held(self) -> tuple[int, int]:
        """(series, points) the engine holds."""
        stores = self.engine.series.values()
        return (sum(len(s) for s in stores),
                sum(len(p) for s in stores for p in s.values()))


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# ---------------------------------------------------------------- Prometheus
def http(url: str, data: bytes | None = None, timeout: float = 30) -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, data=data),
                                timeout=timeout) as r:
        return r.read()


def proc_cpu(pid: int) -> float:
    """CPU seconds of the process, all its threads (utime + stime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_rss(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(next(line for line in f if line.startswith("VmRSS:")).split()[1]) * 1024


def own_metrics(base: str) -> dict[str, float]:
    """Prometheus' own counters we need, summed over their labels."""
    wanted = ("prometheus_tsdb_head_samples_appended_total", "prometheus_tsdb_head_series",
              "prometheus_rule_group_iterations_total",
              "prometheus_rule_group_last_duration_seconds")
    out = dict.fromkeys(wanted, 0.0)
    for line in http(base + "/metrics").decode().splitlines():
        name = re.split(r"[{ ]", line, 1)[0]
        if name in out:
            out[name] += float(line.rsplit(" ", 1)[1])
    return out


def rules_yaml(interval: float) -> str:
    import yaml
    return yaml.safe_dump({"groups": [{"name": "fleet", "interval": f"{interval:g}s",
                                       "rules": [{"alert": name, "expr": promql,
                                                  "for": hold if hold != "0" else "0s"}
                                                 for name, _, _, _, hold, promql in RULES]}]})


def _when(stamp: str) -> float:
    """An RFC 3339 time of Prometheus' API (nanoseconds) as epoch seconds."""
    stamp = re.sub(r"(\.\d{6})\d+", r"\1", stamp).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


class Prometheus:
    """Prometheus scraping the exposition and evaluating the rules, and its spans."""

    def __init__(self, tmp: Path, exposer_port: int, step: float, interval: float):
        from fleetwatch.cli.demo.ports import free_port
        import yaml
        exe = shutil.which("prometheus")
        if exe is None:
            raise SystemExit("prometheus is not installed (Debian's prometheus: make "
                             "system-packages, or apt-get install prometheus)")
        self.step, self.interval = step, interval
        self.rules_file = tmp / "rules.yml"
        self.rules_on = rules_yaml(interval)
        self.rules_file.write_text(self.rules_on)
        config = {"global": {"scrape_interval": f"{step:g}s", "scrape_timeout": f"{step:g}s",
                             "evaluation_interval": f"{interval:g}s"},
                  "rule_files": [str(self.rules_file)],
                  "scrape_configs": [{"job_name": "fleet", "honor_labels": True,
                                      "static_configs": [{"targets": [
                                          f"127.0.0.1:{exposer_port}"]}]}]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        port = free_port()
        self.base = f"http://127.0.0.1:{port}"
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen(
            [exe, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
             f"--web.external-url={self.base}/", "--web.enable-lifecycle",
             "--storage.tsdb.retention.time=1d", "--log.level=warn"],
            stdout=self.log, stderr=self.log)
        wait(self.ready, 30, "prometheus ready")
        self.rss0 = proc_rss(self.proc.pid)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise SystemExit(f"prometheus exited {self.proc.returncode}: see its log")
        try:
            return http(self.base + "/-/ready", timeout=2).startswith(b"Prometheus")
        except OSError:
            return False

    def api(self, path: str) -> dict:
        return json.loads(http(self.base + path))["data"]

    def rules(self, on: bool) -> None:
        self.rules_file.write_text(self.rules_on if on else "groups: []\n")
        http(self.base + "/-/reload", data=b"")

    def target(self) -> dict:
        return self.api("/api/v1/targets")["activeTargets"][0]

    def quiet_phase(self) -> float:
        """A phase (seconds in the rule interval) farthest from any scrape's or
        evaluation's start and run: where a span should begin and end."""
        t = self.target()
        group = self.api("/api/v1/rules")["groups"][0]
        L = self.interval
        busy = [((_when(t["lastScrape"]) + n * self.step) % L, t["lastScrapeDuration"])
                for n in range(int(round(L / self.step)))]
        busy.append((_when(group["lastEvaluation"]) % L, group["evaluationTime"]))

        def distance(c: float) -> float:
            d = L
            for start, length in busy:
                off = (c - start) % L
                d = min(d, 0.0 if off <= length + 0.2 else off - length - 0.2,
                        (start - c) % L)
            return d
        return max((i * L / 200 for i in range(200)), key=distance)

    def alerts(self) -> dict[str, int]:
        """Its alerts (pending or firing) by rule."""
        query = urllib.parse.quote("count by (alertname) (ALERTS)")
        return {r["metric"]["alertname"]: int(r["value"][1])
                for r in self.api(f"/api/v1/query?query={query}")["result"]}

    def reading(self) -> dict:
        return {"at": time.time(), "cpu": proc_cpu(self.proc.pid),
                "rss": proc_rss(self.proc.pid), **own_metrics(self.base)}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def prometheus_timeline(prom: Prometheus, args, out: dict) -> None:
    """The warm-up, then per round a span with the rules and one without."""
    try:
        wait(lambda: time.time() >= out["started"] + args.warmup, args.warmup + 60, "warm-up",
             interval=0.5)
        t = prom.target()
        if t["health"] != "up":
            raise SystemExit(f"prometheus cannot scrape the exposition: {t['lastError']}")
        phase = prom.quiet_phase()
        first = time.time() + 1.0
        first += (phase - first) % args.rule_interval
        out["first"] = first            # the engine's rounds start at this data age
        spans = []
        for r in range(args.rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                begin = first + len(spans) * args.span
                wait(lambda: time.time() >= begin, args.span + 60, "a span", interval=0.01)
                prom.rules(on)
                a = prom.reading()
                end = begin + args.span
                wait(lambda: time.time() >= end, args.span + 60, "a span", interval=0.01)
                b = prom.reading()
                if on:          # a few ms of its CPU, in the next span
                    out["alerts"] = prom.alerts()
                print(f"prometheus round {r + 1}, rules {'on' if on else 'off'}: "
                      f"{b['cpu'] - a['cpu']:.2f} s CPU in {b['at'] - a['at']:.1f} s",
                      file=sys.stderr, flush=True)
                spans.append({"round": r, "rules": on, "seconds": b["at"] - a["at"],
                              "cpu": b["cpu"] - a["cpu"],
                              "samples": (b["prometheus_tsdb_head_samples_appended_total"]
                                          - a["prometheus_tsdb_head_samples_appended_total"]),
                              "evaluations": (b["prometheus_rule_group_iterations_total"]
                                              - a["prometheus_rule_group_iterations_total"]),
                              "eval_wall": b["prometheus_rule_group_last_duration_seconds"],
                              "rss": b["rss"], "head_series": b["prometheus_tsdb_head_series"],
                              "age": a["at"] - out["started"]})
        out["spans"] = spans
        out["target"] = prom.target()
        out["rss0"] = prom.rss0
    except BaseException as e:      # reported by the main thread
        out["error"] = e


# ---------------------------------------------------------------- the run
def engine_timeline(args, prom_out: dict) -> dict:
    """The engine's warm-up and rounds, each at the data age of Prometheus' round."""
    gc.collect()
    rss0 = rss()
    run = EngineRun(args.hosts, args.step, args.rule_interval)
    run.advance(args.warmup - args.warmup % args.step)
    wait(lambda: "first" in prom_out or "error" in prom_out, args.warmup + 120,
         "prometheus' first span", interval=0.1)
    if "error" in prom_out:
        return {}
    age = prom_out["first"] - prom_out["started"]
    behind = age - run.k * args.step
    if behind > 0:
        run.advance(behind - behind % args.step)
    rounds = []
    met: dict = {}
    for r in range(args.rounds):
        age = run.k * args.step
        spans = []
        for on in ((True, False) if r % 2 == 0 else (False, True)):    # as Prometheus'
            spans.append(run.advance(args.span))
            if on and r == args.rounds - 1:
                met = run.critical_met()
        rounds.append({k: spans[0][k] + spans[1][k] for k in spans[0]})
        rounds[-1]["age"] = age
        print(f"engine round {r + 1}: " + ", ".join(
            f"{k} {rounds[-1][k]:.2f} s" for k in ("decode", "feed", "evaluate")),
            file=sys.stderr, flush=True)
    gc.collect()
    series, points = run.held()
    from sinks.alerting.checks.rules import CRITICAL
    critical: dict[str, int] = {}
    for (_, rule), judged in run.engine.judged.items():
        if judged.firing == CRITICAL:
            critical[rule] = critical.get(rule, 0) + 1
    return {"rounds": rounds, "critical": dict(sorted(critical.items())), "met": met,
            "rss": rss() - rss0, "series": series, "points": points,
            "keep": dict(run.engine.keep), "counts": dict(run.engine.counts),
            "seconds": run.k * args.step}


def traced_memory(hosts: int, seconds: float, step: float, interval: float) -> dict:
    """What the engine holds, by tracemalloc, for ``hosts`` hosts after ``seconds``."""
    import tracemalloc
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        run = EngineRun(hosts, step, interval)
        run.advance(seconds - seconds % step)
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    series, points = run.held()
    return {"hosts": hosts, "bytes": held, "series": series, "points": points}


def measure(args) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="fw-rules-bench-"))
    procs = []
    prom = None
    try:
        origin = time.time()
        exposer = subprocess.Popen(
            [sys.executable, __file__, "--expose", "--hosts", str(args.hosts), "--step",
             str(args.step), "--origin", repr(origin)], stdout=subprocess.PIPE, text=True)
        procs.append(exposer)
        port = int(exposer.stdout.readline())
        http(f"http://127.0.0.1:{port}/metrics", timeout=120)     # the first body, made
        prom = Prometheus(tmp, port, args.step, args.rule_interval)
        prom_out: dict = {"started": time.time()}
        thread = threading.Thread(target=prometheus_timeline, args=(prom, args, prom_out),
                                  daemon=True)
        thread.start()
        engine = engine_timeline(args, prom_out)
        thread.join(args.warmup + 2 * args.rounds * args.span + 300)
        if "error" in prom_out:
            raise prom_out["error"]
        if "spans" not in prom_out:
            raise SystemExit("prometheus' timeline did not finish")
        traced = traced_memory(min(args.hosts, 500), engine["seconds"], args.step,
                               args.rule_interval)
        return {"engine": engine, "prometheus": prom_out, "traced": traced,
                "exposer_port": port}
    finally:
        if prom is not None:
            prom.stop()
        for p in procs:
            p.terminate()
            p.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------- figures
def med(values: list[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def figures(m: dict, args) -> dict:
    """Per-round figures of both sides, their medians and the ratios of the medians."""
    rules = len(RULES)
    eng = []
    for r in m["engine"]["rounds"]:
        ingest = r["decode"] + r["feed"]
        eng.append({"point_us": 1e6 * ingest / r["points"],
                    "decode_us": 1e6 * r["decode"] / r["points"],
                    "feed_us": 1e6 * r["feed"] / r["points"],
                    "eval_us": 1e6 * r["evaluate"] / max(1, r["evaluations"]),
                    "hosts_us": 1e6 * r["hosts"] / max(1, r["evaluations"]),
                    "ingest_core": ingest / (2 * args.span),
                    "rules_core": r["evaluate"] / (2 * args.span),
                    "core": (ingest + r["evaluate"]) / (2 * args.span),
                    "rows": r["rows"], "evaluations": r["evaluations"], "age": r["age"]})
    prom = []
    spans = m["prometheus"]["spans"]
    for r in range(args.rounds):
        on = next(s for s in spans if s["round"] == r and s["rules"])
        off = next(s for s in spans if s["round"] == r and not s["rules"])
        ingest_core = off["cpu"] / off["seconds"]
        rules_core = on["cpu"] / on["seconds"] - ingest_core
        evaluations = on["evaluations"] * rules * args.hosts
        prom.append({"point_us": 1e6 * off["cpu"] / max(1, off["samples"]),
                     "eval_us": 1e6 * rules_core * on["seconds"] / max(1, evaluations),
                     "ingest_core": ingest_core, "rules_core": rules_core,
                     "core": on["cpu"] / on["seconds"], "samples": off["samples"],
                     "group_runs": on["evaluations"], "eval_wall": on["eval_wall"],
                     "age": min(on["age"], off["age"])})
    keys = ("point_us", "eval_us", "ingest_core", "rules_core", "core")
    out = {"engine": {k: med([e[k] for e in eng])
                      for k in keys + ("decode_us", "feed_us", "hosts_us")},
           "prometheus": {k: med([p[k] for p in prom]) for k in keys},
           "engine_rounds": eng, "prometheus_rounds": prom}
    out["ratio"] = {k: out["engine"][k][0] / out["prometheus"][k][0]
                    if out["prometheus"][k][0] > 0 else float("nan") for k in keys}
    e, t, last = m["engine"], m["traced"], spans[-1]
    # at full windows: each series kept for its longest window (17 bytes a point, window.py)
    full = sum(keep / args.step for keep in e["keep"].values())
    per_host = t["bytes"] / t["hosts"] + (full - t["points"] / t["hosts"]) * 17
    out["memory"] = {
        "engine_series": e["series"], "engine_points": e["points"],
        "engine_rss_per_series": e["rss"] / max(1, e["series"]),
        "engine_traced_per_series": t["bytes"] / max(1, t["series"]),
        "engine_traced_per_point": t["bytes"] / max(1, t["points"]),
        "engine_traced_hosts": t["hosts"],
        "engine_total_mb": t["bytes"] / max(1, t["series"]) * e["series"] / MB,
        "engine_full_points_per_host": full, "engine_full_mb": per_host * args.hosts / MB,
        "prometheus_series": last["head_series"],
        "prometheus_rss_per_series": (last["rss"] - m["prometheus"]["rss0"])
        / max(1, last["head_series"]),
        "prometheus_total_mb": (last["rss"] - m["prometheus"]["rss0"]) / MB,
        "prometheus_rss_mb": last["rss"] / MB,
    }
    return out


def fmt(triple, scale=1.0, digits=2) -> str:
    m, lo, hi = (v * scale for v in triple)
    return f"{m:.{digits}f} ({lo:.{digits}f}-{hi:.{digits}f})"


def report(m: dict, f: dict, args) -> tuple[str, str]:
    e, p, r, mem = f["engine"], f["prometheus"], f["ratio"], f["memory"]
    series = args.hosts * len(SERIES)
    age = statistics.median(x["age"] for x in f["prometheus_rounds"])
    lines = [
        f"{args.hosts:,} hosts x {len(SERIES)} series every {args.step:g} s ({series:,} "
        f"series), {len(RULES)} rules on every host every {args.rule_interval:g} s; "
        f"{args.rounds} rounds, each two spans of {args.span:g} s (data {age:.0f} s old "
        f"at a round's start, median). Medians (min-max); ratio = engine / Prometheus.",
        "",
        "| figure | engine (fleetwatch) | Prometheus 2.42 | ratio |",
        "|---|---|---|---|",
        f"| CPU per datapoint, us (engine: tail decode + feed; Prometheus: scrape, parse, "
        f"append) | {fmt(e['point_us'])} | {fmt(p['point_us'])} | **{r['point_us']:.2f}** |",
        f"| CPU per rule evaluation (one rule, one host), us | {fmt(e['eval_us'])} | "
        f"{fmt(p['eval_us'])} | **{r['eval_us']:.2f}** |",
        f"| ingest, share of a core | {fmt(e['ingest_core'])} | {fmt(p['ingest_core'])} | "
        f"{r['ingest_core']:.2f} |",
        f"| rule evaluation, share of a core | {fmt(e['rules_core'])} | "
        f"{fmt(p['rules_core'])} | {r['rules_core']:.2f} |",
        f"| all, share of a core | {fmt(e['core'])} | {fmt(p['core'])} | "
        f"**{r['core']:.2f}** |",
        f"| memory per series held, bytes | {mem['engine_traced_per_series']:.0f} "
        f"(tracemalloc, {mem['engine_traced_hosts']} hosts; RSS growth "
        f"{mem['engine_rss_per_series']:.0f}) | {mem['prometheus_rss_per_series']:.0f} "
        f"(RSS growth) | "
        f"{mem['engine_traced_per_series'] / mem['prometheus_rss_per_series']:.2f} |",
        f"| series held, memory | {mem['engine_series']:,} (the {len(m['engine']['keep'])} "
        f"metrics rules read), {mem['engine_total_mb']:.0f} MiB | "
        f"{mem['prometheus_series']:,.0f} (every metric), {mem['prometheus_total_mb']:.0f} "
        f"MiB over its start ({mem['prometheus_rss_mb']:.0f} MiB RSS) | |",
    ]
    eng_rounds, prom_rounds = f["engine_rounds"], f["prometheus_rounds"]
    notes = [
        f"Engine: decode {fmt(e['decode_us'])} + feed {fmt(e['feed_us'])} us a datapoint; "
        f"{eng_rounds[0]['evaluations']:,} rule evaluations a round, "
        f"{statistics.median(x['rows'] for x in eng_rounds):,.0f} result rows to submit a "
        f"round (median; their writing is the alerting sink's, bench/alerting.py); "
        f"{mem['engine_points']:,} points held at the end; at full windows (each series "
        f"kept for its longest window) {mem['engine_full_points_per_host']:,.0f} points a "
        f"host, about {mem['engine_full_mb']:,.0f} MiB for the fleet (17 bytes a point, "
        f"window.py). Of the evaluation, matching hosts to rules again at each pass "
        f"(engine.hosts, as the sink's pass does): {fmt(e['hosts_us'])} us of each rule "
        f"evaluation. Prometheus: "
        f"{statistics.median(x['samples'] for x in prom_rounds):,.0f} samples appended in a "
        f"span without rules (expected {series * args.span / args.step:,.0f}), "
        f"{statistics.median(x['group_runs'] for x in prom_rounds):.0f} group evaluations "
        f"in a span with them, the group's last evaluation "
        f"{statistics.median(x['eval_wall'] for x in prom_rounds) * 1000:.0f} ms of wall "
        f"time (its metric).",
        f"Hosts at a rule's critical level, at the end of the last span with Prometheus' "
        f"rules: engine {m['engine']['met']}; Prometheus (ALERTS, pending or firing) "
        f"{dict(sorted(m['prometheus'].get('alerts', {}).items()))}. Firing (past `for`) "
        f"on the engine at the end: {m['engine']['critical']} (Prometheus' `for` restarts "
        f"at each reload of its rules).",
        f"Load average at the end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}.",
    ]
    verdict = "met" if r["core"] <= 1.0 else "not met"
    lines.append(f"\nTarget, no more CPU than Prometheus for the same work: {verdict} "
                 f"(all: {r['core']:.2f}; per datapoint {r['point_us']:.2f}, per rule "
                 f"evaluation {r['eval_us']:.2f}).")
    return "\n".join(lines), "\n".join(notes)


NOTES = """Method (bench/rules.py, its docstring): both sides get the same values from one
generator at the same data age, in the same run. The engine runs on a simulated clock in the
bench's main thread (its CPU by ``time.thread_time``: the STATS decoded from tail frames,
fed, every rule of every host evaluated at each slot, the rows marked submitted); Prometheus
scrapes a child process's exposition of the same series in real time and evaluates the same
rules as alerting rules (their critical level only: a warning level would be a second rule
in Prometheus, so its side is the cheaper one), its CPU from /proc/PID/stat over spans with
and without its rule file (reloaded between them, alternating which comes first), span edges
where it is idle. Prometheus' rule cost is the difference of the two spans' CPU; each span is
short (a minute) and its windows hold only the minutes of data the run has: at full windows
(1 h for the forecasts) both sides read more points per evaluation. ``stats_absent`` is
``absent(cpu.percent, 5m)`` on the engine; Prometheus has no per-host absent, so there it is
the usual ``time() - timestamp(last_over_time(...[15m])) > 300``. Memory is measured two
ways: the engine's by tracemalloc on a 500-host copy at the same age (what its objects hold;
its RSS growth, with the allocator's slack, is given beside it), Prometheus' as its RSS
growth (Go's heap with its GC headroom): the ratio compares unlike measures."""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--hosts", type=int, default=10_000)
    ap.add_argument("--step", type=float, default=10.0, help="seconds between STATS")
    ap.add_argument("--rule-interval", type=float, default=30.0)
    ap.add_argument("--span", type=float, default=60.0, help="seconds of a measured span")
    ap.add_argument("--warmup", type=float, default=120.0, help="seconds before measuring")
    ap.add_argument("--quick", action="store_true",
                    help="100 hosts, a 1 s step, 3 s rules, 6 s spans, one round (tests)")
    ap.add_argument("--json", action="store_true", help="print one JSON document")
    ap.add_argument("--results", type=Path, default=None,
                    help="write the figures into this RESULTS.md")
    ap.add_argument("--expose", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--origin", type=float, default=0.0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.expose:
        expose(args.hosts, args.step, args.origin)
        return 0
    if args.quick:
        args.hosts, args.step, args.rule_interval = 100, 1.0, 3.0
        args.span, args.warmup, args.rounds = 6.0, 6.0, 1
    if args.rule_interval % args.step or args.span % args.rule_interval or args.rounds < 1:
        ap.error("--rule-interval must be a multiple of --step, --span of --rule-interval")
    m = measure(args)
    f = figures(m, args)
    body, notes = report(m, f, args)
    if args.json:
        engine = {k: v for k, v in m["engine"].items() if k != "rounds"}
        print(json.dumps({"figures": f, "engine": engine,
                          "prometheus_spans": m["prometheus"]["spans"]}, indent=1))
    else:
        print(f"{body}\n\n{notes}")
    if args.results:
        command = "python bench/rules.py " + " ".join(sys.argv[1:])
        write_section(args.results, HEADING, command, body, notes + "\n\n" + NOTES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
