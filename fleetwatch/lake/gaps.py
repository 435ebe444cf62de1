"""Gaps accounted for: per time bucket, what landed in the lake for a host and what routers
dropped for it, and a verdict (pure logic, no Spark: :meth:`fleetwatch.lake.query.History.gaps`
feeds it the counts and the ``drops`` rows it reads).

Buckets are aligned to the epoch (``1h`` buckets start on the hour, ``1d`` at UTC midnight),
cut to the window ``[since, until)`` at both ends; the window starts no earlier than the
host's first message or drop (:func:`begins`). A bucket's verdict:

- ``dropped``: a router dropped some of the host's messages in it (for any sink type, or the
  ones asked for), whatever landed;
- ``no data``: nothing landed and nothing was dropped: as far as the routers know, the host
  sent nothing (it was down, cut off, or not running yet);
- ``ok``: something landed and nothing was dropped.

A drop entry says only that ``count`` messages were dropped between ``first`` and ``last``:
its count is spread evenly over that time, so a bucket gets the share of the entry's time it
holds (an *estimate*: 10 drops over two hours are 5 in each, however they fell). An entry
with ``first == last`` counts whole in the bucket holding that instant. Shares of time
outside the window are not shown. Landed messages are counted by their ``ts`` (the agent's
clock), drops by the router's: clocks apart blur the edges of a bucket.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple

OK, NO_DATA, DROPPED = "ok", "no data", "dropped"
#: what landed: each count of a bucket -> the table whose messages it counts (``stats``: the
#: STATS messages, not their metrics)
LANDED = {"heartbeats": "heartbeats", "results": "results", "stats": "metrics",
          "notifications": "notifications"}
#: buckets one report holds at most
MAX_BUCKETS = 10_000


class Drop(NamedTuple):
    """One ``drops`` row, its times in epoch seconds."""

    type: str
    sink: str
    count: int
    first: float
    last: float


def buckets(since: float, until: float, every: float) -> list[tuple[float, float]]:
    """The buckets of ``every`` seconds, aligned to the epoch, that ``[since, until)`` meets,
    each cut to it: (start, end). ValueError for no window, a bad size, or too many."""
    if not (math.isfinite(every) and every > 0):
        raise ValueError(f"expected a bucket size above 0, got {every!r}")
    if not until > since:
        raise ValueError("expected a window that ends after it starts")
    first = math.floor(since / every)
    count = math.ceil(until / every) - first
    if count > MAX_BUCKETS:
        raise ValueError(f"{count} buckets of {every:g} s: at most {MAX_BUCKETS}; "
                         f"ask for larger buckets or a shorter window")
    return [(max(since, (first + i) * every), min(until, (first + i + 1) * every))
            for i in range(count)]


def begins(since: float, firsts) -> float:
    """Where a host's report begins: at ``since``, or later at the first of ``firsts`` (its
    first message in the lake, its first drop; None: not known) when they are all later:
    before it the host did not exist, which ``no data`` would call silence."""
    known = [t for t in firsts if t is not None]
    return max(since, min(known)) if known else since


def number(t: float, every: float) -> int:
    """The epoch-aligned bucket time ``t`` falls in: ``floor(t / every)`` (the bucket that
    starts at ``number * every``)."""
    return math.floor(t / every)


def spread(drop: Drop, start: float, end: float) -> float:
    """The share of ``drop.count`` that falls in ``[start, end)``: in proportion to the time
    of ``[first, last]`` inside it; whole (or nothing) when ``first == last``."""
    if drop.last <= drop.first:
        return float(drop.count) if start <= drop.first < end else 0.0
    inside = min(drop.last, end) - max(drop.first, start)
    return drop.count * inside / (drop.last - drop.first) if inside > 0 else 0.0


def verdict(landed: int, dropped: float) -> str:
    if dropped > 0:
        return DROPPED
    return OK if landed > 0 else NO_DATA


def report(since: float, until: float, every: float, landed: dict[tuple[str, int], int],
           drops: Iterable[Drop]) -> list[dict]:
    """One dict per bucket of :func:`buckets`: start, end (epoch seconds), the counts of
    :data:`LANDED`, ``dropped`` (the estimated total), ``drops`` (per type and sink, in that
    order: type, sink, count) and ``verdict``. ``landed``: (a field of LANDED, the bucket's
    :func:`number`) -> messages; ``drops``: the drop entries that meet the window. No bucket
    when the window is empty (a host first heard of after it: :func:`begins`)."""
    out = []
    if until <= since:
        return out
    spans = buckets(since, until, every)
    shares: list[dict[tuple[str, str], float]] = [{} for _ in spans]
    base = number(since, every)
    for drop in drops:
        lo = max(0, number(max(drop.first, since), every) - base)
        hi = min(len(spans) - 1, number(min(drop.last, until), every) - base)
        for i in range(lo, hi + 1):
            share = spread(drop, *spans[i])
            if share > 0:
                key = (drop.type, drop.sink)
                shares[i][key] = shares[i].get(key, 0.0) + share
    for i, (start, end) in enumerate(spans):
        row = {"start": start, "end": end,
               **{kind: int(landed.get((kind, base + i), 0)) for kind in LANDED}}
        row["drops"] = [{"type": t, "sink": s, "count": n}
                        for (t, s), n in sorted(shares[i].items())]
        row["dropped"] = float(sum(d["count"] for d in row["drops"]))
        row["verdict"] = verdict(sum(row[kind] for kind in LANDED), row["dropped"])
        out.append(row)
    return out
