"""The ``prometheus:`` section of a sink config: where the prometheus sink serves its scrape
endpoint, how it names series and how long and how many it keeps.

::

    prometheus:
      listen: 127.0.0.1:9464   # HOST:PORT of /metrics ([::1]:9464 for IPv6; port 0: any free)
      prefix: fleetwatch_      # first characters of every metric name; '' for none
      stale_after: 300         # seconds without a new value before a series is dropped
      max_series: 1000000      # series kept at most; new ones beyond are dropped, counted
      max_series_per_host: 1000  # series kept of one host at most; likewise

Only the prometheus sink reads it; other sink types accept and ignore it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetwatch.config import setting

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HOST = re.compile(r"[A-Za-z0-9_.-]+|\[[0-9A-Fa-f:.]+\]")


def split_listen(listen: str) -> tuple[str, int]:
    """(host, port) of ``HOST:PORT`` or ``[V6]:PORT``; ValueError when it is neither."""
    host, sep, port = listen.rpartition(":")
    if not sep or not _HOST.fullmatch(host) or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"expected HOST:PORT or [IPv6]:PORT (port 0 to 65535), got "
                         f"{listen[:80]!r}")
    return host.strip("[]"), int(port)


@dataclass(frozen=True)
class PrometheusSettings:
    """The ``prometheus:`` section: the scrape endpoint and the series table of the
    prometheus sink (docs/operating/prometheus.md)."""

    listen: str = setting("127.0.0.1:9464", "HOST:PORT the scrape endpoint (/metrics) listens "
                                            "on; loopback unless told (0.0.0.0:9464: every "
                                            "interface); port 0 picks a free one (logged)")
    prefix: str = setting("fleetwatch_", "first characters of every metric name "
                                         "([A-Za-z_][A-Za-z0-9_]*, or '' for none)")
    stale_after: float = setting(300.0, "seconds without a new value after which a series is "
                                        "no longer served and is forgotten")
    max_series: int = setting(1_000_000, "series kept at most (about 150 bytes each); a new "
                                         "series beyond is dropped and counted "
                                         "(dropped_max_series) until stale ones are gone")
    max_series_per_host: int = setting(
        1000, "series kept of one host (one agent uuid, or a fleetwatch process for its "
              "counters) at most, so that one host flooding names cannot take the others' "
              "room; a new series beyond is dropped and counted (dropped_max_series_per_host,"
              " dropped_by_host.HOST) until its stale ones are gone")

    def validate(self):
        if not self.listen:
            raise ValueError("listen: expected HOST:PORT")
        try:
            split_listen(self.listen)
        except ValueError as e:
            raise ValueError(f"listen: {e}") from None
        if self.prefix and not _PREFIX.fullmatch(self.prefix):
            raise ValueError("prefix: expected letters, digits and _ (not starting with a "
                             "digit), or ''")
        if not self.stale_after > 0:
            raise ValueError("stale_after: expected a positive number of seconds")
        if self.max_series < 1:
            raise ValueError("max_series: expected at least 1")
        if self.max_series_per_host < 1:
            raise ValueError("max_series_per_host: expected at least 1")
