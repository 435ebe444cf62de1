"""The demo's parts of issue 36 on their own: the OTLP application (fleetwatch/cli/demo/
otlpapp.py) exporting to a local OTLP/HTTP server, Prometheus' config
(fleetwatch/cli/demo/promserver.py), and what the demo prints without Prometheus or the OTLP
extra. The whole of it runs in tests/integration/test_demo.py."""

from __future__ import annotations

import random
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from fleetwatch.cli.demo import otlp_lines, prometheus_lines
from fleetwatch.cli.demo.promserver import ALERT, PrometheusServer

pytestmark = pytest.mark.timeout(60)


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP server keeping each ExportMetricsServiceRequest posted to /v1/metrics."""

    def __init__(self):
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import \
            ExportMetricsServiceRequest, ExportMetricsServiceResponse
        got, self.requests = threading.Condition(), []
        self.got = got
        requests = self.requests

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with got:
                    requests.append((self.path, ExportMetricsServiceRequest.FromString(body)))
                    got.notify_all()
                answer = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args):
                pass
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


def test_the_otlp_app_exports_its_four_instruments_and_stops_in_time():
    pytest.importorskip("opentelemetry.sdk")
    pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
    from fleetwatch.cli.demo import otlpapp

    collector = Collector()
    stopping = threading.Event()
    # (exporting every 0.6 s here, every 5 s in the demo)
    app = threading.Thread(target=otlpapp.run, args=(collector.url, stopping,
                                                     random.Random(7), 600))
    app.start()
    try:
        with collector.got:             # an export with what it recorded
            assert collector.got.wait_for(lambda: any(
                m.name == "shop.request.duration" for _, r in collector.requests
                for rm in r.resource_metrics for sm in rm.scope_metrics for m in sm.metrics),
                timeout=20)
    finally:
        stopping.set()
        began = time.monotonic()
        app.join(10)
        took = time.monotonic() - began
        collector.shutdown()
        collector.server_close()
    assert not app.is_alive() and took < 3, took      # the last export, then shut down
    path, request = collector.requests[-1]
    assert path == "/v1/metrics"
    (resource,) = request.resource_metrics
    attributes = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert attributes["service.name"] == "demo-shop"
    assert attributes["host.name"] == "not-this-host.example"
    metrics = {m.name: m for s in resource.scope_metrics for m in s.metrics}
    assert set(metrics) == {"shop.orders", "shop.request.duration", "shop.queue.depth",
                            "shop.temperature"}
    assert metrics["shop.orders"].sum.is_monotonic
    assert {a.value.string_value for p in metrics["shop.orders"].sum.data_points
            for a in p.attributes if a.key == "kind"} <= {"web", "phone"}
    (point,) = metrics["shop.request.duration"].histogram.data_points
    assert list(point.explicit_bounds) == [0.01, 0.05, 0.1, 0.5, 1.0] and point.count >= 1
    assert not metrics["shop.queue.depth"].sum.is_monotonic
    assert metrics["shop.temperature"].WhichOneof("data") == "gauge"


def test_the_otlp_app_refuses_a_bad_argument(capsys):
    from fleetwatch.cli.demo import otlpapp
    assert otlpapp.main(["127.0.0.1:4318"]) == 64
    assert "usage: python -m fleetwatch.cli.demo.otlpapp http://HOST:PORT" in \
        capsys.readouterr().err


def test_prometheus_is_fed_by_remote_write_and_sends_its_alert_to_the_console(tmp_path):
    server = PrometheusServer(tmp_path / "prometheus", 19090, "web-1", "127.0.0.1:8080")
    server.write_config()
    config = yaml.safe_load(server.config_path.read_text())
    assert "scrape_configs" not in config          # by remote write only: no duplicates
    assert config["global"] == {"scrape_interval": "15s", "evaluation_interval": "5s"}
    (manager,) = config["alerting"]["alertmanagers"]
    assert manager == {"static_configs": [{"targets": ["127.0.0.1:8080"]}],
                       "authorization": {"credentials_file": str(server.token_path)}}
    (rule,) = yaml.safe_load((server.root / "rules.yml").read_text())["groups"][0]["rules"]
    assert rule["alert"] == ALERT and rule["expr"] == "vector(1)"
    assert rule["labels"] == {"host": "web-1", "severity": "warning"}
    assert server.config_path.stat().st_mode & 0o777 == 0o600
    argv = server.command()
    assert {"--web.enable-remote-write-receiver", "--web.listen-address=127.0.0.1:19090",
            "--web.external-url=http://127.0.0.1:19090/", "--rules.alert.resend-delay=5s",
            f"--storage.tsdb.path={server.root / 'data'}"} <= set(argv)
    # without the console (no web extra), Prometheus sends its alert nowhere
    alone = PrometheusServer(tmp_path / "alone", 19091, "web-1", None)
    alone.write_config()
    assert "alerting" not in yaml.safe_load(alone.config_path.read_text())
    lines = prometheus_lines({"prometheus_server": alone, "remote_write": {
        "url": alone.write_url, "queue_dir": "/d/remote-write", "max_disk": 64 << 20}})
    assert f"its alert {ALERT} goes nowhere: the console needs the web extra" in lines[0]


def test_without_prometheus_or_the_otlp_extra_the_demo_says_why():
    lines = prometheus_lines({"prometheus_server": None, "remote_write": {
        "url": "http://127.0.0.1:9/api/v1/write", "queue_dir": "/d/remote-write",
        "max_disk": 64 << 20}})
    assert lines[0].startswith("  prometheus-server not running: no prometheus command")
    assert "nothing listens there" in lines[1] and "/d/remote-write/, 64 MiB" in lines[1]
    assert otlp_lines({"otlp": None}) == [
        "  otlp            off: the agent's OTLP intake needs opentelemetry-proto (pip "
        "install 'fleetwatch[otlp]')"]
    assert otlp_lines({"otlp": "http://127.0.0.1:4318", "otlp_app": True})[0] == (
        "  otlp            OTLP http://127.0.0.1:4318 (the agent's OTLP/HTTP intake, POST "
        "/v1/metrics; docs/operating/otlp.md)")
