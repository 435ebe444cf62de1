"""Ask every router one question on its control socket, all at once, with one deadline.

Used by the operator commands (``status`` asks PEERS, ``tail`` asks HELLO for the tail
endpoint). One DEALER per router, one poller, one deadline: an unreachable router costs the
timeout once, not once per router, and never hangs the command.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field

import zmq

from fleetwatch import __version__, protocol
from fleetwatch.protocol import Message, ProtocolError

log = logging.getLogger(__name__)


@dataclass
class Answer:
    """What one router endpoint said (``replies``, by type), or why not (``problem``)."""

    endpoint: str
    replies: dict[str, Message] = field(default_factory=dict)
    problem: str = ""

    @property
    def reachable(self) -> bool:
        return bool(self.replies)

    def get(self, type_: str) -> Message | None:
        return self.replies.get(type_)

    @property
    def router_id(self) -> str | None:
        for reply in self.replies.values():
            value = reply.get("router")
            if isinstance(value, str):
                return value
        return None


def cli_id() -> str:
    return f"cli@{socket.gethostname()}"[:protocol.MAX_ID]


def request(type_: str) -> Message:
    """The request body for ``type_`` (PEERS or HELLO) from the CLI."""
    if type_ == "HELLO":
        return protocol.make("HELLO", cli_id(), hostname=socket.gethostname(), heartbeat=1.0,
                             version=__version__, role="cli")
    return protocol.make(type_, cli_id())


def ask_all(endpoints: list[str], types: tuple[str, ...], timeout: float,
            ctx: zmq.Context | None = None, clock=time.monotonic) -> list[Answer]:
    """Send each of ``types`` to every endpoint; wait at most ``timeout`` seconds in all.

    Answers are kept by their type (HELLO is answered by WELCOME, PEERS by PEERS); an ERROR
    proves the router is there and is kept under ``ERROR``.
    """
    ctx = ctx or zmq.Context.instance()
    answers = [Answer(e) for e in endpoints]
    sockets: dict[zmq.Socket, Answer] = {}
    poller = zmq.Poller()
    try:
        for answer in answers:
            sock = ctx.socket(zmq.DEALER)
            sock.linger = 0
            try:
                sock.connect(answer.endpoint)
            except zmq.ZMQError as e:
                sock.close(0)
                answer.problem = f"bad endpoint: {e}"
                continue
            for type_ in types:
                sock.send_multipart(protocol.encode_control(request(type_)), zmq.NOBLOCK)
            sockets[sock] = answer
            poller.register(sock, zmq.POLLIN)
        deadline = clock() + timeout
        waiting = set(sockets)
        while waiting:
            left = deadline - clock()
            if left <= 0:
                break
            for sock, _ in poller.poll(left * 1000):
                answer = sockets[sock]
                try:
                    msg = protocol.decode(sock.recv_multipart(zmq.NOBLOCK))
                except zmq.Again:
                    continue
                except ProtocolError as e:
                    answer.problem = f"bad answer: {e}"
                    continue
                if msg.type == "ERROR":
                    answer.problem = f"ERROR {msg.get('status')} {msg.get('reason')}"
                answer.replies[msg.type] = msg
                if len(answer.replies) >= len(types):
                    waiting.discard(sock)
                    poller.unregister(sock)
        for sock in waiting:
            answer = sockets[sock]
            answer.problem = answer.problem or f"no answer within {timeout:g}s"
    finally:
        for sock in sockets:
            sock.close(0)
    return answers
