"""Durable routes in a real router process (SPEC 4.1): WELCOME tells them, a NOTIFY no sink of
a durable type could take is answered 503 (the agent keeps it), PEERS says which sink types
are connected, and the drops the router could not hand to a sink are told to the history
lake per agent once a history sink is there to take them."""

from __future__ import annotations

import zmq

from fleetwatch import protocol
from support.routerclients import (FakeAgent, FakeControl, backend_pull, relay_until_received,
                                   secure_router)
from support.fleet import wait_for
from support.zmqio import pull, recv_until, stats_from

DEFAULT = {"NOTIFY": ["alerting", "history"], "REGISTER": ["registry", "history"]}


def durable_503(agent: FakeAgent, timeout: float = 5.0) -> protocol.Message:
    return agent.expect("ERROR", timeout, durable=True)


def test_welcome_tells_the_durable_routes_and_peers_the_sinks_connected(fleet, zctx):
    r = fleet.router()
    ep = r["endpoints"]
    alerting = pull(zctx, ep["sinks"]["alerting"])
    agent = FakeAgent(zctx, ep["agents"])
    assert agent.hello().body["durable"] == DEFAULT
    relay_until_received(agent, alerting)
    control = FakeControl(zctx, ep["control"])

    def fleet_view():
        control.send("PEERS")
        return control.expect("PEERS").body
    # (the router looks at its sink connections at each sweep, four times a second)
    wait_for(lambda: fleet_view()["sinks"]["alerting"] == 1, what="alerting counted")
    answer = fleet_view()
    assert answer["durable"] == DEFAULT
    assert answer["sinks"] == {"alerting": 1, "graphite": 0, "history": 0, "registry": 0}


def test_a_notify_no_history_sink_took_is_answered_503_until_one_connects(fleet, zctx):
    r = fleet.router()
    ep = r["endpoints"]
    alerting, graphite = pull(zctx, ep["sinks"]["alerting"]), pull(zctx, ep["sinks"]["graphite"])
    agent = FakeAgent(zctx, ep["agents"])
    agent.hello()
    sent, got = relay_until_received(agent, alerting)      # alerting has it, history not
    err = durable_503(agent)
    assert err.body["status"] == protocol.UNAVAILABLE and err.body["ref"] == "NOTIFY"
    assert "no history sink is connected to router router-1" in err.body["reason"]
    metrics = stats_from(graphite, lambda m: m["router.durable_unavailable"] >= 1)
    assert metrics["router.durable_missing"] == 3 and metrics["router.sinks.history"] == 0
    # a history sink connects: NOTIFYs reach both and nobody is told 503 any more
    history = pull(zctx, ep["sinks"]["history"])
    stats_from(graphite, lambda m: m["router.sinks.history"] == 1)
    while agent.sock.poll(0):                              # what was said before
        agent.sock.recv_multipart()
    note = agent.notify("after")
    for sink in (alerting, history):
        frames = recv_until(sink, lambda f: f[0] == protocol.SIGNATURE and
                            protocol.decode_relayed(f).message.msg_id == note.msg_id,
                            what="the NOTIFY")
        assert frames
    agent.send("HEARTBEAT")
    agent.expect("HEARTBEAT")                 # answered after the NOTIFY: no ERROR before it
    assert not agent.sock.poll(0)


def test_a_route_left_out_is_best_effort_and_nobody_is_told(fleet, zctx):
    r = fleet.router(durable={"NOTIFY": ["alerting"], "REGISTER": ["registry"]})
    ep = r["endpoints"]
    alerting = pull(zctx, ep["sinks"]["alerting"])
    agent = FakeAgent(zctx, ep["agents"])
    assert agent.hello().body["durable"] == {"NOTIFY": ["alerting"], "REGISTER": ["registry"]}
    relay_until_received(agent, alerting)
    agent.send("HEARTBEAT")
    agent.expect("HEARTBEAT")
    assert not agent.sock.poll(0)             # no 503: history is best effort here


def test_drops_reach_the_lake_per_agent_once_a_history_sink_takes_them(fleet, zctx):
    r = fleet.router()
    ep = r["endpoints"]
    graphite = pull(zctx, ep["sinks"]["graphite"])
    agent = FakeAgent(zctx, ep["agents"])
    agent.hello()
    for _ in range(5):                         # no alerting, no history sink: all dropped
        agent.send("HEARTBEAT")
        agent.expect("HEARTBEAT")
    pending = stats_from(graphite, lambda m: m["router.drops.pending"] == 2)   # two sinks
    assert pending["router.drops.reported"] == 0
    history = pull(zctx, ep["sinks"]["history"])
    own = protocol.envelope("STATS", "router-1", "router-1")

    def with_drops(frames):
        return frames[1] == own and protocol.decode_relayed(frames).message.get("drops")
    stats = protocol.decode_relayed(recv_until(history, with_drops, 15, "drops")).message
    drops = {(d["uuid"], d["type"], d["sink"]): d for d in stats.body["drops"]}
    for sink in ("alerting", "history"):
        entry = drops[(agent.uuid, "HEARTBEAT", sink)]
        assert entry["count"] == 5 and entry["first"] <= entry["last"]
    after = stats_from(graphite, lambda m: m["router.drops.reported"] >= 2)
    assert after["router.drops.pending"] == 0


def test_no_history_route_for_stats_keeps_no_ledger(fleet, zctx):
    r = fleet.router(routes={"HEARTBEAT": ["alerting"], "STATS": ["graphite"]})
    ep = r["endpoints"]
    graphite = pull(zctx, ep["sinks"]["graphite"])
    agent = FakeAgent(zctx, ep["agents"])
    agent.hello()
    agent.send("HEARTBEAT")
    agent.expect("HEARTBEAT")
    metrics = stats_from(graphite, lambda m: m.get("router.dropped.HEARTBEAT.alerting") == 1)
    assert metrics["router.drops.pending"] == 0


def test_a_curve_router_counts_sink_connections_and_failed_handshakes(fleet, zctx, keys):
    sink_cert, _ = keys.mint("backend", "sink")
    r = secure_router(fleet, keys)
    ep = r["endpoints"]
    graphite = backend_pull(zctx, ep["sinks"]["graphite"], sink_cert, keys)
    plain = zctx.socket(zmq.PULL)              # no keys: its handshake fails
    plain.linger = 0
    plain.connect(ep["sinks"]["history"])
    metrics = stats_from(graphite, lambda m: m.get("router.refused.handshake", 0) >= 1)
    assert metrics["router.sinks.graphite"] == 1
