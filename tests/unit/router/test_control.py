"""The control socket's requests without sockets: :class:`router.control.ControlDesk` fed
frames built with the codec, a recording port and a clock the test moves."""

from __future__ import annotations

import pytest

from fleetwatch import protocol
from fleetwatch.protocol import SIGNATURE
from router.control import ControlDesk
from router.counters import Counters
from router.peers import Peers
from router.port import FULL, GONE
from support.routerport import Clock, RecordingPort

CLIENT = b"\x00client"


class Desk:
    def __init__(self, agents: int = 0):
        self.clock = Clock()
        self.peers = Peers(3.0, self.clock, b"router-1")
        for i in range(agents):
            self.peers.hello(f"rid-{i}".encode(), f"agent-{i:03d}", f"host-{i}", 5.0)
        self.counters = Counters(protocol.AGENT_TYPES)
        self.port = RecordingPort("router-1")
        self.desk = ControlDesk(self.peers, self.counters, self.port, "router-1",
                                clock=self.clock)

    def request(self, type_: str, target: str = "", **fields) -> protocol.Message:
        msg = protocol.make(type_, "sink-1", **fields)
        self.desk.control_message(CLIENT, protocol.encode_control(msg, target))
        return msg

    def answer(self) -> protocol.Message:
        rid, msg = self.port.replies[-1]
        assert rid == CLIENT
        return msg


def test_hello_is_welcomed():
    d = Desk()
    d.request("HELLO", hostname="sinkhost", heartbeat=5.0, role="sink")
    assert d.port.types_replied() == ["WELCOME"] and d.answer().get("router") == "router-1"
    assert d.port.refusals == [] and d.port.relayed == []


def test_peers_pages_through_the_agents_in_uuid_order():
    d = Desk(agents=5)
    d.request("PEERS", limit=2)
    page = d.answer()
    assert [a["uuid"] for a in page.get("agents")] == ["agent-000", "agent-001"]
    assert page.get("total") == 5 and page.get("next") == "agent-001"
    assert page.uuid == "router-1" and page.ts == d.clock()
    assert page.get("agents")[0] == {"uuid": "agent-000", "hostname": "host-0",
                                     "since": d.clock(), "last_heard": d.clock()}
    seen = []
    after = None
    while True:
        d.request("PEERS", limit=2, after=after)
        page = d.answer()
        seen += [a["uuid"] for a in page.get("agents")]
        after = page.get("next")
        if after is None:
            break
    assert seen == [f"agent-{i:03d}" for i in range(5)]


def test_peers_without_a_limit_is_one_default_page_and_limit_0_a_summary():
    d = Desk(agents=3)
    d.request("PEERS")
    assert len(d.answer().get("agents")) == 3 and d.answer().get("next") is None
    d.request("PEERS", limit=0)
    assert d.answer().get("agents") == [] and d.answer().get("total") == 3


def test_a_backends_stats_is_relayed_stamped_with_its_sender():
    """Its id ends the path, as a router's own STATS's does, so that no agent passes for
    it (an agent's uuid never ends the path: SPEC 4.3, issue 31 item 6)."""
    d = Desk()
    msg = d.request("STATS", metrics={"sink.received": 3}, source="sink")
    assert d.port.relayed == [(b"STATS/sink-1/router-1,sink-1", b"STATS",
                               protocol.encode_body(msg))]
    assert d.counters.control_stats == 1 and d.port.replies == []
    relayed = protocol.decode_relayed([SIGNATURE, *d.port.relayed[0][::2]])
    assert (relayed.router, protocol.reporter(relayed)) == ("router-1", "sink")


def test_a_stats_that_does_not_say_it_comes_from_a_backend_is_refused():
    d = Desk()
    msg = d.request("STATS", metrics={"x": 1}, source="agent")
    refusal, = d.port.refusals
    assert (refusal.status, refusal.ref) == (protocol.BAD_REQUEST, msg.msg_id)
    assert "source must be one of scheduler, sink" in refusal.reason
    assert d.port.relayed == [] and d.counters.control_stats == 0


def test_run_and_ack_are_forwarded_to_the_attached_agent_as_received():
    d = Desk(agents=2)
    run = d.request("RUN", "agent-001", command_id="c1", plugin="check_disk")
    ack = d.request("ACK", "agent-001", msg_ids=["m1"])
    assert d.port.sent == [(b"rid-1", b"RUN", protocol.encode_body(run)),
                           (b"rid-1", b"ACK", protocol.encode_body(ack))]
    assert d.counters.forwarded == {"RUN": 1, "ACK": 1} and d.port.replies == []


@pytest.mark.parametrize("outcome, status, reason", [
    (None, protocol.NOT_FOUND, "agent agent-009 is not attached here"),
    (FULL, protocol.UNAVAILABLE, "agent agent-009 is not reading"),
    (GONE, protocol.NOT_FOUND, "agent agent-009 is not attached here"),
])
def test_a_run_that_cannot_be_forwarded_is_answered_with_an_error(outcome, status, reason):
    d = Desk()
    if outcome is not None:             # attached, but its connection is full or gone
        d.peers.hello(b"rid-9", "agent-009", "host-9", 5.0)
        d.port.agent_outcome = outcome
    run = d.request("RUN", "agent-009", command_id="c1", plugin="check_disk")
    err = d.answer()
    assert err.type == "ERROR" and err.uuid == "router-1"
    assert (err.get("status"), err.get("reason"), err.get("ref")) == (status, reason, run.msg_id)
    assert d.counters.forwarded == {}
    # a RUN for an agent attached elsewhere is what a scheduler's RUN to every router
    # meets on all routers but one: counted apart, no fault (issue 31 item 12)
    if status == protocol.NOT_FOUND:
        assert d.counters.run_elsewhere == 1 and d.counters.bad == {}
        assert d.counters.metrics(0)["router.run.elsewhere"] == 1
    else:
        assert d.counters.bad[status] == 1 and d.counters.run_elsewhere == 0
    # a connection found gone is forgotten; one not reading is kept
    assert (d.peers.by_uuid("agent-009") is None) == (outcome in (None, GONE))


def test_an_ack_of_the_routers_own_events_is_swallowed():
    d = Desk()
    d.request("ACK", "router-1", msg_ids=["m1"])
    assert d.counters.own_acks == 1
    assert d.port.replies == [] and d.port.sent == [] and d.counters.bad == {}


@pytest.mark.parametrize("frames, status, answer", [
    ([SIGNATURE, b"RUN", b"", b"{}"], protocol.BAD_REQUEST, True),          # no target
    ([SIGNATURE, b"NOTIFY", b"", b"{}"], protocol.NOT_ALLOWED, True),       # not a control type
    ([SIGNATURE, b"ERROR", b"", b"{}"], protocol.NOT_ALLOWED, False),       # never answered
    ([SIGNATURE, b"PEERS", b"{}"], protocol.BAD_REQUEST, True),             # 3 frames
    ([b"FWP\x02", b"PEERS", b"", b"{}"], protocol.VERSION_NOT_SUPPORTED, True),
    ([SIGNATURE, b"PEERS", b"", b"[]"], protocol.BAD_REQUEST, True),        # body not an object
])
def test_bad_requests_are_refused(frames, status, answer):
    d = Desk(agents=1)
    d.desk.control_message(CLIENT, frames)
    refusal, = d.port.refusals
    assert (refusal.rid, refusal.status, refusal.answer) == (CLIENT, status, answer)
    assert d.port.replies == [] and d.port.relayed == [] and d.port.sent == []


# ---------------------------------------------------------------- MEMBERS (SPEC 4.9)

def member(name: str, beat: int = 1, **extra) -> dict:
    return {"id": name, "incarnation": 5, "beat": beat, **extra,
            "endpoints": {"agents": f"tcp://{name}:1", "control": f"tcp://{name}:2",
                          "tail": f"tcp://{name}:3"}}


class MeshDesk(Desk):
    """A desk with a member table; ``gossip`` merges into it as the mesh would."""

    def __init__(self, curve: bool = False):
        super().__init__()
        from router.members import Members
        self.members = Members("router-1", {"agents": "tcp://r1:1", "control": "tcp://r1:2",
                                            "tail": "tcp://r1:3"}, 7, clock=self.clock)
        self.merged: list[list] = []

        def gossip(entries):
            self.merged.append(entries)
            return self.members.merge(entries).joined
        self.desk = ControlDesk(self.peers, self.counters, self.port, "router-1",
                                clock=self.clock, members=self.members, gossip=gossip,
                                curve=curve)

    def members_request(self, user: str = "", **fields) -> None:
        msg = protocol.make("MEMBERS", "r2", **fields)
        self.desk.control_message(CLIENT, protocol.encode_control(msg), user)


def test_members_from_a_client_is_answered_and_merges_nothing():
    d = MeshDesk()
    d.members_request()
    d.members_request(routers=[])
    assert d.merged == [] and d.port.types_replied() == ["MEMBERS", "MEMBERS"]
    [own] = d.answer().get("routers")
    assert own["id"] == "router-1" and own["endpoints"]["control"] == "tcp://r1:2"
    assert d.answer().get("router") == "router-1"


def test_a_routers_members_is_merged_then_answered_with_the_table():
    d = MeshDesk()
    d.members_request(router="r2", routers=[member("r2"), {"id": "bad"}])
    assert [m.id for m in d.members.live()] == ["router-1", "r2"]
    assert {e["id"] for e in d.answer().get("routers")} == {"router-1", "r2"}
    assert d.port.refusals == []


def test_with_curve_only_a_router_key_may_tell():
    d = MeshDesk(curve=True)
    d.members_request(user="backend:operator", routers=[member("r2")])
    [refusal] = d.port.refusals
    assert refusal.status == protocol.FORBIDDEN and refusal.ref is not None
    assert d.desk.mesh_refused == 1 and d.merged == [] and len(d.members) == 1
    d.members_request(user="backend:operator")            # asking is allowed
    assert d.port.types_replied() == ["MEMBERS"]
    d.members_request(user="router:fleet", routers=[member("r2")])
    assert len(d.members) == 2 and d.desk.mesh_refused == 1


def test_malformed_members_bodies_are_refused_400_and_counted():
    d = MeshDesk()
    d.members_request(routers=["not an object"])
    d.members_request(routers=[member(f"r{n}") for n in range(257)])
    assert [r.status for r in d.port.refusals] == [400, 400]
    assert d.desk.mesh_bad == 2 and d.merged == [] and len(d.members) == 1


def test_peers_says_the_backends_heard_and_the_routers_uptime():
    """Each back-end process whose STATS the router relayed, by the uuid it stamps, with
    when it was last heard (``ago``, by the router's clock) and its interval as seen: what
    ``status --problems`` tells a silent scheduler by (issue 31, item 11), and the version
    its last STATS said, beside the router's own (``status``'s version columns)."""
    from fleetwatch import __version__
    d = Desk()
    d.request("STATS", metrics={}, source="scheduler", hostname="h1")
    d.clock.now += 60
    d.request("STATS", metrics={}, source="scheduler", hostname="h1", version="1.2.3")
    d.clock.now += 200
    d.request("PEERS")
    page = d.answer()
    assert page.get("backends") == [{"uuid": "sink-1", "role": "scheduler", "hostname": "h1",
                                     "version": "1.2.3", "last_heard": d.clock.now - 200,
                                     "every": 60.0, "ago": 200.0}]
    assert page.get("uptime") == 260.0 and "sites_lost" not in page.body
    assert page.get("version") == __version__
    d.request("STATS", metrics={}, source="agent")          # refused: not kept either
    d.request("PEERS")
    assert [b["uuid"] for b in d.answer().get("backends")] == ["sink-1"]


def test_the_backends_kept_are_bounded_and_forgotten_after_a_day():
    from router.heard import KEEP, Backends
    clock = Clock()
    kept = Backends(clock, most=2)
    for name in ("a", "b", "c"):
        kept.heard(name, "sink", None)
        clock.now += 1
    assert [b["uuid"] for b in kept.answer()] == ["b", "c"] and kept.unkept == 1
    clock.now += KEEP
    kept.heard("c", "sink", None)
    assert [b["uuid"] for b in kept.answer()] == ["c"]


def test_attached_says_which_uuids_are_attached_here_and_only_to_a_router_key():
    """Another router of the mesh asks before it lets a site speak for uuids (SPEC 4.10)."""
    d = Desk(agents=2)
    asked = d.request("ATTACHED", uuids=["agent-001", "nobody"])
    answer = d.answer()
    assert answer.type == "ATTACHED" and answer.get("ref") == asked.msg_id
    assert answer.get("attached") == {"agent-001": ""}
    d.desk.curve = True
    d.desk.control_message(CLIENT, protocol.encode_control(
        protocol.make("ATTACHED", "sink-1", uuids=["agent-001"])), user="sink:s")
    assert d.port.refusals[-1].status == protocol.FORBIDDEN and d.desk.mesh_refused == 1
    d.desk.control_message(CLIENT, protocol.encode_control(
        protocol.make("ATTACHED", "router-2", uuids=["agent-000"])), user="router:router-2")
    assert d.answer().get("attached") == {"agent-000": ""}
