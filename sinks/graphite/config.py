"""The ``graphite:`` section of a sink config: where carbon listens, and how the graphite sink
names and buffers datapoints.

::

    graphite:
      host: 127.0.0.1     # carbon's plaintext (line) receiver
      port: 2003
      prefix: fleet       # first node(s) of every path; '' for none
      tags: false         # tagged series (name;host=...) instead of host paths
      buffer: 100000      # datapoints kept while carbon is slow or down
      max_names_per_host: 1000   # distinct paths a host may have; new ones beyond refused

Only the graphite sink reads it; other sink types accept and ignore it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetwatch.config import setting


@dataclass(frozen=True)
class GraphiteSettings:
    """The ``graphite:`` section: where carbon listens and how the graphite sink names and
    buffers datapoints (docs/operating/graphite.md, SPEC 4.7)."""

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
    max_names_per_host: int = setting(
        1000, "distinct metric paths (stats, checks' perfdata and status) a host may have, "
              "and a fleetwatch process for its counters; carbon makes a whisper file of "
              "each, so a new one past this is not sent, counted (names_refused, "
              "names_refused_by_host.HOST) until a path not seen for a day frees its place")

    def validate(self):
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
        if self.max_names_per_host < 1:
            raise ValueError("max_names_per_host: expected at least 1")
