"""A sink's configuration file (``sink-TYPE.yaml``): the settings every sink type shares, and
one section per sink type, each defined in its own package (``graphite:`` in
:mod:`sinks.graphite.config`, ``alerting:`` in :mod:`sinks.alerting.config`, ``history:`` in
:mod:`sinks.history.config`, ``prometheus:`` in :mod:`sinks.prometheus.config`,
``remote_write:`` in :mod:`sinks.remote_write.config`). A sink type reads its own section;
the others accept and ignore theirs."""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch import sinktypes
from fleetwatch.config import DEFAULT_STATE_URL, setting
from fleetwatch.security import ClientSecurity
from sinks.alerting.config import AlertingConfig
from sinks.graphite.config import GraphiteSettings
from sinks.history.config import HistorySinkSettings
from sinks.prometheus.config import PrometheusSettings
from sinks.remote_write.config import RemoteWriteSettings


@dataclass(frozen=True)
class SinkConfig:
    type: str = setting("", f"sink type ({', '.join(sinktypes.NAMES)}); the command line "
                            "TYPE wins")
    routers: list[str] = setting(factory=list, help="control endpoints of every router, e.g. tcp://r1:5556")
    name: str = setting("", "this sink's name in logs and counters (default TYPE@HOST)")
    state_url: str = setting(DEFAULT_STATE_URL, "SQLAlchemy URL of the state database")
    batch: int = setting(500, "messages written per transaction at most")
    batch_wait: float = setting(
        0.05, "seconds a write waits for more messages to fill its batch: fewer, larger "
              "transactions under load, at most this much added delay; a batch holding a "
              "message the sink ACKs (NOTIFY, REGISTER) is written at once; 0: write what "
              "is there")
    dedupe_window: int = setting(100000, "recent msg_ids remembered to drop duplicates")
    hello_interval: float = setting(1.0, "seconds between HELLOs to a router not yet answering")
    stats_interval: float = setting(10.0, "seconds between the sink's own counter reports in logs")
    security: ClientSecurity = setting(factory=ClientSecurity, help="CURVE keys")
    graphite: GraphiteSettings = setting(factory=GraphiteSettings,
                                         help="carbon and metric paths (graphite sink only)")
    alerting: AlertingConfig = setting(factory=AlertingConfig,
                                       help="check states, silent hosts, delivery (alerting sink only)")
    history: HistorySinkSettings = setting(factory=HistorySinkSettings,
                                           help="the lake and landing file rotation (history sink only)")
    prometheus: PrometheusSettings = setting(
        factory=PrometheusSettings,
        help="the scrape endpoint and the series kept (prometheus sink only)")
    remote_write: RemoteWriteSettings = setting(
        factory=RemoteWriteSettings,
        help="the receiver, the queue and the senders (remote_write sink only)")
    log_level: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR")

    def validate(self):
        if not self.routers:
            raise ValueError("routers: expected at least one router control endpoint")
        from fleetwatch.protocol import ID_PATTERN
        if self.name and not ID_PATTERN.fullmatch(self.name):
            raise ValueError("name: expected 1 to 64 letters, digits or ._:@- "
                             "(starting with a letter or digit)")
        if self.batch < 1:
            raise ValueError("batch: expected at least 1")
        if not 0 <= self.batch_wait <= 5:
            raise ValueError("batch_wait: expected 0 to 5 seconds")
