"""What the health page keeps of the STATS on the routers' tails (web/health.py): the last
counters of each router, sink and scheduler, the routers' drops per agent summed, only the
agents that dropped something, what is malformed counted, what is silent forgotten."""

from __future__ import annotations

import pytest

pytest.importorskip("zmq")

from fleetwatch import protocol  # noqa: E402
from web.health import FORGET, Health  # noqa: E402
from support.clock import Clock  # noqa: E402


def stats(uuid: str, metrics: dict, router="r1", **fields) -> list[bytes]:
    return protocol.encode_tail(protocol.make("STATS", uuid, metrics=metrics, **fields),
                                uuid, router)


def test_back_ends_agents_with_drops_and_router_drops():
    clock = Clock(1000.0)
    health = Health(lambda: [], clock=clock)
    health.take(stats("r1", {"router.agents": 2, "router.dropped.STATS.graphite": 5},
                      source="router", drops=[
                          {"uuid": "a1", "type": "NOTIFY", "sink": "history", "count": 2},
                          {"uuid": "a1", "type": "NOTIFY", "sink": "history", "count": "x"}]))
    health.take(stats("r1", {"router.agents": 3}, source="router", drops=[
        {"uuid": "a1", "type": "NOTIFY", "sink": "history", "count": 3}]))
    health.take(stats("sink-a", {"sink.received": 9}, router="r1,sink-a", source="sink",
                      hostname="h1"))                    # from control (SPEC 4.3)
    health.take(stats("a1", {"agent.spool.dropped": 4, "load": 1.5}))
    health.take(stats("a2", {"agent.spool.dropped": 0, "load": 0.1}))
    health.take([b"STATS/x/r1", protocol.SIGNATURE, b"{not json"])
    found = health.snapshot()
    assert [r["metrics"] for r in found["router_stats"]] == [{"router.agents": 3}]
    assert [(s["id"], s["hostname"]) for s in found["sinks"]] == [("sink-a", "h1")]
    assert [(d["uuid"], d["count"]) for d in found["router_drops"]] == [("a1", 5)]
    assert [(a["uuid"], a["drops"]) for a in found["agents"]] == [
        ("a1", {"agent.spool.dropped": 4})]
    assert (found["received"], found["bad"]) == (5, 1)
    health.take(stats("a1", {"agent.spool.dropped": 0}))       # its counters reset: gone
    assert health.snapshot()["agents"] == []
    clock.now += FORGET + 1
    found = health.snapshot()
    assert found["router_stats"] == found["sinks"] == found["router_drops"] == []


def test_an_agent_never_passes_for_a_router_a_sink_or_a_scheduler():
    """Issue 31 item 6: who sent a STATS is the router's stamp, never its body's
    ``source``: an agent's STATS claiming each back-end role (and drops against another
    host) is an agent's; a back-end's is one only when the router stamped it so."""
    health = Health(lambda: [], clock=Clock(1000.0))
    for source in ("router", "sink", "scheduler"):
        health.take(stats("liar", {"agent.spool.dropped": 1, "x": 1}, source=source, drops=[
            {"uuid": "victim", "type": "STATS", "sink": "history", "count": 987654321}]))
        health.take(stats("r1", {"y": 1}, router="r2", source=source))   # r2's agent "r1"
        health.take(stats("r2", {"y": 1}, router="c1,site-1", source=source))
    health.take(stats("site-1", {"router.agents": 1}, router="c1,site-1", source="router"))
    health.take(stats("sched", {"runs": 3}, router="r1,sched", source="scheduler"))
    health.take(stats("sink-b", {"sink.x": 1}, router="r1,sink-b"))   # says no role
    found = health.snapshot()
    assert [r["id"] for r in found["router_stats"]] == ["site-1"]
    assert found["sinks"] == [] and [s["id"] for s in found["schedulers"]] == ["sched"]
    assert found["router_drops"] == []
    assert [a["uuid"] for a in found["agents"]] == ["liar"]


def test_an_agent_s_quiet_stats_is_passed_over_without_decoding():
    from web.health import quiet

    def body(metrics, **fields):
        return stats("a1", metrics, **fields)[2]
    assert quiet(body({"load": 1.0, "agent.spool.dropped": 0, "agent.stats.dropped": 0}))
    assert quiet(body({"load": 1.0}))
    assert not quiet(body({"agent.spool.dropped": 10}))
    assert not quiet(body({"agent.spool.dropped": 0.5}))
    assert not quiet(body({"agent.stats.dropped": 0, "x": 1}, source="sink"))
    assert not quiet(b'{"metrics": {"agent.spool.dropped": 3}}')    # spaced: decoded
    clock = Clock(1000.0)
    health = Health(lambda: [], clock=clock)
    health.take(stats("a1", {"agent.spool.dropped": 4}))
    health.take(stats("a1", {"agent.spool.dropped": 0}))        # restarted: passed over
    assert health.snapshot()["agents"] == [] and health.snapshot()["received"] == 2
