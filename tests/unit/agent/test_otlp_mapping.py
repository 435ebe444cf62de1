"""The agent's OTLP intake without sockets (agent/otlp/, SPEC.md 4.4.1): what each kind of
data point becomes, temporality, the limits, the answers, and the STATS that carry the series.

Requests are built with opentelemetry-proto's messages, and from the real OpenTelemetry SDK's
readers and encoder (what its OTLP exporter sends).
"""

from __future__ import annotations

import gzip
import json
import random
import zlib
from decimal import Decimal

import pytest

pytest.importorskip("opentelemetry.proto", reason="the otlp extra is not installed")

from google.protobuf import json_format  # noqa: E402
from google.rpc import status_pb2  # noqa: E402  (googleapis-common-protos, the SDK's)
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2 as service  # noqa: E402
from opentelemetry.proto.common.v1 import common_pb2 as common  # noqa: E402
from opentelemetry.proto.metrics.v1 import metrics_pb2 as m  # noqa: E402

from support.clock import Clock  # noqa: E402
from agent.config import OtlpConfig  # noqa: E402
from agent.otlp.intake import JSON, PROTOBUF, OtlpIntake, rpc_status, stats  # noqa: E402
from agent.otlp.points import bound  # noqa: E402
from fleetwatch import protocol  # noqa: E402

pytestmark = pytest.mark.timeout(60)

DELTA, CUMULATIVE = m.AGGREGATION_TEMPORALITY_DELTA, m.AGGREGATION_TEMPORALITY_CUMULATIVE
T0 = 1_700_000_000_000_000_000


def kv(key, value) -> common.KeyValue:
    return common.KeyValue(key=key, value=anyvalue(value))


def anyvalue(value) -> common.AnyValue:
    if isinstance(value, bool):
        return common.AnyValue(bool_value=value)
    if isinstance(value, int):
        return common.AnyValue(int_value=value)
    if isinstance(value, float):
        return common.AnyValue(double_value=value)
    if isinstance(value, list):
        return common.AnyValue(array_value=common.ArrayValue(values=map(anyvalue, value)))
    if isinstance(value, dict):
        return common.AnyValue(kvlist_value=common.KeyValueList(
            values=[kv(k, v) for k, v in value.items()]))
    if isinstance(value, bytes):
        return common.AnyValue(bytes_value=value)
    return common.AnyValue(string_value=value)


def attrs(d: dict | None) -> list:
    return [kv(k, v) for k, v in (d or {}).items()]


def request(*metrics, resource=None) -> service.ExportMetricsServiceRequest:
    req = service.ExportMetricsServiceRequest()
    rm = req.resource_metrics.add()
    rm.resource.attributes.extend(attrs({"service.name": "shop"} if resource is None
                                        else resource))
    rm.scope_metrics.add().metrics.extend(metrics)
    return req


def number(value, a=None, t=T0, **kw) -> m.NumberDataPoint:
    key = "as_int" if isinstance(value, int) else "as_double"
    return m.NumberDataPoint(attributes=attrs(a), time_unix_nano=t, **{key: value}, **kw)


def gauge(name, *points) -> m.Metric:
    return m.Metric(name=name, gauge=m.Gauge(data_points=points))


def sum_(name, *points, monotonic=True, temporality=CUMULATIVE) -> m.Metric:
    return m.Metric(name=name, sum=m.Sum(data_points=points, is_monotonic=monotonic,
                                         aggregation_temporality=temporality))


def histogram(name, bounds, counts, total=None, a=None, t=T0, temporality=CUMULATIVE):
    dp = m.HistogramDataPoint(attributes=attrs(a), time_unix_nano=t, count=sum(counts),
                              bucket_counts=counts, explicit_bounds=bounds)
    if total is not None:
        dp.sum = total
    return m.Metric(name=name, histogram=m.Histogram(data_points=[dp],
                                                     aggregation_temporality=temporality))


def intake(clock=None, **cfg) -> OtlpIntake:
    return OtlpIntake(OtlpConfig(enabled=True, **cfg), clock=clock or Clock(1000.0))


def sent(it: OtlpIntake, req, kind=PROTOBUF):
    """Export ``req`` (as the SDK's exporter does); (answer, {(name, labels...): item})."""
    body = req.SerializeToString() if kind == PROTOBUF else json_format.MessageToJson(req)
    answer = it.export(kind, "", body if isinstance(body, bytes) else body.encode())
    with it.lock:
        items = it.series.take()
    return answer, {(i["name"], *sorted(i["labels"].items())): i for i in items}


def one(items: dict, name: str, **labels) -> dict:
    """The item of ``name`` whose labels include ``labels`` (exactly one must match)."""
    found = [i for key, i in items.items() if key[0] == name
             and all(i["labels"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, list(items))
    return found[0]


def response(answer) -> service.ExportMetricsServiceResponse:
    assert answer.status == 200 and answer.content_type == PROTOBUF
    return service.ExportMetricsServiceResponse.FromString(answer.body)


# ---------------------------------------------------------------- every point kind

def test_gauges_and_sums_by_monotonicity():
    it = intake()
    answer, items = sent(it, request(
        gauge("room.temp", number(21.5, {"room": "a"})),
        sum_("orders", number(7, {"kind": "web"})),
        sum_("queue.depth", number(-3), monotonic=False)))
    assert not response(answer).HasField("partial_success")
    assert one(items, "room.temp", room="a") == {
        "name": "room.temp", "labels": {"service.name": "shop", "room": "a"}, "value": 21.5,
        "kind": "gauge"}
    assert one(items, "orders")["value"] == 7 and one(items, "orders")["kind"] == "counter"
    assert one(items, "queue.depth")["value"] == -3
    assert one(items, "queue.depth")["kind"] == "gauge"
    assert it.metrics()["agent.otlp.points"] == 3 and it.metrics()["agent.otlp.series"] == 3


def test_delta_sums_are_added_up_into_cumulative_values():
    it = intake()
    for n, (value, depth) in enumerate([(5, 2), (3, -1), (0, 4)]):
        _, items = sent(it, request(
            sum_("orders", number(value, t=T0 + n), temporality=DELTA),
            sum_("queue.depth", number(depth, t=T0 + n), monotonic=False,
                 temporality=DELTA)))
    assert one(items, "orders") ["value"] == 8 and one(items, "orders")["kind"] == "counter"
    assert one(items, "queue.depth")["value"] == 5
    # the same point again (an exporter's resend) is not counted twice
    answer, items = sent(it, request(sum_("orders", number(3, t=T0 + 2), temporality=DELTA)))
    partial = response(answer).partial_success
    assert partial.rejected_data_points == 1 and "not after the last one" in \
        partial.error_message
    assert items == {} and it.metrics()["agent.otlp.points_invalid"] == 1


def test_cumulative_sums_are_kept_as_they_come():
    it = intake()
    sent(it, request(sum_("orders", number(10))))
    _, items = sent(it, request(sum_("orders", number(4, t=T0 + 1))))     # a reset
    assert one(items, "orders")["value"] == 4


def test_explicit_histograms_become_cumulative_buckets_sum_and_count():
    it = intake()
    _, items = sent(it, request(histogram("http.server.duration", [0.005, 0.1, 1],
                                          [1, 2, 0, 4], total=12.5, a={"route": "/"})))
    buckets = {i["labels"]["le"]: i["value"] for i in items.values()
               if i["name"] == "http.server.duration_bucket"}
    assert buckets == {"0.005": 1, "0.1": 3, "1": 3, "+Inf": 7}
    assert one(items, "http.server.duration_sum")["value"] == 12.5
    assert one(items, "http.server.duration_count")["value"] == 7
    assert {i["kind"] for i in items.values()} == {"counter"}
    assert all(i["labels"]["route"] == "/" for i in items.values())
    assert it.metrics()["agent.otlp.points"] == 1


def test_a_histogram_without_sum_or_buckets():
    it = intake()
    _, items = sent(it, request(histogram("h", [], [])))
    dp = m.HistogramDataPoint(time_unix_nano=T0, count=5)
    _, items = sent(it, request(m.Metric(name="h", histogram=m.Histogram(
        data_points=[dp], aggregation_temporality=CUMULATIVE))))
    assert {(i["name"], i["labels"].get("le")): i["value"] for i in items.values()} == {
        ("h_bucket", "+Inf"): 5, ("h_count", None): 5}


def test_delta_histograms_are_added_up_bucket_by_bucket():
    it = intake()
    sent(it, request(histogram("h", [1.0, 2.0], [1, 0, 1], total=4.0, temporality=DELTA)))
    _, items = sent(it, request(histogram("h", [1.0, 2.0], [2, 1, 0], total=3.5,
                                          t=T0 + 1, temporality=DELTA)))
    assert {i["labels"].get("le", i["name"]): i["value"] for i in items.values()} == {
        "1": 3, "2": 4, "+Inf": 5, "h_sum": 7.5, "h_count": 5}


def test_exponential_histograms_keep_sum_and_count_only():
    it = intake()
    dp = m.ExponentialHistogramDataPoint(time_unix_nano=T0, count=4, sum=9.0, scale=2,
                                         positive=m.ExponentialHistogramDataPoint.Buckets(
                                             offset=1, bucket_counts=[1, 3]))
    _, items = sent(it, request(m.Metric(name="e", exponential_histogram=m.ExponentialHistogram(
        data_points=[dp], aggregation_temporality=CUMULATIVE))))
    assert {i["name"]: (i["value"], i["kind"]) for i in items.values()} == {
        "e_sum": (9.0, "counter"), "e_count": (4, "counter")}


def test_summaries_give_quantiles_sum_and_count():
    it = intake()
    dp = m.SummaryDataPoint(time_unix_nano=T0, count=10, sum=3.25, quantile_values=[
        m.SummaryDataPoint.ValueAtQuantile(quantile=q, value=v)
        for q, v in ((0.5, 0.2), (0.99, 1.5), (1.0, 2.0))])
    _, items = sent(it, request(m.Metric(name="rpc", summary=m.Summary(data_points=[dp]))))
    assert {(i["name"], i["labels"].get("quantile")): (i["value"], i["kind"])
            for i in items.values()} == {
        ("rpc", "0.5"): (0.2, "gauge"), ("rpc", "0.99"): (1.5, "gauge"),
        ("rpc", "1"): (2.0, "gauge"), ("rpc_sum", None): (3.25, "counter"),
        ("rpc_count", None): (10, "counter")}


def test_bounds_are_written_as_prometheus_writes_them():
    cases = {0.005: "0.005", 1.0: "1", 10.0: "10", 2.5: "2.5", 1e-07: "0.0000001",
             1.5e-07: "0.00000015", 1e16: "10000000000000000", 1.25e21: "1250000000000000000000",
             -0.5: "-0.5", float("inf"): "+Inf", float("-inf"): "-Inf", 0.1 + 0.2:
             "0.30000000000000004"}
    assert {x: bound(x) for x in cases} == cases
    rand = random.Random(36)
    for _ in range(2000):
        x = rand.uniform(-1, 1) * 10 ** rand.randint(-30, 30)
        expected = format(Decimal(repr(x)), "f")
        if "." in expected:
            expected = expected.rstrip("0").rstrip(".")
        assert bound(x) == expected, x


# ---------------------------------------------------------------- labels

def test_labels_resource_then_point_the_point_wins_values_as_json_text():
    it = intake()
    _, items = sent(it, request(gauge("g", number(1, {
        "service.name": "shop-eu", "ok": True, "n": 42, "f": 1.5, "tags": ["a", 1],
        "map": {"k": "v"}, "raw": b"\x00\xff"})), resource={
            "service.name": "shop", "host.name": "other-host", "region": "eu"}))
    assert one(items, "g")["labels"] == {
        "service.name": "shop-eu", "host.name": "other-host", "region": "eu", "ok": "true",
        "n": "42", "f": "1.5", "tags": '["a",1]', "map": '{"k":"v"}', "raw": "AP8="}


def test_the_sdk_s_instance_id_and_own_names_are_dropped_by_default():
    it = intake()
    _, items = sent(it, request(gauge("g", number(1, {"service.instance.id": "x"})), resource={
        "service.name": "shop", "service.instance.id": "1b4e", "telemetry.sdk.name":
        "opentelemetry", "telemetry.sdk.language": "python", "telemetry.sdk.version": "1.45"}))
    assert one(items, "g")["labels"] == {"service.name": "shop"}
    it = intake(drop_attributes=[])
    _, items = sent(it, request(gauge("g", number(1)), resource={"service.instance.id": "1"}))
    assert one(items, "g")["labels"] == {"service.instance.id": "1"}


@pytest.mark.parametrize("labels, why", [
    ({f"k{i}": "v" for i in range(32)}, "33 labels, more than 32 (otlp.max_labels)"),
    ({"k" * 101: "v"}, "is empty or longer than 100 characters"),
    ({"": "v"}, "is empty or longer than 100 characters"),
    ({"k": "v" * 256}, "label 'k': value longer than 255 characters"),
    ({"k": ["x" * 250, "y"]}, "label 'k': value longer than 255 characters"),
])
def test_a_point_whose_labels_break_the_limits_is_refused_and_counted(labels, why):
    it = intake()
    answer, items = sent(it, request(gauge("bad", number(1, labels)), gauge("ok", number(2))))
    assert set(i["name"] for i in items.values()) == {"ok"}
    partial = response(answer).partial_success
    assert partial.rejected_data_points == 1
    assert partial.error_message.startswith("1 of 2 data points refused: 1 for their "
                                            "labels (the first: ")
    assert why in partial.error_message
    assert (it.metrics()["agent.otlp.labels_refused"], it.metrics()["agent.otlp.points"]) == \
        (1, 1)


def test_max_labels_is_the_config_s():
    it = intake(max_labels=2)
    answer, items = sent(it, request(gauge("g", number(1, {"a": "1", "b": "2"}))))
    assert response(answer).partial_success.rejected_data_points == 1 and not items
    answer, items = sent(it, request(gauge("g", number(1, {"a": "1"}))))
    assert one(items, "g")["labels"] == {"service.name": "shop", "a": "1"}


# ---------------------------------------------------------------- invalid points

@pytest.mark.parametrize("metric, words", [
    (gauge("nan", number(float("nan"))), "nan: value nan is not finite"),
    (gauge("inf", number(float("-inf"))), "inf: value -inf is not finite"),
    (gauge("none", m.NumberDataPoint(time_unix_nano=T0)), "none: a data point without a value"),
    (m.Metric(name="u", sum=m.Sum(data_points=[number(1)], is_monotonic=True)),
     "u: no aggregation temporality"),
    (gauge("x" * 250, number(1)), "is empty or longer than 248 characters"),
    (gauge("", number(1)), "metric name '' is empty"),
    (histogram("h", [1.0, 2.0], [1, 2]), "h: 2 bucket counts for 2 bounds"),
    (histogram("h", [2.0, 1.0], [1, 2, 3]), "h: bucket bounds that are not finite and incr"),
    (histogram("h", [1.0, float("inf")], [1, 2, 3]), "h: bucket bounds that are not finite"),
    (histogram("h", [1.0], [1, 2], total=float("nan")), "h: value nan is not finite"),
])
def test_points_that_cannot_be_series_are_refused_and_counted(metric, words):
    it = intake()
    answer, items = sent(it, request(metric, gauge("ok", number(1))))
    partial = response(answer).partial_success
    assert partial.error_message == f"1 of 2 data points refused: 1 invalid (the first: " \
                                    f"{partial.error_message.split('(the first: ')[1]}"
    assert words in partial.error_message
    assert (partial.rejected_data_points, it.metrics()["agent.otlp.points_invalid"]) == (1, 1)
    assert [i["name"] for i in items.values()] == ["ok"]


def test_a_point_flagged_no_recorded_value_gives_nothing_and_is_no_refusal():
    it = intake()
    answer, items = sent(it, request(gauge("g", number(1, flags=1))))
    assert items == {} and not response(answer).HasField("partial_success")


# ---------------------------------------------------------------- the series limit

def test_series_past_max_series_are_refused_a_histogram_whole_and_forgotten_after_a_day():
    clock = Clock(1000.0)
    it = intake(clock, max_series=5)
    answer, items = sent(it, request(*[gauge(f"g{i}", number(i)) for i in range(3)]))
    assert len(items) == 3
    # a histogram of 4 series (2 buckets, sum, count) does not fit the 2 places left
    answer, items = sent(it, request(histogram("h", [1.0], [1, 1], total=1.0),
                                     gauge("g3", number(3)), gauge("g0", number(9))))
    partial = response(answer).partial_success
    assert partial.rejected_data_points == 1
    assert "1 past otlp.max_series (5 series)" in partial.error_message
    assert sorted(i["name"] for i in items.values()) == ["g0", "g3"]
    assert it.metrics()["agent.otlp.series_refused"] == 1
    assert it.metrics()["agent.otlp.series"] == 4
    # kept fresh: g0; the others unwritten for a day give their places back
    clock.advance(86400 * 0.6)
    sent(it, request(gauge("g0", number(1))))
    clock.advance(86400 * 0.6)
    answer, items = sent(it, request(histogram("h", [1.0], [1, 1], total=1.0)))
    assert not response(answer).HasField("partial_success") and len(items) == 4
    assert it.metrics()["agent.otlp.series"] == 5


def test_the_latest_value_of_each_series_waits_for_the_send():
    it = intake()
    for v in (1, 2, 3):
        it.export(PROTOBUF, "", request(gauge("g", number(v)),
                                        sum_("c", number(v, t=T0 + v), temporality=DELTA))
                  .SerializeToString())
    msgs = it.messages("agent-uuid", "web-1", lambda: 1_700_000_000.0, room=True)
    assert [(i["name"], i["value"]) for msg in msgs for i in msg.get("series")] == [
        ("g", 3), ("c", 6)]
    assert it.messages("agent-uuid", "web-1", lambda: 1_700_000_000.0, room=True) == []


# ---------------------------------------------------------------- bodies and answers

def test_json_with_otlp_s_rules_is_the_same_as_protobuf():
    body = json.dumps({"resourceMetrics": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "shop"}}]},
        "scopeMetrics": [{"scope": {"name": "s"}, "metrics": [
            {"name": "orders", "unit": "1", "sum": {
                "aggregationTemporality": 2, "isMonotonic": True, "dataPoints": [
                    {"asInt": "9007199254740993", "timeUnixNano": "1700000000000000000",
                     "attributes": [{"key": "n", "value": {"intValue": "3"}}],
                     "exemplars": [{"asDouble": 1, "spanId": "eee19b7ec3c1b174",
                                    "traceId": "5b8efff798038103d269b633813fc60c"}]}]}},
            {"name": "temp", "gauge": {"dataPoints": [{"asDouble": 21.5}]},
             "somethingNew": {"x": 1}}]}]}]}).encode()
    it = intake()
    answer = it.export("application/json; charset=utf-8", "", body)
    assert (answer.status, answer.content_type, answer.body) == (200, JSON, b"{}")
    items = it.series.take()
    assert items == [
        {"name": "orders", "labels": {"service.name": "shop", "n": "3"},
         "value": 9007199254740993, "kind": "counter"},
        {"name": "temp", "labels": {"service.name": "shop"}, "value": 21.5, "kind": "gauge"}]


def test_a_json_partial_success_is_otlp_s_json():
    it = intake()
    body = json_format.MessageToJson(request(gauge("g", number(float("nan"))))).encode()
    answer = it.export(JSON, "", body)
    assert answer.status == 200
    out = json.loads(answer.body)["partialSuccess"]
    assert out["rejectedDataPoints"] == "1" and "not finite" in out["errorMessage"]
    # and Google's parser reads it as the response message
    parsed = json_format.Parse(answer.body, service.ExportMetricsServiceResponse())
    assert parsed.partial_success.rejected_data_points == 1


@pytest.mark.parametrize("encoding, compress", [
    ("gzip", gzip.compress), ("GZIP", gzip.compress), ("deflate", zlib.compress),
    ("identity", lambda b: b)])
def test_compressed_bodies(encoding, compress):
    it = intake()
    answer = it.export(PROTOBUF, encoding,
                       compress(request(gauge("g", number(1))).SerializeToString()))
    assert answer.status == 200 and len(it.series.take()) == 1


def test_refused_bodies_are_answered_as_otlp_http_says_and_counted():
    it = intake(max_body=4096)
    ok = request(gauge("g", number(1))).SerializeToString()
    cases = [
        (("text/plain", "", ok), 415, "unsupported Content-Type 'text/plain'"),
        ((PROTOBUF, "br", ok), 415, "unsupported Content-Encoding 'br'"),
        ((PROTOBUF, "", b"\xff\xff\xff garbage"), 400, "is not an ExportMetricsServiceRequest"),
        ((JSON, "", b'{"resourceMetrics": 5}'), 400, "is not an ExportMetricsServiceRequest"),
        ((JSON, "", b"[" * 100000), 400, "is not an ExportMetricsServiceRequest"),
        ((JSON, "", b'{"resourceMetrics": [{"resource": {"attributes": [{"key": "a", '
                    b'"value": {"stringValue": "\\ud800"}}]}}]}'), 400, "Unpaired surrogate"),
        ((PROTOBUF, "gzip", gzip.compress(b"\0" * 5000)), 413, "past otlp.max_body (4096"),
        ((PROTOBUF, "gzip", gzip.compress(ok)[:-6]), 400, "cut short"),
        ((PROTOBUF, "gzip", b"not gzip"), 400, "does not decompress"),
    ]
    for args, status, words in cases:
        answer = it.export(*args)
        assert answer.status == status, (args[:2], answer.body[:200])
        if args[0] == PROTOBUF:       # a google.rpc.Status, as protobuf
            parsed = status_pb2.Status.FromString(answer.body)
            code, text = parsed.code, parsed.message
        else:
            code, text = json.loads(answer.body)["code"], json.loads(answer.body)["message"]
        assert code == {400: 3, 413: 8, 415: 3}[status] and words in text, (words, text)
    assert it.metrics()["agent.otlp.bodies_refused"] == len(cases)
    assert it.metrics()["agent.otlp.requests"] == 0


def test_a_status_is_google_rpc_status_in_protobuf():
    body = rpc_status(14, "é" * 100)
    assert (status_pb2.Status.FromString(body).code,
            status_pb2.Status.FromString(body).message) == (14, "é" * 100)


def test_while_the_series_are_held_exports_are_answered_503_with_retry_after():
    it = intake(interval=2.5)
    it.export(PROTOBUF, "", request(gauge("g", number(1))).SerializeToString())
    assert it.messages("u", "h", lambda: 1.7e9, room=False) == []
    answer = it.export(PROTOBUF, "", request(gauge("g", number(2))).SerializeToString())
    assert answer.status == 503 and ("Retry-After", "3") in answer.headers
    assert it.metrics()["agent.otlp.busy"] == 1
    [msg] = it.messages("u", "h", lambda: 1.7e9, room=True)       # held, then sent
    assert [i["value"] for i in msg.get("series")] == [1]
    assert it.export(PROTOBUF, "", request(gauge("g", number(3))).SerializeToString()) \
        .status == 200


# ---------------------------------------------------------------- the STATS

def test_the_series_go_in_stats_of_the_agent_within_the_body_limit():
    items = [{"name": f"http.requests.{i}", "labels": {f"k{j}": "v" * 200 for j in range(30)},
              "value": i, "kind": "counter"} for i in range(300)]
    msgs = stats(items, "agent-uuid", "web-1", lambda: 1_700_000_000.0)
    assert len(msgs) > 1
    back = []
    for msg in msgs:
        frames = protocol.encode(msg)
        assert len(frames[2]) <= 64 * 1024 + 8 * 1024
        decoded = protocol.decode(frames)
        assert (decoded.type, decoded.uuid, decoded.get("hostname"), decoded.get("metrics"),
                decoded.get("source")) == ("STATS", "agent-uuid", "web-1", {}, "otlp")
        back += decoded.get("series")
    assert back == items


def test_series_from_the_real_sdk_delta_and_cumulative():
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
    from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    for temporality in (AggregationTemporality.DELTA, AggregationTemporality.CUMULATIVE):
        reader = InMemoryMetricReader(preferred_temporality={
            Counter: temporality, Histogram: temporality, UpDownCounter: temporality})
        provider = MeterProvider(resource=Resource.create({"service.name": "shop"}),
                                 metric_readers=[reader])
        meter = provider.get_meter("test")
        orders = meter.create_counter("orders")
        latency = meter.create_histogram("latency", unit="s",
                                         explicit_bucket_boundaries_advisory=[0.1, 1.0])
        queue = meter.create_up_down_counter("queue")
        it = intake()
        for n in range(3):
            orders.add(2, {"kind": "web"})
            latency.record(0.05 + n)
            queue.add(1 if n else -1)
            it.export(PROTOBUF, "", encode_metrics(reader.get_metrics_data())
                      .SerializeToString())
        items = {(i["name"], i["labels"].get("le")): i["value"] for i in it.series.take()}
        assert items == {("orders", None): 6, ("latency_bucket", "0.1"): 1,
                         ("latency_bucket", "1"): 1, ("latency_bucket", "+Inf"): 3,
                         ("latency_sum", None): pytest.approx(3.15),
                         ("latency_count", None): 3, ("queue", None): 1}, temporality
        provider.shutdown()


def test_what_a_sender_wrote_is_logged_and_answered_with_its_controls_shown(caplog):
    it = intake()
    answer, _ = sent(it, request(gauge("evil\x1b[2J\n", number(float("nan")))))
    message = response(answer).partial_success.error_message
    assert "evil\\x1b[2J\\n: value nan" in message and "\x1b" not in caplog.text
    answer = it.export("text/\x1b[31mplain", "", b"")
    assert b"\x1b" not in answer.body and "\x1b" not in caplog.text


def test_a_body_of_many_points_is_taken_in_batches_within_the_limits():
    it = intake(max_series=1000)
    points = [number(i, {"user": f"u{i}"}) for i in range(3000)]
    answer, items = sent(it, request(sum_("users", *points)))
    assert response(answer).partial_success.rejected_data_points == 2000
    assert len(items) == 1000 and it.metrics()["agent.otlp.series"] == 1000
    assert (it.metrics()["agent.otlp.points"], it.metrics()["agent.otlp.series_refused"]) == \
        (1000, 2000)
