"""What ``fleetwatch demo`` runs: one config file per process, written into the demo directory.

:func:`plan` writes ``fleetwatch.yaml`` (the operator commands), ``agent.yaml``,
``router-N.yaml``, ``site-N.yaml`` and ``agent-site-N.yaml``, ``sink-TYPE.yaml`` and
``scheduler.yaml`` and returns the processes to start, in order: routers and site routers,
a real carbon-cache (:mod:`fleetwatch.cli.demo.carbon`, for the graphite
sink), graphite-web over carbon's files (:mod:`fleetwatch.cli.demo.graphiteweb`, when installed:
its URL is the operator config's ``graphite.url``), Debian's Prometheus
(:mod:`fleetwatch.cli.demo.promserver`, when installed: the remote_write sink's receiver, its
alert posted to the console), Net-SNMP's snmpd (:mod:`fleetwatch.cli.demo.switch`, when
installed with pysnmp: the stand-in switch ``demo-switch`` the demo agent polls, with the
console as ``demo-web``, its ``devices:``), sinks, the scheduler, the agents, the console, and an
application exporting OTLP to the agent's intake (:mod:`fleetwatch.cli.demo.otlpapp`, with
the OpenTelemetry SDK); with the warm Spark, the history answerer (``fleetwatch history
serve``: a session on it kept warm, ``history.answerer`` a Unix socket in the demo
directory). Ports are picked free on 127.0.0.1 when the plan is made. With
``graphite_tags`` the graphite sink sends tagged series, carbon registers them with
graphite-web's tag database and the operator config says ``graphite.tags: true``.
:mod:`fleetwatch.cli.demo` starts and supervises them.

The routers form a mesh (SPEC 4.9): each names one other as its seed, and the agent, the
sinks and the scheduler are configured with router-1 only: they learn the others from it,
as a fleet's would. Each site router (SPEC 4.10) links upstream to every router's ``sites``
socket and has an agent of its own behind it (hostname ``site-N-host``), which the centre
sees through it: ``fleetwatch routers`` shows the mesh, ``fleetwatch status`` that host.

CURVE is on unless ``insecure``: the keys go to ``DIR/keys`` (``routers/fleet``, the routers'
shared server key; ``agents/UUID``, each agent's key bound to its uuid; ``backends/NAME`` for
each sink, the scheduler and the operator commands; ``sites/site-N``, each site router's
uplink key). Keys already there are reused, so a
demo directory can be started again.

The demo agent declares a few bundled checks and one Debian plugin, with short intervals,
so ``fleetwatch status`` shows checks running within a minute.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
import secrets
import socket
import subprocess
import tempfile

import yaml

from fleetwatch import private, sinktypes
from fleetwatch.cli.demo.carbon import Carbon
from fleetwatch.config import setting
from fleetwatch.config import socket_path_fits
from fleetwatch.cli.demo.ports import free_port
from fleetwatch.cli.demo.promserver import PrometheusServer, binary as prometheus_binary
from fleetwatch.cli.demo.switch import planned
from fleetwatch.security import PUBLIC_SUFFIX, SECRET_SUFFIX, read_certificate, \
    write_certificates

SINK_TYPES = sinktypes.NAMES
#: seconds between two compactions of the demo's history lake
COMPACT_EVERY = 60
#: the demo's metrics in carbon: ``fleet.<host>.cpu.percent`` and so on
GRAPHITE_PREFIX = "fleet"
#: every sink type a router binds a PUSH for, whether the demo runs that sink or not
ROUTED_TYPES = sinktypes.NAMES
#: the console's demo user (an admin), its password made at the first start
CONSOLE_USER = "demo"
#: how often the demo agent's checks run (seconds)
CHECK_INTERVAL = 30
#: the label of the token the demo's Prometheus posts its alerts with (web token list)
PROMETHEUS_TOKEN = "the demo's Prometheus"
#: bytes the remote_write sink's queue may spill into the demo directory
REMOTE_WRITE_DISK = 64 * 1024 * 1024
#: seconds between two sends of the OTLP series the demo agent took
OTLP_INTERVAL = 5.0
#: what the demo's OTLP application needs (the SDK and its exporter: the test extra)
OTLP_APP_MODULES = ("opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")


@dataclass(frozen=True)
class DemoConfig:
    """``fleetwatch demo --config demo.yaml``: the demo's settings (flags override them)."""

    dir: str = setting(".demo", "where configs, logs and state go")
    routers: int = setting(2, "number of routers (a mesh: each names one other as its seed)")
    sites: int = setting(1, "site routers linked upstream to the routers, each with an agent "
                            "of its own behind it (0: none)")
    heartbeat: float = setting(1.0, "the agent's heartbeat interval in seconds")
    stats_interval: float = setting(10.0, "the agent's stats interval in seconds")
    insecure: bool = setting(False, "plain TCP instead of CURVE (for debugging)")
    alert_webhook: str = setting("", "send the demo's alerts to this webhook URL (PagerDuty "
                                     "Events v2 JSON)")
    alert_smtp: str = setting("", "send the demo's alerts by email through this HOST:PORT")
    alert_to: list[str] = setting(factory=list, help="recipients of the demo's alert email")
    receivers: bool = setting(True, "without an alert_* setting, deliver the demo's alerts "
                                    "to local receivers of its own (a PagerDuty-shaped "
                                    "webhook, and an SMTP server where aiosmtpd is "
                                    "installed) that keep what they receive in DIR/received/")
    graphite_tags: bool = setting(False, "the graphite sink sends tagged series (NAME;host="
                                         "HOST): carbon registers them with graphite-web's "
                                         "tag database, the console finds them there")
    spark_cluster: bool = setting(False, "the history side (compaction, history sql, the "
                                         "notebook) on a local Spark standalone cluster "
                                         "(fleetwatch history cluster) instead of local[1]")
    warm_spark: bool = setting(True, "keep a warm Spark: a Spark Connect server of the "
                                     "demo's own (local[2], driver 1g), history.remote of "
                                     "fleetwatch.yaml, so history sql answers in seconds "
                                     "(not with spark_cluster)")

    def validate(self):
        if self.routers < 1:
            raise ValueError("routers: expected at least 1")
        if not 0 <= self.sites <= 9:
            raise ValueError("sites: expected 0 to 9")
        if self.heartbeat <= 0 or self.stats_interval <= 0:
            raise ValueError("heartbeat: expected positive intervals (and stats_interval)")
        self.delivery()

    def delivery(self) -> dict | None:
        """The alerting sink's ``alerting.delivery`` section, or None without alert flags
        (ValueError naming the bad flag)."""
        if not (self.alert_webhook or self.alert_smtp or self.alert_to):
            return None
        from sinks.alerting.delivery.config import for_demo
        return for_demo(self.alert_webhook or None, self.alert_smtp or None, self.alert_to)


@dataclass
class Child:
    """One process of the demo."""

    name: str
    config: Path
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = None

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen else 0


def endpoint() -> str:
    return f"tcp://127.0.0.1:{free_port()}"


def ensure_key(directory: Path, name: str, metadata: dict[str, str]) -> tuple[str, str]:
    """(public, secret) paths of the key ``name`` in ``directory``, made if not there yet.

    An existing pair is checked (SecurityError if unusable); half a pair is refused by
    write_certificates (it never overwrites).
    """
    public = directory / f"{name}{PUBLIC_SUFFIX}"
    secret = directory / f"{name}{SECRET_SUFFIX}"
    if public.exists() and secret.exists():
        read_certificate(str(secret), need_secret=True)
        return str(public), str(secret)
    return write_certificates(str(directory), name, metadata)


def backend_names() -> list[str]:
    """The back-end clients of the demo, each with its own key."""
    return [f"sink-{t}" for t in SINK_TYPES] + ["scheduler", "operator"]


def make_keys(root: Path, agent_states: dict[str, Path], sites: list[str]) -> dict:
    """The demo's keys in ``root/keys``: security sections for each kind of process, by
    name: each agent of ``agent_states`` (name -> its state directory), each site router of
    ``sites``, ``router`` and each back-end."""
    from agent import identity

    keys = root / "keys"
    fleet_public, fleet_secret = ensure_key(keys / "routers", "fleet",
                                            {"role": "router", "name": "fleet"})
    agents = {}
    for name, state in agent_states.items():
        uuid = identity.load_or_create(str(state))  # the agent will find this uuid
        _, secret = ensure_key(keys / "agents", uuid, {"role": "agent", "uuid": uuid,
                                                       "name": uuid})
        agents[name] = {"curve": True, "key": secret, "router_key": fleet_public}
    router = {"curve": True, "server_key": fleet_secret, "agent_keys": str(keys / "agents"),
              "backend_keys": str(keys / "backends")}
    site_keys = {}
    for site in sites:
        _, secret = ensure_key(keys / "sites", site, {"role": "site", "name": site})
        site_keys[site] = {"security": router, "key": secret}
    backends = {}
    for name in backend_names():
        _, secret = ensure_key(keys / "backends", name, {"role": "backend", "name": name})
        backends[name] = {"curve": True, "key": secret, "router_key": fleet_public}
    return {
        "dir": str(keys),
        # the routers of the mesh present the fleet's key to each other (mesh.key unset)
        "router": {**router, "routers": str(keys / "routers"),
                   **({"sites": str(keys / "sites")} if sites else {})},
        "sites": site_keys,
        **agents,
        **backends,
    }


def demo_checks(carbon_port: int) -> list[dict]:
    """The demo agent's checks: bundled ones, and Debian's check_users.

    The TCP check connects to carbon's plaintext line port, which the demo owns: a plain
    connect to a router's CURVE port would be logged there as a failed handshake (a security
    event) every interval.
    """

    def check(name, command, *args):
        # the bundled checks' own -t (10 s) fires before the agent's kill
        return {"name": name, "command": command, "args": list(args),
                "interval": CHECK_INTERVAL, "timeout": 15}
    return [
        check("load", "check_fw_load", "-r", "-w", "4,3,2", "-c", "8,6,4"),
        check("disk_root", "check_fw_disk", "-p", "/", "-w", "90", "-c", "95"),
        check("memory", "check_fw_memory", "-w", "90", "-c", "95"),
        check("carbon_port", "check_fw_tcp", "-H", "127.0.0.1", "-p", str(carbon_port),
              "-w", "0.5", "-c", "1"),
        check("users", "check_users", "-w", "5", "-c", "10"),
    ]


def console_user(root: Path) -> str:
    """The demo console's admin password (``web-password``, 0600, made at the first start),
    its user added to the state database if missing (``fleetwatch web user add``)."""
    path = root / "web-password"
    if path.exists():
        password = path.read_text().strip()
    else:
        password = secrets.token_urlsafe(12)
        private.write(path, password + "\n")
    res = subprocess.run([sys.executable, "-m", "fleetwatch", "web", "user", "add",
                          CONSOLE_USER, "--role", "admin", "--password-stdin", "--config",
                          str(root / "fleetwatch.yaml")], input=password + "\n",
                         capture_output=True, text=True, timeout=60)
    if res.returncode != 0 and "exists" not in res.stderr:
        raise RuntimeError(f"cannot make the console's user: {res.stderr.strip()}")
    return password


def alerter_token(root: Path, path: Path) -> None:
    """The token the demo's Prometheus posts its alerts with, in ``path`` (0600): one of role
    ``alerter`` for the console's demo user (``fleetwatch web token add``), made at the first
    start and kept while the state database lists it."""
    def web(*argv: str, **kwargs) -> subprocess.CompletedProcess:
        res = subprocess.run([sys.executable, "-m", "fleetwatch", "web", "token", *argv,
                              "--config", str(root / "fleetwatch.yaml")],
                             capture_output=True, text=True, timeout=60, **kwargs)
        if res.returncode != 0:
            raise RuntimeError(f"cannot make Prometheus' token: {res.stderr.strip()}")
        return res
    known = [t for t in json.loads(web("list", "--json").stdout)
             if t["label"] == PROMETHEUS_TOKEN and t["user"] == CONSOLE_USER]
    if path.exists() and known:
        return
    for token in known:          # a token whose text is lost: no use to anyone
        web("remove", str(token["id"]))
    made = web("add", CONSOLE_USER, "--label", PROMETHEUS_TOKEN, "--role", "alerter")
    private.write(path, made.stdout.strip() + "\n")


def importable(*modules: str) -> bool:
    """Whether each of ``modules`` (dotted names) can be imported."""
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except ModuleNotFoundError:        # a parent package missing
        return False


def history_conf(spark_master: str) -> dict[str, str]:
    """The demo's Spark settings: on a cluster each application (the compaction timer, a
    query, the notebook) takes one core, so they run side by side instead of waiting."""
    conf = {"spark.driver.memory": "1g"}
    if spark_master:
        conf.update({"spark.cores.max": "1", "spark.executor.memory": "1g",
                     "spark.sql.shuffle.partitions": "2"})
    return conf


def plan(root: Path, args: DemoConfig, spark_master: str = "",
         remote: str = "") -> tuple[list[Child], dict]:
    """Write every process's config into ``root``; return the children to start, in order.
    ``spark_master``: the history side's Spark (a running cluster's URL; default local[1]);
    ``remote``: the demo's warm Spark (``history.remote``, sc://HOST:PORT), or ""."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "logs").mkdir(exist_ok=True)
    state_url = f"sqlite:///{(root / 'state.db').resolve()}"
    routers = []
    for i in range(1, args.routers + 1):
        routers.append({
            "id": f"router-{i}",
            "bind": {"agents": endpoint(), "control": endpoint(), "tail": endpoint(),
                     "sinks": {t: endpoint() for t in ROUTED_TYPES},
                     **({"sites": endpoint()} if args.sites else {})},
            "ready_file": str((root / f"router-{i}.ready.json").resolve()),
        })
    for i, r in enumerate(routers):         # one seed each: router-1's is router-2
        if len(routers) > 1:
            r["mesh"] = {"seeds": [routers[1 if i == 0 else 0]["bind"]["control"]]}
    controls = [r["bind"]["control"] for r in routers]
    sites = [{
        "id": f"site-{j}",
        "bind": {"agents": endpoint(), "control": endpoint(), "tail": endpoint(), "sinks": {}},
        "upstream": [r["bind"]["sites"] for r in routers],
        "site": {"spool_dir": str((root / f"site-{j}-spool").resolve())},
        "ready_file": str((root / f"site-{j}.ready.json").resolve()),
    } for j in range(1, args.sites + 1)]
    # each agent: its state directory, the router it is given, its hostname (None: this
    # machine's); a site's agent knows its site router only
    agents = {"agent": ((root / "agent-state").resolve(), routers[0], None),
              **{f"agent-{s['id']}": ((root / f"agent-{s['id']}-state").resolve(), s,
                                      f"{s['id']}-host") for s in sites}}
    security = {} if args.insecure else make_keys(
        root.resolve(), {name: a[0] for name, a in agents.items()}, [s["id"] for s in sites])
    configs = {f"{r['id']}.yaml": r for r in routers + sites}
    # the back-ends know router-1 and learn the others from its WELCOME (SPEC 4.9)
    for t in SINK_TYPES:
        configs[f"sink-{t}.yaml"] = {"routers": controls[:1], "state_url": state_url,
                                     "name": f"sink-{t}"}
    lake = str((root / "history").resolve())
    # history ACKs too, but the agent waits for the alerting and registry sinks only
    # (its spool.ack_from default)
    configs["sink-history.yaml"]["history"] = {"lake": lake, "rotate_seconds": 10.0}
    # imported here: ``python -m fleetwatch.cli.demo.graphiteweb`` imports this package first
    from fleetwatch.cli.demo.graphiteweb import GraphiteWeb, missing
    have_web, web_port = missing() is None, free_port()
    # tagged series: carbon registers each with graphite-web's tag database (without
    # graphite-web, nothing would find them: carbon is told nothing, ENABLE_TAGS off)
    tagdb = f"http://127.0.0.1:{web_port}" if args.graphite_tags and have_web else ""
    carbon = Carbon(root / "carbon", tagdb=tagdb)
    carbon.write_config()
    web = GraphiteWeb.over(root / "graphite-web", carbon, web_port) if have_web else None
    configs["sink-graphite.yaml"]["graphite"] = {"host": "127.0.0.1", "port": carbon.port,
                                                 "prefix": GRAPHITE_PREFIX,
                                                 "tags": args.graphite_tags}
    prometheus = f"127.0.0.1:{free_port()}"
    configs["sink-prometheus.yaml"]["prometheus"] = {"listen": prometheus}
    console = f"127.0.0.1:{free_port()}"
    has_console = importlib.util.find_spec("fastapi") is not None     # the web extra
    # Debian's Prometheus, the remote_write sink's receiver; its alert names the demo
    # agent's host (this machine's name) and goes to the console
    server = PrometheusServer(root.resolve() / "prometheus", free_port(), socket.gethostname(),
                              console if has_console else None) \
        if prometheus_binary() else None
    if server is not None:
        server.write_config()
    configs["sink-remote_write.yaml"]["remote_write"] = {
        "url": server.write_url if server else f"http://127.0.0.1:{free_port()}/api/v1/write",
        "queue_dir": str((root / "remote-write").resolve()), "max_disk": REMOTE_WRITE_DISK,
        # at a stop, Prometheus stops too: the rest is kept in queue_dir for the next start
        "flush_at_exit": 1.0,
        # the rules' states, as often as the demo's alerting sink judges them
        "rules_interval": 5.0}
    delivery = args.delivery()
    received = None
    if delivery is None and args.receivers:         # the demo's own receivers
        from fleetwatch.cli.demo.receivers import available, receiver
        from sinks.alerting.delivery.config import for_demo
        here = available()
        received = {"dir": (root / "received").resolve(), "smtp": None,
                    **{flag: free_port() for flag in here}}
        received["dir"].mkdir(parents=True, exist_ok=True)
        delivery = for_demo(f"http://127.0.0.1:{received['pager']}/v2/enqueue",
                            f"127.0.0.1:{received['smtp']}" if received["smtp"] else None,
                            ["oncall@demo.invalid"] if received["smtp"] else ())
        for flag in here:               # a channel of each other type, to its receiver
            channel = receiver(flag).demo_channel(received["dir"], received[flag])
            if channel is not None:
                delivery["channels"][flag] = channel
                delivery["rules"][0]["channels"].append(flag)
    # rules on the agents' series (judged every 5 s in the demo, docs/operating/rules.md)
    from sinks.alerting.series.config import for_demo as demo_rules
    # and one SLO: 99 % of every check's results OK over 30 days, per host (slo.md)
    # and Prometheus' alert judged every 5 s (docs/operating/prometheus-alerts.md)
    alerting = configs["sink-alerting.yaml"]["alerting"] = {
        "rule_interval": 5.0, "rule_refresh": 60.0, "rules": demo_rules(),
        "prometheus_alerts": {"interval": 5.0},
        "slos": [{"name": "checks_ok", "objective": 99.0, "window": "30d", "checks": "*",
                  "per_host": True, "downtime_counts_as": "good"}]}
    if delivery:
        if has_console:                                         # alerts link to the console
            delivery["console_url"] = f"http://{console}/"
        alerting["delivery"] = delivery
    # its counters every 10 s, as the sinks': the console's health page lists it soon
    configs["scheduler.yaml"] = {"routers": controls[:1], "state_url": state_url,
                                 "id": "scheduler", "refresh_interval": 5.0,
                                 "stats_interval": 10.0}
    # The agent knows one router and learns the others from its WELCOME. The demo's own
    # takes OTLP from applications (docs/operating/otlp.md), with the otlp extra.
    otlp = f"127.0.0.1:{free_port()}" if importable("opentelemetry.proto") else None
    # and polls the demo's devices: a switch (snmpd), the console seen from outside
    from agent import identity
    devices = planned(root.resolve(), console if has_console else None,
                      identity.load_or_create(str(agents["agent"][0])))
    for name, (state, router, hostname) in agents.items():
        configs[f"{name}.yaml"] = {
            "routers": [router["bind"]["agents"]],
            **({"hostname": hostname} if hostname else {}),
            **intake_of(root, name, state),
            **({"otlp": {"enabled": True, "listen": otlp, "interval": OTLP_INTERVAL}}
               if otlp and name == "agent" else {}),
            "state_dir": str(state),
            "heartbeat_interval": args.heartbeat,
            "stats_interval": args.stats_interval,
            "plugins": {"checks": demo_checks(carbon.port)},
            **({"devices": devices["section"]} if devices["section"] and name == "agent"
               else {}),
        }
    # the warm Spark's answerer (a Unix socket: its path has a length limit, past which the
    # demo goes without one, history sql then asking the warm Spark itself)
    answerer = str((root / "history.sock").resolve()) if remote else ""
    if not socket_path_fits(answerer):
        answerer = ""
    configs["fleetwatch.yaml"] = {"routers": controls, "state_url": state_url, "timeout": 2.0,
                                  "history": {"lake": lake, "master": spark_master or "local[1]",
                                              "conf": history_conf(spark_master),
                                              **({"remote": remote} if remote else {}),
                                              **({"answerer": answerer} if answerer else {}),
                                              "state_url": state_url},   # the lifecycle
                                  "web": {"listen": console,
                                          "secret_file": str((root / "web-secret").resolve())}}
    if web is not None:                      # the console's graphs
        web.write_config()
        configs["fleetwatch.yaml"]["graphite"] = {"url": web.url, "prefix": GRAPHITE_PREFIX,
                                                  "tags": args.graphite_tags}
    if security:
        for r in routers:
            r["security"] = security["router"]
        for s in sites:
            s["security"] = security["sites"][s["id"]]["security"]
            s["site"]["key"] = security["sites"][s["id"]]["key"]
        for t in SINK_TYPES:
            configs[f"sink-{t}.yaml"]["security"] = security[f"sink-{t}"]
        configs["scheduler.yaml"]["security"] = security["scheduler"]
        for name in agents:
            configs[f"{name}.yaml"]["security"] = security[name]
        configs["fleetwatch.yaml"]["security"] = security["operator"]
    if remote:      # the compaction timer keeps a classic session of its own (its runs
        operator = configs["fleetwatch.yaml"]   # hold one; docs/operating/history-cluster.md)
        configs["history-compact.yaml"] = {**operator, "history": {
            k: v for k, v in operator["history"].items() if k != "remote"}}
    for name, data in configs.items():       # 0600: key paths, a webhook's routing key
        private.write(root / name, yaml.safe_dump(data, sort_keys=False))

    def child(name: str, *argv: str) -> Child:
        cfg = (root / f"{name}.yaml").resolve()
        return Child(name, cfg, [sys.executable, "-m", "fleetwatch", *argv, "--config",
                                 str(cfg)], (root / "logs" / f"{name}.log").resolve())

    children = [child(r["id"], "router") for r in routers + sites]
    children.append(Child("carbon", carbon.config_path, carbon.command(),
                          (root / "logs" / "carbon.log").resolve()))
    if web is not None:
        children.append(Child("graphite-web", web.settings_path, web.command(),
                              (root / "logs" / "graphite-web.log").resolve()))
    if server is not None:
        children.append(Child("prometheus-server", server.config_path, server.command(),
                              server.log_path))
    if devices["switch"] is not None:
        switch = devices["switch"]
        children.append(Child("snmpd", switch.config_path, switch.command(), switch.log_path))
    if received is not None:
        children.append(Child(
            "receivers", (root / "sink-alerting.yaml").resolve(),
            [sys.executable, "-m", "fleetwatch.cli.demo.receivers", str(received["dir"]),
             *(arg for flag, port in received.items() if flag != "dir" and port
               for arg in (f"--{flag}", str(port)))],
            (root / "logs" / "receivers.log").resolve()))
    children += [child(f"sink-{t}", "sink", t) for t in SINK_TYPES]
    children.append(child("scheduler", "scheduler"))
    if importlib.util.find_spec("pyspark") is not None:    # the history extra
        compact = child("history-compact" if remote else "fleetwatch", "history", "compact",
                        "--every", str(COMPACT_EVERY))
        compact.name = "history-compact"
        compact.log = (root / "logs" / "history-compact.log").resolve()
        children.append(compact)
    if answerer:                # history sql in about a second (history serve)
        children.append(child("fleetwatch", "history", "serve"))
        children[-1].name = "history-answerer"
        children[-1].log = (root / "logs" / "history-answerer.log").resolve()
    children += [child(name, "agent") for name in agents]
    if has_console:
        web_child = child("fleetwatch", "web")
        web_child.name, web_child.log = "console", (root / "logs" / "console.log").resolve()
        children.append(web_child)
        password = console_user(root)
        if server is not None:
            alerter_token(root, server.token_path)
    else:
        password = None
    app = otlp and importable(*OTLP_APP_MODULES)
    if app:                     # an application exporting to the agent's OTLP intake
        children.append(Child("otlp-app", (root / "agent.yaml").resolve(),
                              [sys.executable, "-m", "fleetwatch.cli.demo.otlpapp",
                               f"http://{otlp}"], (root / "logs" / "otlp-app.log").resolve()))
    return children, {"routers": routers, "sites": sites, "state_url": state_url,
                      "console": {"url": f"http://{console}/", "user": CONSOLE_USER,
                                  "password": password} if password else None,
                      "prometheus": f"http://{prometheus}/metrics",
                      "keys": security.get("dir"), "carbon": carbon, "graphite_web": web,
                      "channels": sorted((delivery or {}).get("channels", {})),
                      "received": received,
                      "answerer": answerer,
                      "otlp": f"http://{otlp}" if otlp else None, "otlp_app": bool(app),
                      "prometheus_server": server, "devices": devices,
                      "remote_write": configs["sink-remote_write.yaml"]["remote_write"]}


def intake_of(root: Path, name: str, state: Path) -> dict:
    """An agent's ``intake:``: none (ipc://STATE_DIR/intake.sock, the default) when that
    path fits a Unix socket, else a socket of its own under a short directory of /tmp
    named after the demo's (a demo in a deep directory still runs: its agents could not
    bind the default, which is too long)."""
    if socket_path_fits(str(state / "intake.sock")):
        return {}
    short = Path("/tmp") / (f"fleetwatch-demo-{os.getuid()}-"
                            f"{hashlib.sha256(str(root).encode()).hexdigest()[:10]}")
    short.mkdir(mode=0o700, exist_ok=True)
    found = os.lstat(short)
    if found.st_uid != os.getuid() or found.st_mode & 0o7077 or not short.is_dir() \
            or short.is_symlink():
        # not ours alone (made by someone else in the shared /tmp): one that is
        short = Path(tempfile.mkdtemp(prefix="fleetwatch-demo-"))
    return {"intake": f"ipc://{short / name}.sock"}

