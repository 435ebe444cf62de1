"""The Ansible roles (ansible/): lint, syntax, and a real deployment of site.yml.

The real run deploys a small fleet onto this machine with ``connection: local``: two central
routers in a mesh, the first one monitored by an agent as in the example inventory, a
monitoring host (registry, alerting, graphite and prometheus sinks, a scheduler, carbon, the
operator config), and a site router whose own agent lists it alone; each "host" into its
own temporary root (``fleetwatch_root``) with service management off
(``fleetwatch_manage_services: false``), CURVE on. The controller builds the wheel from this
checkout and makes the keys; every host gets its own virtualenv. A second run must change
nothing on the hosts whose roles the booted container does not run twice already
(test_ansible_systemd.py: a router, the registry, alerting and graphite sinks, a scheduler
and an agent on one host): the monitoring host (carbon, the prometheus sink) and the site
router. The modules run by Debian's python3, as on a real host (ansible.cfg). The files
written are loaded with fleetwatch's own config classes. Then the deployed routers and agents are started from their roots' virtualenvs with the deployed
configs and keys: ``fleetwatch routers`` (with the monitoring host's operator config and
back-end key) must find the two central routers agreeing on their mesh, and ``fleetwatch
status`` the first agent attached to both and the site's agent alive through a central
router (whose PEERS list it, relayed by the site). The static ``peers`` of a fleet without a
mesh are rendered from the same inventory with ``fleetwatch_mesh: false``.

The deployment is done once for the module (the wheel build and the virtualenvs are the slow
part); skipped only when ansible-playbook is not installed (``pip install -e '.[test]'``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from support.fleet import Proc, wait_for
from fleetwatch import __version__
from fleetwatch.cli.demo.ports import free_ports
from support.ansible import ANSIBLE, changed_tasks, recap

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = ANSIBLE / "inventories" / "example" / "hosts.yml"


def _tool(name: str) -> str | None:
    """``name`` beside this Python (its virtualenv), else on PATH."""
    beside = Path(sys.executable).parent / name
    return str(beside) if os.access(beside, os.X_OK) else shutil.which(name)


PLAYBOOK = _tool("ansible-playbook")
pytestmark = pytest.mark.skipif(
    PLAYBOOK is None, reason="ansible-playbook not installed (ansible-core comes with "
                             "pip install -e '.[test]')")


def ansible_env(home: Path) -> dict:
    """Ansible's state in ``home`` (not ~/.ansible), UTF-8 locale, no colours
    (docs/development/decisions.md#ansible-core-219), this checkout's ansible.cfg whatever
    the directory's mode."""
    for sub in ("tmp", "rtmp"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    return {**os.environ,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
            "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
            "ANSIBLE_HOME": str(home), "ANSIBLE_LOCAL_TEMP": str(home / "tmp"),
            "ANSIBLE_REMOTE_TEMP": str(home / "rtmp"),
            "LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_FORCE_COLOR": "0", "NO_COLOR": "1", "PY_COLORS": "0"}


def run(argv: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=ANSIBLE, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


# -------------------------------------------------------------------- fast checks

def test_syntax_check_of_the_example(tmp_path):
    res = run([PLAYBOOK, "--syntax-check", "-i", str(EXAMPLE), "site.yml"],
              ansible_env(tmp_path), timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "playbook: site.yml" in res.stdout


def test_example_inventory_has_the_fleet(tmp_path):
    res = run([_tool("ansible-inventory") or "ansible-inventory", "-i", str(EXAMPLE), "--list"],
              ansible_env(tmp_path), timeout=60)
    assert res.returncode == 0, res.stderr
    inventory = json.loads(res.stdout)

    def hosts(group: str) -> set[str]:
        entry = inventory.get(group, {})
        found = set(entry.get("hosts", []))
        for child in entry.get("children", []):
            found |= hosts(child)
        return found

    assert len(hosts("fleetwatch_routers")) == 3
    assert hosts("fleetwatch_sinks") and hosts("fleetwatch_schedulers")
    assert hosts("fleetwatch_carbon") and len(hosts("fleetwatch_agents")) >= 3
    hostvars = inventory["_meta"]["hostvars"]
    mon = hostvars[sorted(hosts("fleetwatch_sinks"))[0]]
    assert mon["fleetwatch_sink_types"] == ["registry", "alerting", "graphite"]
    assert mon["fleetwatch_curve"] is True and mon["fleetwatch_mesh"] is True
    # one site: its machines are agents that list their site router, and only it
    [site] = hosts("fleetwatch_site_routers")
    behind = hosts("site_paris")
    assert site in behind and behind < hosts("fleetwatch_agents")
    assert all(hostvars[h]["fleetwatch_agent_routers"] == [site] for h in behind)


def test_the_example_renders_a_mesh_and_a_site(tmp_path):
    """The example inventory's router.yaml and agent.yaml, rendered on the controller by the
    roles' templates with the roles' defaults (a throwaway role holding them, so that the
    inventory's group_vars win as in a real run) and loaded by fleetwatch's config classes:
    each central router joins through the other seeds, the site router links up to the
    three, the site's agents list it and the others the seeds."""
    roles = ANSIBLE / "roles"
    defaults = {}
    for role in ("fleetwatch_common", "fleetwatch_router", "fleetwatch_agent"):
        defaults.update(yaml.safe_load((roles / role / "defaults" / "main.yml").read_text()))
    render = tmp_path / "roles" / "render"
    (render / "defaults").mkdir(parents=True)
    (render / "tasks").mkdir()
    (render / "defaults" / "main.yml").write_text(yaml.safe_dump(defaults))
    out = tmp_path / "out"
    out.mkdir()
    tasks = [{"name": f"Render {kind}.yaml", "when": f"inventory_hostname in {group}",
              "delegate_to": "localhost", "ansible.builtin.copy": {
                  "content": "{{ lookup('ansible.builtin.template', '%s') }}"
                             % (roles / f"fleetwatch_{kind}" / "templates" / f"{kind}.yaml.j2"),
                  "dest": f"{out}/{{{{ inventory_hostname }}}}-{kind}.yaml", "mode": "0644"}}
             for kind, group in (("router", "groups['fleetwatch_routers'] + "
                                            "groups['fleetwatch_site_routers']"),
                                 ("agent", "groups['fleetwatch_agents']"))]
    (render / "tasks" / "main.yml").write_text(yaml.safe_dump(tasks, sort_keys=False))
    playbook = tmp_path / "render.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Render the example's configs", "hosts": "all", "gather_facts": False,
        "vars": {"fleetwatch_agent_uuid": "0" * 8, "ansible_connection": "local",
                 "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        "roles": ["render"]}], sort_keys=False))
    res = run([PLAYBOOK, "-i", str(EXAMPLE), str(playbook)], ansible_env(tmp_path), timeout=120)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]

    def router(host: str):
        return _load("router.config:RouterConfig", out / f"{host}.example.com-router.yaml")

    control = {n: f"tcp://router-{n}.example.com:5556" for n in (1, 2, 3)}
    for n in (1, 2, 3):
        cfg = router(f"router-{n}")
        assert cfg.mesh.seeds == [control[m] for m in (1, 2, 3) if m != n]
        assert cfg.peers == [] and cfg.bind.sites == "tcp://*:5570"
        assert (cfg.security.routers, cfg.security.sites) == ("/etc/fleetwatch/keys/mesh",
                                                              "/etc/fleetwatch/keys/sites")
    site = router("paris-router")
    assert site.id == "paris-router" and site.bind.sinks == {} and site.mesh.seeds == []
    assert site.upstream == [f"tcp://router-{n}.example.com:5570" for n in (1, 2, 3)]
    assert site.site.key == "/etc/fleetwatch/keys/site.key_secret"
    assert site.site.spool_dir == "/var/lib/fleetwatch/site-buffer"
    seeds = [f"tcp://router-{n}.example.com:5555" for n in (1, 2, 3)]
    for host, routers in (("web-1", seeds), ("router-2", seeds), ("mon-1", seeds),
                          ("paris-web-1", ["tcp://paris-router.example.com:5555"]),
                          ("paris-router", ["tcp://paris-router.example.com:5555"])):
        cfg = _load("agent.config:AgentConfig", out / f"{host}.example.com-agent.yaml")
        assert cfg.routers == routers, host


@pytest.mark.timeout(300)
def test_ansible_lint_is_clean(tmp_path):
    lint = _tool("ansible-lint")
    assert lint, "ansible-lint is not installed: pip install -e '.[test]'"
    # its cache in the test's directory (not for the playbook runs: pip's cache is wanted)
    env = {**ansible_env(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    res = run([lint, "--offline", "--nocolor"], env, timeout=280)
    output = res.stdout + res.stderr
    assert res.returncode == 0, output[-6000:]
    assert re.search(r"Passed: 0 failure\(s\), 0 warning\(s\)", output), output[-6000:]


# -------------------------------------------------------------------- the real run

HOSTS = ("router-1", "router-2", "mon-1", "site-1")
AGENT = "router-1"      # the host the agent runs on
SITE = "site-1"         # the site router, and the host of the agent behind it
#: the hosts the second run goes to: roles the container does not deploy twice (carbon, the
#: prometheus sink, a site router); a central router and its agent it does
AGAIN = ("mon-1", SITE)


@dataclass
class Deployment:
    base: Path
    env: dict
    ports: dict
    first: subprocess.CompletedProcess
    second: subprocess.CompletedProcess

    def root(self, host: str) -> Path:
        return self.base / "roots" / host

    def etc(self, host: str) -> Path:
        return self.root(host) / "etc" / "fleetwatch"

    def fleetwatch(self, host: str) -> str:
        return str(self.root(host) / "opt" / "fleetwatch" / "venv" / "bin" / "fleetwatch")

    @property
    def keys(self) -> Path:
        return self.base / "keys"


def _inventory(base: Path, ports: dict) -> dict:
    def router(name: str) -> dict:
        p = ports[name]
        return {"fleetwatch_router_agents_port": p[0], "fleetwatch_router_control_port": p[1],
                "fleetwatch_router_tail_port": p[2],
                "fleetwatch_router_sink_ports": dict(zip(
                    ("registry", "alerting", "graphite", "history", "prometheus"), p[3:8])),
                "fleetwatch_router_sites_port": p[8]}

    carbon_line, carbon_query, scrape = ports["mon-1"]
    return {"all": {
        "vars": {
            "ansible_connection": "local",
            # Debian's, as ansible.cfg says for real hosts (without the virtualenv's
            # start-up: a module run costs 0.33 CPU-seconds instead of 0.39)
            "ansible_python_interpreter": "/usr/bin/python3",
            "fleetwatch_root": str(base / "roots") + "/{{ inventory_hostname }}",
            "fleetwatch_manage_services": False,
            "fleetwatch_python": sys.executable,
            "fleetwatch_wheel_dir": str(base / "wheels"),
            # no .pyc of every installed module in the four virtualenvs (and carbon's):
            # the processes the tests start, as root, compile what they import (8 of the
            # two runs' 149 CPU-seconds, 2026-12-05). Not in test_ansible_systemd: its
            # units cannot write their virtualenv and would compile at every start
            "fleetwatch_pip_extra_args": "--no-compile",
            "fleetwatch_keys_dir": str(base / "keys"),
            "fleetwatch_router_host": "127.0.0.1",
            "fleetwatch_router_bind_address": "127.0.0.1",
        },
        "children": {
            "fleetwatch_routers": {"hosts": {"router-1": router("router-1"),
                                             "router-2": router("router-2")}},
            # a site router: no sinks, only its agents, sites and tail ports are its own
            "fleetwatch_site_routers": {"hosts": {SITE: {
                "fleetwatch_router_agents_port": ports[SITE][0],
                "fleetwatch_router_control_port": ports[SITE][1],
                "fleetwatch_router_tail_port": ports[SITE][2],
                "fleetwatch_router_site_interval": 0.2}}},
            "fleetwatch_sinks": {"hosts": {"mon-1": {
                "fleetwatch_sink_types": ["registry", "alerting", "graphite", "prometheus"],
                "fleetwatch_sink_prometheus": {"listen": f"127.0.0.1:{scrape}"},
                "fleetwatch_sink_graphite": {"host": "127.0.0.1", "port": carbon_line,
                                             "prefix": "test"},
                "fleetwatch_sink_alerting": {"max_check_attempts": 2},
                "fleetwatch_carbon_line_port": carbon_line,
                "fleetwatch_carbon_query_port": carbon_query}}},
            "fleetwatch_schedulers": {"hosts": {"mon-1": None}},
            "fleetwatch_carbon": {"hosts": {"mon-1": None}},
            "fleetwatch_agents": {"hosts": {AGENT: {
                "fleetwatch_agent_hostname": "router-1.test",
                "fleetwatch_agent_checks": [
                    {"name": "load", "command": "check_fw_load",
                     "args": ["-w", "50", "-c", "100"], "interval": 30}],
                "fleetwatch_agent_settings": {"stats_interval": 30}},
                # behind the site: its agent lists the site router alone
                SITE: {"fleetwatch_agent_hostname": "site-1.test",
                       "fleetwatch_agent_routers": [SITE],
                       "fleetwatch_agent_settings": {"stats_interval": 30},
                       # a poller: a switch behind the site, its community from a vault
                       "fleetwatch_agent_devices": {"hosts": [{
                           "name": "sw-site", "address": "127.0.0.1",
                           "checks": [{"type": "ping"}],
                           "snmp": {"community_file":
                                    "{{ fleetwatch_etc }}/snmp/sw-site.community"}}]},
                       "fleetwatch_agent_device_secrets": {"sw-site.community": "fw-c0mm"}}}},
        }}}


@pytest.fixture(scope="module")
def deployed(tmp_path_factory) -> Deployment:
    base = tmp_path_factory.mktemp("ansible")
    numbers = free_ports(24)
    ports = {"router-1": numbers[0:9], "router-2": numbers[9:18], "mon-1": numbers[18:21],
             SITE: numbers[21:24]}
    inventory = base / "hosts.yml"
    inventory.write_text(yaml.safe_dump(_inventory(base, ports), sort_keys=False))
    env = ansible_env(base / "ansible-home")
    # both routers at once: nothing is started here, so there is no rolling restart to keep
    argv = [PLAYBOOK, "-i", str(inventory), "-e", "fleetwatch_router_serial=2", "site.yml"]
    # the bounds stop a run that hangs; they are not its speed: alone, a first run takes
    # about 130 s and a second 80 s, but at the start of the suite it shares 2 cores with
    # three other heavy modules (a container, a Spark cluster, systemd), and on CI's 2
    # cores the first once took past 420 s
    first = run(argv, env, timeout=900)
    assert first.returncode == 0, first.stdout[-8000:] + first.stderr[-3000:]
    # idempotence where the container's second run does not show it (its docstring)
    second = run([*argv, "--limit", ",".join(AGAIN)], env, timeout=600)
    return Deployment(base, env, ports, first, second)


@pytest.mark.timeout(1800)
def test_first_run_deploys_every_host(deployed):
    hosts = recap(deployed.first.stdout)
    assert set(hosts) == set(HOSTS), deployed.first.stdout[-3000:]
    for host, counts in hosts.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, host
        assert counts["changed"] > 0, host
    for host in HOSTS:
        exe = deployed.fleetwatch(host)
        assert os.access(exe, os.X_OK), exe


@pytest.mark.timeout(1800)
def test_second_run_changes_nothing(deployed):
    out = deployed.second.stdout
    assert deployed.second.returncode == 0, out[-8000:] + deployed.second.stderr[-3000:]
    hosts = recap(out)
    assert set(hosts) == set(AGAIN)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in hosts.values()), \
        "\n".join(changed_tasks(out)) or out[-3000:]


def _load(cls_path: str, path: Path):
    from importlib import import_module

    from fleetwatch.config import load
    module, name = cls_path.split(":")
    return load(getattr(import_module(module), name), str(path))


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.timeout(1800)
def test_the_files_written(deployed):
    from fleetwatch.security import read_certificate
    d = deployed
    agents_ep = {r: f"tcp://127.0.0.1:{d.ports[r][0]}" for r in ("router-1", "router-2", SITE)}
    control_ep = [f"tcp://127.0.0.1:{d.ports[r][1]}" for r in ("router-1", "router-2")]
    sites_ep = [f"tcp://127.0.0.1:{d.ports[r][8]}" for r in ("router-1", "router-2")]

    # the wheel the controller built, once, and the key store
    assert [p.name for p in (d.base / "wheels").iterdir()] == \
        [f"fleetwatch-{__version__}-py3-none-any.whl"]
    assert (d.keys / "routers" / "fleet.key_secret").exists()
    uuid = (d.root(AGENT) / "var/lib/fleetwatch/agent/uuid").read_text().strip()
    site_uuid = (d.root(SITE) / "var/lib/fleetwatch/agent/uuid").read_text().strip()
    assert {p.name for p in (d.keys / "agents").glob("*.key")} == \
        {f"{uuid}.key", f"{site_uuid}.key"}
    # a mesh key per central router, a site key named by the site's id
    assert {p.name for p in (d.keys / "mesh").glob("*.key")} == {"router-1.key", "router-2.key"}
    assert [p.name for p in (d.keys / "sites").glob("*.key")] == [f"{SITE}.key"]
    backends = {p.name for p in (d.keys / "backends").glob("*.key")}
    assert backends == {"sink-registry@mon-1.key", "sink-alerting@mon-1.key",
                        "sink-graphite@mon-1.key", "sink-prometheus@mon-1.key",
                        "scheduler@mon-1.key", "operator@mon-1.key"}

    # routers: config, server key, every public key allowed, the unit
    for name in ("router-1", "router-2"):
        etc = d.etc(name)
        cfg = _load("router.config:RouterConfig", etc / "router.yaml")
        other = "router-2" if name == "router-1" else "router-1"
        # a mesh through the other router, the router's timing, its own key; no static peers
        assert cfg.id == name and cfg.peers == []
        assert cfg.mesh.seeds == [f"tcp://127.0.0.1:{d.ports[other][1]}"]
        assert (cfg.mesh.interval, cfg.mesh.expire_intervals, cfg.mesh.fanout) == (1.0, 5, 3)
        mesh_key = read_certificate(cfg.mesh.key, need_secret=True)
        assert (mesh_key.role, mesh_key.name) == ("router", name)
        assert _mode(Path(cfg.mesh.key)) == 0o600
        assert sorted(p.name for p in Path(cfg.security.routers).glob("*")) == \
            ["router-1.key", "router-2.key"]
        # sites accepted, from the site's key only
        assert cfg.bind.sites == sites_ep[int(name[-1]) - 1]
        assert [p.name for p in Path(cfg.security.sites).glob("*")] == [f"{SITE}.key"]
        assert cfg.site.max_agents == 100_000 and cfg.upstream == []
        # the example fleet has no history sink: nothing is routed there, so no agent
        # waits for a history ACK (durable routes, SPEC 4.1)
        assert all("history" not in sinks for sinks in cfg.routes.values())
        assert cfg.routes["STATS"] == ["graphite", "prometheus"]
        assert cfg.durable_routes() == {"NOTIFY": ["alerting"], "REGISTER": ["registry"]}
        assert cfg.bind.agents == agents_ep[name] and cfg.advertise_host == "127.0.0.1"
        assert cfg.security.curve and Path(cfg.security.server_key).is_relative_to(d.root(name))
        assert _mode(Path(cfg.security.server_key)) == 0o600
        assert {p.name for p in Path(cfg.security.backend_keys).glob("*.key")} == backends
        assert {p.name for p in Path(cfg.security.agent_keys).glob("*")} == \
            {f"{uuid}.key", f"{site_uuid}.key"}
        unit = (d.root(name) / "etc/systemd/system/fleetwatch-router.service").read_text()
        assert "ExecStart=/opt/fleetwatch/venv/bin/fleetwatch router --config " \
               "/etc/fleetwatch/router.yaml" in unit
        # sized for fleetwatch_router_max_agents: 2 descriptors per agent and 1,024 more
        assert cfg.max_agents == 10000 and "\nLimitNOFILE=21024\n" in unit

    # the site router: upstream to both central routers' sites endpoints, no sinks, no mesh,
    # its site key; its disk buffer writable under the unit
    cfg = _load("router.config:RouterConfig", d.etc(SITE) / "router.yaml")
    assert cfg.id == SITE and cfg.upstream == sites_ep
    assert cfg.bind.sinks == {} and cfg.bind.sites == "" and cfg.mesh.seeds == []
    assert all(sinks == [] for sinks in cfg.routes.values()) and cfg.peers == []
    spool = d.root(SITE) / "var/lib/fleetwatch/site-buffer"
    assert (cfg.site.interval, cfg.site.expire_intervals, cfg.site.buffer_messages,
            cfg.site.spool_dir, cfg.site.spool_bytes) == (0.2, 3, 10000, str(spool), 100 << 20)
    assert spool.is_dir() and _mode(spool) == 0o750
    site_key = read_certificate(cfg.site.key, need_secret=True)
    assert (site_key.role, site_key.name) == ("site", SITE) and _mode(Path(cfg.site.key)) == 0o600
    assert cfg.security.curve and cfg.security.routers == "" and cfg.security.sites == ""
    assert {p.name for p in Path(cfg.security.agent_keys).glob("*")} == \
        {f"{uuid}.key", f"{site_uuid}.key"}
    units = d.root(SITE) / "etc/systemd/system"
    assert (units / "fleetwatch-router.service").exists()
    assert (units / "fleetwatch-router.service.d/site-buffer.conf").read_text().endswith(
        "\n[Service]\nReadWritePaths=/var/lib/fleetwatch/site-buffer\n")
    cfg = _load("agent.config:AgentConfig", d.etc(SITE) / "agent.yaml")
    assert cfg.routers == [agents_ep[SITE]] and cfg.hostname == "site-1.test"
    # its devices: the section, their secret (root:fleetwatch 0640, never in a log), and
    # the unit holding what they need (ping: CAP_NET_RAW) and no more
    switch, = cfg.devices.hosts
    secret = d.etc(SITE) / "snmp/sw-site.community"
    assert (switch.name, switch.snmp.community_file) == ("sw-site", str(secret))
    assert secret.read_text() == "fw-c0mm\n" and _mode(secret) == 0o640
    assert "fw-c0mm" not in d.first.stdout + d.second.stdout
    agent_unit = (units / "fleetwatch-agent.service").read_text()
    assert "\nCapabilityBoundingSet=CAP_NET_RAW\n" in agent_unit
    assert "\nAmbientCapabilities=CAP_NET_RAW\n" in agent_unit
    assert f"\nLimitNOFILE={cfg.devices.descriptors(cfg.device_links)}\n" in agent_unit
    assert "\nCapabilityBoundingSet=\n" in \
        (d.root(AGENT) / "etc/systemd/system/fleetwatch-agent.service").read_text()

    # the agent: config, uuid-bound key, the unit
    cfg = _load("agent.config:AgentConfig", d.etc(AGENT) / "agent.yaml")
    assert cfg.routers == [agents_ep["router-1"], agents_ep["router-2"]]
    assert cfg.hostname == "router-1.test" and cfg.stats_interval == 30
    assert cfg.state_dir == str(d.root(AGENT) / "var/lib/fleetwatch/agent")
    assert [(c.name, c.command, c.args) for c in cfg.plugins.checks] == \
        [("load", "check_fw_load", ["-w", "50", "-c", "100"])]
    key = Path(cfg.security.key)
    assert _mode(key) == 0o600 and read_certificate(str(key), need_secret=True).uuid == uuid
    assert (d.root(AGENT) / "etc/systemd/system/fleetwatch-agent.service").exists()

    # the monitoring host: four sinks, the scheduler, the operator config, carbon
    mon = d.etc("mon-1")
    for type_ in ("registry", "alerting", "graphite", "prometheus"):
        cfg = _load("sinks.config:SinkConfig", mon / f"sink-{type_}.yaml")
        assert cfg.type == type_ and cfg.routers == control_ep
        assert cfg.state_url == f"sqlite:///{d.root('mon-1')}/var/lib/fleetwatch/state.db"
        assert _mode(Path(cfg.security.key)) == 0o600
        assert read_certificate(cfg.security.key).name == f"sink-{type_}@mon-1"
        assert (d.root("mon-1") / f"etc/systemd/system/fleetwatch-sink-{type_}.service").exists()
        if type_ == "graphite":
            assert (cfg.graphite.port, cfg.graphite.prefix) == (d.ports["mon-1"][0], "test")
        if type_ == "alerting":
            assert cfg.alerting.max_check_attempts == 2
        if type_ == "prometheus":
            assert cfg.prometheus.listen == f"127.0.0.1:{d.ports['mon-1'][2]}"
    cfg = _load("scheduler.config:SchedulerConfig", mon / "scheduler.yaml")
    assert cfg.routers == control_ep and cfg.id == "scheduler@mon-1"
    assert _load("fleetwatch.cli.operator:OperatorConfig", mon / "fleetwatch.yaml").routers \
        == control_ep
    carbon = (mon / "carbon" / "carbon.conf").read_text()
    assert f"LINE_RECEIVER_PORT = {d.ports['mon-1'][0]}" in carbon
    assert "PICKLE_RECEIVER_PORT = 0" in carbon
    unit = (d.root("mon-1") / "etc/systemd/system/fleetwatch-carbon.service").read_text()
    assert "ExecStart=/opt/fleetwatch/venv/bin/python -m fleetwatch.cli.demo.carbon " \
           "--config=/etc/fleetwatch/carbon/carbon.conf" in unit
    venv_python = d.root("mon-1") / "opt/fleetwatch/venv/bin/python"
    res = subprocess.run([str(venv_python), "-c", "import apscheduler, sqlalchemy, graphyte, "
                          "prometheus_client, carbon, whisper, fleetwatch.cli.service"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stderr


def _operator(d: Deployment, *args: str) -> subprocess.CompletedProcess:
    """A ``fleetwatch`` operator command on the monitoring host (its config and key)."""
    return subprocess.run([d.fleetwatch("mon-1"), *args, "--config",
                           str(d.etc("mon-1") / "fleetwatch.yaml")],
                          capture_output=True, text=True, timeout=30)


@pytest.mark.timeout(1800)
def test_deployed_fleet_meshes_and_links_its_site(deployed, tmp_path):
    d = deployed
    procs = [Proc(name, [d.fleetwatch(host), kind, "--config", str(d.etc(host) / f"{kind}.yaml")],
                  tmp_path / f"{name}.log")
             for name, host, kind in (("router-1", "router-1", "router"),
                                      ("router-2", "router-2", "router"),
                                      ("site-router", SITE, "router"),
                                      ("agent", AGENT, "agent"),
                                      ("site-agent", SITE, "agent"))]
    uuid = (d.root(AGENT) / "var/lib/fleetwatch/agent/uuid").read_text().strip()
    site_uuid = (d.root(SITE) / "var/lib/fleetwatch/agent/uuid").read_text().strip()

    def agreed():
        res = _operator(d, "routers", "--json")
        return json.loads(res.stdout) if res.returncode == 0 else None

    def attached():
        res = _operator(d, "status", "--json")
        if res.returncode != 0:
            return None
        agents = {a["uuid"]: a for a in json.loads(res.stdout)["agents"]}
        agent, behind, site = agents.get(uuid), agents.get(site_uuid), agents.get(SITE)
        if agent and agent["alive"] and len(agent["routers"]) == 2 \
                and all(a and a["alive"] and a["routers"] for a in (behind, site)):
            return agent, behind, site
        return None

    try:
        # the central routers found each other with their own keys, and agree
        mesh = wait_for(agreed, timeout=60, interval=0.5,
                        what="the deployed central routers agreeing on their mesh")
        assert mesh["live"] == ["router-1", "router-2"] and mesh["disagreements"] == []
        # the first agent on both; the site's agent, which knows its site router only,
        # through a central router (its PEERS list it, and the site as a host of its own):
        # the site linked up with its key. (The hostname of an agent behind a site comes
        # from the registry, whose sink is not started here.)
        agent, behind, site = wait_for(attached, timeout=60, interval=0.5,
                                       what="both deployed agents seen from the centre")
        assert sorted(agent["routers"]) == ["router-1", "router-2"]
        assert agent["hostname"] == "router-1.test" and site["hostname"] == SITE
        assert set(behind["routers"]) <= {"router-1", "router-2"}
        assert set(site["routers"]) <= {"router-1", "router-2"}
        assert all(p.alive() for p in procs)
    except AssertionError:
        for p in procs:
            print(f"----- {p.name} -----\n{p.log()[-3000:]}")
        raise
    finally:
        for p in reversed(procs):
            p.stop()


@pytest.mark.timeout(300)
def test_static_peers_without_a_mesh(deployed, tmp_path):
    """``fleetwatch_mesh: false``: the router role's config tasks alone, for a central router
    of the same inventory, write the static ``peers`` of before and no mesh."""
    d = deployed
    playbook = tmp_path / "static.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Write router.yaml without a mesh", "hosts": "router-1", "gather_facts": False,
        "tasks": [{"name": "The router's config", "ansible.builtin.include_role": {
            "name": "fleetwatch_router", "tasks_from": "config.yml"}}]}], sort_keys=False))
    written = tmp_path / "router.yaml"
    extra = {"fleetwatch_mesh": False, "fleetwatch_common_done": True,
             "fleetwatch_router_config": str(written)}
    res = run([PLAYBOOK, "-i", str(d.base / "hosts.yml"), "-e", json.dumps(extra),
               str(playbook)], d.env, timeout=240)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    cfg = _load("router.config:RouterConfig", written)
    assert cfg.peers == [f"tcp://127.0.0.1:{d.ports['router-2'][0]}"]
    assert cfg.mesh.seeds == [] and cfg.mesh.key == "" and cfg.security.routers == ""
    # the site router of the inventory is still served
    assert cfg.bind.sites == f"tcp://127.0.0.1:{d.ports['router-1'][8]}"
