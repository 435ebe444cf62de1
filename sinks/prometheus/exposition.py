"""Serving the prometheus sink's table for scrapes, with prometheus_client.

:class:`TableCollector` is a custom collector over :class:`sinks.prometheus.table.
SeriesTable`: at each scrape it takes the table's snapshot and yields one metric family per
name, typed and described by :mod:`sinks.prometheus.catalogue` (``gauge`` for checks and the
levels fleetwatch's parts report, ``counter`` for their counters, served as ``NAME_total``; for
a name fleetwatch does not know, the type its labelled series declared
(:attr:`sinks.prometheus.names.Namer.kinds`), else ``unknown``), without the stale series (a
labelled series' own labels after ``host`` and ``instance``), then the sink's own counters
(``PREFIX prometheus_sink_COUNTER``, counters, and ``PREFIX prometheus_sink_series``, a gauge;
the series refused per host, ``PREFIX prometheus_sink_dropped_by_host`` labelled ``host``).
prometheus_client's WSGI exposition answers OpenMetrics when the scraper asks for it
(Prometheus does) and the text format otherwise, gzipped when accepted. :class:`MetricsServer`
runs it in prometheus_client's threaded HTTP server (one daemon thread, a thread per request):
the sink's loop never serves.
"""

from __future__ import annotations

import logging
import threading

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

from sinks.prometheus.catalogue import kind
from sinks.prometheus.names import OWN, label_value, labels_of

log = logging.getLogger(__name__)

#: the help of a family its labelled series (OTLP points the agents took) typed
DECLARED = {
    "counter": "the OpenTelemetry counter {0} (cumulative), from the agents' OTLP intake",
    "gauge": "the OpenTelemetry gauge {0}, from the agents' OTLP intake",
    "unknown": "a part of the OpenTelemetry histogram or summary {0} (cumulative: rate() "
               "applies), from the agents' OTLP intake",
}


def served(names: tuple[str, ...], labels: tuple) -> dict[str, str]:
    """A series' labels by name: ``names`` for its values, then a labelled series' own
    pairs (the last item of ``labels`` when it holds one more than ``names``)."""
    if len(labels) == len(names):
        return dict(zip(names, labels))
    return {**dict(zip(names, labels)), **dict(labels[-1])}



class TableCollector:
    """A prometheus_client collector over a series table and the sink's own counters.

    ``own()`` returns the sink's counters (a mapping name -> number) and ``instance`` labels
    them; ``by_host()`` the (host, series refused) of the hosts most refused. One scrape
    builds at a time (:attr:`busy`): a crowd of scrapers waits rather than copying the
    table at once."""

    def __init__(self, table, prefix: str, instance: str, own=dict, by_host=list,
                 declared: dict | None = None):
        self.table, self.prefix, self.instance, self.own = table, prefix, instance, own
        self.by_host = by_host
        #: family -> the type its labelled series declared (the namer's, read here)
        self.declared = {} if declared is None else declared
        self.busy = threading.Lock()
        self.scrapes = 0

    def describe(self):
        return []           # no families known in advance: never collected at registration

    def collect(self):
        with self.busy:
            self.scrapes += 1
            families, oldest = self.table.snapshot()
            prefix = self.prefix
            for family in sorted(families):
                names = labels_of(family, prefix)
                type_, help_ = self.kind(family)
                metric = Metric(family, help_, type_)
                sample = family + "_total" if type_ == "counter" else family
                metric.samples = [Sample(sample, served(names, labels), value)
                                  for labels, (value, when) in families[family].items()
                                  if when >= oldest]
                if metric.samples:
                    yield metric
            yield from self._own()

    def kind(self, family: str) -> tuple[str, str]:
        """(type, help) of a family: the catalogue's for fleetwatch's own names, else the
        type its labelled series declared, else ``unknown``."""
        name = family[len(self.prefix):]
        type_, help_ = kind(name)
        declared = self.declared.get(family) if type_ == "unknown" else None
        if declared is not None:
            whole = name.rsplit("_", 1)[0] if declared == "unknown" else name
            type_, help_ = declared, DECLARED[declared].format(whole)
        return type_, help_

    def _own(self):
        labels = {"instance": self.instance}
        for name, value in sorted(dict(self.own()).items()):
            family = f"{self.prefix}{OWN}{name}"
            if name == "series":
                metric = Metric(family, "series in the prometheus sink's table", "gauge")
                metric.samples = [Sample(family, labels, value)]
            else:
                metric = Metric(family, f"the prometheus sink's {name} counter", "counter")
                metric.samples = [Sample(family + "_total", labels, value)]
            yield metric
        family = f"{self.prefix}{OWN}dropped_by_host"
        metric = Metric(family, "new series dropped for a host that had its "
                                "max_series_per_host (the most refused hosts)", "counter")
        metric.samples = [Sample(family + "_total", {**labels, "host": label_value(host) or ""},
                                 n) for host, n in self.by_host()]
        if metric.samples:
            yield metric


class MetricsServer:
    """``/metrics`` (any path answers) of a registry on ``host:port`` in its own thread."""

    def __init__(self, collector: TableCollector, host: str, port: int):
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        self.host, self.port = host, port
        self.httpd = None
        self.thread = None

    @property
    def address(self) -> tuple[str, int]:
        """The bound (host, port): the port the system chose for port 0."""
        return self.httpd.server_address[:2] if self.httpd else (self.host, self.port)

    def url(self) -> str:
        host, port = self.address
        return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"

    def start(self) -> None:
        """Bind and serve (OSError when the address is taken or not this machine's)."""
        self.httpd, self.thread = start_http_server(self.port, self.host, self.registry)

    def stop(self) -> None:
        if self.httpd is not None:
            self.httpd.shutdown()
            self.httpd.server_close()
            self.thread.join(5)
            self.httpd = None
