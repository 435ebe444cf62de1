"""The agents' slow path without sockets: :class:`router.admission.Admission` fed frames
built with the codec, a recording port and clocks the test moves."""

from __future__ import annotations

import ast
import inspect

import pytest

import router.admission
import router.control
import router.port

from fleetwatch import protocol
from fleetwatch.protocol import SIGNATURE
from router.admission import CLONE_TEXT, Admission
from router.config import RouterLimits
from router.counters import Counters
from router.peers import Peers
from support.routerport import Clock, RecordingPort

UUID, OTHER = "a" * 32, "b" * 32
RID, RID2, RID3 = b"\x00rid-one", b"\x00rid-two", b"\x00rid-three"


class Router:
    """An Admission with everything it is given, for a test to drive and look into."""

    def __init__(self, curve: bool = False, **limits):
        self.clock, self.monotonic = Clock(), Clock(1000.0)
        self.peers = Peers(3.0, self.clock, b"router-1")
        self.counters = Counters(protocol.AGENT_TYPES)
        self.port = RecordingPort("router-1", self.monotonic)
        self.admission = Admission(self.peers, self.counters, self.port, "router-1",
                                   RouterLimits(**limits), curve, self.clock, self.monotonic)

    def stranger(self, rid: bytes, frames: list[bytes], conn=None) -> None:
        """As the relay hands over a message from a routing id not attached (read frame by
        frame, with the connection's properties)."""
        self.admission.unknown(rid, frames, self.clock(), {} if conn is None else conn)

    def attached(self, rid: bytes, frames: list[bytes]) -> None:
        """As the hot path hands over a message it does not take (read the fast way)."""
        self.admission.agent_message(rid, frames, self.clock())

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.monotonic.advance(seconds)


def hello(uuid: str = UUID, instance: str | None = None, heartbeat: float = 5.0):
    return protocol.encode(protocol.make("HELLO", uuid, hostname="host-1", heartbeat=heartbeat,
                                         role="agent", instance=instance))


def notify(uuid: str = UUID, text: str = "disk full"):
    return protocol.encode(protocol.make("NOTIFY", uuid, severity="error", text=text))


def test_a_hello_binds_the_routing_id_and_is_welcomed_and_relayed():
    r = Router()
    frames = hello()
    r.stranger(RID, frames)
    peer = r.peers.get(RID)
    assert peer is not None and peer.uuid == UUID and r.peers.by_uuid(UUID) is peer
    (rid, welcome), = r.port.replies
    assert rid == RID and welcome.type == "WELCOME" and welcome.get("router") == "router-1"
    assert r.port.relayed == [(b"HELLO/" + UUID.encode() + b"/router-1", b"HELLO", frames[2])]
    assert r.counters.received[b"HELLO"] == 1 and r.port.refusals == []
    # then its messages are relayed, stamped with its uuid, and count as signs of life
    r.advance(2.0)
    frames = notify()
    r.attached(RID, frames)
    assert r.port.relayed[-1] == (b"NOTIFY/" + UUID.encode() + b"/router-1", b"NOTIFY",
                                  frames[2])
    assert peer.last_heard == r.clock() and r.counters.received[b"NOTIFY"] == 1


def test_a_hello_whose_connection_is_gone_binds_nothing_and_reaches_no_sink():
    # the agent gave up waiting, reconnected (RID2, attached) and closed RID: its HELLO,
    # read late, must not move the agent to the dead connection (its heartbeats on RID2
    # would be refused 401) nor tell the registry of an attachment that never was
    r = Router()
    r.stranger(RID2, hello())
    r.port.gone.add(RID)
    r.stranger(RID, hello())
    assert r.peers.by_uuid(UUID).routing_id == RID2 and RID not in r.peers
    assert r.port.relayed_types() == [b"HELLO"] and r.counters.admission_gone == 1
    assert r.counters.metrics(1)["router.admission_gone"] == 1
    r.attached(RID2, hello())                       # an attached one says HELLO again
    assert r.port.types_replied() == ["WELCOME", "WELCOME"]


def test_a_heartbeat_is_answered_with_the_routers_own_and_relayed():
    r = Router()
    r.stranger(RID, hello())
    r.attached(RID, protocol.encode(protocol.make("HEARTBEAT", UUID)))
    assert r.port.types_replied() == ["WELCOME", "HEARTBEAT"]
    assert r.port.replies[-1][1].uuid == "router-1"
    assert r.port.relayed_types() == [b"HELLO", b"HEARTBEAT"]


def test_a_message_before_hello_is_refused_401_and_not_relayed():
    r = Router()
    r.stranger(RID, notify())
    refusal, = r.port.refusals
    assert (refusal.rid, refusal.status, refusal.ref) == (RID, protocol.HELLO_REQUIRED, "NOTIFY")
    assert not refusal.careful          # read frame by frame: its framing is certain
    assert r.port.relayed == [] and r.peers.get(RID) is None
    assert r.counters.received[b"NOTIFY"] == 0


@pytest.mark.parametrize("frames, status, reason", [
    ([SIGNATURE, b"BOGUS", b"{}"], protocol.BAD_REQUEST, "unknown message type"),
    ([SIGNATURE, b"ACK", b"{}"], protocol.NOT_ALLOWED, "ACK not accepted here"),
    ([b"XXXX", b"NOTIFY", b"{}"], protocol.BAD_REQUEST, "bad signature"),
    ([b"FWP\x09", b"NOTIFY", b"{}"], protocol.VERSION_NOT_SUPPORTED, "version 9"),
    ([SIGNATURE, b"NOTIFY"], protocol.BAD_REQUEST, "expected 3 frames, got 2"),
    ([SIGNATURE, b"HELLO", b"{not json"], protocol.BAD_REQUEST, ""),
])
def test_bad_frames_are_refused_with_their_status(frames, status, reason):
    r = Router()
    r.stranger(RID, hello())
    r.attached(RID, frames)
    refusal, = r.port.refusals
    assert refusal.status == status and reason in refusal.reason
    assert refusal.answer and refusal.careful     # read the fast way: drain carefully
    assert r.port.relayed_types() == [b"HELLO"]


def test_an_error_is_refused_without_an_answer():
    r = Router()
    r.stranger(RID, protocol.encode(protocol.error(protocol.BAD_REQUEST, "no", None, UUID)))
    refusal, = r.port.refusals
    assert refusal.status == protocol.NOT_ALLOWED and not refusal.answer


def test_an_agent_above_its_rate_is_dropped_and_answered_429_once_a_second():
    r = Router(rate=1.0, burst=2.0)
    r.stranger(RID, hello())
    for _ in range(5):                  # the burst's 2 pass, then 3 above the rate
        r.attached(RID, notify())
    assert r.port.relayed_types() == [b"HELLO", b"NOTIFY", b"NOTIFY"]
    assert r.counters.rate_limited == 3
    assert r.port.types_replied() == ["WELCOME", "ERROR"]      # one 429 a second
    answer = r.port.replies[-1][1]
    assert answer.get("status") == protocol.RATE_LIMITED and answer.uuid == "router-1"
    r.advance(1.0)
    r.admission.sweep()                 # refills one token a second
    r.attached(RID, notify())
    r.attached(RID, notify())
    assert r.port.relayed_types()[-1:] == [b"NOTIFY"] and r.counters.rate_limited == 4
    assert r.port.types_replied() == ["WELCOME", "ERROR", "ERROR"]
    assert r.counters.received[b"NOTIFY"] == 3


def test_new_limits_cut_every_bucket_at_once():
    r = Router(rate=10.0, burst=100.0, hellos_per_second=50.0)
    r.stranger(RID, hello())
    r.admission.set_limits(1.0, 3.0, 2.0)
    assert r.peers.get(RID).tokens == 3.0 and r.peers.burst == 3.0
    assert r.admission.pacer.rate == 2.0 and r.admission.pacer.tokens == 2.0


def test_new_agents_are_admitted_at_the_pace_and_the_rest_wait_their_turn():
    r = Router(hellos_per_second=2.0)
    for rid in (RID, RID2, RID3):
        r.stranger(rid, hello(rid.hex()))
    assert r.port.types_replied() == ["WELCOME", "WELCOME"]       # the third waits
    assert r.counters.admission_deferred == 1 and r.peers.get(RID3) is None
    assert len(r.admission.waiting) == 1
    r.stranger(RID3, notify(RID3.hex()))                          # others are not paced
    assert r.port.statuses() == [protocol.HELLO_REQUIRED]
    r.admission.admit_waiting(r.clock())                          # no token yet
    assert r.peers.get(RID3) is None
    r.advance(1.0)
    r.admission.admit_waiting(r.clock())    # on its first connection: no new handshake
    assert r.peers.get(RID3) is not None and len(r.peers) == 3
    assert r.port.types_replied()[-1] == "WELCOME" and not r.admission.waiting


def test_the_newest_waiting_hello_goes_first_and_one_its_agent_gave_up_on_is_dropped():
    """Under a storm the newest HELLO's agent has the most time left before it gives up
    and reconnects; one that waited past its agent's liveness (3 declared heartbeats, less
    the way back) is dropped unanswered."""
    r = Router(hellos_per_second=1.0)
    r.stranger(RID, hello(RID.hex(), heartbeat=2.0))
    r.stranger(RID2, hello(RID2.hex(), heartbeat=2.0))  # waits: its agent gives up at 6 s
    r.advance(3.0)
    r.stranger(RID3, hello(RID3.hex(), heartbeat=2.0))  # waits
    r.stranger(RID2, hello(RID2.hex(), heartbeat=2.0))  # again: in its place, its deadline
    assert list(r.admission.waiting) == [RID2, RID3] and r.counters.admission_deferred == 3
    r.advance(1.0)                                      # one token: the newest
    r.admission.admit_waiting(r.clock())
    assert r.peers.get(RID3) is not None and r.peers.get(RID2) is None
    r.advance(2.0)                                      # 6 s: RID2's agent has reconnected
    r.admission.admit_waiting(r.clock())
    assert r.peers.get(RID2) is None and not r.admission.waiting
    assert r.counters.admission_expired == 1
    assert r.port.types_replied() == ["WELCOME", "WELCOME"]


def test_a_waiting_hello_waits_as_long_as_its_own_agent_does():
    """Issue 31, 13: a fixed 4 s wait answered agents beating every second (they give up
    after 3 s) on connections they had closed, and sent them round again. The newest
    waiting HELLO whose agent gave up is skipped, and the token goes to the next."""
    r = Router(hellos_per_second=1.0)
    r.stranger(RID, hello(RID.hex(), heartbeat=1.0))    # admitted: the first token
    r.stranger(RID2, hello(RID2.hex(), heartbeat=10.0))  # waits 29.75 s at most
    r.stranger(RID3, hello(RID3.hex(), heartbeat=1.0))   # waits 2.75 s at most
    r.advance(2.9)
    r.admission.admit_waiting(r.clock())
    assert r.peers.get(RID3) is None and r.peers.get(RID2) is not None
    assert r.counters.admission_expired == 1 and not r.admission.waiting
    assert r.port.types_replied() == ["WELCOME", "WELCOME"]


@pytest.mark.parametrize("body, seconds", [
    (b'{"heartbeat": 1}', 2.75),
    (b'{"heartbeat": 2.0}', 5.75),
    (b'{"heartbeat": 3600}', 30.0),                 # at most WAITING_SECONDS
    (b'{"heartbeat": 0.01}', 0.0),
    (b'{"heartbeat": true}', 5.75),                 # not a number: the agent's default
    (b'{"heartbeat": "1"}', 5.75),
    (b'{"heartbeat": -1}', 5.75),
    (b"[1, 2]", 5.75),
    (b"\xff not json", 5.75),
    (b'{"heartbeat": 1, "pad": "' + b"x" * 5000 + b'"}', 5.75),   # too long to read
])
def test_patience_is_the_declared_liveness_less_the_way_back(body, seconds):
    assert router.admission.patience(body) == pytest.approx(seconds)


def test_the_waiting_room_is_bounded(monkeypatch):
    monkeypatch.setattr(router.admission, "WAITING_MAX", 1)
    r = Router(hellos_per_second=1.0)
    for rid in (RID, RID2, RID3):
        r.stranger(rid, hello(rid.hex()))
    assert list(r.admission.waiting) == [RID2]          # RID3: no room, no answer
    assert r.counters.admission_expired == 1 and r.port.types_replied() == ["WELCOME"]


def test_two_processes_alternating_on_one_uuid_are_reported_once_as_a_clone():
    r = Router()
    for rid, instance in ((RID, "i-a"), (RID2, "i-b"), (RID3, "i-a"), (RID2, "i-b")):
        r.advance(5.0)
        r.stranger(rid, hello(instance=instance))
    assert r.counters.clones == 1 and r.counters.events == 1
    envelope, type_frame, body = [m for m in r.port.relayed if m[1] == b"NOTIFY"][0]
    assert envelope == b"NOTIFY/router-1/router-1"
    event = protocol.decode([SIGNATURE, type_frame, body])
    assert (event.get("severity"), event.get("source")) == ("error", "router-security")
    assert event.get("text") == CLONE_TEXT.format(uuid=UUID, a="i-a", b="i-b")
    assert r.peers.by_uuid(UUID).routing_id == RID2      # the uuid is at its newest HELLO
    assert r.peers.get(RID) is None and r.peers.get(RID3) is None


def test_a_restart_is_no_clone():
    r = Router()
    for rid, instance in ((RID, "i-a"), (RID2, "i-b"), (RID3, "i-b")):
        r.stranger(rid, hello(instance=instance))
    assert r.counters.clones == 0 and r.port.relayed_types() == [b"HELLO"] * 3


def test_a_bound_routing_id_cannot_claim_another_uuid():
    r = Router()
    r.stranger(RID, hello(UUID))
    r.attached(RID, hello(OTHER))
    refusal, = r.port.refusals
    assert refusal.status == protocol.FORBIDDEN and f"speaks for uuid {UUID}" in refusal.reason
    assert r.counters.refused["uuid_mismatch"] == 1
    assert r.counters.events == 0                         # security events are CURVE's
    assert r.peers.by_uuid(OTHER) is None and r.peers.get(RID).uuid == UUID


def test_no_agent_takes_the_routers_own_id():
    """The router's own STATS is stamped ``STATS/ID/ID``: an agent of that uuid would pass
    for the router (SPEC 4.3, issue 31 item 6)."""
    r = Router()
    r.stranger(RID, hello("router-1"))
    refusal, = r.port.refusals
    assert refusal.status == protocol.FORBIDDEN and "this router's own id" in refusal.reason
    assert r.counters.refused["own_id"] == 1
    assert r.peers.get(RID) is None and r.port.relayed == []


def test_with_curve_the_connections_key_must_be_bound_to_the_uuid():
    r = Router(curve=True)
    r.stranger(RID, hello(UUID), {"User-Id": "agent:" + UUID, "Peer-Address": "10.0.0.1"})
    assert r.port.types_replied() == ["WELCOME"] and r.peers.get(RID) is not None
    for rid in (RID2, RID3):             # another key claiming it: refused, reported once
        r.stranger(rid, hello(UUID), {"User-Id": "agent:" + OTHER, "Peer-Address": "10.0.0.9"})
    assert r.port.statuses() == [protocol.FORBIDDEN] * 2
    assert r.counters.refused["uuid_mismatch"] == 2 and r.counters.events == 1
    event = protocol.decode([SIGNATURE, b"NOTIFY", r.port.relayed[-1][2]])
    assert "from 10.0.0.9 claimed uuid " + UUID in event.get("text")
    assert "bound to uuid " + OTHER in event.get("text")
    assert r.peers.by_uuid(UUID).routing_id == RID
    # a connection without properties (no key) is refused too
    r.stranger(b"\x00rid-four", hello(UUID), {})
    assert r.port.refusals[-1].status == protocol.FORBIDDEN


def test_the_sweep_forgets_nothing_an_attached_agent_needs():
    r = Router(rate=5.0, burst=10.0)
    r.stranger(RID, hello())
    peer = r.peers.get(RID)
    peer.tokens = 0.0
    r.advance(1.0)
    r.admission.sweep()
    assert peer.tokens == 5.0
    r.advance(10.0)
    r.admission.sweep()
    assert peer.tokens == 10.0 and r.peers.get(RID) is peer


@pytest.mark.parametrize("module", [router.admission, router.control, router.port])
def test_the_slow_path_never_imports_the_relay(module):
    """The imports point one way: relay -> admission, control -> port."""
    imported = set()
    for node in ast.walk(ast.parse(inspect.getsource(module))):
        if isinstance(node, ast.ImportFrom):
            imported.add(node.module)
        elif isinstance(node, ast.Import):
            imported.update(a.name for a in node.names)
    assert not {m for m in imported if m.startswith("router.relay")}, imported
