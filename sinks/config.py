"""A sink's configuration file (``sink-TYPE.yaml``)."""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.config import DEFAULT_STATE_URL, setting
from fleetwatch.security import ClientSecurity
from sinks.alerting.config import AlertingConfig
from sinks.history.config import HistorySinkSettings


@dataclass(frozen=True)
class GraphiteSettings:
    """The ``graphite:`` section: where carbon listens and how the graphite sink names and
    buffers datapoints (README "Metrics in Graphite", SPEC 4.7)."""

    host: str = setting("127.0.0.1", "carbon's plaintext (line) receiver host")
    port: int = setting(2003, "carbon's plaintext (line) receiver port")
    prefix: str = setting("fleet", "first node(s) of every path (fleet, dc1.fleet); '' for none")
    tags: bool = setting(False, "send Graphite tagged series (name;host=...) instead of host paths")
    buffer: int = setting(100000, "datapoints kept while carbon is slow or down (oldest "
                                  "dropped, counted)")
    batch: int = setting(5000, "datapoints per connection to carbon at most")
    flush_interval: float = setting(1.0, "seconds to wait for a full batch before sending "
                                         "a partial one")
    timeout: float = setting(10.0, "seconds for carbon to accept and read one batch")
    reconnect_min: float = setting(0.5, "first wait after carbon failed, doubling up to "
                                        "reconnect_max")
    reconnect_max: float = setting(30.0, "longest wait between attempts while carbon is down")
    flush_at_exit: float = setting(5.0, "seconds spent sending the buffer when the sink stops")

    def validate(self):
        import re
        if not self.host:
            raise ValueError("host: expected a host name or address")
        if not 0 < self.port < 65536:
            raise ValueError("port: expected 1 to 65535")
        if self.prefix and not re.fullmatch(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*", self.prefix):
            raise ValueError("prefix: expected dot-separated nodes of letters, digits, _ or -")
        if self.buffer < 1 or self.batch < 1:
            raise ValueError("buffer: buffer and batch must be at least 1")
        if min(self.flush_interval, self.timeout, self.reconnect_min) <= 0:
            raise ValueError("flush_interval: flush_interval, timeout and reconnect_min "
                             "must be positive")
        if self.reconnect_max < self.reconnect_min:
            raise ValueError("reconnect_max: expected at least reconnect_min")
        if self.flush_at_exit < 0:
            raise ValueError("flush_at_exit: expected 0 or more seconds")


@dataclass(frozen=True)
class SinkConfig:
    type: str = setting("", "sink type (registry, alerting, graphite, history); the command line TYPE wins")
    routers: list[str] = setting(factory=list, help="control endpoints of every router, e.g. tcp://r1:5556")
    name: str = setting("", "this sink's name in logs and counters (default TYPE@HOST)")
    state_url: str = setting(DEFAULT_STATE_URL, "SQLAlchemy URL of the state database")
    batch: int = setting(500, "messages written per transaction at most")
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
