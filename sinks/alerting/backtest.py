"""The backtest's replay (``fleetwatch rules backtest``): messages of the past through a
real alerting sink, on their own times. The messages come from the history lake
(:mod:`fleetwatch.lake.backtest` reads them with Spark, in the order they landed); what the
replay paged is compared with what really paged by :mod:`sinks.alerting.pages`. The
decisions are the sink's own code: nothing here decides an alert.

A :class:`Replay` makes a throwaway SQLite state database (a temporary directory, the
migrations of :func:`fleetwatch.store.db.create`), a real :class:`sinks.registry.RegistrySink`
and a real :class:`sinks.alerting.sink.AlertingSink` on it, both on one clock the replay
sets (:class:`Clock`), and the sink delivering nothing: its alerts stay in its outbox
(``alert_events``), which is what would have paged.

Messages are fed in the order they landed (:meth:`Replay.feed`, each with the time it
landed, ``at``) and evaluated a *step* at a time: the messages that landed in one step
(``floor(at / tick)``) are one batch, written when the next step begins, with the clock at
the ``at`` of the last one written (HELLO and REGISTER to the registry sink, then
HEARTBEAT, RESULT, NOTIFY and DEREGISTER to the alerting sink); then the sink's ``tick``
runs at the step's end, and at the end of every step without a message until the next one
(a host falls silent in the ticks; the rules are evaluated there when due). STATS and
RESULT also go to the sink's ``observe`` (the rules' series, :mod:`sinks.alerting.series`)
at once, the clock at their ``at``. So a page's time is exact to the step: a result's page
comes at the ``at`` of the step's last message written, a silent host's at a tick.

What held an alert back in the backtest (:meth:`Replay.holds`): the downtimes and
silences it recorded (``downtime_suppressed``, ``suppressed``), and the parents: the sink's
``on_hold`` is a :class:`ParentHolds`, which notes each alert a parent held back (a check's
trigger behind a parent down, a host's DOWN while UNREACHABLE).

The downtimes of the past (:meth:`Replay.downtimes`) are written first, each window as a
fixed downtime of its own (a flexible one stays flexible), so they hold what they held.
"""

from __future__ import annotations

import logging
import math
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Iterable

from sqlalchemy import event, insert, select

from fleetwatch.protocol import Relayed
from fleetwatch.store import db, schema
from sinks.alerting.pages import Hold
from sinks.alerting.config import AlertingConfig
from sinks.alerting.dependencies.store import Topology
from sinks.alerting.freshness.store import Scheduled
from sinks.alerting.holds import DOWNTIME, PARENT_DOWN, SILENCED, UNREACHABLE
from sinks.alerting.lookups import Lookups
from sinks.alerting.sink import AlertingSink
from sinks.registry import RegistrySink

log = logging.getLogger(__name__)

#: the types each sink is written
REGISTRY_TYPES = frozenset({"HELLO", "REGISTER"})
ALERTING_TYPES = frozenset({"HEARTBEAT", "RESULT", "NOTIFY", "DEREGISTER"})
#: the types the rules observe (AlertingSink.observe)
OBSERVED_TYPES = frozenset({"STATS", "RESULT"})


class Clock:
    """The replay's clock: the time of the message (or the tick) being evaluated."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def throwaway_engine(url: str):
    """An engine on the throwaway state database: the sinks' own (:func:`fleetwatch.store.
    db.engine`) but for its commits, which do not wait for the disk (``synchronous=OFF``):
    nothing in it outlives the run, and a replay commits several times a step (each tick's
    passes are transactions of their own), each fsync 0.5 to 1.5 ms on the test machine."""
    engine = db.engine(url)

    @event.listens_for(engine, "connect")
    def _no_fsync(dbapi_conn, _record):     # after db.engine's own, which says FULL
        cur = dbapi_conn.cursor()
        try:
            cur.execute("PRAGMA synchronous=OFF")
        finally:
            cur.close()
    return engine


class ParentHolds:
    """The sink's ``on_hold`` (:class:`sinks.alerting.sink.AlertingSink`): notes each time a
    parent held an alert back (a check's parent down, a host unreachable behind one), per
    key: ``spans``, key -> [[reason, by, first, last]], a span lengthened while the same
    parent holds the key again (each result or tick that raises the owed alert). The
    downtimes' and silences' holds are read from their tables (:meth:`Replay.holds`)."""

    REASONS = frozenset({PARENT_DOWN, UNREACHABLE})

    def __init__(self):
        self.spans: dict[str, list[list]] = {}

    def __call__(self, reason: str, by, event: dict) -> None:
        if reason not in self.REASONS:
            return
        now, by = float(event["created"]), str(by)
        spans = self.spans.setdefault(event["key"], [])
        if spans and spans[-1][:2] == [reason, by]:
            spans[-1][3] = now
        else:
            spans.append([reason, by, now, now])


class Replay:
    """One backtest's state database and sinks (module docstring). ``start``: the time of
    the first message (the sinks start then); ``tick``: seconds of a step."""

    def __init__(self, config: AlertingConfig, start: float, tick: float = 5.0, tz=None,
                 directory: str | None = None):
        if not tick > 0:
            raise ValueError("tick: expected a positive number of seconds")
        self.config, self.tick = config, float(tick)
        self.directory = tempfile.mkdtemp(prefix="fleetwatch-backtest-", dir=directory)
        self.url = f"sqlite:///{self.directory}/state.db"
        self.clock = Clock(start)
        self.counts: Counter = Counter()
        #: seconds spent in the sinks (writes, ticks, observe): the evaluation's share
        self.busy = 0.0
        self.registry = RegistrySink(throwaway_engine(self.url), self.clock)
        self.parent_holds = ParentHolds()
        self.sink = AlertingSink(throwaway_engine(self.url), self.clock, config,
                                 name="backtest", deliver=False, tz=tz,
                                 on_hold=self.parent_holds)
        # the sink's caches expire on its clock (the replay's), not the wall's
        self.sink.lookups = Lookups(clock=self.clock)
        self.sink.topology = Topology(clock=self.clock)
        self.sink.scheduled = Scheduled(clock=self.clock)
        self.registry.start()
        self.sink.start()
        self._step: int | None = None
        self._registry: list[Relayed] = []
        self._alerting: list[Relayed] = []
        #: the newest message fed, and the newest of those written to a sink
        self._last = self._written = start
        #: throwaway downtime id -> what the report names it by
        self._downtimes: dict[int, str] = {}

    # ------------------------------------------------------------ before the messages
    def downtimes(self, windows: Iterable[dict]) -> int:
        """Write the downtimes' windows (dicts: id, host, check, start, end, flexible,
        children, comment, author); returns how many."""
        rows = list(windows)
        with self.sink.engine.begin() as conn:
            for w in rows:
                new = conn.execute(insert(schema.downtimes).values(
                    host=w["host"], check_name=w.get("check"), start=w["start"],
                    end=w["end"], every=None, duration=None, flexible=w.get("flexible"),
                    children=bool(w.get("children")), comment=w.get("comment") or "",
                    author=w.get("author") or "", created=w["start"],
                    removed=None)).inserted_primary_key[0]
                what = w["host"] + (f"/{w['check']}" if w.get("check") else "")
                self._downtimes[new] = (f"downtime {w.get('id', new)} ({what}"
                                        + (f", {w['comment']!r})" if w.get("comment") else ")"))
        self.counts["downtime_windows"] += len(rows)
        return len(rows)

    # ------------------------------------------------------------ the messages
    def feed(self, at: float, relayed: Relayed) -> None:
        """One message that landed at ``at`` (not before the last one fed)."""
        step = math.floor(at / self.tick)
        if self._step is None:
            self._step = step
        elif step > self._step:
            self._advance(step)
        self._last = max(self._last, at)
        kind = relayed.message.type
        self.counts[kind] += 1
        if kind in REGISTRY_TYPES:
            self._registry.append(relayed)
            self._written = max(self._written, at)
        elif kind in ALERTING_TYPES:
            self._alerting.append(relayed)
            self._written = max(self._written, at)
        if kind in OBSERVED_TYPES:
            self.clock.now = at
            began = time.perf_counter()
            self.sink.observe(relayed)
            self.busy += time.perf_counter() - began

    def finish(self, until: float) -> None:
        """The last step written and the ticks run up to ``until``."""
        end = math.floor(until / self.tick)
        if self._step is None:
            self._step = end
        self._advance(max(end, self._step + 1))

    def _advance(self, step: int) -> None:
        """Write the current step's batch, then tick at the end of each step up to
        ``step`` (excluded)."""
        began = time.perf_counter()
        self._write()
        for s in range(self._step + 1, step + 1):
            self.clock.now = max(self._last, s * self.tick)
            self.sink.tick()
            self.counts["ticks"] += 1
        self._step = step
        self.busy += time.perf_counter() - began

    def _write(self) -> None:
        self.clock.now = self._written
        if self._registry:
            self.registry.write(self._registry)
            self._registry = []
        if self._alerting:
            self.sink.write(self._alerting)
            self.counts["batches"] += 1
            self._alerting = []

    # ------------------------------------------------------------ what it paged
    def alerts(self) -> list[dict]:
        """The alert events the sink recorded, in order: key, kind, action, severity, uuid,
        hostname, check, status, summary, created."""
        t = schema.alert_events
        with self.sink.engine.connect() as conn:
            return [{**dict(r._mapping), "check": r.check_name} for r in conn.execute(
                select(t.c.key, t.c.kind, t.c.action, t.c.severity, t.c.uuid, t.c.hostname,
                       t.c.check_name, t.c.status, t.c.summary, t.c.created)
                .order_by(t.c.id))]

    def holds(self) -> list[Hold]:
        """What held alerts back: downtimes (until the window's end), silences (from the
        first alert muted), parents (from the first to the last time one held)."""
        out = []
        for key, spans in self.parent_holds.spans.items():
            out += [Hold(key, reason, f"parent {by}", first, last)
                    for reason, by, first, last in spans]
        d, held = schema.downtimes, schema.downtime_suppressed
        s = schema.suppressed
        with self.sink.engine.connect() as conn:
            for r in conn.execute(select(held.c.downtime_id, held.c.key, held.c.created,
                                         d.c.end).join(d, d.c.id == held.c.downtime_id)):
                by = self._downtimes.get(r.downtime_id, f"downtime {r.downtime_id}")
                out.append(Hold(r.key, DOWNTIME, by, r.created,
                                r.end if r.end is not None else math.inf))
            for r in conn.execute(select(s.c.silence_id, s.c.key, s.c.created)):
                out.append(Hold(r.key, SILENCED, f"silence {r.silence_id}", r.created,
                                r.created))
        return out

    def close(self) -> None:
        """The sinks closed and the throwaway database removed."""
        try:
            self.sink.close()
            self.registry.close()
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> "Replay":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
