"""The alerting sink: notifications, check results and heartbeats become alerts.

It takes NOTIFY, HEARTBEAT and RESULT (SPEC 4.1's routing table) and, for each batch, does
everything in ONE transaction, so that a state change and its alert commit together:

- NOTIFY: inserted into ``notifications`` keyed by msg_id; a new one becomes an alert
  (``UUID/notify/MSG_ID``, by severity, no resolve) enqueued in the same transaction, and
  the loop ACKs only after the commit, so an ACK means the alert is durable. A duplicate (a
  resend that reached another alerting sink, or this one after a restart) adds no row and
  no alert, and is ACKed all the same (SPEC 4.2).
- RESULT: the latest result per (uuid, plugin) goes to ``checks`` (unless a newer one is
  there: order is ``started`` when the agent gives it, else the message's ``ts``), and
  every result, in that order, goes through the Nagios state machine
  (:mod:`sinks.alerting.checks.rules`) on the check's ``check_state`` row. RESULT is at most once
  and not ACKed; the next run replaces a lost one.
- HEARTBEAT: the ``host_state`` row of the agent (or of the local process named in it)
  records when and through which router it was heard (:mod:`sinks.alerting.hosts.rules`); the loop's
  periodic :meth:`AlertingSink.tick` turns hosts heard through no router for their
  timeout DOWN (GONE when the agent is ephemeral).
- DEREGISTER: the agent left for good: GONE, its checks and told problems ended without a
  page (:func:`sinks.alerting.hosts.departures.depart`); ACKed after the commit like NOTIFY.

Alerts go to :func:`sinks.alerting.delivery.store.enqueue` unless an active silence or a downtime
mutes them (:mod:`sinks.alerting.silences.rules`, :mod:`sinks.alerting.downtimes.rules`): then they
are recorded in ``suppressed`` (``downtime_suppressed``) instead. State rows are
shared by every alerting sink and locked while evaluated (:mod:`sinks.alerting.locks`), so two
sinks never both act on one transition. The deliverer thread
(:mod:`sinks.alerting.delivery.deliverer`) sends the outbox when channels are configured.

This module is the sink itself: the loop's calls (a batch in, one transaction committed,
retried on a deadlock; the tick), the deliverer's life, the counters. A batch's messages
become rows in :mod:`sinks.alerting.rows`; one transaction's evaluation of them is an
:class:`sinks.alerting.evaluation.Evaluation` acting on the transaction's port
(:class:`sinks.alerting.transaction.Transaction`), as the concepts' tick passes do.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from fleetwatch import sinktypes
from fleetwatch.logs import Throttle
from fleetwatch.protocol import Relayed
from sinks.alerting.acks import store as ackstore
from sinks.alerting.checks.rules import owed
from sinks.alerting.config import AlertingConfig
from sinks.alerting.dependencies import store as reachability
from sinks.alerting.downtimes import rules as downtimes
from sinks.alerting.downtimes import store as downtimestore
from sinks.alerting.escalation import store as escalation
from sinks.alerting.evaluation import Evaluation
from sinks.alerting.external.runner import PrometheusAlerts
from sinks.alerting.freshness import store as staleness
from sinks.alerting.hosts import departures, skew
from sinks.alerting.lookups import Lookups
from sinks.alerting.rows import check_row, heartbeats, judged, notification_row
from sinks.alerting.slo import store as slostore
from sinks.alerting.transaction import Transaction
from sinks.base import WriteError
from fleetwatch.store import db
from sinks.database import DatabaseSink

log = logging.getLogger(__name__)

#: attempts of a batch's transaction when PostgreSQL reports a deadlock or a
#: serialization failure (another sink won; the batch is simply evaluated again)
ATTEMPTS = 3
RETRYABLE = ("40P01", "40001")


#: at its first tick, a sink looks for the downtimes and silences that ended this long
#: before it started (while no sink ran, their held alerts were owed)
COVERS_LOOKBACK = 86400.0
#: seconds between two looks for agents to forget, at most
FORGET_EVERY = 60.0
#: what the last pass over Prometheus' alerts found, shown as ``prom_alerts_KEY``
PROMETHEUS_COUNTS = ("held", "firing", "resolved", "unknown_host", "over_host_limit")


def _retryable(e: DBAPIError) -> bool:
    return getattr(getattr(e, "orig", None), "sqlstate", None) in RETRYABLE


class AlertingSink(DatabaseSink):
    type = "alerting"
    handles = sinktypes.BY_NAME["alerting"].handles
    acks = sinktypes.BY_NAME["alerting"].acks

    def __init__(self, engine, clock=time.time, config: AlertingConfig | None = None,
                 name: str = "alerting", enqueue=None, deliver: bool = True, tz=None,
                 ancestors=None, on_hold=None):
        super().__init__(engine, clock)
        self.config = config or AlertingConfig()
        self.tick_interval = self.config.tick_interval
        self.name = name
        self.lookups = Lookups()
        #: (uuid, plugin) and (uuid, name) keys known to have a state row
        self.known_checks: set = set()
        self.known_hosts: set = set()
        self.scheduled = staleness.Scheduled()      # the checks that must report
        self.topology = reachability.Topology()     # parents: the config's and the agents'
        self.throttle = Throttle(log)
        self._enqueue = enqueue
        self._deliver = deliver
        self.deliverer = None
        self.started_at: float | None = None
        #: the time zone of recurring downtimes' wall-clock windows (default: local)
        self.tz = tz or downtimes.local_zone()
        self._ancestors = ancestors
        #: ``on_hold(reason, by, event)``, called for each alert held back (whatever held
        #: it: an acknowledgement, a parent, a silence, a downtime;
        #: :mod:`sinks.alerting.holds`) once its transaction committed: the backtest's
        #: recorder of what held its alerts (sinks/alerting/backtest.py)
        self.on_hold = on_hold
        #: until when the ends of downtimes and silences were looked at (the tick)
        self.covers_seen: float | None = None
        #: when the tick looks next for agents GONE long enough to be forgotten
        self.next_forget = 0.0
        #: the agents' clock skews this sink wrote (:mod:`sinks.alerting.hosts.skew`)
        self.skews = skew.Shown()
        #: the rules on series (:mod:`sinks.alerting.series.runner`), when it has some
        self.series = None
        #: the routers' tails (router -> endpoint) and how to reach them: rules a reload
        #: adds follow them at once
        self.tails: dict[str, str] = {}
        self._tail_access = None
        #: the alerts Prometheus posted to the console (:mod:`sinks.alerting.external`)
        self.prometheus = PrometheusAlerts(self.config)

    @classmethod
    def from_config(cls, config, clock=time.time):
        return cls(db.engine(config.state_url), clock, config.alerting,
                   name=config.name or "alerting")

    def start(self) -> None:
        super().start()
        from sinks.alerting.delivery import store as outbox
        if self._enqueue is None:
            self._enqueue = outbox.enqueue
        self.started_at = self.clock()
        self._series_config()
        if self._deliver and self.config.delivery.channels:
            from sinks.alerting.delivery.deliverer import Deliverer
            self.deliverer = Deliverer(self.engine, self.config.delivery, name=self.name)
            self.deliverer.start()

    #: a config reload changes the whole ``alerting`` section but the loop's tick period
    live_settings = {"alerting": "live", "alerting.tick_interval": "restart"}

    def reconfigure(self, config, changed) -> None:
        """A reloaded config (the loop's thread, between batches): thresholds and rules from
        the next transaction on; channels and retries from the deliverer's next round."""
        self.config = config.alerting
        self._series_config()
        self.prometheus.reconfigure(self.config)
        delivery = self.config.delivery
        if not any(p.startswith("alerting.delivery.") for p in changed):
            return
        if self.deliverer is not None:
            self.deliverer.reconfigure(delivery)
        elif self._deliver and delivery.channels and self.started_at is not None:
            from sinks.alerting.delivery.deliverer import Deliverer
            self.deliverer = Deliverer(self.engine, delivery, name=self.name)
            self.deliverer.start()

    def _series_config(self) -> None:
        """The rules on series of the config: declared (the ``rules`` table, for the
        console), started, changed, or ended."""
        from sinks.alerting.series.store import declare
        try:
            with self.transaction() as conn:
                declare(conn, self.config.rules, self.name, self.clock())
        except SQLAlchemyError as e:     # the console lists them later; the rules still run
            self.counts["rules_declare_failed"] += 1
            log.warning("the rules could not be declared in the state database: %s", e)
        if self.config.rules and self.series is None:
            from sinks.alerting.series.runner import SeriesRules
            self.series = SeriesRules(self.config, self.clock())
            for router, tail in list(self.tails.items()):
                self.welcomed(router, {"tail": tail}, *self._tail_access)
        elif self.config.rules:
            self.series.reconfigure(self.config)
        elif self.series is not None:
            self._stop_feed()
            self.series = None

    def welcomed(self, router: str, endpoints: dict, ctx, keys) -> None:
        """A router welcomed this sink (the loop's hook): with rules, follow its tail."""
        tail = endpoints.get("tail") if isinstance(endpoints, dict) else None
        if not isinstance(tail, str) or not tail:
            return
        self.tails[router], self._tail_access = tail, (ctx, keys)
        if self.series is None:
            return
        if self.series.feed is None:
            from sinks.alerting.series.feed import TailFeed
            rules = self.series
            self.series.feed = TailFeed(
                lambda uuid, type_, body: rules.observe(uuid, type_, body, self.clock()),
                rules.lock, rules.counts, ctx, keys).start()
        self.series.feed.connect(tail)

    def observe(self, relayed: Relayed) -> None:
        """A STATS or RESULT as a tail gives it, for the rules on series (the backtest's
        way in; a live sink's come from its :class:`sinks.alerting.series.feed.TailFeed`)."""
        if self.series is not None:
            with self.series.lock:
                self.series.observe(relayed.uuid, relayed.message.type, relayed.message.body,
                                    self.clock())

    def _stop_feed(self) -> None:
        if self.series is not None and self.series.feed is not None:
            self.series.feed.stop()
            self.series.feed = None

    def close(self) -> None:
        self._stop_feed()
        if self.deliverer is not None:
            self.deliverer.stop()
            self.deliverer = None
        super().close()

    # ---------------------------------------------------------------- the loop's calls
    def write(self, batch: list[Relayed]) -> None:
        now = self.clock()
        counts = Counter(r.message.type.lower() for r in batch)
        notes = sorted((notification_row(r, now) for r in batch if r.message.type == "NOTIFY"),
                       key=lambda row: row["msg_id"])
        results = [check_row(r, now) for r in batch if r.message.type == "RESULT"]
        good = [r for r in results if r is not None and not judged(r["plugin"])]
        counts["result_reserved"] = sum(1 for r in results if r is not None and
                                        judged(r["plugin"]))
        beats = heartbeats(batch)
        leaving: dict[str, float] = {}
        for r in batch:
            if r.message.type == "DEREGISTER":
                leaving[r.uuid] = max(r.message.ts, leaving.get(r.uuid, r.message.ts))
        counts["result_bad"] = len(results) - len(good) - counts["result_reserved"]
        counts["clock_skewed"] = skew.counted(batch, now, self.config.clock_skew)
        if notes or good or beats or leaving:
            def work(port: Transaction) -> None:
                evaluation = Evaluation(port)
                evaluation.notifications(notes)
                evaluation.results(good)
                if leaving:
                    departures.depart(port, leaving)
                evaluation.heartbeats(beats)
            counts.update(self._transaction(work, now).counts)
        self.counts.update(counts)

    def tick(self) -> None:
        """Hosts heard through no router for their timeout turn DOWN (ephemeral ones GONE,
        their checks ended; those GONE for ``forget_after`` are forgotten); alerts a silence held
        back are raised again; scheduled checks with no result for their freshness
        threshold get an UNKNOWN stale result (:mod:`sinks.alerting.freshness.store`); checks
        held back by a parent that is fine again get their owed alert
        (:mod:`sinks.alerting.dependencies.store`), and so do those a downtime or a silence that
        ended since the last tick held back (:func:`sinks.alerting.downtimes.store.uncovered`);
        problems unacknowledged for a rule's ``after`` are escalated
        (:mod:`sinks.alerting.escalation.store`); the rules on series and the alerts
        Prometheus posted to the console are judged when their pass is due
        (:mod:`sinks.alerting.series.runner`, :mod:`sinks.alerting.external.runner`). Called
        by the loop every ``tick_interval``."""
        now = self.clock()
        run = self._transaction(lambda port: Evaluation(port).expire(), now)
        self.counts.update(run.counts)
        if run.result:                  # ephemeral agents gone silent: their checks end
            self.counts.update(self._transaction(
                lambda port: departures.depart(port, run.result), now).counts)
        if now >= self.next_forget:
            self.counts.update(self._transaction(departures.forget, now).counts)
            self.next_forget = now + min(FORGET_EVERY, self.config.forget_after)
        self.counts.update(self._transaction(ackstore.tick, now).counts)   # acknowledgements
        self.counts.update(self._transaction(self._stale, now).counts)     # freshness
        self.counts.update(self._transaction(_released, now).counts)       # parents
        since = self.covers_seen if self.covers_seen is not None else \
            (self.started_at or now) - COVERS_LOOKBACK
        self.counts.update(self._transaction(lambda port: _uncovered(port, since),
                                             now).counts)          # downtimes ended
        self.covers_seen = now
        if escalation.wanted(self.config.delivery):
            self.counts.update(self._transaction(escalation.look, now).counts)
        if slostore.wanted(self.config):
            self.counts.update(self._transaction(slostore.tick, now).counts)
        if self.series is not None and self.series.due(now):
            run = self._transaction(_judged(self.series.judge), now)
            self.series.submitted(run.result)
            self.counts.update(run.counts)
            with self.series.lock:          # (the tail's thread counts under it)
                counts = dict(self.series.counts)
            for key, value in counts.items():
                self.counts[f"rules_{key}"] = value
        if self.prometheus.due(now):        # the alerts Prometheus posted to the console
            self.counts.update(self._transaction(_judged(self.prometheus.judge), now).counts)
            for key in PROMETHEUS_COUNTS:
                self.counts[f"prom_alerts_{key}"] = self.prometheus.counts[key]

    def _stale(self, port: Transaction) -> None:
        look = staleness.look(port, self.scheduled)
        if look is not None:
            Evaluation(port).stale(look)

    def ancestors(self, conn, hostname: str) -> set[str]:
        """The hosts ``hostname`` depends on, however far (a downtime's ``children``): the
        injected callable's answer, else the dependency graph's
        (:class:`sinks.alerting.dependencies.rules.Graph`)."""
        if self._ancestors is not None:
            return set(self._ancestors(hostname))
        return self.topology.graph(conn, self.config.dependencies, self.throttle) \
            .ancestors(hostname)

    def _transaction(self, work, now: float) -> Transaction:
        """``work(port)`` in one transaction (its answer kept as the port's ``result``),
        tried again on a deadlock; the port of the attempt that committed (its holds then
        told to ``on_hold``)."""
        for attempt in range(1, ATTEMPTS + 1):
            try:
                with self.transaction() as conn:
                    run = Transaction(self, conn, now)
                    run.result = work(run)
            except DBAPIError as e:
                self.skews.written.clear()      # what it wrote was rolled back
                if _retryable(e) and attempt < ATTEMPTS:
                    self.counts["transaction_retried"] += 1
                    continue
                raise WriteError(f"alerting write failed: {e.__class__.__name__}: {e}") from e
            except SQLAlchemyError as e:
                self.skews.written.clear()
                raise WriteError(f"alerting write failed: {e.__class__.__name__}: {e}") from e
            break
        if run.enqueued and self.deliverer is not None:
            self.deliverer.wake()
        if self.on_hold is not None:
            for reason, by, event in run.holds:
                self.on_hold(reason, by, event)
        return run



def _judged(judge):
    """The work of a pass that judges results itself (the rules on series:
    :mod:`sinks.alerting.series.runner`; Prometheus' alerts:
    :mod:`sinks.alerting.external.runner`): ``judge(port)``'s rows through the evaluation,
    as a RESULT's, and returned."""
    def work(port: Transaction) -> list[dict]:
        rows = judge(port)
        if rows:
            Evaluation(port).results(rows)
        return rows
    return work


def _released(port: Transaction) -> None:
    """The tick's pass over checks a parent held back: those whose parent is fine again
    get their owed alert (:func:`sinks.alerting.dependencies.store.held`)."""
    keys = reachability.held(port)
    if keys:
        looked = Evaluation(port).owed(keys, lambda state: state.unreachable is not None)
        port.counts["check_released"] += sum(state.unreachable is None for state in looked)


def _uncovered(port: Transaction, since: float) -> None:
    """The tick's pass over checks a downtime or a silence that ended in ``(since, now]``
    held back: they get their owed alerts, once (not told meanwhile)."""
    keys = downtimestore.uncovered(port, since)
    if keys:
        told = Evaluation(port).owed(keys, lambda state: bool(owed(state)))
        port.counts["downtime_end_evaluated"] += len(told)
