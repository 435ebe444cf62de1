"""The fleet end to end: real routers, sinks and agents as processes on 127.0.0.1.

These are the guarantees (docs/concepts/delivery.md) that need every component at once: no notification
lost or duplicated when a router dies, the spool surviving an agent restart, and routers
that drop (and count) rather than block when no sink runs.
"""

from __future__ import annotations

import json
import signal
import threading
import time

import psutil
import pytest
import zmq

from support.fleet import wait_for
from support.zmqio import recv
from fleetwatch import protocol

pytestmark = pytest.mark.timeout(180)

HEARTBEAT = 0.3


def recorded(fleet) -> list[tuple[str, str]]:
    """(msg_id, uuid) of every notification the alerting sink has committed."""
    return fleet.db_rows("SELECT msg_id, uuid FROM notifications")


def agent_uuid(fleet, name: str = "agent") -> str:
    path = fleet.root / f"{name}-state" / "uuid"
    return wait_for(lambda: path.exists() and path.read_text().strip(), 10, what="agent uuid")


def client(fleet, name: str = "agent"):
    from agent.client import Client
    return Client(config_path=str(fleet.root / f"{name}.yaml"), timeout=10.0)


def wait_intake(fleet, name: str = "agent"):
    wait_for(lambda: (fleet.root / f"{name}-state" / "intake.sock").exists(), 15,
             what="agent intake socket")


def router_stats(info: dict, timeout: float = 10.0) -> dict:
    """The next STATS a router publishes about itself on its tail."""
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    try:
        sub.subscribe(protocol.topic("STATS", info["id"]))
        sub.connect(info["endpoints"]["tail"])
        return protocol.decode_tail(recv(sub, timeout)).message.body["metrics"]
    finally:
        sub.close()


def test_router_killed_while_sending_loses_nothing(fleet):
    r2 = fleet.router("router-2")
    r1 = fleet.router("router-1", peers=[r2["endpoints"]["agents"]])
    fleet.sink("alerting", [r1, r2])
    fleet.agent([r1, r2], heartbeat_interval=HEARTBEAT)
    wait_intake(fleet)
    uuid = agent_uuid(fleet)

    sent: list[str] = []
    errors: list[BaseException] = []

    def send_all():
        try:
            with client(fleet) as fw:
                for i in range(1000):
                    sent.append(fw.notify(f"notification {i}", severity="error"))
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    sender = threading.Thread(target=send_all)
    sender.start()
    wait_for(lambda: len(sent) >= 300 or errors, 60, what="300 notifications sent")
    r1["proc"].signal(signal.SIGKILL)
    killed_at = time.monotonic()
    sender.join(120)
    assert not errors, errors
    assert len(sent) == 1000

    # A notification sent now must find its way through the survivor quickly.
    with client(fleet) as fw:
        probe = fw.notify("after the kill", severity="warning")
    wait_for(lambda: probe in {m for m, _ in recorded(fleet)}, 30, what="probe recorded")

    wait_for(lambda: len(recorded(fleet)) >= 1001, 90,
             what="all notifications recorded")
    rows = recorded(fleet)
    ids = [m for m, _ in rows]
    assert len(ids) == len(set(ids)), "a notification was recorded twice"
    assert set(ids) == set(sent) | {probe}
    assert {u for _, u in rows} == {uuid}

    # The survivor knows the agent, and the agent was attached to it all along.
    peers = fleet_status(fleet, [r2])
    agent = next(a for a in peers["agents"] if a["uuid"] == uuid)
    assert agent["alive"] and agent["routers"] == ["router-2"]
    assert time.monotonic() - killed_at < 120


def fleet_status(fleet, routers) -> dict:
    op = fleet.operator_config(routers)
    res = fleet.cli("status", "--config", str(op), "--json")
    return json.loads(res.stdout)


def test_agent_moves_to_the_survivor_within_three_heartbeats(fleet):
    r2 = fleet.router("router-2")
    r1 = fleet.router("router-1", peers=[r2["endpoints"]["agents"]])
    fleet.sink("alerting", [r1, r2])
    # Configured with router-1 only: router-2 is learned from router-1's WELCOME.
    fleet.agent([r1], heartbeat_interval=HEARTBEAT)
    wait_intake(fleet)
    uuid = agent_uuid(fleet)
    wait_for(lambda: any(a["uuid"] == uuid for a in peers_of(r2)), 10,
             what="agent attached to router-2 (learned from WELCOME)")

    r1["proc"].signal(signal.SIGKILL)
    killed = time.monotonic()
    with client(fleet) as fw:
        msg_id = fw.notify("is anyone there", severity="critical")
    wait_for(lambda: msg_id in {m for m, _ in recorded(fleet)}, 10,
             what="notification through the survivor")
    elapsed = time.monotonic() - killed
    # Detection takes at most 3 heartbeat intervals; one resend wait may be added on top.
    assert elapsed < 3 * HEARTBEAT + 0.5 + 1.0, f"took {elapsed:.2f}s"


def peers_of(info: dict) -> list[dict]:
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    try:
        sock.connect(info["endpoints"]["control"])
        sock.send_multipart(protocol.encode_control(protocol.make("PEERS", "test")))
        if not sock.poll(3000):
            return []
        return protocol.decode(sock.recv_multipart()).body.get("agents", [])
    finally:
        sock.close()


def test_spool_survives_agent_restart(fleet):
    r1 = fleet.router("router-1")
    agent = fleet.agent([r1], heartbeat_interval=HEARTBEAT)
    wait_intake(fleet)
    uuid = agent_uuid(fleet)
    with client(fleet) as fw:
        sent = [fw.notify(f"while no sink runs {i}", severity="error") for i in range(50)]
    assert agent.stop() == 0
    (fleet.root / "agent-state" / "intake.sock").unlink(missing_ok=True)

    fleet.agent([r1], heartbeat_interval=HEARTBEAT)
    wait_intake(fleet)
    fleet.sink("alerting", [r1])
    wait_for(lambda: len(recorded(fleet)) >= 50, 60, what="spooled notifications recorded")
    rows = recorded(fleet)
    assert sorted(m for m, _ in rows) == sorted(sent)
    assert {u for _, u in rows} == {uuid}
    assert agent_uuid(fleet) == uuid


def test_no_sink_router_drops_and_counts_then_spool_lands(fleet):
    r1 = fleet.router("router-1")
    fleet.agent([r1], heartbeat_interval=HEARTBEAT)
    wait_intake(fleet)
    router = psutil.Process(r1["proc"].pid)
    with client(fleet) as fw:
        sent = [fw.notify(f"nobody listens {i}", severity="info") for i in range(2000)]

    def dropped():
        metrics = router_stats(r1)
        return metrics.get("router.dropped.NOTIFY.alerting", 0) >= 2000
    wait_for(dropped, 30, interval=0.2, what="2000 NOTIFY drops counted by the router")
    assert r1["proc"].alive()
    assert router.memory_info().rss < 100 * 1024 * 1024

    fleet.sink("alerting", [r1])
    wait_for(lambda: len(recorded(fleet)) >= 2000, 90, what="spooled notifications landed")
    assert sorted(m for m, _ in recorded(fleet)) == sorted(sent)
