"""What the remote_write sink sends of each message (sinks/remote_write/samples.py) and how
(sinks/remote_write/wire.py): names as the prometheus sink's, the fleet's labels from the
stamp and the HELLO, a series' own labels, timestamps bounded by the sink's clock, the
per-host bound; the WriteRequest read back by protobuf, snappy's block format."""

from __future__ import annotations

import pytest

from fleetwatch import protocol
from fleetwatch.protocol import Relayed
from sinks.remote_write import wire
from sinks.remote_write.queue import record, samples as record_samples
from sinks.remote_write.samples import Samples, site_of

pytestmark = pytest.mark.timeout(30)

U = "a" * 32
NOW = 1_795_000_000.0


def relayed(type_: str, path=("r1",), uuid: str = U, ts: float = NOW - 1, **fields):
    msg = protocol.make(type_, uuid, clock=lambda: ts, **fields)
    return Relayed(uuid, path[0], msg, path=path if len(path) > 1 else ())


def sent(s: Samples, r: Relayed) -> list[tuple[dict, float, int]]:
    """(labels, value, ts ms) of each sample, read back from the encoded TimeSeries."""
    encoded, _ = s.of(r)
    return sorted(decoded(encoded), key=lambda x: sorted(x[0].items()))


def decoded(encoded) -> list[tuple[dict, float, int]]:
    """(labels, value, ts ms) of encoded samples, read back as TimeSeries."""
    out = []
    for e in encoded:
        ts = wire.TimeSeries.FromString(e.data)
        [sample] = ts.samples
        names = [label.name for label in ts.labels]
        assert names == sorted(names)                       # receivers require it
        out.append(({label.name: label.value for label in ts.labels}, sample.value,
                    sample.timestamp))
    return out


def fleet(**more) -> Samples:
    s = Samples(clock=lambda: NOW, **more)
    s.of(relayed("HELLO", hostname="web1.example.com", heartbeat=1.0))
    return s


def test_stats_are_named_as_the_prometheus_sink_names_them():
    got = sent(fleet(), relayed("STATS", metrics={"cpu.percent": 12.5,
                                                  "netio_bytes_sent": 1000}))
    assert got == [
        ({"__name__": "fleetwatch_cpu_percent", "host": "web1.example.com", "uuid": U},
         12.5, int((NOW - 1) * 1000)),
        ({"__name__": "fleetwatch_netio_bytes_sent_total", "host": "web1.example.com",
          "uuid": U}, 1000.0, int((NOW - 1) * 1000))]


def test_a_series_keeps_its_labels_but_never_the_fleets():
    entry = {"name": "http.server.duration_bucket", "kind": "counter", "value": 3,
             "labels": {"service.name": "shop", "le": "0.005", "host": "evil",
                        "instance": "other", "uuid": "b" * 32, "site": "fake",
                        "a.b": "1", "a_b": "2"}}
    [(labels, value, _)] = sent(fleet(), relayed("STATS", metrics={}, series=[entry]))
    assert labels == {"__name__": "fleetwatch_http_server_duration_bucket",
                      "host": "web1.example.com", "uuid": U, "service_name": "shop",
                      "le": "0.005", "exported_host": "evil", "exported_instance": "other",
                      "exported_uuid": "b" * 32, "exported_site": "fake", "a_b": "1;2"}
    assert value == 3


@pytest.mark.parametrize("name,kind,family", [
    ("requests", "counter", "fleetwatch_requests_total"),
    ("requests_total", "counter", "fleetwatch_requests_total"),
    ("rpc.duration_sum", "counter", "fleetwatch_rpc_duration_sum"),
    ("rpc.duration_count", "counter", "fleetwatch_rpc_duration_count"),
    ("queue.depth", "gauge", "fleetwatch_queue_depth"),
])
def test_a_counter_series_ends_in_total_but_a_histograms_parts(name, kind, family):
    [(labels, _, _)] = sent(fleet(), relayed("STATS", metrics={}, series=[
        {"name": name, "kind": kind, "value": 1}]))
    assert labels["__name__"] == family


def test_bad_series_are_counted_and_skipped():
    s = fleet()
    got = sent(s, relayed("STATS", metrics={"ok": 1}, series=[
        {"name": "x", "value": "1"}, {"name": "y", "value": 1, "labels": {"k": 5}},
        {"name": "...", "value": 1}, {"name": "z", "value": 1, "labels": {"...": "v"}},
        {"name": "w", "value": 1, "labels": {"a": "x" * 200, "a_": "y" * 200}}]))
    assert [labels["__name__"] for labels, _, _ in got] == ["fleetwatch_ok"]
    assert s.counts["series_bad"] == 2 and s.counts["bad_metric"] == 1
    assert s.counts["bad_label"] == 2


def test_a_result_gives_its_status_and_perfdata():
    got = sent(fleet(), relayed("RESULT", command_id="c", plugin="check_disk", status=2,
                                output="x", perfdata=[{"label": "/", "value": 1.5,
                                                       "uom": "GB"}]))
    assert [(labels, value) for labels, value, _ in got] == [
        ({"__name__": "fleetwatch_check_perfdata", "check": "check_disk",
          "host": "web1.example.com", "label": "/", "uuid": U}, 1.5 * 1024 ** 3),
        ({"__name__": "fleetwatch_check_status", "check": "check_disk",
          "host": "web1.example.com", "uuid": U}, 2.0)]


def test_an_agent_behind_a_site_is_labelled_with_its_site():
    r = relayed("STATS", path=("central", "site-a", "site-b"), metrics={"load_1": 0.5})
    assert site_of(r) == "site-b"
    [(labels, _, _)] = sent(fleet(), r)
    assert labels["site"] == "site-b"
    res = relayed("RESULT", path=("central", "site-b"), command_id="c", plugin="p",
                  status=0, output="")
    assert {labels["site"] for labels, _, _ in sent(fleet(), res)} == {"site-b"}


def test_a_process_s_own_counters_have_no_site():
    r = relayed("STATS", path=("r1", "sink-1"), uuid="sink-1", hostname="box",
                metrics={"sink.received": 5}, source="sink")
    assert site_of(r) is None
    [(labels, _, _)] = sent(Samples(clock=lambda: NOW), r)
    assert labels == {"__name__": "fleetwatch_sink_received_total", "host": "box",
                      "uuid": "sink-1"}


def test_the_host_is_the_hellos_never_a_body_s_claim():
    s = fleet()
    [(labels, _, _)] = sent(s, relayed("STATS", hostname="db1", metrics={"x": 1}))
    assert labels["host"] == "web1.example.com" and s.hosts.counts["hostname_mismatch"] == 1


def test_a_sender_s_clock_ahead_never_writes_the_future():
    s = fleet()
    [(_, _, ts)] = sent(s, relayed("STATS", ts=NOW + 86400 * 365, metrics={"x": 1}))
    assert ts == int(NOW * 1000) and s.counts["future_ts"] == 1


def test_a_host_has_at_most_its_series():
    s = fleet(max_series_per_host=3)
    got = sent(s, relayed("STATS", metrics={f"m{i}": i for i in range(5)}))
    assert len(got) == 3 and s.counts["series_refused"] == 2
    assert s.refusals.worst() == [("web1.example.com", 2)]
    assert len(sent(s, relayed("STATS", ts=NOW, metrics={"m0": 1, "m1": 1, "m2": 1}))) == 3


def test_a_sample_not_after_its_series_last_is_not_sent():
    s = fleet()
    assert len(sent(s, relayed("STATS", ts=NOW - 5, metrics={"a": 1, "b": 1}))) == 2
    assert len(sent(s, relayed("STATS", ts=NOW - 5, metrics={"a": 2, "c": 1}))) == 1
    assert len(sent(s, relayed("STATS", ts=NOW - 9, metrics={"b": 2}))) == 0
    assert s.counts["samples_out_of_order"] == 2
    assert len(sent(s, relayed("STATS", ts=NOW - 4, metrics={"a": 3, "b": 3}))) == 2


def test_the_write_request_is_the_queued_series_read_back_by_protobuf():
    s = fleet()
    encoded, ts_ms = s.of(relayed("STATS", metrics={"a": 1, "b": 2.5}))
    rec = record(U, "STATS", ts_ms, encoded)
    body = wire.write_request([data for _, data in record_samples(rec)])
    request = wire.WriteRequest.FromString(body)
    want = wire.WriteRequest(timeseries=[
        wire.TimeSeries(labels=[wire.Label(name=n, value=v) for n, v in
                                (("__name__", f"fleetwatch_{m}"),
                                 ("host", "web1.example.com"), ("uuid", U))],
                        samples=[wire.Sample(value=value, timestamp=ts_ms)])
        for m, value in (("a", 1.0), ("b", 2.5))])
    assert request == want
    assert wire.decompress(wire.compress(body)) == body
    assert wire.compress(body) != body and wire.HEADERS["Content-Encoding"] == "snappy"


def test_a_rules_state_is_its_checks_status_named_by_the_registry():
    s = fleet()
    row = {"uuid": U, "plugin": "rule:disk_full", "status": 2, "last_result": NOW - 30,
           "hostname": "db-1", "site": "site-a"}
    encoded, ts_ms = s.judged(row, NOW)
    assert ts_ms == int(NOW * 1000)                 # the moment it is read, not judged
    assert decoded(encoded) == [({"__name__": "fleetwatch_check_status", "host": "db-1",
                                  "uuid": U, "site": "site-a", "check": "rule:disk_full"},
                                 2.0, int(NOW * 1000))]
    assert s.judged(row, NOW)[0] == []              # the same moment again: not sent
    assert s.counts["samples_out_of_order"] == 1


def test_a_rule_of_a_host_the_registry_has_not_named_is_not_sent():
    s = fleet()
    row = {"uuid": U, "plugin": "rule:x", "status": 0, "last_result": NOW, "hostname": None,
           "site": None}
    assert s.judged(row, NOW) == ([], 0)
    assert s.counts["rule_states"] == 1 and s.counts["samples"] == 0
