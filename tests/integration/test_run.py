"""``fleetwatch run`` end to end: real routers, sinks and agents as processes on 127.0.0.1.

One fleet serves the module: two routers, the alerting and registry sinks on both, and an
agent (hostname ``web-1``) attached to router-1 only, so router-2 answers every RUN for it
with 404 and the command must still succeed through router-1. The cases with a declared
plugin run once the agent has its plugin runner (agent/runner.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass

import pytest

from support.fleet import Fleet, Proc, agent_uuid_for, module_fleet, wait_for
from fleetwatch.ask import ask_all

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

CHECKS = [{"name": "boom", "command": "check_dummy", "args": ["2", "boom"], "interval": 3600,
           "timeout": 5},
          {"name": "fine", "command": "check_dummy", "args": ["0", "all good"],
           "interval": 3600, "timeout": 5}]
#: generous: interpreter start on 2 busy cores, plus the operator config's 1 s timeout
QUICK = 8.0


@dataclass
class World:
    fleet: Fleet
    routers: list[dict]
    agent: Proc
    uuid: str
    op: str


def attached(world_or_routers, uuid: str, ctx=None) -> list[str]:
    """Ids of the routers that have ``uuid`` attached now (a PEERS question to each)."""
    routers = world_or_routers.routers if isinstance(world_or_routers, World) else \
        world_or_routers
    answers = ask_all([r["endpoints"]["control"] for r in routers], ("PEERS",), 2.0, ctx=ctx)
    return [a.router_id for a in answers if a.get("PEERS") and any(
        p.get("uuid") == uuid for p in a.get("PEERS").get("agents") or [])]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with module_fleet(tmp_path_factory, "run") as fleet:
        routers = [fleet.router("router-1"), fleet.router("router-2")]
        fleet.sink("alerting", routers)
        fleet.sink("registry", routers)
        uuid = agent_uuid_for(fleet, "agent")
        agent = fleet.agent(routers[:1], hostname="web-1", plugins={"checks": CHECKS})
        wait_for(lambda: attached(routers, uuid) == ["router-1"], 15, what="the agent attached")
        op = str(fleet.operator_config(routers))
        wait_for(lambda: {c["plugin"] for c in fleet.status(op)["checks"]
                          if c["uuid"] == uuid} == {"boom", "fine"},
                 15, what="status to show the agent's declared checks")
        yield World(fleet, routers, agent, uuid, op)


def run(world: World, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    res = subprocess.run([sys.executable, "-m", "fleetwatch", "run", *args,
                          "--config", world.op], capture_output=True, text=True,
                         timeout=timeout)
    if res.returncode not in (0, 1, 2, 3):
        print(world.fleet.logs())
    return res


# ---------------------------------------------------------------- an undeclared plugin

def test_wait_prints_the_agents_answer_and_exits_with_its_status(world):
    """With --force the RUN of a plugin the registry does not list goes anyway (the registry
    may lag the agent), and the agent's own refusal is what the operator reads."""
    res = run(world, "web-1", "nosuch", "--wait", "--timeout", "20", "--force")
    assert res.returncode == 3, res.stderr
    assert "not declared" in res.stdout and "nosuch" in res.stdout
    # the alerting sink recorded the RESULT as the check's latest; no command shows it (status
    # lists declared checks only), but it is there should the agent declare the plugin later
    rows = wait_for(lambda: world.fleet.db_rows("SELECT status, command_id, router FROM checks "
                                                "WHERE uuid = ? AND plugin = 'nosuch'",
                                    (world.uuid,)), what="the checks row")
    assert rows[0][0] == 3 and rows[0][1].startswith("cli:") and rows[0][2] == "router-1"


def test_by_uuid_with_json(world):
    res = run(world, world.uuid, "nosuch", "--wait", "--json", "--force")
    assert res.returncode == 3, res.stderr
    out = json.loads(res.stdout)
    assert out["uuid"] == world.uuid and out["hostname"] == "web-1"
    assert out["plugin"] == "nosuch" and out["router"] == "router-1"
    assert (out["status"], out["state"]) == (3, "UNKNOWN")
    assert out["command_id"].startswith("cli:") and len(out["command_id"]) == 28
    assert "not declared" in out["output"]


def test_without_wait_says_which_routers_forwarded_it(world):
    res = run(world, "web-1", "nosuch", "--force")
    assert res.returncode == 0, res.stderr
    assert "forwarded by router-1" in res.stdout and world.uuid in res.stdout
    out = json.loads(run(world, "web-1", "nosuch", "--json", "--force").stdout)
    assert out["accepted"] == ["router-1"]
    assert list(out["refused"]) == ["router-2"] and "404" in out["refused"]["router-2"]


def test_an_undeclared_plugin_is_refused_before_sending(world):
    """The registry knows web-1 and its plugins; a RUN of one it did not
    declare is not sent (exit 3, one line naming host, plugin and what it declared), with
    or without --wait; a declared one still goes."""
    for extra in ((), ("--wait",), ("--json",)):
        res = run(world, "web-1", "nosuch", *extra, timeout=QUICK)
        assert res.returncode == 3, res.stderr
        assert res.stdout == ""
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1, res.stderr
        assert f"web-1 ({world.uuid})" in lines[0] and "'nosuch'" in lines[0]
        assert "declared boom, fine" in lines[0] and "--force" in lines[0]
    res = run(world, "web-1", "fine")
    assert res.returncode == 0 and "RUN cli:" in res.stdout, res.stderr
    assert res.stderr == ""


# ---------------------------------------------------------------- offline, ambiguous

def test_an_unknown_uuid_is_offline_at_once(world):
    started = time.monotonic()
    res = run(world, "0123456789abcdef0123456789abcdef", "nosuch", "--wait", timeout=QUICK)
    elapsed = time.monotonic() - started
    assert res.returncode == 3, res.stderr
    assert res.stdout == ""
    assert "no router has it attached" in res.stderr and "404" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    print(f"offline answer in {elapsed:.2f}s")


def test_a_shared_hostname_then_a_stopped_agent(world):
    """Two attached agents named web-1: ambiguous (exit 2, both uuids listed). Once the
    twin is stopped, web-1 is the attached one, and the twin by uuid is offline (exit 3)."""
    fleet = world.fleet
    twin_uuid = agent_uuid_for(fleet, "twin")
    twin = fleet.agent(world.routers[1:], name="twin", hostname="web-1")
    wait_for(lambda: attached(world, twin_uuid) == ["router-2"], 15, what="the twin attached")
    # the twin's version in status is the registry's (a router's PEERS answer has none)
    wait_for(lambda: any(a["uuid"] == twin_uuid and a["version"]
                         for a in fleet.status(world.op)["agents"]),
             what="the registry to record the twin")

    res = run(world, "web-1", "nosuch")
    assert res.returncode == 2, res.stderr
    assert world.uuid in res.stderr and twin_uuid in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1

    twin.stop()
    wait_for(lambda: not attached(world, twin_uuid), 15, what="the twin to be gone")
    res = run(world, "web-1", "nosuch", "--wait", "--json", "--force")
    assert res.returncode == 3 and json.loads(res.stdout)["uuid"] == world.uuid, res.stderr
    started = time.monotonic()
    res = run(world, twin_uuid, "nosuch", "--wait", "--force", timeout=QUICK)
    assert res.returncode == 3, res.stderr
    assert f"web-1 ({twin_uuid}) is offline" in res.stderr
    print(f"offline answer in {time.monotonic() - started:.2f}s")


# ---------------------------------------------------------------- bad arguments

@pytest.mark.parametrize("args, says", [
    (["web-1", "nosuch", "--timeout", "0"], "--timeout"),
    (["web-1", "no such"], "not a plugin name"),
    (["web/1", "nosuch"], "neither a known hostname nor a valid uuid"),
    (["", "nosuch"], "empty"),
])
def test_bad_arguments_exit_2_with_one_line(world, args, says):
    res = run(world, *args, timeout=QUICK)
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("\n") == 1 and says in res.stderr, res.stderr


def test_missing_arguments_are_a_usage_error(world):
    res = run(world, "web-1", timeout=QUICK)
    assert res.returncode == 2 and "PLUGIN" in res.stderr


# ---------------------------------------------------------------- declared plugins

def test_a_declared_plugin_runs_and_its_status_is_the_exit_status(world):
    res = run(world, "web-1", "boom", "--wait")
    assert res.returncode == 2, res.stderr
    assert res.stdout.strip() == "CRITICAL: boom"
    res = run(world, "web-1", "fine", "--wait", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["state"] == "OK" and out["output"] == "OK: all good"


def test_status_shows_the_declared_checks(world):
    assert run(world, "web-1", "boom", "--wait").returncode == 2

    def checks():
        res = world.fleet.command("status", "--json", "--config", world.op)
        found = {c["plugin"]: c for c in json.loads(res.stdout)["checks"]
                 if c["uuid"] == world.uuid}
        return found if found.get("boom", {}).get("state") == "CRITICAL" else None
    found = wait_for(checks, 15, interval=0.2, what="status to show the boom check")
    assert found["boom"]["output"] == "CRITICAL: boom" and found["boom"]["ago"].endswith("ago")
    assert found["boom"]["command_id"].startswith("cli:") and found["boom"]["router"] == "router-1"
    assert "nosuch" not in found            # run, but not declared: not a check
    text = world.fleet.cli("status", "--config", world.op).stdout
    assert "CRITICAL" in text and "boom" in text


# ---------------------------------------------------------------- with CURVE

def test_run_wait_over_curve(fleet):
    """Control DEALERs and the tail SUB present the operator's back-end key."""
    from support.keys import Keys
    keys = Keys(fleet.root)
    uuid = agent_uuid_for(fleet)
    operator = keys.backend("operator")
    r1 = fleet.router(security=keys.router_security())
    fleet.agent([r1], hostname="curvy", security=keys.client(keys.agent(uuid)),
                plugins={"checks": CHECKS})
    op = fleet.write("fleetwatch.yaml", {
        "routers": [r1["endpoints"]["control"]], "state_url": fleet.state_url,
        "timeout": 1.0, "security": keys.client(operator)})
    world = World(fleet, [r1], None, uuid, str(op))

    def answered():
        res = run(world, "curvy", "boom", "--wait", "--timeout", "10")
        return res if "no router has it attached" not in res.stderr else None
    res = wait_for(answered, 30, interval=0.2, what="the CURVE agent to answer")
    # No registry sink in this fleet: the plugin is sent unchecked, and the CLI says so.
    assert "not checked" in res.stderr and "registry" in res.stderr
    assert res.returncode == 2 and res.stdout.strip() == "CRITICAL: boom", res.stderr
    plain = fleet.write("plain.yaml", {"routers": [r1["endpoints"]["control"]],
                                       "state_url": fleet.state_url, "timeout": 0.5})
    res = subprocess.run([sys.executable, "-m", "fleetwatch", "run", uuid, "boom",
                          "--config", str(plain)], capture_output=True, text=True, timeout=QUICK)
    assert res.returncode == 3 and "no router answered" in res.stderr


def test_messages_show_a_hostname_s_control_characters_escaped():
    """A hostname is the agent's claim (its HELLO): run's messages never print it raw."""
    from fleetwatch.actions.checks import who as _who
    assert _who("web\x1b]0;owned\x07-1", "u1") == "web\\x1b]0;owned\\x07-1 (u1)"
    assert _who(None, "u1") == "u1"
