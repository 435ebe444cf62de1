"""A real router with CURVE on (SPEC 7): refusals, key-bound uuids, allowlist reload, clones,
rate limits and admission pacing, against raw zmq sockets configured by fleetwatch.security."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import zmq

from fleetwatch import protocol, security
from support.fleet import wait_for
from support.keys import Keys
from support.routerclients import (Agent, asked_for_hello, backend_pull, dealer, rate_limited,
                                   relayed_notify, secure_router, still_relayed)
from support.zmqio import recv_until, stats_from


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
    still_relayed(good, alerting, "before")

    # an unknown key and a plain client: no answer at all (the handshake fails)
    assert Agent(zctx, ep["agents"], "agent-stranger", stranger_cert, keys).answer(1.0) is None
    assert Agent(zctx, ep["agents"], good_uuid, None, keys).answer(1.0) is None
    # a back-end key on the agents socket
    assert Agent(zctx, ep["agents"], "sink", sink_cert, keys).answer(1.0) is None
    # an agent key on the control socket
    control = dealer(zctx, ep["control"], None, good_cert, keys)
    control.send_multipart(protocol.encode_control(protocol.make("PEERS", "cli")))
    assert not control.poll(1000)
    # good's key speaks for the devices it polls (uuids good@SLUG), on connections of their
    # own, and for no other's device
    device = Agent(zctx, ep["agents"], protocol.device_uuid(good_uuid, "switch-1"), good_cert,
                   keys)
    device.welcome()
    stranger_device = Agent(zctx, ep["agents"], f"{other_uuid}@switch-1", good_cert, keys)
    err = stranger_device.answer()
    assert err.type == "ERROR" and err.body["status"] == protocol.FORBIDDEN, err
    # good's key used for another uuid
    liar = Agent(zctx, ep["agents"], other_uuid, good_cert, keys)
    err = liar.answer()
    assert err.type == "ERROR" and err.body["status"] == protocol.FORBIDDEN, err
    event = relayed_notify(alerting, lambda m: m.message.get("source") == "router-security")
    assert event.uuid == "router-1" and event.router == "router-1"
    assert event.message.body["severity"] == "error"
    text = event.message.body["text"]
    assert other_uuid in text and good_uuid in text and "127.0.0.1" in text, text

    still_relayed(good, alerting, "after")
    metrics = stats_from(graphite, lambda m: all(
        m.get(f"router.refused.{k}", 0) >= 1 for k in
        ("unknown_key", "handshake", "uuid_mismatch", "backend_key_on_agents",
         "agent_key_on_backends")))
    assert metrics["router.events"] >= 1
    assert metrics["router.agents"] == 2                # good and its device
    # the sink's ACK of the router's own event is swallowed, not answered 404
    ctl = dealer(zctx, ep["control"], None, sink_cert, keys)
    ack = protocol.make("ACK", "sink-alerting", msg_ids=[event.message.msg_id])
    ctl.send_multipart(protocol.encode_control(ack, "router-1"))
    stats_from(graphite, lambda m: m.get("router.acks.own", 0) >= 1)
    assert not ctl.poll(200)
    assert r["proc"].alive()


def test_a_missing_server_key_stops_the_router_with_78(fleet, keys):
    cfg = {**keys.router_security(), "server_key": str(keys.dir / "nowhere.key_secret")}
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
    wait_for(lambda: Agent(zctx, ep["agents"], "agent-late", late_cert, keys).answer(1.0)
             is None, timeout=10, what="a new connection refused once the key is removed")

    # SIGHUP re-reads even what the periodic check cannot see: the same file name, size and
    # modification time, another key inside (that the periodic check misses it:
    # tests/unit/fleetwatch/test_keyring.py)
    first_cert, first_public = keys.mint("agent", "hup-1", "agent-hup", allow=True)
    second_cert, second_public = keys.mint("agent", "hup-2", "agent-hup", allow=False)
    target = keys.agents_dir / Path(first_public).name
    wait_for(lambda: getattr(Agent(zctx, ep["agents"], "agent-hup", first_cert, keys)
                             .answer(0.5), "type", None) == "WELCOME",
             timeout=10, what="WELCOME once the first key is allowed")
    st = target.stat()
    text = Path(second_public).read_text().replace("hup-2", "hup-1")
    assert len(text) == st.st_size
    target.write_text(text)
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    r["proc"].signal(signal.SIGHUP)
    wait_for(lambda: Agent(zctx, ep["agents"], "agent-hup", second_cert, keys).answer(0.5),
             timeout=10, what="WELCOME after SIGHUP")
    graphite = backend_pull(zctx, ep["sinks"]["graphite"], sink_cert, keys)
    stats_from(graphite, lambda m: m.get("router.refused.unknown_key", 0) >= 2)
    assert "keys reloaded (SIGHUP)" in r["proc"].log()


# ---------------------------------------------------------------- routing ids (7.3)

def test_an_admitted_key_cannot_get_one_message_relayed_as_another_agent(fleet, zctx, keys):
    a_cert, _ = keys.mint("agent", "a", "agent-a")
    b_cert, _ = keys.mint("agent", "b", "agent-b")
    sink_cert, _ = keys.mint("backend", "sink")
    r = secure_router(fleet, keys)
    ep = r["endpoints"]
    alerting = backend_pull(zctx, ep["sinks"]["alerting"], sink_cert, keys)
    graphite = backend_pull(zctx, ep["sinks"]["graphite"], sink_cert, keys)
    a = Agent(zctx, ep["agents"], "agent-a", a_cert, keys)
    a.welcome()
    still_relayed(a, alerting, "before")
    seen: list[tuple[str, dict]] = []       # (stamped uuid, body) of what the sink got

    def forge(impostor: Agent, refused: bool = True, n: int = 40) -> None:
        """A's traffic from ``impostor`` (B's key): a HELLO as A, then NOTIFYs."""
        if refused:         # 403, and nothing is attached to this connection
            err = impostor.answer()
            assert err.type == "ERROR" and err.body["status"] == protocol.FORBIDDEN, err
        else:
            impostor.hello_msg()
        for i in range(n):
            impostor.send("NOTIFY", severity="critical", text=f"forged {i}")

    # B's key claiming A: from a fresh secret routing id, from A's uuid as routing id (the
    # old rule), from libzmq's own routing id, from the one libzmq would give first were it
    # not seeded, and from A's very routing id, as if its secret had leaked: a duplicate of
    # a live connection's is ignored by libzmq (no ROUTER_HANDOVER), so that one gets nothing
    impostors = [Agent(zctx, ep["agents"], "agent-a", b_cert, keys, routing_id=routing_id)
                 for routing_id in (None, b"agent-a", b"", b"\x00\x6b\x8b\x45\x67")]
    for impostor in impostors:              # (kept: a closed socket drops what it queued)
        forge(impostor)
    leaked = Agent(zctx, ep["agents"], "agent-a", b_cert, keys, routing_id=a.routing_id)
    forge(leaked, refused=False)
    assert not leaked.sock.poll(300)
    # B attached as itself: its NOTIFYs claiming A in the body are stamped B, and a HELLO
    # as A on its connection is refused
    b = Agent(zctx, ep["agents"], "agent-b", b_cert, keys)
    b.welcome()
    b.uuid = "agent-a"
    forge(b)
    # every forged NOTIFY of the unattached connections was refused 401, none relayed
    stats_from(graphite, lambda m: m.get("router.bad.401", 0) >= 4 * 40, timeout=20)
    assert r["proc"].alive()
    sentinel = a.send("NOTIFY", severity="info", text="sentinel")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and alerting.poll(1000):
        frames = alerting.recv_multipart()          # not decode_relayed: it refuses B's
        seen.append((frames[1].split(b"/")[1].decode(), json.loads(frames[2])))
        if seen[-1][1]["msg_id"] == sentinel.msg_id:
            deadline = time.monotonic() + 0.5       # a little longer: stragglers
    assert any(body["msg_id"] == sentinel.msg_id for _, body in seen)
    forged = [(stamp, body) for stamp, body in seen if body.get("text", "").startswith("forged")]
    assert {stamp for stamp, _ in forged} == {"agent-b"}, {stamp for stamp, _ in forged}
    assert len(forged) == 40                         # B's own, stamped B (sinks refuse them)
    still_relayed(a, alerting, "after")
    metrics = stats_from(graphite, lambda m: m.get("router.refused.uuid_mismatch", 0) >= 5)
    assert metrics["router.agents"] == 2 and r["proc"].alive()


def test_announced_routing_ids_cannot_crash_the_router(fleet, zctx):
    """libzmq aborts when a routing id it makes up for a connection is taken by one a peer
    announced; unseeded, the first it makes up is 0x00 6b8b4567 in every process
    (router.rids). CURVE off: the same holds for any holder of an admitted key."""
    r = fleet.router()
    ep = r["endpoints"]
    squatters = [Agent(zctx, ep["agents"], f"squatter-{i}", None, None,
                       routing_id=b"\x00" + (0x6B8B4567 + i).to_bytes(4, "big"))
                 for i in range(4)]
    for agent in squatters:
        agent.welcome()
    for i in range(2):
        Agent(zctx, ep["agents"], f"anonymous-{i}", None, None, routing_id=b"").welcome()
    assert r["proc"].alive()
    for agent in squatters:
        agent.welcome()


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
    a.welcome()
    for _ in range(2):
        for clone, other in ((b, a), (a, b)):
            clone.welcome()             # its HELLO moves the uuid to its connection, so the
            asked_for_hello(other)      # other clone's next message gets 401: HELLO again
    event = relayed_notify(alerting, lambda m: "two agents" in m.message.body["text"])
    text = event.message.body["text"]
    assert "agent-vm" in text and "inst-a" in text and "inst-b" in text
    assert "--new-uuid" in text and event.uuid == "router-1"
    metrics = stats_from(graphite, lambda m: m.get("router.clones", 0) >= 1)
    assert metrics["router.clones"] == 1            # once, though the tug of war went on
    while alerting.poll(300):                       # and no report about the restart
        f = alerting.recv_multipart()
        assert b"agent-restarted" not in f[2] or b"two agents" not in f[2]


def test_two_real_agent_processes_on_one_key_and_uuid_are_reported(fleet):
    """A cloned machine, for real: two agent processes with the same uuid file and key. Each
    one's HELLO moves the uuid to its connection, the other's next heartbeat gets 401 and it
    says HELLO again: the alternation the router reports."""
    from support.fleet import agent_uuid_for
    keys = Keys(fleet.root)
    uuid = agent_uuid_for(fleet, "vm")
    (fleet.root / "clone-state").mkdir()
    shutil.copy(fleet.root / "vm-state" / "uuid", fleet.root / "clone-state" / "uuid")
    secret = keys.agent(uuid)
    r = fleet.router(security=keys.router_security())
    for name in ("vm", "clone"):
        fleet.agent([r], name=name, security=keys.client(secret), heartbeat_interval=0.3)
    wait_for(lambda: f"uuid {uuid} is used by two agents at once" in r["proc"].log(),
             timeout=30, interval=0.2, what="the clone reported")
    assert r["proc"].alive()


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
    still_relayed(calm, alerting, "warm-up")
    frames = protocol.encode(protocol.make("NOTIFY", flood.uuid, severity="info", text="x"))
    for _ in range(5000):
        flood.sock.send_multipart(frames)
    err = recv_until(flood.sock, rate_limited, what="429")
    assert protocol.decode(err).body["status"] == protocol.RATE_LIMITED
    still_relayed(calm, alerting, "during the flood")
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
