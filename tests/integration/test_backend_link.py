"""Back-ends whose keys are allowed after they start: a real router with CURVE on, the
registry sink and a scheduler started with back-end keys the router does not know yet.

libzmq does not retry a connection whose CURVE handshake the router refused (SPEC 7.4), so a
back-end must dial again by itself (:class:`fleetwatch.link.Link`). Once their keys are in
the router's allowlist directory, both must connect with no restart, as an operator sees
it: ``fleetwatch status --json`` shows the agent's check (the registry sink recorded its
REGISTER) answering a RUN of the scheduler (command id ``s:...``; the alerting sink, allowed
from the start, recorded the RESULT), and the sink's counters come through the router's tail.
"""

from __future__ import annotations

import shutil
import stat
from pathlib import Path

import pytest
import zmq

from support.fleet import agent_uuid_for, wait_for
from support.keys import Keys
from fleetwatch import protocol, security

pytest.importorskip("sqlalchemy")
pytest.importorskip("apscheduler")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PLUGIN = "tick"


def tick_plugin(root: Path) -> Path:
    folder = root / "plugins"
    folder.mkdir()
    script = folder / "check_tick"
    script.write_text("#!/bin/sh\necho 'TICK OK | ticks=1'\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


class Tail:
    """The router's tail as an operator's ``fleetwatch tail`` sees it, with an allowed key."""

    def __init__(self, ctx: zmq.Context, keys: Keys, secret: str, endpoint: str):
        self.sub = ctx.socket(zmq.SUB)
        self.sub.linger = 0
        own = security.read_certificate(secret, need_secret=True)
        security.client(self.sub, own, security.read_certificate(keys.router_public))
        self.sub.subscribe(protocol.topic("STATS"))
        self.sub.connect(endpoint)
        self.seen: list[protocol.Relayed] = []

    def pump(self) -> list[protocol.Relayed]:
        while self.sub.poll(20):
            self.seen.append(protocol.decode_tail(self.sub.recv_multipart()))
        return self.seen

    def router_refusals(self) -> int:
        """The router's latest ``router.refused.unknown_key`` (its own STATS)."""
        counts = [r.message.get("metrics", {}).get("router.refused.unknown_key", 0)
                  for r in self.pump() if r.message.type == "STATS"
                  and r.message.get("source") == "router"]
        return counts[-1] if counts else 0

    def from_sink(self, name: str) -> bool:
        return any(r.message.type == "STATS" and r.uuid == name for r in self.pump())


def allow(keys: Keys, secret: str) -> None:
    """Put the public half of the pending key ``secret`` into the back-end allowlist."""
    public = secret[:-len(security.SECRET_SUFFIX)] + security.PUBLIC_SUFFIX
    shutil.copy(public, keys.dir / "backends")


def test_a_scheduler_and_a_sink_connect_once_their_keys_are_allowed(fleet, zctx):
    keys = Keys(fleet.root)
    uuid = agent_uuid_for(fleet)
    agent_key, operator_key = keys.agent(uuid), keys.backend("operator")   # allowed at start
    alerting_key = keys.backend("sink-alerting")
    router = fleet.router(security=keys.router_security())
    op = fleet.write("fleetwatch.yaml", {
        "routers": [router["endpoints"]["control"]], "state_url": fleet.state_url,
        "timeout": 1.0, "security": keys.client(operator_key)})
    tail = Tail(zctx, keys, operator_key, router["endpoints"]["tail"])
    fleet.sink("alerting", [router], security=keys.client(alerting_key))
    fleet.agent([router], security=keys.client(agent_key), plugins={
        "dirs": [str(tick_plugin(fleet.root))],
        "checks": [{"name": PLUGIN, "command": "check_tick", "interval": 1, "timeout": 5}]})

    def check() -> dict | None:
        """The agent's check as ``fleetwatch status --json`` shows it, with the agent's
        ``version`` (the registry's: PEERS has none); None while not declared."""
        status = fleet.status(op)
        version = next((a["version"] for a in status["agents"] if a["uuid"] == uuid), None)
        return next(({**c, "version": version} for c in status["checks"]
                     if c["uuid"] == uuid and c["plugin"] == PLUGIN), None)

    # both back-ends start with keys the router does not know, and are refused
    sink_key = keys.backend("sink-registry", sub="pending")
    sched_key = keys.backend("scheduler", sub="pending")
    sink = fleet.sink("registry", [router], security=keys.client(sink_key), stats_interval=0.5)
    scheduler = fleet.scheduler([router], security=keys.client(sched_key))
    # nothing an operator reads says that a back-end process is up but refused: its log does
    wait_for(lambda: "started" in sink.log() and "started" in scheduler.log(), 15, 0.1,
             "both back-ends started")
    wait_for(lambda: tail.router_refusals() >= 2, 15, 0.1, "the router refusing both keys")
    # the registry has no agent (only it gives status a version) and no declared check
    status = fleet.status(op)
    assert not [a for a in status["agents"] if a["version"]] and not status["checks"], status

    allow(keys, sink_key)
    allow(keys, sched_key)

    # the sink: the agent's check declared in the registry, and the sink's own STATS
    # through the router
    wait_for(check, 20, 0.1, "the registry sink connected (the agent's check in status)")
    wait_for(lambda: tail.from_sink("sink-registry"), 10, 0.1, "the sink's STATS on the tail")
    # the scheduler: the check's latest RESULT answers one of its RUNs (command ids "s:...")
    latest = wait_for(lambda: (c := check()) and (c["command_id"] or "").startswith("s:") and c,
                      20, 0.1, "a RESULT of a RUN sent by the scheduler in status")
    assert (latest["status"], latest["state"], latest["output"]) == (0, "OK", "TICK OK")
    assert latest["version"], latest
    for proc in (sink, scheduler):       # and each closes its links and exits promptly
        assert proc.alive(), proc.log()
        assert proc.stop(timeout=10) == 0, proc.log()
