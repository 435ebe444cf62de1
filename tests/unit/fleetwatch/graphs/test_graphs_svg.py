"""fleetwatch/graphs/svg.py: series drawn as inline SVG, deterministic, every label inert."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from fleetwatch.graphs.svg import BOTTOM, LEFT, MAX_LABEL, RIGHT, TOP, chart, number, runs

NS = "{http://www.w3.org/2000/svg}"
W, H = 600, 160
X0, X1, Y0, Y1 = LEFT, W - RIGHT, TOP, H - BOTTOM


def parse(svg: str) -> ET.Element:
    return ET.fromstring(svg)          # well-formed XML, or this raises


def polylines(root) -> list[list[tuple[float, float]]]:
    return [[tuple(float(c) for c in p.split(",")) for p in el.get("points").split()]
            for el in root.iter(f"{NS}polyline")]


def texts(root) -> list[str]:
    return [el.text for el in root.iter(f"{NS}text")]


def test_the_points_of_the_polyline_follow_the_data():
    points = [(0.0, 1000), (5.0, 1010), (10.0, 1020), (2.5, 1030), (7.5, 1040)]
    root = parse(chart([("load", points)], width=W, height=H))
    [line] = polylines(root)
    assert len(line) == 5
    for (value, ts), (x, y) in zip(points, line):
        assert x == pytest.approx(X0 + (ts - 1000) / 40 * (X1 - X0), abs=0.01)
        assert y == pytest.approx(Y1 - value / 10 * (Y1 - Y0), abs=0.01)
    # the largest value at the top, the smallest at the bottom
    assert line[2][1] == Y0 and line[0][1] == Y1
    assert "10" in texts(root) and "0" in texts(root)


def test_start_and_end_set_the_time_axis():
    root = parse(chart([("a", [(1.0, 1500), (2.0, 2000)])], start=1000, end=2000))
    [line] = polylines(root)
    assert line[0][0] == pytest.approx(X0 + (X1 - X0) / 2)
    assert line[1][0] == pytest.approx(X1)
    # times under the axis, UTC: start, middle, end
    assert texts(root)[-4:-1] == ["00:16", "00:25", "00:33 UTC"]


def test_none_is_a_gap_and_a_lone_point_is_a_dot():
    points = [(1.0, 0), (2.0, 1), (None, 2), (3.0, 3), (None, 4), (4.0, 5), (5.0, 6)]
    root = parse(chart([("a", points)]))
    lines = polylines(root)
    assert [len(line) for line in lines] == [2, 2]
    dots = list(root.iter(f"{NS}circle"))
    assert len(dots) == 1
    assert float(dots[0].get("cx")) == pytest.approx(X0 + 3 / 6 * (X1 - X0))
    assert runs(points) == [[(1.0, 0), (2.0, 1)], [(3.0, 3)], [(4.0, 5), (5.0, 6)]]
    assert runs([(float("nan"), 0), (1.0, 1), (float("inf"), 2)]) == [[(1.0, 1)]]


def test_several_series_share_the_scale_and_get_a_legend():
    a = [(0.0, 0), (1.0, 10)]
    b = [(100.0, 0), (50.0, 10)]
    root = parse(chart([("a", a), ("b", b)], title="two"))
    la, lb = polylines(root)
    assert la[0][1] == Y1 and lb[0][1] == Y0          # 0 at the bottom, 100 at the top
    assert lb[1][1] == pytest.approx((Y0 + Y1) / 2)
    colours = {el.get("stroke") for el in root.iter(f"{NS}polyline")}
    assert len(colours) == 2
    assert "a (last 1)" in texts(root) and "b (last 50)" in texts(root)
    assert root.get("height") == str(H + 2 * 16 + 4)
    assert texts(root)[0] == "two" and root.find(f"{NS}title").text == "two"


def test_deterministic():
    series = [("x", [(1.5, 0), (None, 1), (2.25, 2)]), ("y", [(3.0, 0), (1.0, 2)])]
    assert chart(series, title="t") == chart(list(series), title="t")


def test_flat_and_empty_series_draw():
    flat = parse(chart([("flat", [(5.0, 0), (5.0, 10)])]))
    [line] = polylines(flat)
    assert line[0][1] == line[1][1] == pytest.approx((Y0 + Y1) / 2)
    empty = parse(chart([("none", [(None, 0), (None, 10)])]))
    assert polylines(empty) == [] and "no data" in texts(empty)
    assert "none (no data)" in texts(empty)
    nothing = parse(chart([]))
    assert "no data" in texts(nothing)


HOSTILE = [
    '<script>alert(1)</script>',
    '"><img src=x onerror=alert(1)>',
    "' onload='alert(1)",
    "]]><script>alert(2)</script>",
    "&lt;already&gt; & <b>bold</b>",
    "a\x1b[31mred\x00\u202egnp.exe\n<svg onload=alert(3)>",
    "x" * 500 + "<script>",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_are_inert(name):
    svg = chart([(name, [(1.0, 0), (2.0, 1)])], title=name)
    root = parse(svg)                           # still one well-formed document
    tags = {el.tag for el in root.iter()}
    assert tags <= {f"{NS}{t}" for t in ("svg", "title", "text", "rect", "polyline",
                                         "circle", "g")}
    for el in root.iter():
        assert not any(a.lower().startswith("on") or "href" in a.lower() for a in el.attrib)
    assert "<script" not in svg.lower() and "<img" not in svg.lower()
    assert not re.search(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\u202e]", svg)
    legend = texts(root)[-1]
    assert len(legend) <= MAX_LABEL + len(" (last 2)")
    if "\x1b" in name:
        assert "\\x1b" in legend and "\\u202e" in legend and "\\n" in legend


@pytest.mark.parametrize("value, shown", [
    (0, "0"), (1, "1"), (0.5, "0.5"), (1234, "1.23k"), (2.5e6, "2.5M"), (8 * 1024 ** 3, "8.59G"),
    (-1500, "-1.5k"), (0.0042, "4.2m"), (3e-5, "30u"), (1e-9, "1.00e-09"), (99.99, "100"),
])
def test_value_labels(value, shown):
    assert number(value) == shown
