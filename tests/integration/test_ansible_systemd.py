"""site.yml for real, into a booted container (tests/support/nspawn.py): the suite's one
deployment of the roles. ansible-playbook runs inside it with ``connection: local`` onto
three hosts, CURVE on:

- ``fw-1``, the container itself, its services managed by the roles through the
  container's systemd: a central router, the registry, alerting, graphite and prometheus
  sinks, a scheduler, carbon-cache, the operator config, and an agent installed from the
  Debian package ``make dist`` builds (``fleetwatch_agent_install: deb``);
- ``router-2``, a second central router meshed with the first;
- ``site-1``, a site router linked up to both, and the agent behind it, which lists its
  site router alone and polls a switch;

the last two each in a root of their own (``fleetwatch_root``) with service management off,
as an operator would stage them. The container has no network: the wheel and its
dependencies (carbon's too) come from the wheelhouse built on the host (``--no-index
--find-links``), and the Debian packages the roles would install are the image's own
(``fleetwatch_install_packages: false``).

Checked: every unit of fw-1 active, started by systemd, the agent's from the package's
virtualenv; the files written (loaded with fleetwatch's own config classes, copied out of
the container to the same paths); router-2's router, the site router and the site's agent
started from their roots (transient units): ``fleetwatch routers`` finds the two central
routers agreeing on their mesh and ``fleetwatch status`` the package's agent on both and
the site's agent alive through a central router; a second run onto the three changes
nothing; the static ``peers`` of a fleet without a mesh; last, fw-1 redeployed as a site
router writes its disk buffer under its unit.

Skipped where nspawn cannot run or the package cannot be built (debhelper missing). A
checkout under /tmp, which the container's own /tmp would hide, is shown inside through a
throwaway overlay, as are the test's directory and the controller's key store.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import support.nspawn as nspawn
from fleetwatch import __version__
from support.ansible import ANSIBLE, changed_tasks, load_config, recap
from support.fleet import wait_for

pytestmark = [pytest.mark.systemd, pytest.mark.timeout(1800)]

HOST = "fw-1"           # the container itself: its services under its systemd
ROUTER2 = "router-2"    # a second central router, in a root
SITE = "site-1"         # a site router and the agent behind it, in a root
HOSTS = (HOST, ROUTER2, SITE)
UNITS = ["fleetwatch-router.service", "fleetwatch-agent.service",
         "fleetwatch-sink-registry.service", "fleetwatch-sink-alerting.service",
         "fleetwatch-sink-graphite.service", "fleetwatch-sink-prometheus.service",
         "fleetwatch-scheduler.service", "fleetwatch-carbon.service"]
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
#: the package's virtualenv (packaging/dist.py)
AGENT_VENV = "/opt/fleetwatch-agent"
#: inside the container (its own network): agents, control, tail, five sinks', sites
PORTS = {HOST: [5555, 5556, 5557, 5561, 5562, 5563, 5564, 5565, 5570],
         ROUTER2: [6555, 6556, 6557, 6561, 6562, 6563, 6564, 6565, 6570],
         SITE: [7555, 7556, 7557]}
CARBON_LINE, CARBON_QUERY, SCRAPE = 2003, 7002, 9464
FW = "/opt/fleetwatch/venv/bin/fleetwatch"
OPERATOR = "/etc/fleetwatch/fleetwatch.yaml"


def ep(host: str, index: int) -> str:
    return f"tcp://127.0.0.1:{PORTS[host][index]}"


class Deployment:
    """The booted container, the runs, and the test's directory (shown inside at its own
    path: the roots and the key store are there)."""

    def __init__(self, box, base: Path, build: nspawn.Build, deb: Path):
        self.box, self.base, self.build, self.deb = box, base, build, deb
        self.first: subprocess.CompletedProcess | None = None
        self.second: subprocess.CompletedProcess | None = None

    def sh(self, script: str, **kw) -> subprocess.CompletedProcess:
        return self.box.sh(script, **kw)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        return self.box.show(unit, *props)

    def root(self, host: str) -> Path:
        return self.base / "roots" / host

    def etc(self, host: str) -> Path:
        return self.root(host) / "etc" / "fleetwatch"

    def fleetwatch(self, host: str) -> str:
        return str(self.root(host) / "opt" / "fleetwatch" / "venv" / "bin" / "fleetwatch")

    @property
    def keys(self) -> Path:
        return self.base / "keys"

    @property
    def controller(self) -> Path:
        return self.base / "controller"

    def copy_out(self) -> None:
        """The roots (but their virtualenvs) and the key store as the container has them,
        onto the host at the same paths: the configs name their files by those paths."""
        tar = subprocess.run(
            ["nsenter", "-t", str(self.box.pid1), "-a", "tar", "-C", "/",
             "--exclude=opt/fleetwatch/venv", "-cf", "-",
             *(str(p.relative_to("/")) for p in (self.base / "roots", self.keys))],
            capture_output=True, timeout=120, env=nspawn.ENV)
        assert tar.returncode == 0, tar.stderr.decode(errors="replace")
        subprocess.run(["tar", "-C", "/", "-xpf", "-"], input=tar.stdout, check=True,
                       timeout=120)

    def operator(self, *args: str) -> subprocess.CompletedProcess:
        """A ``fleetwatch`` operator command on fw-1 (the config and key the roles wrote)."""
        return self.sh(f"{FW} {' '.join(map(shlex.quote, args))} --config {OPERATOR}",
                       timeout=30)


def router_vars(host: str) -> dict:
    p = PORTS[host]
    return {"fleetwatch_router_agents_port": p[0], "fleetwatch_router_control_port": p[1],
            "fleetwatch_router_tail_port": p[2],
            "fleetwatch_router_sink_ports": dict(zip(
                ("registry", "alerting", "graphite", "history", "prometheus"), p[3:8])),
            "fleetwatch_router_sites_port": p[8]}


def inventory(d: Deployment) -> dict:
    # a host in a root: no services, no user, its own pip (no .pyc: the processes the
    # tests start, as root, compile what they import)
    rooted = {"fleetwatch_root": f"{d.base}/roots/{{{{ inventory_hostname }}}}",
              "fleetwatch_manage_services": False,
              "fleetwatch_pip_extra_args":
                  f"--no-index --find-links {d.build.wheels} --no-compile"}
    return {"all": {
        "vars": {
            "ansible_connection": "local",
            # Debian's, as ansible.cfg says for real hosts (the image is this machine's)
            "ansible_python_interpreter": "/usr/bin/python3",
            "fleetwatch_install_packages": False,
            "fleetwatch_wheel": str(d.build.wheel),
            # with .pyc: fw-1's units cannot write their virtualenv, and would compile at
            # every start
            "fleetwatch_pip_extra_args": f"--no-index --find-links {d.build.wheels}",
            "fleetwatch_keys_dir": str(d.keys),
            "fleetwatch_router_host": "127.0.0.1",
            "fleetwatch_router_bind_address": "127.0.0.1",
        },
        "children": {
            "fleetwatch_routers": {"hosts": {HOST: router_vars(HOST),
                                             ROUTER2: {**router_vars(ROUTER2), **rooted}}},
            # a site router: no sinks, only its agents, sites and tail ports are its own
            "fleetwatch_site_routers": {"hosts": {SITE: {
                "fleetwatch_router_agents_port": PORTS[SITE][0],
                "fleetwatch_router_control_port": PORTS[SITE][1],
                "fleetwatch_router_tail_port": PORTS[SITE][2],
                "fleetwatch_router_site_interval": 0.2, **rooted}}},
            "fleetwatch_sinks": {"hosts": {HOST: {
                "fleetwatch_sink_types": ["registry", "alerting", "graphite", "prometheus"],
                "fleetwatch_sink_prometheus": {"listen": f"127.0.0.1:{SCRAPE}"},
                "fleetwatch_sink_graphite": {"host": "127.0.0.1", "port": CARBON_LINE,
                                             "prefix": "test"},
                "fleetwatch_sink_alerting": {"max_check_attempts": 2},
                "fleetwatch_carbon_line_port": CARBON_LINE,
                "fleetwatch_carbon_query_port": CARBON_QUERY}}},
            "fleetwatch_schedulers": {"hosts": {HOST: None}},
            "fleetwatch_carbon": {"hosts": {HOST: None}},
            "fleetwatch_agents": {"hosts": {
                HOST: {"fleetwatch_agent_install": "deb",
                       "fleetwatch_agent_deb": str(d.deb),
                       "fleetwatch_agent_hostname": "fw-1.test",
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


def play(d: Deployment, hosts: dict, timeout: float, *args: str, playbook: str = "site.yml"):
    """``playbook`` inside the container with the inventory ``hosts``."""
    home = d.controller / "ansible-home"
    env = {"ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_HOME": str(home),
           "ANSIBLE_LOCAL_TEMP": f"{home}/tmp", "ANSIBLE_REMOTE_TEMP": f"{home}/rtmp",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    text = yaml.safe_dump(hosts, sort_keys=False)
    d.sh(f"mkdir -p {home}/tmp {home}/rtmp && "
         f"cat > {d.controller}/hosts.yml <<'EOF'\n{text}EOF\n", check=True)
    return d.sh(f"cd {shlex.quote(str(ANSIBLE))} && "
                + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
                + f" {PLAYBOOK} -i {d.controller}/hosts.yml {playbook} "
                + " ".join(shlex.quote(a) for a in args), timeout=timeout)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    if not os.access(PLAYBOOK, os.X_OK):
        pytest.skip(f"no {PLAYBOOK} (ansible-core comes with pip install -e '.[test]')")
    reason = nspawn.why_not()
    if reason is None and shutil.which("dh") is None:
        reason = "debhelper not installed (make system-packages): no agent package"
    if reason:
        pytest.skip(reason)
    build, (_, _, deb) = nspawn.build(), nspawn.agent_deb()
    base = tmp_path_factory.mktemp("ansible")
    # this checkout and its virtualenv, and the test's directory: under /tmp (CI's clone may
    # be) they are hidden by the container's own /tmp otherwise
    box = nspawn.booted(tmp_path_factory.mktemp("nspawn") / "nspawn.log",
                        shared=(ANSIBLE.parent, PLAYBOOK.parent.parent, base))
    d = Deployment(box, base, build, deb)
    try:
        # both central routers at once: router-2's is not started by the play, so there is
        # no rolling restart to keep. The bounds stop a run that hangs, not its speed: at
        # the suite's start it shares 2 cores with three other heavy modules
        serial = ("-e", "fleetwatch_router_serial=2")
        d.first = play(d, inventory(d), 900, *serial)
        if d.first.returncode == 0:
            d.second = play(d, inventory(d), 600, *serial)
            d.copy_out()
        yield d
    finally:
        box.close()


def first_run(d: Deployment) -> None:
    assert d.first.returncode == 0, d.first.stdout[-6000:] + d.first.stderr[-3000:] + \
        d.sh("journalctl -u 'fleetwatch*' --no-pager | tail -80").stdout


def test_first_run_deploys_every_host_and_systemd_starts_every_service(deployed):
    d = deployed
    first_run(d)
    hosts = recap(d.first.stdout)
    assert set(hosts) == set(HOSTS), d.first.stdout[-3000:]
    for host, counts in hosts.items():
        assert counts["failed"] == 0 and counts["unreachable"] == 0, host
        assert counts["changed"] > 0, host
    for unit in UNITS:
        props = d.show(unit, "ActiveState", "UnitFileState", "ExecMainStartTimestamp",
                       "FragmentPath")
        assert props["ActiveState"] == "active" and props["UnitFileState"] == "enabled", unit
        assert props["ExecMainStartTimestamp"], unit         # started, by systemd
        assert props["FragmentPath"] == f"/etc/systemd/system/{unit}"
    # the agent from its package: dpkg has it, and the role's unit runs its virtualenv
    assert d.sh("dpkg-query -W -f '${Status} ${Version}' fleetwatch-agent").stdout == \
        f"install ok installed {__version__}"
    start = d.show("fleetwatch-agent.service", "ExecStart")["ExecStart"]
    assert f"path={AGENT_VENV}/bin/fleetwatch ;" in start, start
    assert d.show("fleetwatch-agent.service", "User")["User"] == "fleetwatch"
    for host in (ROUTER2, SITE):
        assert d.sh(f"test -x {d.fleetwatch(host)}").returncode == 0, host


def test_second_run_changes_nothing(deployed):
    d = deployed
    first_run(d)
    second = d.second
    assert second.returncode == 0, second.stdout[-8000:] + second.stderr[-3000:]
    hosts = recap(second.stdout)
    assert set(hosts) == set(HOSTS)
    assert all(c["changed"] == 0 and c["failed"] == 0 for c in hosts.values()), \
        "\n".join(changed_tasks(second.stdout)) or second.stdout[-3000:]
    for unit in UNITS:
        assert d.show(unit, "ActiveState", "NRestarts") == \
            {"ActiveState": "active", "NRestarts": "0"}, unit


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _inside(d: Deployment, path: str) -> dict:
    return yaml.safe_load(d.sh(f"cat {path}", check=True).stdout)


def test_the_files_written(deployed):
    from fleetwatch.security import read_certificate
    d = deployed
    first_run(d)
    agents_ep = {r: ep(r, 0) for r in (HOST, ROUTER2, SITE)}
    control_ep = [ep(HOST, 1), ep(ROUTER2, 1)]
    sites_ep = {HOST: ep(HOST, 8), ROUTER2: ep(ROUTER2, 8)}

    # the key store on the controller
    assert (d.keys / "routers" / "fleet.key_secret").exists()
    uuid = d.sh("cat /var/lib/fleetwatch/agent/uuid", check=True).stdout.strip()
    site_uuid = (d.root(SITE) / "var/lib/fleetwatch/agent/uuid").read_text().strip()
    assert {p.name for p in (d.keys / "agents").glob("*.key")} == \
        {f"{uuid}.key", f"{site_uuid}.key"}
    # a mesh key per central router, a site key named by the site's id
    assert {p.name for p in (d.keys / "mesh").glob("*.key")} == {f"{HOST}.key",
                                                                 f"{ROUTER2}.key"}
    assert [p.name for p in (d.keys / "sites").glob("*.key")] == [f"{SITE}.key"]
    backends = {p.name for p in (d.keys / "backends").glob("*.key")}
    assert backends == {f"sink-{t}@{HOST}.key" for t in ("registry", "alerting", "graphite",
                                                           "prometheus")} | \
        {f"scheduler@{HOST}.key", f"operator@{HOST}.key"}

    # router-2, from its root: config, server key, every public key allowed, the unit
    cfg = load_config("router.config:RouterConfig", d.etc(ROUTER2) / "router.yaml")
    # a mesh through the other router, the router's timing, its own key; no static peers
    assert cfg.id == ROUTER2 and cfg.peers == [] and cfg.mesh.seeds == [ep(HOST, 1)]
    assert (cfg.mesh.interval, cfg.mesh.expire_intervals, cfg.mesh.fanout) == (1.0, 5, 3)
    mesh_key = read_certificate(cfg.mesh.key, need_secret=True)
    assert (mesh_key.role, mesh_key.name) == ("router", ROUTER2)
    assert _mode(Path(cfg.mesh.key)) == 0o600
    assert sorted(p.name for p in Path(cfg.security.routers).glob("*")) == \
        [f"{HOST}.key", f"{ROUTER2}.key"]
    # sites accepted, from the site's key only
    assert cfg.bind.sites == sites_ep[ROUTER2]
    assert [p.name for p in Path(cfg.security.sites).glob("*")] == [f"{SITE}.key"]
    assert cfg.site.max_agents == 100_000 and cfg.upstream == []
    # the fleet has no history sink: nothing is routed there, so no agent waits for a
    # history ACK (durable routes, SPEC 4.1)
    assert all("history" not in sinks for sinks in cfg.routes.values())
    assert cfg.routes["STATS"] == ["graphite", "prometheus"]
    assert cfg.durable_routes() == {"NOTIFY": ["alerting"], "REGISTER": ["registry"]}
    assert cfg.bind.agents == agents_ep[ROUTER2] and cfg.advertise_host == "127.0.0.1"
    assert cfg.security.curve and Path(cfg.security.server_key).is_relative_to(d.root(ROUTER2))
    assert _mode(Path(cfg.security.server_key)) == 0o600
    assert {p.name for p in Path(cfg.security.backend_keys).glob("*.key")} == backends
    assert {p.name for p in Path(cfg.security.agent_keys).glob("*")} == \
        {f"{uuid}.key", f"{site_uuid}.key"}
    unit = (d.root(ROUTER2) / "etc/systemd/system/fleetwatch-router.service").read_text()
    assert "ExecStart=/opt/fleetwatch/venv/bin/fleetwatch router --config " \
           "/etc/fleetwatch/router.yaml" in unit
    # sized for fleetwatch_router_max_agents: 2 descriptors per agent and 1,024 more
    assert cfg.max_agents == 10000 and "\nLimitNOFILE=21024\n" in unit
    # fw-1's, through the container: meshed with router-2
    mine = _inside(d, "/etc/fleetwatch/router.yaml")
    assert mine["id"] == HOST and mine["mesh"]["seeds"] == [ep(ROUTER2, 1)]
    assert mine["bind"]["sites"] == sites_ep[HOST]

    # the site router: upstream to both central routers' sites endpoints, no sinks, no
    # mesh, its site key; its disk buffer writable under the unit
    cfg = load_config("router.config:RouterConfig", d.etc(SITE) / "router.yaml")
    assert cfg.id == SITE and cfg.upstream == [sites_ep[HOST], sites_ep[ROUTER2]]
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
    cfg = load_config("agent.config:AgentConfig", d.etc(SITE) / "agent.yaml")
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

    # fw-1's agent, from the package: its config (on both central routers), its uuid-bound
    # key, the role's unit over the package's, holding no capability
    cfg = _inside(d, "/etc/fleetwatch/agent.yaml")
    assert cfg["routers"] == [agents_ep[HOST], agents_ep[ROUTER2]]
    assert cfg["hostname"] == "fw-1.test" and cfg["stats_interval"] == 30
    assert [(c["name"], c["command"]) for c in cfg["plugins"]["checks"]] == \
        [("load", "check_fw_load")]
    key = d.sh(f"{AGENT_VENV}/bin/python -c 'import sys; from fleetwatch.security import "
               f"read_certificate as r; print(r(sys.argv[1], need_secret=True).uuid)' "
               f"{cfg['security']['key']}", check=True).stdout.strip()
    assert key == uuid
    assert d.sh(f"stat -c '%a %U' {cfg['security']['key']}").stdout.strip() == \
        "600 fleetwatch"
    unit = d.sh("cat /etc/systemd/system/fleetwatch-agent.service", check=True).stdout
    assert f"ExecStart={AGENT_VENV}/bin/fleetwatch agent" in unit
    assert "\nCapabilityBoundingSet=\n" in unit

    # the monitoring side on fw-1: four sinks, the scheduler, the operator config, carbon
    for type_ in ("registry", "alerting", "graphite", "prometheus"):
        cfg = _inside(d, f"/etc/fleetwatch/sink-{type_}.yaml")
        assert cfg["type"] == type_ and cfg["routers"] == control_ep
        assert cfg["state_url"] == "sqlite:////var/lib/fleetwatch/state.db"
        if type_ == "graphite":
            assert (cfg["graphite"]["port"], cfg["graphite"]["prefix"]) == (CARBON_LINE,
                                                                             "test")
        if type_ == "alerting":
            assert cfg["alerting"]["max_check_attempts"] == 2
        if type_ == "prometheus":
            assert cfg["prometheus"]["listen"] == f"127.0.0.1:{SCRAPE}"
    assert _inside(d, "/etc/fleetwatch/scheduler.yaml")["routers"] == control_ep
    assert _inside(d, OPERATOR)["routers"] == control_ep
    assert _inside(d, OPERATOR)["security"]["curve"] is True
    carbon = d.sh("cat /etc/fleetwatch/carbon/carbon.conf", check=True).stdout
    assert f"LINE_RECEIVER_PORT = {CARBON_LINE}" in carbon
    assert "PICKLE_RECEIVER_PORT = 0" in carbon
    unit = d.sh("cat /etc/systemd/system/fleetwatch-carbon.service", check=True).stdout
    assert "ExecStart=/opt/fleetwatch/venv/bin/python -m fleetwatch.cli.demo.carbon " \
           "--config=/etc/fleetwatch/carbon/carbon.conf" in unit


def serve(d: Deployment, name: str, host: str, kind: str) -> None:
    """``fleetwatch KIND`` of a host in a root, from its virtualenv and with its config, as
    a transient unit of the container."""
    d.sh(f"systemd-run --unit fwtest-{name} --collect {d.fleetwatch(host)} {kind} "
         f"--config {d.etc(host) / (kind + '.yaml')}", check=True)


def test_deployed_fleet_meshes_and_links_its_site(deployed):
    d = deployed
    first_run(d)
    uuid = d.sh("cat /var/lib/fleetwatch/agent/uuid", check=True).stdout.strip()
    site_uuid = (d.root(SITE) / "var/lib/fleetwatch/agent/uuid").read_text().strip()
    started = [("router-2", ROUTER2, "router"), ("site-router", SITE, "router"),
               ("site-agent", SITE, "agent")]

    def agreed():
        res = d.operator("routers", "--json")
        if res.returncode != 0:
            return None
        mesh = json.loads(res.stdout)
        return mesh if mesh["live"] == [HOST, ROUTER2] else None

    def attached():
        res = d.operator("status", "--json")
        if res.returncode != 0:
            return None
        agents = {a["uuid"]: a for a in json.loads(res.stdout)["agents"]}
        agent, behind, site = agents.get(uuid), agents.get(site_uuid), agents.get(SITE)
        if agent and agent["alive"] and len(agent["routers"]) == 2 \
                and all(a and a["alive"] and a["routers"] for a in (behind, site)):
            return agent, behind, site
        return None

    try:
        for name, host, kind in started:
            serve(d, name, host, kind)
        # the central routers found each other with their own keys, and agree
        mesh = wait_for(agreed, timeout=90, interval=0.5,
                        what="the deployed central routers agreeing on their mesh")
        assert mesh["disagreements"] == []
        # the package's agent on both; the site's agent, which knows its site router only,
        # through a central router (its PEERS list it, and the site as a host of its own):
        # the site linked up with its key
        agent, behind, site = wait_for(attached, timeout=90, interval=0.5,
                                       what="both deployed agents seen from the centre")
        assert sorted(agent["routers"]) == [HOST, ROUTER2]
        assert agent["hostname"] == "fw-1.test" and agent["version"] == __version__
        assert site["hostname"] == SITE
        assert set(behind["routers"]) <= {HOST, ROUTER2}
        assert set(site["routers"]) <= {HOST, ROUTER2}
        for name, _, _ in started:
            assert d.show(f"fwtest-{name}", "ActiveState")["ActiveState"] == "active", name
    except AssertionError:
        for name, _, _ in started:
            print(f"----- {name} -----\n"
                  + d.sh(f"journalctl -u fwtest-{name} --no-pager | tail -40").stdout)
        raise
    finally:
        d.sh("systemctl stop " + " ".join(f"fwtest-{n}" for n, _, _ in started), timeout=60)


def test_static_peers_without_a_mesh(deployed):
    """``fleetwatch_mesh: false``: the router role's config tasks alone, for a central router
    of the same inventory, write the static ``peers`` of before and no mesh."""
    d = deployed
    first_run(d)
    playbook = d.controller / "static.yml"
    written = d.controller / "router-static.yaml"
    text = yaml.safe_dump([{
        "name": "Write router.yaml without a mesh", "hosts": ROUTER2, "gather_facts": False,
        "tasks": [{"name": "The router's config", "ansible.builtin.include_role": {
            "name": "fleetwatch_router", "tasks_from": "config.yml"}}]}], sort_keys=False)
    d.sh(f"cat > {playbook} <<'EOF'\n{text}EOF\n", check=True)
    extra = {"fleetwatch_mesh": False, "fleetwatch_common_done": True,
             "fleetwatch_router_config": str(written)}
    res = play(d, inventory(d), 240, "-e", json.dumps(extra), playbook=str(playbook))
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:]
    cfg = yaml.safe_load(d.sh(f"cat {written}", check=True).stdout)
    assert cfg["peers"] == [ep(HOST, 0)]
    assert not cfg.get("mesh", {}).get("seeds") and not cfg.get("mesh", {}).get("key")
    assert not cfg["security"].get("routers")
    # the site router of the inventory is still served
    assert cfg["bind"]["sites"] == ep(ROUTER2, 8)


def test_redeployed_as_a_site_router_it_writes_its_disk_buffer(deployed):
    """fw-1's router made a site router (last: it changes the host): its unit, read-only
    but for its drop-in's ReadWritePaths=, is restarted with the disk buffer the role made
    (the router probes it before READY=1, and exits 78 otherwise: the play's restart would
    fail). Its upstream is router-2, not started here (the uplink stays down); the
    clients' endpoints are the same, so only the router changes."""
    d = deployed
    first_run(d)
    unit = "fleetwatch-router.service"
    before = d.show(unit, "ExecMainStartTimestamp")
    hosts = inventory(d)
    groups = hosts["all"]["children"]
    central = groups["fleetwatch_routers"]["hosts"]
    groups["fleetwatch_site_routers"]["hosts"][HOST] = central.pop(HOST)
    res = play(d, hosts, 500, "--limit", HOST)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:] + \
        d.sh("journalctl -u fleetwatch-router --no-pager | tail -30").stdout
    config = _inside(d, "/etc/fleetwatch/router.yaml")
    assert config["upstream"] == [ep(ROUTER2, 8)]
    assert config["site"]["spool_dir"] == "/var/lib/fleetwatch/site-buffer"
    assert d.show(unit, "ReadWritePaths")["ReadWritePaths"] == "/var/lib/fleetwatch/site-buffer"
    assert d.show(unit, "ExecMainStartTimestamp") != before
    assert d.show(unit, "ActiveState", "NRestarts") == \
        {"ActiveState": "active", "NRestarts": "0"}, \
        d.sh("journalctl -u fleetwatch-router --no-pager | tail -30").stdout
    assert d.sh("stat -c %U /var/lib/fleetwatch/site-buffer",
                check=True).stdout.strip() == "fleetwatch"
