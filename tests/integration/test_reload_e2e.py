"""SIGHUP (``systemctl reload``) on real processes: agent, scheduler and alerting sink re-read
their config, apply what is safe, log what needs a restart, and shrug off a broken file."""

from __future__ import annotations

import json
import signal
import time

import pytest

from support.fleet import refused_twice, wait_for
from support.tail import Tail
from fleetwatch import protocol

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(90)

DEBIAN = "/usr/lib/nagios/plugins"


def check(name: str, interval: float = 3600, text: str = "fine") -> dict:
    return {"name": name, "command": "check_dummy", "args": ["0", text], "interval": interval,
            "timeout": 5}


def declared(fleet, router, source: str = "agent") -> set[str]:
    """The checks ``fleetwatch status --json`` lists as declared by ``source``."""
    res = fleet.cli("status", "--config", str(fleet.operator_config([router])), "--json")
    return {c["plugin"] for c in json.loads(res.stdout)["checks"] if source in c["sources"]}


def uuid_of(fleet, name: str = "agent") -> str:
    path = fleet.root / f"{name}-state" / "uuid"
    return wait_for(lambda: path.exists() and path.read_text().strip(), 15, what="the uuid")


def reconfigure(fleet, proc, routers, **settings) -> None:
    """Write the agent's config anew with ``settings`` and send it SIGHUP."""
    fleet.agent_config(routers, **settings)
    proc.signal(signal.SIGHUP)


def test_agent_sighup_declares_a_new_check_and_warns_what_needs_a_restart(fleet, zctx):
    r = fleet.router()
    fleet.sink("registry", [r])
    plugins = {"dirs": [DEBIAN], "checks": [check("first")]}
    agent = fleet.agent([r], plugins=plugins)
    uuid = uuid_of(fleet)
    wait_for(lambda: declared(fleet, r) == {"first"}, 20, what="the first REGISTER")
    tail = Tail(zctx, [r["endpoints"]["tail"]],
                [protocol.topic("REGISTER", uuid), protocol.topic("HEARTBEAT", uuid)])
    tail.next(lambda m: m.type == "HEARTBEAT", what="the tail subscribed (a HEARTBEAT)")

    reconfigure(fleet, agent, [r], heartbeat_interval=0.5, log_level="DEBUG",
                plugins={**plugins, "checks": [check("first"), check("second", 30)]})
    wait_for(lambda: declared(fleet, r) == {"first", "second"}, 20,
             what="the new check in the registry")
    second = [c for c in fleet.status(fleet.operator_config([r]))["checks"]
              if c["plugin"] == "second"]
    assert [(c["interval"], c["timeout"]) for c in second] == [(30, 5)]
    register = tail.next(lambda m: m.type == "REGISTER" and "second" in json.dumps(m.body),
                         what="the new REGISTER on the tail")
    assert [p["name"] for p in register.get("plugins")] == ["first", "second"]
    assert "check_dummy" not in json.dumps(register.body)         # wire form only
    tail.close()
    # what a reload applied, and what waits for a restart, only the agent's log says
    log = agent.log()
    assert "applied plugins.checks, log_level" in log
    assert "heartbeat_interval changed: takes effect at restart" in log

    # a check removed: gone from the registry too; at level WARNING the INFO line that
    # reports this reload is not written any more
    reconfigure(fleet, agent, [r], log_level="WARNING",
                plugins={**plugins, "checks": [check("second", 30)]})
    wait_for(lambda: declared(fleet, r) == {"second"}, 20, what="the removal in the registry")
    assert agent.log().count("config reloaded from") == 1
    assert agent.log().count("heartbeat_interval changed") == 1     # back to the old value
    assert agent.alive()


def test_agent_survives_a_broken_config_on_sighup_and_keeps_working(fleet, zctx):
    r = fleet.router()
    fleet.sink("registry", [r])
    agent = fleet.agent([r], plugins={"dirs": [DEBIAN], "checks": [check("first")]})
    uuid = uuid_of(fleet)
    wait_for(lambda: declared(fleet, r) == {"first"}, 20, what="the first REGISTER")
    stats = Tail(zctx, [r["endpoints"]["tail"]], [protocol.topic("STATS", uuid)])
    path = fleet.root / "agent.yaml"
    good = path.read_text()

    refused_twice(agent, path, [
        (good + "plugins: {checks: [{name: 'bad name', command: x}]}\n",
         "key 'plugins' is set twice"),
        (good.replace("check_dummy", "../../bin/sh"),
         "plugins.checks[0].command: '../../bin/sh' leaves the plugin directories")])

    # still alive and working: its STATS keep coming, with the failures counted
    body = stats.next(lambda m: m.get("metrics", {}).get("agent.config.reload_failed") == 2,
                      what="STATS counting two failed reloads")
    assert body.get("metrics")["agent.config.reloads"] == 0
    assert agent.alive()

    # and a good file is taken afterwards
    fleet.agent_config([r], plugins={"dirs": [DEBIAN],
                                     "checks": [check("first"), check("third")]})
    agent.signal(signal.SIGHUP)
    wait_for(lambda: declared(fleet, r) == {"first", "third"}, 20, what="the good reload")


def test_scheduler_sighup_picks_up_a_new_job_at_once(fleet, zctx):
    """refresh_interval is an hour: only SIGHUP makes the scheduler see the new check, and
    its RUNs carry the slot-derived command ids."""
    pytest.importorskip("apscheduler")
    from scheduler import slots
    r = fleet.router()
    fleet.sink("registry", [r])
    plugins = {"dirs": [DEBIAN], "checks": [check("first")]}
    agent = fleet.agent([r], plugins=plugins)
    uuid = uuid_of(fleet)
    wait_for(lambda: declared(fleet, r) == {"first"}, 20, what="the first REGISTER")
    sched = fleet.scheduler([r], refresh_interval=3600, jitter=0.0)
    # the running scheduler's job table is in its log only (``scheduler --list`` reads the
    # registry, not the process)
    wait_for(lambda: "jobs: 1 (1 added" in sched.log(), 20, what="the scheduler's first job")

    results = Tail(zctx, [r["endpoints"]["tail"]], [protocol.topic("RESULT", uuid)])
    reconfigure(fleet, agent, [r], plugins={**plugins, "checks": [
        check("first"), check("tick", 1, "tick tock")]})
    wait_for(lambda: "tick" in declared(fleet, r), 20, what="tick in the registry")
    assert "jobs: 2" not in sched.log()

    fleet.scheduler_config([r], refresh_interval=3600, jitter=0.0, id="renamed",
                           stats_interval=5.0)
    sched.signal(signal.SIGHUP)
    msg = results.next(lambda m: m.get("plugin") == "tick", what="a RESULT of the new job")
    assert msg.get("output") == "OK: tick tock"
    assert msg.get("command_id") == slots.command_id(uuid, "tick", msg.get("slot"))
    log = sched.log()
    assert "jobs: 2 (1 added" in log and "applied stats_interval" in log
    assert "id changed: takes effect at restart" in log
    # the next slot of the job comes too, one interval later
    nxt = results.next(lambda m: m.get("plugin") == "tick" and m.get("slot") > msg.get("slot"),
                       what="the next slot")
    gap = nxt.get("slot") - msg.get("slot")
    assert gap == pytest.approx(round(gap), abs=1e-3), "slots on the job's 1 s grid"
    assert sched.alive()


def test_alerting_sink_sighup_takes_new_thresholds_and_channels(fleet):
    """No channel and three attempts at start; after SIGHUP one attempt is HARD and the
    alert goes to a webhook channel that did not exist before."""
    from support.fakerouter import BackendFacingRouter, relayed
    from support.channelservers import HttpReceiver
    router = BackendFacingRouter("fake-1")
    receiver = HttpReceiver().start()
    uuid = "3f2c" + "0" * 28
    try:
        base = {"routers": [router.control_endpoint], "state_url": fleet.state_url,
                "name": "sink-alerting", "hello_interval": 0.2}
        cfg = fleet.write("sink-alerting.yaml", base)
        sink = fleet.start("sink-alerting", "sink", "alerting", "--config", str(cfg))
        fleet.sink("registry", [router.info])          # so that status lists the checks
        op = fleet.operator_config([router.info])
        wait_for(lambda: router.pullers("alerting") >= 1 and router.pullers("registry") >= 1,
                 15, what="the sinks' PULLs")
        router.push("registry", relayed("REGISTER", uuid, name="agent", hostname="web-1",
                                        plugins=[{"name": "before"}, {"name": "after"}])[1])

        def result(plugin: str):
            router.push("alerting", relayed(
                "RESULT", uuid, command_id=f"cli:{plugin}{time.monotonic_ns()}",
                plugin=plugin, status=2, output=f"{plugin} CRITICAL", long_output="",
                perfdata=[])[1])

        def state(plugin: str):
            """(state type, attempt) of the check in ``fleetwatch status --json``."""
            found = [(c["state_type"], c["attempt"]) for c in fleet.status(op)["checks"]
                     if c["plugin"] == plugin and c["state_type"]]
            return found[0] if found else None

        result("before")
        assert wait_for(lambda: state("before"), 15, what="a soft state") == ("SOFT", 1)

        fleet.write("sink-alerting.yaml", {
            **base, "routers": [router.control_endpoint, "tcp://127.0.0.1:9"],
            "graphite": {"port": 2004},
            "alerting": {"max_check_attempts": 1, "tick_interval": 5, "delivery": {
                "channels": {"hook": {"type": "webhook", "url": receiver.url, "timeout": 2}},
                "rules": [{"channels": ["hook"]}]}}})
        sink.signal(signal.SIGHUP)
        # the reload's report is in the sink's log only (and "after" must wait for it)
        wait_for(lambda: "config reloaded from" in sink.log(), 10, what="the reload")
        log = sink.log()
        assert "routers changed: takes effect at restart" in log
        assert "alerting.tick_interval changed: takes effect at restart" in log
        assert "graphite" not in log.split("config reloaded from")[-1]     # not its section

        result("after")
        assert wait_for(lambda: state("after"), 15, what="a hard state") == ("HARD", 1)
        post = wait_for(lambda: receiver.posts, 15, what="the alert at the new webhook")[0]
        assert "after CRITICAL" in str(post)
        assert sink.alive()
    finally:
        receiver.stop()
        router.close()
