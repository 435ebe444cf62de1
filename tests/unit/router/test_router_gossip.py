"""The mesh's rounds with real DEALERs and nothing to answer them (router/mesh.py): who is
told, redialling a router that does not answer, closing what is neither live nor a seed."""

from __future__ import annotations

import random

import zmq

from support.clock import Clock
from router.members import Members
from router.mesh import REDIAL_AFTER, Mesh


def endpoints(port: int) -> dict:
    return {"agents": f"tcp://127.0.0.1:{port}", "control": f"tcp://127.0.0.1:{port + 1}",
            "tail": f"tcp://127.0.0.1:{port + 2}"}


def test_rounds_tell_seeds_and_members_redial_the_silent_and_close_the_dead():
    ctx = zmq.Context()
    clock = Clock(0.0)
    members = Members("r1", endpoints(10), 1, interval=1.0, expire_intervals=3, clock=clock)
    seed = "tcp://127.0.0.1:9"
    changes = []
    mesh = Mesh(members, [seed, seed, endpoints(10)["control"]], 3, ctx, monotonic=clock,
                rand=random.Random(1))
    mesh.on_change = lambda joined, left: changes.append((joined, left))
    try:
        mesh.round()
        # its own control endpoint is never told; the seed is, until it answers
        assert list(mesh.dealers) == [seed] and members.own.beat == 1
        # a DEALER just made is not connected yet: no fault (issue 31 item 12)
        assert (mesh.counts["connecting"], mesh.counts["unsent"]) == (1, 0)
        assert mesh.merge([{"id": "r2", "endpoints": endpoints(20), "incarnation": 5,
                            "beat": 1}]) == ["r2"]
        assert changes == [(["r2"], [])]
        clock.advance(1)
        mesh.round()
        assert set(mesh.dealers) == {seed, endpoints(20)["control"]}
        assert mesh.counts["unsent"] == 1       # nothing listens at the seed: not connected
        for _ in range(REDIAL_AFTER):
            clock.advance(1)
            mesh.round()
        assert mesh.counts["redialled"] >= 1
        assert changes[-1] == ([], ["r2"])      # silent 3 intervals: dead, its DEALER closed
        assert list(mesh.dealers) == [seed]
        assert mesh.metrics(0, 0)["router.mesh.members"] == 1
        assert mesh.metrics(0, 0)["router.mesh.dead"] == 1
    finally:
        mesh.close()
        ctx.term()
