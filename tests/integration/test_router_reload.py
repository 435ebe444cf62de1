"""SIGHUP on the router (router/reload.py): its policy and apply on a real, bound relay, then
real router processes: a live rate limit and log level, a broken file, a changed bind
endpoint, and RELOADING=1 / READY=1 on a real datagram NOTIFY_SOCKET."""

from __future__ import annotations

import dataclasses
import logging
import signal

import pytest
import yaml
import zmq

from fleetwatch import protocol
from fleetwatch.config import build
from fleetwatch.reload import LIVE, RESTART, action
from router import reload
from router.config import RouterConfig
from router.relay import Relay
from support.fleet import refused_twice, wait_for
from support.notifysocket import NotifySocket
from support.routerclients import FakeAgent, rate_limited, relay_until_received
from support.zmqio import pull, recv_until, stats_from

pytestmark = pytest.mark.timeout(60)

LIVE_PATHS = {"log_level", "stats_interval", "expiry_intervals", "peers", "limits.rate",
              "limits.burst", "limits.hellos_per_second", "limits.tail_topics",
              "limits.drain", "limits.careful_seconds"}


def leaves(cls, prefix: str = "") -> list[str]:
    out = []
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        default = f.default_factory() if f.default is dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default) and f.name != "security":
            out += leaves(type(default), path + ".")
        else:
            out.append(path)
    return out


def test_policy_field_by_field():
    """Every setting is either live or kept until restart, as router/reload.py says."""
    got = {path: action(path, reload.POLICY) for path in leaves(RouterConfig)}
    assert {p for p, a in got.items() if a == LIVE} == LIVE_PATHS
    assert {p for p, a in got.items() if a != LIVE} == {
        "id", "bind.agents", "bind.control", "bind.tail", "bind.sinks", "advertise_host",
        "routes", "durable", "security", "ready_file", "limits.max_message_bytes", "limits.sink_hwm",
        "limits.agent_hwm", "limits.tail_hwm", "max_agents", "nice", "mesh.seeds", "mesh.interval",
        "mesh.expire_intervals", "mesh.fanout", "mesh.forget_after", "mesh.key", "bind.sites",
        "upstream",
        "site.interval", "site.expire_intervals", "site.max_agents", "site.buffer_messages",
        "site.spool_dir", "site.spool_bytes", "site.key"}
    assert action("security.agent_keys", reload.POLICY) == RESTART


LOCAL = {"id": "r-unit", "bind": {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                                  "tail": "tcp://127.0.0.1:*",
                                  "sinks": {"alerting": "tcp://127.0.0.1:*"}},
         "routes": {"NOTIFY": ["alerting"]}}


@pytest.fixture
def relay(tmp_path):
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(LOCAL))
    r = Relay(build(RouterConfig, LOCAL), fqdn=lambda: "localhost")
    r.reloader = reload.reloader(r, str(path))
    r.bind()
    yield r, path
    r.close()


def rewrite(path, **changes):
    data = {**LOCAL, **changes}
    path.write_text(yaml.safe_dump(data))


def test_apply_reaches_every_live_value_and_keeps_the_rest(relay, caplog):
    r, path = relay
    peer, _ = r.peers.hello(b"rid-1", "a" * 32, "host", 5.0)
    peer.tokens = 4000.0
    rewrite(path, stats_interval=2.0, expiry_intervals=5.0, peers=["tcp://r2.example:5555"],
            bind={**LOCAL["bind"], "agents": "tcp://127.0.0.1:1"},
            limits={"rate": 3.0, "burst": 7.0, "hellos_per_second": 2.0, "tail_topics": 5,
                    "drain": 16, "careful_seconds": 1.5, "max_message_bytes": 1000})
    with caplog.at_level(logging.INFO, "fleetwatch.reload"):
        assert r.reloader.reload()
    assert r.config.stats_interval == 2.0 and r.config.limits.tail_topics == 5
    assert r.peers.expiry_intervals == 5.0
    assert (r.admission.rate, r.admission.burst, r.peers.burst) == (3.0, 7.0, 7.0)
    assert peer.tokens == 7.0                      # cut to the new burst at once
    assert r.admission.pacer.rate == 2.0 and r.admission.pacer.tokens <= 2.0
    assert r.drain == 16 and r.careful_for == 1.5
    assert r.routers == [r.endpoints["agents"], "tcp://r2.example:5555"]
    assert r.welcome(False).body["routers"] == r.routers
    # kept until restart: the bound endpoint, the socket options
    assert r.config.bind.agents == "tcp://127.0.0.1:*" and r.max_body == 256 * 1024
    assert r.config.limits.max_message_bytes == 256 * 1024
    warnings = sorted(m for m in caplog.messages if "takes effect at restart" in m)
    assert warnings == ["bind.agents changed: takes effect at restart",
                        "limits.max_message_bytes changed: takes effect at restart"]
    metrics = r.counters.metrics(len(r.peers))
    assert metrics["router.config.reloads"] == 1 and metrics["router.config.reload_failed"] == 0


@pytest.mark.parametrize("text, problem", [
    ("limits: {rate: 0}\n", "limits.rate: expected a positive number"),
    ("stats_interval: 0\n", "stats_interval: expected a positive number"),
    ("limits: {rat: 5}\n", "limits.rat: unknown setting"),
    ("limits: [\n", "is not valid YAML"),
])
def test_a_bad_file_changes_nothing_and_is_counted(relay, caplog, text, problem):
    r, path = relay
    before = r.config
    path.write_text(yaml.safe_dump(LOCAL) + text)
    with caplog.at_level(logging.ERROR, "fleetwatch.reload"):
        assert not r.reloader.reload()
    assert r.config is before and r.admission.rate == 1000.0
    error, = caplog.records
    assert problem in error.message and "keeping the running config" in error.message
    metrics = r.counters.metrics(0)
    assert metrics["router.config.reload_failed"] == 1 and metrics["router.config.reloads"] == 0


def test_sighup_frames_allowlists_and_config_with_reloading_and_ready(relay):
    r, path = relay
    said = []

    class Notifier:
        def reloading(self):
            said.append(("RELOADING", r.config.limits.rate))

        def ready(self):
            said.append(("READY", r.config.limits.rate))
    r.notifier = Notifier()
    rewrite(path, limits={"rate": 5.0})
    reload.sighup(r)
    assert said == [("RELOADING", 1000.0), ("READY", 5.0)]


# ---------------------------------------------------------------- real router processes

def router_file(fleet, name: str = "router-1"):
    path = fleet.root / f"{name}.yaml"
    return path, yaml.safe_load(path.read_text())


def flood(agent: FakeAgent, n: int) -> None:
    frames = protocol.encode(protocol.make("NOTIFY", agent.uuid, severity="info", text="x"))
    for _ in range(n):
        agent.sock.send_multipart(frames)


def attached(fleet, zctx, **router):
    """A router started with ``router`` settings, PULLs on its alerting and graphite sink
    endpoints, and a raw agent attached whose first NOTIFY was relayed."""
    r = fleet.router(**router)
    alerting = pull(zctx, r["endpoints"]["sinks"]["alerting"])
    graphite = pull(zctx, r["endpoints"]["sinks"]["graphite"])
    agent = FakeAgent(zctx, r["endpoints"]["agents"])
    agent.hello()
    relay_until_received(agent, alerting)
    return r, r["proc"], alerting, graphite, agent


def test_sighup_tightens_the_rate_limit_lowers_the_log_level_and_warns_of_bind(fleet, zctx):
    """stats_interval 30 s at start: STATS within seconds after SIGHUP show the loop took the
    new interval; the new rate limit drops a raw DEALER's flood, counted in those STATS."""
    r, proc, alerting, graphite, agent = attached(fleet, zctx, stats_interval=30.0)
    flood(agent, 300)                                  # default limits: all relayed
    for i in range(300):
        recv_until(alerting, lambda f: True, what=f"NOTIFY #{i}")
    assert proc.log().count(" attached, heartbeat") == 1

    path, cfg = router_file(fleet)
    cfg.update(stats_interval=0.3, log_level="WARNING",
               limits={"rate": 1.0, "burst": 10.0})
    cfg["bind"]["agents"] = "tcp://127.0.0.1:1"
    path.write_text(yaml.safe_dump(cfg))
    proc.signal(signal.SIGHUP)
    wait_for(lambda: "bind.agents changed: takes effect at restart" in proc.log(), 10,
             what="the restart warning")
    before = stats_from(graphite, lambda m: m.get("router.config.reloads") == 1, timeout=5)
    assert before["router.rate_limited"] == 0 and before["router.config.reload_failed"] == 0

    flood(agent, 300)
    err = recv_until(agent.sock, rate_limited, what="429")
    assert protocol.decode(err).body["status"] == protocol.RATE_LIMITED
    after = stats_from(graphite, lambda m: m["router.rate_limited"] >= 280, timeout=10)
    assert after["router.received.NOTIFY"] - before["router.received.NOTIFY"] <= 20, after
    assert "above its rate limit (1/s, burst 10)" in proc.log()

    # the level is WARNING now: a new agent's attachment (INFO) is not logged any more
    FakeAgent(zctx, r["endpoints"]["agents"]).hello()
    assert proc.log().count(" attached, heartbeat") == 1
    assert "config reloaded from" not in proc.log()              # INFO too
    assert proc.alive()


def test_a_broken_file_on_sighup_keeps_the_router_relaying(fleet, zctx):
    r, proc, alerting, graphite, agent = attached(fleet, zctx, stats_interval=0.3)
    path, _ = router_file(fleet)
    good = path.read_text()
    refused_twice(proc, path, [
        (good + "limits: {rate: -5}\n", "limits.rate: expected a positive number"),
        (good.replace("stats_interval: 0.3", "stats_interval: soon"),
         "stats_interval: expected a number")])
    errors = [line for line in proc.log().splitlines() if " ERROR " in line]
    assert len(errors) == 2, errors                    # one line each

    stats = stats_from(graphite, lambda m: m.get("router.config.reload_failed") == 2)
    assert stats["router.config.reloads"] == 0
    sent = agent.notify("still relayed")
    got = recv_until(alerting, lambda f: b"still relayed" in f[-1], what="the NOTIFY")
    assert protocol.decode_relayed(got).message == sent
    assert proc.alive()


def test_sighup_notifies_reloading_then_ready_for_good_and_broken_files(fleet):
    sd = NotifySocket()
    try:
        listener = sd.listener
        ready = fleet.root / "router-n.ready.json"
        cfg = {"id": "router-n", "ready_file": str(ready),
               "bind": {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                        "tail": "tcp://127.0.0.1:*",
                        "sinks": {"alerting": "tcp://127.0.0.1:*"}},
               "routes": {"NOTIFY": ["alerting"]}}
        path = fleet.write("router-n.yaml", cfg)
        proc = fleet.start("router-n", "router", "--config", str(path),
                           env={"NOTIFY_SOCKET": sd.path})
        listener.first("READY", 20)

        def reload_once(n: int) -> dict:
            proc.signal(signal.SIGHUP)
            wait_for(lambda: len(listener.times("READY")) == n + 1, 10, what=f"READY #{n + 1}")
            said = [fields for _, fields, _ in listener.got]
            assert [next(iter(f)) for f in said[-2:]] == ["RELOADING", "READY"], said
            return said[-2]

        fleet.write("router-n.yaml", {**cfg, "limits": {"rate": 5.0}, "id": "renamed"})
        reloading = reload_once(1)
        assert reloading["RELOADING"] == "1" and int(reloading["MONOTONIC_USEC"]) > 0
        wait_for(lambda: "applied limits.rate" in proc.log(), 5, what="the reload's log line")
        assert "id changed: takes effect at restart" in proc.log()
        path.write_text("limits: {rate: fast}\n")
        reload_once(2)
        wait_for(lambda: "config reload failed" in proc.log(), 5, what="the refusal")
        assert proc.alive()
        proc.signal(signal.SIGTERM)
        assert proc.popen.wait(15) == 0, proc.log()
        assert "Traceback" not in proc.log()
    finally:
        sd.close()


def test_tail_cap_is_live(fleet, zctx):
    """limits.tail_topics lowered by SIGHUP: the next subscription above it is counted."""
    r = fleet.router(stats_interval=0.3)
    graphite = pull(zctx, r["endpoints"]["sinks"]["graphite"])
    path, cfg = router_file(fleet)
    cfg["limits"] = {"tail_topics": 1}
    path.write_text(yaml.safe_dump(cfg))
    r["proc"].signal(signal.SIGHUP)
    stats_from(graphite, lambda m: m.get("router.config.reloads") == 1)
    sub = zctx.socket(zmq.SUB)
    sub.linger = 0
    sub.connect(r["endpoints"]["tail"])
    for topic in (b"NOTIFY/", b"STATS/", b"RESULT/"):
        sub.subscribe(topic)
    stats = stats_from(graphite, lambda m: m["router.tail.topics"] >= 3)
    assert stats["router.tail.excess"] == 2
