"""The remote_write sink: the fleet's series to a Prometheus remote-write receiver.

It takes STATS, RESULT and HELLO (SPEC 4.1; HELLO to learn hostnames): each message's samples
are named and labelled by :mod:`sinks.remote_write.samples` (as the prometheus sink names
them, labels ``host``, ``uuid``, ``site`` and a series' own), encoded, and appended to a queue
(:mod:`sinks.remote_write.queue`: memory, spilled to disk past ``max_memory``, the oldest
dropped past ``max_disk``, kept across restarts) that :mod:`sinks.remote_write.sender`
empties from its own thread, over up to ``max_shards`` connections, retrying what the
receiver could not take yet. So the PULL loop never waits for the receiver. Nothing is ACKed
(STATS and RESULT are at most once): :meth:`write` never fails a batch.

The rules' latest results are not messages (the alerting sinks judge them and write them in
the state database): every ``rules_interval`` the sink's tick reads those judged within
``rules_max_age`` (:func:`fleetwatch.store.reads.judged`) and queues each as a
``check_status`` sample at that moment, its host and site the registry's.

What the queue's bound drops is counted (``samples_dropped_full``) and, per agent, reported
in the sink's own STATS as ``drops`` (:mod:`sinks.remote_write.drops`; the common loop sends
them, :mod:`sinks.loop`), which the lake files so that ``fleetwatch history gaps`` shows it.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter

from fleetwatch import protocol, sinktypes
from fleetwatch.cardinality import REPORTED
from fleetwatch.logs import Throttle
from fleetwatch.optional import MissingDependency
from fleetwatch.protocol import Relayed
from fleetwatch.store import state_reads
from fleetwatch.store.reader import Reader, StateError
from sinks.alerting.series.config import PREFIX as RULE_PREFIX
from sinks.remote_write.client import Client
from sinks.remote_write.drops import Drops
from sinks.remote_write.queue import Header, SpillQueue, record
from sinks.remote_write.samples import Samples
from sinks.remote_write.sender import Sender

log = logging.getLogger(__name__)

#: the type of a rule's state's record in the queue (a message's is its TYPE)
RULE_RECORD = "rule"


class RemoteWriteSink:
    type = "remote_write"
    handles = sinktypes.BY_NAME["remote_write"].handles
    acks: frozenset[str] = frozenset()

    def __init__(self, settings, sink_id: str = "remote_write", clock=time.time,
                 client=None, state_url: str = ""):
        self.settings, self.sink_id, self.clock = settings, sink_id, clock
        #: the state database the rules' results are read from ('' none)
        self.state_url = state_url if settings.rules_interval > 0 else ""
        self.reader = self.reads = None
        self.samples = Samples(settings.prefix, settings.max_series_per_host, clock)
        self._counts: Counter = Counter()
        #: the drops the loop reports in this sink's STATS (its hook, sinks/loop.py)
        self.drops = Drops(self.type, counts=self._counts)
        self.queue = SpillQueue(settings.queue_dir, settings.max_memory, settings.max_disk,
                                self._dropped, self._counts)
        self.client = client
        self.sender: Sender | None = None
        self.throttle = Throttle(log, 30.0)

    @classmethod
    def from_config(cls, config) -> "RemoteWriteSink":
        name = (config.name or f"remote_write@{socket.gethostname()}")[:protocol.MAX_ID]
        return cls(config.remote_write, name, state_url=config.state_url)

    @property
    def tick_interval(self) -> float | None:
        """How often the loop calls :meth:`tick`: the rules' states' interval, when read."""
        return self.settings.rules_interval if self.state_url else None

    @property
    def counts(self) -> Counter:
        """The samples' counters, the queue's and its sizes (gauges), the sender's (with
        ``shards``, a gauge), and the series refused of the most refused hosts
        (``series_refused_by_host.HOST``)."""
        merged = Counter(dict(self.samples.counts))
        merged.update(dict(self.samples.hosts.counts))
        merged.update(dict(self._counts))
        merged.update(self.queue.sizes())
        merged["drops_pending"] = len(self.drops)
        if self.sender is not None:
            merged.update(self.sender.snapshot())
        merged.update(self.samples.refusals.counters("series_refused_by_host", REPORTED))
        return merged

    def headers(self) -> dict[str, str]:
        """The configured headers, and the bearer token's (OSError: its file unreadable)."""
        headers = dict(self.settings.headers)
        if self.settings.bearer_token_file:
            with open(self.settings.bearer_token_file, encoding="utf-8") as f:
                token = f.read().strip()
            if not token or any(c in token for c in "\r\n\0"):
                raise OSError(f"bearer_token_file {self.settings.bearer_token_file}: "
                              f"expected one line of text")
            headers["Authorization"] = f"Bearer {token}"
        return headers

    def start(self) -> None:
        """Open the queue (resuming what the last run kept) and start sending; OSError
        (exit 69) when the queue's directory, the token or the CA file cannot be used."""
        s = self.settings
        if self.client is None:
            Client(s.url, {}, s.timeout, s.ca_file)     # an unreadable ca_file: OSError now
        headers = self.headers()
        if self.state_url:
            try:
                self.reads = state_reads()
            except MissingDependency as e:
                log.warning("the rules' states will not be sent: %s", e)
                self.state_url = ""
            else:
                self.reader = Reader(self.state_url)
        self.queue.open()
        self.sender = Sender(self.queue, s, headers, self.client)
        self.sender.start()
        log.info("remote write to %s: %d bytes queued in memory, %d on disk at most (%s), "
                 "%d samples a request, %d shards at most", s.url, s.max_memory, s.max_disk,
                 s.queue_dir, s.max_samples_per_send, s.max_shards)

    def close(self) -> None:
        if self.reader is not None:
            self.reader.close()
        if self.sender is not None:
            self.sender.stop(self.settings.flush_at_exit)
        kept = self.queue.close()
        if kept:
            log.info("stopping: %d samples not sent yet kept in %s for the next start", kept,
                     self.settings.queue_dir)

    # ---------------------------------------------------------------- writing
    def write(self, batch: list[Relayed]) -> None:
        for relayed in batch:
            encoded, ts_ms = self.samples.of(relayed)
            if encoded:
                uuid, type_ = relayed.uuid, relayed.message.type
                self.queue.put(record(uuid, type_, ts_ms, encoded),
                               Header(uuid, type_, ts_ms, len(encoded)))

    def tick(self) -> None:
        """Queue the rules' latest results (counted ``rules_read``; a database that cannot
        be read is counted ``rules_read_failed``, told once a minute, and tried again at the
        next tick)."""
        now = self.clock()
        try:
            rows = self.reader.read(self.reads.judged, prefix=RULE_PREFIX,
                                    since=now - self.settings.rules_max_age)
        except StateError as e:
            self._counts["rules_read_failed"] += 1
            self.throttle.warning("rules", "the rules' states are not sent: %s", e)
            return
        self._counts["rules_read"] += 1
        for row in rows:
            encoded, ts_ms = self.samples.judged(row, now)
            if encoded:
                self.queue.put(record(row["uuid"], RULE_RECORD, ts_ms, encoded),
                               Header(row["uuid"], RULE_RECORD, ts_ms, len(encoded)))

    def _dropped(self, heads: list[Header]) -> None:
        """The queue dropped a segment (its bound): the ledger of drops notes its messages'
        records (the rules' states are counted only: the lake lacks no message of theirs)."""
        self.drops.add(h for h in heads if h.type != RULE_RECORD)
        self.throttle.warning("full", "queue full (%d bytes in memory, %d on disk): dropped "
                              "the oldest %d samples (%d messages); counted "
                              "samples_dropped_full and reported to the lake",
                              self.settings.max_memory, self.settings.max_disk,
                              sum(h.samples for h in heads), len(heads))
