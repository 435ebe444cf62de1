"""One transaction's evaluation: a batch's rows through the state machines into alerts.

A :class:`Pass` is made by the sink for each attempt of a transaction and given its
connection. It records new notifications, stores the newest result of each check, runs
every result through the Nagios state machine (:mod:`sinks.alerting.checks.rules`) and every
heard router through the host state (:mod:`sinks.alerting.hosts.rules`), on state rows it locks
first (:mod:`sinks.alerting.state`); and turns what changed into alert events
(:mod:`sinks.alerting.delivery.events`), enqueued unless an active silence or a downtime mutes them
(:mod:`sinks.alerting.silences.rules`, :mod:`sinks.alerting.downtimes.rules`), then recorded as
suppressed or held (:mod:`sinks.alerting.downtimes.store`); a problem's alerts an
acknowledgement covers are held back (:mod:`sinks.alerting.acks.store`), and so are those of a
host UNREACHABLE behind a parent, or of a check whose parent check is in a HARD problem
(:mod:`sinks.alerting.dependencies.store`). An agent that leaves (its DEREGISTER, or ephemeral
and silent: GONE, :mod:`sinks.alerting.hosts.rules`) has its checks and problems ended, and is
forgotten ``forget_after`` later (:mod:`sinks.alerting.hosts.departures`). Its counts are the
sink's counters for that batch; the clock is the sink's, read once per transaction
(``now``).
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING

from sinks.alerting.checks import rules as checkstate
from sinks.alerting.delivery import events as alertevents
from sinks.alerting.hosts import rules as hoststate
from sinks.alerting.downtimes import rules as downtimerules
from sinks.alerting.downtimes import store as downtimestore
from sinks.alerting.escalation import store as escalation
from sinks.alerting.freshness import rules as freshness
from sinks.alerting.hosts import departures
from sinks.alerting.checks import ordering
from sinks.alerting.delivery import store as outbox
from sinks.alerting.dependencies import store as reachability
from sinks.alerting.hosts import skew
from sinks.alerting.freshness import store as staleness
from sinks.alerting.checks import store as checkstore
from sinks.alerting.hosts import store as hoststore
from sinks.alerting.silences import store as silencestore
from sinks.alerting.acks.store import Cover
from sinks.alerting.rows import order
from sinks.alerting.silences.rules import Subject, first_match
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
        self._downtimes = None
        #: uuid -> the parent it is UNREACHABLE behind, read once (reachability.check_blocker)
        self.unreachable_hosts: dict[str, str] | None = None
        #: parents' states read in this transaction, by their references (reachability)
        self.parents_seen: dict = {}
        #: uuid -> its DEREGISTER's ts (None: ephemeral and silent) of the agents this pass
        #: found GONE, whose checks and problems :func:`departures.depart` ends next
        self.departed: dict[str, float | None] = {}

    # ---------------------------------------------------------------- alerts
    def hostname(self, uuid: str) -> str | None:
        return self.sink.lookups.hostnames(self.conn, [uuid]).get(uuid)

    def downtimes(self) -> list:
        """The downtimes that may cover a subject now (read once per transaction)."""
        if self._downtimes is None:
            self._downtimes = downtimestore.current(self.conn, self.now)
        return self._downtimes

    def deliver(self, event: dict, check: str | None, since: float | None = None,
                rules=None) -> bool:
        """Enqueue ``event`` unless a silence or a downtime mutes it (then record it as
        suppressed, or as held by the downtime: :mod:`sinks.alerting.downtimes.rules`). ``since``:
        when the subject's problem began (a flexible downtime covers only a problem that
        began in one of its windows); a notification's is now. A problem's trigger is
        numbered and counted first (:func:`sinks.alerting.escalation.store.told`); ``rules``: the
        routing rules instead of the configured ones (an escalation's own rule)."""
        if not self.admit(event, check, since):
            return False
        self.sink._enqueue(self.conn, event, rules or self.config.delivery)
        self.told(event)
        return True

    def admit(self, event: dict, check: str | None, since: float | None = None) -> bool:
        """:meth:`deliver` but the enqueueing: whether ``event`` is to be enqueued (a
        silence or a downtime that mutes it records it, and False)."""
        if self._silences is None:
            self._silences = silencestore.active_silences(self.conn, self.now)
        subject = Subject(event["uuid"], event.get("hostname"), check)
        silence = first_match(self._silences, subject, self.now)
        if silence is not None:
            silencestore.record_suppressed(self.conn, silence, event)
            self.counts["alert_suppressed"] += 1
            log.info("alert muted by silence %d: %s %s %s", silence.id, event["action"],
                     event["severity"], event["key"])
            return False
        downtime = downtimerules.covering(
            self.downtimes(), subject, self.now,
            self.now if event["kind"] == "notify" else since, self.sink.tz,
            lambda host: self.sink.ancestors(self.conn, host)) if self.downtimes() else None
        if downtime is not None:
            downtimestore.record_held(self.conn, downtime, event)
            self.counts["alert_downtime"] += 1
            log.info("alert held by downtime %d: %s %s %s", downtime.id, event["action"],
                     event["severity"], event["key"])
            return False
        escalation.told(self, event)
        return True

    def told(self, event: dict) -> None:
        """``event`` was enqueued: counted and logged."""
        self.enqueued += 1
        self.counts[f"alert_{event['kind']}_{event['action']}"] += 1
        # every NOTIFY is an alert: those at DEBUG, state changes at INFO
        log.log(logging.DEBUG if event["kind"] == "notify" else logging.INFO,
                "alert: %s %s %s (%s): %s", event["action"], event["severity"], event["key"],
                event.get("hostname"), event["summary"][:200])

    # ---------------------------------------------------------------- a batch
    def write(self, notes: list[dict], results: list[dict], beats: dict,
              leaving: dict | None = None) -> None:
        self.notifications(notes)
        self.results(results)
        if leaving:
            departures.depart(self, leaving)
        self.heartbeats(beats)

    def notifications(self, rows: list[dict]) -> None:
        """The batch's new notifications recorded and their alerts enqueued, a few
        statements for the whole batch (not a few per NOTIFY): one insert of the rows, one
        of the alerts (:func:`sinks.alerting.delivery.store.enqueue_all`)."""
        once: dict = {}
        for row in rows:            # (one msg_id twice in a batch: recorded once)
            once.setdefault(row["msg_id"], row)
        fresh = db.insert_fresh(self.conn, schema.notifications, list(once.values()))
        self.counts["notify_already_recorded"] += len(rows) - len(fresh)
        self.counts["notify_recorded"] += len(fresh)
        rows = [row for row in once.values() if row["msg_id"] in fresh]
        # the registry's names for the stamped uuids (their HELLO), not the bodies' claim
        names = self.sink.lookups.hostnames(self.conn, [row["uuid"] for row in rows])
        events = [alertevents.notify_event(row, names.get(row["uuid"]) or row["hostname"],
                                           self.now) for row in rows]
        events = [e for e, row in zip(events, rows) if self.admit(e, row["source"])]
        if self.sink._enqueue is outbox.enqueue:
            outbox.enqueue_all(self.conn, events, self.config.delivery)
        else:                   # (a test's own)
            for event in events:
                self.sink._enqueue(self.conn, event, self.config.delivery)
        for event in events:
            self.told(event)

    def results(self, rows: list[dict]) -> None:
        if not rows:
            return
        rows = sorted(rows, key=lambda r: (r["uuid"], r["plugin"], ordering.key(order(r))))
        keys = {(r["uuid"], r["plugin"]) for r in rows}
        states = checkstore.lock_checks(self.conn, keys, self.now, self.sink.known_checks)
        declared = self.sink.lookups.max_attempts(self.conn, keys)
        changed: dict = {}
        latest: dict = {}           # the newest applied result of each check: stored
        acked = Cover(self.conn, keys, self.now)
        for row in rows:
            key = (row["uuid"], row["plugin"])
            policy = self.config.check_policy(declared.get(key))
            step = checkstate.evaluate(states[key], row["status"], order(row), self.now,
                                       policy)
            if not step.applied:
                continue
            latest[key] = row
            state = self.check_alerts(key, step.state, step.alerts, policy.max_attempts,
                                      row["output"], row["long_output"], acked)
            states[key] = state
            changed[key] = (state, policy.max_attempts)
        stored = db.record_checks(self.conn, [latest[key] for key in sorted(latest)])
        self.counts["result_recorded"] += stored
        self.counts["result_not_newer"] += len(rows) - stored
        checkstore.save_checks(self.conn, changed, self.now)
        staleness.heard(self.conn, keys, self.now)

    def check_alerts(self, key: tuple[str, str], state, alerts, max_attempts: int,
                     output: str, long_output: str, acked: Cover):
        """Check ``key``'s ``alerts`` from a result that left it in ``state``: its
        acknowledgement sees the new status first, then each alert it does not hold back is
        delivered; the state as told (a reminder's clock restarts when one went out)."""
        uuid, plugin = key
        acked.step(key, state.status)
        parent = reachability.check_blocker(self, key) if state.status != checkstate.OK \
            else None
        if parent != state.unreachable:
            state = replace(state, unreachable=parent)
        for alert in alerts:
            if acked.holds(key, alert.kind, alert.action):
                self.counts["alert_acknowledged"] += 1
                continue
            if parent is not None and alert.action == "trigger":
                self.counts["alert_held_by_parent"] += 1     # not told: raised again later
                continue
            event = alertevents.check_event(alert, uuid, self.hostname(uuid), plugin, state,
                                            max_attempts, output, long_output, self.now)
            if self.deliver(event, plugin, problem_since(state)):
                state = checkstate.delivered(state, alert, self.now)
        return state

    def owed(self, keys: list[tuple[str, str]], wanted) -> list:
        """Checks ``keys``, locked, that are still ``wanted(state)`` under the lock (another
        sink may have just done it) go through :meth:`check_alerts` with the alerts their
        state is owed (:func:`sinks.alerting.checks.rules.owed`: held back by a silence, a
        downtime or a parent, and not told since) and the output of their latest result.
        Returns their states, as saved."""
        states = checkstore.lock_checks(self.conn, keys, self.now, self.sink.known_checks)
        declared = self.sink.lookups.max_attempts(self.conn, keys)
        outputs = checkstore.latest_outputs(self.conn, keys)
        acked = Cover(self.conn, keys, self.now)
        changed = {}
        for key in keys:
            state = states[key]
            if not wanted(state):
                continue
            policy = self.config.check_policy(declared.get(key))
            output, long_output = outputs.get(key, ("", ""))
            changed[key] = (self.check_alerts(key, state, checkstate.owed(state),
                                              policy.max_attempts, output, long_output,
                                              acked), policy.max_attempts)
        checkstore.save_checks(self.conn, changed, self.now)
        return [state for state, _ in changed.values()]

    def heartbeats(self, beats: dict) -> None:
        if not beats:
            return
        states = hoststore.lock_hosts(self.conn, beats, self.now, self.sink.known_hosts)
        changed: dict = {}
        for key in sorted(beats):
            uuid, name = key
            policy = self.config.host_policy(per_router=not name)
            state = states.get(key)
            for router, interval, sent in beats[key]:
                step = hoststate.heard(state, router, self.now, interval, policy, sent)
                if step.state.gone is not None:
                    self.counts["heartbeat_after_deregister"] += 1    # sent before it left
                elif state is not None and state.gone is not None:
                    self.counts["host_back"] += 1
                    log.info("%s%s is back (it was gone)", uuid, f" process {name}" if name
                             else "")
                state = step.state
                for lost in step.lost:
                    self.counts["host_router_lost"] += 1
                    self.sink.throttle.warning(
                        f"lost:{lost}", "router %s stopped relaying %s%s (still heard through "
                        "%s): that router lost it, the host is fine; no alert", lost, uuid,
                        f" process {name}" if name else "", router)
                state = self._host_alerts(uuid, name, state, step.alerts)
            changed[key] = (state, hoststate.deadline(state, policy))
        hoststore.save_hosts(self.conn, changed, self.now)
        skew.record(self.conn, self.sink.skews, {
            uuid: skew.beyond(max(sent for _, _, sent in beats[(uuid, name)]), self.now,
                              self.config.clock_skew)
            for uuid, name in beats if not name})

    def expire(self) -> None:
        keys = hoststore.due_hosts(self.conn, self.now)
        if not keys:
            return
        changed: dict = {}
        agents = sorted({uuid for uuid, name in keys if not name})
        ephemeral = self.sink.lookups.ephemeral(self.conn, agents)
        self.sink.lookups.hostnames(self.conn, agents)      # (read once, not one by one)
        for key, state in hoststore.lock_hosts(self.conn, keys, self.now,
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
            new, alerts = hoststate.expire(state, self.now, policy,
                                           not name and uuid in ephemeral)
            if new.gone is not None and state.gone is None:
                self.counts["host_gone"] += 1           # ephemeral: GONE, not DOWN
                log.info("ephemeral agent %s (%s) silent for %.0fs: gone, not DOWN", uuid,
                         self.hostname(uuid), self.now - state.last_heard)
                self.departed[uuid] = None
            elif not name and not new.up and not new.notified:     # a DOWN to tell
                blocked = reachability.judge_host(self, uuid, state.last_heard + timeout,
                                                  timeout)
                if blocked is not None and blocked[1] == freshness.QUIET:
                    self.counts["host_held"] += 1       # its parent is not decided yet
                    changed[key] = (state, hoststate.deadline(state, policy))
                    continue
                new = reachability.unreachable(self, uuid, new, blocked)
            state = self._host_alerts(uuid, name, new, alerts)
            changed[key] = (state, hoststate.deadline(state, policy))
        hoststore.save_hosts(self.conn, changed, self.now)

    def _host_alerts(self, uuid: str, name: str, state, alerts):
        for alert in alerts:
            if state.unreachable is not None and alert.action == "trigger":
                self.counts["alert_unreachable"] += 1        # pages nobody; still owed
                continue
            event = alertevents.host_event(alert, uuid, self.hostname(uuid), name, state,
                                           self.now)
            if self.deliver(event, name or None, None if state.up else state.since):
                state = hoststate.delivered(state, alert)
        return state


def problem_since(state) -> float | None:
    """When a check's problem began, as a flexible downtime sees it: its HARD problem's
    start (or last change of status while HARD); None while it has none."""
    return state.since if state.hard and state.hard_status != checkstate.OK else None
