"""The port of one transaction of an alerting sink (a
:class:`sinks.alerting.port.EvaluationPort`).

The sink makes a :class:`Transaction` for each attempt of a transaction, over its
connection: the thin adapter from what the evaluation and the concepts may do to the
concepts' stores (:mod:`sinks.alerting.checks.store`, :mod:`sinks.alerting.hosts.store`,
...), the sink's per-sink memory (the keys known to have a row, the registry's lookups, the
dependency graph, the skews written) and its outbox. What it reads once per transaction (the
silences, the downtimes, the parents' states) it keeps until the transaction ends.
"""

from __future__ import annotations

import logging
from collections import Counter

from sinks.alerting import holds
from sinks.alerting.acks import store as ackstore
from sinks.alerting.checks import store as checkstore
from sinks.alerting.delivery import store as outbox
from sinks.alerting.dependencies.store import Parents
from sinks.alerting.downtimes import store as downtimestore
from sinks.alerting.escalation import store as escalation
from sinks.alerting.external.naming import PREFIX as PROM
from sinks.alerting.freshness import store as staleness
from sinks.alerting.hosts import skew
from sinks.alerting.hosts import store as hoststore
from sinks.alerting.silences import store as silencestore
from sinks.alerting.slo import store as slostore
from fleetwatch.store import db, schema

log = logging.getLogger(__name__)


class Transaction:
    """One transaction of ``sink`` (an :class:`sinks.alerting.sink.AlertingSink`) on
    ``conn`` at ``now``: its counts, and how many alerts it enqueued (``enqueued``)."""

    def __init__(self, sink, conn, now: float):
        self.sink, self.conn, self.now = sink, conn, now
        self.config, self.tz, self.started_at = sink.config, sink.tz, sink.started_at
        self.counts: Counter = Counter()
        self.enqueued = 0
        #: the holds noted, ``(reason, by, event)``: the sink's ``on_hold`` after the commit
        self.holds: list[tuple[str, object, dict]] = []
        #: what the transaction's work answered (the sink's :meth:`_transaction`)
        self.result = None
        self._silences = None
        self._downtimes = None
        self._parents: Parents | None = None

    # ---------------------------------------------------------------- the registry's
    def hostnames(self, uuids):
        return self.sink.lookups.hostnames(self.conn, uuids)

    def hostname(self, uuid: str) -> str | None:
        return self.sink.lookups.hostnames(self.conn, [uuid]).get(uuid)

    def ephemeral(self, uuids):
        return self.sink.lookups.ephemeral(self.conn, uuids)

    def max_attempts(self, keys):
        attempts = self.sink.lookups.max_attempts(self.conn, keys)
        series = getattr(self.sink, "series", None)
        if series is not None:              # a rule's check: the rule's own
            for key in attempts:
                if key[1] in series.attempts:
                    attempts[key] = series.attempts[key[1]]
        alerts = getattr(self.sink, "prometheus", None)
        if alerts is not None:              # a Prometheus alert's: the section's
            for key in attempts:
                if key[1].startswith(PROM):
                    attempts[key] = alerts.attempts
        return attempts

    # ---------------------------------------------------------------- state rows
    def lock_checks(self, keys):
        return checkstore.lock_checks(self.conn, keys, self.now, self.sink.known_checks)

    def save_checks(self, changed) -> None:
        checkstore.save_checks(self.conn, changed, self.now)

    def forget_checks(self, keys) -> None:
        self.sink.known_checks.difference_update(keys)

    def lock_hosts(self, keys):
        return hoststore.lock_hosts(self.conn, keys, self.now, self.sink.known_hosts)

    def save_hosts(self, changed) -> None:
        hoststore.save_hosts(self.conn, changed, self.now)

    def due_hosts(self):
        return hoststore.due_hosts(self.conn, self.now)

    def agents(self, uuids):
        return staleness.hosts(self.conn, uuids)

    # ---------------------------------------------------------------- what a batch records
    def record_notifications(self, rows: list[dict]) -> set:
        return db.insert_fresh(self.conn, schema.notifications, rows)

    def record_results(self, rows: list[dict]) -> int:
        return db.record_checks(self.conn, rows)

    def count_slos(self, applied) -> None:
        if applied:
            self.counts["slo_buckets"] += slostore.count(self, applied)

    def heard(self, keys) -> None:
        staleness.heard(self.conn, keys, self.now)

    def latest_outputs(self, keys):
        return checkstore.latest_outputs(self.conn, keys)

    def record_skews(self, skews) -> None:
        skew.record(self.conn, self.sink.skews, skews)

    # ---------------------------------------------------------------- what holds alerts back
    def silences(self):
        if self._silences is None:
            self._silences = silencestore.active_silences(self.conn, self.now)
        return self._silences

    def downtimes(self):
        if self._downtimes is None:
            self._downtimes = downtimestore.current(self.conn, self.now)
        return self._downtimes

    def ancestors(self, hostname: str) -> set[str]:
        return self.sink.ancestors(self.conn, hostname)

    def acks(self, keys):
        return ackstore.of_checks(self.conn, keys)

    def end_ack(self, ack, reason: str) -> None:
        ackstore.end(self.conn, ack.id, self.now, reason)
        log.info("acknowledgement %d of %s ended: %s", ack.id, ack.key, reason)

    def graph(self):
        sink = self.sink
        return sink.topology.graph(self.conn, self.config.dependencies, sink.throttle)

    def _parents_read(self) -> Parents:
        if self._parents is None:
            self._parents = Parents(self, self.graph())
        return self._parents

    def check_parent(self, key) -> str | None:
        return self._parents_read().check_blocker(key)

    def host_parent(self, uuid: str, deadline: float, timeout: float):
        return self._parents_read().judge_host(uuid, deadline, timeout)

    # ---------------------------------------------------------------- alerts out
    def deliver(self, event: dict, check: str | None, since: float | None = None,
                rules=None) -> bool:
        return holds.deliver(self, event, check, since, rules)

    def number(self, event: dict) -> None:
        escalation.told(self, event)

    def enqueue(self, events: list[dict], rules) -> None:
        """``events`` through the sink's enqueue: the outbox's in a few statements on the
        driver's cursor whatever their number (:func:`sinks.alerting.delivery.store.
        enqueue_all`: one NOTIFY a batch is the common case, bench/notify_cpu.py), a test's
        own one event at a time."""
        enqueue = self.sink._enqueue
        if enqueue is outbox.enqueue:
            outbox.enqueue_all(self.conn, events, rules)
        else:
            for event in events:
                enqueue(self.conn, event, rules)
        self.enqueued += len(events)

    def record_held(self, reason: str, by, event: dict) -> None:
        if reason == holds.SILENCED:
            silencestore.record_suppressed(self.conn, by, event)
        else:
            downtimestore.record_held(self.conn, by, event)

    def note_hold(self, reason: str, by, event: dict) -> None:
        self.holds.append((reason, by, event))

    def warning(self, key: str, message: str, *args) -> None:
        self.sink.throttle.warning(key, message, *args)
