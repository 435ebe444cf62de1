"""A site's claims checked with the mesh (router/claims.py, SPEC 4.10): the uuids a site
link speaks for first are held while the other routers are asked (ATTACHED), then refused
when one has the agent attached, or relayed in order when none has; a router that does not
answer in time is counted and taken as not having it; the uuids links speak for are asked
about again every minute (issue 31, item 1: an agent attached to another router of the
mesh)."""

from __future__ import annotations

from router import claims as claims_mod
from router.claims import Claims
from support.clock import Clock


class Mesh:
    """The other routers: ``ask`` records each request and names ``routers``."""

    def __init__(self, routers=("r2", "r3")):
        self.routers, self.asked = set(routers), []

    def ask(self, uuids):
        if not self.routers:
            return None
        self.asked.append(list(uuids))
        return f"ref-{len(self.asked)}", set(self.routers)


def test_held_until_every_router_answered_then_free_in_order_or_elsewhere():
    mesh, clock = Mesh(), Clock()
    c = Claims(mesh.ask, clock)
    assert c.hold("a1", b"L", "s1", "hello") and c.hold("a1", b"L", "s1", "stats")
    assert c.hold("a2", b"L", "s1", "deregister")
    assert c.flush() == [] and mesh.asked == [["a1", "a2"]] and len(c) == 2
    assert c.answered("r2", "ref-1", {"a2": "", "zz": ""}) == []  # r3 has not answered
    assert c.answered("r2", "ref-1", {}) == []                    # said twice: once
    settled = c.answered("r3", "ref-1", {})
    assert [(s.uuid, s.held.messages, s.elsewhere) for s in settled] == [
        ("a1", ["hello", "stats"], None), ("a2", ["deregister"], "router r2")]
    assert len(c) == 0 and c.rounds == {}
    assert c.answered("r3", "ref-1", {}) == []                    # late: nothing


def test_behind_the_same_site_on_another_router_is_no_conflict_another_site_is():
    """A site that moved its uplink from r2 to here claims what r2 still holds behind it:
    free; what r2 holds behind another site is elsewhere."""
    mesh = Mesh(routers=("r2",))
    c = Claims(mesh.ask, Clock())
    c.hold("a1", b"L", "s1", "m")
    c.hold("a2", b"L", "s1", "m")
    c.flush()
    settled = c.answered("r2", "ref-1", {"a1": "s1", "a2": "s2"})
    assert [(s.uuid, s.elsewhere) for s in settled] == [
        ("a1", None), ("a2", "router r2 behind site s2")]


def test_a_router_that_does_not_answer_is_counted_and_has_nothing():
    mesh, clock = Mesh(), Clock()
    c = Claims(mesh.ask, clock)
    c.hold("a1", b"L", "s1", "m")
    c.flush()
    c.answered("r2", "ref-1", {})
    clock.advance(claims_mod.TIMEOUT - 0.01)
    assert c.expire() == []
    clock.advance(0.02)
    [got] = c.expire()
    assert (got.uuid, got.elsewhere, c.unverified) == ("a1", None, 1)


def test_alone_nothing_is_asked_and_every_claim_is_free():
    mesh = Mesh(routers=())
    c = Claims(mesh.ask, Clock())
    c.hold("a1", b"L", "s1", "m")
    [got] = c.flush()
    assert (got.uuid, got.held.messages, got.elsewhere) == ("a1", ["m"], None)


def test_bounds_per_uuid_and_in_all(monkeypatch):
    monkeypatch.setattr(claims_mod, "MAX_PENDING", 2)
    c = Claims(Mesh().ask, Clock())
    assert all(c.hold("a1", b"L", "s1", i) for i in range(claims_mod.MAX_HELD))
    assert not c.hold("a1", b"L", "s1", "one more")
    assert c.hold("a2", b"L", "s1", 0) and not c.hold("a3", b"L", "s1", 0)
    assert c.overflow == 2


def test_large_claims_go_in_batches():
    mesh = Mesh()
    c = Claims(mesh.ask, Clock())
    for i in range(claims_mod.BATCH + 5):
        c.hold(f"a{i:05d}", b"L", "s1", i)
    c.flush()
    assert [len(batch) for batch in mesh.asked] == [claims_mod.BATCH, 5]


def test_the_uuids_links_speak_for_are_asked_about_again_every_minute():
    mesh, clock = Mesh(routers=("r2",)), Clock()
    c = Claims(mesh.ask, clock)
    assert not c.due() and c.recheck({"a1": (b"L", "s1")}) == []
    clock.advance(claims_mod.RECHECK)
    assert c.due() and c.recheck({"a1": (b"L", "s1"), "a2": (b"M", "s2")}) == []
    assert not c.due()
    [moved, stayed] = sorted(c.answered("r2", "ref-1", {"a1": ""}), key=lambda s: s.uuid)
    assert (moved.uuid, moved.elsewhere, moved.held.rid) == ("a1", "router r2", b"L")
    assert (stayed.uuid, stayed.elsewhere, stayed.held.messages) == ("a2", None, [])
