"""The agent as a real process against fake routers (real sockets, 127.0.0.1).

The ``routers`` fixture makes them (:class:`support.agentrouter.AgentFacingRouter`): a ROUTER
bound on an ephemeral port, pumped from the test thread, that answers HELLO with WELCOME,
HEARTBEAT with HEARTBEAT, and ACKs NOTIFY/REGISTER when told.
No sleeps: every wait polls a condition with a deadline.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetwatch import protocol
from support.agentrouter import agent_uuid, raw_intake, start_agent
from support.fleet import intake_path, wait_for
from support.zmqio import recv


# ---------------------------------------------------------------- links

def test_hello_then_heartbeats_and_stats(fleet, routers):
    r1 = routers()
    proc, _ = start_agent(fleet, [r1])
    r1.until(lambda: len(r1.of_type("HEARTBEAT")) >= 2, what="two heartbeats")
    first_rid, first = r1.received[0]
    assert first.type == "HELLO"
    assert first.get("hostname") == "agent-host"
    assert first.get("role") == "agent" and first.get("heartbeat") == 0.3
    assert first.get("version")
    assert first.uuid == agent_uuid(fleet)
    # the routing id is a secret of this socket, not the uuid (SPEC 2, 7.3)
    assert len(first_rid) == 17 and first_rid[:1] == b"c" and first.uuid.encode() != first_rid
    register = r1.until(lambda: r1.of_type("REGISTER"), what="the agent's REGISTER")[0]
    assert register.get("name") == "agent"
    stats = r1.until(lambda: r1.of_type("STATS"), what="a STATS message")[0]
    metrics = stats.get("metrics")
    for key in ("cpu.percent", "memory.used_percent", "load.1", "agent.spool.size",
                "agent.spool.dropped", "agent.routers.alive"):
        assert key in metrics, key
    assert metrics["agent.routers.alive"] == 1
    assert stats.get("hostname") == "agent-host"
    assert proc.alive()


def test_learns_a_second_router_from_welcome(fleet, routers):
    r2 = routers("fake-2")
    r1 = routers("fake-1", peers=[r2.endpoint])
    start_agent(fleet, [r1])
    r1.until(lambda: r1.of_type("HELLO"), what="HELLO at r1")
    r2.until(lambda: r2.of_type("HELLO"), what="HELLO at the learned r2")
    r2.until(lambda: r2.of_type("HEARTBEAT"), what="heartbeats to r2")


def test_silent_router_is_dropped_and_reconnected(fleet, routers):
    r1 = routers()
    start_agent(fleet, [r1])
    r1.until(lambda: r1.of_type("HEARTBEAT"), what="heartbeats")
    r1.silent = True
    # 3 x 0.3 s of silence, then a reconnect after 0.1 s +-25 %: a new HELLO.
    started = time.monotonic()
    r1.until(lambda: len(r1.of_type("HELLO")) >= 2, timeout=5, what="a second HELLO")
    assert time.monotonic() - started >= 0.6
    beats = len(r1.of_type("HEARTBEAT"))
    r1.silent = False
    r1.until(lambda: len(r1.of_type("HEARTBEAT")) > beats + 2, what="heartbeats again")
    # answered again: no further reconnect while the next heartbeats flow (counted only now:
    # a reconnect already under way when the router spoke again is not the agent's fault)
    count, beats = len(r1.of_type("HELLO")), len(r1.of_type("HEARTBEAT"))
    r1.until(lambda: len(r1.of_type("HEARTBEAT")) > beats + 4, what="more heartbeats")
    assert len(r1.of_type("HELLO")) == count


def test_malformed_learned_endpoint_is_forgotten(fleet, routers):
    r1 = routers(peers=["tcp://no-port-here", "bogus://x"])
    proc, _ = start_agent(fleet, [r1])
    r1.until(lambda: len(r1.of_type("HEARTBEAT")) >= 3, what="heartbeats")
    assert proc.alive()
    assert "cannot connect to tcp://no-port-here" in proc.log()


def test_error_401_makes_the_agent_say_hello_again(fleet, routers):
    r1 = routers()
    start_agent(fleet, [r1])
    rid = r1.until(lambda: r1.agent_rid, what="the agent")
    r1.until(lambda: r1.of_type("HEARTBEAT"), what="heartbeats")
    r1.send(rid, protocol.error(protocol.HELLO_REQUIRED, ref="HEARTBEAT", uuid=r1.id))
    r1.until(lambda: len(r1.of_type("HELLO")) >= 2, timeout=2, what="HELLO after 401")


# ---------------------------------------------------------------- notifications

def test_notify_via_send_is_resent_until_acked(fleet, routers):
    r1 = routers()
    proc, path = start_agent(fleet, [r1])
    r1.until(lambda: intake_path(fleet).exists() and r1.of_type("HELLO"), what="agent up")
    res = fleet.cli("send", "notify", "--severity", "critical", "--config", str(path),
                    "disk", "on", "fire")
    msg_id = res.stdout.strip()
    assert len(msg_id) == 32
    r1.until(lambda: len(r1.copies(msg_id)) >= 3, what="the NOTIFY and two resends")
    first, *resends = r1.copies(msg_id)
    assert first.get("text") == "disk on fire" and first.get("severity") == "critical"
    assert first.uuid == agent_uuid(fleet) and not first.get("dup")
    assert all(m.get("dup") is True and m.get("retry") >= 1 for m in resends)
    assert [m.get("retry") for m in resends] == list(range(1, len(resends) + 1))
    r1.ack(r1.agent_rid, [msg_id])
    r1.pump(0.2)
    seen = len(r1.copies(msg_id))
    r1.watch(2.5)  # longer than max_backoff (2 s): an unacked message would come again
    assert len(r1.copies(msg_id)) == seen
    assert proc.alive()


def test_notify_via_client_lands_and_stops_after_ack(fleet, routers):
    from agent.client import Client

    r1 = routers()
    r1.auto_ack = True
    _, path = start_agent(fleet, [r1])
    r1.until(lambda: intake_path(fleet).exists() and r1.of_type("HELLO"), what="agent up")
    with Client(config_path=str(path), timeout=5) as client:
        msg_id = client.notify("backup failed", severity="error", source="backup")
        reg_id = client.register("backup", heartbeat=60)
        hb_id = client.heartbeat("backup")
        stat_id = client.stats({"backup.seconds": 12.5})
    r1.until(lambda: r1.copies(msg_id) and r1.copies(reg_id) and r1.copies(hb_id)
             and r1.copies(stat_id), what="all four messages")
    notify = r1.copies(msg_id)[0]
    assert notify.get("source") == "backup" and notify.uuid == agent_uuid(fleet)
    assert r1.copies(stat_id)[0].get("metrics") == {"backup.seconds": 12.5}
    assert r1.copies(hb_id)[0].get("name") == "backup"
    r1.watch(1.5)
    assert len(r1.copies(msg_id)) == 1
    stats = r1.until(lambda: [s for s in r1.of_type("STATS")
                              if s.get("metrics", {}).get("agent.spool.size") == 0],
                     what="an empty spool reported")
    assert stats


def test_spool_survives_restart_with_same_uuid(fleet, routers):
    r1 = routers()
    proc, path = start_agent(fleet, [r1])
    r1.until(lambda: intake_path(fleet).exists() and r1.of_type("HELLO"), what="agent up")
    uuid = agent_uuid(fleet)
    first_rid = r1.received[0][0]
    msg_id = fleet.cli("send", "notify", "--config", str(path), "kept").stdout.strip()
    r1.until(lambda: r1.copies(msg_id), what="the NOTIFY")
    proc.signal(signal.SIGTERM)
    assert proc.popen.wait(5) == 0
    assert not intake_path(fleet).exists()
    before = len(r1.copies(msg_id))
    proc2 = fleet.start("agent-2", "agent", "--config", str(path))
    r1.until(lambda: len(r1.copies(msg_id)) > before, what="the NOTIFY after restart")
    rid, msg = [(rid, m) for rid, m in r1.received if m.body.get("msg_id") == msg_id][-1]
    assert uuid == msg.uuid == agent_uuid(fleet)
    assert rid != first_rid                     # a new process, a new secret routing id
    assert msg.get("dup") is True
    r1.auto_ack = True
    r1.until(lambda: [s for s in r1.of_type("STATS")
                      if s.get("metrics", {}).get("agent.spool.size") == 0],
             what="the spool emptied by ACKs")
    assert proc2.alive()


def test_resend_prefers_another_live_router(fleet, routers):
    r1, r2 = routers("fake-1"), routers("fake-2")
    _, path = start_agent(fleet, [r1, r2])

    def both_up():
        r1.pump(0.01)
        r2.pump(0.01)
        return intake_path(fleet).exists() and r1.of_type("HEARTBEAT") and r2.of_type("HEARTBEAT")
    wait_for(both_up, what="both routers alive")
    msg_id = fleet.cli("send", "notify", "--config", str(path), "twice").stdout.strip()

    def copies():
        r1.pump(0.01)
        r2.pump(0.01)
        seen = [(m.get("retry", 0), name) for name, r in (("r1", r1), ("r2", r2))
                for m in r.copies(msg_id)]
        return sorted(seen) if len(seen) >= 3 else None
    seen = wait_for(copies, what="three copies")
    path_taken = [name for _, name in seen[:3]]
    assert path_taken[0] != path_taken[1] != path_taken[2]


def test_spool_overflow_is_reported(fleet, routers):
    r1 = routers()
    _, path = start_agent(fleet, [r1], spool={"max_messages": 3, "ack_timeout": 5.0})
    r1.until(lambda: intake_path(fleet).exists() and r1.of_type("HELLO"), what="agent up")
    for i in range(5):
        fleet.cli("send", "notify", "--config", str(path), f"n{i}")
    warn = r1.until(lambda: [m for m in r1.of_type("NOTIFY") if m.get("severity") == "warning"
                             and m.get("text", "").startswith("spool full: ")],
                    what="the spool-full notification")[0]
    assert warn.get("source") == "agent"
    r1.until(lambda: [s for s in r1.of_type("STATS")
                      if s.get("metrics", {}).get("agent.spool.dropped", 0) >= 2],
             what="agent.spool.dropped in STATS")


def test_stats_buffered_while_no_router_then_bounded(fleet, routers):
    r1 = routers()
    r1.silent = True
    proc, _ = start_agent(fleet, [r1], stats_interval=0.1, stats_buffer=2,
                          heartbeat_interval=0.5)
    r1.until(lambda: r1.of_type("HELLO"), what="HELLO")
    # collections while no router is alive, until the buffer of 2 dropped its oldest (by
    # the agent's own word, not a second's wait: a loaded machine collected fewer)
    wait_for(lambda: "oldest STATS/HEARTBEAT dropped" in proc.log(), 30, 0.1,
             what="the agent's STATS buffer full")
    assert not r1.of_type("STATS")
    r1.silent = False
    r1.until(lambda: [s for s in r1.of_type("STATS")
                      if s.get("metrics")["agent.routers.alive"] == 1],
             what="a STATS collected with the router alive")
    alive = [s.get("metrics")["agent.routers.alive"] for s in r1.of_type("STATS")]
    buffered = alive[:alive.index(1)]
    # collections while no router was alive, of which only the 2 newest messages kept: these
    # STATS (a HEARTBEAT, buffered with them, may be the other one: a loaded machine's)
    assert 1 <= len(buffered) <= 2, alive
    assert r1.of_type("STATS")[len(buffered)].get("metrics")["agent.stats.dropped"] > 0


# ---------------------------------------------------------------- commands

def test_once_prints_json_metrics(fleet):
    path = fleet.agent_config([{"endpoints": {"agents": "tcp://127.0.0.1:9"}}])
    res = fleet.cli("agent", "--once", "--config", str(path))
    metrics = json.loads(res.stdout)
    for key in ("cpu.percent", "memory.used_percent", "memory.total", "load.1",
                "uptime.seconds", "procs.count"):
        assert key in metrics, key
    assert any(k.startswith("disk.") and k.endswith(".used_percent") for k in metrics)
    assert not (fleet.root / "agent-state" / "uuid").exists()  # --once touches no state


def test_send_without_agent_exits_69_quickly(fleet):
    path = fleet.agent_config([{"endpoints": {"agents": "tcp://127.0.0.1:9"}}])
    started = time.monotonic()
    res = fleet.cli("send", "notify", "--config", str(path), "--timeout", "2", "hello",
                    check=False)
    assert res.returncode == 69
    assert time.monotonic() - started < 5
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "no agent answering on ipc://" in lines[0] and "fleetwatch agent" in lines[0]


def test_send_to_a_dead_agent_fails_at_once(fleet, routers):
    r1 = routers()
    proc, path = start_agent(fleet, [r1])
    r1.until(lambda: intake_path(fleet).exists(), what="intake socket")
    proc.kill()  # SIGKILL leaves the socket file behind
    assert intake_path(fleet).exists()
    started = time.monotonic()
    res = fleet.cli("send", "heartbeat", "--config", str(path), "job", check=False)
    assert res.returncode == 69 and "no agent answering" in res.stderr
    assert time.monotonic() - started < 4  # not the 5 s timeout


def test_send_bad_value_exits_2(fleet):
    path = fleet.agent_config([{"endpoints": {"agents": "tcp://127.0.0.1:9"}}])
    res = fleet.cli("send", "stat", "--config", str(path), "x.y", "many", check=False)
    assert res.returncode == 2
    assert "not a number" in res.stderr


@pytest.mark.parametrize("extra, key", [
    ({"heartbeat_intervall": 1}, "heartbeat_intervall"),
    ({"liveness": "three"}, "liveness"),
    ({"spool": {"ack_timeout": "soon"}}, "spool.ack_timeout"),
    ({"collectors": ["cpu", "gpu"]}, "collectors"),
    ({"routers": ["r1:5555"]}, "routers"),
    ({"routers": []}, "routers"),
])
def test_bad_config_exits_78_naming_file_and_key(fleet, extra, key):
    extra = dict(extra)
    endpoints = extra.pop("routers", ["tcp://127.0.0.1:9"])
    path = fleet.agent_config([{"endpoints": {"agents": e}} for e in endpoints], **extra)
    res = fleet.cli("agent", "--config", str(path), check=False)
    assert res.returncode == 78
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    assert str(path) in lines[0] and key in lines[0]


def test_new_uuid_keeps_the_old_one(fleet):
    path = fleet.agent_config([{"endpoints": {"agents": "tcp://127.0.0.1:9"}}])
    first = fleet.cli("agent", "--new-uuid", "--config", str(path)).stdout
    old = agent_uuid(fleet)
    second = fleet.cli("agent", "--new-uuid", "--config", str(path)).stdout
    assert "(none)" in first and old in second
    assert agent_uuid(fleet) != old
    assert (fleet.root / "agent-state" / "uuid.old").read_text().strip() == old


# ---------------------------------------------------------------- hostile input

def test_intake_is_private_and_answers_bad_input(fleet, routers, zctx):
    r1 = routers()
    start_agent(fleet, [r1])
    r1.until(lambda: intake_path(fleet).exists(), what="intake socket")
    assert stat.S_IMODE(os.stat(intake_path(fleet)).st_mode) == 0o600
    sock = raw_intake(zctx, fleet)
    bad = protocol.make("NOTIFY", "local", severity="bad", text="x")
    sock.send_multipart(protocol.encode(bad))
    reply = protocol.decode(recv(sock))
    assert reply.type == "ERROR" and reply.get("status") == 400
    sock.send_multipart([protocol.SIGNATURE_PREFIX + b"\x02", b"NOTIFY", b"{}"])
    assert protocol.decode(recv(sock)).get("status") == 505
    sock.close()


def test_garbage_does_not_kill_the_agent(fleet, routers, zctx):
    from agent.client import Client

    r1 = routers()
    proc, path = start_agent(fleet, [r1])
    r1.until(lambda: intake_path(fleet).exists() and r1.of_type("HEARTBEAT"), what="agent up")
    rid = r1.agent_rid
    sock = raw_intake(zctx, fleet)
    frame = st.binary(max_size=80) | st.sampled_from(
        [protocol.SIGNATURE, b"NOTIFY", b"STATS", b"ACK", b"WELCOME", b"{}", b"[]", b"null",
         b'{"msg_id":"x","uuid":"y","ts":1,"msg_ids":[1]}'])

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.lists(frame, min_size=1, max_size=6), st.booleans())
    def throw(frames, at_router):
        if at_router:
            r1.sock.send_multipart([rid, *frames])
        else:
            sock.send_multipart(frames)

    throw()
    sock.close()
    r1.pump(0.3)
    assert proc.alive()
    with Client(config_path=str(path), timeout=5) as client:
        msg_id = client.notify("still here")
    r1.until(lambda: r1.copies(msg_id), what="a NOTIFY after the garbage")
    r1.until(lambda: [s for s in r1.of_type("STATS")
                      if s.get("metrics", {}).get("agent.intake.errors", 0) > 0],
             what="intake errors counted")
    assert proc.alive()
