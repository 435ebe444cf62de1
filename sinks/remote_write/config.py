"""The ``remote_write:`` section of a sink config: the receiver, the queue, the senders.

::

    remote_write:
      url: http://127.0.0.1:9090/api/v1/write    # Prometheus, VictoriaMetrics, Mimir, Thanos
      headers: {X-Scope-OrgID: fleet}            # sent with every request (Mimir's tenant)
      bearer_token_file: ''                      # Authorization: Bearer <the file's text>
      queue_dir: /var/lib/fleetwatch/remote-write  # spilled segments, kept across restarts
      max_memory: 33554432                       # bytes queued in memory before spilling
      max_disk: 1073741824                       # bytes spilled at most; the oldest dropped
      max_samples_per_send: 2000                 # samples per request at most
      max_shards: 4                              # concurrent requests when behind
      max_series_per_host: 1000                  # new series of a host beyond are refused
      rules_interval: 30                         # the rules' states sent this often (0: never)

Only the remote_write sink reads it; other sink types accept and ignore it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetwatch.config import setting

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: a header name as HTTP takes it (a token), and headers the sink sets itself
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
OWN_HEADERS = frozenset({"content-type", "content-encoding", "content-length", "host",
                         "x-prometheus-remote-write-version", "user-agent"})


@dataclass(frozen=True)
class RemoteWriteSettings:
    """The ``remote_write:`` section: where the remote_write sink sends the fleet's series and
    how it queues them (docs/operating/remote-write.md, SPEC 4.7.2)."""

    url: str = setting("http://127.0.0.1:9090/api/v1/write",
                       "the receiver's remote-write URL (http:// or https://): Prometheus "
                       "started with --web.enable-remote-write-receiver "
                       "(/api/v1/write), VictoriaMetrics (/api/v1/write), Mimir "
                       "(/api/v1/push), Thanos Receive (/api/v1/receive)")
    headers: dict[str, str] = setting(
        factory=dict, help="HTTP headers sent with every request (X-Scope-OrgID for a Mimir "
                           "tenant...); not those the protocol sets")
    bearer_token_file: str = setting("", "a file whose text is sent as `Authorization: "
                                         "Bearer TEXT` (read at start); '' none")
    ca_file: str = setting("", "CA certificates (PEM) to verify an https:// receiver with; "
                               "'' the system's")
    timeout: float = setting(30.0, "seconds one request may take before it counts as failed "
                                   "(and is retried)")
    prefix: str = setting("fleetwatch_", "first characters of every metric name, as the "
                                         "prometheus sink's ([A-Za-z_][A-Za-z0-9_]*, or '')")
    queue_dir: str = setting("/var/lib/fleetwatch/remote-write",
                             "where queued samples past max_memory are spilled, in segment "
                             "files kept across restarts (one sink a directory: it is locked)")
    max_memory: int = setting(32 * 1024 * 1024,
                              "bytes of encoded samples queued in memory (about 120 a "
                              "sample); beyond, the oldest are spilled to queue_dir")
    max_disk: int = setting(1024 * 1024 * 1024,
                            "bytes of segments queue_dir may hold; beyond, the oldest segment "
                            "is dropped, counted (samples_dropped_full) and reported to the "
                            "lake as drops (`fleetwatch history gaps`); 0: never spill")
    max_samples_per_send: int = setting(2000, "samples per request at most")
    batch_wait: float = setting(1.0, "seconds to wait for a full request before sending a "
                                     "partial one")
    max_shards: int = setting(4, "concurrent requests at most (each on its own connection), "
                                 "used while more than one full request waits; series are "
                                 "hashed to shards, so each series stays in order")
    min_backoff: float = setting(0.1, "first wait before retrying a request that failed "
                                      "(connection, 5xx, 429), doubling with jitter up to "
                                      "max_backoff")
    max_backoff: float = setting(10.0, "longest wait between retries (a 429's Retry-After "
                                       "is honoured, up to 300 s)")
    flush_at_exit: float = setting(5.0, "seconds spent sending the queue when the sink stops; "
                                        "what is left is written to queue_dir and sent after "
                                        "the next start")
    max_series_per_host: int = setting(
        1000, "distinct series (name and labels) a host may have, and a fleetwatch process "
              "for its counters; a sample of a new series past this is not sent, counted "
              "(series_refused, series_refused_by_host.HOST) until a series not seen for a "
              "day frees its place")
    rules_interval: float = setting(
        30.0, "seconds between two reads of the rules' latest results from the state "
              "database (the sink's state_url), each sent as PREFIXcheck_status{check="
              "\"rule:NAME\"}; 0: never (a state database that does not exist reads as none)")
    rules_max_age: float = setting(
        900.0, "a rule's result older than this many seconds is not sent (no alerting sink "
               "judged it lately: not a state to show as current); at least rules_interval. "
               "An OK rule's result is written every rule_refresh (300 s by default)")

    def validate(self):
        if not re.fullmatch(r"https?://[^\s/?#]+(/[^\s#]*)?", self.url):
            raise ValueError(f"url: expected http://HOST[:PORT]/PATH or https://..., got "
                             f"{self.url[:80]!r}")
        for name, value in self.headers.items():
            if not _TOKEN.fullmatch(name) or name.lower() in OWN_HEADERS:
                raise ValueError(f"headers: {name[:40]!r} is not a header name this sink may "
                                 f"set")
            if any(c in value for c in "\r\n\0"):
                raise ValueError(f"headers.{name}: expected one line")
        if self.prefix and not _PREFIX.fullmatch(self.prefix):
            raise ValueError("prefix: expected letters, digits and _ (not starting with a "
                             "digit), or ''")
        if not self.queue_dir:
            raise ValueError("queue_dir: expected a directory")
        if self.max_memory < 65536:
            raise ValueError("max_memory: expected at least 65536 bytes")
        if self.max_disk < 0:
            raise ValueError("max_disk: expected 0 or more bytes")
        if not 1 <= self.max_samples_per_send <= 100_000:
            raise ValueError("max_samples_per_send: expected 1 to 100000")
        if not 1 <= self.max_shards <= 64:
            raise ValueError("max_shards: expected 1 to 64")
        if min(self.timeout, self.min_backoff) <= 0 or self.batch_wait < 0:
            raise ValueError("timeout: timeout and min_backoff must be positive, batch_wait "
                             "0 or more")
        if self.max_backoff < self.min_backoff:
            raise ValueError("max_backoff: expected at least min_backoff")
        if self.flush_at_exit < 0:
            raise ValueError("flush_at_exit: expected 0 or more seconds")
        if self.rules_interval < 0 or (self.rules_interval
                                       and self.rules_max_age < self.rules_interval):
            raise ValueError("rules_interval: expected 0 or more seconds, and rules_max_age "
                             "at least as many")
        if self.max_series_per_host < 1:
            raise ValueError("max_series_per_host: expected at least 1")
