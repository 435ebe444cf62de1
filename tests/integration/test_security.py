"""The client side of CURVE and the agent's local intake limits, with real processes.

Start-up: a client with ``security.curve`` and a key it cannot use stops at once with one
line and exit 78, never falling back to plain text. Intake: the socket file's mode and group,
and what local processes may declare (``local``), refused with ERROR 403 and counted. HELLO
carries a fresh ``instance`` per process start. End to end (needs the router side): a CURVE
fleet delivers a notification exactly once and never admits an agent whose key is not in the
allowlist.
"""

from __future__ import annotations

import grp
import json
import os
import stat

import pytest

from support.agentrouter import start_agent
from support.fleet import agent_uuid_for, intake_path, wait_for, wait_intake
from support.keys import Keys

pytestmark = pytest.mark.timeout(120)


def one_line(res) -> str:
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


def no_router() -> list[dict]:
    """An agents endpoint nobody listens on: start-up checks come before any connection."""
    return [{"endpoints": {"agents": "tcp://127.0.0.1:9", "control": "tcp://127.0.0.1:9"}}]


# ---------------------------------------------------------------- start-up errors

def test_agent_with_curve_and_a_missing_key_exits_78(fleet):
    keys = Keys(fleet.root)
    missing = str(fleet.root / "keys" / "agents" / "nobody.key_secret")
    path = fleet.agent_config(no_router(), security=keys.client(missing))
    res = fleet.cli("agent", "--config", str(path), check=False, timeout=20)
    assert res.returncode == 78
    assert one_line(res) == f"fleetwatch agent: {missing}: no such certificate"
    assert not (fleet.root / "agent-state" / "intake.sock").exists()


def test_agent_given_a_public_file_as_its_key_exits_78(fleet):
    keys = Keys(fleet.root)
    uuid = agent_uuid_for(fleet)
    public = keys.agent(uuid)[:-len("_secret")]
    path = fleet.agent_config(no_router(), security=keys.client(public))
    res = fleet.cli("agent", "--config", str(path), check=False, timeout=20)
    assert res.returncode == 78 and "holds no secret key" in one_line(res)


def test_agent_with_another_agents_key_exits_78(fleet):
    keys = Keys(fleet.root)
    uuid = agent_uuid_for(fleet)
    path = fleet.agent_config(no_router(), security=keys.client(keys.agent("someone-else")))
    res = fleet.cli("agent", "--config", str(path), check=False, timeout=20)
    assert res.returncode == 78
    assert f"bound to uuid someone-else, but this agent is {uuid}" in one_line(res)


def test_agent_with_curve_and_no_key_setting_exits_78(fleet):
    path = fleet.agent_config(no_router(), security={"curve": True})
    res = fleet.cli("agent", "--config", str(path), check=False, timeout=20)
    assert res.returncode == 78
    assert one_line(res).endswith("security.key: required when curve is true")


def test_sink_with_a_missing_or_wrong_key_exits_78(fleet):
    keys = Keys(fleet.root)
    missing = str(fleet.root / "nowhere.key_secret")

    def sink(security: dict):
        path = fleet.write("sink-alerting.yaml", {
            "routers": [r["endpoints"]["control"] for r in no_router()],
            "state_url": fleet.state_url, "security": security})
        return fleet.cli("sink", "alerting", "--config", str(path), check=False, timeout=20)
    res = sink(keys.client(missing))
    assert res.returncode == 78
    assert one_line(res) == f"fleetwatch sink: {missing}: no such certificate"
    assert res.stdout == ""
    # An agent's key on a sink: refused at start, not by the router later.
    res = sink(keys.client(keys.agent("u-1")))
    assert res.returncode == 78
    assert "a agent key, but this process needs a backend key" in one_line(res)


@pytest.mark.parametrize("command", [["status"], ["tail", "--timeout", "1"]])
def test_operator_commands_with_a_missing_key_exit_78(fleet, command):
    keys = Keys(fleet.root)
    missing = str(fleet.root / "operator.key_secret")
    op = fleet.write("fleetwatch.yaml", {"routers": ["tcp://127.0.0.1:9"],
                                         "state_url": fleet.state_url, "timeout": 0.5,
                                         "security": keys.client(missing)})
    res = fleet.cli(*command, "--config", str(op), check=False)
    assert res.returncode == 78
    assert one_line(res) == f"fleetwatch {command[0]}: {missing}: no such certificate"


# ---------------------------------------------------------------- intake

def test_intake_group_makes_the_socket_0660_for_that_group(fleet, routers):
    others = [g for g in grp.getgrall() if g.gr_gid != os.getgid()]
    group = others[0] if os.geteuid() == 0 and others else grp.getgrgid(os.getgid())
    r1 = routers()
    start_agent(fleet, [r1], intake_group=group.gr_name)
    # the socket is made with its mode (umask), then given its group: wait for the group
    r1.until(lambda: intake_path(fleet).exists()
              and os.stat(intake_path(fleet)).st_gid == group.gr_gid,
              what=f"intake socket of group {group.gr_name}")
    assert stat.S_IMODE(os.stat(intake_path(fleet)).st_mode) == 0o660


def test_unknown_intake_group_exits_78(fleet):
    path = fleet.agent_config(no_router(), intake_group="no-such-group-fw")
    res = fleet.cli("agent", "--config", str(path), check=False, timeout=20)
    assert res.returncode == 78
    assert one_line(res) == (f"fleetwatch agent: {path}: intake_group: no such group "
                             f"'no-such-group-fw'")


def test_local_section_is_checked_at_start(fleet):
    path = fleet.agent_config(no_router(), local={"allow": ["NOTIFY", "ACK"]})
    res = fleet.cli("agent", "--config", str(path), check=False, timeout=20)
    assert res.returncode == 78 and "local.allow: unknown type 'ACK'" in one_line(res)


def test_local_limits_refuse_with_403_and_count(fleet, routers):
    from agent.client import AgentError, Client

    r1 = routers()
    r1.auto_ack = True
    proc, path = start_agent(fleet, [r1], local={"allow": ["NOTIFY", "HEARTBEAT"],
                                                 "names": ["backup-*", "cron"]})
    wait_intake(intake_path(fleet))
    refusals = {}
    with Client(config_path=str(path), timeout=5) as fw:
        ok = [fw.notify("backup failed", source="backup-db"),
              fw.notify("no source given"),
              fw.heartbeat("cron", interval=60)]
        for what, call in {
            "source": lambda: fw.notify("spoofed", source="web"),
            "stats": lambda: fw.stats({"x": 1.0}),
            "register": lambda: fw.register("backup-db"),
            "name": lambda: fw.heartbeat("nightly"),
            "reserved": lambda: fw.notify("i am the agent", source="agent"),
        }.items():
            with pytest.raises(AgentError) as info:
                call()
            assert info.value.status == 403
            refusals[what] = info.value.reason
    assert refusals["source"] == "source 'web' is not allowed (local.names)"
    assert refusals["stats"] == "STATS is not allowed from local processes (local.allow)"
    assert refusals["register"] == "REGISTER is not allowed from local processes (local.allow)"
    assert refusals["name"] == "name 'nightly' is not allowed (local.names)"
    assert refusals["reserved"] == "source 'agent' is reserved for the agent itself"
    for msg_id in ok[:2]:
        r1.until(lambda: r1.copies(msg_id), what="an allowed notification relayed")
    r1.until(lambda: [m for m in r1.of_type("STATS")
                      if m.get("metrics", {}).get("agent.intake.refused") == 5],
             what="agent.intake.refused == 5 in the agent's STATS")
    relayed = {m.get("text") for m in r1.of_type("NOTIFY")}
    assert "spoofed" not in relayed and "i am the agent" not in relayed
    assert proc.alive()


def test_hello_carries_a_new_instance_at_each_start(fleet, routers):
    r1 = routers()
    proc, path = start_agent(fleet, [r1])
    first = r1.until(lambda: r1.of_type("HELLO"), what="HELLO")[0]
    assert proc.stop() == 0
    intake_path(fleet).unlink(missing_ok=True)
    r1.received.clear()
    fleet.start("agent-again", "agent", "--config", str(path))
    second = r1.until(lambda: r1.of_type("HELLO"), what="HELLO after the restart")[0]
    a, b = first.get("instance"), second.get("instance")
    assert isinstance(a, str) and len(a) == 16 and int(a, 16) >= 0
    assert isinstance(b, str) and len(b) == 16 and a != b
    assert first.uuid == second.uuid


# ---------------------------------------------------------------- end to end with CURVE

def test_curve_fleet_end_to_end(fleet):
    from agent.client import Client

    keys = Keys(fleet.root)
    uuid = agent_uuid_for(fleet)
    agent_key = keys.agent(uuid)
    rogue_uuid = agent_uuid_for(fleet, "rogue")
    rogue_key = keys.agent(rogue_uuid, sub="not-allowed")   # a key the routers never saw
    backends = {n: keys.backend(n) for n in ("sink-alerting", "sink-registry", "operator")}
    r1 = fleet.router(security=keys.router_security())
    fleet.sink("alerting", [r1], security=keys.client(backends["sink-alerting"]))
    fleet.sink("registry", [r1], security=keys.client(backends["sink-registry"]))
    fleet.agent([r1], security=keys.client(agent_key), heartbeat_interval=0.3)
    rogue = fleet.agent([r1], name="rogue", security=keys.client(rogue_key),
                        heartbeat_interval=0.3)
    op = fleet.write("fleetwatch.yaml", {
        "routers": [r1["endpoints"]["control"]], "state_url": fleet.state_url,
        "timeout": 1.0, "security": keys.client(backends["operator"])})

    def status() -> dict:
        return json.loads(fleet.command("status", "--config", str(op), "--json").stdout)

    def alive() -> set[str]:
        return {a["uuid"] for a in status()["agents"] if a["alive"]}

    wait_for(lambda: uuid in alive(), 30, interval=0.2, what="the CURVE agent alive")
    wait_intake(intake_path(fleet), 10)
    with Client(config_path=str(fleet.root / "agent.yaml"), timeout=10) as fw:
        msg_id = fw.notify("curve disk on fire", severity="critical")

    def alerts() -> list[dict]:
        return [a for a in fleet.alerts(op) if a["msg_id"] == msg_id]
    found = wait_for(alerts, 30, interval=0.2, what="the notification in alerts")
    assert len(found) == 1 and found[0]["uuid"] == uuid

    # Never alive, over many of its heartbeat intervals (an observation window).
    for _ in range(10):
        assert rogue_uuid not in alive()
    assert rogue.alive()
    assert len(alerts()) == 1                   # still once, after the window

    # A plain-text operator gets no answer from a CURVE router.
    plain = fleet.write("plain.yaml", {"routers": [r1["endpoints"]["control"]],
                                       "state_url": fleet.state_url, "timeout": 0.5})
    res = fleet.cli("status", "--config", str(plain), "--json", check=False)
    assert res.returncode == 69                 # no router answered
    routers_seen = json.loads(res.stdout)
    assert routers_seen["routers"][0]["reachable"] is False

    # Nothing secret in any log.
    from fleetwatch.security import read_certificate
    logs = fleet.logs()
    for path in (agent_key, rogue_key, keys.router_secret):
        secret = read_certificate(path, need_secret=True).secret.decode()
        assert secret not in logs


# ---------------------------------------------------------------- operator diagnostics

@pytest.fixture
def curve_server(zctx):
    """A CURVE ROUTER with the routers' key whose ZAP handler admits no client key."""
    from zmq.auth.thread import ThreadAuthenticator
    from fleetwatch.security import read_certificate

    made = []

    def make(keys: Keys, curve: bool = True):
        import zmq
        auth = None
        sock = zctx.socket(zmq.ROUTER)
        sock.linger = 0
        if curve:
            auth = ThreadAuthenticator(zctx)
            auth.start()
            empty = keys.dir / "empty"
            empty.mkdir(exist_ok=True)
            auth.configure_curve(domain="*", location=str(empty))
            cert = read_certificate(keys.router_secret, need_secret=True)
            sock.curve_server = True
            sock.curve_secretkey, sock.curve_publickey = cert.secret, cert.public
        port = sock.bind_to_random_port("tcp://127.0.0.1")
        made.append((sock, auth))
        return f"tcp://127.0.0.1:{port}"

    yield make
    for sock, auth in made:
        sock.close(0)
        if auth is not None:
            auth.stop()


@pytest.mark.parametrize("curve, problem", [
    (True, "CURVE handshake refused by the router (ZAP 400): is this key in its allowlist?"),
    # The plain router may close the connection before the client reads its error.
    (False, "CURVE handshake failed: "),
])
def test_status_says_why_a_curve_handshake_failed(fleet, curve_server, curve, problem):
    keys = Keys(fleet.root)
    endpoint = curve_server(keys, curve)
    op = fleet.write("fleetwatch.yaml", {
        "routers": [endpoint], "state_url": fleet.state_url, "timeout": 10.0,
        "security": keys.client(keys.backend("operator"))})
    res = fleet.cli("status", "--config", str(op), "--json", timeout=20, check=False)
    assert res.returncode == 69                 # no router answered
    router = json.loads(res.stdout)["routers"][0]
    assert router["reachable"] is False
    assert router["problem"].startswith(problem), router


def test_agent_logs_a_refused_curve_handshake(fleet, curve_server):
    keys = Keys(fleet.root)
    endpoint = curve_server(keys)
    uuid = agent_uuid_for(fleet)
    agent = fleet.agent([{"endpoints": {"agents": endpoint}}],
                        security=keys.client(keys.agent(uuid)))
    wait_for(lambda: "CURVE handshake refused by the router (ZAP 400)" in agent.log()
             or not agent.alive(), 20, what="the refusal in the agent's log")
    assert agent.alive(), agent.log()
    from fleetwatch.security import read_certificate
    secret = read_certificate(str(keys.dir / "agents" / f"{uuid}.key_secret"), True).secret
    assert secret.decode() not in agent.log()
