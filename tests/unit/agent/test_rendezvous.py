"""Rendezvous hashing (agent/rendezvous.py): each agent ranks the live routers alone; the
agents spread evenly over them; a router leaving moves only its own agents, one joining
takes only the agents that now rank it among their k best; the scores are fixed (two
implementations of the agent choose alike)."""

from __future__ import annotations

import uuid as uuidlib
from collections import Counter

from agent.rendezvous import choose, fmix64, fnv1a64, score

ROUTERS = [f"tcp://router-{i}.example:5555" for i in range(10)]
AGENTS = [str(uuidlib.UUID(int=i * 7919 + 1)) for i in range(2000)]


def test_k_of_the_live_set_or_all_of_it_each_once():
    assert choose("a", ROUTERS[:2], 3) == sorted(ROUTERS[:2], key=lambda e: score("a", e),
                                                 reverse=True)
    assert len(choose("a", ROUTERS, 3)) == 3 and choose("a", ROUTERS + ROUTERS, 3) == \
        choose("a", ROUTERS, 3)
    assert choose("a", [], 3) == [] and choose("a", ROUTERS, 0) == []
    assert choose("a", reversed(ROUTERS), 3) == choose("a", ROUTERS, 3)     # order-free


def test_the_scores_are_fixed():
    # FNV-1a 64 (its published test vectors) of "uuid NUL endpoint", then fmix64
    assert fnv1a64(b"") == 0xCBF29CE484222325 and fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8
    assert fmix64(0) == 0 and fmix64(1) == 0xB456BCFC34C2CB2C
    assert score("agent-1", "tcp://r1:5555") == fmix64(fnv1a64(b"agent-1\0tcp://r1:5555"))
    assert score("agent-1", "tcp://r1:5555") == 0x6F76D6725AD76225


def test_the_agents_spread_evenly():
    load = Counter(e for a in AGENTS for e in choose(a, ROUTERS, 3))
    mean = len(AGENTS) * 3 / len(ROUTERS)
    assert all(abs(n - mean) / mean < 0.12 for n in load.values()), load


def test_a_router_leaving_moves_only_its_agents_and_one_joining_takes_few():
    before = {a: choose(a, ROUTERS, 3) for a in AGENTS}
    gone = ROUTERS[4]
    after = {a: choose(a, [r for r in ROUTERS if r != gone], 3) for a in AGENTS}
    for a in AGENTS:
        if gone in before[a]:
            assert set(before[a]) - {gone} < set(after[a])      # kept the others, one new
        else:
            assert after[a] == before[a]
    new = "tcp://router-new.example:5555"
    joined = {a: choose(a, ROUTERS + [new], 3) for a in AGENTS}
    moved = [a for a in AGENTS if joined[a] != before[a]]
    assert all(new in joined[a] and len(set(joined[a]) - set(before[a])) == 1 for a in moved)
    assert abs(len(moved) - len(AGENTS) * 3 / 11) / (len(AGENTS) * 3 / 11) < 0.2
