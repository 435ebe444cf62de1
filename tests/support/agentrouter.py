"""The agents' side of a router, faked for tests of a real agent process: a ROUTER bound on
an ephemeral port of 127.0.0.1, pumped from the test's thread (no router code), the
``routers`` fixture that makes them, and the helpers that start an agent against them and
reach its intake. Registered as a pytest plugin by tests/conftest.py."""

from __future__ import annotations

import time

import pytest
import zmq

from fleetwatch.protocol import ACK_OWNERS
from fleetwatch import protocol
from support.fleet import intake_path, wait_for


class AgentFacingRouter:
    """The agents' side of a router, just enough of it: HELLO -> WELCOME, HEARTBEAT ->
    HEARTBEAT, ACK on demand. Pumped from the test's thread."""

    def __init__(self, ctx: zmq.Context, router_id: str = "fake-1", peers: list[str] = ()):
        self.id = router_id
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.peers = list(peers)
        self.received: list[tuple[bytes, protocol.Message]] = []
        self.garbage = 0
        self.auto_ack = False
        self.silent = False
        self.agent_rid: bytes | None = None

    @property
    def info(self) -> dict:
        return {"endpoints": {"agents": self.endpoint}}

    def pump(self, timeout: float = 0.05) -> None:
        """Receive and answer whatever arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if not self.sock.poll(max(0.0, left) * 1000):
                return
            rid, *frames = self.sock.recv_multipart()
            try:
                msg = protocol.decode(frames, protocol.AGENT_TYPES)
            except protocol.ProtocolError:
                self.garbage += 1
                continue
            self.agent_rid = rid
            self.received.append((rid, msg))
            if self.silent:
                continue
            if msg.type == "HELLO":
                self.send(rid, protocol.make("WELCOME", self.id, router=self.id,
                                             routers=[self.endpoint, *self.peers]))
            elif msg.type == "HEARTBEAT":
                self.send(rid, protocol.make("HEARTBEAT", self.id))
            elif msg.type in ("NOTIFY", "REGISTER") and self.auto_ack:
                self.ack(rid, [msg.msg_id], ACK_OWNERS[msg.type])

    def send(self, rid: bytes, msg: protocol.Message) -> None:
        self.sock.send_multipart([rid, *protocol.encode(msg)])

    def ack(self, rid: bytes, msg_ids: list[str], sink: str = "alerting") -> None:
        self.send(rid, protocol.make("ACK", self.id, msg_ids=msg_ids, sink=sink))

    def until(self, predicate, timeout: float = 10.0, what: str = "condition"):
        return wait_for(lambda: (self.pump(0.02), predicate())[1], timeout, 0.0, what)

    def watch(self, seconds: float) -> None:
        """Keep answering for ``seconds`` (an observation window, not a synchronisation)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.pump(0.05)

    def of_type(self, type_: str) -> list[protocol.Message]:
        return [m for _, m in self.received if m.type == type_]

    def copies(self, msg_id: str) -> list[protocol.Message]:
        return [m for _, m in self.received if m.body.get("msg_id") == msg_id]

    def close(self) -> None:
        self.sock.close(linger=0)


@pytest.fixture
def routers(zctx):
    """``routers(router_id="fake-1", peers=())`` makes an :class:`AgentFacingRouter`; all are
    closed after the test."""
    made = []

    def make(router_id: str = "fake-1", peers=()):
        r = AgentFacingRouter(zctx, router_id, peers)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def start_agent(fleet, routers, name="agent", **extra):
    """Start agent ``name`` of ``fleet`` against ``routers``: its process and config path."""
    path = fleet.agent_config([r.info for r in routers], name=name, **extra)
    proc = fleet.start(name, "agent", "--config", str(path))
    return proc, path


def agent_uuid(fleet, name="agent") -> str:
    return (fleet.root / f"{name}-state" / "uuid").read_text().strip()


def raw_intake(ctx, fleet, name="agent") -> zmq.Socket:
    """A DEALER on the intake socket of agent ``name`` (linger 0)."""
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"ipc://{intake_path(fleet, name)}")
    return sock
