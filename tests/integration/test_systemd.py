"""The units under a real systemd: this machine's root booted in systemd-nspawn
(tests/support/nspawn.py), fleetwatch installed as an administrator would, from a virtualenv of the
system's Python, with ``fleetwatch service install --enable`` for the router, the agent,
every sink type and the scheduler. What is checked is what an administrator reads:
``systemctl`` states and properties, ``fleetwatch status --json``, ``journalctl -o json``.

Skipped only where nspawn cannot run (not root, not installed, no bind mount). The tests of
this module share one container and run in order; the last one stops every unit.
"""

from __future__ import annotations

import json
import re
import shlex

import pytest
import yaml

from fleetwatch import __version__
import support.nspawn as nspawn
from support.fleet import wait_for

pytestmark = [pytest.mark.systemd, pytest.mark.timeout(300)]

SINK_TYPES = ("alerting", "graphite", "history", "registry")
SERVICES = [("router",), ("agent",), *(("sink", t) for t in SINK_TYPES), ("scheduler",)]
UNITS = [f"fleetwatch-{'-'.join(s)}.service" for s in SERVICES]
#: the router's watchdog, lowered by a drop-in so that a hang is caught in seconds
WATCHDOG = 3
OPERATOR = "/etc/fleetwatch/fleetwatch.yaml"


@pytest.fixture(scope="module")
def container(tmp_path_factory):
    fleetwatch = nspawn.build().fleetwatch if nspawn.why_not() is None else ""
    box = nspawn.booted(tmp_path_factory.mktemp("nspawn") / "nspawn.log")
    box.fleetwatch = fleetwatch
    yield box
    box.close()


@pytest.fixture(scope="module")
def fleet(container):
    """Every process installed and started by ``fleetwatch service install --enable``."""
    fw = container.fleetwatch
    dropin = "/etc/systemd/system/fleetwatch-router.service.d"
    container.sh(f"mkdir -p {dropin} && "
                 f"printf '[Service]\\nWatchdogSec={WATCHDOG}s\\n' > {dropin}/watchdog.conf",
                 check=True)
    # the router's own config, kept by install: its sockets bound to one address (libzmq
    # then looks the address up among the interfaces, over netlink)
    router = {"id": "fw-router", "bind": {
        "agents": "tcp://127.0.0.1:5555", "control": "tcp://127.0.0.1:5556",
        "tail": "tcp://127.0.0.1:5557",
        "sinks": {t: f"tcp://127.0.0.1:{5560 + i}" for i, t in
                  enumerate(("registry", "alerting", "graphite", "history"))}}}
    container.sh(f"mkdir -p /etc/fleetwatch && cat > /etc/fleetwatch/router.yaml <<'EOF'\n"
                 f"{yaml.safe_dump(router)}EOF\n", check=True)
    for service in SERVICES:
        res = container.sh(f"{fw} service install {' '.join(service)} --enable", timeout=120)
        assert res.returncode == 0, f"{' '.join(service)}: {res.stdout}\n{res.stderr}\n" + \
            container.sh(f"journalctl -u fleetwatch-{'-'.join(service)} --no-pager "
                         f"| tail -20").stdout
        assert res.stdout.splitlines()[-1].startswith("enabled and started"), res.stdout
    container.sh(f"printf 'routers: [tcp://127.0.0.1:5556]\\n' > {OPERATOR}", check=True)
    container.router_id = yaml.safe_load(
        container.sh("cat /etc/fleetwatch/router.yaml", check=True).stdout)["id"]
    return container


def status(box, check: bool = True) -> dict:
    """``fleetwatch status --json``; with ``check``, every router must have answered."""
    res = box.sh(f"{box.fleetwatch} status --json --config {OPERATOR}", timeout=30)
    assert res.returncode == 0 or not check, res.stderr
    return json.loads(res.stdout) if res.returncode == 0 else {"agents": []}


def attached(box):
    """The agent, alive and attached to the router, as ``fleetwatch status`` shows it."""
    agents = status(box, check=False)["agents"]
    return [a for a in agents if a["alive"] and box.router_id in a["routers"]]


def logged(box, unit: str, priority: int, text: str):
    return [m for p, m in box.journal(unit) if p == priority and text in m]


# ---------------------------------------------------------------- before installing

def test_install_refuses_what_the_unit_could_not_execute(container):
    """What systemd would answer with 203/EXEC and a restart loop: refused with one line
    and exit 78, before anything is created (the user, the config, the unit)."""
    fw = container.fleetwatch
    venv_python = fw.rsplit("/", 1)[0] + "/python"
    container.sh(
        f"mkdir -p /root/fw/bin /root/py /opt/fw/bin && cp {fw} /root/fw/bin/fleetwatch && "
        f"ln -s {venv_python} /root/py/python3 && "
        f"sed '1s|.*|#!/root/py/python3|' {fw} > /opt/fw/bin/fleetwatch && "
        f"chmod 755 /opt/fw/bin/fleetwatch && "
        f"mkdir -m 0700 /opt/private && cp {fw} /opt/private/fleetwatch", check=True)
    cases = [
        ("router", "/root/fw/bin/fleetwatch",
         "the command, /root/fw/bin/fleetwatch, is under /root/, which the unit hides"),
        ("sink registry", "/opt/fw/bin/fleetwatch",
         "the interpreter of /opt/fw/bin/fleetwatch, /root/py/python3, is under /root/, "
         "which the unit hides"),
        ("agent", "/opt/private/fleetwatch",
         "the command, /opt/private/fleetwatch: /opt/private is not searchable by user "
         "fwrefused (mode 0700, owner 0:0)"),
    ]
    for process, exe, reason in cases:
        res = container.sh(f"{fw} service install {process} --executable {exe} "
                           f"--user fwrefused --config /etc/fleetwatch/refused.yaml --enable")
        assert (res.returncode, res.stdout) == (78, ""), res.stderr
        assert len(res.stderr.splitlines()) == 1 and reason in res.stderr, res.stderr
    assert container.sh("id fwrefused").returncode != 0
    assert container.sh("test -e /etc/fleetwatch/refused.yaml").returncode == 1


# ---------------------------------------------------------------- the running fleet

def test_every_unit_is_active(fleet):
    for unit in UNITS:
        props = fleet.show(unit, "ActiveState", "SubState", "NRestarts", "Type")
        assert props == {"ActiveState": "active", "SubState": "running", "NRestarts": "0",
                         "Type": "notify"}, unit


def test_the_agent_is_attached_to_the_router(fleet):
    # alive: the registry sink has it; UP: the alerting sink has its heartbeats
    agents = wait_for(lambda: [a for a in attached(fleet) if a.get("state") == "UP"],
                      60, 0.5, "the agent UP in fleetwatch status")
    assert len(agents) == 1
    assert status(fleet)["routers"] == [{"endpoint": "tcp://127.0.0.1:5556",
                                          "id": fleet.router_id, "reachable": True,
                                          "problem": None, "known": "configured",
                                          "version": __version__}]


def test_the_router_has_the_descriptors_it_is_sized_for(fleet):
    """LimitNOFILE= from max_agents (the default 10,000: 2 per agent and 1,024 more); the
    router reads its descriptors inside its sandbox and reports them in its STATS."""
    unit = "fleetwatch-router.service"
    assert fleet.show(unit, "LimitNOFILE", "LimitNOFILESoft") == {
        "LimitNOFILE": "21024", "LimitNOFILESoft": "21024"}
    def open_files(pid) -> tuple[int, int]:
        limits = fleet.sh(f"cat /proc/{pid}/limits", check=True).stdout
        soft, hard = re.search(r"^Max open files\s+(\d+)\s+(\d+)\s", limits, re.M).groups()
        return int(soft), int(hard)

    # what systemd can give: no more than its own hard limit (20,000 in this machine's
    # containers, where the router then has less than its unit asks)
    expected = min(21024, open_files(1)[1])
    assert open_files(fleet.show(unit, "MainPID")["MainPID"]) == (expected, expected)
    res = fleet.sh(f"{fleet.fleetwatch} tail --config {OPERATOR} --type STATS "
                   f"--agent {fleet.router_id} --json --count 1 --timeout 30", timeout=60)
    assert res.returncode == 0 and res.stdout, res.stderr
    metrics = json.loads(res.stdout.splitlines()[0])["body"]["metrics"]
    assert metrics["router.fd_limit"] == expected and 0 < metrics["router.fd_used"] < 1000
    assert metrics["router.fd_headroom_pct"] > 95
    assert not logged(fleet, unit, 4, "descriptor")


def test_reload_applies_and_journald_keeps_the_priorities(fleet):
    unit, config = "fleetwatch-agent.service", "/etc/fleetwatch/agent.yaml"
    fleet.sh(f"cp -p {config} {config}.orig && "
             f"printf 'stats_interval: 5\\nhostname: renamed\\n' >> {config}", check=True)
    fleet.sh(f"systemctl reload {unit}", check=True)
    wait_for(lambda: logged(fleet, unit, 6, f"config reloaded from {config}: "
                                            f"applied stats_interval"),
             30, 0.3, "the reload's INFO line")
    assert logged(fleet, unit, 4, "hostname changed: takes effect at restart")

    fleet.sh(f"printf 'nosuch: 1\\n' >> {config}", check=True)
    fleet.sh(f"systemctl reload {unit}", check=True)
    wait_for(lambda: logged(fleet, unit, 3, "config reload failed, keeping the running "
                                            "config: "),
             30, 0.3, "the failed reload's ERROR line")
    fleet.sh(f"mv {config}.orig {config} && systemctl reload {unit}", check=True)
    assert fleet.show(unit, "ActiveState", "NRestarts") == {"ActiveState": "active",
                                                           "NRestarts": "0"}
    assert not [m for p, m in fleet.journal(unit) if p not in (3, 4, 6, 7)]


def test_the_watchdog_restarts_a_hung_process(fleet):
    unit = "fleetwatch-router.service"
    assert fleet.show(unit, "WatchdogUSec")["WatchdogUSec"] == f"{WATCHDOG}s"
    pid = int(fleet.show(unit, "MainPID")["MainPID"])
    assert pid > 1      # never `kill -STOP 0`: that would stop our own group
    fleet.sh(f"kill -STOP {pid}", check=True)

    def restarted():
        props = fleet.show(unit, "NRestarts", "ActiveState", "MainPID")
        return props["NRestarts"] == "1" and props["ActiveState"] == "active" and \
            props["MainPID"] not in ("0", str(pid))
    wait_for(restarted, 60, 0.3, "systemd to restart the hung router")
    log = fleet.sh(f"journalctl -u {unit} --no-pager", check=True).stdout
    assert "Watchdog timeout" in log, log[-2000:]
    # the agent finds the router again
    wait_for(lambda: attached(fleet), 60, 0.5, "the agent attached again")


def test_stop_drains_and_exits_0(fleet):
    """Last: each process stops on SIGTERM with its final line, exit status 0."""
    final = {"fleetwatch-agent.service": "agent stopped (",
             "fleetwatch-scheduler.service": "sender stopping; counters:",
             "fleetwatch-router.service": f"router {fleet.router_id} stopping"}
    for unit in ["fleetwatch-agent.service", "fleetwatch-scheduler.service",
                 *(u for u in UNITS if "-sink-" in u), "fleetwatch-router.service"]:
        fleet.sh(f"systemctl stop {shlex.quote(unit)}", check=True, timeout=60)
        assert fleet.show(unit, "ActiveState", "Result", "ExecMainCode", "ExecMainStatus") \
            == {"ActiveState": "inactive", "Result": "success", "ExecMainCode": "1",
                "ExecMainStatus": "0"}, unit
        assert logged(fleet, unit, 6, final.get(unit, "stopping; final counters:")), unit
