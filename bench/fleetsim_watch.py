"""What bench/fleetsim.py reads from the processes it runs: their counters and their cost.

- :class:`TailStats`: the routers' own STATS and the sinks' (``source`` router / sink,
  SPEC 4.3), from a SUB on each router's tail subscribed to those senders' topics only
  (``STATS/ID/``), so the agents' traffic is not published to it;
- :func:`log_counters`: the last ``counters: k=v ...`` line a sink or the scheduler logged
  (both log their counters at stop);
- :class:`Usage`: CPU seconds, RSS and run-queue wait (the time the main thread was ready
  but had no CPU: what the machine's other load cost it) of each process, sampled; a
  component may have several processes in turn (a restarted router), whose CPU adds up;
- :func:`db_figures`: from the sinks' state database, NOTIFY sent -> written at the
  alerting sink, and RUN slot -> the check's state saved by the alerting sink (the latest
  result of each check); NOTIFYs recorded and the NOTIFY and host DOWN alerts raised.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import psutil
import zmq

COUNTERS = re.compile(r"counters: (.*)$")


class TailStats:
    """The latest STATS metrics of each router and sink, by sender id."""

    def __init__(self, curve: tuple | None = None):
        """``curve``: (own certificate, the routers' certificate) when CURVE is on."""
        self.ctx = zmq.Context()
        self.sub = self.ctx.socket(zmq.SUB)
        self.sub.linger = 0
        if curve:
            from fleetwatch import security
            security.client(self.sub, *curve)
        self.latest: dict[str, dict] = {}
        self.reports: dict[str, int] = {}
        #: router id -> the last metrics of its earlier processes (a restarted router)
        self.before_restart: dict[str, list[dict]] = {}

    def connect(self, tail: str, senders: list[str]) -> None:
        self.sub.connect(tail)
        for sender in senders:
            self.sub.subscribe(f"STATS/{sender}/".encode())

    def pump(self, timeout: float = 0.0) -> None:
        deadline = time.monotonic() + timeout
        while self.sub.poll(max(0, int((deadline - time.monotonic()) * 1000))):
            envelope, _sig, body = self.sub.recv_multipart()[:3]    # (then SEQ, SPEC 4.1)
            sender = envelope.decode().split("/")[1]
            self.latest[sender] = json.loads(body).get("metrics", {})
            self.reports[sender] = self.reports.get(sender, 0) + 1
            if time.monotonic() >= deadline:
                break

    def restarted(self, router: str) -> None:
        """Keep ``router``'s last figures before its process is replaced."""
        self.before_restart.setdefault(router, []).append(self.latest.pop(router, {}))

    def totals(self, router: str) -> dict:
        """``router``'s counters summed over its processes."""
        out: dict[str, float] = {}
        for metrics in [*self.before_restart.get(router, []), self.latest.get(router, {})]:
            for k, v in metrics.items():
                out[k] = out.get(k, 0) + v
        return out

    def settled(self, senders: list[str], key, timeout: float) -> bool:
        """Wait until ``key(metrics)`` of each sender stays the same over two reports."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            seen = dict(self.reports)
            self.pump(0.2)
            if not all(self.reports.get(s, 0) > seen.get(s, 0) for s in senders):
                continue
            now = [key(s, self.latest.get(s, {})) for s in senders]
            if now == last:
                return True
            last = now
        return False

    def close(self) -> None:
        self.sub.close(0)
        self.ctx.term()


def log_counters(text: str) -> dict[str, float]:
    """The counters of the last ``counters: k=v k=v`` line in a log."""
    for line in reversed(text.splitlines()):
        m = COUNTERS.search(line)
        if m:
            out = {}
            for item in m.group(1).split():
                k, _, v = item.partition("=")
                try:
                    out[k] = float(v) if "." in v else int(v)
                except ValueError:
                    pass
            return out
    return {}


class Usage:
    """CPU and RSS of named components, each one or more processes in turn."""

    def __init__(self):
        self.procs: dict[str, list[psutil.Process]] = {}
        self.cpu_at: dict[int, float] = {}         # pid -> CPU seconds at the window start
        self.cpu_last: dict[int, float] = {}       # pid -> CPU seconds at its last sample
        #: pid -> seconds its main thread waited for a CPU while runnable (first, last)
        self.wait_at: dict[int, float] = {}
        self.wait_last: dict[int, float] = {}
        self.rss: dict[str, list[tuple[float, float]]] = {}   # name -> (time, MiB)
        self.window = (0.0, 0.0)
        #: name -> a process whose children join it as they start (PostgreSQL's backends)
        self.trees: dict[str, psutil.Process] = {}

    def add(self, name: str, pid: int) -> None:
        proc = psutil.Process(pid)
        self.procs.setdefault(name, []).append(proc)
        if self.window[0]:
            self.cpu_at[pid] = _cpu(proc) or 0.0
            self.wait_at[pid] = _waited(pid) or 0.0

    def add_tree(self, name: str, pid: int) -> None:
        """``pid`` and, from each sample on, its children."""
        self.add(name, pid)
        self.trees[name] = psutil.Process(pid)

    def _grow_trees(self) -> None:
        for name, root in self.trees.items():
            known = {p.pid for p in self.procs[name]}
            try:
                children = root.children(recursive=True)
            except psutil.Error:
                continue
            for child in children:
                if child.pid not in known:
                    try:
                        self.add(name, child.pid)
                    except psutil.Error:
                        pass

    def start_window(self) -> None:
        self._grow_trees()
        self.window = (time.monotonic(), 0.0)
        for procs in self.procs.values():
            for proc in procs:
                self.cpu_at[proc.pid] = _cpu(proc) or 0.0
                self.wait_at[proc.pid] = _waited(proc.pid) or 0.0
        self.sample()

    def sample(self) -> None:
        self._grow_trees()
        now = time.monotonic()
        for name, procs in self.procs.items():
            rss = 0.0
            for proc in procs:
                cpu = _cpu(proc)
                if cpu is None:
                    continue
                self.cpu_last[proc.pid] = cpu
                self.wait_last[proc.pid] = _waited(proc.pid) or self.wait_last.get(proc.pid, 0.0)
                try:
                    rss += proc.memory_info().rss / 2 ** 20
                except psutil.Error:
                    pass
            self.rss.setdefault(name, []).append((now, rss))

    def end_window(self) -> None:
        self.sample()
        self.window = (self.window[0], time.monotonic())

    def figures(self, name: str) -> dict:
        start, end = self.window
        wall = max(1e-9, end - start)
        cpu = sum(self.cpu_last.get(p.pid, 0.0) - self.cpu_at.get(p.pid, 0.0)
                  for p in self.procs[name])
        waited = max(self.wait_last.get(p.pid, 0.0) - self.wait_at.get(p.pid, 0.0)
                     for p in self.procs[name])
        series = [(t, r) for t, r in self.rss.get(name, []) if start <= t <= end]
        first, last = (series[0][1], series[-1][1]) if series else (0.0, 0.0)
        half = [(t, r) for t, r in series if t >= start + (end - start) / 2]
        growth = ((half[-1][1] - half[0][1]) / ((half[-1][0] - half[0][0]) / 60)
                  if len(half) > 1 and half[-1][0] > half[0][0] else 0.0)
        return {"cpu_percent": round(100 * cpu / wall, 1),
                "main_thread_waited_percent": round(100 * waited / wall, 1), "rss_start_mib": round(first, 1),
                "rss_end_mib": round(last, 1), "rss_growth_mib_per_min": round(growth, 1),
                "processes": len(self.procs[name])}


def _cpu(proc: psutil.Process) -> float | None:
    try:
        t = proc.cpu_times()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return None
    return t.user + t.system + getattr(t, "children_user", 0) + getattr(t, "children_system", 0)


def _waited(pid: int) -> float | None:
    """Seconds the main thread of ``pid`` spent runnable but waiting for a CPU (the second
    field of /proc/PID/schedstat): how much the machine's other load held it back."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


def db_figures(url: str, summary, quiet_at: float | None = None) -> dict:
    """From the sinks' state database (SQLite or PostgreSQL): latencies the sinks recorded
    (milliseconds, by ``summary``), and the counts the checks compare: NOTIFYs recorded,
    NOTIFY alerts raised (and for how many distinct NOTIFYs), host DOWN alerts raised before
    ``quiet_at`` (when the agents stopped beating at the run's end: the DOWNs after it are
    right)."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.exc import SQLAlchemyError
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).exists():
        return {}
    engine = create_engine(url)
    out: dict = {}
    try:
        with engine.connect() as conn:
            def one(sql: str, **params):
                return conn.execute(text(sql), params).scalar() or 0
            rows = conn.execute(text("SELECT received_at - sent_at FROM notifications"))
            out["notify_to_written"] = summary([r[0] for r in rows])
            try:
                rows = conn.execute(text(
                    "SELECT s.updated - c.slot FROM checks c JOIN check_state s "
                    "ON s.uuid = c.uuid AND s.plugin = c.plugin WHERE c.slot IS NOT NULL"))
                out["slot_to_result_saved"] = summary([r[0] for r in rows])
            except SQLAlchemyError as e:
                conn.rollback()
                out["slot_to_result_saved"] = {"n": 0, "error": str(e).splitlines()[0]}
            out["counts"] = {
                "notifications": one("SELECT count(*) FROM notifications"),
                "notify_alerts": one("SELECT count(*) FROM alert_events WHERE kind = 'notify' "
                                     "AND action = 'trigger'"),
                "notify_alert_keys": one("SELECT count(DISTINCT key) FROM alert_events "
                                         "WHERE kind = 'notify' AND action = 'trigger'"),
                "host_down_alerts": one("SELECT count(*) FROM alert_events WHERE kind = 'host' "
                                        "AND action = 'trigger' AND created < :quiet",
                                        quiet=quiet_at if quiet_at else float("inf"))}
    finally:
        engine.dispose()
    return out
