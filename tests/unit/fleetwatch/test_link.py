"""The back-end link's logic without sockets: :class:`fleetwatch.link.Dial` (HELLO cadence,
the redial decision), the replies screened by :meth:`fleetwatch.link.Links.read` (bad ones
counted and their warnings throttled) and the one-line handshake problems."""

from __future__ import annotations

import logging
from collections import Counter

import pytest
import zmq

from support.clock import Clock
from fleetwatch import protocol
from fleetwatch.link import MEMBERS_EVERY, REDIAL_AFTER, Dial, Link, Links, handshake_problem
from fleetwatch.logs import Throttle


def test_hello_at_once_then_every_interval_until_welcome():
    dial, clock = Dial(), Clock(100.0)
    assert dial.due(clock()) == "hello"
    dial.hello_sent(clock(), 1.0)
    assert dial.wake() == 101.0
    assert dial.due(clock.advance(0.5)) is None
    assert dial.due(clock.advance(0.5)) == "hello"
    dial.hello_sent(clock(), 2.0)                   # a new interval applies from this HELLO
    assert dial.due(clock.advance(1.9)) is None and dial.wake() == 103.0
    assert dial.welcomed("router-1") is True
    assert dial.router_id == "router-1"
    assert dial.due(clock.advance(100)) is None and dial.wake() == float("inf")
    assert dial.welcomed("router-1") is False       # a later WELCOME is not the first


def test_redial_after_unanswered_hellos():
    dial, clock = Dial(), Clock(0.0)
    actions = []
    for _ in range(REDIAL_AFTER + 2):
        actions.append(dial.due(clock()))
        if actions[-1] == "redial":
            dial.dialled()
        dial.hello_sent(clock(), 1.0)
        clock.advance(1.0)
    assert actions == ["hello"] * REDIAL_AFTER + ["redial", "hello"]


def test_redial_at_the_next_hello_after_a_failed_handshake():
    dial, clock = Dial(), Clock(0.0)
    dial.hello_sent(clock(), 1.0)
    dial.handshake_failed("CURVE handshake refused by the router (ZAP 400)")
    assert dial.due(clock.advance(0.5)) is None      # not at once: at the HELLO cadence
    assert dial.due(clock.advance(0.5)) == "redial"
    dial.dialled()
    assert dial.refused == "" and dial.unanswered == 0
    dial.hello_sent(clock(), 1.0)
    assert dial.due(clock.advance(1.0)) == "hello"   # the new socket's handshake went through


def test_a_welcome_after_a_redial_stops_the_hellos():
    dial = Dial(redial_after=1)
    dial.hello_sent(0.0, 1.0)
    assert dial.due(1.0) == "redial"
    dial.dialled()
    dial.welcomed("router-2")
    assert dial.due(50.0) is None


class FakeSocket:
    """What :func:`fleetwatch.link.replies` reads: queued frame lists, then ``zmq.Again``."""

    def __init__(self, frames: list[list[bytes]]):
        self.frames = list(frames)

    def recv_multipart(self, flags=0):
        if not self.frames:
            raise zmq.Again()
        return self.frames.pop(0)


def links_reading(frames: list[list[bytes]], clock: Clock) -> tuple[Links, Link]:
    links = Links(None, ["tcp://router:5556"], "sink-1", "sink", counts=Counter(),
                  throttle=Throttle(logging.getLogger("test_link"), 10.0, clock))
    link = links[0]
    link.socket = FakeSocket(frames)
    return links, link


def welcome(router: str = "router-1") -> list[bytes]:
    return protocol.encode(protocol.make("WELCOME", router, router=router, routers=[]))


def test_welcome_and_error_go_to_the_caller_the_rest_is_counted(caplog):
    error = protocol.make("ERROR", "router-1", status=404, reason="no such agent", ref="m1")
    peers = protocol.make("PEERS", "router-1", agents=[], total=0)
    frames = [welcome(), [b"garbage"], protocol.encode(error), protocol.encode(peers)]
    links, link = links_reading(frames, Clock())
    with caplog.at_level(logging.INFO):
        got = [msg.type for _, msg in links.read(link)]
    assert got == ["WELCOME", "ERROR"]
    assert link.router_id == "router-1" and links.welcomed() == [link]
    assert links.counts == Counter(control_bad=1, control_unexpected=1)
    assert "router router-1 at tcp://router:5556 welcomed us" in caplog.text


def test_bad_replies_are_all_counted_but_logged_once_per_period(caplog):
    clock = Clock()
    links, link = links_reading([[b"bad"]] * 50, clock)
    with caplog.at_level(logging.WARNING):
        assert list(links.read(link)) == []
        clock.advance(10.0)
        link.socket = FakeSocket([[b"bad"]])
        assert list(links.read(link)) == []
    assert links.counts["control_bad"] == 51
    lines = [r.getMessage() for r in caplog.records if "bad reply" in r.getMessage()]
    assert len(lines) == 2 and "(49 similar suppressed)" in lines[1]


def test_a_welcome_without_a_router_id_names_the_endpoint():
    frames = [protocol.encode(protocol.make("WELCOME", "x", router="", routers=[]))]
    links, link = links_reading(frames, Clock())
    list(links.read(link))
    assert link.router_id == "tcp://router:5556" and link.label == "tcp://router:5556"


@pytest.mark.parametrize("event, value, words", [
    (zmq.EVENT_HANDSHAKE_FAILED_AUTH, 400, "refused by the router (ZAP 400)"),
    (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH,
     "does not run with security.curve"),
    (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL, 0x11000001, "is router_key the routers' key?"),
    (zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL, 104, "does the router run with security.curve"),
])
def test_handshake_problems_in_one_line(event, value, words):
    line = handshake_problem({"event": event, "value": value, "endpoint": b"tcp://r:1"})
    assert words in line and "\n" not in line


# ---------------------------------------------------------------- the mesh (SPEC 4.9)

class SendingSocket(FakeSocket):
    def __init__(self, frames):
        super().__init__(frames)
        self.sent: list[list[bytes]] = []

    def send_multipart(self, frames, flags=0):
        self.sent.append(frames)

    def close(self, linger=None):
        pass


def mesh_welcome(router: str, *controls: str) -> list[bytes]:
    members = [{"id": f"r{n}", "agents": "tcp://x:1", "control": c, "tail": "tcp://x:3"}
               for n, c in enumerate(controls)]
    return protocol.encode(protocol.make("WELCOME", router, router=router, routers=[],
                                         members=members))


def members_answer(router: str, live: list[str], dead: list[str] = ()) -> list[bytes]:
    def entry(control: str, is_dead: bool) -> dict:
        return {"id": control.rsplit(":", 1)[1], "incarnation": 1, "beat": 1, "dead": is_dead,
                "endpoints": {"agents": "tcp://x:1", "control": control, "tail": "tcp://x:3"}}
    return protocol.encode(protocol.make("MEMBERS", router, router=router, routers=[
        *(entry(c, False) for c in live), *(entry(c, True) for c in dead)]))


def mesh_links(ctx: zmq.Context, endpoint: str) -> Links:
    return Links(ctx, [endpoint], "sink-1", "sink", counts=Counter(),
                 throttle=Throttle(logging.getLogger("test_link"), 10.0, Clock()))


def test_a_mesh_routers_members_are_linked_to_asked_again_and_dropped():
    ctx = zmq.Context()
    first, second = "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"
    links = mesh_links(ctx, first)
    try:
        configured = links[0]
        configured.socket = SendingSocket([mesh_welcome("router-1", first, second)])
        assert [m.type for _, m in links.read(configured)] == ["WELCOME"]
        assert [link.endpoint for link in links] == [first, second]
        learned = links[1]
        assert learned.learned and learned.socket is not None and not configured.learned
        # the router of a mesh is asked MEMBERS every MEMBERS_EVERY seconds, nobody else
        links.hellos(100.0, 1.0)
        asked = [f[1] for f in configured.socket.sent]
        assert asked == [b"MEMBERS"] and configured.next_members == 100.0 + MEMBERS_EVERY
        links.hellos(100.5, 1.0)
        assert len(configured.socket.sent) == 1
        # second dead: the learned link is dropped, never the configured one
        configured.socket.frames = [members_answer("router-1", [first], [second])]
        assert list(links.read(configured)) == []
        assert [link.endpoint for link in links] == [first]
        assert links.counts["router_learned"] == 1 and links.counts["router_dropped"] == 1
        assert learned.socket is None
        configured.socket.frames = [members_answer("router-1", [])]
        list(links.read(configured))
        assert [link.endpoint for link in links] == [first]
    finally:
        links.close()
        ctx.term()


def test_a_learned_link_to_a_router_already_linked_is_dropped():
    ctx = zmq.Context()
    first, alias = "tcp://127.0.0.1:1", "tcp://localhost:1"
    links = mesh_links(ctx, first)
    try:
        links[0].socket = SendingSocket([mesh_welcome("router-1", alias)])
        list(links.read(links[0]))
        learned = links[1]
        learned.socket.close(0)
        learned.socket = SendingSocket([mesh_welcome("router-1", alias)])
        assert list(links.read(learned)) == []
        assert [link.endpoint for link in links] == [first] and alias in links.ignored
        links[0].socket.frames = [mesh_welcome("router-1", alias)]
        list(links.read(links[0]))
        assert [link.endpoint for link in links] == [first]       # not linked again
    finally:
        links.close()
        ctx.term()
