"""A rule's expression (sinks/alerting/series/expr.py): durations, levels, the parser and its
errors (column and cause), evaluation over a host's series with a fake clock: a series
never seen, stale at the edge of ``stale_after``, too few points, division by zero."""

from __future__ import annotations

import math

import pytest

from sinks.alerting.series import expr as e
from sinks.alerting.series.expr import (EvalError, ExprError, NoSeries, NoValue, Stale,
                                        parse, parse_duration, parse_level)
from sinks.alerting.series.window import Points

NOW = 1_760_000_000.0


# ---------------------------------------------------------------- durations

@pytest.mark.parametrize("value, seconds", [
    ("90s", 90), ("10m", 600), ("4h", 14400), ("1d", 86400), ("30d", 2592000),
    ("1w", 604800), ("2h30m", 9000), ("1.5h", 5400), ("90", 90), (" 5m ", 300),
    (0, 0), (45, 45), (2.5, 2.5), ("0", 0), ("1e3", 1000),
])
def test_parse_duration(value, seconds):
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "m5", "5 m", "5y", "-5m", -1, True, None, "1h-",
                                   "nan", float("inf"), [], "5mm"])
def test_parse_duration_refuses(value):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(value)


@pytest.mark.parametrize("seconds, text", [
    (9000, "2h30m"), (90, "1m30s"), (604800 + 86400, "1w1d"), (0.5, "0.5s"), (0, "0s"),
    (-90, "-1m30s"), (math.inf, "inf"),
])
def test_format_duration(seconds, text):
    assert e.format_duration(seconds) == text
    if 0 <= seconds < math.inf:
        assert parse_duration(text) == seconds


# ---------------------------------------------------------------- levels

@pytest.mark.parametrize("text, value, true, false, shown", [
    ("> 90", 90, 90.5, 90, "> 90"),
    (">= 100", 100, 100, 99.9, ">= 100"),
    ("< 4h", 14400, 14399, 14400, "< 4h"),
    ("<=1d", 86400, 86400, 86401, "<= 1d"),
    ("== 1", 1, 1, 0, "== 1"),
    ("!= 0", 0, 1, 0, "!= 0"),
    ("< -5", -5, -6, -5, "< -5"),
    ("> 1e9", 1e9, 2e9, 1e9, "> 1e9"),
    ("< 1h", 3600, 0, math.inf, "< 1h"),
])
def test_parse_level(text, value, true, false, shown):
    level = parse_level(text)
    assert level.value == value
    assert level(true) is True and level(false) is False
    assert str(level) == shown
    assert level == parse_level(shown)


@pytest.mark.parametrize("text", ["90", "> ", "> x", "=> 5", "> 5 m", "> nan", "~ 3", None,
                                  ">> 3", "> load.1"])
def test_parse_level_refuses(text):
    with pytest.raises(ValueError, match="level|number or a duration"):
        parse_level(text)


# ---------------------------------------------------------------- parsing

@pytest.mark.parametrize("text, shown, keep", [
    ("avg(load.1, 5m)", "avg(load.1, 5m)", {"load.1": 300}),
    ("timeleft(disk.root.used_percent, 1h, 100)", "timeleft(disk.root.used_percent, 1h, 100)",
     {"disk.root.used_percent": 3600}),
    ("predict(disk.root.used_percent,1h,4h)", "predict(disk.root.used_percent, 1h, 4h)",
     {"disk.root.used_percent": 3600}),
    ("load.1", "load.1", {"load.1": 0}),
    ("checks.http-api.time * 1000", "checks.http-api.time * 1000", {"checks.http-api.time": 0}),
    ("a-b", "a-b", {"a-b": 0}),
    ("a - b", "a - b", {"a": 0, "b": 0}),
    ("-a * -2", "-a * -2", {"a": 0}),
    ("1 + 2 * 3", "7", {}),
    ("(1 + 2) * 3", "9", {}),
    ("a + b * c", "a + (b * c)", {"a": 0, "b": 0, "c": 0}),
    ("(a + b) * c", "(a + b) * c", {"a": 0, "b": 0, "c": 0}),
    ("a / b / c", "(a / b) / c", {"a": 0, "b": 0, "c": 0}),
    ("max(x, 1h) - min(x, 10m)", "max(x, 1h) - min(x, 10m)", {"x": 3600}),
    ("avg(x, 1h + 30m)", "avg(x, 1h30m)", {"x": 5400}),
    ("avg(x, 90)", "avg(x, 1m30s)", {"x": 90}),
    ("timeleft(x, 1h, -5)", "timeleft(x, 1h, -5)", {"x": 3600}),
    ("absent(load.1, 10m)", "absent(load.1, 10m)", {"load.1": 600}),
    ("rate(net.eth0.bytes_recv, 5m) * 8", "rate(net.eth0.bytes_recv, 5m) * 8",
     {"net.eth0.bytes_recv": 300}),
    ("sum(a,1m)+count(a,2m)+delta(a,3m)+last(a,4m)", None, {"a": 240}),
    ("avg(x, .5)", "avg(x, 0.5s)", {"x": 0.5}),
    ("_x.1", "_x.1", {"_x.1": 0}),
])
def test_parse(text, shown, keep):
    expr = parse(text)
    if shown is not None:
        assert str(expr) == shown
        assert str(parse(shown)) == shown
    assert expr.keep == keep
    assert expr.series == frozenset(keep)
    assert expr.text == text.strip()


@pytest.mark.parametrize("text, message", [
    ("avgg(x, 5m)", "column 1: unknown function 'avgg' (known: absent, avg, count, delta, "
                    "last, max, min, predict, rate, sum, timeleft)"),
    ("1 + avgg(x, 5m)", "column 5: unknown function 'avgg'"),
    ("rate(x)", "column 1: rate needs a window: rate(SERIES, WINDOW)"),
    ("predict(x, 1h)", "column 1: predict needs a horizon: predict(SERIES, WINDOW, HORIZON)"),
    ("timeleft(x, 1h)", "column 1: timeleft needs a threshold"),
    ("avg(x, 5m, 3)", "column 1: avg takes 2 arguments: avg(SERIES, WINDOW)"),
    ("avg(1, 5m)", "column 5: avg: the first argument must be a series name"),
    ("avg(x + 1, 5m)", "column 5: avg: the first argument must be a series name"),
    ("avg(x, y)", "column 8: avg: WINDOW must be a number or a duration, not a series"),
    ("predict(x, 1h, y)", "column 16: predict: HORIZON must be a number or a duration"),
    ("avg(x, 0)", "column 1: avg: the window must be above 0"),
    ("avg(x, -5m)", "column 1: avg: the window must be above 0"),
    ("avg(x 5m)", "column 7: avg: expected ',' or ')', found '5m'"),
    ("avg(x, 5m", "column 10: avg: expected ',' or ')', found the end"),
    ("(a + b", "column 7: expected ')' to close the '(' of column 1, found the end"),
    ("a +", "column 4: expected a number, a series or a function, found the end"),
    ("a b", "column 3: expected an operator or the end, found 'b'"),
    ("a )", "column 3: expected an operator or the end, found ')'"),
    ("", "column 1: empty expression"),
    ("   ", "column 1: empty expression"),
    ("5x", "column 1: unexpected '5x'"),
    ("a.b(c, 1m)", "column 1: unknown function 'a.b'"),
    ("load.", "column 1: unexpected 'load.'"),
    ("1 / 0", "column 6: division by zero in (1 / 0)"),
    ("avg(x, 1m / 0)", "division by zero"),
    ("x $ 2", "column 3: unexpected '$'"),
    ("avg(x, 5m) > 3", "column 12: unexpected '>': a comparison goes in the rule's warning "
                       "and critical levels"),
    ("(" * 60 + "x" + ")" * 60, "column 51: nested more than 50 deep"),
    ("-" * 60 + "x", "column 51: nested more than 50 deep"),
    ("x" * 3000, "longer than 2000 characters"),
    ("__import__('os')", "column 12: unexpected \"'os'\""),
])
def test_parse_errors(text, message):
    with pytest.raises(ExprError) as caught:
        parse(text)
    assert message in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_calls():
    expr = parse("absent(a, 10m) + predict(b, 1h, 4h) - c")
    assert [(c.func, c.series, c.window, c.argument) for c in expr.calls] == [
        ("absent", "a", 600, None), ("predict", "b", 3600, 14400), ("last", "c", None, None)]


def test_parse_refuses_a_non_string():
    with pytest.raises(ExprError, match="expected an expression as a string"):
        parse(5)


# ---------------------------------------------------------------- evaluation

def series(*pairs, keep=3600.0) -> Points:
    points = Points(keep)
    for age, value in pairs:                        # (seconds before NOW, value)
        points.append(NOW - age, value)
    return points


HOST = {
    "load.1": series((120, 1.0), (60, 2.0), (0, 3.0)),
    "disk.used": series(*[(age, 100.0 - age / 60) for age in range(3590, -1, -10)]),
    "bytes": series((40, 0.0), (30, 100.0), (20, 200.0), (10, 50.0), (0, 150.0)),
    "zero": series((0, 0.0)),
    "old": series((3000, 1.0), (300, 5.0)),
    "future": series((-10, 1.0)),
    "one": series((0, 9.0)),
}


def value(text, now=NOW, stale_after=300.0):
    return parse(text).evaluate(HOST.get, now, stale_after)


@pytest.mark.parametrize("text, expected", [
    ("load.1", 3.0),
    ("avg(load.1, 5m)", 2.0),
    ("avg(load.1, 60)", 3.0),                      # the point 60 s old is outside
    ("avg(load.1, 61)", 2.5),
    ("max(load.1, 5m) - min(load.1, 5m)", 2.0),
    ("sum(load.1, 1h) / count(load.1, 1h)", 2.0),
    ("delta(load.1, 5m)", 2.0),
    ("-load.1 * 2 + 10", 4.0),
    ("rate(bytes, 1m)", (100 + 100 + 50 + 100) / 40),
    ("predict(disk.used, 1h, 1h)", 160.0),
    ("timeleft(disk.used, 1h, 200)", 6000.0),
    ("timeleft(disk.used, 1h, 0)", math.inf),
    ("absent(nothing, 10m)", 1.0),
    ("absent(load.1, 10m)", 0.0),
    ("absent(old, 5m)", 1.0),                      # absent reads a stale series
    ("absent(old, 5m) + absent(load.1, 1m)", 1.0),
    ("load.1 / 0.5", 6.0),
    ("timeleft(disk.used, 1h, 0) * 0 + 1", None),  # inf * 0: not a number
])
def test_evaluate(text, expected):
    if expected is None:
        with pytest.raises(NoValue, match="not a number"):
            value(text)
    else:
        assert value(text) == pytest.approx(expected)


def test_a_series_never_seen():
    with pytest.raises(NoSeries) as caught:
        value("avg(load.1, 5m) + avg(load.5, 5m)")
    assert caught.value.name == "load.5"
    assert str(caught.value) == "no series load.5 on this host"


@pytest.mark.parametrize("text, now, stale_after, last", [
    # the newest point exactly stale_after old: stale
    ("load.1", NOW + 300, 300, NOW),
    ("avg(load.1, 1h)", NOW + 300, 300, NOW),      # whatever the window holds
    ("old", NOW, 300, NOW - 300),
    ("future", NOW, 300, None),                    # its only point is after now
])
def test_stale(text, now, stale_after, last):
    with pytest.raises(Stale) as caught:
        value(text, now, stale_after)
    assert caught.value.last == last
    assert caught.value.name == text.split("(")[-1].split(",")[0]
    assert "stale after 5m" in str(caught.value)


def test_not_stale_a_hair_inside():
    assert value("load.1", NOW + 299.9, 300) == 3.0
    assert value("old", NOW, 300.5) == 5.0


def test_stale_message():
    with pytest.raises(Stale, match=r"series old is stale: its last point is 5m old "
                                    r"\(stale after 5m\)"):
        value("old")
    with pytest.raises(Stale, match="series future is stale: no point yet"):
        value("future")


@pytest.mark.parametrize("text, message", [
    ("load.1 / zero", "division by zero"),
    ("load.1 / (one - 9)", "division by zero"),
    ("avg(load.1, 30s)", None),                   # not stale (3.0 at now) and a value
    ("avg(old, 1h)", "stale"),
    ("rate(one, 5m)", r"rate\(one, 5m\): fewer than two points in the last 5m"),
    ("predict(one, 5m, 1h)", "fewer than two points"),
    ("delta(one, 5m)", "fewer than two points"),
])
def test_no_value(text, message):
    if message is None:
        assert value(text) == 3.0
    elif message == "stale":
        with pytest.raises(Stale):
            value(text, stale_after=300)
    else:
        with pytest.raises(NoValue, match=message):
            value(text)


def test_a_window_shorter_than_the_gap():
    # not stale (a point 60 s old with stale_after 5m), but nothing in the last 30 s
    with pytest.raises(NoValue, match=r"avg\(load.1, 30s\): no point in the last 30s"):
        value("avg(load.1, 30s)", now=NOW + 60)


def test_the_errors_are_eval_errors():
    for cls in (NoSeries, Stale, NoValue):
        assert issubclass(cls, EvalError)
    assert not issubclass(EvalError, ValueError)       # a host's data, not a config error
