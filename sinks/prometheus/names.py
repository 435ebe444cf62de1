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

Perfdata items are read as the graphite sink reads them (:func:`sinks.graphite.paths.
perfdata_values`: values in bytes and seconds; unknown units passed through and counted
``unit_unknown``; a ``U`` value counted ``perfdata_unknown``, an item without a label or
number ``perfdata_bad``).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import NamedTuple

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

    def stats(self, metrics, host: str, instance: str) -> tuple[list[Sample], Counter]:
        """Samples of a STATS ``metrics`` object (values already finite numbers on the wire)."""
        counts: Counter = Counter()
        host_value = self.label(host)
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
        return samples, counts

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
