"""Ask every router one question on its control socket, all at once, with one deadline.

Used by the operator commands (``status`` asks PEERS, ``tail`` asks HELLO for the tail
endpoint). One :class:`fleetwatch.link.Link` per router, one poller, one deadline: an
unreachable router costs the timeout once, not once per router, and never hangs the command.
With CURVE on, ``keys`` (:class:`fleetwatch.security.ClientKeys`, the operator's back-end
key) is applied to every socket before it connects, and a failed CURVE handshake (the router
refused the key, or does not speak CURVE) is reported as the router's problem at once
instead of a time-out.

:func:`ask_mesh` asks the routers of the whole mesh (SPEC 4.9), however few the operator
config names: ``status``, ``routers`` and the console read the fleet through it.
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
    #: how the router was found (:func:`ask_mesh`): ``configured``, ``live`` (a router
    #: that answered sees it live, or it answered), ``dead`` (those that answered hold it
    #: dead), ``remembered`` (seen before: the console's :class:`Remembered`)
    known: str = "configured"
    #: its id as the mesh names it (MEMBERS), for a router that did not say it itself
    mesh_id: str | None = None

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
        return self.mesh_id


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


#: rounds of asking the routers the answers name (two find every router of a mesh)
ROUNDS = 3


def members_of(answer: Answer) -> list[dict]:
    """The well-formed entries of a router's MEMBERS answer (SPEC 4.9; others left out)."""
    msg = answer.get("MEMBERS")
    routers = msg.get("routers") if msg is not None else None
    if not isinstance(routers, list):
        return []
    return [e for e in routers if isinstance(e, dict) and isinstance(e.get("id"), str)
            and isinstance(e.get("endpoints"), dict)
            and isinstance(e["endpoints"].get("control"), str)]


def ask_mesh(endpoints: list[str], types: tuple[str, ...], timeout: float, keys=None,
             fields: dict[str, dict] | None = None, also: list[str] = (),
             ask=ask_all) -> list[Answer]:
    """``types`` and MEMBERS (asking only: nothing is merged) of every endpoint and of
    ``also`` (routers seen before), then of the control endpoints the answers name, live or
    dead, for the routers that have not answered yet: a few rounds (:data:`ROUNDS`), one
    deadline each. The answers of every router of the mesh, each with how it was found
    (:attr:`Answer.known`). A router older than meshes answers MEMBERS with an ERROR: that
    is not its problem when the other types were answered."""
    wanted = tuple(dict.fromkeys((*types, "MEMBERS")))
    extra = {"fields": fields} if fields else {}
    answers: list[Answer] = []
    asked: set[str] = set()
    todo = list(dict.fromkeys([*endpoints, *also]))
    for _ in range(ROUNDS):
        if not todo:
            break
        asked.update(todo)
        answers += ask(todo, wanted, timeout, keys=keys, **extra)
        answered = {a.router_id for a in answers if a.get("MEMBERS") is not None}
        named = [e["endpoints"]["control"] for a in answers for e in members_of(a)
                 if e["id"] not in answered]        # (one that answered at another endpoint)
        todo = [e for e in dict.fromkeys(named) if e not in asked]
    live = {e["endpoints"]["control"] for a in answers for e in members_of(a)
            if not e.get("dead")}
    named = {e["endpoints"]["control"]: e["id"] for a in answers for e in members_of(a)}
    for answer in answers:
        answer.mesh_id = named.get(answer.endpoint)
        if answer.endpoint in endpoints:
            answer.known = "configured"
        elif answer.reachable or answer.endpoint in live:
            answer.known = "live"
        else:
            answer.known = "dead" if answer.endpoint in named else "remembered"
        if types and answer.problem.startswith("ERROR") \
                and all(answer.get(t) is not None for t in types):
            answer.problem = ""
    return answers


class Remembered:
    """The routers a long-running reader (the console) has seen, by id, with their control
    endpoint, kept ``keep`` seconds after they last answered or were named live: asked
    again (:func:`ask_mesh` ``also``) after the mesh has forgotten a dead one (SPEC 4.9:
    a tombstone is kept for twice the expiry), so it stays a problem that long."""

    def __init__(self, keep: float, clock=time.monotonic):
        self.keep, self.clock = keep, clock
        self.seen: dict[str, tuple[str, float]] = {}     # id -> (control, when seen)

    def take(self, answers: list[Answer]) -> None:
        """Remember the routers these answers show live; name by its remembered id each
        router that did not answer and that the mesh no longer names."""
        now = self.clock()
        ids = {control: ident for ident, (control, _) in self.seen.items()}
        for answer in answers:
            if answer.mesh_id is None and not answer.reachable:
                answer.mesh_id = ids.get(answer.endpoint)
            if answer.reachable and answer.router_id:
                self.seen[answer.router_id] = (answer.endpoint, now)
            for entry in members_of(answer):
                if not entry.get("dead"):
                    self.seen[entry["id"]] = (entry["endpoints"]["control"], now)
        for ident in [i for i, (_, t) in self.seen.items() if now - t > self.keep]:
            del self.seen[ident]
        while len(self.seen) > MAX_REMEMBERED:
            del self.seen[min(self.seen, key=lambda i: self.seen[i][1])]

    def endpoints(self) -> list[str]:
        return sorted({control for control, _ in self.seen.values()})


#: most routers :class:`Remembered` keeps (a member table's size, SPEC 4.9)
MAX_REMEMBERED = 256
