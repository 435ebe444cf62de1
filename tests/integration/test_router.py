"""A real router process against fake agents (DEALER), sinks (PULL), control clients and tail."""

from __future__ import annotations

import re
import signal
import time

import psutil
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetwatch import protocol
from fleetwatch.protocol import SIGNATURE
from support.fleet import wait_for
from support.garbage import GARBAGE, RAW, tcp_address
from support.routerclients import FakeAgent, FakeControl, relay_until_received
from support.zmqio import pull, recv, recv_until, resend_until, stats_from


def envelope_of(frames: list[bytes]) -> list[bytes]:
    """The parts TYPE, UUID, ROUTER of a relayed message's ENVELOPE frame."""
    return frames[1].split(b"/") if len(frames) == 3 else []


# ---------------------------------------------------------------- agents socket

def test_hello_welcome_lists_routers_and_endpoints(fleet, zctx):
    r = fleet.router(peers=["tcp://router-2.example:5555"])
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    welcome = agent.hello()
    assert welcome.body["router"] == "router-1" and welcome.uuid == "router-1"
    assert welcome.body["routers"] == [r["endpoints"]["agents"], "tcp://router-2.example:5555"]
    assert welcome.body["endpoints"] == r["endpoints"]
    assert r["pid"] == r["proc"].pid and r["id"] == "router-1"
    agent.send("HEARTBEAT")
    assert agent.expect("HEARTBEAT").uuid == "router-1"


def test_relay_stamps_and_routes_by_type(fleet, zctx):
    r = fleet.router()
    sinks = {t: pull(zctx, e) for t, e in r["endpoints"]["sinks"].items()}
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello()
    relay_until_received(agent, sinks["alerting"])
    relay_until_received(agent, sinks["history"])
    sent = agent.notify("the real one")
    got = recv_until(sinks["alerting"], lambda f: b"the real one" in f[-1], what="NOTIFY")
    # SIGNATURE, ENVELOPE, BODY: the body byte for byte as the agent sent it
    assert got == [SIGNATURE, f"NOTIFY/{agent.uuid}/router-1".encode(),
                   protocol.encode(sent)[2]]
    relayed = protocol.decode_relayed(got, allowed=protocol.AGENT_TYPES)
    assert relayed.uuid == agent.uuid and relayed.router == "router-1"
    assert relayed.message == sent
    # RESULT goes to alerting, graphite and history; never to registry
    result = agent.send("RESULT", command_id="c1", plugin="check_disk", status=2, output="CRIT")
    for t in ("alerting", "graphite"):
        frames = recv_until(sinks[t], lambda f: envelope_of(f)[:1] == [b"RESULT"],
                            what=f"RESULT on {t}")
        assert frames == [SIGNATURE, f"RESULT/{agent.uuid}/router-1".encode(),
                          protocol.encode(result)[2]]
        assert protocol.decode_relayed(frames).message == result
    registry = []
    while sinks["registry"].poll(100):
        registry.append(envelope_of(sinks["registry"].recv_multipart())[0])
    assert b"RESULT" not in registry and b"NOTIFY" not in registry


def test_slow_path_relays_hello_and_heartbeat_with_the_envelope(fleet, zctx):
    """HELLO and HEARTBEAT are decoded (slow path) and relayed with the same stamp."""
    r = fleet.router()
    registry = pull(zctx, r["endpoints"]["sinks"]["registry"])
    alerting = pull(zctx, r["endpoints"]["sinks"]["alerting"])
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello()
    relay_until_received(agent, alerting)           # both PUSH connections are up by now
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:              # HELLO again (a reconnect) until relayed
        hello = protocol.make("HELLO", agent.uuid, hostname="h", heartbeat=5.0)
        agent.sock.send_multipart(protocol.encode(hello))
        agent.expect("WELCOME")
        if registry.poll(200):
            break
    got = recv_until(registry, lambda f: f[-1] == protocol.encode(hello)[2], what="HELLO")
    assert got == [SIGNATURE, f"HELLO/{agent.uuid}/router-1".encode(), protocol.encode(hello)[2]]
    beat = agent.send("HEARTBEAT")
    agent.expect("HEARTBEAT")
    got = recv_until(alerting, lambda f: f[-1] == protocol.encode(beat)[2], what="HEARTBEAT")
    assert got == [SIGNATURE, f"HEARTBEAT/{agent.uuid}/router-1".encode(),
                   protocol.encode(beat)[2]]
    assert protocol.decode_relayed(got).message == beat


@pytest.mark.parametrize("uuid", ["bad/uuid", "bad uuid", "-bad", "b\u00e9d", "a" * 65])
def test_hello_with_an_invalid_uuid_gets_400(fleet, zctx, uuid):
    r = fleet.router()
    # the routing id is no uuid (SPEC section 2): only the body check can refuse it
    liar = FakeAgent(zctx, r["endpoints"]["agents"], uuid=uuid)
    hello = liar.send("HELLO", hostname="h", heartbeat=1.0)
    err = liar.expect("ERROR")
    assert err.body["status"] == protocol.BAD_REQUEST and "uuid" in err.body["reason"], err
    assert err.uuid == "router-1"
    control = FakeControl(zctx, r["endpoints"]["control"])
    assert control.peers() == []
    # still unknown, never attached: a NOTIFY is answered 401 (sent again until answered:
    # the router answers a peer at most once a second)
    got = resend_until(liar.sock, liar.notify, lambda f: f[1:2] == [b"ERROR"], timeout=6.0)
    assert got is not None, "no answer to a NOTIFY"
    assert protocol.decode(got).body["status"] == protocol.HELLO_REQUIRED
    assert hello.uuid == uuid


@pytest.mark.parametrize("short", [[SIGNATURE], [SIGNATURE, b"NOTIFY"]],
                         ids=["one-frame", "two-frames"])
def test_truncated_message_costs_at_most_the_next_one(fleet, zctx, short):
    """A message of fewer than three frames switches the router to careful draining; what
    follows from a legitimate agent is relayed, but for at most one message."""
    r = fleet.router()
    ep = r["endpoints"]
    alerting = pull(zctx, ep["sinks"]["alerting"])
    graphite = pull(zctx, ep["sinks"]["graphite"])
    good = FakeAgent(zctx, ep["agents"])
    good.hello()
    relay_until_received(good, alerting)
    while alerting.poll(200):                 # what the warm-up left in flight
        alerting.recv_multipart()
    hostile = FakeAgent(zctx, ep["agents"])
    hostile.hello()
    hostile.sock.send_multipart(short)
    sent = {good.notify(f"n{i}").msg_id for i in range(200)}
    got = set()
    while alerting.poll(2000):
        got.add(protocol.decode_relayed(alerting.recv_multipart()).message.msg_id)
        if got >= sent:
            break
    assert len(sent - got) <= 1, f"{len(sent - got)} legitimate messages lost"
    metrics = stats_from(graphite, lambda m: m.get("router.misframed", 0) >= 1)
    assert metrics["router.bad.400"] >= 1
    assert r["proc"].alive()


def test_no_sink_keeps_serving_counts_drops_and_memory_stays_bounded(fleet, zctx):
    r = fleet.router(limits={"rate": 1e9, "burst": 1e9})     # a flood, but no rate limit
    graphite = pull(zctx, r["endpoints"]["sinks"]["graphite"])
    stats_from(graphite, lambda m: True)             # the graphite PUSH is connected
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello()
    proc = psutil.Process(r["pid"])
    before = proc.memory_info().rss
    n = 100_000
    frames = protocol.encode(protocol.make("NOTIFY", agent.uuid, severity="info", text="x" * 200))
    for _ in range(n):
        agent.sock.send_multipart(frames)
    metrics = stats_from(graphite, lambda m: m["router.received.NOTIFY"] >= n, timeout=30)
    assert metrics["router.dropped.NOTIFY.alerting"] == n
    assert metrics["router.dropped.NOTIFY.history"] == n
    assert metrics["router.relayed.NOTIFY.alerting"] == 0
    assert metrics["router.agents"] == 1
    grown = proc.memory_info().rss - before
    print(f"router RSS grew by {grown / 2**20:.1f} MiB over {n} dropped messages")
    assert grown < 20 * 2**20, f"router RSS grew by {grown / 2**20:.1f} MiB"
    agent.send("HEARTBEAT")                          # still serving
    agent.expect("HEARTBEAT")
    assert r["proc"].alive()


def test_unknown_peer_gets_401(fleet, zctx):
    r = fleet.router()
    stranger = FakeAgent(zctx, r["endpoints"]["agents"])
    stranger.notify()
    err = stranger.expect("ERROR")
    assert err.body["status"] == protocol.HELLO_REQUIRED and err.body["ref"] == "NOTIFY"
    stranger.hello()                                 # then HELLO makes it welcome


def test_a_connection_speaks_for_the_uuid_of_its_first_hello_only(fleet, zctx):
    r = fleet.router()
    graphite = pull(zctx, r["endpoints"]["sinks"]["graphite"])
    agent = FakeAgent(zctx, r["endpoints"]["agents"], uuid="honest")
    agent.hello()
    hello = protocol.make("HELLO", "victim", hostname="h", heartbeat=1.0)
    agent.sock.send_multipart(protocol.encode(hello))
    err = agent.expect("ERROR")
    assert err.body["status"] == protocol.FORBIDDEN and err.body["ref"] == hello.msg_id
    assert "honest" in err.body["reason"] and "victim" in err.body["reason"]
    control = FakeControl(zctx, r["endpoints"]["control"])
    assert [p["uuid"] for p in control.peers()] == ["honest"]
    stats_from(graphite, lambda m: m.get("router.refused.uuid_mismatch") == 1)


def test_a_reconnect_moves_the_agent_and_run_goes_to_the_newest_connection(fleet, zctx):
    r = fleet.router()
    ep = r["endpoints"]
    alerting = pull(zctx, ep["sinks"]["alerting"])
    old = FakeAgent(zctx, ep["agents"])
    old.hello()
    relay_until_received(old, alerting)
    new = FakeAgent(zctx, ep["agents"], uuid=old.uuid)      # the same agent, a new socket
    new.hello()
    control = FakeControl(zctx, ep["control"])
    (entry,) = control.peers()
    assert entry["uuid"] == old.uuid
    run = protocol.make("RUN", control.uuid, command_id="c1", plugin="check_load")
    control.sock.send_multipart(protocol.encode_control(run, old.uuid))
    got = recv_until(new.sock, lambda f: f[1] == b"RUN", what="RUN at the new connection")
    assert protocol.decode(got).get("command_id") == "c1"
    old.notify("from the old connection")                   # forgotten: asked for HELLO
    assert old.expect("ERROR").body["status"] == protocol.HELLO_REQUIRED
    assert not old.sock.poll(200)                           # and the RUN never went there
    sent, got = relay_until_received(new, alerting)
    assert got.uuid == old.uuid and got.router == "router-1"
    while alerting.poll(200):                               # nothing of the old one relayed
        frames = alerting.recv_multipart()
        assert b"from the old connection" not in frames[2]


def test_future_version_gets_505(fleet, zctx):
    r = fleet.router()
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.sock.send_multipart([b"FWP\x02", b"NOTIFY", b"{}"])
    assert agent.expect("ERROR").body["status"] == protocol.VERSION_NOT_SUPPORTED


def test_answers_are_those_spec_sections_3_4_5_and_6_promise(fleet, zctx):
    """What an implementation from SPEC.md alone relies on: a foreign signature gets 400 and
    another version 505, both as FWP/1 ERRORs without ref; WELCOME on agents carries
    endpoints; the router's HEARTBEAT carries only the common fields; an ERROR sent to the
    router is never answered (agents or control); TARGET on a control HELLO is ignored."""
    r = fleet.router()
    ep = r["endpoints"]
    for first, status, reason in ((b"XYZ\x01", protocol.BAD_REQUEST, "signature"),
                                  (b"FWP\x02", protocol.VERSION_NOT_SUPPORTED, "speak 1")):
        stranger = FakeAgent(zctx, ep["agents"])     # its own connection: answers are limited
        stranger.sock.send_multipart([first, b"NOTIFY", b"{}"])
        frames = recv_until(stranger.sock, lambda f: f[1] == b"ERROR", what="ERROR")
        assert frames[0] == SIGNATURE
        err = protocol.decode(frames)
        assert err.body["status"] == status and reason in err.body["reason"]
        assert "ref" not in err.body
    agent = FakeAgent(zctx, ep["agents"])
    assert agent.hello().body["endpoints"] == ep
    agent.send("ERROR", status=400, reason="the agent's complaint")   # not answered...
    agent.send("HEARTBEAT", interval=5.0)
    frames = recv(agent.sock)                                          # ...so this comes first
    assert frames[1] == b"HEARTBEAT", frames
    assert set(protocol.decode(frames).body) == {"msg_id", "uuid", "ts"}
    control = FakeControl(zctx, ep["control"])
    control.send("ERROR", status=400, reason="the client's complaint")
    control.send("HELLO", target=agent.uuid, hostname="h", heartbeat=1.0, role="cli")
    frames = recv(control.sock)
    assert frames[1] == b"WELCOME", frames


# ---------------------------------------------------------------- control socket

def test_control_hello_and_peers(fleet, zctx):
    r = fleet.router()
    control = FakeControl(zctx, r["endpoints"]["control"])
    control.send("HELLO", hostname="sinkhost", heartbeat=1.0, role="sink", sink="alerting")
    welcome = control.expect("WELCOME")
    assert welcome.body["endpoints"] == r["endpoints"] and welcome.body["router"] == "router-1"
    before = time.time()
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello()
    (entry,) = control.peers()
    assert entry["uuid"] == agent.uuid and entry["hostname"] == f"host-{agent.uuid[:6]}"
    assert before - 1 <= entry["since"] <= entry["last_heard"] <= time.time() + 1


def test_peers_answers_in_pages_a_client_follows_with_next(fleet, zctx):
    """SPEC 4.3: a page holds at most ``limit`` agents in uuid order, with ``total`` and
    ``next``; asking ``after`` = ``next`` gives the rest; ``limit`` 0 is a summary."""
    r = fleet.router()
    control = FakeControl(zctx, r["endpoints"]["control"])
    agents = [FakeAgent(zctx, r["endpoints"]["agents"]) for _ in range(5)]
    for agent in agents:
        agent.hello()
    uuids = sorted(a.uuid for a in agents)
    seen, after, pages = [], None, 0
    while pages < 10:
        control.send("PEERS", limit=2, after=after)
        page = control.expect("PEERS").body
        pages += 1
        assert page["total"] == 5 and len(page["agents"]) <= 2
        seen += [p["uuid"] for p in page["agents"]]
        after = page.get("next")
        if after is None:
            break
        assert after == seen[-1]
    assert seen == uuids and pages == 3
    control.send("PEERS", limit=0)
    summary = control.expect("PEERS").body
    assert summary["agents"] == [] and summary["total"] == 5 and "next" not in summary
    assert [p["uuid"] for p in control.peers()] == uuids     # no limit: one page of 1,000


def test_backend_stats_on_control_are_relayed_as_the_senders(fleet, zctx):
    """A sink's own counters (STATS, source sink) go out through the STATS route stamped
    with the sink's id; a STATS claiming to be an agent's is refused (400)."""
    r = fleet.router()
    graphite = pull(zctx, r["endpoints"]["sinks"]["graphite"])
    control = FakeControl(zctx, r["endpoints"]["control"])
    control.sock.send_multipart(protocol.encode_control(protocol.make(
        "STATS", "sink-alerting", metrics={"sink.received": 3}, source="sink")))
    frames = recv_until(graphite, lambda f: f[1].startswith(b"STATS/sink-alerting/"),
                        what="the sink's STATS")
    relayed = protocol.decode_relayed(frames)
    assert relayed.uuid == "sink-alerting" and relayed.router == "router-1"
    assert relayed.message.get("metrics") == {"sink.received": 3}
    bad = control.send("STATS", metrics={"cpu.percent": 99}, source="agent")
    err = control.expect("ERROR")
    assert err.body["status"] == protocol.BAD_REQUEST and err.body["ref"] == bad.msg_id


def test_ack_and_run_are_forwarded_to_the_agent(fleet, zctx):
    r = fleet.router()
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello()
    control = FakeControl(zctx, r["endpoints"]["control"])
    for type_, fields in (("ACK", {"msg_ids": ["m1", "m2"], "sink": "alerting"}),
                          ("RUN", {"command_id": "c7", "plugin": "check_load"})):
        msg = protocol.make(type_, control.uuid, **fields)
        frames = protocol.encode_control(msg, agent.uuid)
        control.sock.send_multipart(frames)
        got = recv_until(agent.sock, lambda f: f[1] == type_.encode(), what=type_)
        assert got == [SIGNATURE, type_.encode(), frames[3]]      # the body, byte for byte


def test_ack_to_unknown_agent_gets_404(fleet, zctx):
    r = fleet.router()
    control = FakeControl(zctx, r["endpoints"]["control"])
    ack = control.send("ACK", target="nobody", msg_ids=["m1"])
    err = control.expect("ERROR")
    assert err.body["status"] == protocol.NOT_FOUND and err.body["ref"] == ack.msg_id


def test_silent_agent_expires(fleet, zctx):
    r = fleet.router()
    control = FakeControl(zctx, r["endpoints"]["control"])
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello(heartbeat=0.2)                       # forgotten after 3 x 0.2 s of silence
    assert [p["uuid"] for p in control.peers()] == [agent.uuid]
    wait_for(lambda: control.peers() == [], timeout=5, what="expiry")
    agent.notify()
    assert agent.expect("ERROR").body["status"] == protocol.HELLO_REQUIRED


# ---------------------------------------------------------------- tail

def test_tail_filters_by_topic_prefix(fleet, zctx):
    r = fleet.router()
    a = FakeAgent(zctx, r["endpoints"]["agents"])
    b = FakeAgent(zctx, r["endpoints"]["agents"])
    longer = FakeAgent(zctx, r["endpoints"]["agents"], uuid=a.uuid + "0")   # a's uuid + "0"
    a.hello()
    b.hello()
    longer.hello()
    subs = {}
    for name, prefix in (("all", b"NOTIFY/"), ("a", protocol.topic("NOTIFY", a.uuid))):
        sock = subs[name] = zctx.socket(zmq.SUB)
        sock.linger = 0
        sock.subscribe(prefix)
        sock.connect(r["endpoints"]["tail"])

    def warm(sock):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            a.notify("warm-up")
            if sock.poll(50):
                return
        raise AssertionError("tail subscription never took effect")
    warm(subs["all"])
    warm(subs["a"])
    sent = b.notify("from b")
    got = recv_until(subs["all"], lambda f: b"from b" in f[2], what="b on the tail")
    # ENVELOPE, SIGNATURE, BODY, SEQ: the envelope is the topic; the body as b sent it
    assert got[:3] == [f"NOTIFY/{b.uuid}/router-1".encode(), SIGNATURE, protocol.encode(sent)[2]]
    assert got[0].startswith(protocol.topic("NOTIFY", b.uuid))
    relayed = protocol.decode_tail(got)
    assert relayed.uuid == b.uuid and relayed.router == "router-1" and relayed.message == sent
    assert relayed.seq[1] == 1                      # b's first NOTIFY on the tail
    a.send("STATS", metrics={"load": 1.0})
    longer.notify("from a longer uuid")             # a's topic is not a prefix of its envelope
    a.notify("final")
    seen = []
    recv_until(subs["a"], lambda f: seen.append(f) or b"final" in f[2], what="a's final")
    assert all(f[0] == protocol.envelope("NOTIFY", a.uuid, "router-1") for f in seen), seen
    assert all(protocol.decode_tail(f).uuid == a.uuid for f in seen)
    # the type subscription did get the longer uuid's NOTIFY
    rest = []
    recv_until(subs["all"], lambda f: rest.append(f) or f[0] == protocol.envelope(
        "NOTIFY", longer.uuid, "router-1"), what="the longer uuid's NOTIFY on the type "
                                                 "subscription")
    # numbered without a gap: every NOTIFY of the router on the type subscription, and a's
    # own on a's (whose first ones, the warm-ups, came before the subscription took)
    types = [protocol.decode_tail(got).seq[0]] + [protocol.decode_tail(f).seq[0] for f in rest]
    assert types == list(range(types[0], types[0] + len(types)))
    mine = [protocol.decode_tail(f).seq[1] for f in seen]
    assert mine == list(range(mine[0], mine[0] + len(mine))) and len(mine) >= 2


def test_a_tail_subscriber_that_falls_behind_learns_what_it_lost(fleet, zctx):
    """``fleetwatch tail`` stopped (SIGSTOP) while an agent sends more than the router's
    queue for it and the sockets' buffers hold: resumed, it says how many STATS it lost
    and from which router, from the tail's SEQ numbers; ``--strict`` would exit there."""
    r = fleet.router(limits={"tail_hwm": 10})
    op = fleet.operator_config([r])
    tail = fleet.start("tail", "tail", "--config", str(op), "--type", "STATS",
                       "--timeout", "60")
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello()
    wait_for(lambda: agent.send("STATS", metrics={"warm": 1.0}) and '"warm"' in tail.log(),
             20, 0.1, what="the tail subscribed")
    tail.signal(signal.SIGSTOP)
    try:
        big = {f"m{i:05d}": 1.0 for i in range(9000)}          # about 120 KB a body
        for _ in range(300):                                    # about 36 MB: past buffers
            agent.send("STATS", metrics=big)
    finally:
        tail.signal(signal.SIGCONT)
    wait_for(lambda: agent.send("STATS", metrics={"end": 1.0}) and '"end"' in tail.log(),
             30, 0.2, what="the tail caught up")
    found = re.search(r"lost (\d+) STATS messages from router router-1", tail.log())
    assert found and 0 < int(found.group(1)) < 300, tail.log()[-2000:]


def test_tail_subscriptions_are_counted_and_the_excess_reported(fleet, zctx):
    r = fleet.router(limits={"tail_topics": 5})
    graphite = pull(zctx, r["endpoints"]["sinks"]["graphite"])
    greedy = zctx.socket(zmq.SUB)
    greedy.linger = 0
    for i in range(20):
        greedy.subscribe(f"NOTIFY/u{i}/".encode())
    greedy.connect(r["endpoints"]["tail"])
    metrics = stats_from(graphite, lambda m: m.get("router.tail.topics") == 20)
    assert metrics["router.tail.excess"] == 15
    for i in range(20):
        greedy.unsubscribe(f"NOTIFY/u{i}/".encode())
    published = stats_from(graphite, lambda m: m.get("router.tail.topics") == 0)[
        "router.tail.published"]                    # (its own STATS, while subscribed)
    # nobody listening: the router publishes nothing
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello()
    relay_until_received(agent, pull(zctx, r["endpoints"]["sinks"]["alerting"]))
    metrics = stats_from(graphite, lambda m: m.get("router.received.NOTIFY", 0) >= 1)
    assert metrics["router.tail.published"] == published
    assert metrics["router.tail.excess"] == 15
    greedy.subscribe(b"")                            # and a subscriber gets it again
    greedy.close()                                   # gone: its topics go too
    stats_from(graphite, lambda m: m.get("router.tail.topics") == 0
               and m.get("router.tail.excess") == 15)
    assert "above limits.tail_topics (5)" in r["proc"].log()


# ---------------------------------------------------------------- hostile input

def test_garbage_never_kills_the_router(fleet, zctx):
    r = fleet.router()
    ep = r["endpoints"]
    attached = FakeAgent(zctx, ep["agents"])
    attached.hello()
    anonymous = zctx.socket(zmq.DEALER)
    control = zctx.socket(zmq.DEALER)
    for sock, endpoint in ((anonymous, ep["agents"]), (control, ep["control"])):
        sock.linger, sock.sndtimeo = 0, 1000
        sock.connect(endpoint)
    attached.sock.sndtimeo = 1000
    graphite = pull(zctx, ep["sinks"]["graphite"])
    sent = {"n": 0}

    @settings(max_examples=300, deadline=None, database=None, derandomize=False,
              suppress_health_check=list(HealthCheck))
    @given(frames=GARBAGE, where=st.sampled_from(["attached", "anonymous", "control"]))
    def send_garbage(frames, where):
        sock = {"attached": attached.sock, "anonymous": anonymous, "control": control}[where]
        try:
            sock.send_multipart(frames)
            sent["n"] += 1
        except zmq.Again:            # a huge frame made the router drop the connection
            pass

    send_garbage()
    assert sent["n"] > 100
    assert r["proc"].alive()
    # the router still relays a legitimate message, and still answers the control socket
    alerting = pull(zctx, ep["sinks"]["alerting"])
    fresh = FakeAgent(zctx, ep["agents"])
    fresh.hello()
    sent_msg, relayed = relay_until_received(fresh, alerting)
    assert relayed.uuid == fresh.uuid and relayed.message == sent_msg
    client = FakeControl(zctx, ep["control"])
    assert fresh.uuid in [p["uuid"] for p in client.peers()]
    # refusals were counted by status, and none of them was an internal failure
    metrics = stats_from(graphite, lambda m: m.get("router.bad.505", 0) > 0
                         and m.get("router.bad.400", 0) > 0)
    assert "router.bad.500" not in metrics, metrics
    assert r["proc"].alive()


def test_garbage_on_tail_and_sink_sockets_never_kills_the_router(fleet, zctx):
    """Raw TCP garbage on every bound socket, and random frames from a tail subscriber
    (XSUB may send anything upstream), leave the router relaying and publishing."""
    import socket as pysocket
    r = fleet.router()
    ep = r["endpoints"]
    for endpoint in [ep["agents"], ep["control"], ep["tail"], *ep["sinks"].values()]:
        for junk in RAW:
            with pysocket.create_connection(tcp_address(endpoint), timeout=2) as s:
                try:
                    s.sendall(junk)
                except OSError:       # the router hung up on us first: fine
                    pass
    xsub = zctx.socket(zmq.XSUB)
    xsub.linger = 0
    xsub.connect(ep["tail"])

    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(frames=st.lists(st.binary(max_size=80), min_size=1, max_size=4))
    def subscribe_garbage(frames):
        xsub.send_multipart(frames)

    subscribe_garbage()
    assert r["proc"].alive()
    alerting = pull(zctx, ep["sinks"]["alerting"])
    agent = FakeAgent(zctx, ep["agents"])
    agent.hello()
    sub = zctx.socket(zmq.SUB)
    sub.linger = 0
    sub.subscribe(protocol.topic("NOTIFY", agent.uuid))
    sub.connect(ep["tail"])
    sent, relayed = relay_until_received(agent, alerting)
    assert relayed.message == sent
    deadline = time.monotonic() + 10      # the subscription reaches the router asynchronously
    while not sub.poll(50):
        assert time.monotonic() < deadline, "nothing published on the tail"
        agent.notify("for the tail")
    assert protocol.decode_tail(sub.recv_multipart()).uuid == agent.uuid
    assert r["proc"].alive()


# ---------------------------------------------------------------- process

def test_sigterm_exits_cleanly_within_a_second(fleet):
    r = fleet.router()
    proc = r["proc"]
    start = time.monotonic()
    proc.signal(signal.SIGTERM)
    assert proc.popen.wait(5) == 0
    assert time.monotonic() - start < 1.0
    assert "agents tcp://127.0.0.1:" in proc.log()


def test_bad_config_exits_78(fleet):
    path = fleet.write("bad.yaml", {"id": "r", "routes": {"NOTIFY": ["nowhere"]}})
    res = fleet.cli("router", "--config", str(path), check=False)
    assert res.returncode == 78 and "routes.NOTIFY" in res.stderr
