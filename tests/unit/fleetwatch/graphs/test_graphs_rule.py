"""fleetwatch/graphs/rule.py and what svg.py draws for it: a rule's series asked of Graphite by
their own targets (paths, or tagged), a counter drawn as its rate, a level a dashed line
within the value axis, a page a band cut to the graph's range in the lane of its set, every
word of it inert."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from urllib.parse import parse_qs

import pytest

from fleetwatch.graphs.host import NOT_CONFIGURED, OK
from fleetwatch.graphs.rule import rule_graph
from fleetwatch.graphs.settings import GraphiteWebSettings
from fleetwatch.graphs.svg import BOTTOM, TOP, chart

NS = "{http://www.w3.org/2000/svg}"
NOW = 1_800_000_000


class Render:
    """graphite-web's /render, faked: each target answered with ``points``."""

    def __init__(self, points):
        self.points, self.asked = points, []

    def __call__(self, url, body, timeout):
        form = parse_qs(body.decode())
        self.asked.append(form["target"])
        return 200, json.dumps([{"target": t, "datapoints": self.points}
                                for t in form["target"]]).encode()


@pytest.mark.parametrize("tags, target", [
    (False, "fleet.web-1_example.load.5"),
    (True, "fleet.load.5;host=web-1.example"),
])
def test_each_series_is_asked_by_its_own_target(tags, target):
    fake = Render([[1.0, NOW - 60], [2.0, NOW]])
    settings = GraphiteWebSettings(url="http://graphite", tags=tags)
    found = rule_graph(settings, "web-1.example", [("load.5", False), ("bad name!", False)],
                       3600, now=NOW, fetch=fake, title="rule:load")
    assert found.status == OK and fake.asked == [[target]]
    (graph,) = found.graphs
    assert "<polyline" in graph.svg and "load.5 (last 2)" in graph.svg


def test_a_counter_is_drawn_as_its_rate_and_a_missing_series_as_no_data():
    fake = Render([[100.0, NOW - 120], [160.0, NOW - 60]])
    found = rule_graph(GraphiteWebSettings(url="http://graphite"), "h",
                       [("netio.bytes_recv", True)], 3600, now=NOW, fetch=fake)
    assert "rate of netio.bytes_recv (/s) (last 1)" in found.graphs[0].svg
    nothing = rule_graph(GraphiteWebSettings(url="http://graphite"), "h", [("a.b", False)],
                         3600, now=NOW, fetch=lambda u, b, t: (200, b"[]"))
    assert "a.b (no data)" in nothing.graphs[0].svg
    assert rule_graph(None, "h", [("a.b", False)]).status == NOT_CONFIGURED


def test_levels_are_dashed_lines_within_the_axis_and_bands_fill_their_lane():
    svg = chart([("x", [(10.0, 0), (20.0, 100)])], start=0, end=100, width=600, height=160,
                levels=[("warning > 80", 80.0), ("inf", float("inf"))],
                bands=[("would page", [(-50, 25, "first"), (50, 200, "<b>open</b>"),
                                       (300, 400, "outside")]),
                       ("paged", [(40, 40, "an instant")])])
    root = ET.fromstring(svg)
    lines = [el for el in root.iter(f"{NS}line") if el.get("stroke-dasharray") == "6 3"]
    assert len(lines) == 1 and float(lines[0].get("y1")) == TOP      # 80: the axis' top
    shaded = [el for el in root.iter(f"{NS}rect") if el.get("fill-opacity") == "0.25"]
    assert [el.find(f"{NS}title").text for el in shaded] == ["first", "<b>open</b>",
                                                             "an instant"]
    lane = (160 - BOTTOM - TOP) / 2
    first, open_, instant = shaded
    assert float(first.get("y")) == TOP and float(first.get("height")) == pytest.approx(lane)
    assert float(instant.get("y")) == pytest.approx(TOP + lane)
    assert float(instant.get("width")) == 2.0                          # at least 2 pixels
    assert float(open_.get("x")) + float(open_.get("width")) == pytest.approx(600 - 12)
    assert "<b>" not in svg and "&lt;b&gt;open&lt;/b&gt;" in svg
    texts = [el.text for el in root.iter(f"{NS}text")]
    assert "warning &gt; 80" not in texts and "warning > 80" in texts
    assert "would page (3)" in texts and "paged (1)" in texts
    assert root.get("height") == str(160 + 16 * 4 + 4)       # a series, a level, two sets
