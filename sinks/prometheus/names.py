"""Prometheus series for what agents and fleetwatch processes report: plain logic, no sockets.

Series, with PREFIX the configured ``prometheus.prefix`` (default ``fleetwatch_``;
docs/operating/prometheus.md is the user's view):

- an agent's STATS metric ``M``: ``PREFIX<M>{host, instance}``, ``instance`` the stamped
  uuid, ``host`` the hostname its HELLO gave (chosen by :mod:`sinks.prometheus.sink`, never a
  body's claim);
- a check's status (0 OK .. 3 UNKNOWN): ``PREFIX check_status{host, instance, check}``, and
  each perfdata item: ``PREFIX check_perfdata{host, instance, check, label}``, in base units;
- a router's, sink's or scheduler's own counter ``C`` (STATS with ``source`` ``router``,
  ``sink`` or ``scheduler``): ``PREFIX<C>{host, instance}``, ``instance`` the id the router
  stamped (so a process only ever writes under its own id).

Metric names follow Prometheus' rule ``[a-zA-Z_:][a-zA-Z0-9_:]*`` without the colons (kept
for recording rules): every run of other characters becomes one ``_`` (``cpu.percent`` ->
``cpu_percent``, ``net io.bytes/s`` -> ``net_io_bytes_s``), leading and trailing ``_`` go,
and a name that would start with a digit gets a ``_`` in front. A name empty after that is
counted ``bad_metric``; one longer than :data:`MAX_NAME`, or one that would be a family of
the sink's own (``check_status``, ``check_perfdata``, ``prometheus_sink_...``), is counted
``bad_name``. Distinct names MAY land in the same series.

Label values are kept as they are (prometheus_client escapes ``\\``, ``"`` and newlines),
except that control characters and lone surrogates (which would not encode) become U+FFFD;
a value longer than :data:`MAX_LABEL` is not kept and counted ``bad_label``.

A labelled series of a STATS (its ``series``, :mod:`fleetwatch.series`: an OTLP point the
agent took) ``N`` is ``PREFIX<N>{host, instance, its labels}``: ``N`` made a metric name as
above, each label key too (:func:`label_name`: ``service.name`` -> ``service_name``; one that
would be empty is counted ``bad_label`` and the series is not kept), ``host``, ``instance``,
``uuid`` and ``site`` renamed ``exported_KEY``, keys that become equal joined with ``;``
(:func:`fleetwatch.series.relabelled`), values as above. Its family's type
(:func:`series_family`): ``kind: counter`` a counter, served as ``N_total`` (a name ending in
``_total`` loses it first: the family of ``requests_total`` is ``requests``), except the
parts of a histogram or summary (``_bucket``, ``_sum``, ``_count``), kept under their own
name and served ``unknown``: the sink does not assemble histograms (a bound may keep some of
a histogram's buckets and not others), and ``rate()`` and ``histogram_quantile()`` read them
by name as ever; a gauge a ``gauge``. The namer remembers each family's type
(:attr:`Namer.kinds`) for the exposition, which lets fleetwatch's own names keep theirs
(:mod:`sinks.prometheus.catalogue`).

Perfdata items are read as the graphite sink reads them (:func:`sinks.graphite.paths.
perfdata_values`: values in bytes and seconds; unknown units passed through and counted
``unit_unknown``; a ``U`` value counted ``perfdata_unknown``, an item without a label or
number ``perfdata_bad``).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

from fleetwatch.series import Entry, relabelled
from sinks.graphite.paths import number, perfdata_values

#: longest metric name, without the prefix
MAX_NAME = 200
#: longest label value (a hostname is at most 255)
MAX_LABEL = 255
#: the families of checks (without the prefix) and their label names
CHECK_STATUS, CHECK_PERFDATA = "check_status", "check_perfdata"
#: the sink's own counters' names start so (without the prefix)
OWN = "prometheus_sink_"
#: label names of each kind of family
HOST_LABELS = ("host", "instance")
LABELS = {CHECK_STATUS: ("host", "instance", "check"),
          CHECK_PERFDATA: ("host", "instance", "check", "label")}

_ODD = re.compile(r"[^A-Za-z0-9_]+")
_INERT = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


class Sample(NamedTuple):
    """One value for the table: the family (prefix included), its label values in the
    family's order, the value."""

    family: str
    labels: tuple
    value: float


def metric_name(raw) -> str:
    """A STATS key as a Prometheus metric name without the prefix; '' if nothing is left."""
    if not isinstance(raw, str):
        return ""
    name = _ODD.sub("_", raw).strip("_")
    return f"_{name}" if name[:1].isdigit() else name


def label_name(raw) -> str:
    """A series' label key as a Prometheus label name: the rule of :func:`metric_name`
    (``service.name`` -> ``service_name``, ``1x`` -> ``_1x``, so never ``__``, Prometheus'
    own); '' if nothing is left."""
    return metric_name(raw)


#: the suffixes of a histogram's or summary's parts: served under their own name, ``unknown``
PARTS = ("_bucket", "_sum", "_count")


def series_family(raw: str, counter: bool) -> tuple[str, str] | str:
    """(family name without the prefix, its type: ``counter``, ``gauge`` or ``unknown`` for
    a histogram's or summary's part) of a labelled series named ``raw``; else
    ``bad_metric`` (nothing left) or ``bad_name`` (too long, or a family of the sink's
    own)."""
    name = metric_name(raw)
    type_ = "gauge"
    if counter:
        type_ = "unknown" if name.endswith(PARTS) else "counter"
        if type_ == "counter" and name.endswith("_total") and len(name) > len("_total"):
            name = name[:-len("_total")]
    if not name:
        return "bad_metric"
    if len(name) > MAX_NAME or name in LABELS or name.startswith(OWN):
        return "bad_name"
    return name, type_


def series_labels(labels: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...] | None:
    """A labelled series' labels (an :class:`fleetwatch.series.Entry`'s) as the sink serves
    them beside ``host`` and ``instance``: keys by :func:`label_name`, the fleet's renamed
    ``exported_KEY``, values by :func:`label_value`; None when a key would be empty or a
    value too long."""
    pairs = relabelled(labels, label_name)
    if any(not key for key, _ in pairs):
        return None
    out = tuple((key, label_value(value)) for key, value in pairs)
    return None if any(value is None for _, value in out) else out


def label_value(raw) -> str | None:
    """A label value made inert; None for a non-string or one longer than MAX_LABEL."""
    if not isinstance(raw, str) or len(raw) > MAX_LABEL:
        return None
    return _INERT.sub("\ufffd", raw)


def labels_of(family: str, prefix: str = "") -> tuple[str, ...]:
    """The label names of a family (prefix included in ``family``)."""
    return LABELS.get(family[len(prefix):], HOST_LABELS)


class Namer:
    """Turns STATS and RESULTs of one owner into :class:`Sample` lists.

    Agents send the same names every time: each STATS key and each label value is checked
    once and remembered (at most ``cache_size`` of each; a memory is cleared when full).
    """

    def __init__(self, prefix: str = "fleetwatch_", cache_size: int = 200_000):
        self.prefix, self.cache_size = prefix, cache_size
        self.status_family = prefix + CHECK_STATUS
        self.perfdata_family = prefix + CHECK_PERFDATA
        self._names: dict = {}     # raw key -> family name, or a defect's counter
        self._values: dict = {}    # raw label value -> inert value, or None
        self._series: dict = {}    # (name, counter, labels) -> (family, labels), or a defect
        #: family (prefix included) -> the type its labelled series declared (read by the
        #: scrape thread; at most ``cache_size``, forgotten all at once when full)
        self.kinds: dict[str, str] = {}

    def _remember(self, memory: dict, key, value):
        if len(memory) >= self.cache_size:
            memory.clear()
        memory[key] = value
        return value

    def family(self, raw) -> str:
        """The family of a STATS key (prefix included), else ``bad_metric``/``bad_name``
        (the defect's counter; a family name always starts with the prefix or a letter)."""
        try:
            got = self._names.get(raw)
        except TypeError:            # not hashable: no JSON object key is, but be safe
            return "bad_metric"
        if got is None:
            got = self._remember(self._names, raw, self._family(raw))
        return got

    def _family(self, raw) -> str:
        name = metric_name(raw)
        if not name:
            return "bad_metric"
        if len(name) > MAX_NAME or name in LABELS or name.startswith(OWN):
            return "bad_name"
        return self.prefix + name

    def label(self, raw) -> str | None:
        if isinstance(raw, str):
            got = self._values.get(raw, False)
            if got is not False:
                return got
            return self._remember(self._values, raw, label_value(raw))
        return None

    def stats(self, metrics, host: str, instance: str, series: list[Entry] = ()
              ) -> tuple[list[Sample], Counter]:
        """Samples of a STATS ``metrics`` object (values already finite numbers on the wire;
        None with ``series``: none) and of its labelled ``series``
        (:func:`fleetwatch.series.entries`)."""
        counts: Counter = Counter()
        host_value = self.label(host)
        if metrics is None and series:
            metrics = {}
        if host_value is None or not isinstance(metrics, dict):
            counts["bad_label" if host_value is None else "bad_metric"] += 1
            return [], counts
        labels = (host_value, instance)
        samples = []
        for key, raw in metrics.items():
            value = number(raw)
            family = self.family(key) if value is not None else "bad_metric"
            if family in ("bad_metric", "bad_name"):
                counts[family] += 1
                continue
            samples.append(Sample(family, labels, value))
        for entry in series:
            got = self.labelled(entry)
            if isinstance(got, str):
                counts[got] += 1
                continue
            family, pairs = got
            samples.append(Sample(family, labels + (pairs,) if pairs else labels, entry.value))
        return samples, counts

    def labelled(self, entry: Entry) -> tuple[str, tuple] | str:
        """(family, served labels) of a labelled series, or the defect's counter
        (``bad_metric``, ``bad_name``, ``bad_label``); each (name, kind, labels) is worked
        out once and remembered, and its family's type noted in :attr:`kinds`."""
        key = (entry.name, entry.counter, entry.labels)
        got = self._series.get(key)
        if got is None:
            got = self._remember(self._series, key, self._labelled(entry))
        if isinstance(got, tuple) and self.kinds.get(got[0]) != got[2]:
            if len(self.kinds) >= self.cache_size:
                self.kinds.clear()
            self.kinds[got[0]] = got[2]
        return got if isinstance(got, str) else got[:2]

    def _labelled(self, entry: Entry) -> tuple[str, tuple, str] | str:
        named = series_family(entry.name, entry.counter)
        if isinstance(named, str):
            return named
        pairs = series_labels(entry.labels)
        if pairs is None:
            return "bad_label"
        return self.prefix + named[0], pairs, named[1]

    def result(self, plugin, status, perfdata, host: str, instance: str
               ) -> tuple[list[Sample], Counter]:
        """Samples of a RESULT: the status, then each usable perfdata entry."""
        counts: Counter = Counter()
        host_value, check = self.label(host), self.label(plugin)
        if host_value is None or check is None or not check:
            counts["bad_label"] += 1
            return [], counts
        samples = []
        value = number(status)
        if value is not None:
            samples.append(Sample(self.status_family, (host_value, instance, check), value))
        else:
            counts["bad_metric"] += 1
        for raw_label, value in perfdata_values(perfdata, counts):
            label = self.label(raw_label)
            if label is None:
                counts["bad_label"] += 1
                continue
            samples.append(Sample(self.perfdata_family, (host_value, instance, check, label),
                                  value))
        return samples, counts
