"""The member table without sockets (router/members.py, SPEC 4.9): merge, expiry,
tombstones, the own id, bounds; a fake clock."""

from __future__ import annotations

import pytest

from support.clock import Clock
from router.members import FORGET_AFTER, MAX_MEMBERS, Members, parse_entry


def endpoints(name: str) -> dict:
    return {"agents": f"tcp://{name}:5555", "control": f"tcp://{name}:5556",
            "tail": f"tcp://{name}:5557"}


def entry(name: str, incarnation: int = 100, beat: int = 1, dead: bool | None = None) -> dict:
    out = {"id": name, "endpoints": endpoints(name), "incarnation": incarnation, "beat": beat}
    if dead is not None:
        out["dead"] = dead
    return out


def table(clock: Clock, name: str = "r1", **kw) -> Members:
    return Members(name, endpoints(name), 10, interval=1.0, expire_intervals=5, clock=clock,
                   **kw)


def ids(members: Members) -> list[str]:
    return [m.id for m in members.live()]


def test_alone_it_lists_itself_and_beats():
    clock = Clock(50.0)
    members = table(clock)
    assert ids(members) == ["r1"] and len(members) == 1
    members.tick()
    members.tick()
    [own] = members.entries()
    assert own == {"id": "r1", "endpoints": endpoints("r1"), "incarnation": 10, "beat": 2,
                   "age": 0.0}
    assert members.listing() == [{"id": "r1", **endpoints("r1")}]


def test_merge_takes_new_members_and_larger_pairs_only():
    clock = Clock(50.0)
    members = table(clock)
    merged = members.merge([entry("r3", beat=4), entry("r2", beat=7)])
    assert merged.joined == ["r3", "r2"] and merged.bad == 0
    assert ids(members) == ["r1", "r2", "r3"]      # itself first, then by id
    clock.advance(3)
    members.merge([entry("r2", beat=6)])           # older: changes nothing
    assert members.get("r2").beat == 7 and members.get("r2").advanced == 50.0
    members.merge([entry("r2", beat=8)])           # larger beat: advanced now
    assert members.get("r2").beat == 8 and members.get("r2").advanced == 53.0
    members.merge([entry("r2", incarnation=200, beat=0)])   # a restart: larger incarnation
    assert members.get("r2").pair == (200, 0)
    members.merge([entry("r2", incarnation=100, beat=999)])  # its previous life: ignored
    assert members.get("r2").pair == (200, 0)


def test_silent_members_die_then_are_forgotten():
    clock = Clock(0.0)
    members = table(clock)
    members.merge([entry("r2"), entry("r3")])
    clock.advance(3)
    members.merge([entry("r3", beat=2)])
    clock.advance(2.5)                             # r2 silent 5.5 s > 5 intervals
    assert members.expire() == ["r2"]
    assert ids(members) == ["r1", "r3"] and [m.id for m in members.dead()] == ["r2"]
    wire = {e["id"]: e for e in members.entries()}
    assert wire["r2"]["dead"] is True and "dead" not in wire["r3"]
    assert members.listing() == [{"id": "r1", **endpoints("r1")}, {"id": "r3", **endpoints("r3")}]
    clock.advance(10.5)                            # a tombstone: kept (listed DOWN)
    members.expire()
    assert [m.id for m in members.dead()] == ["r2", "r3"]
    clock.advance(FORGET_AFTER - 16)               # a day after its beat last advanced
    members.expire()
    assert members.get("r2") is not None
    clock.advance(0.1)
    members.expire()
    assert members.get("r2") is None


def test_a_tombstone_learnt_by_gossip_ages_from_what_the_sender_said():
    """So that the mesh forgets a dead router at about the same time everywhere, and a
    router that learns it late does not gossip it back to life for another day."""
    clock = Clock(0.0)
    members = table(clock, forget_after=100.0)
    members.merge([{**entry("r2", dead=True), "age": 60.0}])
    assert members.get("r2").advanced == -60.0 and not members.get("r2").live
    assert members.entries()[1]["age"] == 60.0
    clock.advance(40.5)
    members.expire()
    assert members.get("r2") is None
    members.merge([{**entry("r2", dead=True), "age": 100.0}])   # forgotten already: not taken
    assert members.get("r2") is None


def test_a_full_table_forgets_its_oldest_tombstone_for_a_live_router():
    clock = Clock(0.0)
    members = table(clock, max_members=3)
    members.merge([{**entry("r2", dead=True), "age": 5.0}, {**entry("r3", dead=True)}])
    assert members.merge([entry("r4", dead=True)]).full == 1     # a tombstone makes no room
    merged = members.merge([entry("r5")])
    assert merged.joined == ["r5"] and members.get("r2") is None and members.get("r3")


def test_a_tombstone_comes_back_only_with_a_larger_pair():
    clock = Clock(0.0)
    members = table(clock)
    members.merge([entry("r2", beat=5)])
    clock.advance(6)
    assert members.expire() == ["r2"]
    assert members.merge([entry("r2", beat=5)]).joined == []    # stale gossip: still dead
    assert members.merge([entry("r2", beat=4)]).joined == []
    assert "r2" not in ids(members)
    assert members.merge([entry("r2", beat=6)]).joined == ["r2"]
    assert "r2" in ids(members) and members.get("r2").advanced == 6.0


def test_a_dead_flag_does_not_kill_what_this_router_hears():
    clock = Clock(0.0)
    members = table(clock)
    members.merge([entry("r2", beat=5)])
    clock.advance(2)
    members.merge([entry("r2", beat=5, dead=True)])    # same pair: nothing
    members.merge([entry("r2", beat=6, dead=True)])    # larger, but dead: no liveness
    assert "r2" in ids(members)
    assert members.get("r2").beat == 6 and members.get("r2").advanced == 0.0
    clock.advance(3.5)
    assert members.expire() == ["r2"]
    # learnt dead first: a tombstone that stale gossip cannot revive
    assert members.merge([entry("r4", beat=3, dead=True)]).joined == []
    assert members.get("r4") is not None and not members.get("r4").live
    assert members.merge([entry("r4", beat=3)]).joined == []
    assert members.merge([entry("r4", beat=4)]).joined == ["r4"]


def test_its_own_id_is_never_taken_from_others():
    clock = Clock(0.0)
    members = table(clock)
    members.tick()
    merged = members.merge([entry("r1", incarnation=10, beat=99),
                            entry("r1", incarnation=9, beat=99, dead=True)])
    assert merged.impostor == 0 and members.own.beat == 1 and members.own.live
    merged = members.merge([entry("r1", incarnation=11, beat=0)])   # another process, same id
    assert merged.impostor == 1 and members.own.pair == (10, 1)
    assert ids(members) == ["r1"]


@pytest.mark.parametrize("bad", [
    "r2", None, [], {},
    {**entry("r2"), "id": "-bad"},
    {**entry("r2"), "id": "x" * 65},
    {**entry("r2"), "id": 7},
    {**entry("r2"), "endpoints": "tcp://r2:5556"},
    {**entry("r2"), "endpoints": {"agents": "tcp://a:1", "control": "tcp://a:2"}},
    {**entry("r2"), "endpoints": {**endpoints("r2"), "tail": ""}},
    {**entry("r2"), "endpoints": {**endpoints("r2"), "control": "x" * 256}},
    {**entry("r2"), "endpoints": {**endpoints("r2"), "agents": 5555}},
    {**entry("r2"), "incarnation": -1},
    {**entry("r2"), "incarnation": 1.5},
    {**entry("r2"), "incarnation": True},
    {**entry("r2"), "beat": 2 ** 53},
    {**entry("r2"), "beat": "1"},
    {**entry("r2"), "dead": "yes"},
])
def test_a_malformed_entry_is_skipped_and_counted(bad):
    clock = Clock(0.0)
    members = table(clock)
    assert parse_entry(bad) is None
    merged = members.merge([bad, entry("r3")])
    assert merged.bad == 1 and merged.joined == ["r3"]


def test_unknown_fields_and_endpoints_are_ignored():
    raw = {**entry("r2"), "age": 3.2, "colour": "blue",
           "endpoints": {**endpoints("r2"), "sinks": {"alerting": "tcp://r2:5561"}}}
    parsed = parse_entry(raw)
    assert parsed is not None and parsed.endpoints == endpoints("r2")


def test_the_table_is_bounded():
    clock = Clock(0.0)
    members = table(clock, max_members=4)
    merged = members.merge([entry(f"r{n}") for n in range(2, 8)])
    assert merged.joined == ["r2", "r3", "r4"] and merged.full == 3
    assert len(members.table) == 4
    assert members.merge([entry("r3", beat=9)]).full == 0     # known ones keep updating
    assert members.get("r3").beat == 9
    assert MAX_MEMBERS == 256


def test_a_live_router_restarted_elsewhere_has_moved():
    clock = Clock(0.0)
    members = table(clock)
    members.merge([entry("r2")])
    moved = {**entry("r2", incarnation=200, beat=0), "endpoints": endpoints("r2-new")}
    merged = members.merge([moved])
    assert merged.moved == ["r2"] and merged.joined == []
    assert members.get("r2").endpoints == endpoints("r2-new")
    assert members.merge([moved]).moved == []                  # said again: nothing new
