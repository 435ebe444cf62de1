"""What the agent sends its routers, and what waits until it can be sent.

NOTIFY and REGISTER wait in the spool (:mod:`agent.spool`) until every sink type they need
has ACKed them: each is sent through an alive router when due, a resend preferring another
router than the last one. When the spool cannot take the agent's own messages (a full disk)
they are sent once, unspooled; a local process's raise (the intake answers 500). Messages the
spool dropped for room are reported at most once a minute, in a NOTIFY of its own. STATS,
HEARTBEAT and RESULT are at most once: held in a bounded queue while no router is alive
(oldest dropped, counted). A send a router's full queue refuses is dropped and counted.
"""

from __future__ import annotations

import collections
import logging
import math
import sqlite3

from fleetwatch import protocol
from fleetwatch.logs import Throttle

from agent.links import Link, Links, Sockets
from agent.spool.acks import FleetRoutes

log = logging.getLogger(__name__)

SPOOL_REPORT_PERIOD = 60.0
#: messages whose last router is remembered, to resend them through another
LAST_VIA = 10000


class Outbox:
    """The STATS queue, the spool's sends and resends, and every send to a router."""

    def __init__(self, uuid: str, spool, links: Links, sockets: Sockets,
                 counters: collections.Counter, stats_buffer: int, clock, wall):
        self.uuid, self.spool, self.links, self.sockets = uuid, spool, links, sockets
        self.counters = counters
        self.clock, self.wall = clock, wall
        self.queue: collections.deque = collections.deque(maxlen=max(1, stats_buffer))
        self.last_via: collections.OrderedDict = collections.OrderedDict()
        self.unreported_drops = 0
        self.next_drop_report = 0.0
        self.throttle = Throttle(log, 10.0, clock)
        #: the DEREGISTER waiting for its ACKs while the agent stops (agent.departure)
        self.departure = None
        #: what the routers' WELCOMEs say each spooled type waits for
        self.routes = FleetRoutes(spool.fallback)

    def deadline(self, now: float) -> float:
        """When :meth:`timers` has work next (``math.inf``: nothing waits)."""
        deadlines = [math.inf]
        if self.links.alive():
            if self.queue:
                return now
            due = self.spool.next_due()
            if due is not None:
                deadlines.append(now + (due - self.wall()))
        retry = self.spool.next_retry()      # bookkeeping held in memory (a full disk)
        if retry is not None:
            deadlines.append(now + (retry - self.wall()))
        if self.unreported_drops:
            deadlines.append(self.next_drop_report)
        return min(deadlines)

    def timers(self, now: float) -> None:
        """Report drops, retry the spool's held writes, send what waits if a router is alive."""
        if self.unreported_drops and now >= self.next_drop_report:
            self._report_drops(now)
        self.spool.retry(self.wall())
        if self.links.alive():
            self._flush_queue()
            self._resend()

    # ---------------------------------------------------------------- at most once
    def send(self, link: Link, msg: protocol.Message) -> bool:
        """Send ``msg`` through ``link`` now; False (counted, logged) if its queue is full."""
        if self.sockets.send(link, msg):
            return True
        self.counters["fleetwatch.cli.send.dropped"] += 1
        self.throttle.warning(f"send.{link.endpoint}", "router %s: queue full, %s dropped",
                              link.endpoint, msg.type)
        return False

    def enqueue(self, msg: protocol.Message) -> None:
        """Hold an at-most-once message for the next alive router (oldest dropped)."""
        if len(self.queue) == self.queue.maxlen:
            self.counters["agent.stats.dropped"] += 1
            self.throttle.warning("queue", "no router alive: oldest STATS/HEARTBEAT dropped")
        self.queue.append(msg)

    def _flush_queue(self) -> None:
        while self.queue:
            link = self.links.pick()
            if link is None:
                return
            if not self.send(link, self.queue.popleft()):
                self.counters["agent.stats.dropped"] += 1

    # ---------------------------------------------------------------- spooled
    def durable(self, router: str, durable) -> None:
        """Router ``router``'s WELCOME said ``durable`` (SPEC 4.1; None from a router older
        than it): the spool waits for what the routers say together from now on."""
        before = self.spool.required
        required = self.routes.tell(router, durable)
        self.spool.retarget(required)       # (last_via forgets what left as it fills)
        if self.spool.required != before:
            log.info("router %s: the spool keeps %s", router, "; ".join(
                f"{t} until ACKed by {' and '.join(sorted(s)) or 'none'}"
                for t, s in sorted(self.spool.required.items())))

    def spool_messages(self, messages, own: bool = True) -> None:
        """Commit ``messages`` to the spool. When it cannot (a full disk), the agent's own
        (``own``) are sent at most once, through the STATS queue; a local process's raise
        sqlite3.Error (the intake answers 500). A type no durable route takes (no sink type
        must ACK it, SPEC 4.1) is sent at most once, like STATS."""
        once = [m for m in messages if self.spool.needs_none(m.type)]
        if once:
            for msg in once:
                self.enqueue(msg)
            messages = [m for m in messages if not self.spool.needs_none(m.type)]
            if not messages:
                return
        try:
            dropped = self.spool.add(messages)
        except sqlite3.Error as e:
            if not own:
                raise
            self.throttle.warning("spool.own", "spool write failed (%s: %s): the agent's own "
                                  "%s sent once, not spooled", type(e).__name__, e,
                                  "/".join(sorted({m.type for m in messages})))
            for msg in messages:
                self.enqueue(msg)
            return
        if dropped:
            self.unreported_drops += dropped

    def _report_drops(self, now: float) -> None:
        n, self.unreported_drops = self.unreported_drops, 0
        self.next_drop_report = now + SPOOL_REPORT_PERIOD
        log.warning("spool full (%d messages): %d oldest notifications dropped",
                    self.spool.max_messages, n)
        self.spool_messages([protocol.make(
            "NOTIFY", self.uuid, clock=self.wall, severity="warning", source="agent",
            text=f"spool full: {n} oldest notifications dropped")])

    def _resend(self) -> None:
        for msg in self.spool.due(self.wall()):
            if not self.resend(msg):
                return

    def resend(self, msg: protocol.Message) -> bool:
        """Send the spooled ``msg`` through an alive router, another than its last one when
        it is a resend; False when none is alive."""
        avoid = self.last_via.get(msg.msg_id) if msg.get("dup") else None
        link = self.links.pick(avoid)
        if link is None:
            return False
        self.send(link, msg)
        self.last_via[msg.msg_id] = link.endpoint
        self.last_via.move_to_end(msg.msg_id)
        if len(self.last_via) > LAST_VIA:
            self.last_via.popitem(last=False)
        if msg.get("dup"):
            self.counters["agent.spool.resent"] += 1
        return True

    def ack(self, msg: protocol.Message) -> None:
        """A router's ACK: recorded in the spool (and by a departure), counted."""
        if self.departure is not None:
            self.departure.acked(msg)
        acked = self.spool.ack(msg.get("msg_ids"), msg.get("sink"))
        for msg_id in acked.removed:
            self.last_via.pop(msg_id, None)
        self.counters["agent.spool.acked"] += len(acked.removed)
        self.counters["agent.spool.acks_ignored"] += acked.ignored
