"""The rules in an alerting sink: the engine, its tail, and its pass in the sink's tick.

The sink makes a :class:`SeriesRules` when its config has ``alerting.rules``. The tails'
STATS and RESULT reach :meth:`SeriesRules.observe` (the :class:`sinks.alerting.series.feed.
TailFeed`'s thread, under :attr:`SeriesRules.lock`; the backtest calls it directly), and the
sink's tick runs :meth:`SeriesRules.due` and, when an evaluation is due, :meth:`SeriesRules.
judge` in one transaction, whose rows the sink's evaluation takes:

1. the registry's agents (hostname, site, parents) tell the engine which rules apply to whom;
2. at the first pass, the rules' states the database holds (a problem another sink, or this
   one before a restart, told) are the engine's starting point: no false recovery;
3. the engine judges every rule; the verdicts of a host that is not UP (DOWN,
   UNREACHABLE, GONE, never heard) are held, as its checks' staleness is: its silence is
   its one alert, and its rules keep the state they had (an ``absent`` rule does not page
   for a host that is down);
4. the sink puts the rows through :meth:`sinks.alerting.evaluation.Evaluation.results`, as
   a RESULT's: SOFT/HARD, flapping, acknowledgements, downtimes, parents, escalation,
   channels; then :meth:`SeriesRules.submitted`.
"""

from __future__ import annotations

import logging
import threading

from sqlalchemy import select

from fleetwatch.store import schema
from sinks.alerting.series.config import PREFIX, Host
from sinks.alerting.series.engine import Engine

log = logging.getLogger(__name__)


class SeriesRules:
    """The rules of one alerting sink (``config``: its :class:`sinks.alerting.config.
    AlertingConfig`), started at ``now``."""

    def __init__(self, config, now: float):
        self.lock = threading.Lock()
        self.engine = Engine([spec.compiled() for spec in config.rules], started=now,
                             interval=config.rule_interval, refresh=config.rule_refresh,
                             max_series_per_host=config.rule_max_series_per_host)
        self.attempts = {spec.compiled().check: spec.max_check_attempts
                         for spec in config.rules}
        self.next_at = now
        self.loaded = False
        self.feed = None

    @property
    def counts(self):
        return self.engine.counts

    def reconfigure(self, config) -> None:
        with self.lock:
            self.engine.replace_rules([spec.compiled() for spec in config.rules])
            self.engine.interval, self.engine.refresh = config.rule_interval, \
                config.rule_refresh
        self.attempts = {spec.compiled().check: spec.max_check_attempts
                         for spec in config.rules}

    def observe(self, uuid: str, type_: str, body: dict, at: float) -> None:
        """A STATS or RESULT body of agent ``uuid`` (the stamp) from a tail (the caller
        holds :attr:`lock`)."""
        self.engine.feed(uuid, type_, body, at)

    def due(self, now: float) -> bool:
        return now >= self.next_at

    def judge(self, port) -> list[dict]:
        """One pass in the transaction of ``port``: the rows to submit."""
        now = port.now
        self.next_at = self.engine.slot(now) + self.engine.interval
        hosts = registered(port.conn)
        with self.lock:
            self.engine.hosts(hosts)
            if not self.loaded:
                for uuid, rule, status, at in told(port.conn):
                    self.engine.told(uuid, rule, status, at)
                self.loaded = True
            rows = self.engine.evaluate(now)
        rows = self._hold(port, rows)
        port.counts["rule_results"] += len(rows)
        return rows

    def submitted(self, rows: list[dict]) -> None:
        """``rows`` were committed."""
        with self.lock:
            self.engine.submitted(rows)

    def _hold(self, port, rows: list[dict]) -> list[dict]:
        """The rows less those of hosts that are not UP."""
        if not rows:
            return rows
        t = schema.host_state
        up: set[str] = set()
        uuids = sorted({r["uuid"] for r in rows})
        for i in range(0, len(uuids), 500):
            up.update(r.uuid for r in port.conn.execute(
                select(t.c.uuid).where(t.c.name == "", t.c.uuid.in_(uuids[i:i + 500]),
                                       t.c.up.is_(True), t.c.gone.is_(None))))
        kept = [r for r in rows if r["uuid"] in up]
        port.counts["rule_held_host_down"] += len(rows) - len(kept)
        return kept


def registered(conn) -> dict[str, Host]:
    """The registry's agents still registered, as a rule's selector reads them."""
    t = schema.agents
    return {r.uuid: Host.of(r) for r in conn.execute(
        select(t.c.uuid, t.c.hostname, t.c.site, t.c.parents).where(t.c.gone.is_(None)))}


def told(conn):
    """(uuid, rule name, status, at) of every rule check the database holds a state of."""
    t = schema.check_state
    for r in conn.execute(select(t.c.uuid, t.c.plugin, t.c.status, t.c.last_result)
                          .where(t.c.plugin.like(PREFIX + "%"))):
        yield r.uuid, r.plugin[len(PREFIX):], r.status, r.last_result or 0.0
