"""``fleetwatch demo``: a whole fleet on this machine, each process its own, on 127.0.0.1.

:mod:`fleetwatch.cli.demo.plan` writes one config file per process into ``--dir`` (and the CURVE
keys unless ``--insecure``); this module starts the processes in order (routers, carbon-cache,
graphite-web, Debian's Prometheus and the devices' snmpd, sinks (the prometheus and
remote_write sinks among them), then, once every router has each sink type connected, so
that the routers drop nothing at start, the site routers, the scheduler, the agents, the
console, the OTLP application), records them in ``demo.json``, prints where everything
listens (graphite-web's URL too: the operator config's ``graphite.url``; the console's, with
its demo user and password; the prometheus sink's ``/metrics``; the agent's OTLP intake;
Prometheus' own; the devices' snmpd, with a linkDown trap to send), and supervises them
until Ctrl-C or SIGTERM, when it stops them all: agents first, routers last, SIGKILL for any
that do not exit in time.
"""

from __future__ import annotations

import argparse
import dataclasses
import fcntl
import json
import os
import shlex
import socket
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from fleetwatch import private
from fleetwatch.lifeline import die_with_parent
from fleetwatch.config import build, load
from fleetwatch.cli.demo.plan import COMPACT_EVERY, GRAPHITE_PREFIX, OTLP_APP_MODULES, \
    Child, DemoConfig, plan
from fleetwatch.cli.demo.promserver import ALERT, CHECK
from fleetwatch.cli.demo.supervise import Supervisor
from fleetwatch.cli.demo.switch import device_commands, device_lines, record as devices_record
from fleetwatch.display import escape

__all__ = ["DemoConfig", "plan", "run"]

STOP_TIMEOUT = 5.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH",
                        help="optional YAML file with the settings below (flags win)")
    parser.add_argument("--dir", help="where configs, logs and state go (default: .demo)")
    parser.add_argument("--routers", type=int, help="number of routers, a mesh (default 2)")
    parser.add_argument("--sites", type=int,
                        help="site routers linked upstream, each with an agent behind it "
                             "(default 1; 0: none)")
    parser.add_argument("--heartbeat", type=float,
                        help="the agent's heartbeat interval in seconds (default 1)")
    parser.add_argument("--stats-interval", type=float,
                        help="the agent's stats interval in seconds (default 10)")
    parser.add_argument("--insecure", action="store_true", default=None,
                        help="run without CURVE (plain TCP), for debugging; the default "
                             "generates keys into DIR/keys and turns CURVE on everywhere")
    parser.add_argument("--alert-webhook", metavar="URL",
                        help="deliver the demo's alerts to this webhook (PagerDuty Events v2 "
                             "JSON)")
    parser.add_argument("--alert-smtp", metavar="HOST:PORT",
                        help="deliver the demo's alerts by email through this SMTP server")
    parser.add_argument("--alert-to", metavar="ADDR", action="append",
                        help="a recipient of the alert email (repeat for more)")
    parser.add_argument("--graphite-tags", action="store_true", default=None,
                        help="the graphite sink sends tagged series (NAME;host=HOST), "
                             "registered in graphite-web's tag database")
    parser.add_argument("--spark-cluster", action="store_true", default=None,
                        help="run the history side on a local Spark standalone cluster "
                             "(its master's web UI printed) instead of local[1]")
    parser.add_argument("--no-warm-spark", dest="warm_spark", action="store_false",
                        default=None,
                        help="start no warm Spark (a Spark Connect server, local[2], driver "
                             "1g, that history sql uses): each history command starts its "
                             "own Spark")
    parser.add_argument("--for", dest="duration", type=float, default=0.0, metavar="SECONDS",
                        help="stop by itself after this many seconds (default: run until "
                             "Ctrl-C)")


def settings(args: argparse.Namespace) -> DemoConfig:
    """The config file's settings (or the defaults), overridden by the flags given."""
    base = load(DemoConfig, args.config) if args.config else DemoConfig()
    flags = {"dir": args.dir, "routers": args.routers, "sites": getattr(args, "sites", None),
             "heartbeat": args.heartbeat,
             "stats_interval": args.stats_interval, "insecure": args.insecure,
             "alert_webhook": args.alert_webhook, "alert_smtp": args.alert_smtp,
             "alert_to": args.alert_to, "graphite_tags": args.graphite_tags,
             "spark_cluster": getattr(args, "spark_cluster", None),
             "warm_spark": getattr(args, "warm_spark", None)}
    merged = {**dataclasses.asdict(base), **{k: v for k, v in flags.items() if v is not None}}
    return build(DemoConfig, merged, args.config or "command line")


def start(child: Child) -> None:
    log = private.append(child.log)         # 0600: what the processes log is private
    child.popen = subprocess.Popen(child.argv, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=die_with_parent())   # SIGTERM if the demo is killed
    log.close()


def wait_ready(children: list[Child], waits: list[tuple[str, Callable[[], bool]]],
               timeout: float = 20.0):
    """Until each of ``waits`` (name, ready) is ready; RuntimeError if a child exits first."""
    deadline = time.monotonic() + timeout
    for name, ready in waits:
        while not ready():
            dead = [c for c in children if c.popen and c.popen.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead[0].name} exited at start; see {dead[0].log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {timeout}s; see its log")
            time.sleep(0.05)


def routers_say(root: Path, enough: Callable, listing: bool = False) -> Callable[[], bool]:
    """Whether the PEERS answer (SPEC 4.3) of every router of the demo's operator config is
    ``enough``; with ``listing``, the answer lists the agents, else only counts them."""
    from fleetwatch.ask import ask_all
    from fleetwatch.cli.operator import OperatorConfig, client_keys
    config = load(OperatorConfig, str(root / "fleetwatch.yaml"))
    keys = client_keys(config)

    def ready() -> bool:
        return all(a.get("PEERS") is not None and enough(a.get("PEERS")) for a in ask_all(
            config.routers, ("PEERS",), 1.0, keys=keys,
            fields=None if listing else {"PEERS": {"limit": 0}}))
    return ready


def sinks_connected(peers) -> bool:
    """Whether a router's PEERS answer has a sink of each of the demo's types connected."""
    from fleetwatch.cli.demo.plan import SINK_TYPES
    sinks = peers.get("sinks")
    return isinstance(sinks, dict) and all(sinks.get(t) for t in SINK_TYPES)


def stop(children: list[Child]) -> None:
    """SIGTERM in reverse start order (agent first), then SIGKILL what is left."""
    for child in reversed(children):
        if child.popen and child.popen.poll() is None:
            child.popen.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT
    for child in reversed(children):
        if not child.popen:
            continue
        try:
            child.popen.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print(f"  {child.name} did not stop in {STOP_TIMEOUT}s: killed", flush=True)
            child.popen.kill()
            child.popen.wait()


def hold(root: Path) -> int | str:
    """Take ``root/demo.lock`` for the life of this demo: an flock the kernel releases when
    the demo exits, however it exits, so no stale state can refuse a later demo. The lock's
    file descriptor, or, when another demo holds it, that demo's pid as it wrote it."""
    root.mkdir(parents=True, exist_ok=True)
    fd = os.open(root / "demo.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
        os.close(fd)
        return holder
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    return fd


def record(root: Path, data: dict) -> None:
    """``root/demo.json``, with the demo's own pid (SIGTERM to it stops the whole demo);
    written beside and renamed, so a reader never finds it empty or half written; 0600:
    it holds the console's password."""
    private.write(root / "demo.json", json.dumps({"pid": os.getpid(), **data}, indent=2))


def processes(children: list[Child]) -> list[dict]:
    """demo.json's ``processes``."""
    return [{"name": c.name, "pid": c.pid, "config": str(c.config), "log": str(c.log)}
            for c in children]


def restart(root: Path, children: list[Child]) -> Callable[[Child], None]:
    """What starts a dead child again (:mod:`fleetwatch.cli.demo.supervise`): it, then its
    new pid into demo.json."""
    def again(child: Child) -> None:
        start(child)
        data = json.loads((root / "demo.json").read_text())
        data.pop("pid", None)
        record(root, {**data, "processes": processes(children)})
    return again


def command_prefix() -> str:
    exe = Path(sys.executable).with_name("fleetwatch")
    prefix = str(exe) if exe.exists() else f"{sys.executable} -m fleetwatch"
    try:
        rel = os.path.relpath(prefix)
        return rel if not rel.startswith("..") else prefix
    except ValueError:
        return prefix


def describe(root: Path, children: list[Child], info: dict) -> str:
    fw = command_prefix()
    op = shlex.quote(str(root / "fleetwatch.yaml"))
    agent_cfg = shlex.quote(str(root / "agent.yaml"))
    lines = ["", "fleetwatch demo is running (Ctrl-C stops every process).", ""]
    for r in info["routers"] + info["sites"]:
        b = r["bind"]
        lines.append(f"  {r['id']:<14} agents {b['agents']}  control {b['control']}  "
                     f"tail {b['tail']}")
    if len(info["routers"]) > 1:
        lines.append(f"  (the routers are a mesh: each named one seed; the agent, the sinks "
                     f"and the scheduler were given {info['routers'][0]['id']} only)")
    for s in info["sites"]:
        lines.append(f"  ({s['id']} is a site router: one link up to each router's sites "
                     f"socket; agent-{s['id']}, host {s['id']}-host, is behind it)")
    for c in children:
        lines.append(f"  {c.name:<14} pid {c.pid:<7} config {c.config}")
    lines += [
        "",
        f"  state database  {info['state_url']}",
        f"  graphite        carbon-cache on 127.0.0.1:{info['carbon'].port}; whisper files "
        f"appear within a minute in",
        (f"                  {info['carbon'].whisper_dir}/_tagged/ (tagged series "
         f"{GRAPHITE_PREFIX}.<metric>;host=<host>, named by a hash)" if info["carbon"].tagdb
         else f"                  {info['carbon'].whisper_dir}/fleet/<host>/ (cpu, memory, "
              f"checks/<plugin>/...)"),
        *graphite_web(info.get("graphite_web"), bool(info["carbon"].tagdb)),
        f"  prometheus      {info['prometheus']} (the prometheus sink: every host's stats and "
        f"checks, one scrape)",
        *otlp_lines(info),
        *device_lines(info["devices"]),
        *prometheus_lines(info),
        (f"  CURVE           on: keys in {info['keys']}/ (routers/, agents/, backends/); "
         f"--insecure turns it off" if info.get("keys") else
         "  CURVE           OFF (--insecure): plain TCP, any local process can connect"),
        *alert_lines(info),
        f"  rules           disk_full_soon, load_high, carbon_slow, stats_absent on every "
        f"host's series, judged every 5 s: the checks rule:NAME in status "
        f"(docs/operating/rules.md; in {root / 'sink-alerting.yaml'})",
        "  SLO             checks_ok: 99 % of every check's results OK over 30 days, per "
        "host (fleetwatch slo report; the console's SLOs page)",
        f"  logs            {root / 'logs'}/",
        f"  processes       {root / 'demo.json'}",
        *warm_lines(info.get("warm_spark"), root, info.get("answerer")),
        "",
        *spark_lines(info.get("spark")),
        *console_lines(info.get("console"), root),
        "Look at the fleet:",
        f"  {fw} status --config {op}",
        f"  {fw} status --problems --config {op}   (unhandled problems, worst first)",
        f"  {fw} routers --config {op}   (the mesh's live routers, as each sees them)",
        f"  {fw} tail --config {op}",
        f"  {fw} send notify --config {agent_cfg} --severity error 'disk on fire'",
        f"  {fw} run --config {op} --wait {shlex.quote(socket.gethostname())} disk_root",
        f"  {fw} scheduler --list --config {shlex.quote(str(root / 'scheduler.yaml'))}",
        f"  {fw} history sql --config {op} 'SELECT metric, count(*) FROM metrics GROUP BY "
        f"metric'   (after the first compaction, every {COMPACT_EVERY}s)",
        f"  {fw} history notebook --config {op}   (the fleet notebook in JupyterLab, on "
        f"this lake)",
        f"  {fw} alerts --config {op}",
        f"  {fw} alerts --deliveries --config {op}   (each send, and what the channel "
        f"answered)",
        f"  {fw} channels --config {op}   (each alert channel: working or failing; "
        f"channels test NAME sends one a test message)",
        f"  {fw} downtime add {shlex.quote(socket.gethostname())} --for 30m --comment "
        f"'planned work' --config {op}   (then: ack add, silence add, downtime list)",
        f"  {fw} slo report --config {op}   (error budget left, burn rates, the worst "
        f"hosts)",
        f"  {fw} agent --once --config {agent_cfg}   (this host's series, as rules name "
        f"them)",
        f"  {fw} rules backtest --since 1h --rules "
        f"{shlex.quote(str(root / 'sink-alerting.yaml'))} --config {op}   (what this policy "
        f"would have paged over the lake's last hour)",
        *ecosystem_commands(info, fw, op),
        *device_commands(info["devices"], fw, op, getattr(info.get("graphite_web"), "url", None),
                         (info.get("console") or {}).get("url")),
        "",
    ]
    return "\n".join(lines)


def otlp_lines(info: dict) -> list[str]:
    """The agent's OTLP intake and the application exporting to it, or why not."""
    if not info.get("otlp"):
        return ["  otlp            off: the agent's OTLP intake needs opentelemetry-proto "
                "(pip install 'fleetwatch[otlp]')"]
    app = ("otlp-app (an OpenTelemetry SDK application, service.name demo-shop) exports "
           "shop.* metrics to it every 5 s" if info.get("otlp_app") else
           "no application sends to it: the demo's needs the Python packages "
           + " and ".join(OTLP_APP_MODULES))
    return [f"  otlp            OTLP {info['otlp']} (the agent's OTLP/HTTP intake, POST "
            f"/v1/metrics; docs/operating/otlp.md)", f"                  {app}"]


def prometheus_lines(info: dict) -> list[str]:
    """Debian's Prometheus and the remote_write sink feeding it, or why it is not running."""
    server, sent = info.get("prometheus_server"), info["remote_write"]
    queue = (f"its queue in {sent['queue_dir']}/, {sent['max_disk'] // 2**20} MiB on disk at "
             f"most")
    if server is None:
        from fleetwatch.cli.demo.promserver import missing
        return [f"  prometheus-server not running: {missing()}",
                f"  remote_write    {sent['url']}: nothing listens there; the remote_write "
                f"sink keeps trying, {queue}, then drops the oldest "
                f"(docs/operating/remote-write.md)"]
    where = (f"pages through fleetwatch as {CHECK} of {server.host}" if server.console
             else "goes nowhere: the console needs the web extra")
    return [f"  prometheus-server {server.url}/graph (Debian's Prometheus: fed by the "
            f"remote_write sink, try fleetwatch_cpu_percent, or the rules' states: "
            f"fleetwatch_check_status{{check=~\"rule:.*\"}}; its alert {ALERT} {where})",
            f"  remote_write    {sent['url']} (the remote_write sink, {queue}; "
            f"docs/operating/remote-write.md)",
            f"                  Prometheus' config, rules and token in {server.root}/"]


def ecosystem_commands(info: dict, fw: str, op: str) -> list[str]:
    """What to type to see the OTLP series and Prometheus' alert."""
    lines = []
    server = info.get("prometheus_server")
    if server is not None and server.console:
        host = shlex.quote(server.host)
        lines += [f"  {fw} status --config {op} | grep prom:   ({CHECK} of "
                  f"{server.host}: Prometheus' alert as a check, source prometheus)",
                  f"  {fw} ack add {host} {CHECK} --comment 'seen' --config {op}   "
                  f"(acknowledged: its reminders stop)"]
    if info.get("otlp_app"):
        lines.append(f"  curl -s {info['prometheus']} | grep 'fleetwatch_shop_orders_total{{'"
                     f"   (the OTLP application's series, as this host's: host="
                     f"{socket.gethostname()}, whatever its host.name says)")
        if server is not None:
            lines.append(f"  {server.url}/graph?g0.expr=fleetwatch_shop_orders_total   (the "
                         f"same series in Prometheus, by remote write)")
    return lines


def alert_lines(info: dict) -> list[str]:
    """Where the demo's alerts go: its own receivers (what they keep, where), the channels
    the flags gave, or nowhere."""
    received = info.get("received")
    if received is not None:
        from fleetwatch.cli.demo.receivers import RECEIVERS, receiver
        where = [f"{received['dir']}/pager.jsonl (a PagerDuty-shaped webhook, port "
                 f"{received['pager']})"]
        where.append(f"{received['dir']}/mail/ (an SMTP server, port {received['smtp']})"
                     if received["smtp"] else "no mail receiver: aiosmtpd is not installed")
        where += [f"{received['dir']}/{flag}.jsonl ({receiver(flag).about}, port "
                  f"{received[flag]})" for flag in RECEIVERS
                  if flag not in ("pager", "smtp") and received.get(flag)]
        return [f"  alerts          delivered to {len(info['channels'])} channels, one of "
                f"each type (fleetwatch channels lists them); the demo's receivers keep "
                f"them in", *(f"                  {w}" for w in where)]
    if info["channels"]:
        return ["  alerts          delivered to " + ", ".join(info["channels"])]
    return ["  alerts          recorded only (--alert-webhook URL, --alert-smtp HOST:PORT "
            "--alert-to ADDR deliver them)"]


def spark_lines(spark) -> list[str]:
    """Where the history side's Spark cluster is (``--spark-cluster``), or nothing."""
    if spark is None:
        return []
    return ["The history side runs on a Spark standalone cluster:",
            f"  {spark.master}   web UI {spark.ui} (the applications fleetwatch submits: "
            f"compaction every {COMPACT_EVERY}s, queries, notebooks)",
            f"  logs in {spark.directory}/", ""]


def start_spark(root: Path, cfg: DemoConfig):
    """The local Spark cluster of ``--spark-cluster`` (None without it), owned by the demo:
    its daemons end with the demo, even a SIGKILLed one, and a cluster a demo left (its
    daemons outlived it) is stopped first, saying so; RuntimeError with the line to show
    when it cannot start."""
    if not cfg.spark_cluster:
        return None
    from fleetwatch.lake import cluster
    try:
        return cluster.start(str(root / "spark-cluster"), workers=1, memory="3g", owned=True,
                             say=lambda line: print(f"fleetwatch demo: {line}", flush=True))
    except cluster.ClusterError as e:
        raise RuntimeError(f"--spark-cluster: {e}") from None


#: the demo's warm Spark: a Spark Connect server on a local Spark of its own
WARM_MASTER, WARM_MEMORY = "local[2]", "1g"


def start_warm_spark(root: Path, cfg: DemoConfig):
    """The demo's warm Spark (``warm_spark``, not with ``--spark-cluster``): a Spark Connect
    server owned by the demo (it ends with it, even a SIGKILLed one), started without
    waiting for it, on a port chosen now for ``history.remote``; with the thread that says
    when it answers (20-60 s). None without it, or without Java or the connect extra (the
    history commands then start their own Spark, saying so)."""
    import importlib.util
    if not cfg.warm_spark or cfg.spark_cluster:
        return None
    from fleetwatch.lake.spark import CONNECT_MODULES
    if not all(importlib.util.find_spec(m) for m in ("pyspark", *CONNECT_MODULES)):
        return None
    from fleetwatch.cli.demo.ports import free_port
    from fleetwatch.lake import cluster
    say = lambda line: print(f"fleetwatch demo: {line}", flush=True)  # noqa: E731
    try:
        warm, proc = cluster.serve(str(root / "warm-spark"), WARM_MASTER, WARM_MEMORY,
                                   port=free_port(), owned=True, say=say)
    except cluster.ClusterError as e:
        say(f"no warm Spark: {e}")
        return None
    began = time.monotonic()

    def tell() -> None:
        try:
            cluster.connected(warm, proc)
        except cluster.ClusterError as e:
            say(f"the warm Spark did not start: {e}")
            return
        # one query first, as a user would: the server's first one (its views, its code
        # compiled) takes several times as long as the next; it ends with the demo (the
        # client would retry a server gone for minutes)
        try:
            first = subprocess.run([sys.executable, "-m", "fleetwatch", "history", "sql",
                                    "--config", str(root / "fleetwatch.yaml"), "SELECT 1"],
                                   capture_output=True, text=True, timeout=600,
                                   preexec_fn=die_with_parent(signal.SIGKILL))
            failed = first.returncode and (first.stderr.strip().splitlines() or ["?"])[-1]
        except subprocess.TimeoutExpired:
            failed = "no answer in 600 s"
        if failed:
            say(f"the warm Spark at {warm.connect} fails a first query: {failed}")
            return
        say(f"the warm Spark at {warm.connect} answers ({time.monotonic() - began:.0f} s "
            f"after the start): history sql uses it")
    threading.Thread(target=tell, daemon=True, name="warm-spark").start()
    return warm


def warm_lines(warm, root: Path, answerer: str | None = None) -> list[str]:
    """Where the warm Spark is, and its answerer (``history.answerer``), or nothing."""
    if warm is None:
        return []
    lines = [f"  warm Spark      {warm.connect} (history.remote: a Spark Connect server, "
             f"{WARM_MASTER}, driver {WARM_MEMORY}; up 20-60 s after the start, then history "
             f"sql answers in seconds; log {root / 'warm-spark' / 'connect.log'})"]
    if answerer:
        lines.append(f"                  history sql asks a session kept warm on it first "
                     f"(history serve at {answerer}: about a second)")
    return lines


def stop_spark(spark) -> None:
    if spark is not None:
        from fleetwatch.lake import cluster
        cluster.stop(spark.directory)


def console_lines(console: dict | None, root: Path) -> list[str]:
    """Where the console is and how to log in, or how to get it."""
    if console is None:
        return ["The console needs the web extra: pip install 'fleetwatch[web]'", ""]
    return ["Open the console:",
            f"  {console['url']}   user {console['user']}, password {console['password']} "
            f"(kept in {root / 'web-password'})", ""]


def graphite_web(web, tagged: bool = False) -> list[str]:
    """The lines about graphite-web: its URL (the console's graphs), or why it is not there."""
    if web is None:
        from fleetwatch.cli.demo.graphiteweb import missing
        return [f"  graphite-web    not running: {missing()}"]
    target = (f"seriesByTag('host=<host>','name={GRAPHITE_PREFIX}.cpu.percent')" if tagged
              else f"{GRAPHITE_PREFIX}.<host>.cpu.percent")
    return [f"  graphite-web    {web.url} (graphite.url in fleetwatch.yaml: the console's "
            f"graphs)",
            f"                  {web.url}/render?target={target}&format=json"]


def run(args: argparse.Namespace) -> int:
    cfg = settings(args)
    root = Path(cfg.dir).resolve()
    lock = hold(root)           # before anything is written: the running fleet keeps its ports
    if isinstance(lock, str):
        print(f"fleetwatch demo: {root} is in use by a running demo (pid {escape(lock)}): stop "
              f"that demo first (Ctrl-C), or give another --dir", file=sys.stderr)
        return 1
    for stale in [*root.glob("router-*.ready.json"), *root.glob("site-*.ready.json")]:
        stale.unlink()
    try:
        spark = start_spark(root, cfg)
    except RuntimeError as e:
        print(f"fleetwatch demo: {e}", file=sys.stderr)
        return 1
    warm = start_warm_spark(root, cfg)
    children, info = plan(root, cfg, spark.master if spark else "",
                          warm.connect if warm else "")
    info["spark"], info["warm_spark"] = spark, warm
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        # routers and carbon first: the sinks, the scheduler and the agent connect to them;
        # graphite-web (a few seconds to start) with them, waited for once the rest started
        first = [c for c in children if c.name.startswith("router-") or
                 c.name in ("carbon", "graphite-web", "prometheus-server", "snmpd")]
        for c in first:
            start(c)
        waits = [(r["id"], Path(r["ready_file"]).exists) for r in info["routers"]]
        server = info.get("prometheus_server")
        if server is not None:      # before the remote_write sink's first send
            waits.append(("prometheus", server.ready))
        switch = info["devices"]["switch"]
        if switch is not None:      # before the agent's first poll
            waits.append(("snmpd", switch.listening))
        wait_ready(first, waits + [("carbon-cache", info["carbon"].accepting)])
        web = info.get("graphite_web")
        if web is not None and info["carbon"].tagdb:
            # carbon registers a tagged series once, when it creates its file: graphite-web
            # answers before the graphite sink sends anything
            wait_ready(first, [("graphite-web", web.answering)], timeout=60.0)
        # then the sinks; the site routers once every router has each sink type connected,
        # and the rest once every site is linked to every router: the first HELLO and
        # REGISTER of an agent (or a site's link) would be dropped, and counted, by a
        # router with no sink yet or a site with no link up, a healthy fleet's first problem
        sinks = [c for c in children if c.name.startswith("sink-")]
        sites = [c for c in children if c.name.startswith("site-")]
        for c in sinks:
            start(c)
        wait_ready(first + sinks, [("the sinks on every router",
                                    routers_say(root, sinks_connected))], timeout=60.0)
        for c in sites:
            start(c)
        ids = {s["id"] for s in info["sites"]}
        wait_ready(first + sinks + sites, [("the sites' links", routers_say(
            root, lambda peers: ids <= {a.get("uuid") for a in peers.get("agents") or []},
            listing=True))], timeout=60.0)
        for c in children:
            if c not in first + sinks + sites:
                start(c)
        if web is not None:
            wait_ready(children, [("graphite-web", web.answering)], timeout=60.0)
        # the summary first: a script that waits for demo.json finds it printed
        print(describe(root, children, info), flush=True)
        record(root, {
            "dir": str(root),
            "operator_config": str(root / "fleetwatch.yaml"),
            "curve": not cfg.insecure,
            "keys": info["keys"],
            "carbon": {"port": info["carbon"].port, "whisper_dir": str(info["carbon"].whisper_dir),
                       "prefix": GRAPHITE_PREFIX, "tags": cfg.graphite_tags},
            "graphite_web": {"url": web.url} if web is not None else None,
            "console": info.get("console"),
            "prometheus": info["prometheus"],
            "otlp": {"url": info["otlp"], "app": info["otlp_app"]} if info["otlp"] else None,
            "prometheus_server": {"url": server.url, "alert": ALERT, "check": CHECK,
                                  "host": server.host} if server is not None else None,
            "remote_write": {k: info["remote_write"][k] for k in ("url", "queue_dir")},
            "devices": devices_record(info["devices"]),
            "alerts": {"channels": info["channels"],
                       "received": {**info["received"], "dir": str(info["received"]["dir"])}
                       if info.get("received") else None},
            "spark": ({"master": spark.master, "ui": spark.ui, "dir": spark.directory}
                      if spark else None),
            "warm_spark": ({"connect": warm.connect, "dir": warm.directory} if warm
                           else None),
            "processes": processes(children),
        })
        deadline = time.monotonic() + args.duration if args.duration else None
        supervisor = Supervisor(children, restart(root, children),
                                say=lambda line: print(line, flush=True))
        while not stopping and (deadline is None or time.monotonic() < deadline):
            reason = supervisor.check()     # a dead child started again, or the reason
            if reason:                      # to stop: never a half fleet
                raise RuntimeError(reason)
            time.sleep(0.2)
    except RuntimeError as e:
        print(f"fleetwatch demo: {e}", file=sys.stderr)
        stop(children)
        stop_spark(spark)
        stop_spark(warm)
        return 1
    print("stopping the fleet...", flush=True)
    stop(children)
    stop_spark(spark)
    stop_spark(warm)
    print("all processes stopped.", flush=True)
    return 0
