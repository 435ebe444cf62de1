"""RUN -> RESULT through the agent as a real process: against the fake routers of the
``routers`` fixture (tests/support/agentrouter.py), and end to end through a real router's control socket and tail.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import zmq

from fleetwatch import protocol
from support.agentrouter import agent_uuid, start_agent
from support.fleet import intake_path, wait_for

DEBIAN = "/usr/lib/nagios/plugins"


def plugin_dir(fleet) -> Path:
    d = fleet.root / "plugins"
    d.mkdir(exist_ok=True)
    for name, body in {
        "check_fast": "echo 'FAST OK | n=1;5;10;0'\n",
        "check_slow": "sleep 1.5\necho 'SLOW OK'\n",
        "check_count": f"echo run >> {fleet.root / 'runs'}\nsleep 0.3\necho 'COUNT OK'\nexit 1\n",
    }.items():
        (d / name).write_text("#!/bin/sh\n" + body)
        (d / name).chmod(0o755)
    return d


def plugins_section(fleet, **extra) -> dict:
    return {"dirs": [str(plugin_dir(fleet)), DEBIAN], "checks": [
        {"name": "fast", "command": "check_fast", "interval": 30, "timeout": 5},
        {"name": "slow", "command": "check_slow", "timeout": 5},
        {"name": "count", "command": "check_count", "timeout": 5},
        {"name": "dummy", "command": "check_dummy", "args": ["2", "from debian"]},
    ], **extra}


def run(r, rid, command_id, plugin, **extra) -> None:
    r.send(rid, protocol.make("RUN", "sched", command_id=command_id, plugin=plugin, **extra))


def results(r, command_id) -> list[protocol.Message]:
    return [m for m in r.of_type("RESULT") if m.get("command_id") == command_id]


def run_for_result(r, command_id, plugin, what: str) -> protocol.Message:
    """RUN ``plugin`` on the agent's latest connection and wait for its RESULT. The fake router
    answers heartbeats only while the test waits on it: a test that runs the CLI for a second
    on a loaded machine may see the agent reconnect, and a RUN to its old routing id is dropped
    by the ROUTER socket (as a real router's is; the scheduler would send it again). So it is
    sent again to the new connection, as often as the agent's connection changes."""
    sent_to = r.agent_rid
    run(r, sent_to, command_id, plugin)

    def answered():
        nonlocal sent_to
        if r.agent_rid != sent_to:
            sent_to = r.agent_rid
            run(r, sent_to, command_id, plugin)
        return results(r, command_id)
    return r.until(answered, what=what)[0]


def test_run_result_over_the_agents_socket(fleet, routers):
    r1 = routers()
    r1.auto_ack = True
    proc, _ = start_agent(fleet, [r1], plugins=plugins_section(fleet))
    rid = r1.until(lambda: r1.of_type("HEARTBEAT") and r1.agent_rid, what="agent up")
    hello = r1.of_type("HELLO")[0]
    declared = [{"name": "fast", "interval": 30.0, "timeout": 5.0},
                {"name": "slow", "interval": 60.0, "timeout": 5.0},
                {"name": "count", "interval": 60.0, "timeout": 5.0},
                {"name": "dummy", "interval": 60.0, "timeout": 10.0}]
    assert hello.get("plugins") == declared
    register = r1.until(lambda: r1.of_type("REGISTER"), what="REGISTER")[0]
    assert register.get("name") == "agent" and register.get("plugins") == declared

    # a slow plugin does not hold the loop: the fast one answers first, heartbeats go on
    run(r1, rid, "c-slow", "slow", slot=1700000000)
    run(r1, rid, "c-fast", "fast")
    fast = r1.until(lambda: results(r1, "c-fast"), what="fast RESULT")[0]
    assert not results(r1, "c-slow")
    beats = len(r1.of_type("HEARTBEAT"))
    slow = r1.until(lambda: results(r1, "c-slow"), what="slow RESULT")[0]
    assert len(r1.of_type("HEARTBEAT")) > beats
    assert fast.get("status") == 0 and fast.get("output") == "FAST OK"
    assert fast.get("perfdata") == [{"label": "n", "value": 1.0, "uom": "", "warn": "5",
                                     "crit": "10", "min": 0.0, "max": None}]
    assert slow.get("slot") == 1700000000 and slow.get("duration") >= 1.5
    assert slow.uuid == agent_uuid(fleet)

    # duplicates: the plugin runs once, every RUN gets the first RESULT
    for _ in range(3):
        run(r1, rid, "c-count", "count")
    got = r1.until(lambda: len(results(r1, "c-count")) == 3 and results(r1, "c-count"),
                   what="three answers")
    assert {m.msg_id for m in got} == {got[0].msg_id} and got[0].get("status") == 1
    assert (fleet.root / "runs").read_text() == "run\n"

    run(r1, rid, "c-undeclared", "check_disk")
    run(r1, rid, "c-debian", "dummy")
    bad = r1.until(lambda: results(r1, "c-undeclared"), what="undeclared RESULT")[0]
    assert bad.get("status") == 3 and "not declared" in bad.get("output")
    deb = r1.until(lambda: results(r1, "c-debian"), what="debian RESULT")[0]
    assert deb.get("status") == 2 and deb.get("output") == "CRITICAL: from debian"

    metrics = r1.until(lambda: [s.get("metrics") for s in r1.of_type("STATS")
                                if s.get("metrics", {}).get("agent.runs.critical") == 1],
                       what="run counters in STATS")[-1]
    assert metrics["agent.runs.started"] == 4 and metrics["agent.runs.undeclared"] == 1
    assert metrics["agent.runs.duplicates"] == 2 and metrics["agent.runs.running"] == 0
    assert metrics["agent.runs.ok"] == 2 and metrics["agent.runs.warning"] == 1
    assert metrics["agent.runs.critical"] == 1 and metrics["agent.runs.unknown"] == 1
    assert metrics["agent.plugins.declared"] == 4
    assert proc.alive()


def test_timeout_result_and_clean_stop_while_running(fleet, routers):
    r1 = routers()
    section = plugins_section(fleet)
    section["checks"][1]["timeout"] = 0.5
    section["grace"] = 0.2
    proc, _ = start_agent(fleet, [r1], plugins=section)
    rid = r1.until(lambda: r1.of_type("HEARTBEAT") and r1.agent_rid, what="agent up")
    run(r1, rid, "t-1", "slow")
    msg = r1.until(lambda: results(r1, "t-1"), what="timeout RESULT")[0]
    assert msg.get("status") == 3 and "timed out after 0.5s" in msg.get("output")
    run(r1, rid, "t-2", "slow", timeout=30)            # the declared timeout still holds
    assert "timed out" in r1.until(lambda: results(r1, "t-2"), what="t-2")[0].get("output")
    run(r1, rid, "t-3", "slow")                          # running when the agent stops
    r1.watch(0.2)
    assert proc.stop(timeout=5) == 0


def test_local_process_declares_a_plugin_that_survives_a_restart(fleet, routers):
    r1 = routers()
    r1.auto_ack = True
    proc, path = start_agent(fleet, [r1], plugins=plugins_section(fleet),
                             local={"plugins": ["check_dummy", "check_fast"]})
    r1.until(lambda: intake_path(fleet).exists() and r1.of_type("HEARTBEAT"), what="agent up")
    res = fleet.cli("send", "register", "backup", "--config", str(path), "--interval", "300",
                    "--plugin-timeout", "7",
                    "--plugin", "backup_dummy=check_dummy 1 'backup is old'",
                    "--plugin", "backup_fast=check_fast")
    msg_id = res.stdout.strip()
    reg = r1.until(lambda: r1.copies(msg_id), what="the forwarded REGISTER")[0]
    assert reg.get("name") == "backup"
    assert reg.get("plugins") == [{"name": "backup_dummy", "interval": 300.0, "timeout": 7.0},
                                  {"name": "backup_fast", "interval": 300.0, "timeout": 7.0}]
    got = run_for_result(r1, "l-1", "backup_dummy", "local plugin RESULT")
    assert got.get("status") == 1 and got.get("output") == "WARNING: backup is old"

    # a local process cannot take the config's names, nor run things outside the dirs
    for spec in ("fast=check_fast", "x=../plugins/check_fast"):
        res = fleet.cli("send", "register", "other", "--config", str(path), "--plugin", spec,
                        check=False)
        assert res.returncode in (2, 65), res.stderr
    res = fleet.cli("send", "register", "other", "--config", str(path), "--plugin",
                    "fast=check_fast", check=False)
    assert res.returncode == 65 and "declared in the agent's config" in res.stderr

    first = r1.of_type("HELLO")[0].get("instance")
    assert proc.stop() == 0
    proc = fleet.start("agent-2", "agent", "--config", str(path))
    # the new process's connection (a HELLO of the old one may still be in the queue)
    r1.until(lambda: any(m.type == "HELLO" and m.get("instance") != first
                         for _, m in r1.received), what="the restarted agent's HELLO")
    assert run_for_result(r1, "l-2", "backup_dummy", "RESULT after restart").get("status") == 1

    # withdrawing: the plugin is no longer declared
    fleet.cli("send", "register", "backup", "--config", str(path), "--no-plugins")
    assert "not declared" in run_for_result(r1, "l-3", "backup_dummy", "l-3").get("output")
    assert proc.alive()


def test_client_register_with_plugins(fleet, routers):
    from agent.client import AgentError, Client, plugin

    r1 = routers()
    r1.auto_ack = True
    _, path = start_agent(fleet, [r1], plugins=plugins_section(fleet),
                          local={"names": ["web-*"], "plugins": ["check_fast"]})
    r1.until(lambda: intake_path(fleet).exists() and r1.of_type("HEARTBEAT"), what="agent up")
    with Client(config_path=str(path), timeout=5) as fw:
        fw.register("web-1", plugins=[plugin("web_fast", "check_fast", interval=15)])
        with pytest.raises(AgentError) as e:
            fw.register("db", plugins=[plugin("db_fast", "check_fast")])
        assert e.value.status == 403
        with pytest.raises(ValueError):
            plugin("bad name", "check_fast")
    run(r1, r1.agent_rid, "w-1", "web_fast")
    assert r1.until(lambda: results(r1, "w-1"), what="w-1")[0].get("status") == 0


# ---------------------------------------------------------------- real router

def test_run_through_a_real_router_control_socket_and_tail(fleet, zctx):
    r = fleet.router()
    fleet.agent([r], plugins=plugins_section(fleet))
    uuid = wait_for(lambda: (fleet.root / "agent-state" / "uuid").exists() and
                    (fleet.root / "agent-state" / "uuid").read_text().strip(), 15, what="uuid")
    tail = zctx.socket(zmq.SUB)
    tail.linger = 0
    tail.subscribe(protocol.topic("RESULT", uuid))
    tail.connect(r["endpoints"]["tail"])
    control = zctx.socket(zmq.DEALER)
    control.linger = 0
    control.connect(r["endpoints"]["control"])

    def ask(command_id, plugin):
        control.send_multipart(protocol.encode_control(protocol.make(
            "RUN", "cli-test", command_id=command_id, plugin=plugin, slot=1.7e9), uuid))

    def until_result(command_id, resend):
        """RUN until a RESULT shows on the tail (the agent may not be attached yet, and the
        tail subscription takes a moment); each resend is a duplicate to the agent."""
        def got():
            resend()
            if tail.poll(200):
                relayed = protocol.decode_tail(tail.recv_multipart())
                if relayed.message.get("command_id") == command_id:
                    return relayed
            return None
        return wait_for(got, 20, interval=0, what=f"RESULT {command_id} on the tail")

    relayed = until_result("cli:0001", lambda: ask("cli:0001", "dummy"))
    assert relayed.uuid == uuid and relayed.router == r["id"]
    body = relayed.message.body
    assert body["status"] == 2 and body["output"] == "CRITICAL: from debian"
    assert body["slot"] == 1.7e9
    relayed = until_result("cli:0002", lambda: ask("cli:0002", "nothing"))
    assert "not declared" in relayed.message.get("output")
