"""site.yml for real into a booted container (tests/support/nspawn.py): ansible-playbook runs inside
it with ``connection: local``, one host in every group but carbon (a router, the registry,
alerting and graphite sinks, a scheduler, an agent), services managed by the roles through
the container's systemd. The container has no network: the wheel and its dependencies come
from the wheelhouse built on the host (``--no-index --find-links``), and the Debian
packages the roles would install are the image's own (``fleetwatch_install_packages:
false``). Checked: every unit active, started by systemd; the agent attached to the router
as ``fleetwatch status`` shows it through the operator config the roles wrote (CURVE on);
a second run changes nothing.

Skipped where nspawn cannot run. A checkout under /tmp, which the container's own /tmp would
hide, is shown inside through a throwaway overlay.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest
import yaml

import support.nspawn as nspawn
from support.ansible import ANSIBLE, changed_tasks, recap
from support.fleet import wait_for

pytestmark = [pytest.mark.systemd, pytest.mark.timeout(1500)]

HOST = "fw-1"
UNITS = ["fleetwatch-router.service", "fleetwatch-agent.service",
         "fleetwatch-sink-registry.service", "fleetwatch-sink-alerting.service",
         "fleetwatch-sink-graphite.service", "fleetwatch-scheduler.service"]
CONTROLLER = "/var/lib/fleetwatch-controller"      # inside the container: its overlay
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def inventory(build: nspawn.Build) -> dict:
    return {"all": {
        "vars": {
            "ansible_connection": "local",
            # Debian's, as ansible.cfg says for real hosts (the image is this machine's)
            "ansible_python_interpreter": "/usr/bin/python3",
            "fleetwatch_install_packages": False,
            "fleetwatch_wheel": str(build.wheel),
            "fleetwatch_pip_extra_args": f"--no-index --find-links {build.wheels}",
            "fleetwatch_keys_dir": f"{CONTROLLER}/keys",
            "fleetwatch_router_host": "127.0.0.1",
            "fleetwatch_router_bind_address": "127.0.0.1",
        },
        "children": {
            "fleetwatch_routers": {"hosts": {HOST: None}},
            "fleetwatch_sinks": {"hosts": {HOST: {
                "fleetwatch_sink_types": ["registry", "alerting", "graphite"]}}},
            "fleetwatch_schedulers": {"hosts": {HOST: None}},
            "fleetwatch_agents": {"hosts": {HOST: {
                "fleetwatch_agent_checks": [{"name": "load", "command": "check_fw_load",
                                             "args": ["-w", "50", "-c", "100"],
                                             "interval": 30}]}}},
        }}}


def play(box, hosts: dict, timeout: float, *args: str):
    """site.yml inside the container with the inventory ``hosts``."""
    env = {"ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
           "ANSIBLE_HOME": f"{CONTROLLER}/ansible-home",
           "ANSIBLE_LOCAL_TEMP": f"{CONTROLLER}/ansible-home/tmp",
           "ANSIBLE_REMOTE_TEMP": f"{CONTROLLER}/ansible-home/rtmp",
           "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0"}
    text = yaml.safe_dump(hosts, sort_keys=False)
    box.sh(f"cat > {CONTROLLER}/hosts.yml <<'EOF'\n{text}EOF\n", check=True)
    return box.sh(f"cd {shlex.quote(str(ANSIBLE))} && "
                  + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
                  + f" {PLAYBOOK} -i {CONTROLLER}/hosts.yml site.yml "
                  + " ".join(shlex.quote(a) for a in args), timeout=timeout)


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    if not os.access(PLAYBOOK, os.X_OK):
        pytest.skip(f"no {PLAYBOOK} (ansible-core comes with pip install -e '.[test]')")
    build = nspawn.build() if nspawn.why_not() is None else None
    # this checkout and its virtualenv: a clone under /tmp (CI's may be) is hidden by the
    # container's own /tmp otherwise
    box = nspawn.booted(tmp_path_factory.mktemp("nspawn") / "nspawn.log",
                        shared=(ANSIBLE.parent, PLAYBOOK.parent.parent))
    try:
        box.build = build
        box.sh(f"mkdir -p {CONTROLLER}/ansible-home/tmp {CONTROLLER}/ansible-home/rtmp",
               check=True)
        # bounds for a run that hangs, not its speed (as in test_ansible: at the suite's
        # start it shares 2 cores with three other heavy modules)
        box.first = play(box, inventory(build), timeout=700)
        box.second = play(box, inventory(build), timeout=500) \
            if box.first.returncode == 0 else None
        yield box
    finally:
        box.close()


def test_first_run_deploys_and_systemd_starts_every_service(deployed):
    first = deployed.first
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:] + \
        deployed.sh("journalctl -u 'fleetwatch*' --no-pager | tail -80").stdout
    counts = recap(first.stdout)[HOST]
    assert counts["failed"] == 0 and counts["changed"] > 0
    for unit in UNITS:
        props = deployed.show(unit, "ActiveState", "UnitFileState", "ExecMainStartTimestamp",
                              "FragmentPath")
        assert props["ActiveState"] == "active" and props["UnitFileState"] == "enabled", unit
        assert props["ExecMainStartTimestamp"], unit         # started, by systemd
        assert props["FragmentPath"] == f"/etc/systemd/system/{unit}"


def test_the_deployed_fleet_talks(deployed):
    fw = "/opt/fleetwatch/venv/bin/fleetwatch"
    uuid = deployed.sh("cat /var/lib/fleetwatch/agent/uuid", check=True).stdout.strip()

    def attached():
        res = deployed.sh(f"{fw} status --json --config /etc/fleetwatch/fleetwatch.yaml",
                          timeout=30)
        if res.returncode != 0:
            return None
        agents = [a for a in json.loads(res.stdout)["agents"] if a["uuid"] == uuid]
        return agents if agents and agents[0]["alive"] and agents[0]["routers"] == [HOST] \
            else None
    wait_for(attached, 60, 0.5, "the deployed agent attached to the deployed router")
    config = yaml.safe_load(deployed.sh("cat /etc/fleetwatch/fleetwatch.yaml",
                                        check=True).stdout)
    assert config["security"]["curve"] is True


def test_second_run_changes_nothing(deployed):
    second = deployed.second
    assert second is not None and second.returncode == 0, \
        (second.stdout[-8000:] + second.stderr[-3000:]) if second else "first run failed"
    counts = recap(second.stdout)[HOST]
    assert counts["changed"] == 0 and counts["failed"] == 0, \
        "\n".join(changed_tasks(second.stdout)) or second.stdout[-3000:]
    for unit in UNITS:
        assert deployed.show(unit, "ActiveState", "NRestarts") == \
            {"ActiveState": "active", "NRestarts": "0"}, unit


def test_redeployed_as_a_site_router_it_writes_its_disk_buffer(deployed):
    """The host's router made a site router (last: it changes the host): its unit, read-only
    but for its drop-in's ReadWritePaths=, is restarted with the disk buffer the role made
    (the router probes it before READY=1, and exits 78 otherwise: the play's restart would
    fail). Its upstream is a central router of the inventory that does not run (the uplink
    stays down); the clients' endpoints are the same (that router has this host's address
    and ports), so only the router changes."""
    unit = "fleetwatch-router.service"
    before = deployed.show(unit, "ExecMainStartTimestamp")
    hosts = inventory(deployed.build)
    groups = hosts["all"]["children"]
    groups["fleetwatch_site_routers"] = groups.pop("fleetwatch_routers")
    groups["fleetwatch_routers"] = {"hosts": {"central": {"fleetwatch_router_sites_port": 5999}}}
    res = play(deployed, hosts, 500, "--limit", HOST)
    assert res.returncode == 0, res.stdout[-6000:] + res.stderr[-3000:] + \
        deployed.sh("journalctl -u fleetwatch-router --no-pager | tail -30").stdout
    config = yaml.safe_load(deployed.sh("cat /etc/fleetwatch/router.yaml", check=True).stdout)
    assert config["upstream"] == ["tcp://127.0.0.1:5999"]
    assert config["site"]["spool_dir"] == "/var/lib/fleetwatch/site-buffer"
    assert deployed.show(unit, "ReadWritePaths")["ReadWritePaths"] == \
        "/var/lib/fleetwatch/site-buffer"
    assert deployed.show(unit, "ExecMainStartTimestamp") != before
    assert deployed.show(unit, "ActiveState", "NRestarts") == \
        {"ActiveState": "active", "NRestarts": "0"}, \
        deployed.sh("journalctl -u fleetwatch-router --no-pager | tail -30").stdout
    assert deployed.sh("stat -c %U /var/lib/fleetwatch/site-buffer",
                       check=True).stdout.strip() == "fleetwatch"
