"""Unit tests of the router's limits and alarms (router.guard, router.peers): a fake clock."""

from __future__ import annotations

from support.clock import Clock
from router.guard import (CLONE_WINDOW, PACE_BURST, PACE_FLOOR, Busy, CloneDetector,
                          Once, Pacer, refill)
from router.peers import Peers


# ---------------------------------------------------------------- clone detector

def test_alternating_instances_are_a_clone_reported_once_per_window():
    clock = Clock(1000.0)
    clones = CloneDetector(clock=clock)
    assert clones.hello("u1", "a") is None
    clock.now += 5
    assert clones.hello("u1", "b") is None          # could be a restart
    clock.now += 5
    assert clones.hello("u1", "a") == ("a", "b")   # a came back: two live processes
    for _ in range(20):                             # the tug of war goes on: reported once
        clock.now += 5
        assert clones.hello("u1", "b") is None
        clock.now += 5
        assert clones.hello("u1", "a") is None
    clock.now += CLONE_WINDOW + 1                   # still at it after the window: again
    assert clones.hello("u1", "b") is None
    clock.now += 1
    assert clones.hello("u1", "a") is None         # a's last visit is older than the window
    clock.now += 1
    assert clones.hello("u1", "b") == ("b", "a")


def test_restarts_and_reconnects_are_not_clones():
    clock = Clock(1000.0)
    clones = CloneDetector(clock=clock)
    for instance in ("a", "a", "b", "b", "b", "c", "d", "d"):   # reconnects and restarts
        clock.now += 30
        assert clones.hello("u1", instance) is None
    assert clones.hello("u2", "") is None and clones.hello("u2", None) is None   # old agents
    assert clones.hello("u2", "x") is None


def test_an_instance_back_after_the_window_is_not_a_clone():
    clock = Clock(1000.0)
    clones = CloneDetector(clock=clock)
    clones.hello("u1", "a")
    clock.now += 10
    clones.hello("u1", "b")
    clock.now += CLONE_WINDOW + 1
    assert clones.hello("u1", "a") is None


def test_clone_detector_memory_is_bounded():
    clock = Clock(1000.0)
    clones = CloneDetector(clock=clock, max_uuids=100)
    for i in range(1000):
        clones.hello(f"u{i}", "a")
        clock.now += 1
    assert len(clones) <= 100 + 1
    for i in range(10):                              # instances per uuid bounded too
        clones.hello("busy", f"i{i}")
    assert len(clones._seen["busy"]) <= 4
    clock.now += CLONE_WINDOW + 1000
    clones.prune()
    assert len(clones) == 0


# ---------------------------------------------------------------- buckets

def test_token_bucket_refill_caps_at_burst():
    peers = Peers(clock=Clock(1000.0))
    peers.burst = 10.0
    peer, new = peers.hello(b"u1", "u1", "h", 1.0)
    assert new and peer.tokens == 10.0
    for _ in range(15):                              # what the hot path does
        peer.tokens -= 1.0
    assert peer.tokens < 0
    refill(peers.table.values(), rate=4.0, burst=10.0, elapsed=0.5)
    assert peer.tokens == -3.0
    refill(peers.table.values(), rate=4.0, burst=10.0, elapsed=100.0)
    assert peer.tokens == 10.0


def test_pacer_admits_per_second_and_counts_the_rest():
    clock = Clock(1000.0)
    pacer = Pacer(5, clock)
    assert [pacer.allow() for _ in range(8)] == [True] * 5 + [False] * 3
    assert pacer.deferred == 3
    clock.now += 0.5
    pacer.refill()
    assert [pacer.allow() for _ in range(3)] == [True, True, False]
    clock.now += 100
    pacer.refill()
    assert sum(pacer.allow() for _ in range(10)) == 5


def storm_period(pacer: Pacer, clock: Clock, busy: float, turns: int = 25,
                 asked: int = 1000) -> int:
    """One sweep period (a quarter second) of a storm: ``turns`` wake-ups of the loop, each
    asking ``asked`` HELLOs, then the sweep's refill with the loop's working share; the
    number admitted."""
    admitted = 0
    for _ in range(turns):
        clock.advance(0.25 / turns)
        admitted += sum(pacer.allow() for _ in range(asked))
    pacer.refill(busy)
    return admitted


def test_the_pace_falls_to_the_floor_while_the_loop_is_behind_and_never_stops():
    clock = Clock(1000.0)
    pacer = Pacer(8000, clock)
    assert pacer.rate == 8000           # an idle router admits at its ceiling
    rates = []
    for _ in range(6):
        storm_period(pacer, clock, busy=0.95)
        rates.append(pacer.rate)
    assert rates == [4000, 2000, 1000, 500, 500, 500]
    assert storm_period(pacer, clock, busy=1.0) == PACE_FLOOR * 0.25


def test_the_pace_rises_to_the_ceiling_while_the_loop_has_time_to_spare():
    clock = Clock(1000.0)
    pacer = Pacer(8000, clock)
    for _ in range(8):
        storm_period(pacer, clock, busy=1.0)
    assert pacer.rate == PACE_FLOOR
    rates = []
    for _ in range(6):
        storm_period(pacer, clock, busy=0.3)
        rates.append(pacer.rate)
    assert rates == [1000, 2000, 4000, 8000, 8000, 8000]
    assert storm_period(pacer, clock, busy=0.3) == 8000 * 0.25


def test_tokens_accrue_between_sweeps_so_admissions_spread_over_the_period():
    clock = Clock(1000.0)
    pacer = Pacer(1024, clock)
    assert sum(pacer.allow() for _ in range(1000)) == int(1024 * PACE_BURST)
    admitted = []
    for _ in range(16):                 # a quarter second in steps of 1/64 s, no sweep
        clock.advance(1 / 64)
        admitted.append(sum(pacer.allow() for _ in range(1000)))
    assert admitted == [16] * 16        # the pace, spread


def test_a_new_ceiling_bounds_the_pace_and_the_bucket_at_once():
    clock = Clock(1000.0)
    pacer = Pacer(8000, clock)
    pacer.set_ceiling(10)
    assert pacer.rate == 10 and pacer.floor == 10 and pacer.tokens <= 10
    pacer.set_ceiling(5000)             # back to the floor, then up as the load allows
    assert pacer.rate == pacer.floor == PACE_FLOOR
    pacer.refill(busy=0.0)
    assert pacer.rate == 2 * PACE_FLOOR


def test_busy_is_the_share_of_the_period_not_spent_waiting():
    clock = Clock(1000.0)
    busy = Busy(clock)
    busy.waited(0.75)
    clock.advance(1.0)
    assert busy.share() == 0.25
    clock.advance(0.5)              # a new period: no wait at all
    assert busy.share() == 1.0
    busy.waited(0.1)
    assert busy.share() == 0.0      # no time passed: nothing known, nothing busy


def test_once_per_key_per_period():
    clock = Clock(1000.0)
    once = Once(60.0, clock)
    assert once.allow("u1") and not once.allow("u1") and once.allow("u2")
    clock.now += 61
    assert once.allow("u1")


def test_a_hello_from_a_new_routing_id_moves_the_agent_and_forgets_the_old_one():
    clock = Clock(1000.0)
    peers = Peers(3.0, clock, b"r1")
    first, new = peers.hello(b"c1", "u1", "h1", 1.0, "i1")
    assert new and peers.by_uuid("u1") is first and peers.get(b"c1") is first
    first.tokens = 7.0
    clock.now += 2
    moved, new = peers.hello(b"c2", "u1", "h1", 1.0, "i1")      # the agent reconnected
    assert not new and moved is first and moved.routing_id == b"c2"
    assert b"c1" not in peers and peers.get(b"c2") is first and len(peers) == 1
    assert peers.by_uuid("u1") is first                          # RUN goes to the newest
    assert first.tokens == 7.0 and first.since == 1000.0         # no fresh bucket, same since
    assert first.envelopes[b"STATS"] == b"STATS/u1/r1"           # stamped by uuid
    # a routing id bound to one uuid cannot be re-bound to another (the caller answers 403)
    peers.hello(b"c3", "u2", "h2", 1.0)
    try:
        peers.hello(b"c3", "u1", "h1", 1.0)
    except ValueError:
        pass
    else:
        raise AssertionError("a bound routing id took another uuid")
    assert peers.by_uuid("u1").routing_id == b"c2"


def test_forget_and_expire_keep_the_uuid_index_consistent():
    clock = Clock(1000.0)
    peers = Peers(3.0, clock)
    peers.hello(b"c1", "u1", "h1", 1.0)
    peers.hello(b"c2", "u2", "h2", 1.0)
    assert [p["uuid"] for p in peers.listing()] == ["u1", "u2"]
    assert peers.forget(b"nobody") is None and peers.forget(b"c1").uuid == "u1"
    assert peers.by_uuid("u1") is None and peers.by_uuid("u2") is not None
    peers.hello(b"c3", "u2", "h2", 1.0)                          # moved: c2 is gone
    assert peers.forget(b"c2") is None and peers.by_uuid("u2").routing_id == b"c3"
    clock.now += 10
    assert {p.uuid for p in peers.expire()} == {"u2"} and len(peers) == 0
    assert peers.by_uuid("u2") is None and not peers.table and not peers.uuids
