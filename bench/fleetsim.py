"""A simulated fleet against real routers, sinks, carbon and a scheduler, measured end to end.

    python bench/fleetsim.py --agents 10000 [--curve] [--storm] [--minutes M | --seconds S]
                             [--routers 1] [--processes N] [--heartbeat 1] [--json]
                             [--results bench/RESULTS.md]

Starts, on 127.0.0.1 (tests/support/fleet.py): ``--routers`` real routers; the registry,
alerting, history and graphite sinks (graphite into a real carbon-cache, the demo's, when
carbon is installed; else no graphite sink, said so); a real scheduler; and the agents,
``--per-process`` (2,500) simulated agents per process (bench/fleetsim_agents.py: FWP/1,
each its own DEALER to one router, agent N to router N mod R). They say HELLO, beat every
``--heartbeat`` s, send STATS every ``--stats`` s, one in ``--notify-every`` sends a NOTIFY
every ``--notify-interval`` s (resent until ACKed), and each declares ``--plugins`` plugins
of ``--check-interval`` s, whose RUNs the scheduler sends and they answer at once.

Once every agent is attached and ``--settle`` seconds passed, the measured window runs for
``--minutes`` (or ``--seconds``); then the agents go quiet (spooled messages are still
resent until ACKed), the routers' and sinks' counters are read once they settle, and
everything is stopped. With ``--storm`` the first router is restarted (SIGTERM, then started
on the same endpoints) halfway through the window: it prints how long until every agent is
attached again, and the heartbeat round trips of the attached agents meanwhile.

Prints per component (each router, each sink, the scheduler, carbon, the agent processes):
CPU (% of one core over the window), RSS at the window's start and end and its growth over
the window's second half, messages in and out and losses, from the components' own counters
(routers' and sinks' STATS, the scheduler's and sinks' logged counters); then latencies
(heartbeat round trip, HELLO -> WELCOME, NOTIFY -> ACK at the agent, NOTIFY -> written at the
alerting sink, RUN slot -> RUN at the agent, RUN slot -> the check's state saved by the
alerting sink) and the consistency checks (what was sent = what arrived + counted drops,
per message type and sink). ``--json`` prints all of it as one JSON document instead.

Every process is stopped at the end, on an error and on Ctrl-C. The descriptor limit is
checked first: exit status 77 with what to raise when it cannot hold the connections.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fleetsim_report import checks, render, summary  # noqa: E402
from fleetsim_watch import TailStats, Usage, db_figures, log_counters  # noqa: E402
from support.dealers import FDS_PER_SOCKET, raise_fd_limit  # noqa: E402
from support.fleet import Fleet  # noqa: E402

AGENTS_SCRIPT = Path(__file__).resolve().parent / "fleetsim_agents.py"
SINK_TYPES = ("registry", "alerting", "history", "graphite")
#: descriptors a router needs besides one per agent connection
ROUTER_SPARE_FDS = 512


class Agents:
    """One process of simulated agents, its status lines read by a thread."""

    def __init__(self, name: str, settings: dict, log: Path):
        self.name = name
        self._log = open(log, "ab")
        self.popen = subprocess.Popen([sys.executable, str(AGENTS_SCRIPT), json.dumps(settings)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=self._log, text=True, start_new_session=True)
        self.status: dict = {"attached": 0, "spool": 0}
        self.final: dict | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        for line in self.popen.stdout:
            doc = json.loads(line)
            if "final" in doc:
                self.final = doc["final"]
            else:
                self.status = doc

    def tell(self, command: str) -> None:
        if self.popen.poll() is None:
            self.popen.stdin.write(command + "\n")
            self.popen.stdin.flush()

    def stop(self, timeout: float = 30.0) -> None:
        try:
            self.tell("stop")
            self.popen.stdin.close()
            self.popen.wait(timeout)
        except (OSError, subprocess.TimeoutExpired):
            self.popen.kill()
            self.popen.wait(5)
        self.thread.join(5)
        self._log.close()


def check_fds(args) -> str | None:
    """What to raise, if the descriptor limit cannot hold a router's connections."""
    per_router = -(-args.agents // args.routers) + ROUTER_SPARE_FDS
    per_sim = min(args.agents, args.per_process) * FDS_PER_SOCKET + 64
    needed = max(per_router, per_sim)
    limit = raise_fd_limit(needed)
    if limit >= needed:
        return None
    return (f"fleetsim: {args.agents} agents need {needed} descriptors per process (a router "
            f"holds {per_router - ROUTER_SPARE_FDS} connections), the limit is {limit}: raise "
            f"it (`ulimit -n {needed}` as root or in /etc/security/limits.conf, LimitNOFILE= "
            f"in a unit), or use more --routers")


def carbon_or_none(root: Path):
    try:
        from fleetwatch.cli.demo.carbon import Carbon, CarbonError
        return Carbon(root / "carbon", retentions="10s:1h").start()
    except (ImportError, CarbonError) as e:
        print(f"fleetsim: no carbon-cache ({e}); running without the graphite sink",
              file=sys.stderr)
        return None


class Run:
    """The processes of one simulation, started and stopped together."""

    def __init__(self, args, root: Path):
        self.args, self.root = args, root
        self.fleet = Fleet(root)
        self.usage, self.tail = Usage(), TailStats()
        self.routers: list[dict] = []
        #: sink type -> its processes (``--alerting N``: several alerting sinks)
        self.sinks: dict[str, list] = {}
        self.names = {t: ([f"sink-{t}-{i + 1}" for i in range(args.alerting)]
                          if t == "alerting" and args.alerting > 1 else [f"sink-{t}"])
                      for t in SINK_TYPES}
        self.pg = None
        self.scheduler = None
        self.carbon = None
        self.sims: list[Agents] = []
        self.hogs: list[subprocess.Popen] = []
        self.keys = None
        self.backend_keys: dict[str, str] = {}
        self.events: dict[str, float] = {}

    # ---------------------------------------------------------------- start
    def start(self) -> None:
        a = self.args
        self.start_hogs()
        client = {}
        if a.curve:
            from fleetwatch import security
            from support.keys import Keys
            self.keys = Keys(self.root)
            own = security.read_certificate(self.keys.backend("fleetsim"), need_secret=True)
            self.tail.close()
            self.tail = TailStats((own, self.keys.router))
            # every key before the routers start: they re-read changed allowlists as they run
            self.backend_keys = {name: self.keys.backend(name)
                                 for name in [n for t in SINK_TYPES for n in self.names[t]]
                                 + ["scheduler"]}
            for n in range(a.agents):
                self.keys.agent(f"sim-{n:05d}")
        if a.postgres:
            self.fleet.state_url = self.postgres()
        router_extra = {"stats_interval": 1.0, "log_level": "WARNING"}
        if self.keys:
            router_extra["security"] = self.keys.router_security()
        for n in range(a.routers):
            info = self.fleet.router(f"router-{n + 1}", **router_extra)
            self.routers.append(info)
            self.usage.add(info["id"], info["proc"].pid)
        self.carbon = carbon_or_none(self.root) if not a.no_carbon else None
        if self.carbon:
            self.usage.add("carbon", self.carbon.proc.pid)
        for type_ in SINK_TYPES:
            if type_ == "graphite" and not self.carbon:
                continue
            extra = {"stats_interval": 1.0, "log_level": "INFO"}
            if type_ == "history":
                extra["history"] = {"lake": str(self.root / "lake")}
            if type_ == "graphite":
                extra["graphite"] = {"port": self.carbon.port, "prefix": "sim"}
            for name in self.names[type_]:
                if self.keys:
                    extra["security"] = self.keys.client(self.backend_keys[name])
                proc = self.fleet.sink(type_, self.routers, name=name, **extra)
                self.sinks.setdefault(type_, []).append(proc)
                self.usage.add(f"sink-{type_}", proc.pid)     # one row per type, summed
        if self.keys:
            client = {"security": self.keys.client(self.backend_keys["scheduler"])}
        if a.jitter is not None:
            client["jitter"] = a.jitter
        self.scheduler = self.fleet.scheduler(self.routers, refresh_interval=10.0,
                                              stats_interval=5.0, **client)
        self.usage.add("scheduler", self.scheduler.pid)
        senders = [r["id"] for r in self.routers] + [n for t in self.sinks for n in self.names[t]]
        for info in self.routers:
            self.tail.connect(info["endpoints"]["tail"], senders)
        deadline = time.monotonic() + 30
        while not all(self.tail.reports.get(s) for s in senders):   # sinks STATS once welcomed
            if time.monotonic() > deadline:
                raise SystemExit(f"fleetsim: no STATS from {senders} within 30 s")
            self.tail.pump(0.2)
            self.check_alive()
        self.start_agents()

    def start_hogs(self) -> None:
        """``--cpu-hog N``: N busy loops, bounded in time whatever happens to this process."""
        a = self.args
        longest = a.attach_timeout + a.settle + (a.seconds or a.minutes * 60) + \
            (a.storm_timeout if a.storm else 0) + 300
        code = ("import time\nend = time.monotonic() + %r\n"
                "while time.monotonic() < end:\n    pass\n" % longest)
        for _ in range(a.cpu_hog):
            hog = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
            self.hogs.append(hog)
            self.usage.add("cpu-hog", hog.pid)

    def start_agents(self) -> None:
        a = self.args
        endpoints = [r["endpoints"]["agents"] for r in self.routers]
        settings = {"routers": endpoints, "heartbeat": a.heartbeat, "stats": a.stats,
                    "metrics": a.metrics, "plugins": a.plugins, "check_interval": a.check_interval,
                    "notify_every": a.notify_every, "notify_interval": a.notify_interval,
                    "connect_rate": a.connect_rate, "prefix": "sim", "curve": a.curve}
        if self.keys:
            settings.update(agent_keys=str(self.keys.agents_dir),
                            router_public=self.keys.router_public)
        for first in range(0, a.agents, a.per_process):
            n = len(self.sims) + 1
            sim = Agents(f"agents-{n}", {**settings, "first": first,
                                         "count": min(a.per_process, a.agents - first)},
                         self.root / f"agents-{n}.log")
            self.sims.append(sim)
            self.usage.add("agents", sim.popen.pid)

    # ---------------------------------------------------------------- phases
    def attached(self) -> int:
        return sum(s.status.get("attached", 0) for s in self.sims)

    def wait_attached(self, timeout: float) -> float | None:
        """Seconds until every agent is attached, or None after ``timeout``."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            self.tail.pump(0.25)
            if self.attached() >= self.args.agents:
                return time.monotonic() - start
            self.check_alive()
        return None

    def check_alive(self) -> None:
        for proc in self.fleet.procs:
            if not proc.alive() and proc.name not in self.events.get("stopped", ()):
                raise SystemExit(f"fleetsim: {proc.name} exited early; see {proc.log_path}")
        for sim in self.sims:
            if sim.popen.poll() is not None:
                raise SystemExit(f"fleetsim: {sim.name} exited {sim.popen.returncode}; see "
                                 f"{self.root / (sim.name + '.log')}")

    def phase(self, name: str) -> None:
        for sim in self.sims:
            sim.tell(f"phase {name}")

    def hold(self, seconds: float) -> None:
        end = time.monotonic() + seconds
        next_sample = 0.0
        while time.monotonic() < end:
            self.tail.pump(min(0.5, max(0.0, end - time.monotonic())))
            if time.monotonic() >= next_sample:
                self.usage.sample()
                next_sample = time.monotonic() + 5.0
            self.check_alive()

    def storm(self) -> dict:
        info = self.routers[0]
        self.phase("storm")
        self.tail.restarted(info["id"])
        stopped = time.monotonic()
        self.usage.sample()
        info["proc"].stop()
        self.events.setdefault("stopped", set()).add(info["proc"].name)
        bind = {**info["endpoints"]}
        restarted = self.fleet.router(info["id"], bind=bind, stats_interval=1.0,
                                      log_level="WARNING",
                                      **({"security": self.keys.router_security()}
                                         if self.keys else {}))
        ready = time.monotonic()
        info["proc"] = restarted["proc"]
        self.usage.add(info["id"], info["proc"].pid)
        # every agent of that router is detached: wait until they are all back
        while self.attached() >= self.args.agents and time.monotonic() - stopped < 10:
            self.tail.pump(0.1)
        took = self.wait_attached(self.args.storm_timeout)
        done = time.monotonic()
        self.phase("after")
        return {"router": info["id"], "restarted_after_s": round(ready - stopped, 2),
                "all_attached_after_s": None if took is None else round(done - stopped, 2)}

    def drops(self) -> dict:
        """The routers' drop counters (``router.dropped.TYPE.SINK``) summed, as they stand."""
        out: dict = {}
        for info in self.routers:
            for k, v in self.tail.totals(info["id"]).items():
                if k.startswith("router.dropped."):
                    key = k[len("router.dropped."):]
                    out[key] = out.get(key, 0) + v
        return out

    def drain(self) -> dict:
        """Quiet the agents, let spools empty and counters settle; then the final figures."""
        quiet_at = time.time()      # from now on no agent beats: DOWNs are the run's end
        for sim in self.sims:
            sim.tell("quiet")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(s.status.get("spool") for s in self.sims):
            self.tail.pump(0.25)
        routers = [r["id"] for r in self.routers]
        # the routers' counts but the STATS, which their own and the sinks' reports add to
        settled = self.tail.settled(routers, lambda s, m: sum(
            v for k, v in m.items() if k.startswith(("router.received", "router.relayed",
                                                     "router.forwarded"))
            and not k.startswith("router.relayed.STATS")), 20)
        self.caught_up(routers, 60)
        for sim in self.sims:
            sim.stop()
        sinks_counts = {}
        for type_, procs in self.sinks.items():
            total: dict = {}
            for proc in procs:
                proc.stop(15)
                counts = log_counters(proc.log()) or {
                    k[5:]: v for k, v in self.tail.latest.get(proc.name, {}).items()}
                for k, v in counts.items():
                    total[k] = total.get(k, 0) + v
            sinks_counts[type_] = total
        self.scheduler.stop(15)
        return {"settled": settled,
                "routers": {r: self.tail.totals(r) for r in routers}, "sinks": sinks_counts,
                "scheduler": log_counters(self.scheduler.log()),
                "agents": [s.final or {} for s in self.sims],
                "db": db_figures(self.fleet.state_url, summary, quiet_at)}

    def caught_up(self, routers: list[str], timeout: float) -> None:
        """Wait until each sink received what the routers relayed to it (but the STATS,
        which keep coming): a sink still working through its queue is not stopped early."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            behind = []
            for type_ in self.sinks:
                relayed = sum(v for r in routers for k, v in self.tail.latest.get(r, {}).items()
                              if k.startswith("router.relayed.") and k.endswith("." + type_)
                              and not k.startswith("router.relayed.STATS."))
                got = sum(self.tail.latest.get(name, {}).get("sink.received", 0)
                          for name in self.names[type_])
                if got < relayed:
                    behind.append(type_)
            if not behind:
                return
            self.tail.pump(0.5)
        print(f"fleetsim: sinks still behind after {timeout:g}s: {behind}", file=sys.stderr)

    def stop(self) -> None:
        for hog in self.hogs:
            hog.kill()
            hog.wait(10)
        for sim in self.sims:
            if sim.popen.poll() is None:
                sim.stop(10)
        self.fleet.stop_all()
        if self.carbon:
            self.carbon.stop()
        self.tail.close()
        if self.pg is not None:
            self.pg.stop()

    def postgres(self) -> str:
        """A throwaway PostgreSQL cluster (tests/support/pg.py) for the sinks' state."""
        from support.pg import PgCluster, find_bindir
        bindir = find_bindir()
        if bindir is None:
            raise SystemExit("fleetsim: --postgres needs PostgreSQL's binaries "
                             "(apt-get install postgresql, as `make system-packages` does)")
        self.pg = PgCluster(bindir).start()
        pid = int((self.pg.data / "postmaster.pid").read_text().split()[0])
        self.usage.add_tree("postgres", pid)        # the server and its backends
        return self.pg.create_database("fleetsim")


def simulate(args, root: Path) -> dict:
    run = Run(args, root)
    started = time.monotonic()
    try:
        run.start()
        attach = run.wait_attached(args.attach_timeout)
        if attach is None:      # measured all the same: the figures say why
            print(f"fleetsim: only {run.attached()} of {args.agents} agents attached within "
                  f"{args.attach_timeout:g}s", file=sys.stderr)
        run.hold(args.settle)
        run.phase("steady")
        run.usage.start_window()
        dropped_before = run.drops()
        window = args.seconds if args.seconds else args.minutes * 60
        storm = None
        if args.storm:
            run.hold(window / 2)
            began = time.monotonic()
            storm = run.storm()
            run.hold(max(0.0, window / 2 - (time.monotonic() - began)))
        else:
            run.hold(window)
        run.usage.end_window()
        run.tail.pump(1.5)          # the routers' last report of the window (every second)
        after = run.drops()
        window_drops = {k: v - dropped_before.get(k, 0) for k, v in after.items()
                        if v - dropped_before.get(k, 0)}
        final = run.drain()
        final["window_drops"] = window_drops
        usage = {name: run.usage.figures(name) for name in run.usage.procs}
        return {"settings": {k: v for k, v in vars(args).items() if k not in ("results",)},
                "attach_s": None if attach is None else round(attach, 2), "window_s": round(window, 1), "storm": storm,
                "usage": usage, **final, "checks": checks(final, args, storm is not None),
                "wall_s": round(time.monotonic() - started, 1)}
    finally:
        run.stop()


def parse(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--routers", type=int, default=1)
    ap.add_argument("--per-process", type=int, default=2500,
                    help="simulated agents per process")
    ap.add_argument("--processes", type=int,
                    help="simulated agent processes (instead of --per-process)")
    ap.add_argument("--minutes", type=float, default=3.0, help="the measured window")
    ap.add_argument("--seconds", type=float, help="the measured window, for short runs")
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds after every agent attached before the window opens")
    ap.add_argument("--heartbeat", type=float, default=1.0)
    ap.add_argument("--stats", type=float, default=10.0, help="seconds between STATS")
    ap.add_argument("--metrics", type=int, default=30, help="metrics per STATS")
    ap.add_argument("--notify-every", type=int, default=10, help="one agent in N notifies")
    ap.add_argument("--notify-interval", type=float, default=30.0)
    ap.add_argument("--plugins", type=int, default=2, help="plugins declared per agent")
    ap.add_argument("--check-interval", type=float, default=60.0)
    ap.add_argument("--jitter", type=float,
                    help="the scheduler's jitter (its default: 5 s, at most interval/10)")
    ap.add_argument("--connect-rate", type=float, default=250.0,
                    help="first connections per second per agent process")
    ap.add_argument("--curve", action="store_true")
    ap.add_argument("--storm", action="store_true", help="restart a router halfway")
    ap.add_argument("--storm-timeout", type=float, default=120.0)
    ap.add_argument("--attach-timeout", type=float, default=180.0)
    ap.add_argument("--no-carbon", action="store_true", help="no carbon, no graphite sink")
    ap.add_argument("--cpu-hog", type=int, default=0, metavar="N",
                    help="N processes that spin on a CPU beside the fleet for the whole run "
                         "(each in its own session, as a neighbour would be; each stops by "
                         "itself after the run's longest possible time)")
    ap.add_argument("--alerting", type=int, default=1,
                    help="alerting sinks (they share the work and the state database)")
    ap.add_argument("--postgres", action="store_true",
                    help="the sinks' state in PostgreSQL (a throwaway cluster), not SQLite")
    ap.add_argument("--keep", help="run in this directory and keep it (logs, configs, lake)")
    ap.add_argument("--json", action="store_true", help="print the figures as JSON")
    ap.add_argument("--results", help="write the figures into this markdown file")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.processes:
        args.per_process = -(-args.agents // args.processes)
    problem = check_fds(args)
    if problem:
        print(problem, file=sys.stderr)
        return 77
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        doc = simulate(args, Path(args.keep))
    else:
        with tempfile.TemporaryDirectory(prefix="fw-fleetsim-") as tmp:
            doc = simulate(args, Path(tmp))
    if args.json:
        print(json.dumps(doc, indent=1, default=str))
    else:
        print(render(doc))
    if args.results:
        from fleetsim_report import write_results
        command = "python bench/fleetsim.py " + " ".join(
            argv if argv is not None else sys.argv[1:])
        write_results(Path(args.results), command.replace(f" --results {args.results}", ""), doc)
    good = doc["attach_s"] is not None and all(c["ok"] or not c["strict"] for c in doc["checks"])
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
