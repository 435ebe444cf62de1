"""The RUN/RESULT exchange of a check run now (:mod:`fleetwatch.actions.checks`): sending a
RUN, then waiting for its RESULT.

:class:`Desk` holds a :class:`fleetwatch.link.Link` per router control socket. A router
forwards a RUN without answering and answers ``ERROR 404`` when it does not have the agent,
so each RUN is followed by a PEERS on the same connection: a router answers one
connection's requests in order (SPEC 4.3), so a PEERS answer with no ERROR before it means
the RUN was forwarded. :class:`ResultWatch` is a SUB on every router's tail, subscribed to
the agent's RESULTs before the RUN is sent; :func:`wait_result` waits for the one with our
command id, resending the RUN (same command id, which the agent answers with its first
RESULT) at growing intervals, since a subscription can lose the race with a fast RESULT
and RESULT is at most once. Waits take an injected clock.
"""

from __future__ import annotations

import logging
import time
import uuid as uuidlib

import zmq
from zmq.utils.monitor import recv_monitor_message

from fleetwatch import protocol
from fleetwatch.ask import Answer, request
from fleetwatch.link import HANDSHAKE_FAILED, Link, handshake_problem, replies
from fleetwatch.protocol import Message, ProtocolError, Relayed

log = logging.getLogger(__name__)

#: first resend of the RUN while waiting, doubled each time up to RESEND_MAX
RESEND_FIRST, RESEND_MAX = 1.0, 8.0


def command_id() -> str:
    """A fresh command id for a RUN of an operator's (the command's or the console's;
    scheduler ids start ``s:``)."""
    return "cli:" + uuidlib.uuid4().hex[:24]


class Desk:
    """A :class:`fleetwatch.link.Link` per router: sends a RUN and learns which routers
    forwarded it."""

    def __init__(self, ctx: zmq.Context, endpoints: list[str], keys=None):
        self.links = {e: Link(ctx, e, keys, immediate=False) for e in endpoints}
        self.poller = zmq.Poller()
        try:
            for link in self.links.values():
                link.open()
                for sock in (link.socket, link.monitor):
                    if sock is not None:
                        self.poller.register(sock, zmq.POLLIN)
        except zmq.ZMQError:
            self.close()
            raise

    def send(self, msg: Message, target: str) -> None:
        for link in self.links.values():
            # a router that has not read the last ones yet takes neither
            if link.send(protocol.encode_control(msg, target)):
                link.send(protocol.encode_control(request("PEERS")))

    def deliver(self, msg: Message, target: str, timeout: float,
                clock=time.monotonic) -> dict[str, str]:
        """Send ``msg``; endpoint -> "" when forwarded, else why not (within ``timeout``)."""
        self.send(msg, target)
        outcome = {e: f"no answer within {timeout:g}s" for e in self.links}
        pending, refused = set(self.links), set()
        by_socket = {s: link for link in self.links.values()
                     for s in (link.socket, link.monitor) if s is not None}
        deadline = clock() + timeout
        while pending and (left := deadline - clock()) > 0:
            for sock, _ in self.poller.poll(left * 1000):
                link = by_socket[sock]
                endpoint = link.endpoint
                if sock is link.monitor:
                    for problem in link.handshake_failures():
                        if endpoint in pending:
                            outcome[endpoint] = problem
                            pending.discard(endpoint)
                    continue

                def bad(e, endpoint=endpoint):
                    outcome[endpoint] = f"bad answer: {e}"
                for reply in replies(sock, bad):
                    if reply.type == "ERROR" and reply.get("ref") == msg.msg_id:
                        outcome[endpoint] = f"ERROR {reply.get('status')} {reply.get('reason')}"
                        refused.add(endpoint)
                    elif reply.type == "PEERS" and endpoint in pending:
                        pending.discard(endpoint)
                        if endpoint not in refused:
                            outcome[endpoint] = ""
        return outcome

    def drain(self) -> None:
        """Read and drop the answers to resends (routers may say 404 as the agent moves)."""
        for link in self.links.values():
            while True:
                try:
                    link.socket.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break

    def close(self) -> None:
        for link in self.links.values():
            link.close(0)


class ResultWatch:
    """A SUB on every tail endpoint, subscribed to one agent's RESULTs."""

    def __init__(self, ctx: zmq.Context, endpoints: list[str], uuid: str, keys=None):
        self.endpoints, self.uuid = endpoints, uuid
        self.sub = ctx.socket(zmq.SUB)
        self.sub.linger = 0
        if keys is not None:
            keys.apply(self.sub)
        self.sub.setsockopt(zmq.SUBSCRIBE, protocol.topic("RESULT", uuid))
        self.monitor = self.sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED
                                                   | HANDSHAKE_FAILED)
        for endpoint in endpoints:
            self.sub.connect(endpoint)

    def ready(self, timeout: float, clock=time.monotonic) -> tuple[int, list[str]]:
        """Wait until every tail connection has completed its handshake (so carries our
        subscription) or failed, at most ``timeout``; return how many are up, and problems."""
        up: set[bytes] = set()
        failed: dict[bytes, str] = {}
        deadline = clock() + timeout
        while len(up) + len(failed) < len(self.endpoints) and (left := deadline - clock()) > 0:
            if not self.monitor.poll(left * 1000):
                break
            event = recv_monitor_message(self.monitor)
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                up.add(event["endpoint"])
                failed.pop(event["endpoint"], None)
            elif event["endpoint"] not in up:
                failed[event["endpoint"]] = handshake_problem(event)
        problems = [f"tail {e.decode(errors='replace')}: {p}" for e, p in failed.items()]
        waiting = len(self.endpoints) - len(up) - len(failed)
        if waiting > 0:
            problems.append(f"{waiting} tail endpoint(s) not connected within {timeout:g}s")
        return len(up), problems

    def next(self, command_id: str, timeout: float, clock=time.monotonic) -> Relayed | None:
        """The RESULT with ``command_id``, if one arrives within ``timeout``."""
        deadline = clock() + timeout
        while (left := deadline - clock()) > 0 and self.sub.poll(left * 1000):
            try:
                relayed = protocol.decode_tail(self.sub.recv_multipart(zmq.NOBLOCK))
            except (zmq.Again, ProtocolError) as e:
                log.debug("tail message skipped: %s", e)
                continue
            if relayed.uuid == self.uuid and relayed.message.type == "RESULT" \
                    and relayed.message.get("command_id") == command_id:
                return relayed
        return None

    def close(self) -> None:
        self.sub.disable_monitor()
        self.monitor.close(0)
        self.sub.close(0)


def wait_result(watch: ResultWatch, desk: Desk, msg: Message, target: str, timeout: float,
                clock=time.monotonic) -> Relayed | None:
    """Wait for the RESULT of ``msg`` (a RUN), resending it now and then (same command id)."""
    deadline = clock() + timeout
    retry, resend_at = 0, clock() + RESEND_FIRST
    while (left := deadline - clock()) > 0:
        relayed = watch.next(msg.get("command_id"), max(min(left, resend_at - clock()), 0.001))
        if relayed is not None:
            return relayed
        desk.drain()
        if clock() >= resend_at and clock() < deadline:
            retry += 1
            desk.send(protocol.resend(msg, retry), target)
            resend_at = clock() + min(RESEND_FIRST * 2 ** retry, RESEND_MAX)
    return None


def tails(configured: list[str], answers: list[Answer]) -> list[str]:
    """The tail endpoints to watch: the configured ones, else those the routers' WELCOME
    answers name (each once)."""
    if configured:
        return list(configured)
    endpoints = []
    for answer in answers:
        welcome = answer.get("WELCOME")
        tail = (welcome.get("endpoints") or {}).get("tail") if welcome else None
        if isinstance(tail, str) and tail not in endpoints:
            endpoints.append(tail)
    return endpoints
