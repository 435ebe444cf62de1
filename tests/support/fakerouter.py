"""The back-ends' side of a router, faked for sink and operator tests (the agents' side is
tests/support/agentrouter.py): real sockets on 127.0.0.1, no router code.

It binds what a router binds for back-ends -- control (ROUTER), one PUSH per sink type and a
tail XPUB -- and a thread answers control requests as SPEC 4.3 says: HELLO with WELCOME
(with endpoints), PEERS with ``agents``; every control message is recorded, and ``on_ack``
runs in that thread the moment an ACK arrives (to check what was committed *before* it).
The PUSH and XPUB sockets belong to the test's thread.
"""

from __future__ import annotations

import threading
import time

import zmq

from fleetwatch import protocol

SINK_TYPES = ("registry", "alerting")


def relayed(type_: str, uuid: str, router: str = "fake-1", msg_id: str | None = None,
            **fields) -> tuple[protocol.Message, list[bytes]]:
    """A message and its frames as a router pushes it to a sink."""
    msg = protocol.make(type_, uuid, msg_id=msg_id, **fields)
    return msg, protocol.encode_relayed(msg, uuid, router)


def tailed(type_: str, uuid: str, router: str = "fake-1", msg_id: str | None = None,
           **fields) -> tuple[protocol.Message, list[bytes]]:
    """A message and its frames as a router publishes it on its tail: ENVELOPE, SIGNATURE, BODY.

    Built by hand, not with protocol.encode_tail, so that a codec bug cannot hide here.
    """
    msg = protocol.make(type_, uuid, msg_id=msg_id, **fields)
    return msg, [f"{type_}/{uuid}/{router}".encode(), protocol.SIGNATURE,
                 protocol.encode_body(msg)]


class BackendFacingRouter:
    """What sinks, the scheduler and operator commands talk to: control, sink PUSHes, tail."""

    def __init__(self, router_id: str = "fake-1", control: str | None = None,
                 agents: list[dict] | None = None, on_ack=None, ack_error: int | None = None):
        self.id = router_id
        #: if set, every ACK is answered with ERROR of this status (404: agent not attached)
        self.ack_error = ack_error
        self.agents = list(agents or [])
        self.on_ack = on_ack
        self.ctx = zmq.Context()
        self.control = self.ctx.socket(zmq.ROUTER)
        self.control.linger = 0
        self.control.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if control:
            self.control.bind(control)
            self.control_endpoint = control
        else:
            port = self.control.bind_to_random_port("tcp://127.0.0.1")
            self.control_endpoint = f"tcp://127.0.0.1:{port}"
        self.pushes: dict[str, zmq.Socket] = {}
        self.sink_endpoints: dict[str, str] = {}
        self._monitors: dict[str, zmq.Socket] = {}
        self._pullers: dict[str, int] = {}
        for type_ in SINK_TYPES:
            push = self.ctx.socket(zmq.PUSH)
            push.linger = 0
            push.sndtimeo = 5000
            self._monitors[type_] = push.get_monitor_socket(
                zmq.EVENT_HANDSHAKE_SUCCEEDED | zmq.EVENT_DISCONNECTED)
            self._pullers[type_] = 0
            port = push.bind_to_random_port("tcp://127.0.0.1")
            self.pushes[type_] = push
            self.sink_endpoints[type_] = f"tcp://127.0.0.1:{port}"
        self.xpub = self.ctx.socket(zmq.XPUB)
        self.xpub.linger = 0
        port = self.xpub.bind_to_random_port("tcp://127.0.0.1")
        self.tail_endpoint = f"tcp://127.0.0.1:{port}"
        self._lock = threading.Lock()
        self._received: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"fake-{router_id}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- what tests read
    @property
    def info(self) -> dict:
        """Like a real router's ready file: what ``fleet.sink`` and friends need."""
        return {"id": self.id, "endpoints": {"control": self.control_endpoint,
                                             "tail": self.tail_endpoint,
                                             "sinks": dict(self.sink_endpoints)}}

    def received(self, type_: str | None = None) -> list[dict]:
        with self._lock:
            return [r for r in self._received if type_ is None or r["type"] == type_]

    def acked(self) -> list[str]:
        return [m for r in self.received("ACK") for m in r["body"]["msg_ids"]]

    def pullers(self, type_: str) -> int:
        """Sinks whose PULL is connected (handshake done) to the PUSH of ``type_``."""
        from zmq.utils.monitor import recv_monitor_message
        mon = self._monitors[type_]
        while mon.poll(0):
            event = recv_monitor_message(mon)["event"]
            self._pullers[type_] += 1 if event == zmq.EVENT_HANDSHAKE_SUCCEEDED else -1
        return self._pullers[type_]

    # ---------------------------------------------------------------- what tests do
    def push(self, type_: str, frames: list[bytes]) -> None:
        self.pushes[type_].send_multipart(frames)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for type_, push in self.pushes.items():
            push.disable_monitor()
            self._monitors[type_].close(0)
            push.close(0)
        self.xpub.close(0)
        self.ctx.term()

    # ---------------------------------------------------------------- the thread
    def _serve(self) -> None:
        try:
            while not self._stop.is_set():
                if not self.control.poll(50):
                    continue
                ident, *frames = self.control.recv_multipart()
                self._handle(ident, frames)
        finally:
            self.control.close(0)

    def _handle(self, ident: bytes, frames: list[bytes]) -> None:
        target, msg = protocol.decode_control(frames)
        record = {"ident": ident, "type": msg.type, "target": target, "body": msg.body,
                  "at": time.monotonic()}
        if msg.type == "ACK" and self.on_ack is not None:
            record["observed"] = self.on_ack(target, msg.body["msg_ids"])
        with self._lock:
            self._received.append(record)
        if msg.type == "HELLO":
            reply = protocol.make("WELCOME", self.id, router=self.id, routers=[],
                                  endpoints={"agents": "", "control": self.control_endpoint,
                                             "tail": self.tail_endpoint,
                                             "sinks": dict(self.sink_endpoints)})
        elif msg.type == "PEERS":
            reply = protocol.make("PEERS", self.id, router=self.id, agents=self.agents)
        elif msg.type == "ACK" and self.ack_error:
            reply = protocol.error(self.ack_error, ref=msg.msg_id, uuid=self.id)
        else:
            return
        self.control.send_multipart([ident, *protocol.encode(reply)])
