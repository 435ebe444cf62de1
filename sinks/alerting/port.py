"""What one transaction of an alerting sink lets its parts do: the twin of router/port.py.

The concepts' stores (acknowledgements, departures, downtimes, freshness, dependencies,
escalation) act on one transaction only through a :class:`Port`: its connection, clock and
counters, what the registry knows, the state rows it locks, and the way out for an alert
(:meth:`Port.deliver`, which asks :func:`sinks.alerting.holds.held_back` first). The
evaluation (:class:`sinks.alerting.evaluation.Evaluation`: results, notifications,
heartbeats, silent hosts) never touches the connection: it acts through an
:class:`EvaluationPort`, which also records a batch (notifications, results, skews) and
answers what holds an alert back (silences, downtimes, acknowledgements, parents). The sink
gives each transaction a :class:`sinks.alerting.transaction.Transaction`, the adapter over
its database and its caches; unit tests give the evaluation a recording fake
(tests/support/alertport.py). So the imports point one way: the sink imports the
transaction, the evaluation and the stores; they import this module and never the sink,
nor the evaluation.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import tzinfo
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sinks.alerting.acks.rules import Ack
    from sinks.alerting.checks.rules import CheckState
    from sinks.alerting.config import AlertingConfig
    from sinks.alerting.dependencies.rules import Graph
    from sinks.alerting.downtimes.rules import Downtime
    from sinks.alerting.freshness.rules import Host
    from sinks.alerting.hosts.rules import HostState
    from sinks.alerting.silences.rules import Silence

Key = tuple[str, str]       # a check's (uuid, plugin), a host's (uuid, name)


class Port(Protocol):
    """One transaction, as a concept's store sees it: read once per transaction where it
    says so, written in it."""

    #: the transaction's connection: a concept's store reads and writes its own tables
    #: through it (the evaluation never touches it)
    conn: Any
    #: the sink's clock, read once per transaction
    now: float
    #: this transaction's counts, added to the sink's counters once it committed
    counts: Counter
    config: AlertingConfig
    #: the time zone of recurring downtimes' wall-clock windows
    tz: tzinfo
    #: when the sink started (heartbeats and results may be on their way to a new sink)
    started_at: float | None

    def hostnames(self, uuids: Iterable[str]) -> dict[str, str | None]:
        """The registry's hostname of each uuid (None: not known yet)."""

    def hostname(self, uuid: str) -> str | None:
        """:meth:`hostnames` of one."""

    def lock_checks(self, keys: Iterable[Key]) -> dict[Key, CheckState]:
        """Each check's state, locked for this transaction (the initial state if new)."""

    def lock_hosts(self, keys: Iterable[Key]) -> dict[Key, HostState | None]:
        """Each host's state, locked; None for one never heard (nor GONE)."""

    def save_hosts(self, changed: dict[Key, tuple[HostState, float]]) -> None:
        """Write back ``(state, deadline)`` per host."""

    def forget_checks(self, keys: Iterable[Key]) -> None:
        """The rows of ``keys`` were deleted (their agent left)."""

    def downtimes(self) -> list[Downtime]:
        """The downtimes that may cover a subject now (read once)."""

    def ancestors(self, hostname: str) -> set[str]:
        """The hosts ``hostname`` depends on, however far."""

    def graph(self) -> Graph:
        """The dependency graph (the config's rules and the agents' declarations)."""

    def deliver(self, event: dict, check: str | None, since: float | None = None,
                rules=None) -> bool:
        """Enqueue ``event`` unless it is held back (:func:`sinks.alerting.holds.deliver`);
        whether it was."""

    def warning(self, key: str, message: str, *args) -> None:
        """Log a warning, at most once a while per ``key``."""


class EvaluationPort(Port, Protocol):
    """A :class:`Port` that also records a batch, and answers what holds an alert back:
    what the evaluation (and :mod:`sinks.alerting.holds`) acts on."""

    # ---------------------------------------------------------------- the registry's
    def ephemeral(self, uuids: Iterable[str]) -> set[str]:
        """Those of ``uuids`` whose agent said ``ephemeral: true``."""

    def max_attempts(self, keys: Iterable[Key]) -> dict[Key, int | None]:
        """Each check's declared ``max_check_attempts`` (None: the config's)."""

    # ---------------------------------------------------------------- state rows
    def save_checks(self, changed: dict[Key, tuple[CheckState, int]]) -> None:
        """Write back ``(state, max_attempts)`` per check."""

    def due_hosts(self) -> list[Key]:
        """Hosts past their deadline while UP, and hosts owed an alert."""

    def agents(self, uuids: Iterable[str]) -> dict[str, Host]:
        """The agents' own heartbeat state, as the freshness rule sees it."""

    # ---------------------------------------------------------------- what a batch records
    def record_notifications(self, rows: list[dict]) -> set:
        """Insert the ``notifications`` rows; the msg_ids that were new."""

    def record_results(self, rows: list[dict]) -> int:
        """Store each check's newest result (``checks``); how many were newer."""

    def count_slos(self, applied: list) -> None:
        """The SLOs' events of the results just applied: ``(key, hostname or None, the
        state before, the state after, the row or None)`` each
        (:func:`sinks.alerting.slo.store.count`)."""

    def heard(self, keys: Iterable[Key]) -> None:
        """Each check of ``keys`` got a result now: not stale."""

    def latest_outputs(self, keys: list[Key]) -> dict[Key, tuple[str, str]]:
        """(output, long_output) of each check's latest result."""

    def record_skews(self, skews: dict[str, int | None]) -> None:
        """The agents' clock skews (None: within the setting), written where they changed."""

    # ---------------------------------------------------------------- what holds alerts back
    def silences(self) -> list[Silence]:
        """The active silences (read once)."""

    def acks(self, keys: Iterable[Key]) -> dict[Key, Ack]:
        """The acknowledgements not ended of checks ``keys``, by check."""

    def end_ack(self, ack: Ack, reason: str) -> None:
        """End acknowledgement ``ack`` now, for ``reason``."""

    def check_parent(self, key: Key) -> str | None:
        """The parent holding check ``key``'s problem alerts back, or None."""

    def host_parent(self, uuid: str, deadline: float,
                    timeout: float) -> tuple[str, str] | None:
        """What holds agent ``uuid``, silent past ``deadline``: ``(parent, reason)``."""

    # ---------------------------------------------------------------- alerts out
    def number(self, event: dict) -> None:
        """``event`` is about to be enqueued: a problem's trigger gets its number."""

    def enqueue(self, events: list[dict], rules) -> None:
        """Record ``events`` in the outbox, routed by ``rules``, in this transaction."""

    def record_held(self, reason: str, by, event: dict) -> None:
        """Record that a silence or a downtime (``by``, :mod:`sinks.alerting.holds`'s
        ``reason``) kept ``event`` back."""

    def note_hold(self, reason: str, by, event: dict) -> None:
        """``event`` was held back by ``by`` for ``reason`` (:mod:`sinks.alerting.holds`'
        words): every hold, whatever held it (an acknowledgement, a parent, a silence, a
        downtime); told to the sink's ``on_hold`` once the transaction committed."""
