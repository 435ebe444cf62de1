"""The prometheus sink as a real process behind a real router, scraped over HTTP, and by a
real Prometheus server (Debian's ``prometheus``) answering PromQL through its HTTP API.

Agents are a real ``fleetwatch agent`` or a raw DEALER speaking the agent protocol
(tests/support/graphite.py); every wait polls with a deadline.
"""

from __future__ import annotations

import time

import pytest

from support.fleet import agent_uuid_for, wait_for
from support.graphite import DealerAgent
from support.prometheus import (SINK_TYPES, PrometheusServer, counter, prometheus_available,
                                prometheus_sink, samples, scrape, value)

pytest.importorskip("prometheus_client")

pytestmark = pytest.mark.timeout(120)

PERFDATA = [{"label": "/", "value": 25.5, "uom": "GB", "warn": "20", "crit": None, "min": 0,
             "max": None},
            {"label": "time", "value": 120, "uom": "ms", "warn": None, "crit": None,
             "min": None, "max": None},
            {"label": "inodes used", "value": None, "uom": "%", "warn": None, "crit": None,
             "min": None, "max": None}]


def result(agent: DealerAgent, plugin: str, status: int, perfdata: list) -> None:
    agent.send("RESULT", command_id="cli:" + "0" * 24, plugin=plugin, status=status,
               output="OUT", long_output="", started=time.time() - 1, duration=0.2,
               perfdata=perfdata)


def test_agent_router_and_sink_series_are_scraped(fleet):
    router = fleet.router(sink_types=SINK_TYPES)
    sink, url = prometheus_sink(fleet, [router])
    uuid = agent_uuid_for(fleet)
    fleet.agent([router])
    cpu = wait_for(lambda: value(url, "fleetwatch_cpu_percent", host="agent-host"), 30,
                   0.2, "the agent's cpu.percent in a scrape")
    assert 0 <= cpu <= 100
    assert value(url, "fleetwatch_cpu_percent", host="agent-host", instance=uuid) == cpu
    # the router's own counters, under its id, and the sink loop's (its STATS, relayed back)
    assert wait_for(lambda: value(url, "fleetwatch_router_agents", instance="router-1"),
                    20, 0.2, "the router's router.agents") >= 1
    assert wait_for(lambda: value(url, "fleetwatch_sink_received_total",
                                  instance="sink-prometheus"),
                    20, 0.2, "the sink loop's sink.received") > 0
    # the sink's own counters, served directly
    assert value(url, "fleetwatch_prometheus_sink_stats_total",
                 instance="sink-prometheus") > 0
    content_type, text = scrape(url)
    assert content_type.startswith("text/plain") and "# TYPE fleetwatch_cpu_percent gauge" \
        in text
    # every family of fleetwatch's own parts typed, each with its own help (catalogue.py)
    types = dict(line.split()[2:4] for line in text.splitlines() if line.startswith("# TYPE"))
    helps = [line.split(" ", 3)[3] for line in text.splitlines() if line.startswith("# HELP")]
    assert len(types) > 50 and [n for n, t in types.items() if t == "untyped"] == []
    assert types["fleetwatch_router_agents"] == "gauge"
    assert types["fleetwatch_router_received_HEARTBEAT_total"] == "counter"
    assert len(set(helps)) == len(helps), {h for h in helps if helps.count(h) > 1}
    content_type, om = scrape(url, openmetrics=True)
    assert content_type.startswith("application/openmetrics-text") and om.endswith("# EOF\n")
    assert samples(om, openmetrics=True)        # the OpenMetrics parser takes it whole


def test_check_status_and_perfdata_in_base_units(fleet, zctx):
    router = fleet.router(sink_types=SINK_TYPES)
    _, url = prometheus_sink(fleet, [router])
    agent = DealerAgent(zctx, router, "db1.example.com")
    labels = {"host": "db1.example.com", "instance": agent.uuid, "check": "check_disk"}

    def landed():
        agent.stats({"up": 1})      # names the host: the sink connected after the HELLO
        result(agent, "check_disk", 1, PERFDATA)
        return value(url, "fleetwatch_check_status", **labels) is not None
    wait_for(landed, 20, 0.2, "the RESULT in a scrape")
    assert value(url, "fleetwatch_check_status", **labels) == 1
    assert value(url, "fleetwatch_check_perfdata", label="/", **labels) == 25.5 * 1024 ** 3
    assert value(url, "fleetwatch_check_perfdata", label="time", **labels) == \
        pytest.approx(0.12)
    assert value(url, "fleetwatch_check_perfdata", label="inodes used", **labels) is None


def test_hostile_values_through_a_router_stay_valid_and_inert(fleet, zctx):
    router = fleet.router(sink_types=SINK_TYPES)
    _, url = prometheus_sink(fleet, [router])
    hostname = 'evil"}\n# EOF\r\x00\x1b[2J<script>alert(1)</script>\\' + "é" * 20
    agent = DealerAgent(zctx, router, hostname)
    inert = 'evil"}\ufffd# EOF\ufffd\ufffd\ufffd[2J<script>alert(1)</script>\\' + "é" * 20

    def landed():
        agent.stats({'x"} 1\nfleetwatch_fake 666': 1, "<img src=x onerror=alert(1)>": 2,
                     "m" * 5000: 3, "ok": 4})
        result(agent, 'plug"in\n', 0, [{"label": "l\x07\n\"", "value": 5, "uom": "\x00"},
                                       {"label": "x" * 5000, "value": 6, "uom": ""}])
        return value(url, "fleetwatch_check_perfdata", host=inert) is not None and \
            value(url, "fleetwatch_ok", host=inert) is not None
    wait_for(landed, 20, 0.2, "the hostile messages in a scrape")
    for openmetrics in (False, True):
        _, text = scrape(url, openmetrics)
        assert not any(c in text for c in "\r\x00\x1b\x07"), text
        assert all(line.startswith(("# HELP fleetwatch_", "# TYPE fleetwatch_", "fleetwatch_",
                                    "# EOF")) for line in text.splitlines())
        got = samples(text, openmetrics)
        assert not any(name == "fleetwatch_fake" for name, _ in got)
        assert got[("fleetwatch_x_1_fleetwatch_fake_666",
                    (("host", inert), ("instance", agent.uuid)))] == 1
        assert got[("fleetwatch_img_src_x_onerror_alert_1",
                    (("host", inert), ("instance", agent.uuid)))] == 2
        assert got[("fleetwatch_check_perfdata",
                    (("check", 'plug"in\ufffd'), ("host", inert), ("instance", agent.uuid),
                     ("label", 'l\ufffd\ufffd"')))] == 5
        assert not any(len(name) > 300 or any(len(v) > 300 for _, v in labels)
                       for name, labels in got)
    counts = {k: v for (k, labels), v in samples(scrape(url)[1]).items()
              if k.startswith("fleetwatch_prometheus_sink_")}
    assert counts["fleetwatch_prometheus_sink_bad_name_total"] >= 1     # the 5000-char name
    assert counts["fleetwatch_prometheus_sink_bad_label_total"] >= 1    # the 5000-char label
    assert counts["fleetwatch_prometheus_sink_unit_unknown_total"] >= 1  # uom "\x00"


def test_stale_series_are_dropped(fleet, zctx):
    router = fleet.router(sink_types=SINK_TYPES)
    _, url = prometheus_sink(fleet, [router], stale_after=1.5)
    quiet, busy = DealerAgent(zctx, router, "quiet"), DealerAgent(zctx, router, "busy")

    def both():
        quiet.stats({"load.1": 1})
        busy.stats({"load.1": 2})
        return value(url, "fleetwatch_load_1", host="quiet") == 1 and \
            value(url, "fleetwatch_load_1", host="busy") == 2
    wait_for(both, 20, 0.2, "both hosts in a scrape")

    def quiet_gone():
        busy.stats({"load.1": 2})
        return value(url, "fleetwatch_load_1", host="quiet") is None
    wait_for(quiet_gone, 10, 0.2, "the quiet host's series dropped")
    assert value(url, "fleetwatch_load_1", host="busy") == 2
    wait_for(lambda: (value(url, "fleetwatch_prometheus_sink_expired_total") or 0) >= 1, 10,
             0.2, "the sweep forgetting it")


def warm_sink(fleet, zctx, **settings) -> tuple[dict, str]:
    """A router and a prometheus sink with ``settings`` that a host's STATS has reached:
    (the router, the sink's URL)."""
    router = fleet.router(sink_types=SINK_TYPES)
    _, url = prometheus_sink(fleet, [router], **settings)
    warm = DealerAgent(zctx, router, "warm")
    wait_for(lambda: warm.stats({"up": 1}) and value(url, "fleetwatch_up", host="warm"), 20,
             0.2, "the sink connected")
    return router, url


def test_one_host_flooding_names_leaves_room_for_the_others(fleet, zctx):
    """Issue 31: one host's 200,000 series filled the fleet-wide ``max_series``, so no
    other host could add one. Each host has ``max_series_per_host``; the flood is held to
    it, the others come in, and what the flooder was refused is counted under its name."""
    router, url = warm_sink(fleet, zctx, max_series=250, max_series_per_host=100)
    flood = DealerAgent(zctx, router, "flood.example.com")
    flood.stats({f"flood.m{i:03d}": float(i) for i in range(300)})
    web = DealerAgent(zctx, router, "web1")
    refused = "fleetwatch_prometheus_sink_dropped_by_host_total"
    wait_for(lambda: value(url, refused, host="flood.example.com") == 200, 20, 0.2,
             "the flood's 200 refused series counted under its host")

    def web_in():
        web.stats({"cpu.percent": 5.0})
        return value(url, "fleetwatch_cpu_percent", host="web1") == 5.0
    wait_for(web_in, 20, 0.2, "another host's series after the flood")
    got = samples(scrape(url)[1])
    flooded = [name for name, labels in got if name.startswith("fleetwatch_flood_m")]
    assert len(flooded) == 100
    assert got[("fleetwatch_prometheus_sink_dropped_max_series_total",
                (("instance", "sink-prometheus"),))] == 0
    # and in the sink's own STATS, as every sink's counters (the console's health page)
    assert wait_for(lambda: counter(url, "fleetwatch_sink_prometheus_dropped_by_host_"
                                         "flood_example_com", instance="sink-prometheus"),
                    20, 0.2, "the sink's STATS naming the host") == 200


@pytest.mark.skipif(not prometheus_available(), reason="Debian's prometheus is not installed "
                    "(make system-packages)")
def test_a_real_prometheus_scrapes_the_sink_and_answers_promql(fleet, zctx, tmp_path):
    from fleetwatch.cli.demo.ports import free_port
    router = fleet.router(sink_types=SINK_TYPES)
    _, url = prometheus_sink(fleet, [router])
    target = url.split("/")[2]
    agent = DealerAgent(zctx, router, "web1.example.com")
    server = PrometheusServer(tmp_path / "prometheus", [target], free_port()).start()
    try:
        def answered():
            agent.stats({"cpu.percent": 42.5})
            result(agent, "check_disk", 2, PERFDATA)
            got = server.query('fleetwatch_check_perfdata{host="web1.example.com",'
                               'check="check_disk",label="/"} * on(instance) group_left '
                               'fleetwatch_cpu_percent')
            return got or None
        got = wait_for(answered, 60, 0.5, "a PromQL answer from Prometheus")
        assert float(got[0]["value"][1]) == pytest.approx(25.5 * 1024 ** 3 * 42.5)
        assert got[0]["metric"]["instance"] == agent.uuid   # the sink's label, not the target's
        status = server.query('fleetwatch_check_status{host="web1.example.com"}')
        assert [float(s["value"][1]) for s in status] == [2.0]
        [scraped] = server.targets()
        assert scraped["health"] == "up" and scraped["lastError"] == ""
    finally:
        server.stop()


def otlp_series(requests: float) -> list[dict]:
    """What an agent's OTLP intake sends for a shop's requests counter, a duration
    histogram (bounds 0.1 and 1) and a gauge naming a host of its own."""
    shop = {"service.name": "shop", "http.route": "/cart"}
    return [{"name": "http.server.requests", "value": requests, "kind": "counter",
             "labels": shop},
            *({"name": "http.server.duration_bucket", "value": n, "kind": "counter",
               "labels": {**shop, "le": le}} for le, n in (("0.1", 6), ("1", 9), ("+Inf", 10))),
            {"name": "http.server.duration_sum", "value": 2.5, "kind": "counter",
             "labels": shop},
            {"name": "http.server.duration_count", "value": 10, "kind": "counter",
             "labels": shop},
            {"name": "queue.depth", "value": 4, "labels": {"host": "container-7",
                                                           "instance": "x"}},
            {"name": "malformed", "value": "4"}]


@pytest.mark.skipif(not prometheus_available(), reason="Debian's prometheus is not installed "
                    "(make system-packages)")
def test_a_real_prometheus_reads_opentelemetry_series(fleet, zctx, tmp_path):
    """STATS ``series`` (SPEC 4.7.1) scraped by a real Prometheus in OpenMetrics: the
    counter as ``_total``, the histogram's parts by name (``histogram_quantile`` reads
    them), the series' own ``host`` and ``instance`` renamed, the target healthy."""
    from fleetwatch.cli.demo.ports import free_port
    router = fleet.router(sink_types=SINK_TYPES)
    _, url = prometheus_sink(fleet, [router])
    agent = DealerAgent(zctx, router, "web1.example.com")
    server = PrometheusServer(tmp_path / "prometheus", [url.split("/")[2]], free_port()).start()
    try:
        def answered():
            agent.send("STATS", hostname=agent.hostname, metrics={}, series=otlp_series(7))
            got = server.query('fleetwatch_http_server_requests_total{service_name="shop",'
                               'http_route="/cart",host="web1.example.com"}')
            return got or None
        got = wait_for(answered, 60, 0.5, "the OTLP counter in Prometheus")
        assert float(got[0]["value"][1]) == 7 and got[0]["metric"]["instance"] == agent.uuid
        quantile = server.query('histogram_quantile(0.5, fleetwatch_http_server_duration_bucket'
                                '{service_name="shop"})')
        assert float(quantile[0]["value"][1]) == pytest.approx(0.1 * 5 / 6)
        mean = server.query("fleetwatch_http_server_duration_sum / "
                            "fleetwatch_http_server_duration_count")
        assert float(mean[0]["value"][1]) == 0.25
        [queue] = server.query("fleetwatch_queue_depth")
        assert queue["metric"]["host"] == "web1.example.com"
        assert queue["metric"]["instance"] == agent.uuid
        assert (queue["metric"]["exported_host"], queue["metric"]["exported_instance"]) == \
            ("container-7", "x")
        [scraped] = server.targets()
        assert scraped["health"] == "up" and scraped["lastError"] == ""
        _, om = scrape(url, openmetrics=True)
        assert "# TYPE fleetwatch_http_server_requests counter" in om
        assert "# TYPE fleetwatch_http_server_duration_bucket unknown" in om
        assert counter(url, "fleetwatch_prometheus_sink_series_bad") >= 1
    finally:
        server.stop()


def test_ten_thousand_label_sets_of_one_host_are_held_to_its_share(fleet, zctx):
    """Control characters, huge labels and 10,000 label sets from one host's application:
    the scrape stays valid, the host keeps ``max_series_per_host`` series, the rest is
    counted under its name, another host still comes in."""
    router, url = warm_sink(fleet, zctx, max_series=1500, max_series_per_host=1000)
    flood = DealerAgent(zctx, router, "flood")
    hostile = [{"name": "ctl\x1b[2J", "value": 1,
                "labels": {"k\n": 'v"}\n# EOF\x00', "__name__": "fake"}},
               {"name": "big", "value": 2, "labels": {f"k{i}": "v" * 255 for i in range(64)}}]
    for start in range(0, 10_000, 2000):
        flood.send("STATS", hostname="flood", metrics={}, series=(hostile if not start else [])
                   + [{"name": "req", "value": i, "kind": "counter", "labels": {"id": str(i)}}
                      for i in range(start, start + 2000)])
    refused = "fleetwatch_prometheus_sink_dropped_by_host_total"
    wait_for(lambda: value(url, refused, host="flood") == 10_000 + 2 - 1000, 30, 0.2,
             "the flood's refused series counted under its host")
    web = DealerAgent(zctx, router, "web1")

    def web_in():
        web.send("STATS", hostname="web1", metrics={}, series=[
            {"name": "req", "value": 5, "kind": "counter", "labels": {"id": "1"}}])
        return value(url, "fleetwatch_req_total", host="web1") == 5
    wait_for(web_in, 20, 0.2, "another host's series after the flood")
    for openmetrics in (False, True):
        _, text = scrape(url, openmetrics)
        assert not any(c in text for c in "\r\x00\x1b")
        got = samples(text, openmetrics)                # the parsers take it whole
        assert sum(1 for name, labels in got if dict(labels).get("instance") == flood.uuid
                   ) == 1000
        assert got[("fleetwatch_ctl_2J", (("host", "flood"), ("instance", flood.uuid),
                                          ("k", 'v"}\ufffd# EOF\ufffd'),
                                          ("name", "fake")))] == 1


def test_a_taken_address_stops_the_sink_with_69(fleet):
    import socket
    router = fleet.router(sink_types=SINK_TYPES)
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        proc = fleet.sink("prometheus", [router], prometheus={"listen": f"127.0.0.1:{port}"})
        wait_for(lambda: not proc.alive(), 20, 0.05, "the sink to stop")
        assert proc.popen.returncode == 69
        assert "an address it listens on" in proc.log() and "in use" in proc.log()
    finally:
        taken.close()
