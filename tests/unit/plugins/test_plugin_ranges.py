"""plugins.nagios: threshold ranges, thresholds, perfdata formatting and the Check helper.

Table-driven, in process. The bundled checks built on this run as real subprocesses in
test_bundled_checks.py.
"""

import math
import re
import signal
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plugins.nagios import (Check, CheckTimeout, Perf, Range, Status, Thresholds,
                            format_number, quote_label, worst)

INF = math.inf

# text, values that alert, values that do not
RANGES = [
    ("10", [-1, -0.001, 10.001, 11, INF], [0, 5, 10]),
    ("10:", [9.999, 0, -5], [10, 11, 1e12]),
    ("~:10", [10.5, 1e12], [-1e12, -1, 0, 10]),
    ("10:20", [9.99, 20.01, -10], [10, 15, 20]),
    ("@10:20", [10, 15, 20], [9.99, 20.01, 0]),
    ("-5:5", [-5.01, 5.01], [-5, 0, 5]),
    ("@-5.5:-1", [-5.5, -3, -1], [-5.6, -0.9, 0]),
    ("0.5", [0.51, -0.1], [0, 0.25, 0.5]),
    (".5:1.5", [0.4, 1.6], [0.5, 1.5]),
    ("+3", [3.1], [3]),
    (":10", [-1, 11], [0, 10]),
    ("~:", [], [-1e300, 0, 1e300]),
    ("@~:", [-1e300, 0, 1e300], []),
    ("@0", [0], [-0.1, 0.1]),
    ("0", [-0.1, 0.1], [0]),
    (" 10:20 ", [21], [15]),
]


@pytest.mark.parametrize("text, alerting, quiet", RANGES)
def test_range_alerts(text, alerting, quiet):
    r = Range.parse(text)
    for value in alerting:
        assert r.alert(value), f"{text!r} should alert on {value}"
    for value in quiet:
        assert not r.alert(value), f"{text!r} should not alert on {value}"
    assert str(r) == text.strip()
    assert Range.parse(str(r)) == r


def test_range_nan_alerts_unless_inside():
    assert Range.parse("10").alert(math.nan)
    assert not Range.parse("@0:10").alert(math.nan)


BAD_RANGES = [
    ("", "empty"),
    ("   ", "empty"),
    ("@", "empty"),
    ("abc", "'abc' is not a number"),
    ("10:5", "start 10 is greater than end 5"),
    ("-5", "start 0 is greater than end -5"),
    ("1e3", "not a number"),
    ("~", "not a number"),
    ("~10", "not a number"),
    ("10:~", "not a number"),
    ("10:20:30", "not a number"),
    ("@@5", "not a number"),
    ("nan", "not a number"),
    ("inf", "not a number"),
    ("1,2", "not a number"),
    ("5-", "not a number"),
    ("1 0", "not a number"),
]


@pytest.mark.parametrize("text, message", BAD_RANGES)
def test_range_rejects(text, message):
    with pytest.raises(ValueError) as info:
        Range.parse(text)
    assert message in str(info.value)
    assert repr(text) in str(info.value)


@pytest.mark.parametrize("value, text", [(10, "10"), (2.5, "2.5"), (0, "0")])
def test_range_from_number(value, text):
    assert str(Range.parse(value)) == text


@pytest.mark.parametrize("args, text", [
    ((0, 10), "10"),
    ((10, INF), "10:"),
    ((-INF, 10), "~:10"),
    ((10, 20, True), "@10:20"),
    ((0, 20, True), "@20"),
    ((-INF, INF), "~:"),
    ((0, INF), "0:"),
    ((0.5, 2.25), "0.5:2.25"),
    ((-3, -1), "-3:-1"),
    ((1e10, 2e10), "10000000000:20000000000"),
])
def test_range_canonical_text(args, text):
    r = Range(*args)
    assert str(r) == text
    assert Range.parse(text) == r


def test_range_constructor_checks_order():
    with pytest.raises(ValueError):
        Range(5, 1)


# warn, crit, value, expected status
THRESHOLDS = [
    (None, None, 1e9, Status.OK),
    ("10", "20", 5, Status.OK),
    ("10", "20", 10, Status.OK),
    ("10", "20", 15, Status.WARNING),
    ("10", "20", 25, Status.CRITICAL),
    ("10:", "5:", 7, Status.WARNING),
    ("10:", "5:", 3, Status.CRITICAL),
    ("@0:5", None, 3, Status.WARNING),
    (None, "@0:5", 3, Status.CRITICAL),
    ("20", "10", 15, Status.CRITICAL),  # critical wins even when narrower
    (Range.parse("1"), 2, 1.5, Status.WARNING),
    ("", "", 100, Status.OK),
]


@pytest.mark.parametrize("warn, crit, value, status", THRESHOLDS)
def test_thresholds(warn, crit, value, status):
    assert Thresholds(warn, crit).status(value) is status


@pytest.mark.parametrize("warn, crit, count, values, statuses", [
    ("4,3,2", "8,6,4", 3, [1, 1, 1], [0, 0, 0]),
    ("4,3,2", "8,6,4", 3, [5, 3.5, 5], [1, 1, 2]),
    ("4", "8", 3, [5, 9, 1], [1, 2, 0]),
    ("4,,2", None, 3, [5, 100, 3], [1, 0, 1]),
    (None, None, 2, [1e9, -1e9], [0, 0]),
    ("@1:2,10:", None, 2, [1.5, 5], [1, 1]),
])
def test_threshold_lists(warn, crit, count, values, statuses):
    ths = Thresholds.parse_list(warn, crit, count)
    assert len(ths) == count
    assert [th.status(v) for th, v in zip(ths, values)] == statuses


@pytest.mark.parametrize("warn, crit, count, message", [
    ("1,2", None, 3, "-w/--warning: expected 1 or 3 comma-separated ranges, got 2 in '1,2'"),
    (None, "1,2,3,4", 3, "-c/--critical: expected 1 or 3 comma-separated ranges, got 4"),
    ("1,2", None, 1, "-w/--warning: expected one range, got 2"),
    ("x", None, 1, "-w/--warning: bad range 'x'"),
    ("1,2:1,3", None, 3, "-w/--warning: bad range '2:1': start 2 is greater than end 1"),
])
def test_threshold_list_errors(warn, crit, count, message):
    with pytest.raises(ValueError) as info:
        Thresholds.parse_list(warn, crit, count)
    assert message in str(info.value)


@pytest.mark.parametrize("statuses, expected", [
    ([], Status.OK),
    ([0, 0], Status.OK),
    ([0, 3], Status.UNKNOWN),
    ([3, 1], Status.WARNING),
    ([2, 3, 1], Status.CRITICAL),
    ([1, 0], Status.WARNING),
])
def test_worst(statuses, expected):
    assert worst(statuses) is expected


@pytest.mark.parametrize("value, text", [
    (0, "0"), (5, "5"), (-7, "-7"), (5.0, "5"), (-0.0, "0"), (0.25, "0.25"), (-2.5, "-2.5"),
    (1 / 3, "0.333333"), (2 / 3, "0.666667"), (0.1 + 0.2, "0.3"),
    (1234.5678901, "1234.56789"), (0.000123, "0.000123"), (0.0001234567, "0.000123457"),
    (1e-7, "0.0000001"), (1e-20, "0"), (10 ** 20, "100000000000000000000"),
    (1e20, "100000000000000000000"), (23493345280, "23493345280"), (True, "1"),
])
def test_format_number(value, text):
    assert format_number(value) == text


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False, min_value=-1e30, max_value=1e30))
def test_format_number_is_plain_and_close(x):
    text = format_number(x)
    assert re.fullmatch(r"-?\d+(?:\.\d+)?", text)
    assert math.isclose(float(text), x, rel_tol=1e-5, abs_tol=1e-14)


_bounds = st.integers(-10 ** 6, 10 ** 6).map(lambda n: n / 1000)


@settings(max_examples=300, deadline=None)
@given(_bounds, _bounds, st.booleans(), st.booleans(), st.booleans(), _bounds)
def test_constructed_ranges_print_and_parse_back(a, b, inside, open_start, open_end, value):
    lo, hi = min(a, b), max(a, b)
    r = Range(-INF if open_start else lo, INF if open_end else hi, inside)
    again = Range.parse(str(r))
    assert again == r
    assert again.alert(value) == r.alert(value) == ((r.start <= value <= r.end) == inside)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_format_number_rejects_non_finite(value):
    with pytest.raises(ValueError):
        format_number(value)


PERFDATA = [
    (Perf("load1", 0.5), "load1=0.5"),
    (Perf("load1", 0.5, "", "4", "8", 0), "load1=0.5;4;8;0"),
    (Perf("x", 1, "", None, None, 0), "x=1;;;0"),
    (Perf("x", 1, "", None, None, None, 100), "x=1;;;;100"),
    (Perf("x", 1, "", "", None, None, None), "x=1"),
    (Perf("/", 123, "B", min=0, max=1000), "/=123B;;;0;1000"),
    (Perf("time", 0.000123, "s", 1, 2.5, 0, 10), "time=0.000123s;1;2.5;0;10"),
    (Perf("pct", 5, "%", Range.parse("@10:20"), "~:5", 0, 100), "pct=5%;@10:20;~:5;0;100"),
    (Perf("pct", 5, "%", Range(-INF, 3)), "pct=5%;~:3"),
    (Perf("c", 1234, "c"), "c=1234c"),
    (Perf("x", None), "x=U"),
    (Perf("x", None, "s", "1", "2"), "x=U;1;2"),
    (Perf("x", math.nan), "x=U"),
    (Perf("x", -1.5, "", "-5:5"), "x=-1.5;-5:5"),
    (Perf("x", 1, "", " 10 "), "x=1;10"),
    (Perf("my disk", 1), "'my disk'=1"),
    (Perf("a=b", 1), "'a=b'=1"),
    (Perf("it's", 1), "'it''s'=1"),
    (Perf("'", 1), "''''=1"),
    (Perf("a;b", 1), "'a;b'=1"),
    (Perf("a|b", 1), "'a|b'=1"),
    (Perf("/var/lib/docker", 1, "B"), "/var/lib/docker=1B"),
    (Perf("käse", 2), "käse=2"),
]


@pytest.mark.parametrize("perf, text", PERFDATA)
def test_perfdata_format(perf, text):
    assert str(perf) == text


@pytest.mark.parametrize("perf, text", PERFDATA)
def test_perfdata_round_trips_through_the_parser(perf, text):
    from plugins import output
    parsed = output.parse(f"TEST OK - fine | {text}\n".encode())
    assert parsed.bad_perfdata == 0
    [item] = parsed.perfdata
    assert item["label"] == perf.label
    if perf.value is None or (isinstance(perf.value, float) and math.isnan(perf.value)):
        assert item["value"] is None
    else:
        assert item["value"] == pytest.approx(perf.value, rel=1e-5, abs=1e-9)
        assert item["uom"] == perf.uom
    for key, value in (("warn", perf.warn), ("crit", perf.crit)):
        want = None if value in (None, "") else str(value).strip()
        assert item[key] == want
    assert item["min"] == perf.min and item["max"] == perf.max


@pytest.mark.parametrize("kwargs, message", [
    (dict(label="", value=1), "bad perfdata label"),
    (dict(label="a\nb", value=1), "bad perfdata label"),
    (dict(label="tab\there", value=1), "bad perfdata label"),
    (dict(label="x", value=1, uom="1"), "bad perfdata unit"),
    (dict(label="x", value=1, uom="s;"), "bad perfdata unit"),
    (dict(label="x", value=1, uom=" s"), "bad perfdata unit"),
    (dict(label="x", value=1, warn="ten"), "bad range 'ten'"),
    (dict(label="x", value=math.inf), "not a finite number"),
    (dict(label="x", value=1, min=math.nan), "not a finite number"),
])
def test_perfdata_rejects(kwargs, message):
    with pytest.raises(ValueError) as info:
        Perf(**kwargs)
    assert message in str(info.value)


def test_quote_label_only_when_needed():
    assert quote_label("load1") == "load1"
    assert quote_label("C:\\ drive") == "'C:\\ drive'"


# ---------------------------------------------------------------------------- the Check helper


def run_check(body, argv, capsys, **kwargs):
    """Run a Check in process: (exit status, stdout lines)."""
    check = Check("test", "A test check.", prog="check_test", **kwargs)
    with pytest.raises(SystemExit) as info:
        check.run(body, argv)
    out = capsys.readouterr()
    return info.value.code, out.out.splitlines(), out.err


def test_check_output_and_worst_status(capsys):
    def body(check, args):
        check.add(Status.OK, "disk a fine")
        check.add(Status.CRITICAL, "disk b full")
        check.add(Status.WARNING, "disk c filling")
        check.perf("a", 10, "%", "80", "90", 0, 100)
        check.perf("b", 99, "%", "80", "90", 0, 100)
        check.long("first detail")
        check.long("second | with a bar\nand a newline")

    code, lines, err = run_check(body, [], capsys)
    assert code == 2 and err == ""
    assert lines == [
        "TEST CRITICAL - disk b full; disk c filling; disk a fine"
        " | a=10%;80;90;0;100 b=99%;80;90;0;100",
        "first detail",
        "second \u00a6 with a bar",
        "and a newline",
    ]


@pytest.mark.parametrize("statuses, code", [([0], 0), ([0, 1], 1), ([2, 1], 2), ([3], 3),
                                            ([0, 3], 3), ([3, 1], 1)])
def test_check_exit_codes(capsys, statuses, code):
    def body(check, args):
        for s in statuses:
            check.add(s, f"state {s}")

    assert run_check(body, [], capsys)[0] == code


def test_check_thresholds_from_arguments(capsys):
    def body(check, args):
        for i, value in enumerate((1, 5, 10)):
            check.evaluate(value, f"v{i}={value}", i)
            th = check.thresholds[i]
            check.perf(f"v{i}", value, "", th.warning, th.critical)

    code, lines, _ = run_check(body, ["-w", "4,4,20", "-c", "~:9"], capsys, values=3)
    assert code == 2
    assert lines == ["TEST CRITICAL - v2=10; v1=5; v0=1 | v0=1;4;~:9 v1=5;4;~:9 v2=10;20;~:9"]


def test_check_negative_ranges_are_values_not_options(capsys):
    def body(check, args):
        check.evaluate(-7, "minus seven")

    assert run_check(body, ["-w", "-5:5", "-c", "-10:10"], capsys)[0] == 1
    assert run_check(body, ["-w", "-5.5:5"], capsys)[0] == 1
    assert run_check(body, ["-w=-8:5"], capsys)[0] == 0


@pytest.mark.parametrize("argv, message", [
    (["-w", "abc"], "bad arguments: -w/--warning: bad range 'abc': 'abc' is not a number"),
    (["-c", "5:1"], "bad arguments: -c/--critical: bad range '5:1'"),
    (["-w"], "bad arguments: argument -w/--warning: expected one argument"),
    (["--bogus"], "bad arguments: unrecognized arguments: --bogus"),
    (["extra"], "bad arguments: unrecognized arguments: extra"),
    (["-t", "0"], "bad arguments: argument -t/--timeout: expected a positive number"),
    (["-t", "soon"], "bad arguments: argument -t/--timeout: expected a positive number"),
    (["-t", "nan"], "bad arguments: argument -t/--timeout: expected a positive number"),
])
def test_check_usage_errors_are_one_unknown_line(capsys, argv, message):
    ran = []
    code, lines, err = run_check(lambda check, args: ran.append(1), argv, capsys)
    assert code == 3 and not ran and err == ""
    assert len(lines) == 1
    assert lines[0].startswith("TEST UNKNOWN - " + message), lines[0]
    assert lines[0].endswith("(see check_test --help)")


def test_check_help_exits_unknown(capsys):
    code, lines, _ = run_check(lambda check, args: None, ["--help"], capsys)
    assert code == 3
    assert lines[0].startswith("usage: check_test")


def test_check_exception_is_unknown_in_one_line(capsys):
    def body(check, args):
        check.add(Status.OK, "half done")
        check.perf("x", 1)
        raise RuntimeError("boom\nsecond line | not perfdata")

    code, lines, _ = run_check(body, [], capsys)
    assert code == 3
    assert lines == ["TEST UNKNOWN - RuntimeError: boom second line \u00a6 not perfdata"]


def test_check_that_reports_nothing_is_unknown(capsys):
    code, lines, _ = run_check(lambda check, args: None, [], capsys)
    assert (code, lines) == (3, ["TEST UNKNOWN - the check reported nothing"])


def test_check_exit_from_the_body(capsys):
    def body(check, args):
        check.exit(Status.CRITICAL, "gone")

    assert run_check(body, [], capsys)[:2] == (2, ["TEST CRITICAL - gone"])


def test_check_timeout_is_unknown_and_restores_the_alarm(capsys):
    handler = signal.getsignal(signal.SIGALRM)

    def body(check, args):
        assert 0 < check.remaining() <= 0.2
        time.sleep(5)  # a hung check: the -t alarm interrupts it

    started = time.monotonic()
    code, lines, _ = run_check(body, ["-t", "0.2"], capsys)
    assert time.monotonic() - started < 2
    assert (code, lines) == (3, ["TEST UNKNOWN - timed out after 0.2 s"])
    assert signal.getsignal(signal.SIGALRM) is handler


def test_check_body_may_handle_its_timeout(capsys):
    def body(check, args):
        try:
            time.sleep(5)
        except CheckTimeout:
            check.exit(Status.CRITICAL, "no answer in time")

    assert run_check(body, ["-t", "0.1"], capsys)[:2] == (2, ["TEST CRITICAL - no answer in time"])


def test_check_output_is_utf8_whatever_the_text(capsys):
    def body(check, args):
        check.add(Status.OK, "caf\u00e9 /mnt/\udcff")

    code, lines, _ = run_check(body, [], capsys)
    assert lines == ["TEST OK - caf\u00e9 /mnt/\\udcff"]
