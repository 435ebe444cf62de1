"""The graphite sink: STATS and check perfdata into carbon, through graphyte.

It takes STATS (their ``metrics`` and their labelled ``series``), RESULT and HELLO (SPEC 4.1;
HELLO only if a router's routing table sends it here). Names come from
:mod:`sinks.graphite.paths`; graphyte builds each plaintext line (prefix, tags, value,
timestamp); :mod:`sinks.graphite.sender` buffers the lines (bounded, drops counted) and
delivers them from its own thread, so the PULL loop never waits for carbon.
STATS and RESULT are at most once and not ACKed: :meth:`write` never fails a batch.

An agent's paths are named after the hostname of the stamped uuid, never after a body's
claim: the hostname its HELLO gave (the default routing table sends HELLO here), or, until
the sink sees one (it started after the agent connected), the hostname of the uuid's first
STATS. A STATS naming another host is filed under that name all the same and counted
``hostname_mismatch``; a RESULT, which carries no hostname, uses the same name, else the
uuid. :class:`sinks.hostnames.HostNames` keeps at most
:data:`sinks.hostnames.MAX_HOSTS` of them (least recently used
forgotten).

Each host has at most ``max_names_per_host`` distinct paths (:mod:`sinks.graphite.paths`); a
new one past that is not sent (no whisper file is made), counted ``names_refused`` and, for
the :data:`fleetwatch.cardinality.REPORTED` most refused hosts, ``names_refused_by_host.HOST``.

The sink's own counters go to carbon too, every ``stats_interval``, under
``<prefix>.fleetwatch.<sink name>.graphite.<counter>``; they are never refused.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter

import graphyte

from fleetwatch import protocol, sinktypes
from fleetwatch.cardinality import NameCap, Refusals
from fleetwatch.logs import Throttle
from fleetwatch.protocol import Relayed
from fleetwatch.series import entries
from sinks.graphite.sender import CarbonSender, LineBuffer
from sinks.graphite.paths import Namer, Point
from sinks.hostnames import HostNames

log = logging.getLogger(__name__)

#: graphyte only reads the tags it is given
NO_TAGS: dict = {}
#: every counter this sink keeps (created at once: another thread reads them)
COUNTERS = ("stats", "results", "hellos", "datapoints", "bad_name", "bad_metric",
            "perfdata_bad", "perfdata_unknown", "unit_unknown", "names_refused", "series_bad")


class GraphiteSink:
    type = "graphite"
    handles = sinktypes.BY_NAME["graphite"].handles
    acks: frozenset[str] = frozenset()

    def __init__(self, settings, sink_id: str = "graphite", stats_interval: float = 10.0,
                 clock=time.time):
        self.settings, self.sink_id, self.clock = settings, sink_id, clock
        self.cap = NameCap(settings.max_names_per_host)
        self.namer = Namer(settings.tags, cap=self.cap)
        self.hosts = HostNames()
        #: names refused per host, and what the counters report of them (made by the loop
        #: thread, read by the sender's)
        self.refusals = Refusals()
        self._refused_report: dict = {}
        # graphyte without `interval`: no thread, no queue; we only use it to build lines
        self.graphyte = graphyte.Sender(settings.host, settings.port,
                                        prefix=settings.prefix or None,
                                        timeout=settings.timeout, raise_send_errors=True)
        self.buffer = LineBuffer(settings.buffer, settings.batch)
        self.sender = CarbonSender(self.buffer, settings.host, settings.port,
                                   settings.flush_interval, settings.timeout,
                                   settings.reconnect_min, settings.reconnect_max,
                                   tick=self.report_own, tick_interval=stats_interval)
        self._counts: Counter = Counter({k: 0 for k in COUNTERS})
        self.throttle = Throttle(log, 30.0)

    @classmethod
    def from_config(cls, config) -> "GraphiteSink":
        name = (config.name or f"graphite@{socket.gethostname()}")[:protocol.MAX_ID]
        return cls(config.graphite, name, config.stats_interval)

    @property
    def counts(self) -> Counter:
        """This sink's counters and the sender's, with ``buffered`` (a gauge)."""
        merged = Counter(dict(self._counts))
        merged.update(dict(self.hosts.counts))
        merged.update(self.sender.snapshot())
        merged.update(self._refused_report)
        merged["dropped_overflow"] = self.buffer.dropped
        merged["buffered"] = len(self.buffer)
        merged["names"] = len(self.cap)
        return merged

    def start(self) -> None:
        s = self.settings
        log.info("sending to carbon at %s:%d, prefix %r, tags %s, buffer %d datapoints, "
                 "%d names a host at most", s.host, s.port, s.prefix,
                 "on" if s.tags else "off", s.buffer, s.max_names_per_host)
        self.sender.start()

    def close(self) -> None:
        left = self.sender.stop(self.settings.flush_at_exit)
        if left:
            log.warning("stopping: %d datapoints not delivered to carbon (counted "
                        "dropped_at_exit)", left)

    # ---------------------------------------------------------------- writing
    def write(self, batch: list[Relayed]) -> None:
        lines: list[bytes] = []
        for relayed in batch:
            points = self.points(relayed)
            lines.extend(self.encode(points))
        self._counts["datapoints"] += len(lines)
        self.queue(lines)

    def points(self, relayed: Relayed) -> list[Point]:
        msg, uuid = relayed.message, relayed.uuid
        if msg.type == "HELLO":
            self._counts["hellos"] += 1
            self.hosts.hello(uuid, msg.get("hostname"))
            return []
        if msg.type == "STATS":
            self._counts["stats"] += 1
            series = entries(msg.get("series"), self._counts)     # series_bad counted
            if protocol.reporter(relayed) is not None:     # the stamp's word (SPEC 4.3)
                owner = uuid
                points, counts = self.namer.stats(msg.get("metrics"), msg.ts, uuid, True,
                                                  series=series)
            else:
                owner = self.hosts.of_stats(uuid, msg.get("hostname"))
                points, counts = self.namer.stats(msg.get("metrics"), msg.ts, owner,
                                                  series=series)
        else:
            self._counts["results"] += 1
            owner = self.hosts.of_result(uuid)
            started = msg.get("started")
            ts = started if isinstance(started, (int, float)) and not isinstance(
                started, bool) else msg.ts
            points, counts = self.namer.result(msg.get("plugin"), msg.get("status"),
                                               msg.get("perfdata"), ts, owner)
        for key, n in counts.items():
            self._counts[key] += n
        refused = counts["names_refused"]
        if refused:
            self._refused(owner, refused)
        return points

    def _refused(self, owner: str, refused: int) -> None:
        self.refusals.add(owner, refused)
        self._refused_report = self.refusals.counters("names_refused_by_host")
        self.throttle.warning("names", "%s has its %d distinct names: %d new names not sent "
                              "(max_names_per_host)", owner[:100],
                              self.settings.max_names_per_host, refused)

    def encode(self, points: list[Point], counts: Counter | None = None) -> list[bytes]:
        counts = self._counts if counts is None else counts
        lines = []
        for p in points:
            try:
                lines.append(self.graphyte.build_message(p.name, p.value, p.ts,
                                                         dict(p.tags) if p.tags else NO_TAGS))
            except (ValueError, TypeError) as e:  # sanitised names make this unreachable
                counts["bad_name"] += 1
                self.throttle.warning("build", "graphyte refused %r: %s", p.name[:100], e)
        return lines

    def queue(self, lines: list[bytes]) -> None:
        dropped = self.buffer.put(lines)  # counted by the buffer (dropped_overflow)
        if dropped:
            self.throttle.warning("overflow", "carbon buffer full (%d datapoints): dropped "
                                  "the %d oldest", self.settings.buffer, dropped)

    # ---------------------------------------------------------------- own counters
    def report_own(self) -> None:
        """Queue this sink's counters as datapoints (runs in the sender thread)."""
        counts = self.counts
        metrics = {f"graphite.{k}": v for k, v in sorted(counts.items())}
        points, _ = self.namer.stats(metrics, self.clock(), self.sink_id, internal=True,
                                     capped=False)
        # Counter() here: _counts belongs to the loop thread
        self.buffer.put(self.encode(points, Counter()))
