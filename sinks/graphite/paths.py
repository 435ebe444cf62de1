"""Graphite names for what agents and routers report: plain logic, no sockets.

Paths (``<prefix>.`` is added by the sender; docs/operating/graphite.md is the user's view):

- an agent's STATS metric ``M``: ``<hostname>.M`` (the hostname of the agent's HELLO, chosen
  by :mod:`sinks.graphite.sink`, never a body's claim);
- a check's perfdata label ``L`` of plugin ``P``: ``<hostname>.checks.P.L``, and the check's
  status (0 OK .. 3 UNKNOWN) as ``<hostname>.checks.P.status``;
- a router's, sink's or scheduler's own counter ``C`` (a STATS the router's stamp says is
  one: :func:`fleetwatch.protocol.reporter`, SPEC 4.3; an agent's is its host's whatever its
  ``source``): ``fleetwatch.<id>.C``, where ``<id>`` is the uuid the router stamped (so a
  process can only ever write under its own id).

Names are sanitised node by node: every run of characters other than ``A-Z a-z 0-9 _ -``
becomes one ``_``. A hostname, plugin, label or id is one node (``web1.example.com`` ->
``web1_example_com``, ``/var/lib`` -> ``_var_lib``); a STATS metric keeps its dots as the
hierarchy (``disk.root.free``) and loses empty nodes. A node longer than :data:`MAX_NODE`
(whisper file names) or a name longer than :data:`MAX_NAME` (carbon drops the connection
on a line past 16 KiB) is not sent and is counted ``bad_name``.

With tags on, the owner node moves into a tag instead (Graphite tagged series):
``M;host=<hostname>``, ``checks.P.L;host=<hostname>``, ``fleetwatch.C;id=<id>``; tag values
keep their dots.

A labelled series of a STATS (its ``series``, :mod:`fleetwatch.series`: an OTLP point the
agent took) ``N`` with labels ``k=v``: ``<hostname>.N.k_v...``, one node ``KEY_VALUE`` per label
in the order of the keys (each sanitised as a node: ``service.name=shop`` ->
``service_name_shop``, ``le=0.005`` -> ``le_0_005``); with tags on, ``N;host=<hostname>;k=v...``,
each key and value sanitised as a tag value (``service.name=shop``). Either way a label named
``host``, ``instance``, ``uuid``, ``site`` (the fleet's) or ``name`` (Graphite's own tag) is
renamed ``exported_KEY``, keys that become equal have their values joined with ``;``, and an
empty value is no label (:func:`fleetwatch.series.relabelled`). With tags on, the name with
its tags may be :data:`MAX_TAGGED` characters long (carbon hashes a tagged series' file name).
Each distinct path (tagged: name and tags) is one name of the host for the cap below.

Each host (each fleetwatch process, for its own counters) has at most ``max_names_per_host``
distinct metric names (:class:`Namer` with a :class:`fleetwatch.cardinality.NameCap`): carbon
makes a whisper file of every new name, so a new one past that is not sent and is counted
``names_refused``, until a name unseen for a day frees its place.

Perfdata values are normalised to base units: ``B KB MB GB TB`` (and ``KiB``...; binary
multiples, as the Monitoring Plugins use them) to bytes, ``s ms us`` to seconds; ``%``, ``c``
and no unit as they are; any other unit is passed through unchanged and counted
``unit_unknown``. A ``U`` value (null) is skipped and counted ``perfdata_unknown``.
Timestamps are whole seconds, floored, so a point is never ahead of carbon's clock (whisper
refuses points from the future).
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import chain
from typing import NamedTuple

from fleetwatch.cardinality import NameCap
from fleetwatch.metricpath import node, tag_value
from fleetwatch.series import FLEET_KEYS, Entry, relabelled

#: longest node (a whisper directory or file name, ``.wsp`` added, must fit in 255 bytes)
MAX_NODE = 200
#: longest name without the prefix
MAX_NAME = 1000
#: longest tagged series without the prefix: the name and its ``;KEY=VALUE`` tags
MAX_TAGGED = 4000
#: what marks a labelled series' key in :class:`Namer` (a check's is a pair, a STATS key a str)
LABELLED = "series"
#: label keys a labelled series cannot keep as they are: the fleet's, and Graphite's ``name``
RESERVED = FLEET_KEYS | {"name"}

#: unit -> factor to the base unit
UNITS = {
    "B": 1, "KB": 1024, "kB": 1024, "KiB": 1024, "MB": 1024 ** 2, "MiB": 1024 ** 2,
    "GB": 1024 ** 3, "GiB": 1024 ** 3, "TB": 1024 ** 4, "TiB": 1024 ** 4,
    "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6,
    "%": 1, "c": 1, "": 1,
}


class Point(NamedTuple):
    """One datapoint: ``name`` without the prefix, tags as sorted (key, value) pairs."""

    name: str
    value: float
    ts: int
    tags: tuple[tuple[str, str], ...] = ()


def dotted(text: str) -> str:
    """A metric name that keeps its hierarchy: each dot-separated node sanitised, empties gone."""
    return ".".join(n for n in (node(part) for part in text.split(".")) if n)


def normalise(value: float, uom: str) -> tuple[float, bool]:
    """``value`` in base units, and whether ``uom`` was known."""
    factor = UNITS.get(uom)
    if factor is None:
        return value, False
    return value * factor if factor != 1 else value, True


def number(value) -> float | None:
    """A finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if math.isfinite(value) else None


def perfdata_values(perfdata, counts: Counter, usable=bool):
    """(label, value in base units) of each usable item of a RESULT's ``perfdata``: a label
    that is a string ``usable`` accepts, a finite number, a string unit. The others are
    counted in ``counts``: ``perfdata_unknown`` (a ``U`` value), ``perfdata_bad``; an unknown
    unit passes unchanged and is counted ``unit_unknown``."""
    for item in perfdata if isinstance(perfdata, list) else ():
        label = item.get("label") if isinstance(item, dict) else None
        if not isinstance(label, str) or not usable(label):
            counts["perfdata_bad"] += 1
            continue
        if item.get("value") is None:
            counts["perfdata_unknown"] += 1
            continue
        value = number(item.get("value"))
        uom = item.get("uom") or ""
        if value is None or not isinstance(uom, str):
            counts["perfdata_bad"] += 1
            continue
        value, known = normalise(value, uom)
        if not known:
            counts["unit_unknown"] += 1
        yield label, value


def timestamp(ts: float) -> int:
    return math.floor(ts)


def _valid(name: str) -> bool:
    return 0 < len(name) <= MAX_NAME and all(0 < len(n) <= MAX_NODE for n in name.split("."))


def plain_path(name: str, labels: tuple[tuple[str, str], ...]) -> str:
    """A labelled series' path after ``HOST.`` (no tags): its name's nodes, then a
    ``KEY_VALUE`` node per label in key order; '' for a name with no node left."""
    metric = dotted(name)
    if not metric or not labels:
        return metric
    return ".".join((metric, *(f"{k}_{node(v)}" for k, v in relabelled(labels, node,
                                                                        RESERVED))))


def tagged(name: str, labels: tuple[tuple[str, str], ...]) -> tuple[str, tuple]:
    """A labelled series' name and its tags (sorted pairs), keys and values sanitised as
    tag values; ('', ()) for a name with no node left."""
    metric = dotted(name)
    if not metric:
        return "", ()
    return metric, tuple((k, tag_value(v)) for k, v in relabelled(labels, tag_value,
                                                                    RESERVED))


class Namer:
    """Turns metrics of one owner (a host or a fleetwatch process) into points.

    Agents send the same names every time, and every agent the same ones: each owner and each
    metric name (a STATS key, a check's plugin and label) is sanitised once and remembered
    apart (at most ``cache_size`` of each; a memory is cleared when full), so a point costs
    two lookups and a join, whatever the size of the fleet.

    With a ``cap`` (:class:`fleetwatch.cardinality.NameCap`), each owner's path (its head:
    ``HOST``, ``fleetwatch.ID``, or the tag) has at most the cap's limit of distinct metric
    names: a new one past it is counted ``names_refused`` and not sent, so carbon makes no
    whisper file of it.
    """

    def __init__(self, tagged: bool = False, cache_size: int = 200_000,
                 cap: NameCap | None = None):
        self.tagged, self.cache_size, self.cap = tagged, cache_size, cap
        self._metrics: dict = {}        # raw -> sanitised metric, or a defect's counter
        self._owners: dict = {}         # (internal, owner) -> (head, tags), or None

    def _remember(self, memory: dict, key, value):
        if len(memory) >= self.cache_size:
            memory.clear()
        memory[key] = value
        return value

    def _series(self, internal: bool, owner: str, raw, capped: bool = True
                ) -> tuple[str, tuple] | str:
        """(name, tags) for a STATS key ``raw`` (str), a check's (plugin, label) (a label of
        None is the check's status) or a labelled series' (:data:`LABELLED`, name, labels).
        A str result is the counter of the defect (``names_refused`` past the cap, unless
        not ``capped``)."""
        metric = self._metrics.get(raw)
        if metric is None:
            metric = self._remember(self._metrics, raw, self._metric(raw))
        if not isinstance(metric, tuple):
            return metric
        head = self._owners.get((internal, owner), False)
        if head is False:
            head = self._remember(self._owners, (internal, owner), self._owner(internal, owner))
        if head is None:
            return "bad_name"
        name = f"{head[0]}.{metric[0]}" if head[0] else metric[0]
        if len(metric) == 1:
            if len(name) > MAX_NAME:
                return "bad_name"
            held, tags = metric[0], head[1]
        else:                                       # a labelled series, tags on
            held, tags = metric, tuple(sorted({**dict(metric[1]), **dict(head[1])}.items()))
            if len(name) + sum(len(k) + len(v) + 2 for k, v in tags) > MAX_TAGGED:
                return "bad_name"
        if capped and self.cap is not None and not self.cap.admit(head, held):
            return "names_refused"
        return name, tags

    def _metric(self, raw) -> tuple | str:
        """A metric name's sanitised form (a 1-tuple; a labelled series' with tags on:
        (name, tags)), else ``bad_metric`` or ``bad_name``."""
        if isinstance(raw, tuple) and len(raw) == 3:
            return self._labelled(raw[1], raw[2])
        if isinstance(raw, tuple):
            plugin, label = raw
            metric = f"checks.{node(plugin)}.{'status' if label is None else node(label)}"
        else:
            metric = dotted(raw) if isinstance(raw, str) else ""
            if not metric:
                return "bad_metric"
        return (metric,) if _valid(metric) else "bad_name"

    def _labelled(self, name: str, labels: tuple) -> tuple | str:
        """A labelled series' sanitised form: (path,), or with tags on (name, tags); else
        ``bad_metric`` or ``bad_name``."""
        if not self.tagged:
            path = plain_path(name, labels)
            return "bad_metric" if not path else (path,) if _valid(path) else "bad_name"
        metric, tags = tagged(name, labels)
        if not metric:
            return "bad_metric"
        if not _valid(metric):
            return "bad_name"
        return (metric, tags) if tags else (metric,)    # no labels: the STATS metric

    def _owner(self, internal: bool, owner: str) -> tuple[str, tuple] | None:
        """(the name's head, the tags) of an owner's points; None if it cannot be named."""
        if self.tagged:
            tag = tag_value(owner)
            tags = (("id" if internal else "host", tag),)
            return ("fleetwatch" if internal else "", tags) if 0 < len(tag) <= MAX_NODE \
                else None
        own = node(owner)
        if not 0 < len(own) <= MAX_NODE:
            return None
        return (f"fleetwatch.{own}" if internal else own, ())

    def stats(self, metrics: dict | None, ts: float, owner: str, internal: bool = False,
              capped: bool = True, series: list[Entry] = ()) -> tuple[list[Point], Counter]:
        """Points of a STATS ``metrics`` object (values already finite numbers on the wire;
        None: none) and of its labelled ``series`` (:func:`fleetwatch.series.entries`); not
        ``capped``: past the cap all the same (the sink's own counters)."""
        counts: Counter = Counter()
        points, second = [], timestamp(ts)
        wanted = metrics.items() if isinstance(metrics, dict) else ()
        if series:
            wanted = chain(wanted, (((LABELLED, e.name, e.labels), e.value) for e in series))
        for key, raw in wanted:
            value = number(raw)
            got = self._series(internal, owner, key, capped) if value is not None \
                else "bad_metric"
            if isinstance(got, str):
                counts[got] += 1
                continue
            points.append(Point(got[0], value, second, got[1]))
        return points, counts

    def result(self, plugin: str, status: int, perfdata, ts: float, owner: str
               ) -> tuple[list[Point], Counter]:
        """Points of a RESULT: the status, then each usable perfdata entry."""
        counts: Counter = Counter()
        second = timestamp(ts)
        points = []
        wanted = [((plugin, None), status)]
        wanted += [((plugin, label), value)
                   for label, value in perfdata_values(perfdata, counts, node)]
        for raw, value in wanted:
            series = self._series(False, owner, raw)
            if isinstance(series, str):
                counts[series] += 1
                continue
            points.append(Point(series[0], value, second, series[1]))
        return points, counts
