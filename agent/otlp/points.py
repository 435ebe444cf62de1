"""What OTLP metric data points become: fleetwatch series (SPEC.md 4.4.1). Plain logic over
the messages opentelemetry-proto decodes: no state, no sockets.

Each data point gives one or more *samples*, ``(name, labels, value, kind)``, taken or
refused together (a histogram is never kept without some of its buckets):

- gauge: ``NAME``, a gauge;
- sum: ``NAME``, a counter when monotonic, else a gauge;
- histogram: ``NAME_bucket`` per explicit bound and ``+Inf`` (label ``le``, counts made
  cumulative over the bounds, as Prometheus has them), ``NAME_sum`` (when the point has a
  sum), ``NAME_count``, all counters;
- exponential histogram: ``NAME_sum`` and ``NAME_count`` only (its buckets are not kept);
- summary: ``NAME`` per quantile (label ``quantile``, a gauge), ``NAME_sum``, ``NAME_count``.

``labels`` are the resource's attributes, then the point's (the point's win), less the keys
of ``otlp.drop_attributes``, sorted by key; a value that is not a string is written in JSON
(``true``, ``42``, ``[1,2]``; bytes in base64). A point whose labels break the limits (more than
``max_labels``, a key empty or past :data:`MAX_KEY` characters, a value past
:data:`MAX_VALUE`) is a :class:`Refusal` of kind ``LABELS``; one that cannot be a series
(no value, a value that is not finite, a name past :data:`MAX_NAME`, no temporality,
buckets that do not fit the bounds) one of kind ``INVALID``. A point flagged "no recorded
value" gives no sample (fleetwatch has no staleness marker) and is no refusal.

Temporality is the caller's (:mod:`agent.otlp.series`): each :class:`Point` says whether
its values are DELTA, to be added up into cumulative ones.
"""

from __future__ import annotations

import base64
import functools
import json
import math

# the longest label key, label value and series name: the wire's (SPEC.md 4, STATS series)
from fleetwatch.series import MAX_KEY, MAX_NAME, MAX_VALUE

GAUGE, COUNTER = "gauge", "counter"
#: AggregationTemporality
DELTA, CUMULATIVE = 1, 2
#: DataPointFlags: FLAG_NO_RECORDED_VALUE
NO_RECORDED_VALUE = 1
#: Refusal kinds: what ``agent.otlp.labels_refused`` and ``agent.otlp.points_invalid`` count
LABELS, INVALID = "labels", "invalid"


class Point:
    """A data point's samples, ``[(name, labels, value, kind)]``, ``labels`` a sorted tuple of
    (key, value) pairs; ``delta``: its values are changes since the previous point;
    ``time``: its ``time_unix_nano``."""

    __slots__ = ("samples", "delta", "time")

    def __init__(self, samples: list, delta: bool, time: int):
        self.samples, self.delta, self.time = samples, delta, time


class Refusal:
    """A data point refused: ``why`` is :data:`LABELS` or :data:`INVALID`, ``text`` says
    what (for the reply's ``error_message`` and the log)."""

    __slots__ = ("why", "text")

    def __init__(self, why: str, text: str):
        self.why, self.text = why, text

    def __repr__(self) -> str:
        return f"Refusal({self.why!r}, {self.text!r})"


def plain(value):
    """An ``AnyValue`` as a JSON-able Python value (bytes as base64, as OTLP's JSON has them)."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return [plain(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: plain(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return None if which is None else getattr(value, which)


def text(value) -> str:
    """An ``AnyValue`` as a label value: a string as it is, bytes in base64, anything else
    as JSON text."""
    which = value.WhichOneof("value")
    if which == "string_value":
        return value.string_value
    if which == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    return json.dumps(plain(value), separators=(",", ":"), ensure_ascii=False)


def bound(x: float) -> str:
    """A bucket bound or a quantile as Prometheus writes it in ``le`` and ``quantile``
    (Go's ``FormatFloat(x, 'f', -1, 64)``: shortest digits, never an exponent), ``+Inf``."""
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    r = repr(float(x))
    if "e" not in r:
        return r[:-2] if r.endswith(".0") else r
    mantissa, exponent = r.split("e")
    sign = "-" if mantissa.startswith("-") else ""
    whole, _, fraction = mantissa.lstrip("-").partition(".")
    digits = whole + fraction
    point = len(whole) + int(exponent)
    if point <= 0:
        return f"{sign}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return sign + digits + "0" * (point - len(digits))
    return f"{sign}{digits[:point]}.{digits[point:]}"


@functools.lru_cache(maxsize=256)
def bucket_labels(bounds: tuple) -> tuple | None:
    """The ``("le", BOUND)`` label of each of a histogram's ``bounds`` (the same bounds come
    with every point and every export: worked out once); None unless they are finite and
    increasing."""
    if any(not a < b for a, b in zip(bounds, bounds[1:])) or \
            any(not math.isfinite(b) for b in bounds):
        return None
    return tuple(("le", bound(b)) for b in bounds)


def attributes(kvs, drop: frozenset) -> dict[str, str]:
    return {kv.key: text(kv.value) for kv in kvs if kv.key not in drop}


class Mapper:
    """Turns an ``ExportMetricsServiceRequest`` into :class:`Point` and :class:`Refusal`
    items, one per data point, with the label limits of the agent's ``otlp`` section."""

    def __init__(self, max_labels: int = 32, drop=()):
        self.max_labels = max_labels
        self.drop = frozenset(drop)

    def points(self, request):
        """Every data point of ``request``, in order, as a Point or a Refusal."""
        for rm in request.resource_metrics:
            resource = attributes(rm.resource.attributes, self.drop)
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    yield from self.metric(metric, resource)

    def metric(self, metric, resource: dict):
        which = metric.WhichOneof("data")
        if which is None:
            return
        data = getattr(metric, which)
        name = metric.name
        problem = None
        if not name or len(name) + len("_bucket") > MAX_NAME:
            problem = f"metric name {name[:64]!r} is empty or longer than " \
                      f"{MAX_NAME - len('_bucket')} characters"
        elif which in ("sum", "histogram", "exponential_histogram") and \
                data.aggregation_temporality not in (DELTA, CUMULATIVE):
            problem = f"{name[:64]}: no aggregation temporality"
        if problem is not None:
            for _ in data.data_points:
                yield Refusal(INVALID, problem)
            return
        one = getattr(self, which)
        for dp in data.data_points:
            if dp.flags & NO_RECORDED_VALUE:
                continue
            labels = self.labels(resource, dp.attributes)
            if isinstance(labels, Refusal):
                yield labels
                continue
            samples = one(name, labels, data, dp)
            if isinstance(samples, str):
                yield Refusal(INVALID, f"{name[:64]}: {samples}")
                continue
            for sample in samples:
                value = sample[2]
                if isinstance(value, float) and not math.isfinite(value):
                    yield Refusal(INVALID, f"{name[:64]}: value {value} is not finite")
                    break
            else:
                yield Point(samples, getattr(data, "aggregation_temporality", 0) == DELTA,
                            dp.time_unix_nano)

    def labels(self, resource: dict, kvs):
        """The sorted (key, value) pairs of a point, or the Refusal of its labels."""
        merged = dict(resource)
        if kvs:
            merged.update(attributes(kvs, self.drop))
        if len(merged) > self.max_labels:
            return Refusal(LABELS, f"{len(merged)} labels, more than {self.max_labels} "
                                   f"(otlp.max_labels)")
        for key, value in merged.items():
            if not key or len(key) > MAX_KEY:
                return Refusal(LABELS, f"label key {key[:32]!r}... is empty or longer than "
                                       f"{MAX_KEY} characters")
            if len(value) > MAX_VALUE:
                return Refusal(LABELS, f"label {key!r}: value longer than {MAX_VALUE} "
                                       f"characters")
        return tuple(sorted(merged.items()))

    # Each kind: the samples of one data point, or a string saying why it has none.
    @staticmethod
    def gauge(name, labels, data, dp):
        which = dp.WhichOneof("value")
        if which is None:
            return "a data point without a value"
        return [(name, labels, getattr(dp, which), GAUGE)]

    @staticmethod
    def sum(name, labels, data, dp):
        which = dp.WhichOneof("value")
        if which is None:
            return "a data point without a value"
        return [(name, labels, getattr(dp, which), COUNTER if data.is_monotonic else GAUGE)]

    @staticmethod
    def histogram(name, labels, data, dp):
        bounds, counts = tuple(dp.explicit_bounds), dp.bucket_counts
        if counts and len(counts) != len(bounds) + 1:
            return f"{len(counts)} bucket counts for {len(bounds)} bounds"
        les = bucket_labels(bounds)
        if les is None:
            return "bucket bounds that are not finite and increasing"
        out, total = [], 0
        base = _without(labels, "le")
        bucket = f"{name}_bucket"
        for le, n in zip(les, counts):
            total += n
            out.append((bucket, base + (le,), total, COUNTER))
        out.append((bucket, base + (("le", "+Inf"),),
                    total + counts[-1] if counts else dp.count, COUNTER))
        return _sum_count(name, labels, dp, out)

    @staticmethod
    def exponential_histogram(name, labels, data, dp):
        return _sum_count(name, labels, dp, [])

    @staticmethod
    def summary(name, labels, data, dp):
        base = _without(labels, "quantile")
        out = [(name, base + (("quantile", bound(q.quantile)),), q.value, GAUGE)
               for q in dp.quantile_values]
        return _sum_count(name, labels, dp, out, has_sum=True)


def _without(labels: tuple, key: str) -> tuple:
    """``labels`` less ``key``: the label a histogram's or a summary's series adds is its
    own (``le``, ``quantile``), never a data point attribute of that name."""
    return labels if all(k != key for k, _ in labels) else \
        tuple(kv for kv in labels if kv[0] != key)


def _sum_count(name: str, labels: tuple, dp, out: list, has_sum: bool = False) -> list:
    """``out`` with NAME_sum (when the point has a sum) and NAME_count."""
    if has_sum or dp.HasField("sum"):
        out.append((f"{name}_sum", labels, dp.sum, COUNTER))
    out.append((f"{name}_count", labels, dp.count, COUNTER))
    return out
