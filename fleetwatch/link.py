"""The back-end link: the control DEALER to each router, for sinks, schedulers and the
operator commands.

:class:`Link` is one router endpoint: a DEALER with the process's CURVE client key
(:class:`fleetwatch.security.ClientKeys`), ``linger`` 0, and with CURVE a monitor that
reports failed handshakes (:func:`handshake_problem` says why in one line). The operator's
commands open links for one question (:func:`fleetwatch.ask.ask_all`, ``fleetwatch run``).

:class:`Links` holds the links of a process that stays connected (a sink, a scheduler) and
runs them as SPEC 4.3 asks of a back-end: HELLO to each router every ``hello_interval`` until
its WELCOME, and never again after it (routers hold no state of back-ends). libzmq does not
retry a connection whose CURVE handshake the router refused (a key not yet in its allowlist:
SPEC 7.4), so a link whose handshake failed makes a new socket at its next HELLO, and so does
one that got no WELCOME for ``REDIAL_AFTER`` HELLOs (:class:`Dial`, socket-free, decides);
the router re-reads its allowlists by itself, and a back-end started before its key was
allowed connects once it is. Replies are decoded here: one that does not decode is counted
(``control_bad``) and logged at most every 10 s, and so are the types a back-end never gets
(``control_unexpected``); WELCOME and ERROR go to the caller. Each link is used by one thread.
:meth:`Links.report` sends the process's own counters (STATS, ``source`` its role).

Routers that find each other (SPEC 4.9) name the live routers in WELCOME ``members``: a
link to a router whose WELCOME has them asks it MEMBERS every ``MEMBERS_EVERY`` seconds
after, so that :class:`Links` learns the routers that join (a new link, which says HELLO
and is WELCOMEd like a configured one: the caller's WELCOME handling connects a sink's
PULL) and drops the learned links to routers that no welcomed router names any more.
Configured links are never dropped.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter
from collections.abc import Iterator

import zmq
from zmq.utils.monitor import recv_monitor_message

from fleetwatch import __version__, protocol
from fleetwatch.logs import Throttle
from fleetwatch.protocol import Message, ProtocolError

log = logging.getLogger(__name__)

#: unanswered HELLOs after which a link's socket is made again
REDIAL_AFTER = 5
#: seconds between two MEMBERS asked of a router of a mesh (SPEC 4.9)
MEMBERS_EVERY = 2.0
#: most routers a back-end links to (a WELCOME cannot make it open thousands)
MAX_LINKS = 64
#: MEMBERS unanswered after which a router's list no longer counts
SILENT_AFTER = 2

HANDSHAKE_FAILED = (zmq.EVENT_HANDSHAKE_FAILED_AUTH | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL
                    | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)


def handshake_problem(event: dict) -> str:
    """One line for a socket monitor's handshake-failure event."""
    if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_AUTH:
        return f"CURVE handshake refused by the router (ZAP {event['value']}): is this key " \
               f"in its allowlist?"
    if event["event"] == zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if event["value"] == zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH:
            return "CURVE handshake failed: the router does not run with security.curve"
        return f"CURVE handshake failed (protocol error {int(event['value']):#x}): " \
               f"is router_key the routers' key?"
    # The router closed the connection before saying why (errno in the value).
    return "CURVE handshake failed: does the router run with security.curve, and is " \
           "router_key its key?"


def replies(sock: zmq.Socket, on_bad, allowed: frozenset[str] = protocol.TYPES
            ) -> Iterator[Message]:
    """The messages waiting on ``sock``, decoded, without blocking; one that does not decode
    (or is not of the ``allowed`` types) goes to ``on_bad(error)`` and is skipped (a router's
    answer never stops a reader)."""
    while True:
        try:
            frames = sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        try:
            msg = protocol.decode(frames, allowed)
        except ProtocolError as e:
            on_bad(e)
            continue
        yield msg


class Dial:
    """When one link sends HELLO and when it makes a new socket, until the router's WELCOME.

    No socket: fed the time, the HELLOs sent, failed handshakes and the WELCOME.
    """

    def __init__(self, redial_after: int = REDIAL_AFTER):
        self.redial_after = redial_after
        self.router_id: str | None = None
        self.next_hello = 0.0
        #: HELLOs sent on the current socket, unanswered
        self.unanswered = 0
        #: why the current socket's handshake failed ("" if it did not)
        self.refused = ""

    def due(self, now: float) -> str | None:
        """``"hello"``, ``"redial"`` (a new socket, then HELLO) or None at ``now``."""
        if self.router_id is not None or now < self.next_hello:
            return None
        return "redial" if self.refused or self.unanswered >= self.redial_after else "hello"

    def dialled(self) -> None:
        self.unanswered, self.refused = 0, ""

    def hello_sent(self, now: float, interval: float) -> None:
        self.unanswered += 1
        self.next_hello = now + interval

    def handshake_failed(self, problem: str) -> None:
        self.refused = problem

    def welcomed(self, router_id: str) -> bool:
        """Take a WELCOME from ``router_id``; True for the first."""
        first = self.router_id is None
        self.router_id = router_id
        self.unanswered = 0
        return first

    def wake(self) -> float:
        """When :meth:`due` may next say something."""
        return float("inf") if self.router_id is not None else self.next_hello


class Link:
    """The control DEALER to one router endpoint, with its handshake monitor and its Dial.

    ``immediate`` (the back-ends): a router not connected takes no message (``zmq.Again``
    at once) instead of a queue of stale ones; the operator's one question is queued until
    the connection is up instead (``immediate=False``).
    """

    def __init__(self, ctx: zmq.Context, endpoint: str, keys=None, immediate: bool = True,
                 sndhwm: int | None = None, learned: bool = False):
        self.ctx, self.endpoint, self.keys = ctx, endpoint, keys
        self.immediate, self.sndhwm = immediate, sndhwm
        self.dial = Dial()
        self.socket: zmq.Socket | None = None
        #: with CURVE: the PAIR that gets the socket's failed-handshake events
        self.monitor: zmq.Socket | None = None
        #: known from a router's ``members`` rather than configured (SPEC 4.9)
        self.learned = learned
        #: the control endpoints of the live routers its router named last (None: it names
        #: none, a router without a mesh), and when to ask it MEMBERS again
        self.told: set[str] | None = None
        self.next_members = 0.0
        #: MEMBERS asked since its router last answered one: past SILENT_AFTER, what it
        #: told is not counted (a router killed names itself until then)
        self.unanswered_members = 0

    @property
    def router_id(self) -> str | None:
        return self.dial.router_id

    @property
    def label(self) -> str:
        """The router's id once it WELCOMEd us, else the endpoint."""
        return self.dial.router_id or self.endpoint

    def open(self) -> zmq.Socket:
        """Make the socket and connect it (a bad endpoint raises ``zmq.ZMQError``)."""
        sock = self.ctx.socket(zmq.DEALER)
        sock.linger = 0
        if self.sndhwm is not None:
            sock.sndhwm = self.sndhwm
        if self.immediate:
            sock.setsockopt(zmq.IMMEDIATE, 1)
        if self.keys is not None and self.keys.enabled:
            self.keys.apply(sock)
            self.monitor = sock.get_monitor_socket(HANDSHAKE_FAILED)
            self.monitor.linger = 0
        self.socket = sock
        try:
            sock.connect(self.endpoint)
        except zmq.ZMQError:
            self.close(0)
            raise
        self.dial.dialled()
        return sock

    def send(self, frames: list[bytes]) -> bool:
        """Send without blocking; False when the router cannot take it now."""
        try:
            self.socket.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            return False
        return True

    def handshake_failures(self) -> list[str]:
        """Why each handshake reported on the monitor since the last call failed."""
        problems = []
        while self.monitor is not None and self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            if event["event"] & HANDSHAKE_FAILED:
                problems.append(handshake_problem(event))
        return problems

    def close(self, linger: int = 0) -> None:
        if self.monitor is not None:
            self.socket.disable_monitor()
            self.monitor.close(0)
            self.monitor = None
        if self.socket is not None:
            self.socket.close(linger)
            self.socket = None


class Links:
    """The links of a back-end process to every router (see the module docstring).

    ``role`` and ``fields`` go into its HELLO (``role: sink``, ``sink: TYPE``);
    ``counts`` is the process's Counter, where the links count what they see.
    """

    def __init__(self, ctx: zmq.Context, endpoints: list[str], sender_id: str, role: str,
                 keys=None, counts: Counter | None = None, sndhwm: int | None = None,
                 fields: dict | None = None, hostname: str | None = None,
                 clock=time.time, throttle: Throttle | None = None):
        self.ctx, self.keys, self.sndhwm = ctx, keys, sndhwm
        self.links = [Link(ctx, e, keys, sndhwm=sndhwm) for e in dict.fromkeys(endpoints)]
        #: endpoints found to be another link's router (aliases): never linked again
        self.ignored: set[str] = set()
        self.sender_id, self.role, self.fields = sender_id, role, dict(fields or {})
        self.hostname = hostname or socket.gethostname()
        self.clock = clock
        self.counts = counts if counts is not None else Counter()
        self.throttle = throttle or Throttle(log)
        self.poller: zmq.Poller | None = None
        #: the link the latest :meth:`report` went through, among the welcomed ones
        self._turn = -1

    def __iter__(self) -> Iterator[Link]:
        return iter(self.links)

    def __len__(self) -> int:
        return len(self.links)

    def __getitem__(self, index: int) -> Link:
        return self.links[index]

    def open(self) -> None:
        """Connect every link (a bad endpoint raises ``zmq.ZMQError``, the others closed)."""
        try:
            for link in self.links:
                link.open()
        except zmq.ZMQError:
            self.close()
            raise

    def register(self, poller: zmq.Poller) -> None:
        """Poll the links' sockets and monitors on ``poller`` (and their new ones later)."""
        self.poller = poller
        for link in self.links:
            self._poll(link, True)

    def _poll(self, link: Link, on: bool) -> None:
        if self.poller is None:
            return
        for sock in (link.socket, link.monitor):
            if sock is None:
                continue
            if on:
                self.poller.register(sock, zmq.POLLIN)
            else:
                self.poller.unregister(sock)

    def welcomed(self) -> list[Link]:
        return [link for link in self.links if link.router_id is not None]

    def report(self, metrics: dict, **fields) -> bool:
        """The process's own counters as a STATS (``source`` its role; ``fields``: more of
        its body, a sink's ``drops``) through one router
        that WELCOMEd it, turn by turn, so that they reach the STATS route and the tails
        like a router's own, relayed once (SPEC 4.3); False when no router took it (none
        welcomed it yet, or its queue is full: counted ``stats_unsent``)."""
        live = self.welcomed()
        if not live:
            return False
        self._turn = (self._turn + 1) % len(live)
        msg = protocol.make("STATS", self.sender_id, self.clock, metrics=metrics,
                            hostname=self.hostname, source=self.role, version=__version__,
                            **fields)
        if live[self._turn].send(protocol.encode_control(msg)):
            return True
        self.counts["stats_unsent"] += 1
        return False

    def hellos(self, now: float, interval: float) -> float:
        """HELLO to the links due one (on a new socket where :class:`Dial` says so), and
        MEMBERS to the routers of a mesh due one; return when the next one is due."""
        wake = float("inf")
        for link in list(self.links):
            action = link.dial.due(now)
            if action == "redial":
                self._redial(link)
            if action is not None:
                if not link.send(protocol.encode_control(self._hello(interval))):
                    log.debug("router %s not connected yet", link.endpoint)
                link.dial.hello_sent(now, interval)
            if link.told is not None and link.router_id is not None:
                if now >= link.next_members:
                    link.send(protocol.encode_control(
                        protocol.make("MEMBERS", self.sender_id, self.clock)))
                    link.next_members = now + MEMBERS_EVERY
                    link.unanswered_members += 1
                wake = min(wake, link.next_members)
            wake = min(wake, link.dial.wake())
        return wake

    # ---------------------------------------------------------------- the mesh (SPEC 4.9)
    def learn(self, link: Link, controls: list[str]) -> None:
        """``link``'s router named ``controls`` (the control endpoints of the live routers):
        link to the new ones, drop the learned links no welcomed router names."""
        link.told = set(controls)
        known = {other.endpoint for other in self.links} | self.ignored
        for endpoint in controls:
            if endpoint in known:
                continue
            if len(self.links) >= MAX_LINKS:
                self.throttle.warning("max_links", "%d routers linked already: %s ignored",
                                      MAX_LINKS, endpoint[:255])
                continue
            new = Link(self.ctx, endpoint, self.keys, sndhwm=self.sndhwm, learned=True)
            try:
                new.open()
            except zmq.ZMQError as e:
                self.ignored.add(endpoint)
                log.error("router %s named %s: cannot connect: %s", link.label,
                          endpoint[:255], e)
                continue
            known.add(endpoint)
            self.links.append(new)
            self._poll(new, True)
            self.counts["router_learned"] += 1
            log.info("router %s told us of router %s", link.label, endpoint)
        told = [other.told for other in self.links
                if other.told is not None and other.router_id is not None
                and other.unanswered_members < SILENT_AFTER]
        named = set().union(*told) if told else set()
        for other in list(self.links):
            if other.learned and told and other.endpoint not in named:
                self.drop(other, "no router names it any more")

    def drop(self, link: Link, why: str) -> None:
        """Close ``link`` and forget it."""
        self._poll(link, False)
        link.close(0)
        self.links.remove(link)
        self.counts["router_dropped"] += 1
        log.info("router %s (%s): %s, dropped", link.label, link.endpoint, why)

    def _alias(self, link: Link) -> bool:
        """A learned ``link`` WELCOMEd by a router another link reaches: dropped."""
        for other in self.links:
            if other is not link and other.router_id == link.router_id:
                self.ignored.add(link.endpoint)
                self.drop(link, f"router {link.router_id} is linked through {other.endpoint}")
                return True
        return False

    def _hello(self, interval: float) -> Message:
        return protocol.make("HELLO", self.sender_id, self.clock, hostname=self.hostname,
                             heartbeat=interval, version=__version__, role=self.role,
                             **self.fields)

    def _redial(self, link: Link) -> None:
        self.counts["router_redialled"] += 1
        if link.dial.refused:
            log.debug("router %s: connecting again after a failed handshake", link.endpoint)
        else:
            log.info("router %s: no WELCOME after %d HELLOs, connecting again",
                     link.endpoint, link.dial.unanswered)
        self._poll(link, False)
        link.close(0)
        link.open()
        self._poll(link, True)

    def receive(self, events: dict) -> Iterator[tuple[Link, Message]]:
        """The WELCOMEs and ERRORs waiting on the links ``events`` (a poll's) names; failed
        handshakes, bad replies and other types are counted and logged here."""
        for link in list(self.links):
            if link.monitor is not None and link.monitor in events:
                self._handshakes(link)
            if link.socket in events and link in self.links:
                yield from self.read(link)

    def _handshakes(self, link: Link) -> None:
        for problem in link.handshake_failures():
            self.counts["handshake_failed"] += 1
            self.throttle.warning(f"handshake {link.endpoint}", "router %s: %s",
                                  link.endpoint, problem)
            link.dial.handshake_failed(problem)

    def read(self, link: Link) -> Iterator[tuple[Link, Message]]:
        """The WELCOMEs and ERRORs waiting on ``link``; a first WELCOME is logged."""
        def bad(e: ProtocolError) -> None:
            self.counts["control_bad"] += 1
            self.throttle.warning("control_bad", "bad reply from %s: %s", link.endpoint, e)
        for msg in replies(link.socket, bad):
            if msg.type == "WELCOME":
                router_id = msg.get("router")
                if link.dial.welcomed(router_id if isinstance(router_id, str) and router_id
                                      else link.endpoint):
                    log.info("router %s at %s welcomed us", link.router_id, link.endpoint)
                    if link.learned and self._alias(link):
                        return
                members = msg.get("members")
                if isinstance(members, list):
                    self.learn(link, [m.get("control") for m in members if isinstance(m, dict)
                                      and isinstance(m.get("control"), str)])
                    if link not in self.links:
                        return
            elif msg.type == "MEMBERS":
                link.unanswered_members = 0
                routers = msg.get("routers")
                if isinstance(routers, list):
                    self.learn(link, [
                        r["endpoints"]["control"] for r in routers
                        if isinstance(r, dict) and not r.get("dead")
                        and isinstance(r.get("endpoints"), dict)
                        and isinstance(r["endpoints"].get("control"), str)])
                if link not in self.links:
                    return
                continue
            elif msg.type != "ERROR":
                self.counts["control_unexpected"] += 1
                self.throttle.warning("control_unexpected", "unexpected %s from %s",
                                      msg.type, link.endpoint)
                continue
            yield link, msg

    def close(self, linger: int = 0) -> None:
        for link in self.links:
            self._poll(link, False)
            link.close(linger)
