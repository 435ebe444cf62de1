"""Real ``fleetwatch sink`` processes against a fake router in the test (tests/support/fakerouter.py).

The fake router binds control, PUSH and tail sockets on 127.0.0.1 ephemeral ports, answers
HELLO/PEERS, and records every ACK; the sink under test is the real command. One end-to-end
test at the end uses the real router and is skipped until ``router.main`` exists.
"""

from __future__ import annotations

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from support.fakerouter import BackendFacingRouter, relayed
from support.fleet import wait_for
from support.zmqio import recv
from fleetwatch import protocol

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(90)

UUID = "3f2c" + "0" * 28


@pytest.fixture
def router():
    fake = BackendFacingRouter("fake-1")
    yield fake
    fake.close()


def notified(fleet, operator) -> list[str]:
    """The msg_ids of the notifications ``fleetwatch alerts`` lists, oldest first."""
    return [a["msg_id"] for a in reversed(fleet.alerts(operator)) if a["kind"] == "notify"]


def committed_at_ack(fleet):
    """An on_ack hook: how many of the ACKed msg_ids are committed when the ACK arrives.

    It reads the table itself: the observation is of that very moment, and a command started
    then would see rows committed after the ACK as well."""
    def hook(target, msg_ids):
        rows = fleet.db_rows("SELECT msg_id FROM notifications")
        return len({m for (m,) in rows} & set(msg_ids)), len(msg_ids)
    return hook


def welcomed(fake, n=1):
    return len({r["ident"] for r in fake.received("HELLO")}) >= n


def published(router) -> dict[bytes, dict[str, int]]:
    """Per sink (its control socket), the counters of the last STATS it sent: what a real
    router relays to its tail and to the graphite and history sinks (``sink.`` left off)."""
    return {r["ident"]: {k.removeprefix("sink."): v for k, v in r["body"]["metrics"].items()}
            for r in router.received("STATS")}


def counters(router) -> dict[str, int]:
    """The counters of the last STATS the test's one sink sent."""
    return next(iter(published(router).values()), {})


def test_notify_is_recorded_once_and_acked_after_commit(fleet, router):
    router.on_ack = committed_at_ack(fleet)
    sink = fleet.sink("alerting", [router.info], stats_interval=0.2)
    op = fleet.operator_config([router.info])
    wait_for(lambda: welcomed(router), what="the sink's HELLO")
    hello = router.received("HELLO")[0]["body"]
    assert hello["role"] == "sink" and hello["sink"] == "alerting"

    msg, frames = relayed("NOTIFY", UUID, severity="error", text="disk on fire", source="df")
    router.push("alerting", frames)
    acks = wait_for(lambda: router.received("ACK"), what="the ACK")
    assert acks[0]["target"] == UUID
    assert acks[0]["body"]["msg_ids"] == [msg.msg_id]
    assert acks[0]["body"]["sink"] == "alerting"
    assert acks[0]["observed"] == (1, 1), "ACK sent before the row was committed"

    # A resend (duplicate msg_id) is ACKed again and not written again.
    router.push("alerting", protocol.encode_relayed(protocol.resend(msg, 1), UUID, "fake-1"))
    wait_for(lambda: len(router.received("ACK")) == 2, what="the second ACK")
    assert router.acked() == [msg.msg_id, msg.msg_id]
    assert [(a["msg_id"], a["uuid"], a["severity"], a["text"], a["source"], a["router"])
            for a in fleet.alerts(op)] == [
        (msg.msg_id, UUID, "error", "disk on fire", "df", "fake-1")]
    final = wait_for(lambda: (lambda c: c.get("acked", 0) >= 2 and c)(counters(router)),
                     what="both ACKs in the sink's STATS")
    assert final["written"] == 1 and final["duplicate"] == 1 and final["acked"] == 2, final

    sink.signal(15)
    sink.popen.wait(10)
    assert sink.popen.returncode == 0, sink.log()


def test_register_fills_the_registry_and_is_acked(fleet, router):
    # The table itself: what is committed the moment the ACK arrives (see committed_at_ack).
    router.on_ack = lambda target, ids: len(fleet.db_rows(
        "SELECT name FROM plugins WHERE uuid = ?", (target,)))
    fleet.sink("registry", [router.info])
    wait_for(lambda: welcomed(router), what="the sink's HELLO")
    _, hello = relayed("HELLO", UUID, hostname="web-1", heartbeat=1.0, version="0.1.0")
    reg, frames = relayed("REGISTER", UUID, name="agent", plugins=["check_disk", "check_load"])
    router.push("registry", hello)
    router.push("registry", frames)
    acks = wait_for(lambda: router.received("ACK"), what="the REGISTER ACK")
    assert [(a["target"], a["body"]["msg_ids"]) for a in acks] == [(UUID, [reg.msg_id])]
    assert acks[0]["observed"] == 2
    status = fleet.status(fleet.operator_config([router.info]))
    assert [(a["uuid"], a["hostname"], a["version"]) for a in status["agents"]] == [
        (UUID, "web-1", "0.1.0")]
    assert [(c["uuid"], c["plugin"], c["state"]) for c in status["checks"]] == [
        (UUID, "check_disk", "PENDING"), (UUID, "check_load", "PENDING")]
    # status shows the routers an agent is attached to now (their PEERS answers), not the
    # registry's record of the routers it came through: no command prints that.
    assert fleet.db_rows("SELECT router FROM agent_routers") == [("fake-1",)]


ENVELOPE = f"NOTIFY/{UUID}/fake-1".encode()
FRAME = st.binary(max_size=64) | st.sampled_from(
    [protocol.SIGNATURE, b"FWP\x02", b"NOTIFY", b"REGISTER", UUID.encode(), b"{}", b"\xff" * 65,
     ENVELOPE, ENVELOPE + b"/x", b"NOTIFY/" + UUID.encode(), b"NOTIFY//fake-1", b"//",
     f"REGISTER/{UUID}/fake-1".encode(), b"fake-1"])


def test_garbage_frames_do_not_stop_the_sink(fleet, router):
    sink = fleet.sink("alerting", [router.info], stats_interval=0.2)
    op = fleet.operator_config([router.info])
    wait_for(lambda: welcomed(router), what="the sink's HELLO")
    sig = protocol.SIGNATURE

    def valid_body(uuid=UUID):
        return protocol.encode_body(protocol.make("NOTIFY", uuid, severity="info", text="no"))
    nasty = [
        [sig, ENVELOPE],                                                       # a frame short
        [b"FWP\x02", ENVELOPE, b"{}"],                                         # future version
        [sig, ENVELOPE, b"x" * 300_000],                                       # too large
        [sig, ENVELOPE, valid_body("intruder")],                               # uuid mismatch
        [sig, ENVELOPE, b'{"msg_id": 1}'],
        # valid bodies in frames a router does not send: none may be written or ACKed
        [sig, b"NOTIFY", UUID.encode(), b"fake-1", valid_body()],              # old layout
        [ENVELOPE, sig, valid_body()],                                         # tail order
        [sig, valid_body(), ENVELOPE],                                         # body first
        [sig, b"NOTIFY/" + UUID.encode(), valid_body()],                       # 2-part envelope
        [sig, ENVELOPE + b"/x", valid_body()],                                 # 4-part envelope
        [sig, b"NOTIFY//fake-1", valid_body()],                                # empty uuid
        [sig, f"NOTIFY/{UUID}/".encode(), valid_body()],                       # empty router
        [sig, f"BOGUS/{UUID}/fake-1".encode(), valid_body()],                  # unknown type
        [sig, f"NOTIFY/{UUID}/fake-\u00e9".encode(), valid_body()],            # non-ASCII router
        [sig, b"NOTIFY/a b/fake-1", valid_body("a b")],                        # space in uuid
    ]
    for frames in nasty:
        router.push("alerting", frames)

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(FRAME, min_size=1, max_size=7))
    def push_garbage(frames):
        router.push("alerting", frames)
    push_garbage()

    msg, frames = relayed("NOTIFY", UUID, severity="warning", text="still here")
    router.push("alerting", frames)
    wait_for(router.acked, what="the valid message ACKed")     # after its commit
    assert notified(fleet, op) == [msg.msg_id]
    assert sink.alive(), sink.log()
    assert router.acked() == [msg.msg_id]
    wait_for(lambda: sum(v for k, v in counters(router).items() if k.startswith("bad_"))
             >= len(nasty), what="bad frames counted in the sink's STATS")


def test_two_sinks_share_the_work(fleet, router):
    a = fleet.sink("alerting", [router.info], name="sink-a", stats_interval=0.2)
    b = fleet.sink("alerting", [router.info], name="sink-b", stats_interval=0.2)
    op = fleet.operator_config([router.info])
    wait_for(lambda: router.pullers("alerting") == 2, what="both sinks pulling")
    sent = []
    for i in range(40):
        msg, frames = relayed("NOTIFY", f"agent-{i % 4}", severity="info", text=f"n{i}")
        router.push("alerting", frames)
        sent.append(msg.msg_id)
    wait_for(lambda: sorted(router.acked()) == sorted(sent), what="all 40 acked")
    assert sorted(notified(fleet, op)) == sorted(sent)              # ACKed after their commit

    def after_the_acks():
        """Both sinks' STATS once they count every ACK: each one's written is final then."""
        stats = published(router)
        return len(stats) == 2 and sum(c.get("acked", 0) for c in stats.values()) >= 40 \
            and stats
    stats = wait_for(after_the_acks, what="both sinks' STATS after the 40 ACKs")
    written = [c.get("written", 0) for c in stats.values()]
    assert sum(written) == 40 and all(written), written
    for proc in (a, b):
        proc.signal(15)
        proc.popen.wait(10)
        assert proc.popen.returncode == 0, proc.log()
    senders = {r["ident"] for r in router.received("ACK")}
    assert len(senders) == 2, "each sink ACKs through its own control socket"


def test_sink_started_before_its_router_connects_when_it_appears(fleet, tmp_path):
    control = f"ipc://{tmp_path / 'control.sock'}"
    sink = fleet.sink("alerting", [{"endpoints": {"control": control}}])
    # Its log is all a sink without a router shows.
    wait_for(lambda: "started" in sink.log(), what="the sink started")
    late = BackendFacingRouter("late-1", control=control)
    try:
        wait_for(lambda: welcomed(late), what="the HELLO to the late router")
        msg, frames = relayed("NOTIFY", UUID, router="late-1", severity="critical", text="late")
        late.push("alerting", frames)
        wait_for(lambda: late.acked() == [msg.msg_id], what="the ACK from the late router")
        assert notified(fleet, fleet.operator_config([late.info])) == [msg.msg_id]
    finally:
        late.close()


def test_error_404_from_the_router_is_counted_not_fatal(fleet, router):
    router.ack_error = protocol.NOT_FOUND
    sink = fleet.sink("alerting", [router.info], stats_interval=0.2)
    wait_for(lambda: welcomed(router), what="the sink's HELLO")
    msg, frames = relayed("NOTIFY", UUID, severity="info", text="agent left")
    router.push("alerting", frames)
    wait_for(lambda: counters(router).get("router_error_404") == 1,
             what="the 404 counted in the sink's STATS")
    assert "agent gone" in sink.log() and sink.alive()
    assert notified(fleet, fleet.operator_config([router.info])) == [msg.msg_id]


def test_bad_sink_config_exits_78_with_one_line(fleet):
    path = fleet.write("sink-bad.yaml", {"routers": ["tcp://127.0.0.1:1"], "batchh": 3})
    res = fleet.cli("sink", "alerting", "--config", str(path), check=False)
    assert res.returncode == 78
    assert res.stderr.count("\n") == 1 and "batchh" in res.stderr
    res = fleet.cli("sink", "pigeon", "--config", str(path), check=False)
    assert res.returncode == 78


def test_end_to_end_with_the_real_router(fleet):
    """Real router, real sinks, this test speaking as an agent on the agents socket."""
    r = fleet.router()
    fleet.sink("alerting", [r])
    fleet.sink("registry", [r])
    ctx = zmq.Context.instance()
    agent = ctx.socket(zmq.DEALER)
    agent.linger = 0
    agent.setsockopt(zmq.ROUTING_ID, UUID.encode())
    agent.connect(r["endpoints"]["agents"])
    try:
        agent.send_multipart(protocol.encode(protocol.make(
            "HELLO", UUID, hostname="e2e-host", heartbeat=5.0, role="agent")))
        assert protocol.decode(recv(agent)).type == "WELCOME"
        msg = protocol.make("NOTIFY", UUID, severity="error", text="end to end")
        acked = []

        def ack_arrived():
            # Like an agent: resend until ACKed (the router drops while no sink is pulling).
            agent.send_multipart(protocol.encode(msg))
            while agent.poll(100):
                reply = protocol.decode(agent.recv_multipart())
                if reply.type == "ACK":
                    acked.extend(reply.body["msg_ids"])
            return msg.msg_id in acked
        wait_for(ack_arrived, 20, interval=0.1, what="the ACK through the real router")
        op = fleet.operator_config([r])
        assert notified(fleet, op) == [msg.msg_id]

        status = fleet.status(op)
        entry = next(a for a in status["agents"] if a["uuid"] == UUID)
        assert entry["alive"] and entry["routers"] == ["router-1"]
        assert entry["hostname"] == "e2e-host"
    finally:
        agent.close(0)


def test_results_become_the_latest_check_and_are_not_acked(fleet, router):
    fleet.sink("alerting", [router.info], stats_interval=0.2)
    # status shows the results of the checks an agent declared: the registry records those.
    fleet.sink("registry", [router.info])
    op = fleet.operator_config([router.info])
    wait_for(lambda: router.pullers("alerting") >= 1 and router.pullers("registry") >= 1,
             what="the sinks' PULLs")
    _, hello = relayed("HELLO", UUID, hostname="web-1", heartbeat=1.0, version="0.1.0")
    reg, frames = relayed("REGISTER", UUID, name="agent", plugins=["disk", "load"])
    router.push("registry", hello)
    router.push("registry", frames)
    wait_for(lambda: router.acked() == [reg.msg_id], what="the REGISTER ACK")

    def checks():
        return {c["plugin"]: (c["uuid"], c["status"], c["output"], c["command_id"],
                              c["last_run"], c["router"])
                for c in fleet.status(op)["checks"] if c["status"] is not None}
    perf = [{"label": "load1", "value": 0.5, "uom": "", "warn": "4", "crit": "8", "min": 0.0,
             "max": None}]
    _, new = relayed("RESULT", UUID, command_id="s:" + "a" * 24, plugin="load", status=1,
                     output="WARNING - load 5", perfdata=perf, started=2000.0, duration=0.1)
    _, old = relayed("RESULT", UUID, command_id="s:" + "b" * 24, plugin="load", status=0,
                     output="OK - load 0.1", started=1000.0)

    def handled(n: int):
        """Whether the alerting sink's STATS count ``n`` RESULTs (each batch is committed
        before the sink reports again)."""
        return lambda: any(c.get("alerting.result", 0) >= n for c in published(router).values())
    router.push("alerting", new)
    wait_for(handled(1), what="the first RESULT handled")
    router.push("alerting", old)                 # late: must not replace the newer one
    _, marker = relayed("RESULT", UUID, command_id="cli:" + "c" * 24, plugin="disk", status=0,
                        output="DISK OK")
    router.push("alerting", marker)              # after old in the same PUSH pipe
    wait_for(handled(3), what="the three RESULTs handled")
    shown = wait_for(lambda: (lambda c: "disk" in c and c)(checks()), interval=0.2,
                     what="the disk check in status")
    assert shown["load"] == (UUID, 1, "WARNING - load 5", "s:" + "a" * 24,
                             "1970-01-01T00:33:20.000Z", "fake-1")     # started=2000.0
    assert shown["disk"][:4] == (UUID, 0, "DISK OK", "cli:" + "c" * 24)
    assert shown["disk"][5] == "fake-1"
    assert router.acked() == [reg.msg_id], "a RESULT was ACKed"
