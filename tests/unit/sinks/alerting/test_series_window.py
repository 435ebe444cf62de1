"""The series of a host (sinks/alerting/series/window.py): appending and trimming, and each
function at its window's edges: a point exactly ``window`` old is outside, one at ``now``
inside, one after ``now`` ignored; counters resetting; the linear fit."""

from __future__ import annotations

import math

import pytest

from sinks.alerting.series import window as w
from sinks.alerting.series.window import Points

T0 = 1_760_000_000.0                    # a real epoch: the fit must keep its precision


def pts(*pairs, keep=3600.0, max_points=w.MAX_POINTS) -> Points:
    points = Points(keep, max_points)
    for t, v in pairs:
        assert points.append(T0 + t, v)
    return points


# ---------------------------------------------------------------- Points

def test_append_in_time_order_only():
    p = pts((0, 1.0), (10, 2.0))
    assert not p.append(T0 + 10, 5.0)           # the same time: a duplicate
    assert not p.append(T0 + 5, 5.0)            # older than the newest
    assert p.items() == [(T0, 1.0), (T0 + 10, 2.0)]
    assert p.newest == T0 + 10 and len(p) == 2


def test_trimmed_to_keep_behind_the_newest():
    p = pts(*[(t, t) for t in range(0, 100, 10)], keep=30.0)
    # (90 - 30, 90]: the point exactly 30 s behind the newest is gone
    assert [t - T0 for t, _ in p.items()] == [70, 80, 90]


def test_bounded_to_max_points():
    p = pts(*[(t, t) for t in range(10)], keep=1e9, max_points=4)
    assert [v for _, v in p.items()] == [6, 7, 8, 9]


@pytest.mark.parametrize("keep, max_points", [(0, 10), (-1, 10), (10, 0)])
def test_bad_bounds(keep, max_points):
    with pytest.raises(ValueError):
        Points(keep, max_points)


def test_before():
    p = pts((0, 1.0), (10, 2.0), (20, 3.0))
    assert p.before(T0 + 25) == T0 + 20
    assert p.before(T0 + 19.5) == T0 + 10
    assert p.before(T0 + 10) == T0 + 10
    assert p.before(T0 - 1) is None
    assert Points(10).before(T0) is None and Points(10).newest is None


# ---------------------------------------------------------------- window edges

SERIES = ((100, 4.0), (110, 1.0), (120, 7.0), (130, 2.0))


@pytest.mark.parametrize("now, window, inside", [
    (130, 30, [1.0, 7.0, 2.0]),             # 100 is exactly 30 s old: outside
    (130, 30.001, [4.0, 1.0, 7.0, 2.0]),
    (120, 20, [1.0, 7.0]),                  # 130 is after now: ignored; 120 at now: inside
    (119.999, 20, [4.0, 1.0]),
    (130, 0.5, [2.0]),
    (140, 10, []),                          # 130 exactly 10 s old
    (99, 100, []),                          # every point after now
    (1000, 1e6, [4.0, 1.0, 7.0, 2.0]),
])
def test_windowed_functions_at_the_edges(now, window, inside):
    p = pts(*SERIES)
    now += T0
    expect = {
        "avg": sum(inside) / len(inside) if inside else None,
        "min": min(inside) if inside else None,
        "max": max(inside) if inside else None,
        "last": inside[-1] if inside else None,
        "sum": sum(inside) if inside else None,
        "count": float(len(inside)) if inside else None,
        "delta": inside[-1] - inside[0] if len(inside) >= 2 else None,
        "absent": 0.0 if inside else 1.0,
    }
    for name, value in expect.items():
        assert w.WINDOWED[name](p, now, window) == pytest.approx(value), name


def test_empty_and_never_seen():
    empty = Points(60)
    for name, func in w.WINDOWED.items():
        assert func(empty, T0, 60) == (1.0 if name == "absent" else None), name
    assert w.absent(None, T0, 60) == 1.0
    assert w.predict(empty, T0, 60, 10) is None
    assert w.timeleft(empty, T0, 60, 10) is None


# ---------------------------------------------------------------- rate

@pytest.mark.parametrize("pairs, now, window, expected", [
    # a steady counter: 2 a second
    ([(0, 0), (10, 20), (20, 40), (30, 60)], 30, 60, 2.0),
    # a reset at 30 (40 -> 5): increases 20 + 20 + 5 + 10 = 55 over 40 s
    ([(0, 0), (10, 20), (20, 40), (30, 5), (40, 15)], 40, 60, 55 / 40),
    # two resets in a row
    ([(0, 100), (10, 3), (20, 1), (30, 4)], 30, 60, (3 + 1 + 3) / 30),
    # the reset's point is exactly `window` old: only the points after it count
    ([(0, 50), (10, 2), (20, 4), (30, 6)], 30, 30, (6 - 2) / 20),
    # the point at 0 is inside by a hair: the reset counts
    ([(0, 50), (10, 2), (20, 4), (30, 6)], 30, 30.5, (6 - 50 + 50) / 30),
    # one point in the window: no rate
    ([(0, 0), (10, 20)], 10, 10, None),
    ([(0, 0), (10, 20)], 10, 10.1, 2.0),
    # a flat counter
    ([(0, 7), (10, 7)], 10, 60, 0.0),
    # a point after now is not read
    ([(0, 0), (10, 10), (20, 1000)], 10, 60, 1.0),
])
def test_rate(pairs, now, window, expected):
    assert w.rate(pts(*pairs), T0 + now, window) == pytest.approx(expected)


# ---------------------------------------------------------------- the linear fit

LINE = [(t, 1000.0 + 0.5 * t) for t in range(0, 3600, 10)]        # 0.5 a second


@pytest.mark.parametrize("now, window, horizon, expected", [
    (3590, 3600, 0, 1000 + 0.5 * 3590),
    (3590, 3600, 3600, 1000 + 0.5 * (3590 + 3600)),
    (3590, 60, 600, 1000 + 0.5 * 4190),
    (1000, 100, 100, 1000 + 0.5 * 1100),        # the fit at a now in the past
    (3590, 10, 60, None),                      # one point: (3580, 3590]
    (3590, 10.5, 60, 1000 + 0.5 * 3650),
])
def test_predict_a_line(now, window, horizon, expected):
    assert w.predict(pts(*LINE), T0 + now, window, horizon) == pytest.approx(expected)


def test_predict_least_squares():
    # points (0, 0), (10, 10), (20, 0): the fit is flat at 10/3
    p = pts((0, 0.0), (10, 10.0), (20, 0.0))
    assert w.predict(p, T0 + 20, 60, 1000) == pytest.approx(10 / 3)


def test_predict_keeps_its_precision():
    # a disk's bytes near 1e12, growing 1 byte a second, at epoch times
    p = pts(*[(t, 1e12 + t) for t in range(0, 3600, 10)])
    assert w.predict(p, T0 + 3590, 3600, 3600) == pytest.approx(1e12 + 7190, abs=1)


@pytest.mark.parametrize("pairs, now, window, threshold, expected", [
    # rising 0.5 a second, 2795 at 3590: 100 more takes 200 s ... and 10,000: 14,410 s
    (LINE, 3590, 3600, 2895, 200),
    (LINE, 3590, 3600, 10000, (10000 - 2795) / 0.5),
    # crossed within the window (at 1000, inside (0, 3590]): already there
    (LINE, 3590, 3600, 1500, 0.0),
    # crossed before the window: moving away, never
    (LINE, 3590, 600, 1500, math.inf),
    # falling toward a threshold below
    ([(0, 100), (10, 90), (20, 80)], 20, 60, 0, 80),
    # falling away from a threshold above (a disk being emptied): never
    ([(0, 60), (10, 55), (20, 50)], 20, 60, 100, math.inf),
    # flat on it: there; flat elsewhere: never
    ([(0, 100), (10, 100)], 10, 60, 100, 0.0),
    ([(0, 50), (10, 50)], 10, 60, 100, math.inf),
    # exactly at it now, rising
    ([(0, 90), (10, 100)], 10, 60, 100, 0.0),
    # one point in the window
    ([(0, 90), (10, 100)], 10, 10, 200, None),
])
def test_timeleft(pairs, now, window, threshold, expected):
    result = w.timeleft(pts(*pairs), T0 + now, window, threshold)
    assert result == (pytest.approx(expected) if expected not in (None, math.inf)
                      else expected)


def test_the_functions_are_registered():
    assert set(w.WINDOWED) == {"avg", "min", "max", "last", "sum", "count", "delta", "rate",
                               "absent"}
    assert set(w.WITH_ARGUMENT) == {"predict", "timeleft"}


# ---------------------------------------------------------------- the running sums

def reference_fit(pairs, now, window):
    """The least-squares line through the pairs in (now - window, now], the plain way."""
    inside = [(t, v) for t, v in pairs if now - window < t <= now]
    n = len(inside)
    mt = sum(t for t, _ in inside) / n
    mv = sum(v for _, v in inside) / n
    sxx = sum((t - mt) ** 2 for t, _ in inside)
    slope = sum((t - mt) * (v - mv) for t, v in inside) / sxx
    return inside, mt, mv, slope


@pytest.mark.parametrize("seed", range(5))
def test_running_sums_agree_with_counting(seed):
    """Points come and go for several times the series' length (the sums taken from and
    counted again); each function, over windows from a few points to all of them and at a
    now behind the newest, agrees with the plain computation."""
    import random
    rnd = random.Random(seed)
    keep = 600.0
    p = Points(keep, max_points=50 + seed * 20)
    pairs = []
    t = T0
    level = rnd.uniform(-1e6, 1e12)
    for step in range(1000):
        t += rnd.uniform(1, 20)
        level += rnd.uniform(-5, 10) * (1 + seed * 1000)
        assert p.append(t, level)
        pairs.append((t, level))
        if step % 37:
            continue
        kept = pairs[-len(p):]
        assert p.items() == kept                # times relative to a base, exactly
        for now in (t, t - 15, t - 100):
            for window in (30, 100, 300, 599, 1e5):
                inside, mt, mv, slope = reference_fit(kept, now, window) \
                    if sum(1 for x, _ in kept if now - window < x <= now) >= 2 else (None,) * 4
                if inside is None:
                    assert w.predict(p, now, window, 60) is None
                    continue
                values = [v for _, v in inside]
                scale = max(abs(v) for v in values) + 1
                assert w.avg(p, now, window) == pytest.approx(sum(values) / len(values),
                                                              rel=1e-9, abs=1e-9 * scale)
                assert w.predict(p, now, window, 600) == pytest.approx(
                    mv + slope * (now + 600 - mt), rel=1e-6, abs=1e-6 * scale)
                threshold = level + 1e4 * (1 + seed * 1000)
                left = w.timeleft(p, now, window, threshold)
                crossing = mt + (threshold - mv) / slope
                if crossing >= now + 1:
                    assert left == pytest.approx(crossing - now, rel=1e-6)
