"""The remote_write sink against real receivers: Debian's Prometheus (its remote-write
receiver on) and Debian's VictoriaMetrics, started here on 127.0.0.1, fed by a real router,
a real agent and a sender through the router (a DEALER speaking as an agent, so that its
values and times are known); what a user checks is the receiver's ``/api/v1/query``, the
sink's own counters there, and ``fleetwatch history gaps --json``.

- The fleet's series arrive with the right values and labels: an agent's stats, a sender's
  STATS metrics and labelled series, a check's status and perfdata, the sink's own counters.
- The receiver down while data flows (stopped, restarted on the same port): nothing within
  the queue's bound is lost, and what the bound dropped is counted and, after a compaction,
  in ``history gaps`` (the sink's STATS report it, SPEC 4.7.2). The outage here lasts a few
  seconds; ``FLEETWATCH_REMOTE_WRITE_OUTAGE=300`` makes it the issue's five minutes (the
  slow path: same mechanism, a sender pacing a STATS every half second through it).
- A rule's state (judged by an alerting sink, read from the state database) arrives as
  its check's status, under the host the registry names.
- A request the receiver refuses (Prometheus' ``400 out of bounds``) is dropped and counted,
  never retried, and the samples after it still arrive.
- On the wire (a receiver of the test's own): remote write 1.0's headers, the configured
  ones and the bearer token; a 429's ``Retry-After`` waited for, the same request again.
"""

from __future__ import annotations

import http.server
import json
import os
import threading
import time

import pytest

from fleetwatch import protocol
from sinks.remote_write import wire
from support.fleet import agent_uuid_for, landed, wait_for
from support.remotewrite import RECEIVERS, PrometheusReceiver, available
from support.routerclients import FakeAgent

#: extra seconds the receiver stays down in the outage test, the sender pacing through them
OUTAGE = float(os.environ.get("FLEETWATCH_REMOTE_WRITE_OUTAGE", "2"))
pytestmark = pytest.mark.timeout(300 + 2 * OUTAGE)

PROBE_HOST = "probe-host"
SINK = "sink-remote_write"
#: a queue that overflows within seconds: 64 KiB in memory, 128 KiB on disk (16 KiB segments)
SMALL = {"max_memory": 65536, "max_disk": 131072}


def needs(kind: str):
    if not available(kind):
        pytest.skip(f"{kind} is not installed (the Makefile's system packages)")


def receiver_for(kind: str, tmp_path):
    needs(kind)
    return RECEIVERS[kind](tmp_path).start()


def sink(fleet, router, receiver, **settings):
    return fleet.sink("remote_write", [router], stats_interval=1.0, remote_write={
        "url": receiver.write_url, "queue_dir": str(fleet.root / "rw-queue"),
        "batch_wait": 0.1, "min_backoff": 0.05, "max_backoff": 0.5, "flush_at_exit": 1.0,
        **settings})


def probe(zctx, router) -> FakeAgent:
    """A sender through the router, named ``probe-host`` by its HELLO."""
    agent = FakeAgent(zctx, router["endpoints"]["agents"])
    send(agent, "HELLO", time.time(), hostname=PROBE_HOST, heartbeat=600.0, role="agent")
    agent.expect("WELCOME")
    return agent


def send(agent: FakeAgent, type_: str, ts: float, **fields) -> None:
    """A message of ``agent`` made at ``ts`` (its clock)."""
    msg = protocol.make(type_, agent.uuid, clock=lambda: ts, **fields)
    agent.sock.send_multipart(protocol.encode(msg))


def connected(receiver, sink_type: str) -> None:
    """Wait until the router's own STATS, through the sink, say a ``sink_type`` sink is
    connected to it: the sink takes what the router relays from then on."""
    wait_for(lambda: receiver.value(f'fleetwatch_router_sinks_{sink_type}'
                                    f'{{uuid="router-1"}}') == 1, 30, 0.2,
             f"the router's STATS saying a {sink_type} sink is connected")


def labels(result: dict) -> dict:
    return result["metric"]


@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
def test_the_fleets_series_reach_the_receiver_with_their_values_and_labels(
        kind, fleet, tmp_path, zctx):
    receiver = receiver_for(kind, tmp_path)
    try:
        router = fleet.router(sink_types=("remote_write",))
        sink(fleet, router, receiver)
        connected(receiver, "remote_write")
        agent_uuid = agent_uuid_for(fleet)
        fleet.agent([router])
        sender = probe(zctx, router)
        now = time.time()
        send(sender, "STATS", now, hostname="someone-else", metrics={
            "temperature": 21.5, "diskio_reads": 7}, series=[
            {"name": "http.server.duration_bucket", "kind": "counter", "value": 3,
             "labels": {"service.name": "shop", "le": "0.005", "host": "evil"}},
            {"name": "shop.orders", "kind": "counter", "value": 12,
             "labels": {"service.name": "shop"}}])
        send(sender, "RESULT", now, command_id="c1", plugin="check_disk", status=2,
             output="DISK CRITICAL", perfdata=[{"label": "/", "value": 2.5, "uom": "GB"}])
        probe_labels = {"host": PROBE_HOST, "uuid": sender.uuid}

        wait_for(lambda: receiver.query(f'fleetwatch_temperature{{host="{PROBE_HOST}"}}'),
                 30, 0.2, "the sender's STATS in the receiver")
        [temperature] = receiver.query("fleetwatch_temperature")
        assert labels(temperature) == {"__name__": "fleetwatch_temperature", **probe_labels}
        assert float(temperature["value"][1]) == 21.5
        assert abs(temperature["value"][0] - now) < 300     # the instant asked, near now
        assert receiver.value('fleetwatch_diskio_reads_total{host="probe-host"}') == 7
        [bucket] = receiver.query("fleetwatch_http_server_duration_bucket")
        assert labels(bucket) == {"__name__": "fleetwatch_http_server_duration_bucket",
                                  **probe_labels, "service_name": "shop", "le": "0.005",
                                  "exported_host": "evil"}
        assert float(bucket["value"][1]) == 3
        assert receiver.value('fleetwatch_shop_orders_total{service_name="shop"}') == 12
        wait_for(lambda: receiver.query("fleetwatch_check_status"), 30, 0.2, "the RESULT")
        [status] = receiver.query("fleetwatch_check_status")
        assert labels(status) == {"__name__": "fleetwatch_check_status", **probe_labels,
                                  "check": "check_disk"}
        assert float(status["value"][1]) == 2
        assert receiver.value('fleetwatch_check_perfdata{check="check_disk",label="/"}') \
            == 2.5 * 1024 ** 3

        # a real agent's stats, named after its HELLO
        wait_for(lambda: receiver.query('fleetwatch_cpu_percent{host="agent-host"}'), 30,
                 0.2, "the agent's cpu_percent")
        [cpu] = receiver.query("fleetwatch_cpu_percent")
        assert labels(cpu) == {"__name__": "fleetwatch_cpu_percent", "host": "agent-host",
                               "uuid": agent_uuid}
        # and the sink's own counters, from its STATS, under its name
        wait_for(lambda: (receiver.value(f'fleetwatch_sink_remote_write_samples_sent_total'
                                         f'{{uuid="{SINK}"}}') or 0) > 0, 30, 0.2,
                 "the sink's own counters")
        assert receiver.value(f'fleetwatch_sink_remote_write_samples_dropped_4xx_total'
                              f'{{uuid="{SINK}"}}') == 0
    finally:
        fleet.stop_all()
        receiver.stop()


def test_an_outage_loses_nothing_within_the_bound_and_gaps_show_the_rest(
        fleet, tmp_path, zctx, spark):
    from fleetwatch.lake.compact import compact
    from fleetwatch.lake.settings import HistorySettings
    lake = tmp_path / "lake"
    receiver = receiver_for("prometheus", tmp_path)
    start = time.time()
    try:
        router = fleet.router(sink_types=("history", "remote_write"))
        fleet.sink("history", [router], history={"lake": str(lake), "rotate_seconds": 0.5})
        # one shard: the request it retries is then the oldest records, and what the bound
        # drops is one run after it (with several shards each holds a request of its own, and
        # the segments they pin need not be next to each other: a 2026-12-05 run under load
        # missed 20-26 and 41-...; the shards' order is the unit tests')
        rw = sink(fleet, router, receiver, max_samples_per_send=200, max_shards=1, **SMALL)
        connected(receiver, "remote_write")
        connected(receiver, "history")
        sender = probe(zctx, router)
        wait_for(lambda: any(ln["type"] == "HELLO" and ln["uuid"] == sender.uuid
                             for ln in landed(lake)), 20, what="the sender's HELLO landed")
        # each STATS: its number, and 19 more series (about 2.5 KB of queue); times 5 ms
        # apart, in the past, so that every one is its own sample
        t0 = time.time() - 60
        seq = 0

        def stats(ts: float) -> None:
            nonlocal seq
            send(sender, "STATS", ts, metrics={"probe.seq": seq,
                                               **{f"probe.m{k}": seq for k in range(19)}})
            seq += 1

        def arrived() -> list[float]:
            got = receiver.query(f'fleetwatch_probe_seq{{host="{PROBE_HOST}"}}[2h]')
            return [float(v) for _, v in got[0]["values"]] if got else []
        for _ in range(20):
            stats(t0 + seq * 0.005)
        wait_for(lambda: len(arrived()) == 20, 30, 0.2, "the first 20 STATS arrived")

        def retries() -> float:
            """The sink's retries, as its STATS that landed count them."""
            return max((ln["msg"]["metrics"].get("sink.remote_write.retries", 0)
                        for ln in landed(lake) if ln["type"] == "STATS" and ln["uuid"] == SINK),
                       default=0)
        before = retries()
        receiver.stop()                             # the outage
        # a request's worth first, and the sink retrying it: that request is what the sender
        # holds (a sender slower to take under load would otherwise hold one from the middle
        # of the burst, and what the bound drops be two runs, before and after it)
        for _ in range(10):
            stats(t0 + seq * 0.005)
        wait_for(lambda: retries() > before, 30, 0.1, "the sink retrying a request")
        for _ in range(390):                        # 1 MB in all: far past the bound
            stats(t0 + seq * 0.005)
        paced_until = time.monotonic() + OUTAGE
        while time.monotonic() < paced_until:      # a sender that goes on (its rate)
            stats(time.time())
            time.sleep(0.5)
        total = seq

        def dropped() -> int:
            """The sender's STATS the sink reported dropped (its STATS in the lake)."""
            return sum(d["count"] for ln in landed(lake)
                       if ln["type"] == "STATS" and ln["uuid"] == SINK
                       for d in ln["msg"].get("drops", ()) if d["uuid"] == sender.uuid)
        wait_for(lambda: dropped() > 0, 30, 0.2, "the sink reporting its drops")
        assert "queue full" in rw.log()
        receiver.start()                            # back, on the same port
        wait_for(lambda: len(arrived()) + dropped() == total, 60, 0.5,
                 lambda: f"{len(arrived())} arrived + {dropped()} dropped = {total}")
        values = arrived()
        # in order, each once; what is missing is one run: the oldest the bound could not
        # hold (the sender kept the request it was retrying, the newest were queued)
        assert values == sorted(set(values)) and values[:20] == [float(i) for i in range(20)]
        missing = sorted(set(range(total)) - {int(v) for v in values})
        assert missing == list(range(missing[0], missing[0] + len(missing)))
        assert missing[0] > 20, missing[0]          # the request held arrived
        assert len(missing) == dropped() > 100 and values[-1] == total - 1

        # the sink's counters say the same (through its own STATS)
        def counter(name: str) -> float:
            return receiver.value(f'fleetwatch_sink_remote_write_{name}_total'
                                  f'{{uuid="{SINK}"}}') or 0
        wait_for(lambda: counter("samples_dropped_full") >= 20 * len(missing), 30, 0.5,
                 "the sink's samples_dropped_full")
        assert counter("retries") > 0 and counter("samples_dropped_4xx") == 0

        # the lake: gaps say the sender's STATS were dropped, by the remote_write sink
        for proc in fleet.procs:
            if proc.name == "sink-history":
                proc.stop()
        compact(spark, HistorySettings(lake=str(lake)), out=lambda line: None)
        cfg = fleet.write("history.yaml", {"routers": [router["endpoints"]["control"]],
                                           "history": {"lake": str(lake)}})
        out = fleet.command("history", "gaps", PROBE_HOST, "--config", str(cfg), "--json",
                            "--since", str(int(start) - 120), "--every", "1d",
                            "--sink", "remote_write").stdout
        buckets = json.loads(out)["buckets"]
        drops = [d for b in buckets for d in b["drops"]]
        assert {(d["type"], d["sink"]) for d in drops} == {("STATS", "remote_write")}
        assert round(sum(d["count"] for d in drops)) == len(missing)
        assert {b["verdict"] for b in buckets if b["drops"]} == {"dropped"}
        assert sum(b["stats"] for b in buckets) == total     # every one landed in the lake
        rows = fleet.command("history", "sql", "--config", str(cfg), "--json",
                             "SELECT DISTINCT router, sink FROM drops").stdout
        assert {(r["router"], r["sink"]) for r in json.loads(rows)} == {(SINK, "remote_write")}
    finally:
        fleet.stop_all()
        receiver.stop()


def test_a_rules_state_reaches_the_receiver_under_its_host(fleet, tmp_path):
    """A rule the alerting sink judges (CRITICAL on the real agent: any disk use is >= 0)
    reaches the receiver as the check's status, read from the state database."""
    pytest.importorskip("sqlalchemy")
    from agent.collectors import Collectors
    metric = min(n for n in Collectors(["disk"]).collect() if n.endswith(".used_percent"))
    receiver = receiver_for("victoria-metrics", tmp_path)
    try:
        router = fleet.router(sink_types=("registry", "alerting", "remote_write"))
        fleet.sink("registry", [router])
        fleet.sink("alerting", [router], alerting={
            "tick_interval": 0.2, "rule_interval": 1, "rule_refresh": 30,
            "rules": [{"name": "disk_used", "hosts": "agent-*", "expr": f"max({metric}, 5s)",
                       "critical": ">= 0"}]})
        sink(fleet, router, receiver, rules_interval=0.5)
        agent_uuid = agent_uuid_for(fleet)
        fleet.agent([router])
        query = 'fleetwatch_check_status{check="rule:disk_used"}'
        wait_for(lambda: receiver.value(query) == 2, 60, 0.2, "the rule's CRITICAL")
        [status] = receiver.query(query)
        assert labels(status) == {"__name__": "fleetwatch_check_status", "host": "agent-host",
                                  "uuid": agent_uuid, "check": "rule:disk_used"}
    finally:
        fleet.stop_all()
        receiver.stop()


def test_a_request_the_receiver_refuses_is_dropped_and_counted_not_retried(
        fleet, tmp_path, zctx):
    receiver = receiver_for("prometheus", tmp_path)
    try:
        router = fleet.router(sink_types=("remote_write",))
        rw = sink(fleet, router, receiver)
        connected(receiver, "remote_write")
        sender = probe(zctx, router)
        send(sender, "STATS", time.time(), metrics={"before": 1})
        wait_for(lambda: receiver.value("fleetwatch_before") == 1, 30, 0.2, "the first")
        # a sender whose clock is 3 hours behind: Prometheus refuses the sample (out of
        # bounds), with 400, and the request with it
        send(sender, "STATS", time.time() - 3 * 3600, metrics={"late": 1})
        wait_for(lambda: "refused" in rw.log(), 30, 0.2, "the refusal logged")
        assert "(400, not sent again): out of bounds" in rw.log()
        send(sender, "STATS", time.time(), metrics={"after": 1})
        wait_for(lambda: receiver.value("fleetwatch_after") == 1, 30, 0.2,
                 "the samples after it")
        assert receiver.query("fleetwatch_late") == []

        def counter(name: str) -> float:
            return receiver.value(f'fleetwatch_sink_remote_write_{name}_total'
                                  f'{{uuid="{SINK}"}}') or 0
        wait_for(lambda: counter("http_400") >= 1, 30, 0.5, "the sink counting the 400")
        assert counter("samples_dropped_4xx") >= 1 and counter("retries") == 0
    finally:
        fleet.stop_all()
        receiver.stop()


def test_a_receiver_that_is_not_there_stops_nothing(fleet, tmp_path, zctx):
    """No receiver at all: the sink starts, queues, retries, and says why in its log."""
    receiver = PrometheusReceiver(tmp_path)          # never started
    router = fleet.router(sink_types=("remote_write",))
    rw = sink(fleet, router, receiver)
    wait_for(lambda: "ConnectionRefusedError" in rw.log(), 30, 0.2, "the refused connection")
    assert rw.alive()
    assert rw.stop() == 0
    assert "kept in" in rw.log()                     # what was queued waits for the next run


class Recorder(http.server.BaseHTTPRequestHandler):
    """A receiver that answers its first request 429 with ``Retry-After: 1``, then 204, and
    keeps each request's time, headers and decoded WriteRequest."""

    got: list = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = wire.WriteRequest.FromString(wire.decompress(body))
        self.got.append((time.monotonic(), dict(self.headers), request))
        if len(self.got) == 1:
            self.send_response(429)
            self.send_header("Retry-After", "1")
        else:
            self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_protocols_headers_the_token_and_retry_after(fleet, tmp_path, zctx):
    """What goes on the wire, seen by a receiver of the test's own: remote write 1.0's
    headers, the configured ones and the bearer token; a 429's Retry-After waited for."""
    Recorder.got = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    try:
        router = fleet.router(sink_types=("remote_write",))

        class Here:
            write_url = f"http://127.0.0.1:{server.server_address[1]}/api/v1/push"
        sink(fleet, router, Here, headers={"X-Scope-OrgID": "fleet-a"},
             bearer_token_file=str(token), min_backoff=0.05, max_backoff=0.1)
        # the router's own STATS through the sink: the 429, then the same again, taken
        wait_for(lambda: len(Recorder.got) >= 2, 30, 0.1, "two requests")
        sender = probe(zctx, router)
        send(sender, "STATS", time.time(), metrics={"x": 1})
        wait_for(lambda: any(label.value == "fleetwatch_x" for _, _, r in Recorder.got
                             for ts in r.timeseries for label in ts.labels), 30, 0.1,
                 "the sender's STATS received")
    finally:
        server.shutdown()
    (first, headers, refused), (second, _, again) = Recorder.got[:2]
    assert second - first >= 0.95                     # Retry-After, not the 0.1 s backoff
    assert again == refused                           # the same request, sent again
    assert headers["Content-Encoding"] == "snappy"
    assert headers["Content-Type"] == "application/x-protobuf"
    assert headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    assert headers["X-Scope-OrgID"] == "fleet-a"
    assert headers["Authorization"] == "Bearer s3cret"
