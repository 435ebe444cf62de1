"""What the remote_write sink sends of each message: its samples, named as the prometheus sink
names them, labelled with the host that sent them, each encoded as its TimeSeries. Plain
logic, an injected clock, no sockets.

Series (PREFIX ``remote_write.prefix``, ``fleetwatch_`` by default; SPEC 4.7.2):

- a STATS metric ``M``: ``PREFIX<M>`` (``_total`` added for a name the prometheus sink serves
  as a counter: :mod:`sinks.prometheus.catalogue`), labels ``host``, ``uuid``;
- a STATS ``series`` entry (:mod:`fleetwatch.series`): as the prometheus sink serves it
  (:meth:`sinks.prometheus.names.Namer.labelled`): ``PREFIX<name>``, a counter's ending in
  ``_total`` unless it is a histogram's or summary's part (``_bucket``, ``_sum``,
  ``_count``); labels ``host``, ``uuid`` and its own, keys made Prometheus label names
  (``service.name`` -> ``service_name``), the fleet's (``host``, ``instance``, ``uuid``,
  ``site``) renamed ``exported_KEY`` whatever the sink adds;
- a RESULT's status: ``PREFIXcheck_status`` {``host``, ``uuid``, ``check``}, each perfdata
  item ``PREFIXcheck_perfdata`` {``host``, ``uuid``, ``check``, ``label``}, base units;
- a rule's latest result (:meth:`Samples.judged`, read from the state database, not a
  message: the alerting sinks judge rules): ``PREFIXcheck_status`` {``host``, ``uuid``,
  ``check`` (``rule:NAME``), ``site``}, its host and site the registry's.

``host`` is the hostname of the stamped uuid's HELLO (:class:`sinks.hostnames.HostNames`, as
every sink), ``uuid`` the stamped uuid (a process's id for its own counters), ``site`` the
site router an agent is behind (:func:`site_of`: the envelope's path), only when it is.

A sample carries its message's ``ts`` in milliseconds, but never later than the sink's clock
when the message arrived: a sender whose clock runs ahead cannot write the future (a
receiver would keep it, and every later real sample of the series would be refused as out of
order). A sample not later than the last one the sink queued of its series is not sent
(``samples_out_of_order``: two STATS of one host in one millisecond, a message relayed late
by another router): Prometheus would refuse it with ``400`` and, rolling the request back,
every other sample of that request with it. (The sink remembers the last time of
:data:`CACHE` series, then starts over: after a restart a receiver may still refuse one; the
sender counts it.) Each host (uuid) may have ``max_series_per_host`` distinct series
(:class:`fleetwatch.cardinality.NameCap`: a series unseen for a day frees its place); a
sample of a new one past that is not sent (``series_refused``, per host in
:attr:`Samples.refusals`).
"""

from __future__ import annotations

import time
import zlib
from collections import Counter
from typing import NamedTuple

from fleetwatch.cardinality import NameCap, Refusals
from fleetwatch.series import entries
from fleetwatch.protocol import Relayed
from sinks.hostnames import HostNames
from sinks.prometheus.catalogue import kind
from sinks.prometheus.names import PARTS, Namer, labels_of
from sinks.remote_write import wire

#: series whose encoded labels are remembered (then forgotten all at once; about 450 bytes
#: each, the per-host bound's memory included: 90 MB)
CACHE = 200_000
#: the sample counters :meth:`Samples.of` keeps
COUNTERS = ("stats", "results", "hellos", "rule_states", "samples", "series_refused", "bad_name",
            "bad_metric", "bad_label", "series_bad", "perfdata_bad", "perfdata_unknown",
            "unit_unknown", "future_ts", "samples_out_of_order")
#: the fields of a series' entry in :attr:`Samples._series_of`
HEAD, CRC, LAST = range(3)


class Encoded(NamedTuple):
    """One sample, ready to queue: the hash of its series (its shard) and its TimeSeries."""

    shard: int
    data: bytes


def site_of(relayed: Relayed) -> str | None:
    """The site router an agent's message came through (SPEC 4.10: the last router of its
    path after the relaying one), None when it came straight to the relaying router or is a
    process's own STATS (its own id ends its path, SPEC 4.3)."""
    path = relayed.path
    if len(path) < 2 or path[-1] == relayed.uuid:
        return None
    return path[-1]


def family_of(family: str, counter: bool) -> str:
    """A family's ``__name__`` as the prometheus sink serves it: ``_total`` added to a
    counter's (:func:`sinks.prometheus.names.series_family` took a ``_total`` off first),
    but to a histogram's or summary's part."""
    return family + "_total" if counter and not family.endswith(PARTS) else family


class Samples:
    """Turns relayed messages into :class:`Encoded` samples, one host's series bounded."""

    def __init__(self, prefix: str = "fleetwatch_", max_series_per_host: int = 1000,
                 clock=time.time, cache_size: int = CACHE):
        self.prefix, self.clock, self.cache_size = prefix, clock, cache_size
        self.namer = Namer(prefix)
        self.hosts = HostNames()
        self.cap = NameCap(max_series_per_host)
        self.refusals = Refusals()
        self.counts: Counter = Counter({k: 0 for k in COUNTERS})
        #: the hash of a series' labels (64 bits: what the cap holds too) -> [its labels
        #: encoded, their crc32 (its shard), the time of its last sample queued (ms)]
        self._series_of: dict[int, list] = {}
        #: (family, a series' counter kind) -> its ``__name__``
        self._names: dict[tuple, str] = {}

    def of(self, relayed: Relayed) -> tuple[list[Encoded], int]:
        """The samples of one message, and its time in ms (bounded by the sink's clock)."""
        msg, uuid = relayed.message, relayed.uuid
        now = self.clock()
        if msg.ts > now + 1:
            self.counts["future_ts"] += 1
        ts_ms = int(min(msg.ts, now) * 1000)
        if msg.type == "HELLO":
            self.counts["hellos"] += 1
            self.hosts.hello(uuid, msg.get("hostname"))
            return [], ts_ms
        site = site_of(relayed)
        if msg.type == "STATS":
            self.counts["stats"] += 1
            host = self.hosts.of_stats(uuid, msg.get("hostname"))
            labelled = self._stats(msg, host, uuid, site)
        else:
            self.counts["results"] += 1
            host = self.hosts.of_result(uuid)
            labelled = self._result(msg, host, uuid, site)
        return self._encoded(labelled, uuid, host, ts_ms), ts_ms

    def judged(self, row: dict, now: float) -> tuple[list[Encoded], int]:
        """The sample of a rule's latest result (a row of :func:`fleetwatch.store.reads.
        judged`, its host named by the registry) at ``now``: ``PREFIXcheck_status``
        {``host``, ``uuid``, ``check``, ``site``}, as a RESULT's status; none (counted
        ``bad_label``) for a host the registry has not named yet."""
        self.counts["rule_states"] += 1
        uuid, host = row["uuid"], row["hostname"]
        fleet = self._fleet(host, uuid, row["site"]) if host else None
        check = self.namer.label(row["plugin"])
        if fleet is None or check is None:
            if host:
                self.counts["bad_label"] += 1
            return [], 0
        ts_ms = int(now * 1000)
        labels = (("__name__", f"{self.prefix}check_status"), *fleet, ("check", check))
        return self._encoded([(labels, float(row["status"]))], uuid, host, ts_ms), ts_ms

    def _encoded(self, labelled: list, uuid: str, host: str, ts_ms: int) -> list[Encoded]:
        """The samples of ``labelled`` [(labels, value)] of host ``uuid`` at ``ts_ms``: not
        one older than its series' last, nor of a series past the host's bound."""
        out = []
        for labels, value in labelled:
            key = hash(labels)
            series = self._series(key, labels)
            if ts_ms <= series[LAST]:
                self.counts["samples_out_of_order"] += 1
                continue
            if not self.cap.admit(uuid, key):
                self.counts["series_refused"] += 1
                self.refusals.add(host)
                continue
            series[LAST] = ts_ms
            out.append(Encoded(series[CRC], wire.series(series[HEAD], value, ts_ms)))
        self.counts["samples"] += len(out)
        return out

    # ---------------------------------------------------------------- naming
    def _stats(self, msg, host: str, uuid: str, site: str | None) -> list:
        fleet = self._fleet(host, uuid, site)
        if fleet is None:
            return []
        flat, counts = self.namer.stats(msg.get("metrics"), host, uuid)
        out = [((("__name__", self._name(s.family)), *fleet), s.value) for s in flat]
        for entry in entries(msg.get("series"), counts):
            got = self.namer.labelled(entry)
            if isinstance(got, str):
                counts[got] += 1
                continue
            family, own = got
            out.append(((("__name__", self._name(family, entry.counter)), *fleet, *own),
                        entry.value))
        self._add(counts)
        return out

    def _result(self, msg, host: str, uuid: str, site: str | None) -> list:
        flat, counts = self.namer.result(msg.get("plugin"), msg.get("status"),
                                         msg.get("perfdata"), host, uuid)
        out = []
        for s in flat:
            names = labels_of(s.family, self.prefix)
            pairs = tuple(("uuid" if n == "instance" else n, v) for n, v in zip(names,
                                                                                  s.labels))
            if site is not None:
                pairs += (("site", site),)
            out.append(((("__name__", s.family), *pairs), s.value))
        self._add(counts)
        return out

    def _fleet(self, host: str, uuid: str, site: str | None):
        """The fleet's labels of a host's series; None (counted ``bad_label``) for a host
        name no label can hold."""
        value = self.namer.label(host)
        if value is None:
            self.counts["bad_label"] += 1
            return None
        return (("host", value), ("uuid", uuid)) + ((("site", site),) if site else ())

    def _name(self, family: str, counter: bool = False) -> str:
        """A family's ``__name__``: the type fleetwatch knows for its name
        (:mod:`sinks.prometheus.catalogue`), else a series' ``kind`` (:func:`family_of`)."""
        name = self._names.get((family, counter))
        if name is None:
            if len(self._names) >= self.cache_size:
                self._names.clear()
            known = kind(family[len(self.prefix):])[0]
            if known != "unknown":
                counter = known == "counter"
            name = self._names[(family, counter)] = family_of(family, counter)
        return name

    def _series(self, key: int, labels: tuple) -> list:
        got = self._series_of.get(key)
        if got is None:
            if len(self._series_of) >= self.cache_size:
                self._series_of.clear()
            head = wire.head(tuple(sorted(labels)))
            got = self._series_of[key] = [head, zlib.crc32(head), -1]
        return got

    def _add(self, counts: Counter) -> None:
        for key, n in counts.items():
            self.counts[key] += n

