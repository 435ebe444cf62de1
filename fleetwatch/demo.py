"""``fleetwatch demo``: a whole fleet on this machine, each process its own, on 127.0.0.1.

The demo writes one config file per process into ``--dir`` (``fleetwatch.yaml`` for the
operator commands, ``agent.yaml``, ``router-N.yaml``, ``sink-TYPE.yaml``), starts the
processes in order (routers, sinks, agent), records them in ``demo.json``, prints where
everything listens, and supervises them until Ctrl-C or SIGTERM, when it stops them all:
agent first, routers last, SIGKILL for any that do not exit in time.

CURVE is on unless ``--insecure``: the demo makes the keys in ``DIR/keys`` (``routers/fleet``,
the routers' shared server key; ``agents/UUID``, the agent's key bound to its uuid;
``backends/NAME`` for each sink and for the operator commands) and writes a ``security``
section into every config. Keys already there are reused, so a demo directory can be
started again.
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fleetwatch.config import build, load, setting
from fleetwatch.security import PUBLIC_SUFFIX, SECRET_SUFFIX, read_certificate, \
    write_certificates

SINK_TYPES = ("registry", "alerting")
PR_SET_PDEATHSIG = 1
STOP_TIMEOUT = 5.0


@dataclass(frozen=True)
class DemoConfig:
    """``fleetwatch demo --config demo.yaml``: the demo's settings (flags override them)."""

    dir: str = setting(".demo", "where configs, logs and state go")
    routers: int = setting(2, "number of routers")
    heartbeat: float = setting(1.0, "the agent's heartbeat interval in seconds")
    stats_interval: float = setting(10.0, "the agent's stats interval in seconds")
    insecure: bool = setting(False, "plain TCP instead of CURVE (for debugging)")

    def validate(self):
        if self.routers < 1:
            raise ValueError("routers: expected at least 1")
        if self.heartbeat <= 0 or self.stats_interval <= 0:
            raise ValueError("heartbeat: expected positive intervals (and stats_interval)")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH",
                        help="optional YAML file with the settings below (flags win)")
    parser.add_argument("--dir", help="where configs, logs and state go (default: .demo)")
    parser.add_argument("--routers", type=int, help="number of routers (default 2)")
    parser.add_argument("--heartbeat", type=float,
                        help="the agent's heartbeat interval in seconds (default 1)")
    parser.add_argument("--stats-interval", type=float,
                        help="the agent's stats interval in seconds (default 10)")
    parser.add_argument("--insecure", action="store_true", default=None,
                        help="run without CURVE (plain TCP), for debugging; the default "
                             "generates keys into DIR/keys and turns CURVE on everywhere")
    parser.add_argument("--for", dest="duration", type=float, default=0.0, metavar="SECONDS",
                        help="stop by itself after this many seconds (default: run until "
                             "Ctrl-C)")


def settings(args: argparse.Namespace) -> DemoConfig:
    """The config file's settings (or the defaults), overridden by the flags given."""
    base = load(DemoConfig, args.config) if args.config else DemoConfig()
    flags = {"dir": args.dir, "routers": args.routers, "heartbeat": args.heartbeat,
             "stats_interval": args.stats_interval, "insecure": args.insecure}
    merged = {**dataclasses.asdict(base), **{k: v for k, v in flags.items() if v is not None}}
    return build(DemoConfig, merged, args.config or "command line")


@dataclass
class Child:
    name: str
    config: Path
    argv: list[str]
    log: Path
    popen: subprocess.Popen | None = None
    reported: bool = field(default=False)

    @property
    def pid(self) -> int:
        return self.popen.pid if self.popen else 0


def free_port() -> int:
    """A port free on 127.0.0.1 now (the demo's configs need fixed ports to be restartable)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def make_keys(root: Path, agent_state: Path) -> dict:
    """The demo's keys in ``root/keys``: security sections for each kind of process."""
    from agent import identity

    keys = root / "keys"
    uuid = identity.load_or_create(str(agent_state))  # the agent will find this uuid
    fleet_public, fleet_secret = ensure_key(keys / "routers", "fleet",
                                            {"role": "router", "name": "fleet"})
    _, agent_secret = ensure_key(keys / "agents", uuid,
                                 {"role": "agent", "uuid": uuid, "name": uuid})
    backends = {}
    for name in [f"sink-{t}" for t in SINK_TYPES] + ["operator"]:
        _, secret = ensure_key(keys / "backends", name, {"role": "backend", "name": name})
        backends[name] = {"curve": True, "key": secret, "router_key": fleet_public}
    return {
        "dir": str(keys),
        "router": {"curve": True, "server_key": fleet_secret,
                   "agent_keys": str(keys / "agents"), "backend_keys": str(keys / "backends")},
        "agent": {"curve": True, "key": agent_secret, "router_key": fleet_public},
        **backends,
    }


def plan(root: Path, args: DemoConfig) -> tuple[list[Child], dict]:
    """Write every process's config into ``root``; return the children to start, in order."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "logs").mkdir(exist_ok=True)
    state_url = f"sqlite:///{(root / 'state.db').resolve()}"
    routers = []
    for i in range(1, args.routers + 1):
        routers.append({
            "id": f"router-{i}",
            "bind": {"agents": endpoint(), "control": endpoint(), "tail": endpoint(),
                     "sinks": {t: endpoint() for t in ("registry", "alerting", "graphite",
                                                        "history")}},
            "ready_file": str((root / f"router-{i}.ready.json").resolve()),
        })
    for r in routers:
        r["peers"] = [o["bind"]["agents"] for o in routers if o is not r]
    controls = [r["bind"]["control"] for r in routers]
    agent_state = (root / "agent-state").resolve()
    security = {} if args.insecure else make_keys(root.resolve(), agent_state)
    configs = {f"{r['id']}.yaml": r for r in routers}
    for t in SINK_TYPES:
        configs[f"sink-{t}.yaml"] = {"routers": controls, "state_url": state_url,
                                     "name": f"sink-{t}"}
    # The agent knows one router and learns the others from its WELCOME.
    configs["agent.yaml"] = {
        "routers": [routers[0]["bind"]["agents"]],
        "state_dir": str(agent_state),
        "heartbeat_interval": args.heartbeat,
        "stats_interval": args.stats_interval,
    }
    configs["fleetwatch.yaml"] = {"routers": controls, "state_url": state_url, "timeout": 2.0}
    if security:
        for r in routers:
            r["security"] = security["router"]
        for t in SINK_TYPES:
            configs[f"sink-{t}.yaml"]["security"] = security[f"sink-{t}"]
        configs["agent.yaml"]["security"] = security["agent"]
        configs["fleetwatch.yaml"]["security"] = security["operator"]
    for name, data in configs.items():
        (root / name).write_text(yaml.safe_dump(data, sort_keys=False))

    def child(name: str, *argv: str) -> Child:
        cfg = (root / f"{name}.yaml").resolve()
        return Child(name, cfg, [sys.executable, "-m", "fleetwatch", *argv, "--config",
                                 str(cfg)], (root / "logs" / f"{name}.log").resolve())

    children = [child(r["id"], "router") for r in routers]
    children += [child(f"sink-{t}", "sink", t) for t in SINK_TYPES]
    children.append(child("agent", "agent"))
    return children, {"routers": routers, "state_url": state_url,
                      "keys": security.get("dir")}


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM if the demo itself is killed."""
    try:
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass


def start(child: Child) -> None:
    log = open(child.log, "ab")
    child.popen = subprocess.Popen(child.argv, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   preexec_fn=_die_with_parent)
    log.close()


def wait_ready(children: list[Child], routers: list[dict], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    for r in routers:
        ready = Path(r["ready_file"])
        while not ready.exists():
            dead = [c for c in children if c.popen and c.popen.poll() is not None]
            if dead:
                raise RuntimeError(f"{dead[0].name} exited at start; see {dead[0].log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{r['id']} not ready after {timeout}s; see its log")
            time.sleep(0.05)


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
    for r in info["routers"]:
        b = r["bind"]
        lines.append(f"  {r['id']:<14} agents {b['agents']}  control {b['control']}  "
                     f"tail {b['tail']}")
    for c in children:
        lines.append(f"  {c.name:<14} pid {c.pid:<7} config {c.config}")
    lines += [
        "",
        f"  state database  {info['state_url']}",
        (f"  CURVE           on: keys in {info['keys']}/ (routers/, agents/, backends/); "
         f"--insecure turns it off" if info.get("keys") else
         "  CURVE           OFF (--insecure): plain TCP, any local process can connect"),
        f"  logs            {root / 'logs'}/",
        f"  processes       {root / 'demo.json'}",
        "",
        "Look at the fleet:",
        f"  {fw} status --config {op}",
        f"  {fw} tail --config {op}",
        f"  {fw} send notify --config {agent_cfg} --severity error 'disk on fire'",
        f"  {fw} alerts --config {op}",
        f"  {fw} agent --once --config {agent_cfg}",
        "",
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    cfg = settings(args)
    root = Path(cfg.dir).resolve()
    for stale in root.glob("router-*.ready.json"):
        stale.unlink()
    children, info = plan(root, cfg)
    stopping = []

    def on_signal(signum, frame):
        stopping.append(signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        routers = [c for c in children if c.name.startswith("router-")]
        for c in routers:
            start(c)
        wait_ready(routers, info["routers"])
        for c in children[len(routers):]:
            start(c)
        (root / "demo.json").write_text(json.dumps({
            "dir": str(root),
            "operator_config": str(root / "fleetwatch.yaml"),
            "curve": not cfg.insecure,
            "keys": info["keys"],
            "processes": [{"name": c.name, "pid": c.pid, "config": str(c.config),
                           "log": str(c.log)} for c in children],
        }, indent=2))
        print(describe(root, children, info), flush=True)
        deadline = time.monotonic() + args.duration if args.duration else None
        while not stopping and (deadline is None or time.monotonic() < deadline):
            for c in children:
                if c.popen.poll() is not None and not c.reported:
                    c.reported = True
                    print(f"  {c.name} exited with status {c.popen.returncode}; "
                          f"see {c.log}", flush=True)
            time.sleep(0.2)
    except RuntimeError as e:
        print(f"fleetwatch demo: {e}", file=sys.stderr)
        stop(children)
        return 1
    print("stopping the fleet...", flush=True)
    stop(children)
    print("all processes stopped.", flush=True)
    return 0
