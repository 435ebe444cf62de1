"""One transaction's evaluation: a batch's rows through the state machines into alerts.

An :class:`Evaluation` acts on one transaction through its
:class:`sinks.alerting.port.EvaluationPort` only (so it is unit-tested on a recording port,
without a database). It records new notifications, runs every result through the Nagios
state machine (:mod:`sinks.alerting.checks.rules`) and every heard router through the host
state (:mod:`sinks.alerting.hosts.rules`), on state rows the port locks first; and turns what
changed into alert events (:mod:`sinks.alerting.delivery.events`), each asked
:func:`sinks.alerting.holds.held_back` before it goes out: an acknowledgement, a parent, a
silence or a downtime holds it back, and then it is not told to the state machine, so it is
raised again (a check's owed alerts: :meth:`Evaluation.owed`; a host's: the tick's
:meth:`Evaluation.expire`). The tick's stale results (:meth:`Evaluation.stale`) take the
same path as real ones.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from sinks.alerting import holds
from sinks.alerting.acks.rules import Cover
from sinks.alerting.checks import rules as checkstate
from sinks.alerting.checks.ordering import key as order_key
from sinks.alerting.delivery import events as alertevents
from sinks.alerting.freshness import rules as freshness
from sinks.alerting.hosts import rules as hoststate
from sinks.alerting.hosts.skew import beyond
from sinks.alerting.port import EvaluationPort
from sinks.alerting.rows import order

log = logging.getLogger(__name__)


class Evaluation:
    """One transaction's evaluation, acting through ``port``."""

    def __init__(self, port: EvaluationPort):
        self.port = port

    def _cover(self, keys) -> Cover:
        """The acknowledgements of checks ``keys`` (locked): each ends at its check's change."""
        return Cover(self.port.acks(keys), self.port.now, self.port.end_ack)

    # ---------------------------------------------------------------- notifications
    def notifications(self, rows: list[dict]) -> None:
        """The batch's new notifications recorded and their alerts enqueued, a few
        statements for the whole batch (not a few per NOTIFY): one insert of the rows, one
        of the alerts (:func:`sinks.alerting.delivery.store.enqueue_all`)."""
        port = self.port
        once: dict = {}
        for row in rows:            # (one msg_id twice in a batch: recorded once)
            once.setdefault(row["msg_id"], row)
        fresh = port.record_notifications(list(once.values()))
        port.counts["notify_already_recorded"] += len(rows) - len(fresh)
        port.counts["notify_recorded"] += len(fresh)
        rows = [row for row in once.values() if row["msg_id"] in fresh]
        # the registry's names for the stamped uuids (their HELLO), not the bodies' claim
        names = port.hostnames([row["uuid"] for row in rows])
        events = [alertevents.notify_event(row, names.get(row["uuid"]) or row["hostname"],
                                           port.now) for row in rows]
        events = [e for e, row in zip(events, rows) if holds.admit(port, e, row["source"])]
        port.enqueue(events, port.config.delivery)
        for event in events:
            holds.told(port, event)

    # ---------------------------------------------------------------- check results
    def results(self, rows: list[dict]) -> None:
        """Each result, oldest first per check, through the state machine; the newest
        applied result of each check stored; the checks heard."""
        if not rows:
            return
        port, now = self.port, self.port.now
        rows = sorted(rows, key=lambda r: (r["uuid"], r["plugin"], order_key(order(r))))
        keys = {(r["uuid"], r["plugin"]) for r in rows}
        states = port.lock_checks(keys)
        declared = port.max_attempts(keys)
        changed: dict = {}
        latest: dict = {}           # the newest applied result of each check: stored
        acked = self._cover(keys)
        applied = []                # (key, hostname, before, after, row): the SLOs' events
        for row in rows:
            key = (row["uuid"], row["plugin"])
            policy = port.config.check_policy(declared.get(key))
            before = states[key]
            step = checkstate.evaluate(before, row["status"], order(row), now, policy)
            if not step.applied:
                continue
            latest[key] = row
            state = self.check_alerts(key, step.state, step.alerts, policy.max_attempts,
                                      row["output"], row["long_output"], acked)
            states[key] = state
            changed[key] = (state, policy.max_attempts)
            applied.append((key, None, before, state, row))
        stored = port.record_results([latest[key] for key in sorted(latest)])
        port.counts["result_recorded"] += stored
        port.counts["result_not_newer"] += len(rows) - stored
        port.save_checks(changed)
        port.count_slos(applied)
        port.heard(keys)

    def check_alerts(self, key: tuple[str, str], state, alerts, max_attempts: int,
                     output: str, long_output: str, acked: Cover):
        """Check ``key``'s ``alerts`` from a result that left it in ``state``: its
        acknowledgement sees the new status first, then each alert nothing holds back
        (:func:`sinks.alerting.holds.held_back`) is delivered; the state as told (a
        reminder's clock restarts when one went out)."""
        port = self.port
        uuid, plugin = key
        acked.step(key, state.status)
        parent = port.check_parent(key) if state.status != checkstate.OK else None
        if parent != state.unreachable:
            state = replace(state, unreachable=parent)
        for alert in alerts:
            event = alertevents.check_event(alert, uuid, port.hostname(uuid), plugin, state,
                                            max_attempts, output, long_output, port.now)
            if holds.deliver(port, event, plugin, checkstate.problem_since(state),
                             ack=acked.of(key), parent=parent):
                state = checkstate.delivered(state, alert, port.now)
        return state

    def owed(self, keys: list[tuple[str, str]], wanted) -> list:
        """Checks ``keys``, locked, that are still ``wanted(state)`` under the lock (another
        sink may have just done it) go through :meth:`check_alerts` with the alerts their
        state is owed (:func:`sinks.alerting.checks.rules.owed`: held back, and not told
        since) and the output of their latest result. Returns their states, as saved."""
        port = self.port
        states = port.lock_checks(keys)
        declared = port.max_attempts(keys)
        outputs = port.latest_outputs(keys)
        acked = self._cover(keys)
        changed = {}
        for key in keys:
            state = states[key]
            if not wanted(state):
                continue
            policy = port.config.check_policy(declared.get(key))
            output, long_output = outputs.get(key, ("", ""))
            changed[key] = (self.check_alerts(key, state, checkstate.owed(state),
                                              policy.max_attempts, output, long_output,
                                              acked), policy.max_attempts)
        port.save_checks(changed)
        return [state for state, _ in changed.values()]

    def stale(self, look) -> None:
        """The stale checks of the tick's ``look`` (:class:`sinks.alerting.freshness.store.
        Look`) get an UNKNOWN result "stale: no result for N s" through the state machine,
        on their rows locked and judged again (another sink may have just done it). The
        result does not move a check's order (``last_result``): a real one that comes later
        is applied and recovers it."""
        port, now = self.port, self.port.now
        states = port.lock_checks(look.due)
        watches = look.again(port)              # under the locks
        declared = port.max_attempts(look.due)
        acked = self._cover(look.due)
        changed = {}
        applied = []
        for key, watch in watches.items():
            state, policy = states[key], port.config.check_policy(declared.get(key))
            output = freshness.stale_text(watch, now)
            step = checkstate.evaluate(state, checkstate.UNKNOWN,
                                       freshness.stale_order(state.last_result), now, policy)
            new = replace(step.state, last_result=state.last_result)
            log.info("check %s of %s stale: %s (%s attempt %d/%d)", key[1], key[0], output,
                     checkstate.state_type(new), new.attempt, policy.max_attempts)
            changed[key] = (self.check_alerts(key, new, step.alerts, policy.max_attempts,
                                              output, "", acked), policy.max_attempts)
            applied.append((key, None, state, changed[key][0], None))
        port.save_checks(changed)
        port.count_slos(applied)
        look.mark(port, list(watches))

    # ---------------------------------------------------------------- hosts
    def heartbeats(self, beats: dict) -> None:
        """A batch's heartbeats (:func:`sinks.alerting.rows.heartbeats`) on their hosts'
        rows: UP again, routers heard or lost; the agents' clock skews."""
        if not beats:
            return
        port, now = self.port, self.port.now
        states = port.lock_hosts(beats)
        changed: dict = {}
        for key in sorted(beats):
            uuid, name = key
            policy = port.config.host_policy(per_router=not name)
            state = states.get(key)
            for router, interval, sent in beats[key]:
                step = hoststate.heard(state, router, now, interval, policy, sent)
                if step.state.gone is not None:
                    port.counts["heartbeat_after_deregister"] += 1    # sent before it left
                elif state is not None and state.gone is not None:
                    port.counts["host_back"] += 1
                    log.info("%s%s is back (it was gone)", uuid, f" process {name}" if name
                             else "")
                state = step.state
                for lost in step.lost:
                    port.counts["host_router_lost"] += 1
                    port.warning(
                        f"lost:{lost}", "router %s stopped relaying %s%s (still heard through "
                        "%s): that router lost it, the host is fine; no alert", lost, uuid,
                        f" process {name}" if name else "", router)
                state = self._host_alerts(uuid, name, state, step.alerts)
            changed[key] = (state, hoststate.deadline(state, policy))
        port.save_hosts(changed)
        port.record_skews({
            uuid: beyond(max(sent for _, _, sent in beats[(uuid, name)]), now,
                         port.config.clock_skew)
            for uuid, name in beats if not name})

    def expire(self) -> dict[str, float | None]:
        """The tick's look at hosts past their deadline (DOWN, GONE when ephemeral, or held
        UNREACHABLE behind a parent) and at hosts owed an alert. Returns the agents found
        GONE (uuid -> None: ephemeral and silent), whose checks and problems end next."""
        port, now = self.port, self.port.now
        departed: dict[str, float | None] = {}
        keys = port.due_hosts()
        if not keys:
            return departed
        changed: dict = {}
        agents = sorted({uuid for uuid, name in keys if not name})
        ephemeral = port.ephemeral(agents)
        port.hostnames(agents)                          # (read once, not one by one)
        for key, state in port.lock_hosts(keys).items():
            uuid, name = key
            if state is None:
                continue
            policy = port.config.host_policy(per_router=not name)
            timeout = policy.timeout_for(state.interval)
            if state.up and now - (port.started_at or now) < timeout:
                continue        # just started: heartbeats may be on their way to us
            if name and self._process_held(uuid, state, timeout):
                continue        # its agent went quiet too: the agent's DOWN says it
            new, alerts = hoststate.expire(state, now, policy, not name and uuid in ephemeral)
            behind = None           # the parent its DOWN was held behind, back up now
            if new.gone is not None and state.gone is None:
                port.counts["host_gone"] += 1           # ephemeral: GONE, not DOWN
                log.info("ephemeral agent %s (%s) silent for %.0fs: gone, not DOWN", uuid,
                         port.hostname(uuid), now - state.last_heard)
                departed[uuid] = None
            elif not name and not new.up and not new.notified:     # a DOWN to tell
                blocked = port.host_parent(uuid, state.last_heard + timeout, timeout)
                if blocked is not None and blocked[1] == freshness.QUIET:
                    port.counts["host_held"] += 1       # its parent is not decided yet
                    changed[key] = (state, hoststate.deadline(state, policy))
                    continue
                behind = new.unreachable
                new = self._unreachable(uuid, new, blocked)
                if behind is not None and new.unreachable is None:   # its parent is back
                    behind = f"{behind}, up again: this host was UNREACHABLE behind it"
                else:
                    behind = None
            state = self._host_alerts(uuid, name, new, alerts, behind)
            changed[key] = (state, hoststate.deadline(state, policy))
        port.save_hosts(changed)
        return departed

    def _process_held(self, uuid: str, state, timeout: float) -> bool:
        """Whether a local process's silence past ``timeout`` is held back by its agent's, as
        a check's staleness is (:func:`sinks.alerting.freshness.rules.held`): its heartbeats
        come through the agent, so an agent gone quiet is its one DOWN, not one per
        process."""
        port = self.port
        if not state.up or not freshness.overdue(state.last_heard, timeout, port.now):
            return False
        reason = freshness.held(port.agents([uuid]).get(uuid), state.last_heard + timeout)
        if reason is not None:
            port.counts["process_held"] += 1
        return reason is not None

    def _unreachable(self, uuid: str, state, blocked: tuple[str, str] | None):
        """``state`` (a silent agent's, DOWN) with the parent it is UNREACHABLE behind, or
        none."""
        port = self.port
        parent = blocked[0] if blocked is not None else None
        if parent != state.unreachable:
            if parent is not None:
                port.counts["host_unreachable"] += 1
                log.info("host %s (%s) UNREACHABLE behind %s: held, no page",
                         port.hostname(uuid), uuid, parent)
            else:
                log.info("host %s (%s): parent %s is fine, the host is DOWN",
                         port.hostname(uuid), uuid, state.unreachable)
        return replace(state, unreachable=parent)

    def _host_alerts(self, uuid: str, name: str, state, alerts, behind: str | None = None):
        """``alerts`` of host ``uuid`` (or its process ``name``) that nothing holds back,
        delivered; ``behind``: the parent its DOWN was held UNREACHABLE behind until now,
        which the alert names (``parent``)."""
        port = self.port
        for alert in alerts:
            event = alertevents.host_event(alert, uuid, port.hostname(uuid), name, state,
                                           port.now)
            if behind is not None and alert.action == "trigger":
                event["parent"] = behind
            if holds.deliver(port, event, name or None, None if state.up else state.since,
                             parent=state.unreachable):
                state = hoststate.delivered(state, alert)
        return state
