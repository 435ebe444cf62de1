"""Replay: what happened since a point, from the history lake, then live from the routers' tails,
with no gap and no duplicate at the seam (``fleetwatch tail --since``; programs call
:func:`follow`).

**Since.** A point is a time (what landed at or after it; the history commands' forms: epoch
seconds, ISO 8601, a duration back from now like ``15m``: :mod:`fleetwatch.lake.instants`) or a
msg_id (what landed after that message, its first copy, found in the lake). The lake's order is
the order messages landed (:func:`fleetwatch.lake.landed.order`): ``received``, then the sender's
ts (one agent's messages in one batch of the sink), then msg_id.

**Where from.** The landing files (``landing/*.jsonl``, the live sinks' ``*.jsonl.open`` up to
their last complete line, ``landing/done/``) are read without Spark; the tables only when
messages landed since the point may be in them alone
(:meth:`fleetwatch.lake.landed.Files.needs_tables`), through PySpark
(:mod:`fleetwatch.lake.bodies`), which is imported then only. Both are streamed, not held
(:mod:`fleetwatch.lake.parts`): what a replay holds is the ids landed since its subscription and
the last 100,000 it yielded. A message in two files, in a table and a file, or relayed by two
routers (a resend, marked ``dup``) is yielded once, at its first landed copy; a line landed
twice unmarked (a landing file put back by hand) once when the copies are near each other.

**The seam.** :class:`Follower` subscribes to the tails first (the filters' subscriptions) and a
thread buffers what arrives (:mod:`fleetwatch.lake.livetail`; once the buffer is yielded, the
tail is read directly); then it reads the lake. The lake has caught up with the tail when,
for every router whose live messages include one of a type the lake keeps, one of them has
landed (a history sink lands each router's messages in the order the router relayed them, so
what that router relayed before it has landed too), and then ``settle`` seconds more (the sink's
sync delay: for another history sink sharing the router's messages, and, counted from the
subscription, for messages relayed before it took effect). It waits for that at most
``catch_up`` seconds, then raises :class:`LakeBehind` naming the routers. Then it yields the
lake's messages since the point, then the buffered live messages not yielded yet, then live ones
as they come (a bounded set of recent msg_ids drops those relayed twice near the seam). Live
losses (the router's queue for this subscriber full) go to ``on_lost`` as
:class:`fleetwatch.tailgaps.Lost`, as ``fleetwatch tail`` tells them.

**Resuming.** Called again with ``since=`` the last msg_id it yielded, it goes on after that
message in the lake's order: nothing missed, nothing repeated. A msg_id yielded live may not
have landed yet: it is waited for (``find_wait`` seconds). Exact for one router; with several,
the live part yields their messages as they arrive, which is not the order they landed in (the
sink interleaves the routers), so resuming from a message yielded live can repeat or skip
messages other routers relayed within the same moment; resuming from one yielded from the lake
is exact.
"""

from __future__ import annotations

import heapq
import math
import os
import time
from collections import OrderedDict
from dataclasses import dataclass

from fleetwatch import protocol
from fleetwatch.protocol import Relayed
from fleetwatch.tailgaps import Gaps
from fleetwatch.lake.instants import epoch
from fleetwatch.lake.landed import (END_SLACK, LANDED_TYPES, Event, Files, Reader, file_name,
                                  order, same_copy)
from sinks.history.landing import SYNC_SECONDS
from fleetwatch.lake.livetail import LiveTail
from fleetwatch.lake.parts import resends, stream, window

#: msg_ids remembered to drop a copy near another (relayed twice near the seam, a line
#: landed twice without being marked a resend)
RECENT = 100_000
#: the lines that may have landed since the subscription: from this long before it (the
#: sinks' clocks may be that much behind this one's)
SEAM_SLACK = 5.0


class NotFound(LookupError):
    """``since`` is neither a time nor a msg_id the lake holds."""


class LakeMissing(FileNotFoundError):
    """The lake directory is not there."""


class LakeBehind(RuntimeError):
    """The lake did not catch up with the live tail in time: ``routers`` are behind."""

    def __init__(self, routers: list[str], waited: float):
        super().__init__(f"the history lake has not caught up with router "
                         f"{', '.join(routers)} after {waited:.0f}s (no history sink "
                         f"landing its messages?)")
        self.routers = routers


@dataclass(frozen=True)
class Point:
    """Where a replay starts: after ``(at, ts, msg_id)`` in the lake's order (a message's
    place, :func:`fleetwatch.lake.landed.order`), or for a time everything landed at or after
    ``at`` (``ts`` -infinity, ``msg_id`` empty)."""

    at: float
    ts: float = -math.inf
    msg_id: str = ""

    def passed(self, event: Event) -> bool:
        return order(event) > (self.at, self.ts, self.msg_id)


def as_time(since, now: float | None = None) -> float | None:
    """``since`` as epoch seconds when it is a time, else None (then it may be a msg_id)."""
    try:
        return epoch(since, now)
    except ValueError:
        return None


def check_since(since) -> None:
    """ValueError unless ``since`` can be a time or a msg_id (1 to 255 printable
    characters without spaces)."""
    text = str(since)
    if as_time(since) is None and not (0 < len(text) <= protocol.MAX_ID and text.isprintable()
                                       and not any(c.isspace() for c in text)):
        raise ValueError(f"--since {text[:80]!r}: neither a time (epoch seconds, ISO 8601 "
                         f"like 2026-11-20T10:00Z, or a duration back like 15m) nor a msg_id")


class Follower:
    """One replay (module docstring); iterate :meth:`events`. ``lake``: the lake directory,
    or the operator's ``history:`` settings (then Spark, if the tables are read, runs as
    they say; else ``spark`` or a local session). ``tail``: the routers' tail endpoints
    (none: the lake's part only), ``keys`` the operator's CURVE keys for them. ``uuids``
    and ``types`` filter both parts. ``deadline`` (``clock`` time) ends the iteration."""

    def __init__(self, lake, since, types=(), uuids=(), tail=(), keys=None, spark=None,
                 catch_up: float = 30.0, settle: float = SYNC_SECONDS, find_wait: float = 5.0,
                 progress=None, on_lost=None, deadline: float | None = None,
                 clock=time.monotonic, now=time.time, sleep=time.sleep, live_tail=LiveTail):
        self.settings = getattr(lake, "history", lake) if not isinstance(lake, str) else None
        self.lake = self.settings.lake if self.settings is not None else str(lake)
        self.since, self.types, self.uuids = since, list(types or ()), list(uuids or ())
        self.tail, self.keys, self.spark = list(tail or ()), keys, spark
        self.catch_up, self.settle, self.find_wait = catch_up, settle, find_wait
        self.progress = progress or (lambda line: None)
        self.on_lost = on_lost or (lambda lost: None)
        self.deadline, self.clock, self.now, self.sleep = deadline, clock, now, sleep
        #: makes the live part: (endpoints, topics, keys) -> a :class:`LiveTail` (tests fake it)
        self.live_tail = live_tail
        self.files = Files(self.lake)
        self.reader = Reader(self.files)
        #: landing lines skipped (not a message the lake keeps)
        self.bad = [0]
        self.gaps = Gaps(by_sender=bool(self.uuids))
        self.live: LiveTail | None = None
        #: live messages that arrived while the lake was read
        self.buffered: list[Relayed] = []
        #: the last msg_ids yielded: a copy landed again unmarked, or relayed twice near
        #: the seam, is dropped
        self.recent: OrderedDict[str, None] = OrderedDict()

    # ------------------------------------------------------------ the parts
    def events(self):
        """Yield the lake's messages since the point, then the live ones."""
        if not os.path.isdir(self.lake):
            raise LakeMissing(f"no history lake at {self.lake}")
        check_since(self.since)
        try:
            point = self.point()
            yield from self._from_lake(point)
            if self.live is not None:
                yield from self._from_tail()
        finally:
            if self.live is not None:
                self.live.close()

    def wanted(self, type_: str, uuid: str) -> bool:
        return (not self.types or type_ in self.types) and (not self.uuids or uuid in self.uuids)

    def point(self) -> Point:
        """The since-point: a time, or the place of a msg_id in the lake (NotFound)."""
        at = as_time(self.since, self.now())
        if at is not None:
            return Point(at)
        msg_id = str(self.since)
        found = self.reader.find([msg_id]).get(msg_id)
        if found is None and self.files.has_tables():
            spark = self._spark()
            from fleetwatch.lake import bodies
            found = bodies.find(spark, self.lake, msg_id)
        # one yielded live may be landing: the files written this last minute, as they grow
        recent, give_up = Reader(self.files), self.clock() + (self.find_wait if self.tail else 0)
        while found is None and self.clock() < give_up:
            found = next((e for e in recent.read(self.now() - 60) if e.msg_id == msg_id), None)
            if found is None:
                self.sleep(0.1)
        if found is None:
            raise NotFound(f"--since {msg_id[:80]!r}: neither a time nor a msg_id in the "
                           f"history lake at {self.lake}")
        return Point(*order(found))

    def _spark(self):
        if self.spark is None:
            from fleetwatch.optional import optional_import
            optional_import("pyspark", "fleetwatch tail --since (reading the history tables)")
            from fleetwatch.lake import spark as sparks
            self.spark = (sparks.from_settings(self.settings) if self.settings is not None
                          else sparks.session())
        return self.spark

    def _tables(self, point: Point):
        """The tables' messages since ``point`` (an iterator), or nothing when the landing
        files hold all of them."""
        if not self.files.needs_tables(point.at):
            return iter(())
        self.progress("reading the history tables (Spark)...")
        spark = self._spark()
        from fleetwatch.lake import bodies
        df = bodies.since(spark, self.lake, point.at, self.types, self.uuids)
        if df is None:
            return iter(())
        return bodies.events(df, lambda n: self.progress(f"{n} messages read from the tables"))

    def _behind(self, pairs: set) -> list[str]:
        """The routers the lake has not caught up with (none: caught up)."""
        routers: dict[str, bool] = {}
        for r in self.buffered:
            if r.message.type in LANDED_TYPES:
                routers[r.router] = routers.get(r.router, False) or (
                    (r.message.msg_id, r.router) in pairs)
        return sorted(router for router, landed in routers.items() if not landed)

    def _from_lake(self, point: Point):
        followed, since_subscribed = None, math.inf
        if self.tail:
            self.live = self.live_tail(self.tail, self._topics(), self.keys).start(self.clock)
            since_subscribed = self.now() - SEAM_SLACK
        tables = self._tables(point)
        #: msg_ids landed since the subscription, up to the seam (the live tail has them too)
        seam_ids: set[str] = set()
        if self.live is not None:
            followed = Reader(self.files)
            self._wait_for_lake(followed, since_subscribed, seam_ids)
        parts = window(self.files, point.at, followed, since_subscribed)
        doubt = resends(self.files, parts)          # their first copies, wherever they are
        firsts = self.reader.find(doubt) if doubt else {}
        landing_from = min((f.start for f in map(file_name, map(os.path.basename,
                           (p.path for p in parts))) if f is not None), default=-math.inf)
        taken: set[str] = set()

        def from_tables():
            for event in tables:
                first = firsts.get(event.msg_id)
                if first is not None and order(first) <= order(event):
                    continue
                if point.passed(event) and self.wanted(event.type, event.uuid):
                    if order(event)[0] >= landing_from - END_SLACK:
                        taken.add(event.msg_id)     # a copy may be in a landing file too
                    yield event

        def from_landing():
            for event in stream(self.files, parts, self.bad):
                first = firsts.get(event.msg_id)
                if first is not None and not same_copy(first, event):
                    continue
                if event.msg_id in taken or event.msg_id in self.recent:
                    continue                        # a copy came from the tables, or lately
                if point.passed(event) and self.wanted(event.type, event.uuid):
                    yield event

        for event in heapq.merge(from_tables(), from_landing(), key=order):
            self._remember(event.msg_id)
            yield event
        if self.live is None:
            return
        self.live.handover()
        self._drain()
        # the buffer: what landed up to the seam was yielded (or was before the point)
        for relayed in self.buffered:
            lost = self.gaps.seen(relayed)
            if lost is not None:
                self.on_lost(lost)
            msg_id = relayed.message.msg_id
            if msg_id in seam_ids or msg_id in self.recent:
                continue
            if self.wanted(relayed.message.type, relayed.uuid):
                self._remember(msg_id)
                yield live_event(relayed)
        self.buffered = []

    def _wait_for_lake(self, followed: Reader, since: float, seam_ids: set) -> None:
        """Read the files written since the subscription until the lake has caught up
        with the live tail (module docstring); ``seam_ids`` gets what they hold."""
        pairs: set = set()

        def read():
            for event in followed.read(since):
                seam_ids.add(event.msg_id)
                pairs.add((event.msg_id, event.router))
        waited_from, caught = self.clock(), None
        read()
        while True:
            self._drain()
            behind = self._behind(pairs)
            if behind:
                caught = None
            elif caught is None:
                caught = self.clock()
            settled = caught is not None and \
                self.clock() >= max(caught, self.live.started) + self.settle
            if settled:
                read()                                  # the lines of the last moment
                return
            if self.clock() - waited_from > self.catch_up:
                raise LakeBehind(behind or ["(none seen)"], self.clock() - waited_from)
            if self.deadline is not None and self.clock() >= self.deadline:
                return
            self.sleep(0.05)
            read()

    def _drain(self) -> None:
        self.buffered += self.live.buffered()

    def _from_tail(self):
        while self.deadline is None or self.clock() < self.deadline:
            wait = 0.2 if self.deadline is None else min(0.2, self.deadline - self.clock())
            relayed = self.live.get(wait)
            if relayed is None:
                continue
            lost = self.gaps.seen(relayed)
            if lost is not None:
                self.on_lost(lost)
            msg_id = relayed.message.msg_id
            if msg_id in self.recent or not self.wanted(relayed.message.type, relayed.uuid):
                continue
            self._remember(msg_id)
            yield live_event(relayed)

    def _remember(self, msg_id: str) -> None:
        self.recent[msg_id] = None
        if len(self.recent) > RECENT:
            self.recent.popitem(last=False)

    def _topics(self) -> list[bytes]:
        types = self.types
        if not self.uuids:
            return [protocol.topic(t) for t in types] or [b""]
        return [protocol.topic(t, u) for t in (types or sorted(protocol.AGENT_TYPES))
                for u in self.uuids]


def live_event(relayed: Relayed) -> Event:
    msg = relayed.message
    return Event(msg.msg_id, msg.type, relayed.uuid, relayed.router, None, msg.body, live=True,
                 path=relayed.path or (relayed.router,))


def follow(lake, since, types=None, agents=None, tail=(), keys=None, **options):
    """Yield :class:`fleetwatch.lake.landed.Event` objects (``msg_id``, ``type``, ``uuid``,
    ``router``, ``received``: None for a live one, ``body``, ``live``, ``path``: the routers
    it passed, ``router`` first, the same from the lake and live): every message that
    landed in the history lake since ``since`` (a time, or a msg_id: after it), in the order
    they landed, then (``tail``: the routers' tail endpoints) the live ones, with no gap and
    no duplicate at the seam. ``types`` and ``agents`` (uuids) filter. Resumable: called
    again with ``since=`` the last msg_id it yielded, it goes on from there. Raises
    ValueError (a ``since`` that cannot be a time nor a msg_id), :class:`LakeMissing`,
    :class:`NotFound`, :class:`LakeBehind`; ``options`` as for :class:`Follower`."""
    return Follower(lake, since, types or (), agents or (), tail, keys, **options).events()


