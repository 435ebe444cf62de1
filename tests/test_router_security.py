"""A real router with CURVE on (SPEC 7): refusals, key-bound uuids, allowlist reload, clones,
rate limits and admission pacing, against raw zmq sockets configured by fleetwatch.security."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path

import pytest
import zmq
from fleet import wait_for
from test_router import recv_until, stats_from

from fleetwatch import protocol, security

pytestmark = pytest.mark.slow


class Keys:
    """A router certificate, and agent and back-end keys minted into tmp directories."""

    def __init__(self, root: Path):
        self.root = root
        self.secrets = root / "secrets"
        self.agents_dir, self.backends_dir = root / "agent-keys", root / "backend-keys"
        for d in (self.agents_dir, self.backends_dir):
            d.mkdir(parents=True)
        _, secret = security.write_certificates(str(self.secrets), "fleet", {"role": "router"})
        self.router_secret = secret
        self.router = security.read_certificate(secret)

    def mint(self, role: str, name: str, uuid: str = "", allow: bool = True):
        meta = {"role": role, "name": name, **({"uuid": uuid} if uuid else {})}
        public, secret = security.write_certificates(str(self.secrets), name, meta)
        if allow:
            self.allow(public)
        return security.read_certificate(secret), public

    def allow(self, public: str) -> Path:
        role_dir = self.agents_dir if "agent" in Path(public).read_text() else self.backends_dir
        return Path(shutil.copy(public, role_dir))

    def config(self) -> dict:
        return {"curve": True, "server_key": self.router_secret,
                "agent_keys": str(self.agents_dir), "backend_keys": str(self.backends_dir)}


@pytest.fixture
def keys(tmp_path):
    return Keys(tmp_path / "keys")


def dealer(ctx, endpoint: str, routing_id: str | None, cert, keys: Keys | None):
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    if routing_id:
        sock.routing_id = routing_id.encode()
    if cert is not None:
        security.client(sock, cert, keys.router)
    sock.connect(endpoint)
    return sock


class Agent:
    """A DEALER speaking for ``uuid`` with ``cert`` (None: a plain NULL client)."""

    def __init__(self, ctx, endpoint, uuid, cert, keys, instance: str | None = None):
        self.ctx, self.endpoint, self.uuid, self.cert, self.keys = ctx, endpoint, uuid, cert, keys
        self.instance = instance
        self.sock = dealer(ctx, endpoint, uuid, cert, keys)

    def send(self, type_: str, **fields) -> protocol.Message:
        msg = protocol.make(type_, self.uuid, **fields)
        try:
            self.sock.send_multipart(protocol.encode(msg), zmq.NOBLOCK)
        except zmq.Again:          # no connection (a refused handshake): as good as lost
            pass
        return msg

    def hello_msg(self) -> protocol.Message:
        extra = {"instance": self.instance} if self.instance else {}
        return self.send("HELLO", hostname="h", heartbeat=5.0, **extra)

    def answer(self, timeout: float = 5.0, resend: float = 0.5) -> protocol.Message | None:
        """HELLO (again every ``resend`` s) until WELCOME or ERROR; None if nothing came."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.hello_msg()
            end = min(deadline, time.monotonic() + resend)
            while (left := end - time.monotonic()) > 0 and self.sock.poll(left * 1000):
                frames = self.sock.recv_multipart()
                if frames[1] in (b"WELCOME", b"ERROR"):
                    return protocol.decode(frames)
        return None

    def welcome(self, timeout: float = 10.0) -> protocol.Message:
        got = self.answer(timeout)
        assert got is not None and got.type == "WELCOME", got
        return got


def backend_pull(ctx, endpoint, cert, keys) -> zmq.Socket:
    sock = ctx.socket(zmq.PULL)
    sock.linger = 0
    security.client(sock, cert, keys.router)
    sock.connect(endpoint)
    return sock


def relayed_notify(sock, predicate, timeout=10.0):
    frames = recv_until(sock, lambda f: len(f) == 3 and f[1].startswith(b"NOTIFY/")
                        and predicate(protocol.decode_relayed(f)), timeout, "NOTIFY")
    return protocol.decode_relayed(frames)


def keep_relaying(agent: Agent, sink: zmq.Socket, tag: str) -> None:
    """``agent`` is still relayed: a NOTIFY it sends now reaches ``sink``."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sent = agent.send("NOTIFY", severity="info", text=tag)
        end = time.monotonic() + 0.3
        while (left := end - time.monotonic()) > 0 and sink.poll(left * 1000):
            got = protocol.decode_relayed(sink.recv_multipart())
            if got.message.msg_id == sent.msg_id:
                assert got.uuid == agent.uuid
                return
    raise AssertionError(f"{agent.uuid} is no longer relayed ({tag})")


def secure_router(fleet, keys, **extra):
    return fleet.router(security=keys.config(), **extra)


# ---------------------------------------------------------------- refusals

def test_every_foreign_or_misused_key_is_refused_and_counted(fleet, zctx, keys):
    good_uuid, other_uuid = "agent-good", "agent-other"
    good_cert, _ = keys.mint("agent", "good", good_uuid)
    other_cert, _ = keys.mint("agent", "other", other_uuid)
    stranger_cert, _ = keys.mint("agent", "stranger", "agent-stranger", allow=False)
    sink_cert, _ = keys.mint("backend", "sink")
    r = secure_router(fleet, keys)
    ep = r["endpoints"]
    alerting = backend_pull(zctx, ep["sinks"]["alerting"], sink_cert, keys)
    graphite = backend_pull(zctx, ep["sinks"]["graphite"], sink_cert, keys)
    good = Agent(zctx, ep["agents"], good_uuid, good_cert, keys)
    good.welcome()
    keep_relaying(good, alerting, "before")

    # an unknown key and a plain client: no answer at all (the handshake fails)
    assert Agent(zctx, ep["agents"], "agent-stranger", stranger_cert, keys).answer(1.0) is None
    assert Agent(zctx, ep["agents"], good_uuid, None, keys).answer(1.0) is None
    # a back-end key on the agents socket
    assert Agent(zctx, ep["agents"], "sink", sink_cert, keys).answer(1.0) is None
    # an agent key on the control socket
    control = dealer(zctx, ep["control"], None, good_cert, keys)
    control.send_multipart(protocol.encode_control(protocol.make("PEERS", "cli")))
    assert not control.poll(1000)
    # good's key used for another uuid (routing id and body uuid both the other one)
    liar = Agent(zctx, ep["agents"], other_uuid, good_cert, keys)
    err = liar.answer()
    assert err.type == "ERROR" and err.body["status"] == protocol.FORBIDDEN, err
    event = relayed_notify(alerting, lambda m: m.message.get("source") == "router-security")
    assert event.uuid == "router-1" and event.router == "router-1"
    assert event.message.body["severity"] == "error"
    text = event.message.body["text"]
    assert other_uuid in text and good_uuid in text and "127.0.0.1" in text, text

    # a connection taking good's routing id over (ROUTER_HANDOVER) with another key, and
    # sending without HELLO: refused once the router has made attached agents prove their key
    taker = Agent(zctx, ep["agents"], good_uuid, other_cert, keys)
    err = None
    deadline = time.monotonic() + 10
    while err is None and time.monotonic() < deadline:
        taker.send("NOTIFY", severity="info", text="taken")
        if taker.sock.poll(100):
            frames = taker.sock.recv_multipart()
            err = protocol.decode(frames) if frames[1] == b"ERROR" else None
    assert err is not None and err.body["status"] == protocol.FORBIDDEN, err
    taker.sock.close(0)
    good = Agent(zctx, ep["agents"], good_uuid, good_cert, keys)     # the agent reconnects
    good.welcome()
    keep_relaying(good, alerting, "after")
    metrics = stats_from(graphite, lambda m: all(
        m.get(f"router.refused.{k}", 0) >= 1 for k in
        ("unknown_key", "handshake", "uuid_mismatch", "backend_key_on_agents",
         "agent_key_on_backends")))
    assert metrics["router.events"] >= 1
    assert metrics["router.agents"] == 1
    # the sink's ACK of the router's own event is swallowed, not answered 404
    ctl = dealer(zctx, ep["control"], None, sink_cert, keys)
    ack = protocol.make("ACK", "sink-alerting", msg_ids=[event.message.msg_id])
    ctl.send_multipart(protocol.encode_control(ack, "router-1"))
    stats_from(graphite, lambda m: m.get("router.acks.own", 0) >= 1)
    assert not ctl.poll(200)
    assert r["proc"].alive()


def test_a_missing_server_key_stops_the_router_with_78(fleet, keys):
    cfg = {**keys.config(), "server_key": str(keys.root / "nowhere.key_secret")}
    path = fleet.write("bad.yaml", {"id": "r", "security": cfg})
    res = fleet.cli("router", "--config", str(path), check=False)
    assert res.returncode == 78 and "nowhere.key_secret: no such certificate" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr


# ---------------------------------------------------------------- allowlist reload

def test_allowlist_changes_apply_without_restart_and_on_sighup(fleet, zctx, keys):
    sink_cert, _ = keys.mint("backend", "sink")
    late_cert, late_public = keys.mint("agent", "late", "agent-late", allow=False)
    r = secure_router(fleet, keys)
    ep = r["endpoints"]
    late = Agent(zctx, ep["agents"], "agent-late", late_cert, keys)
    assert late.answer(1.0) is None                 # not allowed yet
    allowed = keys.allow(late_public)               # added: picked up within a second or so
    # libzmq does not retry a connection ZAP refused: the agent reconnects (a new DEALER)
    wait_for(lambda: Agent(zctx, ep["agents"], "agent-late", late_cert, keys).answer(0.5),
             timeout=10, what="WELCOME once the key is allowed")
    allowed.unlink()                                # removed: a new connection is refused
    time.sleep(1.5)                                 # the check runs at most once a second
    again = Agent(zctx, ep["agents"], "agent-late", late_cert, keys)
    assert again.answer(1.5) is None

    # SIGHUP re-reads even what the periodic check cannot see: the same file name, size and
    # modification time, another key inside
    first_cert, first_public = keys.mint("agent", "hup-1", "agent-hup", allow=True)
    second_cert, second_public = keys.mint("agent", "hup-2", "agent-hup", allow=False)
    target = keys.agents_dir / Path(first_public).name
    time.sleep(1.5)
    Agent(zctx, ep["agents"], "agent-hup", first_cert, keys).welcome()
    st = target.stat()
    text = Path(second_public).read_text().replace("hup-2", "hup-1")
    assert len(text) == st.st_size
    target.write_text(text)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    time.sleep(1.5)
    second = Agent(zctx, ep["agents"], "agent-hup", second_cert, keys)
    assert second.answer(1.0) is None               # the periodic check saw no change
    r["proc"].signal(signal.SIGHUP)
    wait_for(lambda: Agent(zctx, ep["agents"], "agent-hup", second_cert, keys).answer(0.5),
             timeout=10, what="WELCOME after SIGHUP")
    graphite = backend_pull(zctx, ep["sinks"]["graphite"], sink_cert, keys)
    stats_from(graphite, lambda m: m.get("router.refused.unknown_key", 0) >= 2)
    assert "keys reloaded (SIGHUP)" in r["proc"].log()


# ---------------------------------------------------------------- clones

def test_a_cloned_agent_is_reported_once_and_a_restart_is_not(fleet, zctx, keys):
    cert, _ = keys.mint("agent", "vm", "agent-vm")
    rcert, _ = keys.mint("agent", "restarted", "agent-restarted")
    sink_cert, _ = keys.mint("backend", "sink")
    r = secure_router(fleet, keys)
    ep = r["endpoints"]
    alerting = backend_pull(zctx, ep["sinks"]["alerting"], sink_cert, keys)
    graphite = backend_pull(zctx, ep["sinks"]["graphite"], sink_cert, keys)
    # a restart: instance r1, gone, then r2 for good
    first = Agent(zctx, ep["agents"], "agent-restarted", rcert, keys, instance="r1")
    first.welcome()
    first.sock.close(0)
    second = Agent(zctx, ep["agents"], "agent-restarted", rcert, keys, instance="r2")
    for _ in range(3):
        second.welcome()
    # a clone: two processes with the same key and uuid, re-HELLOing alternately
    a = Agent(zctx, ep["agents"], "agent-vm", cert, keys, instance="inst-a")
    b = Agent(zctx, ep["agents"], "agent-vm", cert, keys, instance="inst-b")
    for _ in range(3):
        for clone in (a, b):
            # each new connection takes the routing id over (ROUTER_HANDOVER)
            clone.sock.disconnect(ep["agents"])
            clone.sock.connect(ep["agents"])
            clone.welcome()
    event = relayed_notify(alerting, lambda m: "two agents" in m.message.body["text"])
    text = event.message.body["text"]
    assert "agent-vm" in text and "inst-a" in text and "inst-b" in text
    assert "--new-uuid" in text and event.uuid == "router-1"
    metrics = stats_from(graphite, lambda m: m.get("router.clones", 0) >= 1)
    assert metrics["router.clones"] == 1            # once, though the tug of war went on
    while alerting.poll(300):                       # and no report about the restart
        f = alerting.recv_multipart()
        assert b"agent-restarted" not in f[2] or b"two agents" not in f[2]


# ---------------------------------------------------------------- limits (CURVE off)

def test_a_flooding_agent_is_rate_limited_while_another_is_relayed(fleet, zctx):
    r = fleet.router(limits={"rate": 200.0, "burst": 400.0})
    ep = r["endpoints"]
    alerting = zctx.socket(zmq.PULL)
    alerting.linger = 0
    alerting.connect(ep["sinks"]["alerting"])
    graphite = zctx.socket(zmq.PULL)
    graphite.linger = 0
    graphite.connect(ep["sinks"]["graphite"])
    calm = Agent(zctx, ep["agents"], "agent-calm", None, None)
    flood = Agent(zctx, ep["agents"], "agent-flood", None, None)
    calm.welcome()
    flood.welcome()
    keep_relaying(calm, alerting, "warm-up")
    frames = protocol.encode(protocol.make("NOTIFY", flood.uuid, severity="info", text="x"))
    for _ in range(5000):
        flood.sock.send_multipart(frames)
    err = recv_until(flood.sock, lambda f: f[1] == b"ERROR", what="429")
    assert protocol.decode(err).body["status"] == protocol.RATE_LIMITED
    keep_relaying(calm, alerting, "during the flood")
    metrics = stats_from(graphite, lambda m: m.get("router.rate_limited", 0) >= 3000)
    assert metrics["router.received.NOTIFY"] < 2000, metrics
    assert metrics["router.agents"] == 2


def test_admission_pacing_defers_a_reconnect_storm(fleet, zctx):
    r = fleet.router(limits={"hellos_per_second": 10.0})
    ep = r["endpoints"]
    graphite = zctx.socket(zmq.PULL)
    graphite.linger = 0
    graphite.connect(ep["sinks"]["graphite"])
    storm = [Agent(zctx, ep["agents"], f"storm-{i:02d}", None, None) for i in range(40)]
    for agent in storm:
        agent.hello_msg()
    welcomed = set()

    def all_welcomed():
        for agent in storm:
            if agent.uuid in welcomed:
                continue
            while agent.sock.poll(0):
                if agent.sock.recv_multipart()[1] == b"WELCOME":
                    welcomed.add(agent.uuid)
            if agent.uuid not in welcomed:
                agent.hello_msg()                   # an agent's retry
        return len(welcomed) == len(storm)
    start = time.monotonic()
    wait_for(all_welcomed, timeout=20, interval=0.2, what="the storm admitted")
    took = time.monotonic() - start
    metrics = stats_from(graphite, lambda m: m.get("router.agents") == 40)
    assert metrics["router.admission_deferred"] >= 20, metrics
    assert took >= 1.5, f"40 agents at 10/s admitted in {took:.1f}s"
