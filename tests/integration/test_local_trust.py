"""What a local process (a member of the intake group) cannot make the agent do.

Real processes on 127.0.0.1: a router, the agent, the ``fleetwatch`` CLI, Debian's plugins
from /usr/lib/nagios/plugins (``negate`` runs its arguments as a command), and for the
hostname a real carbon-cache behind the graphite sink.

- A local process cannot make the agent run anything its config did not allow: plugins it
  declares may only name the commands of ``local.plugins``, never an exec-wrapper, and the
  agent checks again at every RUN (a plugins.json written before still runs nothing).
- A local process cannot write another host's metrics: the intake gives every local message
  the agent's hostname, and the graphite sink names a STATS after the hostname of the
  stamped uuid's HELLO, not the body's.
- A local process cannot flood the sinks with names: local processes have
  ``local.max_metric_names`` distinct names, the rest refused (ERROR 429) and counted.
"""

from __future__ import annotations

import json
import os

import pytest

from support.clock import Clock
from support.fleet import agent_uuid_for, intake_path, wait_for, wait_intake
from support.zmqio import recv

pytestmark = pytest.mark.timeout(120)

DEBIAN = "/usr/lib/nagios/plugins"
NEGATE = f"{DEBIAN}/negate"


def one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def agent_up(fleet, router, **extra):
    """An agent of ``router`` (plugins from Debian's directory); (uuid, config path)."""
    uuid = agent_uuid_for(fleet)
    path = fleet.agent_config([router], plugins={"dirs": [DEBIAN]}, **extra)
    fleet.start("agent", "agent", "--config", str(path))
    wait_intake(intake_path(fleet))
    return uuid, path


def run_wait(fleet, op, uuid: str, plugin: str):
    return fleet.cli("run", uuid, plugin, "--wait", "--json", "--timeout", "10",
                     "--config", str(op), check=False, timeout=60)


def answered(fleet, op, uuid: str, plugin: str) -> dict:
    """``fleetwatch run --wait --json`` until the agent (attached by then) answers."""
    def once():
        res = run_wait(fleet, op, uuid, plugin)
        return json.loads(res.stdout) if res.returncode in (0, 1, 2, 3) else None
    return wait_for(once, 60, 0, what=f"an answer to RUN {plugin}")


# ---------------------------------------------------------------- item 4: what runs

@pytest.mark.skipif(not os.access(NEGATE, os.X_OK),
                    reason="Debian's monitoring-plugins-basic (make install) is not installed")
def test_a_local_process_cannot_make_the_agent_run_a_command(fleet, tmp_path):
    marker = tmp_path / "p"
    router = fleet.router()
    uuid, path = agent_up(fleet, router)
    op = fleet.operator_config([router])
    res = fleet.cli("send", "register", "x", "--config", str(path), "--plugin",
                    f'x=negate /bin/sh -c "id > {marker}"', check=False)
    assert res.returncode == 65
    assert one_line(res) == ("fleetwatch send: agent refused the message: 403 plugins[0]."
                             "command: 'negate' runs its arguments as a command: never "
                             "from a local process")
    out = answered(fleet, op, uuid, "x")
    assert out["status"] == 3 and "not declared" in out["output"]
    assert not marker.exists()
    # the sender reads the refusal (above); the agent's operator, only in the agent's log
    assert "intake: refused a REGISTER from x: plugins[0].command: 'negate' runs its " \
           "arguments" in (fleet.root / "agent.log").read_text()


def test_a_reload_drops_local_plugins_the_config_no_longer_allows(tmp_path):
    from agent.declared import Declared
    from fleetwatch import protocol

    path = str(tmp_path / "plugins.json")
    declared = Declared([], path, local_commands=["check_dummy", "check_file_age"])
    reg = protocol.make("REGISTER", "local", name="backup", plugins=[
        {"name": "old", "command": "check_dummy", "args": ["1"]},
        {"name": "age", "command": "check_file_age", "args": ["-f", "/x"]}])
    declared.apply("backup", declared.prepare(reg)[0])
    declared.replace_local_commands(["check_file_age"])
    assert declared.get("old") is None and declared.get("age").owner == "backup"
    again = Declared([], path, local_commands=[])                   # restarted, none allowed
    assert again.get("age") is None and len(again) == 0


def test_local_plugins_must_be_listed_in_the_config(fleet, tmp_path):
    router = fleet.router()
    uuid, path = agent_up(fleet, router, local={"plugins": ["check_dummy"]})
    op = fleet.operator_config([router])
    fleet.cli("send", "register", "backup", "--config", str(path),
              "--plugin", "backup_old=check_dummy 1 'backup is old'")
    res = fleet.cli("send", "register", "backup", "--config", str(path),
                    "--plugin", "backup_age=check_file_age -f /etc/hostname", check=False)
    assert res.returncode == 65
    assert one_line(res) == ("fleetwatch send: agent refused the message: 403 plugins[0]."
                             "command: 'check_file_age' is not one of local.plugins in the "
                             "agent's config")
    out = answered(fleet, op, uuid, "backup_old")
    assert (out["status"], out["output"]) == (1, "WARNING: backup is old")


def test_the_agent_refuses_at_run_what_its_config_does_not_allow(fleet, tmp_path):
    """A plugins.json from before (or from an older config) declares negate: the agent
    refuses it when it loads the file, and again at RUN should it be declared anyway."""
    marker = tmp_path / "p"
    state = fleet.root / "agent-state"
    state.mkdir()
    (state / "plugins.json").write_text(json.dumps({"version": 1, "processes": {"x": [
        {"name": "x", "command": "negate", "args": ["/bin/sh", "-c", f"id > {marker}"],
         "interval": 60, "timeout": 10},
        {"name": "y", "command": "check_dummy", "args": ["0", "fine"], "interval": 60,
         "timeout": 10}]}}))
    router = fleet.router()
    uuid, _ = agent_up(fleet, router, local={"plugins": ["check_dummy"]})
    op = fleet.operator_config([router])
    out = answered(fleet, op, uuid, "x")
    assert out["status"] == 3 and "not declared" in out["output"]
    assert answered(fleet, op, uuid, "y")["status"] == 0
    assert not marker.exists()


def test_runner_refuses_a_local_plugin_the_config_does_not_allow(tmp_path):
    """The last line of defence, without the intake: a local plugin in the declared set whose
    command (or its real path, through a symlink) the config does not allow never runs."""
    from agent.declared import Declared, Plugin
    from agent.plugins_config import PluginsConfig
    from agent.runner import Runner
    from fleetwatch import protocol

    (tmp_path / "check_ok").symlink_to(NEGATE)
    started = []
    declared = Declared([], local_commands=["check_ok"])
    declared.local["p"] = {
        "a": Plugin("a", "negate", ("/bin/true",), owner="p"),
        "b": Plugin("b", "check_ok", ("/bin/true",), owner="p"),
        "c": Plugin("c", "check_dummy", ("0",), owner="p")}
    runner = Runner("u", declared, PluginsConfig(dirs=[str(tmp_path), DEBIAN]),
                    launcher=lambda launch, stop: started.append(launch))
    for name in "abc":
        [(_, msg)] = runner.submit(protocol.make("RUN", "s", command_id=f"c-{name}",
                                                 plugin=name), "r")
        assert msg.get("status") == 3
        assert "local process" in msg.get("output") or "local.plugins" in msg.get("output")
    assert runner.take() == [] and started == []
    assert runner.counters["agent.runs.refused"] == 3


def test_config_cannot_allow_an_exec_wrapper(fleet):
    path = fleet.agent_config([{"endpoints": {"agents": "tcp://127.0.0.1:9"}}],
                              local={"plugins": ["check_dummy", "negate"]})
    res = fleet.cli("agent", "--config", str(path), check=False, timeout=20)
    assert res.returncode == 78
    assert one_line(res) == (f"fleetwatch agent: {path}: local.plugins: 'negate' runs its "
                             f"arguments as a command: never from a local process")


# ---------------------------------------------------------------- item 5: whose metrics

def test_the_intake_gives_every_local_message_the_agents_hostname():
    from agent.intake import Intake
    from fleetwatch import protocol

    intake = Intake("agent-uuid", "web-1")
    for type_, fields in (("STATS", {"metrics": {"x": 1}}), ("NOTIFY", {"severity": "error",
                                                                       "text": "t"}),
                          ("REGISTER", {"name": "backup"}), ("HEARTBEAT", {"name": "cron"})):
        for claimed in ({"hostname": "otherhost"}, {}):
            msg, err = intake.accept(protocol.encode(protocol.make(type_, "local", **fields,
                                                                   **claimed)))
            assert err is None
            assert (msg.uuid, msg.get("hostname")) == ("agent-uuid", "web-1"), (type_, claimed)


def test_the_intake_refuses_a_back_end_s_role_as_a_source():
    """Issue 31 item 6: a local process is never a router, a sink or a scheduler."""
    from agent.intake import Intake
    from fleetwatch import protocol

    intake = Intake("agent-uuid", "web-1")
    for source in ("router", "sink", "scheduler"):
        msg, err = intake.accept(protocol.encode(protocol.make(
            "STATS", "local", metrics={"x": 1}, source=source)))
        assert msg is None and err.get("status") == protocol.FORBIDDEN
        assert err.get("reason").startswith(f"source {source!r} is a back-end's")
    assert intake.refused == 3
    msg, err = intake.accept(protocol.encode(protocol.make("STATS", "local", metrics={"x": 1},
                                                           source="backup")))
    assert err is None and msg.get("source") == "backup"


def test_graphite_names_a_stats_after_its_agents_hello():
    """Logic: the HELLO's hostname names the uuid's paths; a STATS claiming another is filed
    under it and counted; before any HELLO, the first STATS's hostname holds."""
    from sinks.graphite.sink import HostNames

    names = HostNames(size=2)
    names.hello("u1", "web1")
    assert names.claim("u1", "otherhost") == ("web1", True)
    assert names.claim("u1", "web1") == ("web1", False)
    assert names.claim("u2", "db1") == ("db1", False)          # no HELLO seen: first STATS
    assert names.claim("u2", "otherhost") == ("db1", True)
    names.hello("u2", "db2")                                    # the agent was renamed
    assert names.claim("u2", "db2") == ("db2", False)
    assert names.claim("u3", None) == (None, False)


def intake_send(fleet, zctx, msg):
    """A local process of any language: a raw DEALER on the intake sending ``msg``; the
    agent's answer."""
    import zmq

    from fleetwatch import protocol
    sock = zctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(f"ipc://{fleet.root / 'agent-state' / 'intake.sock'}")
    sock.send_multipart(protocol.encode(msg))
    reply = protocol.decode(recv(sock, 10.0))
    sock.close()
    return reply


def intake_stats(fleet, zctx, metrics: dict, hostname: str):
    """A STATS that claims ``hostname`` from a local process; returns once the agent ACKed
    it."""
    from fleetwatch import protocol
    reply = intake_send(fleet, zctx, protocol.make("STATS", "local", metrics=metrics,
                                                   hostname=hostname))
    assert reply.type == "ACK", reply.body


def test_a_local_stats_lands_under_the_agents_own_name(carbon, fleet, zctx):
    from support.graphite import PREFIX, graphite_sink
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port)
    agent_up(fleet, router)
    wait_for(lambda: carbon.path_of(f"{PREFIX}.agent-host.agent.uptime").exists(), 30,
             what="the agent's own STATS in carbon")

    def landed():
        intake_stats(fleet, zctx, {"spoof.x": 1.0}, "otherhost")
        return carbon.path_of(f"{PREFIX}.agent-host.spoof.x").exists()
    wait_for(landed, 30, 0.2, what="the local STATS under the agent's name")
    assert not (carbon.whisper_dir / PREFIX / "otherhost").exists()


def test_a_direct_agent_cannot_file_stats_under_another_hostname(carbon, fleet, zctx):
    from support.graphite import PREFIX, DealerAgent, graphite_sink, warm_up
    router = fleet.router()
    graphite_sink(fleet, [router], carbon.port)
    warm_up(carbon, DealerAgent(zctx, router, "warm"))          # the sink is connected
    liar = DealerAgent(zctx, router, "web1")                    # its HELLO says web1

    def landed():
        liar.send("STATS", hostname="otherhost", metrics={"spoof.x": 1.0})
        return carbon.path_of(f"{PREFIX}.web1.spoof.x").exists()
    wait_for(landed, 30, 0.2, what="the STATS under the HELLO's hostname")
    assert not (carbon.whisper_dir / PREFIX / "otherhost").exists()
    mismatches = carbon.path_of(f"{PREFIX}.fleetwatch.sink-graphite.graphite.hostname_mismatch")
    wait_for(lambda: mismatches.exists(), 30, what="hostname_mismatch counted")


def test_registry_and_alerts_name_the_host_after_its_hello(tmp_path):
    """A body's hostname claim (a local process's REGISTER, a NOTIFY of a direct agent)
    neither renames the agent in the registry nor names the host of its notifications."""
    pytest.importorskip("sqlalchemy")
    from support.fakerouter import relayed
    from fleetwatch import protocol
    from fleetwatch.store import db, reads
    from sinks.alerting.sink import AlertingSink
    from sinks.registry import RegistrySink

    uuid, now = "a" * 32, Clock(1_700_000_000.0)
    eng = db.engine(f"sqlite:///{tmp_path / 'state.db'}")
    alerting, registry = AlertingSink(eng, now), RegistrySink(eng, now)
    alerting.start()
    registry.start()

    def write(sink, type_, **fields):
        _, frames = relayed(type_, uuid, "r1", **fields)
        sink.write([protocol.decode_relayed(frames)])
    write(registry, "HELLO", hostname="web-1", heartbeat=1.0)
    write(registry, "REGISTER", name="backup", hostname="otherhost", plugins=[])
    write(alerting, "NOTIFY", severity="error", text="disk full", hostname="otherhost")
    with eng.connect() as conn:
        assert [a["hostname"] for a in reads.agents(conn)] == ["web-1"]
        assert [a["hostname"] for a in reads.alerts(conn)] == ["web-1"]
        assert [e["hostname"] for e in reads.alert_events(conn)] == ["web-1"]
    alerting.close()
    registry.close()


# ---------------------------------------------------------------- issue 31, item 5: how many

def test_a_local_flood_of_names_is_refused_past_the_cap_and_counted(fleet, zctx):
    """Issue 31: one local process made 200,000 Prometheus series in 1.1 s. Local processes
    have ``local.max_metric_names`` distinct names: the rest of a STATS is refused with
    ERROR 429, counted in the agent's STATS, and never reaches a sink."""
    from fleetwatch import protocol
    from support.prometheus import SINK_TYPES, counter, prometheus_sink, samples, scrape
    pytest.importorskip("prometheus_client")
    router = fleet.router(sink_types=SINK_TYPES)
    _, url = prometheus_sink(fleet, [router])
    agent_up(fleet, router, local={"max_metric_names": 20})

    def reaching() -> bool:
        """The agent's own STATS in a scrape: its router has the sink (a STATS sent before
        would have been dropped there, at most once)."""
        return any(name.startswith("fleetwatch_agent_") and ("host", "agent-host") in labels
                   for name, labels in samples(scrape(url)[1]))
    wait_for(reaching, 30, 0.2, "the agent's STATS in a scrape")
    flood = protocol.make("STATS", "local", metrics={f"flood.m{i}": i for i in range(200)})
    reply = intake_send(fleet, zctx, flood)
    assert (reply.type, reply.get("status"), reply.get("ref")) == ("ERROR", 429, flood.msg_id)
    assert reply.get("reason") == ("180 of 200 metric names refused: local processes have "
                                   "their 20 distinct names (local.max_metric_names); the "
                                   "others were queued")
    refused = wait_for(lambda: counter(url, "fleetwatch_agent_intake_names_refused",
                                       host="agent-host"), 30, 0.2,
                       "the agent's agent.intake.names_refused in a scrape")
    assert refused == 180
    kept = sorted(f"fleetwatch_flood_m{i}" for i in range(20))

    def flooded() -> list[str]:
        return sorted(name for name, labels in samples(scrape(url)[1])
                      if name.startswith("fleetwatch_flood_m")
                      and ("host", "agent-host") in labels)
    # (the local STATS is sent apart from the agent's own STATS, which may come first)
    wait_for(lambda: flooded() == kept, 30, 0.2, lambda: f"the 20 names kept: {flooded()}")
    assert "intake: refused 180 metric names of a local STATS" in \
        (fleet.root / "agent.log").read_text()
