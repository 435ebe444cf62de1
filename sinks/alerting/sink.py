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
  (:mod:`sinks.alerting.checks`) on the check's ``check_state`` row. RESULT is at most once and
  not ACKed; the next run replaces a lost one.
- HEARTBEAT: the ``host_state`` row of the agent (or of the local process named in it)
  records when and through which router it was heard (:mod:`sinks.alerting.hosts`); the loop's
  periodic :meth:`AlertingSink.tick` turns hosts heard through no router for their
  timeout DOWN.

Alerts go to :func:`sinks.alerting.outbox.enqueue` unless an active silence mutes them
(:mod:`sinks.alerting.silences`): then they are recorded in ``suppressed`` instead. State rows are
shared by every alerting sink and locked while evaluated (:mod:`sinks.alerting.state`), so two
sinks never both act on one transition. The deliverer thread (:mod:`sinks.alerting.deliverer`)
sends the outbox when channels are configured.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

from fleetwatch.logs import Throttle
from fleetwatch.protocol import Relayed
from sinks.alerting import events as alertevents, state as alertstate, checks as checkstate, hosts as hoststate
from sinks.state import db
from sinks.alerting.config import AlertingConfig
from sinks.base import WriteError
from sinks.alerting.silences import Subject, first_match

log = logging.getLogger(__name__)

#: attempts of a batch's transaction when PostgreSQL reports a deadlock or a
#: serialization failure (another sink won; the batch is simply evaluated again)
ATTEMPTS = 3
RETRYABLE = ("40P01", "40001")


def notification_row(relayed: Relayed, now: float) -> dict:
    """The ``notifications`` row of a relayed NOTIFY (stamped uuid, not the body's)."""
    msg = relayed.message
    hostname, source = msg.get("hostname"), msg.get("source")
    return {
        "msg_id": msg.msg_id,
        "uuid": relayed.uuid,
        "hostname": hostname[:255] if isinstance(hostname, str) else None,
        "severity": msg.get("severity"),
        "text": msg.get("text"),
        "source": source[:255] if isinstance(source, str) else None,
        "sent_at": float(msg.ts),
        "received_at": now,
        "router": relayed.router,
    }


def _number(value) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def check_row(relayed: Relayed) -> dict | None:
    """The ``checks`` row of a relayed RESULT (stamped uuid), or None if it cannot be one."""
    msg = relayed.message
    plugin, long_output = msg.get("plugin"), msg.get("long_output")
    if not 0 < len(plugin) <= 255 or len(msg.get("command_id")) > db.ID.length:
        return None
    return {
        "uuid": relayed.uuid,
        "plugin": plugin,
        "status": msg.get("status"),
        "output": msg.get("output"),
        "long_output": long_output if isinstance(long_output, str) else "",
        "perfdata": msg.get("perfdata") or [],
        "command_id": msg.get("command_id"),
        "slot": _number(msg.get("slot")),
        "started": _number(msg.get("started")),
        "duration": _number(msg.get("duration")),
        "last_result": float(msg.ts),
        "router": relayed.router,
    }


def newest(rows: list[dict]) -> list[dict]:
    """One row per (uuid, plugin): the newest of a batch (a batch may hold several runs)."""
    out: dict[tuple[str, str], dict] = {}
    for row in rows:
        key = (row["uuid"], row["plugin"])
        old = out.get(key)
        if old is None or _order(old) < _order(row):
            out[key] = row
    return list(out.values())


def _order(row: dict) -> float:
    return row["last_result"] if row["started"] is None else row["started"]


def heartbeats(batch: list[Relayed]) -> dict[tuple[str, str], list[tuple[str, float | None]]]:
    """(uuid, name) -> [(router, interval)] of a batch's HEARTBEATs, each router once."""
    out: dict[tuple[str, str], dict[str, float | None]] = {}
    for r in batch:
        if r.message.type != "HEARTBEAT":
            continue
        name = r.message.get("name")
        name = name[:255] if isinstance(name, str) else ""
        interval = _number(r.message.get("interval"))
        out.setdefault((r.uuid, name), {})[r.router] = interval if interval and interval > 0 \
            else None
    return {k: list(v.items()) for k, v in out.items()}


def _retryable(e: DBAPIError) -> bool:
    return getattr(getattr(e, "orig", None), "sqlstate", None) in RETRYABLE


class AlertingSink(db.DatabaseSink):
    type = "alerting"
    handles = frozenset({"NOTIFY", "HEARTBEAT", "RESULT"})
    acks = frozenset({"NOTIFY"})

    def __init__(self, engine, clock=time.time, config: AlertingConfig | None = None,
                 name: str = "alerting", enqueue=None, deliver: bool = True):
        super().__init__(engine, clock)
        self.config = config or AlertingConfig()
        self.tick_interval = self.config.tick_interval
        self.name = name
        self.lookups = alertstate.Lookups()
        #: (uuid, plugin) and (uuid, name) keys known to have a state row
        self.known_checks: set = set()
        self.known_hosts: set = set()
        self.throttle = Throttle(log)
        self._enqueue = enqueue
        self._deliver = deliver
        self.deliverer = None
        self.started_at: float | None = None

    @classmethod
    def from_config(cls, config, clock=time.time):
        return cls(db.engine(config.state_url), clock, config.alerting,
                   name=config.name or "alerting")

    def start(self) -> None:
        super().start()
        from sinks.alerting import outbox
        outbox.create(self.engine)
        if self._enqueue is None:
            self._enqueue = outbox.enqueue
        self.started_at = self.clock()
        if self._deliver and self.config.delivery.channels:
            from sinks.alerting.deliverer import Deliverer
            self.deliverer = Deliverer(self.engine, self.config.delivery, name=self.name)
            self.deliverer.start()

    #: a config reload changes the whole ``alerting`` section but the loop's tick period
    live_settings = {"alerting": "live", "alerting.tick_interval": "restart"}

    def reconfigure(self, config, changed) -> None:
        """A reloaded config (the loop's thread, between batches): thresholds and rules from
        the next transaction on; channels and retries from the deliverer's next round."""
        self.config = config.alerting
        delivery = self.config.delivery
        if not any(p.startswith("alerting.delivery.") for p in changed):
            return
        if self.deliverer is not None:
            self.deliverer.reconfigure(delivery)
        elif self._deliver and delivery.channels and self.started_at is not None:
            from sinks.alerting.deliverer import Deliverer
            self.deliverer = Deliverer(self.engine, delivery, name=self.name)
            self.deliverer.start()

    def close(self) -> None:
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
        results = [check_row(r) for r in batch if r.message.type == "RESULT"]
        good = [r for r in results if r is not None]
        beats = heartbeats(batch)
        counts["result_bad"] = len(results) - len(good)
        if notes or good or beats:
            run = self._transaction(lambda p: p.write(notes, good, beats), now)
            counts.update(run.counts)
        self.counts.update(counts)

    def tick(self) -> None:
        """Hosts heard through no router for their timeout turn DOWN; alerts a silence held
        back are raised again. Called by the loop every ``tick_interval``."""
        now = self.clock()
        run = self._transaction(lambda p: p.expire(), now)
        self.counts.update(run.counts)

    def _transaction(self, work, now: float) -> "Pass":
        for attempt in range(1, ATTEMPTS + 1):
            run = Pass(self, now)
            try:
                with self.engine.begin() as conn:
                    run.conn = conn
                    work(run)
            except DBAPIError as e:
                if _retryable(e) and attempt < ATTEMPTS:
                    self.counts["transaction_retried"] += 1
                    continue
                raise WriteError(f"alerting write failed: {e.__class__.__name__}: {e}") from e
            except SQLAlchemyError as e:
                raise WriteError(f"alerting write failed: {e.__class__.__name__}: {e}") from e
            break
        if run.enqueued and self.deliverer is not None:
            self.deliverer.wake()
        return run


class Pass:
    """One transaction's evaluation: the rows it locked, the silences it read, its counts."""

    def __init__(self, sink: AlertingSink, now: float):
        self.sink, self.now, self.config = sink, now, sink.config
        self.conn = None
        self.counts: Counter = Counter()
        self.enqueued = 0
        self._silences = None

    # ---------------------------------------------------------------- alerts
    def hostname(self, uuid: str) -> str | None:
        return self.sink.lookups.hostnames(self.conn, [uuid]).get(uuid)

    def deliver(self, event: dict, check: str | None) -> bool:
        """Enqueue ``event`` unless a silence mutes it (then record it as suppressed)."""
        if self._silences is None:
            self._silences = alertstate.active_silences(self.conn, self.now)
        subject = Subject(event["uuid"], event.get("hostname"), check)
        silence = first_match(self._silences, subject, self.now)
        if silence is not None:
            alertstate.record_suppressed(self.conn, silence, event)
            self.counts["alert_suppressed"] += 1
            log.info("alert muted by silence %d: %s %s %s", silence.id, event["action"],
                     event["severity"], event["key"])
            return False
        self.sink._enqueue(self.conn, event, self.config.delivery)
        self.enqueued += 1
        self.counts[f"alert_{event['kind']}_{event['action']}"] += 1
        # every NOTIFY is an alert: those at DEBUG, state changes at INFO
        log.log(logging.DEBUG if event["kind"] == "notify" else logging.INFO,
                "alert: %s %s %s (%s): %s", event["action"], event["severity"], event["key"],
                event.get("hostname"), event["summary"][:200])
        return True

    # ---------------------------------------------------------------- a batch
    def write(self, notes: list[dict], results: list[dict], beats: dict) -> None:
        self.notifications(notes)
        self.results(results)
        self.heartbeats(beats)

    def notifications(self, rows: list[dict]) -> None:
        for row in rows:
            if not db.insert_new(self.conn, db.notifications, [row]):
                self.counts["notify_already_recorded"] += 1
                continue
            self.counts["notify_recorded"] += 1
            # the registry's name for the stamped uuid (its HELLO), not the body's claim
            hostname = self.hostname(row["uuid"]) or row["hostname"]
            self.deliver(alertevents.notify_event(row, hostname, self.now), row["source"])

    def results(self, rows: list[dict]) -> None:
        if not rows:
            return
        rows = sorted(rows, key=lambda r: (r["uuid"], r["plugin"], _order(r)))
        keys = {(r["uuid"], r["plugin"]) for r in rows}
        states = alertstate.lock_checks(self.conn, keys, self.now, self.sink.known_checks)
        declared = self.sink.lookups.max_attempts(self.conn, keys)
        latest = sorted(newest(rows), key=lambda r: (r["uuid"], r["plugin"]))
        stored = db.record_checks(self.conn, latest)
        self.counts["result_recorded"] += stored
        self.counts["result_not_newer"] += len(rows) - stored
        changed: dict = {}
        for row in rows:
            key = (row["uuid"], row["plugin"])
            policy = self.config.check_policy(declared.get(key))
            step = checkstate.evaluate(states[key], row["status"], _order(row), self.now,
                                       policy)
            if not step.applied:
                continue
            state = step.state
            for alert in step.alerts:
                event = alertevents.check_event(
                    alert, row["uuid"], self.hostname(row["uuid"]), row["plugin"], state,
                    policy.max_attempts, row["output"], row["long_output"], self.now)
                if self.deliver(event, row["plugin"]):
                    state = checkstate.delivered(state, alert, self.now)
            states[key] = state
            changed[key] = (state, policy.max_attempts)
        alertstate.save_checks(self.conn, changed, self.now)

    def heartbeats(self, beats: dict) -> None:
        if not beats:
            return
        states = alertstate.lock_hosts(self.conn, beats, self.now, self.sink.known_hosts)
        changed: dict = {}
        for key in sorted(beats):
            uuid, name = key
            policy = self.config.host_policy(per_router=not name)
            state = states.get(key)
            for router, interval in beats[key]:
                step = hoststate.heard(state, router, self.now, interval, policy)
                state = step.state
                for lost in step.lost:
                    self.counts["host_router_lost"] += 1
                    self.sink.throttle.warning(
                        f"lost:{lost}", "router %s stopped relaying %s%s (still heard through "
                        "%s): that router lost it, the host is fine; no alert", lost, uuid,
                        f" process {name}" if name else "", router)
                state = self._host_alerts(uuid, name, state, step.alerts)
            changed[key] = (state, hoststate.deadline(state, policy))
        alertstate.save_hosts(self.conn, changed, self.now)

    def expire(self) -> None:
        keys = alertstate.due_hosts(self.conn, self.now)
        if not keys:
            return
        changed: dict = {}
        for key, state in alertstate.lock_hosts(self.conn, keys, self.now,
                                                self.sink.known_hosts).items():
            uuid, name = key
            if state is None:
                continue
            policy = self.config.host_policy(per_router=not name)
            timeout = policy.timeout_for(state.interval)
            if state.up and self.now - (self.sink.started_at or self.now) < timeout:
                continue        # just started: heartbeats may be on their way to us
            state, alerts = hoststate.expire(state, self.now, policy)
            state = self._host_alerts(uuid, name, state, alerts)
            changed[key] = (state, hoststate.deadline(state, policy))
        alertstate.save_hosts(self.conn, changed, self.now)

    def _host_alerts(self, uuid: str, name: str, state, alerts):
        for alert in alerts:
            event = alertevents.host_event(alert, uuid, self.hostname(uuid), name, state,
                                           self.now)
            if self.deliver(event, name or None):
                state = hoststate.delivered(state, alert)
        return state
