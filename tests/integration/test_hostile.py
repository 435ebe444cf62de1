"""The hostile-input suite, with CURVE on: a real router against admitted agents
that misbehave, plain and raw clients on every bound socket, a flood from one agent, and
hostile local input on an agent's intake.

The garbage strategies, the key and client helpers and the agent fixtures come from
tests/support (garbage, keys, routerclients, agentrouter). No sleeps for
synchronisation: every wait polls with a deadline (the paced sender sleeps between sends).
"""

from __future__ import annotations

import socket as pysocket
import time

import psutil
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetwatch import protocol, security
from fleetwatch.protocol import SIGNATURE
from support.agentrouter import raw_intake, start_agent
from support.fleet import intake_path
from support.garbage import GARBAGE, HUGE, RAW, tcp_address
from support.routerclients import (Agent, backend_pull, dealer, rate_limited, secure_router,
                                   still_relayed)
from support.zmqio import expect_error, recv, recv_until, resend_until, stats_from


MiB = 2 ** 20


def rss(r) -> int:
    return psutil.Process(r["pid"]).memory_info().rss


def valid_messages(uuid: str) -> list[list[bytes]]:
    """One well-formed message of each agent type, as ``uuid`` would send it."""
    return [protocol.encode(protocol.make(t, uuid, **fields)) for t, fields in (
        ("HELLO", {"hostname": "h", "heartbeat": 5.0, "instance": "i-1"}),
        ("HEARTBEAT", {}),
        ("NOTIFY", {"severity": "error", "text": "mutant"}),
        ("STATS", {"metrics": {"load": 1.0}}),
        ("REGISTER", {"name": "svc", "plugins": ["check_disk"]}),
        ("RESULT", {"command_id": "c1", "plugin": "check_disk", "status": 0, "output": "ok"}))]


def mutated(valid: list[list[bytes]]):
    """A valid message with one mutation: a byte flipped, a frame cut short, bytes inserted,
    a frame dropped or doubled."""
    @st.composite
    def strategy(draw):
        frames = list(draw(st.sampled_from(valid)))
        i = draw(st.integers(0, len(frames) - 1))
        frame = frames[i]
        op = draw(st.sampled_from(["flip", "cut", "insert", "drop", "double"]))
        pos = draw(st.integers(0, max(0, len(frame) - 1)))
        if op == "flip":
            frames[i] = frame[:pos] + bytes([frame[pos] ^ draw(st.integers(1, 255))]) + \
                frame[pos + 1:]
        elif op == "cut":
            frames[i] = frame[:pos]
        elif op == "insert":
            frames[i] = frame[:pos] + draw(st.binary(min_size=1, max_size=8)) + frame[pos:]
        elif op == "drop":
            del frames[i]
        else:
            frames.insert(i, frame)
        return frames
    return strategy()


def relayed(frames: list[bytes]) -> protocol.Relayed | None:
    """A relayed message as a sink decodes it; None for an undecodable one (the router
    relays an attached agent's bodies undecoded, SPEC 3: a sink drops what it cannot read)."""
    try:
        return protocol.decode_relayed(frames)
    except protocol.ProtocolError:
        return None


def no_internal_errors(metrics: dict) -> None:
    assert "router.bad.500" not in metrics and not metrics.get("router.bad.500"), metrics


# ---------------------------------------------------------------- admitted agents misbehaving

def test_admitted_agent_sending_garbage_replays_and_oversized_frames(fleet, zctx, keys):
    hostile_cert, _ = keys.mint("agent", "hostile", "agent-hostile")
    idle_cert, _ = keys.mint("agent", "idle", "agent-idle")        # admitted, never says HELLO
    calm_cert, _ = keys.mint("agent", "calm", "agent-calm")
    fresh_cert, _ = keys.mint("agent", "fresh", "agent-fresh")    # comes in at the end
    sink_cert, _ = keys.mint("backend", "sink")
    r = secure_router(fleet, keys)
    ep = r["endpoints"]
    alerting = backend_pull(zctx, ep["sinks"]["alerting"], sink_cert, keys)
    graphite = backend_pull(zctx, ep["sinks"]["graphite"], sink_cert, keys)
    hostile = Agent(zctx, ep["agents"], "agent-hostile", hostile_cert, keys)
    calm = Agent(zctx, ep["agents"], "agent-calm", calm_cert, keys)
    hostile.welcome()
    calm.welcome()
    still_relayed(calm, alerting, "before")
    idle = dealer(zctx, ep["agents"], "agent-idle", idle_cert, keys)
    control = dealer(zctx, ep["control"], None, sink_cert, keys)
    for sock in (hostile.sock, idle, control):
        sock.sndtimeo = 1000
    before = rss(r)

    # (a) random frames, and mutations of valid ones, from an attached agent, an admitted stranger and a
    # back-end client on the control socket
    socks = {"attached": hostile.sock, "admitted-stranger": idle, "control": control}
    sent = {"n": 0}

    @settings(max_examples=200, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(frames=st.one_of(GARBAGE, mutated(valid_messages("agent-hostile"))),
           where=st.sampled_from(sorted(socks)))
    def send_garbage(frames, where):
        try:
            socks[where].send_multipart(frames)
            sent["n"] += 1
        except zmq.Again:            # a huge frame made the router drop the connection
            pass

    send_garbage()
    assert sent["n"] > 100
    assert r["proc"].alive()

    # (b) truncated multipart, a future version, an oversized frame: each refused by status
    for short in ([SIGNATURE], [SIGNATURE, b"NOTIFY"]):
        expect_error(hostile.sock, short, protocol.BAD_REQUEST)
    expect_error(hostile.sock, [b"FWP\x02", b"NOTIFY", b"{}"], protocol.VERSION_NOT_SUPPORTED)
    expect_error(hostile.sock, [b"FWP\x09", b"HELLO", b"{}"], protocol.VERSION_NOT_SUPPORTED)
    hostile.sock.send_multipart([SIGNATURE, b"NOTIFY", HUGE])   # the connection is dropped
    hostile.welcome()                                            # and the agent comes back

    # (c) replays: one message of the agent's own, resent many times; the router relays
    # what its rate allows (sinks drop duplicates by msg_id) and keeps no state per msg_id
    old = hostile.send("NOTIFY", severity="warning", text="replayed")
    frames = protocol.encode(old)
    for _ in range(2000):
        try:
            hostile.sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            break
    copies = 0
    deadline = time.monotonic() + 5
    while copies < 50 and time.monotonic() < deadline:
        if alerting.poll(100):
            got = relayed(alerting.recv_multipart())
            copies += got is not None and got.message.msg_id == old.msg_id
    assert copies >= 50, f"only {copies} replays relayed"

    # still serving: the calm agent, a fresh agent, the control socket. The calm agent
    # says HELLO again first: on a loaded machine the attack above can outlast its three
    # heartbeat intervals (15 s), and the router then rightly forgets it (a real agent
    # says HELLO again on the 401 it gets; the 503s its NOTIFYs got are skipped)
    assert resend_until(calm.sock, calm.hello_msg, lambda f: f[1:2] == [b"WELCOME"], 10, 0.5)
    still_relayed(calm, alerting, "after")
    fresh = Agent(zctx, ep["agents"], "agent-fresh", fresh_cert, keys)
    fresh.welcome()
    still_relayed(fresh, alerting, "fresh")
    ctl = dealer(zctx, ep["control"], None, sink_cert, keys)
    ctl.send_multipart(protocol.encode_control(protocol.make("PEERS", "cli")))
    peers = protocol.decode(recv_until(ctl, lambda f: f[1] == b"PEERS", what="PEERS"))
    assert {"agent-calm", "agent-fresh"} <= {p["uuid"] for p in peers.body["agents"]}
    metrics = stats_from(graphite, lambda m: m.get("router.bad.505", 0) >= 2
                         and m.get("router.bad.400", 0) >= 2
                         and m.get("router.received.NOTIFY", 0) >= 50)
    no_internal_errors(metrics)
    grown = rss(r) - before
    assert grown < 30 * MiB, f"router RSS grew by {grown / MiB:.1f} MiB"
    assert r["proc"].alive()


# ---------------------------------------------------------------- every bound socket

def test_plain_and_raw_clients_on_every_socket_are_refused(fleet, zctx, keys):
    agent_cert, _ = keys.mint("agent", "good", "agent-good")
    sink_cert, _ = keys.mint("backend", "sink")
    wrong_router = security.read_certificate(
        security.write_certificates(str(keys.dir / "other"), "other", {"role": "router"})[1])
    r = secure_router(fleet, keys)
    ep = r["endpoints"]
    everything = {"agents": ep["agents"], "control": ep["control"], "tail": ep["tail"],
                  **{f"sink-{k}": v for k, v in ep["sinks"].items()}}
    before = rss(r)
    # raw TCP junk, including a NULL-mechanism ZMTP greeting, on every bound socket
    for endpoint in everything.values():
        for junk in RAW:
            with pysocket.create_connection(tcp_address(endpoint), timeout=2) as s:
                try:
                    s.sendall(junk)
                except OSError:       # the router hung up first: fine
                    pass
    # plain (NULL) ZeroMQ clients, and CURVE clients trusting the wrong server key
    kinds = {"agents": zmq.DEALER, "control": zmq.DEALER, "tail": zmq.SUB}
    intruders = []
    for name, endpoint in everything.items():
        for wrong_key in (False, True):
            sock = zctx.socket(kinds.get(name, zmq.PULL))
            sock.linger = 0
            if wrong_key:         # an allowed key, but trusting another server key
                security.client(sock, agent_cert if name == "agents" else sink_cert,
                                wrong_router)
            if sock.type == zmq.SUB:
                sock.subscribe(b"")
            sock.connect(endpoint)
            intruders.append((name, sock))
    for name, sock in intruders:
        if sock.type == zmq.DEALER:
            hello = protocol.make("HELLO", "agent-good", hostname="h", heartbeat=5.0)
            frames = (protocol.encode(hello) if name == "agents" else
                      protocol.encode_control(protocol.make("PEERS", "cli")))
            try:
                sock.send_multipart(frames, zmq.NOBLOCK)
            except zmq.Again:         # never connected: as expected
                pass

    # legitimate clients on every socket are served meanwhile
    good = Agent(zctx, ep["agents"], "agent-good", agent_cert, keys)
    good.welcome()
    sinks = {k: backend_pull(zctx, v, sink_cert, keys) for k, v in ep["sinks"].items()}
    tail = zctx.socket(zmq.SUB)
    tail.linger = 0
    security.client(tail, sink_cert, keys.router)
    tail.subscribe(protocol.topic("NOTIFY", "agent-good"))
    tail.connect(ep["tail"])
    still_relayed(good, sinks["alerting"], "served")
    deadline = time.monotonic() + 10
    while not tail.poll(50):
        assert time.monotonic() < deadline, "nothing published on the tail"
        good.send("NOTIFY", severity="info", text="for the tail")
    assert protocol.decode_tail(tail.recv_multipart()).uuid == "agent-good"
    good.send("REGISTER", name="svc", plugins=[])
    recv_until(sinks["registry"], lambda f: f[1].startswith(b"REGISTER/agent-good/"),
               what="REGISTER on registry")
    recv_until(sinks["history"], lambda f: f[1].startswith(b"NOTIFY/agent-good/"),
               what="NOTIFY on history")
    metrics = stats_from(sinks["graphite"], lambda m: m.get("router.refused.handshake", 0)
                         >= len(everything))
    no_internal_errors(metrics)
    # no intruder got anything: not an answer, not a relayed or published message
    leaked = [name for name, sock in intruders if sock.poll(0)]
    assert not leaked, f"plain or misconfigured clients received data on {leaked}"
    grown = rss(r) - before
    assert grown < 30 * MiB, f"router RSS grew by {grown / MiB:.1f} MiB"
    assert r["proc"].alive()


# ---------------------------------------------------------------- a flood from one agent

def test_a_flood_is_rate_limited_while_another_agent_is_fully_served(fleet, zctx, keys):
    flood_cert, _ = keys.mint("agent", "flood", "agent-flood")
    calm_cert, _ = keys.mint("agent", "calm", "agent-calm")
    sink_cert, _ = keys.mint("backend", "sink")
    r = secure_router(fleet, keys, limits={"rate": 200.0, "burst": 200.0})
    ep = r["endpoints"]
    alerting = backend_pull(zctx, ep["sinks"]["alerting"], sink_cert, keys)
    graphite = backend_pull(zctx, ep["sinks"]["graphite"], sink_cert, keys)
    flood = Agent(zctx, ep["agents"], "agent-flood", flood_cert, keys)
    calm = Agent(zctx, ep["agents"], "agent-calm", calm_cert, keys)
    flood.welcome()
    calm.welcome()
    still_relayed(calm, alerting, "warm-up")
    stats_from(graphite, lambda m: True)
    before = rss(r)

    flood_frames = protocol.encode(protocol.make("NOTIFY", "agent-flood", severity="info",
                                                 text="x" * 500))
    expected, got, flooded = set(), set(), 0

    def drain_alerting():
        while alerting.poll(0):
            msg = protocol.decode_relayed(alerting.recv_multipart())
            if msg.uuid == "agent-calm":
                got.add(msg.message.msg_id)

    # 100 known NOTIFYs at about 50/s (a quarter of the limit) during a flood as fast as
    # the flooding DEALER can queue them
    next_calm = time.monotonic()
    while len(expected) < 100:
        now = time.monotonic()
        if now >= next_calm:
            expected.add(calm.send("NOTIFY", severity="error",
                                   text=f"calm {len(expected)}").msg_id)
            next_calm = now + 0.02
        for _ in range(200):
            try:
                flood.sock.send_multipart(flood_frames, zmq.NOBLOCK)
                flooded += 1
            except zmq.Again:
                break
        drain_alerting()
        wait = next_calm - time.monotonic()
        if wait > 0:                       # the paced sender waits for its next send
            time.sleep(min(0.002, wait))
    deadline = time.monotonic() + 10
    while not expected <= got and time.monotonic() < deadline:
        if alerting.poll(100):
            drain_alerting()
    assert expected <= got, f"{len(expected - got)} of the calm agent's NOTIFYs were lost"
    metrics = stats_from(graphite, lambda m: m.get("router.rate_limited", 0) >= flooded // 2,
                         timeout=20)
    print(f"flooded {flooded}, rate limited {metrics['router.rate_limited']}, "
          f"relayed NOTIFY {metrics.get('router.received.NOTIFY')}")
    assert flooded >= 5000, f"the flood was only {flooded} messages"
    # what the flood got through is bounded by its bucket: burst + rate x duration
    assert metrics["router.received.NOTIFY"] < 0.5 * flooded, metrics
    assert metrics["router.agents"] == 2
    no_internal_errors(metrics)
    err = recv_until(flood.sock, rate_limited, what="429")
    assert protocol.decode(err).body["status"] == protocol.RATE_LIMITED
    grown = rss(r) - before
    assert grown < 30 * MiB, f"router RSS grew by {grown / MiB:.1f} MiB"
    assert r["proc"].alive()


# ---------------------------------------------------------------- the agent's local intake

def test_intake_survives_truncated_oversized_and_replayed_local_input(fleet, routers, zctx):
    """What test_agent's intake tests do not cover: truncated multipart, oversized frames
    (over the body limit, and over the socket's message size), one local message replayed
    many times, and a burst of bad messages; the agent stays up and still ACKs."""
    from agent.client import Client

    r1 = routers()
    r1.auto_ack = True
    proc, path = start_agent(fleet, [r1])
    r1.until(lambda: intake_path(fleet).exists() and r1.of_type("HEARTBEAT"), what="agent up")
    sock = raw_intake(zctx, fleet)

    def answer(frames) -> protocol.Message:
        sock.send_multipart(frames)
        return protocol.decode(recv(sock))

    valid = protocol.encode(protocol.make("NOTIFY", "local", severity="info", text="t"))
    for frames in ([SIGNATURE], valid[:2], [*valid, b"extra"], [SIGNATURE, b"", b""]):
        assert answer(frames).body["status"] == protocol.BAD_REQUEST
    big = [SIGNATURE, b"NOTIFY", b" " * (protocol.MAX_BODY + 1)]
    assert answer(big).body["status"] == protocol.TOO_LARGE
    # over the socket's MAXMSGSIZE: the agent's libzmq drops the connection, nothing else
    sock.send_multipart([SIGNATURE, b"NOTIFY", b"x" * (protocol.MAX_BODY + 8192)])
    # a replay: the same msg_id handed over 200 times is spooled once, ACKed every time
    replay = protocol.make("NOTIFY", "local", severity="error", text="once")
    fresh = raw_intake(zctx, fleet)
    for _ in range(200):
        fresh.send_multipart(protocol.encode(replay))
    acks = 0
    deadline = time.monotonic() + 10
    while acks < 200 and time.monotonic() < deadline:
        r1.pump(0.0)
        if fresh.poll(50):
            reply = protocol.decode(fresh.recv_multipart())
            acks += reply.type == "ACK" and replay.msg_id in reply.body["msg_ids"]
    assert acks == 200
    # a burst of bad messages faster than the agent drains them
    for _ in range(3000):
        try:
            fresh.send_multipart([SIGNATURE, b"NOTIFY", b"{"], zmq.NOBLOCK)
        except zmq.Again:
            break
    assert proc.alive()
    with Client(config_path=str(path), timeout=10) as client:
        msg_id = client.notify("still here")
    r1.until(lambda: r1.copies(msg_id), what="a NOTIFY after the hostile input")
    r1.until(lambda: r1.copies(replay.msg_id), what="the replayed NOTIFY, relayed")
    r1.watch(1.0)                  # the router ACKs; the agent must not resend many copies
    assert len(r1.copies(replay.msg_id)) <= 3, len(r1.copies(replay.msg_id))
    r1.until(lambda: [s for s in r1.of_type("STATS")
                      if s.get("metrics", {}).get("agent.intake.errors", 0) >= 6],
             what="intake errors counted")
    assert proc.alive()
