"""SLOs judged by an alerting sink on a fake clock, for the SLO tests: :class:`Slos` hands
its transactions' ports to :func:`sinks.alerting.slo.store.count` and
:func:`~sinks.alerting.slo.store.tick` directly, as the sink's results and tick do, keeping
each check's state as the state machine would; :func:`fill` makes a state database the
console's SLO page and the API read (an SLO paging for one host, one with no events)."""

from __future__ import annotations

from sqlalchemy import select

from fleetwatch.store import db, schema
from sinks.alerting.checks.rules import CRITICAL, OK, CheckState
from sinks.alerting.config import AlertingConfig
from sinks.alerting.sink import AlertingSink
from sinks.alerting.slo import store
from sinks.alerting.slo.config import parse
from sinks.alerting.transaction import Transaction
from support.alertsink import hello

#: a minute's start
T0 = 1_700_000_040.0
WEB, DB = "a1" * 16, "b2" * 16


class Slos:
    """An alerting sink on a fake clock (``now``) over ``url``, hosts web-1 (or
    ``hostname``) and db-1 registered, judging ``items`` (``alerting.slos`` items)."""

    def __init__(self, url: str, items: list, now: float = T0, hostname: str = "web-1"):
        self.url, self.now = url, now
        self.slos = parse(items)
        hello(url, {WEB: hostname, DB: "db-1"}, clock=lambda: self.now)
        self.sink = AlertingSink(db.engine(url), lambda: self.now, AlertingConfig(),
                                 deliver=False)
        self.sink.start()
        self.states: dict = {}

    def run(self, work, sink: AlertingSink | None = None) -> Transaction:
        """``work(port)`` in one transaction of ``sink`` (this one's): the port."""
        sink = sink or self.sink
        with sink.transaction() as conn:
            port = Transaction(sink, conn, self.now)
            port.result = work(port)
        return port

    def results(self, *results: tuple) -> Transaction:
        """Applied results now, each ``(status, plugin, uuid)`` (``at``: now)."""
        applied = []
        for status, plugin, uuid in results:
            before = self.states.get((uuid, plugin), CheckState())
            after = CheckState(status=status, last_result=self.now)
            self.states[(uuid, plugin)] = after
            applied.append(((uuid, plugin), None, before, after, {"status": status}))
        return self.run(lambda port: store.count(port, applied, self.slos))

    def result(self, status: int, plugin: str = "http", uuid: str = WEB,
               at: float | None = None) -> Transaction:
        """One applied result of ``plugin`` on ``uuid``, now (or ``at``)."""
        key = (uuid, plugin)
        before = self.states.get(key, CheckState())
        after = CheckState(status=status, last_result=self.now if at is None else at)
        self.states[key] = after
        return self.run(lambda port: store.count(port, [(key, None, before, after,
                                                         {"status": status})], self.slos))

    def tick(self, sink: AlertingSink | None = None) -> Transaction:
        return self.run(lambda port: store.tick(port, self.slos), sink)

    def every(self, seconds: float, until: float, status: int, **kw) -> list[dict]:
        """A result every ``seconds`` and a tick, until ``until``: the alerts told."""
        told = []
        while self.now + seconds <= until:
            self.now += seconds
            self.result(status, **kw)
            before = len(self.events())
            self.tick()
            told += self.events()[before:]
        return told

    def rows(self, table) -> list[dict]:
        with self.sink.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(select(table))]

    def buckets(self) -> dict:
        """(slo, uuid, width, start) -> (good, bad, excluded) of every bucket."""
        return {(r["slo"], r["uuid"], r["width"], r["start"]): (r["good"], r["bad"],
                                                                r["excluded"])
                for r in self.rows(schema.slo_buckets)}

    def events(self) -> list[dict]:
        """The SLO alerts told, oldest first."""
        return sorted((e for e in self.rows(schema.alert_events) if e["kind"] == "slo"),
                      key=lambda e: e["id"])

    def close(self) -> None:
        self.sink.close()


def alerts(events) -> list[tuple]:
    """(key, action, severity) of each alert event."""
    return [(e["key"], e["action"], e["severity"]) for e in events]


def fill(url: str, hostname: str = "web-1", checks=("http*",), now: float = T0) -> float:
    """Two SLOs over ``url``: ``http_availability`` (checks ``checks``, per host), which
    web-1 (named ``hostname``) fails after 20 good minutes and pages; ``quiet`` (rules, no
    event yet). The clock's time at the end."""
    s = Slos(url, [{"name": "http_availability", "objective": 99.9, "window": "30d",
                    "checks": list(checks), "per_host": True},
                   {"name": "quiet", "objective": 99.0, "window": "7d", "rules": "disk*",
                    "hosts": ["web*", "site:paris"], "downtime_counts_as": "excluded"}],
             now, hostname)
    for i in range(60):
        s.now += 30
        s.results((OK if i < 40 else CRITICAL, "http", WEB), (OK, "http", DB))
        s.tick()
    s.close()
    return s.now
