"""The alerts Prometheus posted to the console, judged in an alerting sink's tick.

Every ``alerting.prometheus_alerts.interval`` seconds the sink runs :meth:`PrometheusAlerts.
judge` in one transaction, whose rows the sink's evaluation takes
(:meth:`sinks.alerting.evaluation.Evaluation.results`, as a RESULT's: SOFT/HARD,
acknowledgements, downtimes, parents, escalation, grouping, channels), as the rules on series
do (:mod:`sinks.alerting.series.runner`):

1. the alerts held (``prometheus_alerts``, written by the console: web/alertmanager.py) and
   the registry's agents: each alert is a check of a host (:mod:`sinks.alerting.external.
   naming`), or of none: no agent has the name its labels give (``no agent named X``), it
   names no host (``no host label``), or its host has ``max_per_host`` checks from alerts
   that started before it (``over max_per_host``). Those are counted and kept: an agent
   that registers later gets them at the next pass. What each alert became is written on
   its row (``uuid``, ``plugin``, ``refused``) where it changed, for the console's list;
2. a check some alert fires (its ``ends_at`` after the pass's slot) gets a result at every
   pass, with the worst status of its alerts and that alert's output: attempts and
   reminders go on while it fires;
3. a ``prom:`` check not OK in ``check_state`` that no alert fires any more (Prometheus sent
   an ``endsAt`` now past, or stopped sending and the one it gave passed, or the alert was
   deleted) gets one OK result.

Every result's time is the pass's slot (``floor(now / interval) * interval``, the same on
every sink), and an alert is judged firing or not at that slot, not at the sink's ``now``:
two sinks that judge one slot write the same rows, and the state machine applies the first
and ignores the same slot again, so each transition is told once.
"""

from __future__ import annotations

import logging
import math
from collections import Counter

from sqlalchemy import and_, func, select, update

from fleetwatch.display import escape, iso
from fleetwatch.store import schema
from sinks.alerting.checks.rules import OK
from sinks.alerting.external import naming
from sinks.alerting.external.naming import PREFIX, Hosts
from sinks.alerting.rows import judged_row
from sinks.alerting.series.runner import registered

log = logging.getLogger(__name__)

#: what identifies these results (the ``checks`` row's ``router`` column; ``status`` shows it
#: as the check's source)
SOURCE = "prometheus"


class PrometheusAlerts:
    """The pass of one alerting sink (``config``: its :class:`sinks.alerting.config.
    AlertingConfig`)."""

    def __init__(self, config):
        self.config = config.prometheus_alerts
        self.next_at = 0.0
        #: what the last pass found (the sink shows them as its counters)
        self.counts: Counter = Counter()
        #: the last pass found no alert and left no check to resolve: the next reads no
        #: more than whether the table is still empty
        self.quiet = False
        #: the alerts the last pass made no check of: fingerprint -> why (logged when new)
        self.refused: dict[str, str] = {}

    def reconfigure(self, config) -> None:
        self.config = config.prometheus_alerts
        self.next_at = 0.0

    @property
    def attempts(self) -> int:
        return self.config.max_check_attempts

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def judge(self, port) -> list[dict]:
        """One pass in the transaction of ``port``: the rows to submit."""
        config = self.config
        slot = math.floor(port.now / config.interval) * config.interval
        self.next_at = slot + config.interval
        t = schema.prometheus_alerts
        if self.quiet and not port.conn.execute(select(func.count()).select_from(t)).scalar():
            return []
        hosts = Hosts({uuid: host.hostname for uuid, host in registered(port.conn).items()})
        alerts = port.conn.execute(select(
            t.c.fingerprint, t.c.labels, t.c.annotations, t.c.starts_at, t.c.ends_at,
            t.c.generator_url, t.c.uuid, t.c.plugin, t.c.refused)
            .order_by(t.c.starts_at, t.c.fingerprint)).all()
        made, firing, counts = self._sort(alerts, hosts, slot)
        rows = []
        for (uuid, plugin), (status, alert) in sorted(firing.items()):
            output, long_output = naming.outputs(alert.labels, alert.annotations,
                                                 alert.generator_url)
            rows.append(judged_row(uuid, plugin, status, output, slot, SOURCE, "prom",
                                   long_output))
        ended = {made[a.fingerprint][:2]: a for a in alerts
                 if made[a.fingerprint][1] is not None and a.ends_at <= slot}
        for key in self._open(port.conn):
            if key not in firing:
                rows.append(judged_row(key[0], key[1], OK, _resolved(ended.get(key)), slot,
                                       SOURCE, "prom"))
        self._note(port.conn, alerts, made, slot)
        self.counts, self.quiet = counts, not alerts and not rows
        port.counts["prom_alert_results"] += len(rows)
        return rows

    def _sort(self, alerts, hosts: Hosts, slot: float):
        """What each alert is (``made``: fingerprint -> (uuid, check, None), or (None, None,
        why not)); each check some alert fires at ``slot`` -> (the worst status, its
        alert); the counts. A host's checks past ``max_per_host`` are those of the alerts
        that started last (``alerts`` come the earliest first)."""
        config = self.config
        counts: Counter = Counter(held=len(alerts))
        made = {}
        per_host: dict[str, set[str]] = {}
        firing: dict[tuple[str, str], tuple] = {}
        for alert in alerts:
            uuid, plugin, refused = self._place(alert, hosts)
            if uuid is not None:
                checks = per_host.setdefault(uuid, set())
                if plugin not in checks and len(checks) >= config.max_per_host:
                    uuid, plugin, refused = None, None, \
                        f"over max_per_host ({config.max_per_host}) on {plugin}"[:255]
                else:
                    checks.add(plugin)
            made[alert.fingerprint] = (uuid, plugin, refused)
            if refused is not None:
                counts["over_host_limit" if refused.startswith("over") else
                       "unknown_host"] += 1
            elif alert.ends_at <= slot:
                counts["resolved"] += 1
            else:
                counts["firing"] += 1
                status = naming.status_of(alert.labels, config.default)
                worst = firing.get((uuid, plugin))
                if worst is None or _rank(status) > _rank(worst[0]):
                    firing[(uuid, plugin)] = (status, alert)
        refused = {f: why for f, (_, _, why) in made.items() if why is not None}
        new = sorted(set(refused.values()) - set(self.refused.values()))
        if new:
            log.warning("%d alert(s) from Prometheus are no check: %s (the console's "
                        "/api/v1/prometheus/alerts lists them)", len(refused),
                        "; ".join(new[:3]) + ("..." if len(new) > 3 else ""))
        self.refused = refused
        return made, firing, counts

    def _place(self, alert, hosts: Hosts) -> tuple[str | None, str | None, str | None]:
        """(uuid, check, None) of the host and check ``alert`` is, else (None, None, why)."""
        config = self.config
        found = naming.host_of(alert.labels, config.host_labels)
        if found is None:
            return None, None, "no host label (" + ", ".join(config.host_labels)[:200] + ")"
        uuid = hosts.find(found[1])
        if uuid is None:
            return None, None, f"no agent named {escape(found[1])}"[:255]
        return uuid, naming.check_of(alert.labels, config.host_labels,
                                     config.ignore_labels), None

    def _open(self, conn) -> list[tuple[str, str]]:
        """The ``prom:`` checks that are not OK."""
        s = schema.check_state
        return [(r.uuid, r.plugin) for r in conn.execute(
            select(s.c.uuid, s.c.plugin).where(and_(
                func.substr(s.c.plugin, 1, len(PREFIX)) == PREFIX, s.c.status != OK)))]

    def _note(self, conn, alerts, made: dict, slot: float) -> None:
        """What each alert became, written where it changed."""
        t = schema.prometheus_alerts
        for alert in sorted(alerts, key=lambda a: a.fingerprint):   # (the console's order)
            uuid, plugin, refused = made[alert.fingerprint]
            if (alert.uuid, alert.plugin, alert.refused) != (uuid, plugin, refused):
                conn.execute(update(t).where(t.c.fingerprint == alert.fingerprint)
                             .values(uuid=uuid, plugin=plugin, refused=refused, judged=slot))


def _rank(status: int) -> int:
    """How bad a status is: CRITICAL, then UNKNOWN, then WARNING."""
    return {2: 3, 3: 2, 1: 1}.get(status, 0)


def _resolved(alert) -> str:
    if alert is None:
        return "resolved: the alert is no longer held (resolved long ago, or its labels " \
               "no longer name this host)"
    summary = naming.outputs(alert.labels, alert.annotations, alert.generator_url)[0]
    return f"resolved at {iso(alert.ends_at)}: {summary}"[:1024]
