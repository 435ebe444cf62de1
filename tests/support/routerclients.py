"""Clients of a real router process, for its integration tests: agents (a DEALER with a
secret routing id, plain or CURVE), back-end control clients, sink PULLs, and the waits that
prove a router still serves them."""

from __future__ import annotations

import time
import uuid as uuidlib

import zmq

from agent.links import connection_id
from fleetwatch import protocol, security
from support.zmqio import expect, recv_until, resend_until


class FakeAgent:
    """A plain DEALER with a secret routing id like the agent's, speaking through the real
    codec."""

    def __init__(self, ctx: zmq.Context, endpoint: str, uuid: str | None = None,
                 routing_id: bytes | None = None):
        self.uuid = uuid or uuidlib.uuid4().hex
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.routing_id = routing_id or connection_id()
        self.sock.connect(endpoint)

    def send(self, type_: str, **fields) -> protocol.Message:
        msg = protocol.make(type_, self.uuid, **fields)
        self.sock.send_multipart(protocol.encode(msg))
        return msg

    def hello(self, heartbeat: float = 5.0) -> protocol.Message:
        self.send("HELLO", hostname=f"host-{self.uuid[:6]}", heartbeat=heartbeat, role="agent")
        return self.expect("WELCOME")

    def notify(self, text: str = "disk full") -> protocol.Message:
        return self.send("NOTIFY", severity="error", text=text)

    def expect(self, type_: str, timeout: float = 5.0, durable: bool = False) -> protocol.Message:
        """The next message of ``type_``; an ERROR 503 of a durable route (a NOTIFY or
        REGISTER no sink of a durable type took, SPEC 4.1: the tests' routers often run
        without a history sink) is skipped unless ``durable``."""
        deadline = time.monotonic() + timeout
        while True:
            msg = expect(self.sock, type_, max(0.01, deadline - time.monotonic()))
            if durable or not (msg.type == "ERROR" and msg.get("status") == protocol.UNAVAILABLE
                               and msg.get("ref") in protocol.ACK_OWNERS):
                return msg


class FakeControl:
    """A back-end client DEALER on the control socket."""

    def __init__(self, ctx: zmq.Context, endpoint: str):
        self.uuid = f"cli-{uuidlib.uuid4().hex[:8]}"
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.connect(endpoint)

    def send(self, type_: str, target: str = "", **fields) -> protocol.Message:
        msg = protocol.make(type_, self.uuid, **fields)
        self.sock.send_multipart(protocol.encode_control(msg, target))
        return msg

    def expect(self, type_: str, timeout: float = 5.0) -> protocol.Message:
        return expect(self.sock, type_, timeout)

    def peers(self) -> list[dict]:
        self.send("PEERS")
        return self.expect("PEERS").body["agents"]


def relay_until_received(agent: FakeAgent, sink: zmq.Socket, timeout: float = 10.0):
    """Send NOTIFYs until one reaches ``sink`` (its PUSH connection may still be forming)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sent = agent.notify("warm-up")
        if sink.poll(50):
            return sent, protocol.decode_relayed(sink.recv_multipart())
    raise AssertionError("no NOTIFY reached the sink")


def rate_limited(frames) -> bool:
    """An ERROR 429 (not the 503s of the durable NOTIFY route to history, if absent)."""
    return frames[1] == b"ERROR" and \
        protocol.decode(frames).body["status"] == protocol.RATE_LIMITED


# ---------------------------------------------------------------- with CURVE (SPEC 7)

def secure_router(fleet, keys, **extra) -> dict:
    """A router of ``fleet`` with CURVE on, its server key and allowlists from ``keys``."""
    return fleet.router(security=keys.router_security(), **extra)


def dealer(ctx, endpoint: str, routing_id: bytes | str | None, cert, keys):
    """A DEALER, a CURVE client with ``cert`` (None: plain), connected to ``endpoint``."""
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    if routing_id:
        sock.routing_id = routing_id if isinstance(routing_id, bytes) else routing_id.encode()
    if cert is not None:
        security.client(sock, cert, keys.router)
    sock.connect(endpoint)
    return sock


def backend_pull(ctx, endpoint, cert, keys) -> zmq.Socket:
    """A sink's PULL with the back-end key ``cert``."""
    sock = ctx.socket(zmq.PULL)
    sock.linger = 0
    security.client(sock, cert, keys.router)
    sock.connect(endpoint)
    return sock


class Agent:
    """A DEALER speaking for ``uuid`` with ``cert`` (None: a plain NULL client), with a secret
    routing id like the agent's unless ``routing_id`` is given (b"": none, libzmq's)."""

    def __init__(self, ctx, endpoint, uuid, cert, keys, instance: str | None = None,
                 routing_id: bytes | None = None):
        self.ctx, self.endpoint, self.uuid, self.cert, self.keys = ctx, endpoint, uuid, cert, keys
        self.instance = instance
        self.routing_id = connection_id() if routing_id is None else routing_id
        self.sock = dealer(ctx, endpoint, self.routing_id, cert, keys)

    def send(self, type_: str, **fields) -> protocol.Message:
        msg = protocol.make(type_, self.uuid, **fields)
        try:
            self.sock.send_multipart(protocol.encode(msg), zmq.NOBLOCK)
        except zmq.Again:          # no connection (a refused handshake): as good as lost
            pass
        return msg

    def hello_msg(self) -> protocol.Message:
        extra = {"instance": self.instance} if self.instance else {}
        return self.send("HELLO", hostname="h", heartbeat=5.0, **extra)

    def answer(self, timeout: float = 5.0, resend: float = 0.5) -> protocol.Message | None:
        """HELLO (again every ``resend`` s) until WELCOME or ERROR; None if nothing came."""
        got = resend_until(self.sock, self.hello_msg,
                           lambda f: f[1:2] in ([b"WELCOME"], [b"ERROR"]), timeout, resend)
        return None if got is None else protocol.decode(got)

    def welcome(self, timeout: float = 10.0) -> protocol.Message:
        got = self.answer(timeout)
        assert got is not None and got.type == "WELCOME", got
        return got


def relayed_notify(sock, predicate, timeout=10.0) -> protocol.Relayed:
    """The first NOTIFY relayed to ``sock`` that satisfies ``predicate(relayed)``."""
    frames = recv_until(sock, lambda f: len(f) == 3 and f[1].startswith(b"NOTIFY/")
                        and predicate(protocol.decode_relayed(f)), timeout, "NOTIFY")
    return protocol.decode_relayed(frames)


def still_relayed(agent: Agent, sink: zmq.Socket, tag: str, timeout: float = 10.0) -> None:
    """A NOTIFY ``agent`` sends now reaches ``sink`` (skipping whatever else is queued,
    undecodable garbage too)."""
    def ours(frames):
        try:
            got = protocol.decode_relayed(frames)
        except protocol.ProtocolError:      # relayed undecoded from an attached agent
            return False
        if got.message.msg_id != sent[-1].msg_id:
            return False
        assert got.uuid == agent.uuid
        return True
    sent: list[protocol.Message] = []
    if resend_until(sink, lambda: sent.append(agent.send("NOTIFY", severity="info", text=tag)),
                    ours, timeout, 0.3) is None:
        raise AssertionError(f"{agent.uuid} is no longer relayed ({tag})")


def asked_for_hello(agent: Agent, timeout: float = 5.0) -> None:
    """``agent``'s messages are answered 401 (the router answers once a second per peer)."""
    def error(frames):
        if frames[1:2] != [b"ERROR"]:
            return False
        assert protocol.decode(frames).body["status"] == protocol.HELLO_REQUIRED
        return True
    if resend_until(agent.sock, lambda: agent.send("HEARTBEAT"), error, timeout, 0.3) is None:
        raise AssertionError(f"{agent.uuid} was not asked for HELLO")
