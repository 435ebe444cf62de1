"""Ask every router one question on its control socket, all at once, with one deadline.

Used by the operator commands (``status`` asks PEERS, ``tail`` asks HELLO for the tail
endpoint). One :class:`fleetwatch.link.Link` per router, one poller, one deadline: an
unreachable router costs the timeout once, not once per router, and never hangs the command.
With CURVE on, ``keys`` (:class:`fleetwatch.security.ClientKeys`, the operator's back-end
key) is applied to every socket before it connects, and a failed CURVE handshake (the router
refused the key, or does not speak CURVE) is reported as the router's problem at once
instead of a time-out.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field

import zmq

from fleetwatch import __version__, protocol
from fleetwatch.link import Link, replies
from fleetwatch.protocol import Message

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


def request(type_: str, **fields) -> Message:
    """The request body for ``type_`` (PEERS or HELLO) from the CLI; ``fields`` for PEERS
    (``after``: the next page, SPEC 4.3)."""
    if type_ == "HELLO":
        return protocol.make("HELLO", cli_id(), hostname=socket.gethostname(), heartbeat=1.0,
                             version=__version__, role="cli")
    return protocol.make(type_, cli_id(), **fields)


#: most PEERS pages followed from one router (10 million agents): a bound on the loop
MAX_PAGES = 10_000


class Listing:
    """A router's PEERS answer gathered page by page (SPEC 4.3)."""

    def __init__(self):
        self.agents: list = []
        self.pages = 0

    def add(self, page: Message) -> str | None:
        """Take one page; return the ``after`` to ask for next, None when it is complete."""
        self.agents.extend(page.get("agents") or [])
        self.pages += 1
        nxt = page.get("next")
        return nxt if nxt and self.pages < MAX_PAGES else None

    def whole(self, last: Message) -> Message:
        """The listing as one PEERS answer: the last page's fields with every page's agents."""
        body = {k: v for k, v in last.body.items() if k != "next"}
        return Message("PEERS", {**body, "agents": self.agents})


def ask_all(endpoints: list[str], types: tuple[str, ...], timeout: float,
            ctx: zmq.Context | None = None, clock=time.monotonic,
            keys=None, fields: dict[str, dict] | None = None) -> list[Answer]:
    """Send each of ``types`` to every endpoint; wait at most ``timeout`` seconds in all.

    Answers are kept by their type (HELLO is answered by WELCOME, PEERS by PEERS); an ERROR
    proves the router is there and is kept under ``ERROR``. A PEERS answer with ``next`` is
    followed page by page on the same connection (SPEC 4.3) and kept as one answer listing
    every page's agents, once the last page came within the deadline. ``fields``: a
    request's own fields by type (``{"PEERS": {"limit": 0}}``: a router's health and
    ``total`` without its listing, as the console asks).
    """
    ctx = ctx or zmq.Context.instance()
    answers = [Answer(e) for e in endpoints]
    links: dict[zmq.Socket, tuple[Link, Answer]] = {}    # socket -> its link and answer
    monitors: dict[zmq.Socket, zmq.Socket] = {}          # monitor -> its link's socket
    poller = zmq.Poller()
    listings: dict[zmq.Socket, Listing] = {}
    try:
        for answer in answers:
            link = Link(ctx, answer.endpoint, keys, immediate=False)
            try:
                sock = link.open()
            except zmq.ZMQError as e:
                answer.problem = f"bad endpoint: {e}"
                continue
            links[sock] = link, answer
            if link.monitor is not None:
                monitors[link.monitor] = sock
                poller.register(link.monitor, zmq.POLLIN)
            for type_ in types:
                link.send(protocol.encode_control(request(type_, **(fields or {}).get(type_, {}))))
            poller.register(sock, zmq.POLLIN)
        deadline = clock() + timeout
        waiting = set(links)
        while waiting:
            left = deadline - clock()
            if left <= 0:
                break
            for sock, _ in poller.poll(left * 1000):
                if sock in monitors:
                    owner = monitors[sock]
                    problems = links[owner][0].handshake_failures()
                    if owner in waiting and problems:
                        links[owner][1].problem = problems[0]
                        waiting.discard(owner)
                        poller.unregister(owner)
                    continue
                if sock not in waiting:
                    continue
                answer = links[sock][1]
                for msg in replies(sock, lambda e: setattr(answer, "problem", f"bad answer: {e}")):
                    if msg.type == "ERROR":
                        answer.problem = f"ERROR {msg.get('status')} {msg.get('reason')}"
                    elif msg.type == "PEERS":
                        listing = listings.setdefault(sock, Listing())
                        after = listing.add(msg)
                        if after is not None:
                            links[sock][0].send(protocol.encode_control(
                                request("PEERS", after=after)))
                            continue
                        msg = listing.whole(msg)
                    answer.replies[msg.type] = msg
                if len(answer.replies) >= len(types):
                    waiting.discard(sock)
                    poller.unregister(sock)
        for sock in waiting:
            answer = links[sock][1]
            listing = listings.get(sock)
            if listing is not None and "PEERS" not in answer.replies:
                answer.problem = answer.problem or (
                    f"PEERS listing incomplete within {timeout:g}s ({len(listing.agents)} "
                    f"agents in {listing.pages} pages)")
            answer.problem = answer.problem or f"no answer within {timeout:g}s"
    finally:
        for link, _ in links.values():
            link.close(0)
    return answers
