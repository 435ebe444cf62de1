"""The agent's OTLP/HTTP intake (SPEC.md 4.4.1), with real processes on 127.0.0.1: a router,
a history sink landing what it receives in a lake, and an agent with ``otlp`` enabled on a
free port it logs; applications are the real OpenTelemetry Python SDK (MeterProvider and its
OTLP/HTTP exporter, protobuf) and a plain HTTP client sending OTLP's JSON.

What a user checks downstream is what the history sink received: STATS stamped with the
agent's uuid, naming the agent's host, carrying the series (``source: otlp``), and the
agent's own STATS counting what it took and refused (``agent.otlp.*``).
"""

from __future__ import annotations

import gzip
import json
import re
import socket
import urllib.error
import urllib.request

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the OpenTelemetry SDK (test extra) is missing")

from support.fleet import agent_uuid_for, landed, wait_for  # noqa: E402

pytestmark = pytest.mark.timeout(180)

JSON, PROTOBUF = "application/json", "application/x-protobuf"


class Setup:
    """A router, a history sink and an OTLP-enabled agent; what landed in the lake."""

    def __init__(self, fleet, tmp_path, **otlp):
        self.fleet = fleet
        router = fleet.router(sink_types=("history",))
        self.lake = tmp_path / "lake"
        fleet.sink("history", [router], stats_interval=0.5,
                   history={"lake": str(self.lake), "rotate_seconds": 0.5})
        self.uuid = agent_uuid_for(fleet)
        self.agent = fleet.agent([router], otlp={"enabled": True, "listen": "127.0.0.1:0",
                                                 "interval": 0.3, **otlp})
        self.url = listening(self.agent)
        # STATS are at most once: what the agent sends before the sink is there is lost
        wait_for(self.stats, 30, 0.1, what="the agent's own STATS in the lake")

    def stats(self) -> list[dict]:
        """The agent's STATS that landed (relayed line: stamped uuid, body), oldest first
        (by the agent's clock: the landing files come in no order)."""
        return sorted((ln for ln in landed(self.lake) if ln["type"] == "STATS"
                       and ln["uuid"] == self.uuid), key=lambda ln: ln["msg"]["ts"])

    def series(self) -> dict[tuple, dict]:
        """The latest landed value of each OTLP series: {(name, sorted labels...): item}."""
        out = {}
        for ln in self.stats():
            for item in ln["msg"].get("series", ()):
                out[(item["name"], *sorted(item["labels"].items()))] = item
        return out

    def counter(self, name: str) -> float:
        """The agent's own counter ``name`` in the last STATS that landed (0 before any)."""
        own = [ln["msg"]["metrics"] for ln in self.stats() if name in ln["msg"]["metrics"]]
        return own[-1][name] if own else 0

    def wait_series(self, match, what: str) -> dict:
        def found():
            got = {k: v for k, v in self.series().items() if match(v)}
            return got or None
        return wait_for(found, 30, 0.1, what=what)


def listening(agent) -> str:
    """The URL the agent logged it listens on for OTLP (port 0 in its config)."""
    def logged():
        m = re.search(r"OTLP intake listening on (http://\S+)/v1/metrics", agent.log())
        assert agent.alive(), agent.log()
        return m and m.group(1)
    return wait_for(logged, 20, 0.05, what="the agent's OTLP listener")


def sdk(url: str, resource: dict, **exporter):
    """An application's MeterProvider exporting to ``url`` with the SDK's OTLP/HTTP
    exporter when flushed (its own period is long: the test flushes)."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource

    exp = OTLPMetricExporter(endpoint=f"{url}/v1/metrics", timeout=5, **exporter)
    reader = PeriodicExportingMetricReader(exp, export_interval_millis=3_600_000)
    return MeterProvider(resource=Resource.create(resource), metric_readers=[reader])


def post(url: str, body: bytes, content_type: str = JSON, path: str = "/v1/metrics",
         method: str = "POST", **headers):
    """A plain HTTP client's request; (status, headers, body)."""
    req = urllib.request.Request(f"{url}{path}", data=body, method=method,
                                 headers={"Content-Type": content_type, **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as reply:
            return reply.status, reply.headers, reply.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


def otlp_json(*metrics, resource=None) -> bytes:
    """An ExportMetricsServiceRequest in OTLP's JSON (camelCase, int64 as strings)."""
    attributes = [{"key": k, "value": {"stringValue": v}}
                  for k, v in (resource or {"service.name": "cron"}).items()]
    return json.dumps({"resourceMetrics": [{"resource": {"attributes": attributes},
                                            "scopeMetrics": [{"metrics": list(metrics)}]}]}
                      ).encode()


def gauge(name: str, value, **attributes) -> dict:
    return {"name": name, "gauge": {"dataPoints": [{
        "asDouble": value, "timeUnixNano": "1700000000000000000",
        "attributes": [{"key": k, "value": {"stringValue": v}}
                       for k, v in attributes.items()]}]}}


# ---------------------------------------------------------------- the SDK, protobuf

def test_an_sdk_application_s_series_land_as_the_agent_s_host(fleet, tmp_path):
    s = Setup(fleet, tmp_path)
    provider = sdk(s.url, {"service.name": "shop", "host.name": "db-9.other.example"})
    meter = provider.get_meter("shop")
    orders = meter.create_counter("shop.orders")
    latency = meter.create_histogram("http.server.duration", unit="s",
                                     explicit_bucket_boundaries_advisory=[0.005, 0.1, 1])
    queue = meter.create_up_down_counter("shop.queue")
    temp = meter.create_gauge("room.temperature")
    try:
        for n in range(3):
            orders.add(2, {"kind": "web"})
            latency.record(0.05 * (n + 1), {"route": "/buy"})
            queue.add(1 if n else -1)
        temp.set(21.5)
        assert provider.force_flush(10_000)     # the exporter's export answered 200
    finally:
        provider.shutdown()
    got = s.wait_series(lambda i: i["name"] == "shop.orders", "the SDK's series in the lake")
    series = s.series()
    labels = {"service.name": "shop", "host.name": "db-9.other.example"}
    assert {k[0]: v["value"] for k, v in series.items() if "le" not in dict(k[1:])} == {
        "shop.orders": 6, "http.server.duration_sum": pytest.approx(0.3),
        "http.server.duration_count": 3, "shop.queue": 1, "room.temperature": 21.5}
    (item,) = got.values()
    assert item == {"name": "shop.orders", "labels": {**labels, "kind": "web"}, "value": 6,
                    "kind": "counter"}
    buckets = {dict(k[1:])["le"]: v["value"] for k, v in series.items()
               if k[0] == "http.server.duration_bucket"}
    assert buckets == {"0.005": 0, "0.1": 2, "1": 3, "+Inf": 3}
    kinds = {k[0]: v["kind"] for k, v in series.items()}
    assert (kinds["shop.queue"], kinds["room.temperature"], kinds["http.server.duration_sum"]
            ) == ("gauge", "gauge", "counter")
    # the application's host.name is a label, nothing more: every line carrying its series
    # is stamped with the agent's uuid (the router's stamp) and names the agent's host
    carrying = [ln for ln in landed(s.lake) if ln["type"] == "STATS"
                and ln["msg"].get("series")]
    assert {(ln["uuid"], ln["msg"]["uuid"], ln["msg"]["hostname"], ln["msg"]["source"])
            for ln in carrying} == {(s.uuid, s.uuid, "agent-host", "otlp")}
    assert not (s.lake / "db-9.other.example").exists()
    # two exports of 4 points: the flush's, and the one the SDK makes at its shutdown
    wait_for(lambda: s.counter("agent.otlp.points") == 8, 60,
             what=lambda: f"agent.otlp.points in the agent's STATS "
                          f"({s.counter('agent.otlp.points')})")
    assert s.counter("agent.otlp.requests") == 2
    assert s.counter("agent.otlp.series") == len(series)


def test_delta_temporality_and_gzip_from_the_sdk(fleet, tmp_path):
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.sdk.metrics import Counter, Histogram
    from opentelemetry.sdk.metrics.export import AggregationTemporality

    s = Setup(fleet, tmp_path)
    delta = AggregationTemporality.DELTA
    provider = sdk(s.url, {"service.name": "batch"}, compression=Compression.Gzip,
                   preferred_temporality={Counter: delta, Histogram: delta})
    meter = provider.get_meter("batch")
    rows = meter.create_counter("batch.rows")
    size = meter.create_histogram("batch.size", explicit_bucket_boundaries_advisory=[10])
    try:
        for n in (5, 7, 11):
            rows.add(n)
            size.record(n)
            assert provider.force_flush(10_000)
    finally:
        provider.shutdown()
    s.wait_series(lambda i: i["name"] == "batch.rows" and i["value"] == 23,
                  "the DELTA points added up to 23")
    series = {(k[0], dict(k[1:]).get("le")): v["value"] for k, v in s.series().items()}
    assert series == {("batch.rows", None): 23, ("batch.size_bucket", "10"): 2,
                      ("batch.size_bucket", "+Inf"): 3, ("batch.size_sum", None): 23,
                      ("batch.size_count", None): 3}


# ---------------------------------------------------------------- JSON, plain HTTP

def test_json_from_a_plain_http_client_with_partial_success(fleet, tmp_path):
    s = Setup(fleet, tmp_path)
    status, headers, body = post(s.url, otlp_json(gauge("cron.last_run", 1.7e9, job="backup")))
    assert (status, headers["Content-Type"], json.loads(body)) == (200, JSON, {})
    s.wait_series(lambda i: i["name"] == "cron.last_run", "the JSON series")
    assert s.series()[("cron.last_run", ("job", "backup"), ("service.name", "cron"))][
        "value"] == 1.7e9
    # a point refused: the answer says how many and why, in OTLP's JSON
    status, _, body = post(s.url, otlp_json(gauge("cron.ok", 1), gauge("cron.bad", "NaN")))
    assert status == 200
    assert json.loads(body) == {"partialSuccess": {
        "rejectedDataPoints": "1", "errorMessage": "1 of 2 data points refused: 1 invalid "
                                                   "(the first: cron.bad: value nan is not "
                                                   "finite)"}}
    wait_for(lambda: s.counter("agent.otlp.points_invalid") == 1, 60,
             what="agent.otlp.points_invalid in the agent's STATS")


def test_what_is_not_otlp_is_answered_and_counted_and_the_agent_goes_on(fleet, tmp_path):
    s = Setup(fleet, tmp_path, max_body=65536)
    ok = otlp_json(gauge("g", 1))
    cases = [
        (dict(body=ok, path="/v1/traces"), 404),
        (dict(body=None, method="GET"), 405),
        (dict(body=ok, content_type="text/plain"), 415),
        (dict(body=ok, **{"Content-Encoding": "br"}), 415),
        (dict(body=b"{not json"), 400),
        (dict(body=b"\x0a\xff\xff\xff\xff\x0f", content_type=PROTOBUF), 400),
        (dict(body=b"x" * 70000), 413),
        (dict(body=gzip.compress(b" " * 200000), **{"Content-Encoding": "gzip"}), 413),
    ]
    for kwargs, status in cases:
        got, headers, body = post(s.url, **kwargs)
        assert got == status, (kwargs.get("path"), kwargs.get("content_type"), body[:200])
        if headers["Content-Type"] == JSON:       # else a google.rpc.Status in protobuf
            assert json.loads(body)["code"] and json.loads(body)["message"]
        assert headers.get("Allow") == ("POST" if status == 405 else None)
    raws = [(b"GARBAGE\r\n\r\n", 400),
            (b"POST /v1/metrics HTTP/1.1\r\nContent-Length: 1\xb2\r\n\r\n", 400),
            (b"POST /v1/metrics HTTP/1.1\r\nContent-Length: " + b"9" * 5000 + b"\r\n"
             b"Expect: 100-continue\r\n\r\n", 413),
            (b"POST /v1/metrics HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
             411),
            (b"POST /v1/metrics HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n", 400)]
    for request, status in raws:
        with raw(s.url) as sock:
            sock.sendall(request)
            assert read_answer(sock).startswith(b"HTTP/1.1 %d " % status), request[:60]
    assert post(s.url, ok)[0] == 200 and s.agent.alive()
    wait_for(lambda: s.counter("agent.otlp.bodies_refused") == len(cases) + len(raws), 60,
             what=lambda: f"agent.otlp.bodies_refused in the agent's STATS "
                          f"({s.counter('agent.otlp.bodies_refused')})")
    assert "OTLP: answered 413" in s.agent.log()


# ---------------------------------------------------------------- floods

def test_a_flood_of_series_and_labels_is_refused_and_counted_at_its_agent(fleet, tmp_path):
    s = Setup(fleet, tmp_path, max_series=20, max_labels=8)
    provider = sdk(s.url, {"service.name": "flood", "host.name": "victim.example"})
    meter = provider.get_meter("flood")
    users = meter.create_counter("flood.users")
    wide = meter.create_counter("flood.wide")
    try:
        for n in range(200):
            users.add(1, {"user": f"u{n}"})
        wide.add(1, {f"a{i}": "x" for i in range(10)})
        assert provider.force_flush(10_000)
    finally:
        provider.shutdown()
    # refused at each of the two exports (the flush's, the shutdown's)
    wait_for(lambda: s.counter("agent.otlp.series_refused") == 2 * 180, 60,
             what=lambda: f"agent.otlp.series_refused ({s.counter('agent.otlp.series_refused')})")
    assert s.counter("agent.otlp.labels_refused") == 2
    assert s.counter("agent.otlp.series") == 20
    series = s.wait_series(lambda i: i["name"] == "flood.users", "the series kept")
    assert len(series) == 20
    # none of them names the host the application claimed, or lands anywhere but as the agent's
    assert {ln["msg"]["hostname"] for ln in s.stats()} == {"agent-host"}
    # the same answer to a plain client: how many were refused and why
    status, _, body = post(s.url, otlp_json(gauge("flood.more", 1, k="1"),
                                            gauge("flood.more", 1, k="2")))
    assert json.loads(body)["partialSuccess"] == {
        "rejectedDataPoints": "2",
        "errorMessage": "2 of 2 data points refused: 2 past otlp.max_series (20 series)"}


def test_no_router_alive_the_exports_are_answered_503_with_retry_after(fleet, tmp_path):
    from fleetwatch.cli.demo.ports import free_port

    nowhere = {"endpoints": {"agents": f"tcp://127.0.0.1:{free_port()}"}}
    agent = fleet.agent([nowhere], stats_buffer=4, otlp={"enabled": True, "listen":
                                                          "127.0.0.1:0", "interval": 0.3})
    url = listening(agent)
    # the STATS queue (4) fills to half with the agent's own STATS, one a second
    def held():
        status, headers, _ = post(url, otlp_json(gauge("g", 1)))
        return status == 503 and headers
    headers = wait_for(held, 20, 0.2, what="an export answered 503")
    assert headers["Retry-After"] == "1"
    assert agent.alive()


def raw(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def read_answer(sock: socket.socket) -> bytes:
    out = b""
    while chunk := sock.recv(65536):
        out += chunk
    return out


def test_expect_continue_and_at_most_four_requests_at_once(fleet, tmp_path):
    s = Setup(fleet, tmp_path)
    body = otlp_json(gauge("g", 1))
    with raw(s.url) as sock:        # curl's way with a body: wait for 100 Continue
        sock.sendall(b"POST /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Type: application/json"
                     b"\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
        assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        answer = read_answer(sock)
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\n{}")
    assert b"\r\nConnection: close\r\n" in answer
    # four clients that say nothing hold the four places; a fifth is answered at once
    idle = [raw(s.url) for _ in range(4)]
    try:
        def refused():
            with raw(s.url) as sock:
                sock.sendall(b"POST /v1/metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
                return read_answer(sock)
        answer = wait_for(lambda: (a := refused()).startswith(b"HTTP/1.1 503 ") and a, 10,
                          what="a fifth request refused")
        assert b"\r\nRetry-After: 1\r\n" in answer and b"4 requests under way" in answer
    finally:
        for sock in idle:
            sock.close()
    wait_for(lambda: post(s.url, body)[0] == 200, 10, what="the places given back")
    wait_for(lambda: s.counter("agent.otlp.busy") >= 1, 60, what="agent.otlp.busy counted")
