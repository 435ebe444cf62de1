"""The prometheus sink: the latest value of every series, served for one scrape.

It takes STATS, RESULT and HELLO (SPEC 4.1): an agent's STATS metrics and labelled series
(its ``series``: OTLP points, named by :mod:`sinks.prometheus.names`), each check's status and
perfdata, and the routers', sinks' and schedulers' own counters (their STATS, ``source``
``router``/``sink``/``scheduler``). :mod:`sinks.prometheus.names` names the series,
:mod:`sinks.prometheus.table` keeps the latest value of each (bounded, stale ones forgotten
after ``stale_after``), :mod:`sinks.prometheus.exposition` serves them on ``listen`` from its
own thread. A fleet behind NAT pushes through its routers; Prometheus scrapes this one
endpoint. Nothing is ACKed (STATS and RESULT are at most once): :meth:`write` never fails a
batch.

An agent's ``host`` label is the hostname of the stamped uuid's HELLO, never a body's claim
(:class:`sinks.hostnames.HostNames`, as the graphite sink): until the sink sees a HELLO, the
uuid's first STATS ``hostname``; a STATS naming another host is filed under the known name and
counted ``hostname_mismatch``; a RESULT of a uuid with no name known is labelled with the uuid
(counted ``result_no_host``). ``instance`` is the stamped uuid (the process id for own
counters).

Each ``instance`` has at most ``max_series_per_host`` series in the table, so one host that
floods names cannot take the room of the others (``max_series``); what it is refused is
counted ``dropped_max_series_per_host``, per host for the
:data:`fleetwatch.cardinality.REPORTED` most refused (``dropped_by_host.HOST`` in the
sink's STATS; ``PREFIX prometheus_sink_dropped_by_host_total{host}`` on the endpoint).
"""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter

from fleetwatch import protocol, sinktypes
from fleetwatch.cardinality import REPORTED, counters
from fleetwatch.logs import Throttle
from fleetwatch.protocol import Relayed
from fleetwatch.series import entries
from sinks.hostnames import HostNames
from sinks.prometheus.config import split_listen
from sinks.prometheus.exposition import MetricsServer, TableCollector
from sinks.prometheus.names import Namer, Sample
from sinks.prometheus.table import SeriesTable

log = logging.getLogger(__name__)

#: every counter this sink keeps (created at once: the scrape thread reads them)
COUNTERS = ("stats", "results", "hellos", "samples", "bad_name", "bad_metric", "bad_label",
            "perfdata_bad", "perfdata_unknown", "unit_unknown", "series_bad")
#: seconds between two sweeps of stale series at most
MAX_SWEEP = 30.0


class PrometheusSink:
    type = "prometheus"
    handles = sinktypes.BY_NAME["prometheus"].handles
    acks: frozenset[str] = frozenset()

    def __init__(self, settings, sink_id: str = "prometheus", clock=time.monotonic):
        self.settings, self.sink_id, self.clock = settings, sink_id, clock
        self.namer = Namer(settings.prefix)
        self.hosts = HostNames()
        self.table = SeriesTable(settings.max_series, settings.stale_after, clock,
                                 settings.max_series_per_host)
        self._counts: Counter = Counter({k: 0 for k in COUNTERS})
        self.collector = TableCollector(self.table, settings.prefix, sink_id, self.own,
                                        lambda: self.table.refused_hosts(REPORTED),
                                        self.namer.kinds)
        host, port = split_listen(settings.listen)
        self.server = MetricsServer(self.collector, host, port)
        #: the loop calls :meth:`tick` this often: stale series are forgotten
        self.tick_interval = min(settings.stale_after / 4, MAX_SWEEP)
        self.throttle = Throttle(log, 30.0)

    @classmethod
    def from_config(cls, config) -> "PrometheusSink":
        name = (config.name or f"prometheus@{socket.gethostname()}")[:protocol.MAX_ID]
        return cls(config.prometheus, name)

    @property
    def counts(self) -> Counter:
        """This sink's counters, the table's, ``scrapes`` and ``series`` (a gauge), and the
        series refused of the most refused hosts (``dropped_by_host.HOST``)."""
        merged = self.own()
        merged.update(counters("dropped_by_host", self.table.refused_hosts(REPORTED)))
        return merged

    def own(self) -> Counter:
        """The counters a scrape shows (read from the scrape thread; the refusals per
        host are a family of their own there)."""
        merged = Counter(dict(self._counts))
        merged.update(dict(self.hosts.counts))
        merged.update(dict(self.table.counts))
        merged["scrapes"] = self.collector.scrapes
        merged["series"] = len(self.table)
        return merged

    def start(self) -> None:
        """Serve the scrape endpoint; a taken address stops the sink (OSError: exit 69)."""
        self.server.start()
        log.info("serving %d series at most, %d a host, on %s for scrapes (stale after "
                 "%g s)", self.settings.max_series, self.settings.max_series_per_host,
                 self.server.url(), self.settings.stale_after)

    def close(self) -> None:
        self.server.stop()

    # ---------------------------------------------------------------- writing
    def write(self, batch: list[Relayed]) -> None:
        samples: list[Sample] = []
        for relayed in batch:
            samples.extend(self.samples(relayed))
        self._counts["samples"] += len(samples)
        before = self.table.counts["dropped_max_series"]
        refused = self.table.write(samples)
        if refused:
            full = self.table.counts["dropped_max_series"] - before
            if full:
                self.throttle.warning("max_series", "table full (%d series): %d new series "
                                      "dropped", self.settings.max_series, full)
            if refused > full:
                self.throttle.warning("max_series_per_host", "%d new series dropped: their "
                                      "hosts have their %d series (max_series_per_host; "
                                      "the most refused: %s)", refused - full,
                                      self.settings.max_series_per_host,
                                      ", ".join(f"{h[:64]} {n}" for h, n in
                                                self.table.refused_hosts(3)))

    def samples(self, relayed: Relayed) -> list[Sample]:
        msg, uuid = relayed.message, relayed.uuid
        if msg.type == "HELLO":
            self._counts["hellos"] += 1
            self.hosts.hello(uuid, msg.get("hostname"))
            return []
        if msg.type == "STATS":
            self._counts["stats"] += 1
            owner = self.hosts.of_stats(uuid, msg.get("hostname"))
            series = entries(msg.get("series"), self._counts)     # series_bad counted
            samples, counts = self.namer.stats(msg.get("metrics"), owner, uuid, series)
        else:
            self._counts["results"] += 1
            owner = self.hosts.of_result(uuid)
            samples, counts = self.namer.result(msg.get("plugin"), msg.get("status"),
                                                msg.get("perfdata"), owner, uuid)
        for key, n in counts.items():
            self._counts[key] += n
        return samples

    # ---------------------------------------------------------------- time
    def tick(self) -> None:
        """Forget the stale series (the loop calls this every :attr:`tick_interval`)."""
        gone = self.table.expire()
        if gone:
            log.info("forgot %d series with no value for %g s", gone,
                     self.settings.stale_after)
