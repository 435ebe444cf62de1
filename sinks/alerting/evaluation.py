"""One transaction's evaluation: a batch's rows through the state machines into alerts.

A :class:`Pass` is made by the sink for each attempt of a transaction and given its
connection. It records new notifications, stores the newest result of each check, runs
every result through the Nagios state machine (:mod:`sinks.alerting.checks`) and every
heard router through the host state (:mod:`sinks.alerting.hosts`), on state rows it locks
first (:mod:`sinks.alerting.state`); and turns what changed into alert events
(:mod:`sinks.alerting.events`), enqueued unless an active silence mutes them
(:mod:`sinks.alerting.silences`), then recorded as suppressed; a problem's alerts an
acknowledgement covers are held back (:mod:`sinks.alerting.ackstore`). Its counts are the sink's
counters for that batch; the clock is the sink's, read once per transaction (``now``).
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from sinks.alerting import checks as checkstate, events as alertevents, hosts as hoststate
from sinks.alerting import staleness, state as alertstate
from sinks.alerting.ackstore import Cover
from sinks.alerting.rows import newest, order
from sinks.alerting.silences import Subject, first_match
from sinks.state import db, schema

if TYPE_CHECKING:
    from sinks.alerting.sink import AlertingSink

log = logging.getLogger(__name__)


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
            if not db.insert_new(self.conn, schema.notifications, [row]):
                self.counts["notify_already_recorded"] += 1
                continue
            self.counts["notify_recorded"] += 1
            # the registry's name for the stamped uuid (its HELLO), not the body's claim
            hostname = self.hostname(row["uuid"]) or row["hostname"]
            self.deliver(alertevents.notify_event(row, hostname, self.now), row["source"])

    def results(self, rows: list[dict]) -> None:
        if not rows:
            return
        rows = sorted(rows, key=lambda r: (r["uuid"], r["plugin"], order(r)))
        keys = {(r["uuid"], r["plugin"]) for r in rows}
        states = alertstate.lock_checks(self.conn, keys, self.now, self.sink.known_checks)
        declared = self.sink.lookups.max_attempts(self.conn, keys)
        latest = sorted(newest(rows), key=lambda r: (r["uuid"], r["plugin"]))
        stored = db.record_checks(self.conn, latest)
        self.counts["result_recorded"] += stored
        self.counts["result_not_newer"] += len(rows) - stored
        changed: dict = {}
        acked = Cover(self.conn, keys, self.now)
        for row in rows:
            key = (row["uuid"], row["plugin"])
            policy = self.config.check_policy(declared.get(key))
            step = checkstate.evaluate(states[key], row["status"], order(row), self.now,
                                       policy)
            if not step.applied:
                continue
            state = self.check_alerts(key, step.state, step.alerts, policy.max_attempts,
                                      row["output"], row["long_output"], acked)
            states[key] = state
            changed[key] = (state, policy.max_attempts)
        alertstate.save_checks(self.conn, changed, self.now)
        staleness.heard(self.conn, keys, self.now)

    def check_alerts(self, key: tuple[str, str], state, alerts, max_attempts: int,
                     output: str, long_output: str, acked: Cover):
        """Check ``key``'s ``alerts`` from a result that left it in ``state``: its
        acknowledgement sees the new status first, then each alert it does not hold back is
        delivered; the state as told (a reminder's clock restarts when one went out)."""
        uuid, plugin = key
        acked.step(key, state.status)
        for alert in alerts:
            if acked.holds(key, alert.kind, alert.action):
                self.counts["alert_acknowledged"] += 1
                continue
            event = alertevents.check_event(alert, uuid, self.hostname(uuid), plugin, state,
                                            max_attempts, output, long_output, self.now)
            if self.deliver(event, plugin):
                state = checkstate.delivered(state, alert, self.now)
        return state

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
            if name and staleness.process_held(self, uuid, state, timeout):
                continue        # its agent went quiet too: the agent's DOWN says it
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
