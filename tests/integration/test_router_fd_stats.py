"""A real router reports its file descriptors in its STATS (router.fd_used, router.fd_limit,
router.fd_headroom_pct) and warns once when less than a fifth of its limit is left."""

from __future__ import annotations

import os
import resource

import psutil
import pytest

from support.fleet import wait_for
from support.routerclients import FakeAgent
from support.zmqio import pull, stats_from

pytestmark = pytest.mark.timeout(60)

METRICS = ("router.fd_used", "router.fd_limit", "router.fd_headroom_pct")


def test_stats_carry_the_descriptors_used_and_the_limit(fleet, zctx):
    r = fleet.router(max_agents=1000)
    proc = psutil.Process(r["pid"])
    graphite = pull(zctx, r["endpoints"]["sinks"]["graphite"])
    agents = [FakeAgent(zctx, r["endpoints"]["agents"]) for _ in range(5)]
    for agent in agents:
        agent.hello()
    metrics = stats_from(graphite, lambda m: m.get("router.agents") == 5)
    assert set(METRICS) <= set(metrics)
    soft, _ = proc.rlimit(resource.RLIMIT_NOFILE)
    assert metrics["router.fd_limit"] == soft
    # its own sockets, the five agents' connections and the graphite sink's, a few spare
    assert 5 < metrics["router.fd_used"] <= proc.num_fds()
    assert metrics["router.fd_headroom_pct"] == round(
        100 * (soft - metrics["router.fd_used"]) / soft, 1)
    # started outside a unit, it raised its soft limit toward what max_agents wants
    assert soft >= min(2 * 1000 + 1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])
    before = metrics["router.fd_used"]
    for agent in agents[:3]:
        agent.sock.close(linger=0)
    metrics = stats_from(graphite, lambda m: m["router.fd_used"] <= before - 3)
    assert r["proc"].alive() and "file descriptors:" not in r["proc"].log()


def test_low_headroom_is_logged_once(fleet, zctx):
    r = fleet.router()
    proc = psutil.Process(r["pid"])
    graphite = pull(zctx, r["endpoints"]["sinks"]["graphite"])
    used = stats_from(graphite, lambda m: "router.fd_used" in m)["router.fd_used"]
    soft, hard = proc.rlimit(resource.RLIMIT_NOFILE)
    # a limit the descriptors in use nearly fill (prlimit on the running router)
    proc.rlimit(resource.RLIMIT_NOFILE, (used + 3, hard))
    try:
        low = stats_from(graphite, lambda m: m["router.fd_limit"] == used + 3)
        assert low["router.fd_headroom_pct"] < 20
        wait_for(lambda: "file descriptors:" in r["proc"].log(), 10, what="the warning")
        stats_from(graphite, lambda m: m["router.fd_limit"] == used + 3)   # one STATS more
        log = r["proc"].log()
        assert log.count("file descriptors:") == 1, log
        assert "raise max_agents and reinstall the unit" in log
    finally:
        proc.rlimit(resource.RLIMIT_NOFILE, (soft, hard))
    back = stats_from(graphite, lambda m: m["router.fd_limit"] == soft)
    assert back["router.fd_headroom_pct"] > 25 and r["proc"].alive()


def test_a_router_goes_first_under_cpu_contention(fleet, zctx):
    """A real router, started as a daemon is (its own session), lowers its nice value and
    its session's to its config's ``nice`` (issue 31, 13: with an equal share of 2 cores
    beside 10,000 simulated agents and the sinks, it fell behind and the fleet never
    attached), its libzmq I/O thread included; ``nice: 0`` leaves it alone."""
    if os.geteuid() != 0:
        pytest.skip("lowering a nice value needs root")
    r = fleet.router()
    threads = psutil.Process(r["pid"]).threads()
    assert len(threads) >= 2                          # the main thread and libzmq's
    for t in threads:
        assert int(open(f"/proc/{r['pid']}/task/{t.id}/stat").read().rsplit(")", 1)[1]
                   .split()[16]) == -10
    if os.path.exists(f"/proc/{r['pid']}/autogroup"):
        assert open(f"/proc/{r['pid']}/autogroup").read().split()[-1] == "-10"
    assert "CPU priority: nice -10" in r["proc"].log()
    plain = fleet.router("router-2", nice=0)
    assert psutil.Process(plain["pid"]).nice() == 0
    assert "CPU priority" not in plain["proc"].log()
