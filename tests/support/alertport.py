"""A recording :class:`sinks.alerting.port.EvaluationPort`, for unit tests of the alerting
sink's evaluation (:class:`sinks.alerting.evaluation.Evaluation`) without a database.

State rows live in dicts; what holds alerts back (silences, downtimes, acknowledgements,
parents) is set by the test; every alert enqueued, every hold recorded, every
acknowledgement ended is kept. :meth:`RecordingPort.deliver` is the real one
(:func:`sinks.alerting.holds.deliver`), so the holds are judged as in a sink.
"""

from __future__ import annotations

from collections import Counter
from datetime import timezone

from sinks.alerting import holds
from sinks.alerting.checks.rules import CheckState
from sinks.alerting.config import AlertingConfig

T0 = 1_700_000_000.0
WEB = "a1" * 16


class RecordingPort:
    """One transaction in memory at ``now``: hosts named by ``hostnames`` (uuid -> name)."""

    def __init__(self, now: float = T0, config: AlertingConfig | None = None,
                 hostnames: dict[str, str] | None = None):
        self.conn = None
        self.now = now
        self.counts: Counter = Counter()
        self.config = config or AlertingConfig()
        self.tz = timezone.utc
        self.started_at = now - 3600.0
        self.names = {WEB: "web-1"} if hostnames is None else dict(hostnames)
        #: state rows: check key -> (CheckState, max_attempts); host key -> HostState
        self.checks: dict = {}
        self.hosts: dict = {}
        self.due: list = []
        #: set by the test: what holds alerts back
        self.active_silences: list = []
        self.active_downtimes: list = []
        self.acknowledged: dict = {}        # check key -> Ack
        self.parents: dict = {}             # check key -> the parent holding it
        self.host_parents: dict = {}        # uuid -> (parent, reason)
        #: what the transaction did
        self.enqueued: list[dict] = []
        self.held: list[tuple[str, object, dict]] = []
        self.noted: list[tuple[str, object, dict]] = []     # every hold (note_hold)
        self.ended: list[tuple[int, str]] = []
        self.stored: list[dict] = []
        self.heard_keys: set = set()
        self.slo_applied: list = []
        self.numbered: list[str] = []
        self.warnings: list[str] = []

    def at(self, now: float) -> RecordingPort:
        """The next transaction, ``now``: the same rows, nothing recorded yet."""
        self.now, self.counts = now, Counter()
        self.enqueued, self.held, self.ended, self.noted = [], [], [], []
        return self

    def state(self, uuid: str = WEB, plugin: str = "load") -> CheckState:
        return self.checks.get((uuid, plugin), (CheckState(), 0))[0]

    # ---------------------------------------------------------------- the registry's
    def hostnames(self, uuids):
        return {u: self.names.get(u) for u in sorted(set(uuids))}

    def hostname(self, uuid):
        return self.names.get(uuid)

    def ephemeral(self, uuids):
        return set()

    def max_attempts(self, keys):
        return {k: None for k in keys}

    # ---------------------------------------------------------------- state rows
    def lock_checks(self, keys):
        return {k: self.checks.get(k, (CheckState(), 0))[0] for k in keys}

    def save_checks(self, changed):
        self.checks.update(changed)

    def forget_checks(self, keys):
        pass

    def lock_hosts(self, keys):
        return {k: self.hosts.get(k) for k in keys}

    def save_hosts(self, changed):
        self.hosts.update({k: state for k, (state, _) in changed.items()})

    def due_hosts(self):
        return list(self.due)

    def agents(self, uuids):
        return {}

    # ---------------------------------------------------------------- what a batch records
    def record_notifications(self, rows):
        return {row["msg_id"] for row in rows}

    def record_results(self, rows):
        self.stored += rows
        return len(rows)

    def count_slos(self, applied):
        self.slo_applied.extend(applied)

    def heard(self, keys):
        self.heard_keys.update(keys)

    def latest_outputs(self, keys):
        return {}

    def record_skews(self, skews):
        pass

    # ---------------------------------------------------------------- what holds alerts back
    def silences(self):
        return self.active_silences

    def downtimes(self):
        return self.active_downtimes

    def ancestors(self, hostname):
        return set()

    def acks(self, keys):
        return {k: self.acknowledged[k] for k in keys if k in self.acknowledged}

    def end_ack(self, ack, reason):
        self.ended.append((ack.id, reason))
        self.acknowledged = {k: a for k, a in self.acknowledged.items() if a.id != ack.id}

    def graph(self):
        return None

    def check_parent(self, key):
        return self.parents.get(key)

    def host_parent(self, uuid, deadline, timeout):
        return self.host_parents.get(uuid)

    # ---------------------------------------------------------------- alerts out
    def deliver(self, event, check, since=None, rules=None):
        return holds.deliver(self, event, check, since, rules)

    def number(self, event):
        self.numbered.append(event["key"])

    def enqueue(self, events, rules):
        self.enqueued += events

    def record_held(self, reason, by, event):
        self.held.append((reason, by, event))

    def note_hold(self, reason, by, event):
        self.noted.append((reason, by, event))

    def warning(self, key, message, *args):
        self.warnings.append(message % args)
