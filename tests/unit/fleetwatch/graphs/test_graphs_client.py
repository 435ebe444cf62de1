"""fleetwatch/graphs: the render client and the host page helper against a fake graphite-web
(the ``fetch`` callable), every failure a value; the operator config's graphite section."""

from __future__ import annotations

import json
import re
import socket
import urllib.error
import urllib.parse

import pytest

from fleetwatch.cli.operator import OperatorConfig
from fleetwatch.config import ConfigError, build
from fleetwatch.graphs import GraphError, Graphite, GraphiteWebSettings, Series, host_graphs

URL = "http://graphite.test:8080"


class FakeGraphite:
    """graphite-web's find and render over a dict ``{path: [(value, ts), ...]}``."""

    def __init__(self, series: dict):
        self.series = series
        self.calls: list[tuple[str, dict]] = []

    def __call__(self, url: str, body: bytes | None, timeout: float):
        parts = urllib.parse.urlsplit(url)
        params = urllib.parse.parse_qs(body.decode() if body is not None else parts.query)
        self.calls.append((parts.path, params))
        if parts.path == "/metrics/find":
            return 200, json.dumps(self.find(params["query"][0])).encode()
        if parts.path == "/tags/findSeries":
            return 200, json.dumps(self.find_series(params["expr"])).encode()
        if parts.path == "/render":
            start, end = int(params["from"][0]), int(params["until"][0])
            return 200, json.dumps([
                {"target": t, "tags": {"name": t},
                 "datapoints": [[v, ts] for v, ts in self.series[t] if start <= ts <= end]}
                for t in params["target"] if t in self.series]).encode()
        return 404, b""

    def find(self, query: str) -> list[dict]:
        depth = query.count(".") + 1
        pattern = query.split(".")
        nodes = {}
        for path in self.series:
            parts = path.split(".")
            if len(parts) < depth or any(p != "*" and p != q for p, q in zip(pattern, parts)):
                continue
            nodes[".".join(parts[:depth])] = len(parts) == depth
        return [{"path": p, "is_leaf": leaf} for p, leaf in sorted(nodes.items())]

    def find_series(self, exprs: list[str]) -> list[str]:
        """The tagged series matching every ``tag=value`` or ``tag=~regex`` of ``exprs``."""
        def tags(series: str) -> dict:
            name, *pairs = series.split(";")
            return {"name": name, **dict(p.split("=", 1) for p in pairs)}

        def match(t: dict, expr: str) -> bool:
            if "=~" in expr:
                key, regex = expr.split("=~", 1)
                return key in t and re.search(regex, t[key]) is not None
            key, value = expr.split("=", 1)
            return t.get(key) == value
        return sorted(s for s in self.series if ";" in s
                      and all(match(tags(s), e) for e in exprs))


SERIES = {
    "fleet.web1_example_com.cpu.percent": [(10.0, 100), (None, 110), (30.0, 120)],
    "fleet.web1_example_com.load.1": [(0.5, 100), (0.7, 120)],
    "fleet.web1_example_com.load.5": [(0.4, 100), (0.6, 120)],
    "fleet.web1_example_com.checks.disk_root._": [(2.5e10, 100)],
    "fleet.web1_example_com.checks.disk_root.status": [(0, 100), (1, 120)],
    "fleet.other.cpu.percent": [(99.0, 100)],
}


def test_metrics_are_the_host_leaves_found_level_by_level():
    fake = FakeGraphite(SERIES)
    client = Graphite(URL, fetch=fake)
    assert client.metrics("web1.example.com") == sorted(
        p for p in SERIES if p.startswith("fleet.web1_example_com."))
    assert [c[1]["query"][0] for c in fake.calls] == [
        "fleet.web1_example_com.*", "fleet.web1_example_com.*.*",
        "fleet.web1_example_com.*.*.*"]
    assert all(c[1]["format"] == ["json"] for c in fake.calls)


def test_the_host_name_is_the_sinks_node_so_globs_cannot_reach_other_hosts():
    client = Graphite(URL, fetch=FakeGraphite(SERIES), prefix="")
    assert client.host_path("*") == "_"
    assert client.host_path("a.b{c,d}[x]") == "a_b_c_d_x_"
    assert Graphite(URL, prefix="dc1.fleet").host_path("web1") == "dc1.fleet.web1"


def test_render_posts_its_targets_and_reads_json():
    fake = FakeGraphite(SERIES)
    client = Graphite(URL, fetch=fake)
    got = client.render(["fleet.web1_example_com.cpu.percent", "fleet.other.cpu.percent"],
                        105, 130, max_points=300)
    assert got == [Series("fleet.web1_example_com.cpu.percent", ((None, 110), (30.0, 120))),
                   Series("fleet.other.cpu.percent", ())]
    path, params = fake.calls[-1]
    assert path == "/render" and params["maxDataPoints"] == ["300"]
    assert params["from"] == ["105"] and params["until"] == ["130"]
    assert client.render([], 0, 1) == []


def test_unknown_host():
    client = Graphite(URL, fetch=FakeGraphite(SERIES))
    err = client.metrics("db9")
    assert isinstance(err, GraphError) and err.kind == "unknown host"
    assert str(err) == ("Graphite has no series under fleet.db9 (if the graphite sink has "
                        "tags: true, set graphite.tags: true)")
    assert client.metrics("...").kind == "unknown host"


# ---------------------------------------------------------------- tagged series

TAGGED = {
    "fleet.cpu.percent;host=web1.example.com": [(10.0, 100), (None, 110), (30.0, 120)],
    "fleet.load.1;host=web1.example.com": [(0.5, 100), (0.7, 120)],
    "fleet.load.5;host=web1.example.com": [(0.4, 100), (0.6, 120)],
    "fleet.checks.disk_root._;host=web1.example.com": [(2.5e10, 100)],
    "fleet.checks.disk_root.status;host=web1.example.com": [(0, 100), (1, 120)],
    "fleet.cpu.percent;host=web2": [(99.0, 100)],                 # another host
    "fleetx.cpu.percent;host=web1.example.com": [(98.0, 100)],    # another prefix
    "fleet.fleetwatch.sent;id=web1.example.com": [(5.0, 100)],    # a process's counter
    "fleet.web1_example_com.cpu.percent": [(97.0, 100)],          # a host path
}


def test_tagged_metrics_come_from_the_tag_database():
    fake = FakeGraphite(TAGGED)
    client = Graphite(URL, fetch=fake, tags=True)
    assert client.metrics("web1.example.com") == [
        "fleet.checks.disk_root._;host=web1.example.com",
        "fleet.checks.disk_root.status;host=web1.example.com",
        "fleet.cpu.percent;host=web1.example.com",
        "fleet.load.1;host=web1.example.com",
        "fleet.load.5;host=web1.example.com"]
    assert fake.calls == [("/tags/findSeries",
                           {"expr": ["host=web1.example.com", "name=~^fleet\\."]})]
    assert Graphite(URL, fetch=FakeGraphite(TAGGED), tags=True, max_series=2).metrics(
        "web1.example.com") == ["fleet.checks.disk_root._;host=web1.example.com",
                                "fleet.checks.disk_root.status;host=web1.example.com"]


def test_the_host_tag_is_the_sinks_tag_value_so_expressions_cannot_be_changed():
    client = Graphite(URL, tags=True, prefix="")
    assert client.host_expressions("web1.example.com") == ["host=web1.example.com"]
    assert client.host_expressions("a=~.*;b!=c") == ["host=a_._b_c"]
    assert Graphite(URL, tags=True, prefix="dc1.fleet").host_expressions("w") == [
        "host=w", "name=~^dc1\\.fleet\\."]


def test_relative_names_either_way():
    tagged, paths = Graphite(URL, tags=True), Graphite(URL)
    assert tagged.relative("fleet.cpu.percent;host=web1.example.com", "web1.example.com") \
        == "cpu.percent"
    assert paths.relative("fleet.web1_example_com.cpu.percent", "web1.example.com") \
        == "cpu.percent"
    assert Graphite(URL, tags=True, prefix="").relative("load.1;host=h", "h") == "load.1"


def test_tagged_unknown_host_says_where_it_looked():
    err = Graphite(URL, fetch=FakeGraphite(TAGGED), tags=True).metrics("db9")
    assert err.kind == "unknown host"
    assert str(err).startswith("Graphite's tag database has no series host=db9 "
                               "name=~^fleet\\. (if the graphite sink has tags: false, set "
                               "graphite.tags: false;")


@pytest.mark.parametrize("answer", [b'{"a": 1}', b'[1, 2]', b'[["x"]]'])
def test_a_find_series_answer_of_another_shape_is_a_bad_answer(answer):
    err = Graphite(URL, fetch=answering(200, answer), tags=True).metrics("web1")
    assert err.kind == "bad answer" and "/tags/findSeries" in err.message


def test_host_graphs_of_tagged_series_are_the_same_graphs():
    tagged = host_graphs(GraphiteWebSettings(url=URL, tags=True), "web1.example.com", 60,
                         now=130, fetch=FakeGraphite(TAGGED))
    paths = host_graphs(GraphiteWebSettings(url=URL), "web1.example.com", 60, now=130,
                        fetch=FakeGraphite(SERIES))
    assert tagged.status == "ok"
    assert [g.title for g in tagged.graphs] == [g.title for g in paths.graphs]
    assert [g.svg for g in tagged.graphs] == [g.svg for g in paths.graphs]
    assert [s.name for s in tagged.graphs[1].series] == [
        "fleet.load.1;host=web1.example.com", "fleet.load.5;host=web1.example.com"]


def raising(exc):
    def fetch(url, body, timeout):
        raise exc
    return fetch


def answering(status, body=b""):
    return lambda url, body_, timeout: (status, body)


@pytest.mark.parametrize("fetch, kind, words", [
    (raising(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))),
     "unreachable", "is unreachable: Connection refused"),
    (raising(urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))),
     "unreachable", "is unreachable: Name or service not known"),
    (raising(urllib.error.URLError(TimeoutError("timed out"))), "timeout", "within 2s"),
    (raising(TimeoutError("timed out")), "timeout", "did not answer /metrics/find within 2s"),
    (raising(ConnectionResetError(104, "Connection reset by peer")), "unreachable",
     "Connection reset by peer"),
    (raising(ValueError("answer longer than 67108864 bytes")), "bad answer", "longer than"),
    (answering(500), "http", "answered HTTP 500 to /metrics/find"),
    (answering(200, b"<html>not json</html>"), "bad answer", "did not answer JSON"),
    (answering(200, b"\xff\xfe"), "bad answer", "did not answer JSON"),
    (answering(200, b'{"path": "x"}'), "bad answer", "a list of nodes"),
    (answering(200, b'[{"path": 1, "is_leaf": true}]'), "bad answer", "a list of nodes"),
])
def test_failures_are_values(fetch, kind, words):
    err = Graphite(URL, timeout=2, fetch=fetch).metrics("web1")
    assert isinstance(err, GraphError), err
    assert err.kind == kind and words in err.message, err
    assert "\n" not in err.message


@pytest.mark.parametrize("answer", [
    {"target": "x"}, [{"target": "x"}], [{"target": 1, "datapoints": []}],
    [{"target": "x", "datapoints": [[1, 2, 3]]}], [{"target": "x", "datapoints": [["1", 2]]}],
    [{"target": "x", "datapoints": [[1, None]]}], [{"target": "x", "datapoints": [[True, 2]]}],
    [{"target": "x", "datapoints": [[1, 1e9999]]}],
])
def test_a_render_answer_of_another_shape_is_a_bad_answer(answer):
    got = Graphite(URL, fetch=answering(200, json.dumps(answer).encode())).render(["x"], 0, 1)
    assert isinstance(got, GraphError) and got.kind == "bad answer"


def test_infinite_values_are_gaps():
    # graphite-web writes an infinite value as 1e9999, NaN as null
    body = b'[{"target": "x", "datapoints": [[1e9999, 1], [null, 2], [3, 3]]}]'
    got = Graphite(URL, fetch=answering(200, body)).render(["x"], 0, 5)
    assert got == [Series("x", ((None, 1), (None, 2), (3.0, 3)))]


# ---------------------------------------------------------------- the host page helper

def test_host_graphs_without_graphite_url_says_not_configured():
    for settings in (None, GraphiteWebSettings(),
                     build(OperatorConfig, {"routers": ["tcp://r:1"]}).graphite):
        got = host_graphs(settings, "web1")
        assert got.status == "not configured" and got.graphs == ()
        assert "graphite.url" in got.message


def test_host_graphs_groups_series_into_graphs():
    got = host_graphs(GraphiteWebSettings(url=URL), "web1.example.com", 60, now=130,
                      fetch=FakeGraphite(SERIES))
    assert got.status == "ok" and (got.start, got.end) == (70, 130)
    assert [g.key for g in got.graphs] == ["cpu", "load", "check-disk_root",
                                           "check-disk_root-status"]
    load = got.graphs[1]
    assert [s.name for s in load.series] == ["fleet.web1_example_com.load.1",
                                             "fleet.web1_example_com.load.5"]
    assert ">1 (last 0.7)<" in load.svg and ">5 (last 0.6)<" in load.svg
    assert all(g.svg.startswith("<svg") for g in got.graphs)
    assert ">_ (last 25G)<" in got.graphs[2].svg


@pytest.mark.parametrize("fetch, status", [
    (raising(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))),
     "error"),
    (answering(200, b"garbage"), "error"),
    (FakeGraphite({}), "unknown host"),
])
def test_host_graphs_never_raise(fetch, status):
    got = host_graphs(GraphiteWebSettings(url=URL), "web1", fetch=fetch)
    assert got.status == status and got.graphs == () and got.message


# ---------------------------------------------------------------- the operator config

def operator(graphite: dict) -> OperatorConfig:
    return build(OperatorConfig, {"routers": ["tcp://r:1"], "graphite": graphite},
                 "fleetwatch.yaml")


def test_graphite_section():
    cfg = operator({"url": "http://127.0.0.1:8080/graphite/", "timeout": 3, "prefix": "dc1.fleet"})
    assert cfg.graphite == GraphiteWebSettings("http://127.0.0.1:8080/graphite/", 3.0, "dc1.fleet")
    assert cfg.graphite.configured
    assert operator({}).graphite == GraphiteWebSettings("", 5.0, "fleet")
    assert operator({"url": "https://[::1]:443"}).graphite.url == "https://[::1]:443"
    assert operator({"url": "http://g", "tags": True}).graphite.tags is True
    assert Graphite.from_settings(operator({"url": "http://g", "tags": True}).graphite).tags


@pytest.mark.parametrize("section, message", [
    ({"url": "graphite:8080"}, "fleetwatch.yaml: graphite.url: expected http://HOST[:PORT]"),
    ({"url": "ftp://graphite"}, "graphite.url: expected http://"),
    ({"url": "http://"}, "graphite.url: expected http://"),
    ({"url": "http://g:99999"}, "graphite.url: expected http://"),
    ({"url": "http://g/render?target=x"}, "without ?query or #fragment"),
    ({"url": "http://u:pw@g"}, "without a user or password"),
    ({"url": "http://g\n/x"}, "spaces or control characters"),
    ({"timeout": 0}, "graphite.timeout: expected a positive number"),
    ({"prefix": "a..b"}, "graphite.prefix: expected dot-separated nodes"),
    ({"colour": 1}, "graphite.colour: unknown setting"),
    ({"tags": "yes"}, "graphite.tags: expected"),
])
def test_bad_graphite_sections_are_one_clear_line(section, message):
    with pytest.raises(ConfigError) as e:
        operator(section)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_picked_graphs_draw_the_series_a_glob_picks_once_for_all_patterns():
    from fleetwatch.graphs.host import PICKED, PICKED_MAX, picked_graphs
    fake = FakeGraphite(SERIES)
    found = picked_graphs(GraphiteWebSettings(url=URL), "web1.example.com",
                          ["load.*", "cpu.percent", "nothing.*", "load.*"], 60, now=130,
                          fetch=fake)
    assert found.status == "ok"
    assert [(g.key, g.title) for g in found.graphs] == [("series:load.*", "load.*"),
                                                        ("series:cpu.percent", "cpu.percent")]
    assert [s.name for s in found.graphs[0].series] == ["fleet.web1_example_com.load.1",
                                                        "fleet.web1_example_com.load.5"]
    assert sum(1 for path, _ in fake.calls if path == "/render") == 1
    tagged = picked_graphs(GraphiteWebSettings(url=URL, tags=True), "web1.example.com",
                           ["load.*"], 60, now=130, fetch=FakeGraphite(TAGGED))
    assert [g.svg for g in tagged.graphs] == [found.graphs[0].svg]
    many = {f"fleet.web1_example_com.disk.d{i:02d}.free": [(1.0, 120)] for i in range(30)}
    drawn = picked_graphs(GraphiteWebSettings(url=URL), "web1.example.com", ["disk.*.free"],
                          60, now=130, fetch=FakeGraphite(many))
    assert len(drawn.graphs[0].series) == PICKED_MAX
    assert picked_graphs(None, "web1", ["load.*"]).status == "not configured"
    assert PICKED.fullmatch("checks.http_*.time") and not PICKED.fullmatch("load.*<b>")
