"""Prometheus alerts through fleetwatch, end to end: Debian's real Prometheus (2.42) with an
alerting rule on a metric the test serves, the console (``fleetwatch web``) as its
Alertmanager with an ``alerter`` token, and a fleet (a router, the registry sink, two
alerting sinks, an agent ``agent-host``, a webhook receiver as the pager).

The alert becomes the check ``prom:DiskBroken`` of the agent's host (its target's ``host``
label): CRITICAL in ``status --json`` (source ``prometheus``), paged once though two sinks
judge it, on the host's console page; ``fleetwatch ack add`` acknowledges it; the metric
back to 0, Prometheus resolves it and it recovers: one resolve. An alert naming no agent is
counted and listed with why. Debian's vmalert, sending there too, raises its own check, and
once stopped (it sends no more) the check recovers when the ``endsAt`` it gave passes.
Then bad posts against a console of their own: no token, a viewer's, a body that is not
JSON, an alert without labels, the wrong content type, a body too large, more alerts than
``web.alerts_max``: each answered as Alertmanager answers it, counted, and the console
still takes a good post after.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from fleetwatch.cli.demo.ports import free_port
from fleetwatch.display import iso
from support.channelservers import HttpReceiver
from support.console import serve
from support.fleet import Proc, agent_uuid_for, wait_for
from support.prometheus import PROMETHEUS, prometheus_available

pytest.importorskip("fastapi")
pytestmark = [pytest.mark.timeout(180),
              pytest.mark.skipif(not prometheus_available(), reason="no prometheus binary")]

CHECK = "prom:DiskBroken"
#: Debian's vmalert (package victoria-metrics), when installed
VMALERT = shutil.which("vmalert")


class Exporter(ThreadingHTTPServer):
    """``/metrics`` with one gauge the test sets (:attr:`value`), for Prometheus to scrape."""

    def __init__(self):
        exporter = self
        self.value = 1

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = f"fleetwatch_test_broken {exporter.value}\n".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        super().__init__(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def prometheus(root: Path, exporter: str, console: str, token: str) -> Proc:
    """A real Prometheus scraping ``exporter`` (its target labelled ``host: agent-host``),
    its rules judged every second and sent to ``console`` as its Alertmanager with
    ``token``, resent every second."""
    root.mkdir()
    rules = {"groups": [{"name": "fleet", "interval": "1s", "rules": [
        {"alert": "DiskBroken", "expr": "fleetwatch_test_broken > 0",
         "labels": {"severity": "critical"},
         "annotations": {"summary": "disk broken on {{ $labels.host }}",
                         "description": "fleetwatch_test_broken is {{ $value }}"}},
        {"alert": "Orphan", "expr": "vector(1)",
         "labels": {"host": "nowhere-host", "severity": "warning"}}]}]}
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": [str(root / "rules.yml")],
              "scrape_configs": [{"job_name": "exporter", "static_configs": [
                  {"targets": [exporter], "labels": {"host": "agent-host"}}]}],
              "alerting": {"alertmanagers": [{
                  "static_configs": [{"targets": [console]}],
                  "authorization": {"credentials": token}, "timeout": "5s"}]}}
    (root / "rules.yml").write_text(yaml.safe_dump(rules))
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    return Proc("prometheus", [
        PROMETHEUS, f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={root / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
        f"--web.external-url=http://127.0.0.1:{port}/", "--rules.alert.resend-delay=1s"],
        root / "prometheus.log")


def vmalert(root: Path, datasource: str, console: str, token: str) -> Proc:
    """Debian's vmalert (victoria-metrics) judging ``vector(1)`` every second on
    ``datasource`` (a Prometheus query API), its alert labelled ``host: agent-host``, sent to
    the console with ``token`` (``-notifier.url``, as docs/operating/prometheus-alerts.md
    says)."""
    root.mkdir()
    rules = {"groups": [{"name": "vm", "rules": [
        {"alert": "FromVmalert", "expr": "vector(1)",
         "labels": {"host": "agent-host", "severity": "warning"},
         "annotations": {"summary": "vmalert says hello"}}]}]}
    (root / "rules.yml").write_text(yaml.safe_dump(rules))
    return Proc("vmalert", [
        VMALERT, f"-rule={root / 'rules.yml'}", f"-datasource.url={datasource}",
        f"-notifier.url=http://{console}", f"-notifier.bearerToken={token}",
        "-evaluationInterval=1s", f"-httpListenAddr=127.0.0.1:{free_port()}"],
        root / "vmalert.log")


def prom_url(proc: Proc) -> str:
    """The address a :func:`prometheus` listens on (its command line's)."""
    arg = next(a for a in proc.argv if a.startswith("--web.listen-address="))
    return "http://" + arg.split("=", 1)[1]


def alerting(hook: str) -> dict:
    return {"max_check_attempts": 1, "flap_detection": False, "renotify_interval": 0,
            "tick_interval": 0.2,
            "prometheus_alerts": {"interval": 1, "ignore_labels": ["job"]},
            "delivery": {"channels": {"pager": {"type": "webhook", "url": hook, "timeout": 2}},
                         "rules": [{"channels": ["pager"]}],
                         "retry": {"initial": 0.05, "max": 0.2}, "poll_interval": 0.1,
                         "lease": 10}}


def rfc3339(ts: float) -> str:
    return str(iso(ts))


def token(fleet, op, user: str, role: str) -> str:
    return fleet.cli("web", "token", "add", user, "--label", f"{role}-token", "--role", role,
                     "--config", str(op)).stdout.strip()


def request(url: str, path: str, token: str | None = None, body: bytes | None = None,
            kind: str = "application/json", method: str | None = None):
    """(status, the answer's JSON or None, its text) of one request."""
    headers = {"Content-Type": kind}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + path, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=20) as res:
            status, text = res.status, res.read().decode()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read().decode()
    try:
        return status, json.loads(text) if text else None, text
    except ValueError:
        return status, None, text


def test_a_prometheus_alert_pages_once_is_acked_and_resolves(fleet, tmp_path):
    hook = HttpReceiver().start()
    exporter = Exporter()
    prom = vm = None
    try:
        router = fleet.router(sink_types=("registry", "alerting"))
        fleet.sink("registry", [router])
        for i in (1, 2):
            fleet.sink("alerting", [router], name=f"sink-alerting-{i}",
                       alerting=alerting(hook.url))
        fleet.agent([router])
        op = fleet.operator_config([router])
        url = serve(fleet, op, users=(("alice", "operator"),))
        wait_for(lambda: fleet.db_rows("SELECT hostname FROM agents"), 20, what="the agent")
        uuid = agent_uuid_for(fleet)
        alerter = token(fleet, op, "alice", "alerter")
        prom = prometheus(tmp_path / "prom", exporter.target, url.split("//")[1], alerter)

        def check():
            found = [c for c in fleet.status(op, check=False)["checks"]
                     if c["plugin"] == CHECK]
            return found[0] if found else None

        def told(action):
            return [p for p in list(hook.posts) if p["event_action"] == action]
        # (the notifier finds its Alertmanager about 5 s after Prometheus starts)
        firing = wait_for(lambda: (c := check()) and c["status"] == 2 and c, 60, 0.3,
                          f"{CHECK} CRITICAL in status")
        assert firing["hostname"] == "agent-host" and firing["uuid"] == uuid
        assert firing["sources"] == ["prometheus"]
        assert firing["output"] == "disk broken on agent-host"
        assert "fleetwatch_test_broken is 1" in firing["long_output"]
        (page,) = wait_for(lambda: told("trigger"), 20, 0.1, "the page")
        assert page["dedup_key"] == f"{uuid}/check/{CHECK}"
        assert [a["action"] for a in fleet.alerts(op) if a["key"] == page["dedup_key"]] \
            == ["trigger"]

        operator = token(fleet, op, "alice", "operator")
        status, _, html = request(url, f"/hosts/{uuid}", operator)
        assert status == 200 and CHECK in html and "disk broken on agent-host" in html
        status, listed, _ = request(url, "/api/v1/problems", operator)
        assert [(p["hostname"], p.get("check"), p["state"]) for p in listed["items"]] == \
            [("agent-host", CHECK, "CRITICAL")]
        status, listed, _ = request(url, "/api/v1/prometheus/alerts", operator)
        assert status == 200
        mine = {a["labels"]["alertname"]: a for a in listed["alerts"]}
        assert mine["DiskBroken"]["check"] == CHECK and mine["DiskBroken"]["uuid"] == uuid
        def orphan():
            listed = request(url, "/api/v1/prometheus/alerts", operator)[1]["alerts"]
            return next((a["refused"] for a in listed
                         if a["labels"]["alertname"] == "Orphan" and a["refused"]), None)
        assert wait_for(orphan, 20, 0.2, "the orphan judged") == "no agent named nowhere-host"
        assert not [c for c in fleet.status(op, check=False)["checks"]
                    if c["plugin"].startswith("prom:Orphan")]

        out = fleet.cli("ack", "add", "agent-host", CHECK, "--comment", "replacing it",
                        "--config", str(op)).stdout
        assert out.startswith(f"ack 1: agent-host {CHECK} (CRITICAL) [")
        wait_for(lambda: told("acknowledge"), 20, 0.1, "the acknowledge event")

        exporter.value = 0                  # the rule stops firing: Prometheus resolves it
        wait_for(lambda: told("resolve"), 40, 0.2, "the recovery")
        recovered = check()
        assert recovered["status"] == 0 and recovered["output"].startswith("resolved at ")
        assert [p["event_action"] for p in hook.posts] == ["trigger", "acknowledge",
                                                           "resolve"]
        actions = [a["action"] for a in fleet.alerts(op) if a["key"] == page["dedup_key"]]
        assert sorted(actions) == ["acknowledge", "resolve", "trigger"]
        assert "ERROR" not in prom.log() and "bad response status" not in prom.log()

        if VMALERT is None:
            return
        # vmalert as well; stopped, it sends no more, and the endsAt it gave passes
        vm = vmalert(tmp_path / "vm", prom_url(prom), url.split("//")[1], alerter)

        def other():
            return [c for c in fleet.status(op, check=False)["checks"]
                    if c["plugin"] == "prom:FromVmalert"]
        (c,) = wait_for(lambda: [c for c in other() if c["status"] == 1], 40, 0.3,
                        "vmalert's alert WARNING in status")
        assert c["output"] == "vmalert says hello" and c["hostname"] == "agent-host"
        vm.stop(10)
        wait_for(lambda: other()[0]["status"] == 0, 60, 0.3, "vmalert's alert resolved")
        assert other()[0]["output"].startswith("resolved at ")
    finally:
        if vm is not None:
            vm.stop(10)
        if prom is not None:
            prom.stop(10)
        exporter.stop()
        hook.stop()


def test_bad_posts_get_alertmanagers_answers_and_are_counted(fleet):
    router = fleet.router(sink_types=("registry", "alerting"))
    op = fleet.operator_config([router])
    url = serve(fleet, op, web="  max_body: 4096\n  alerts_max: 5\n",
                users=(("alice", "operator"), ("bob", "viewer")))
    alerter, viewer = token(fleet, op, "alice", "alerter"), token(fleet, op, "bob", "viewer")

    def post(body, who=alerter, kind="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        return request(url, "/api/v2/alerts", who, data, kind)[:2]

    one = [{"labels": {"alertname": "A", "host": "h-0"}}]
    assert post(one, None) == (401, {"code": 401, "message":
                                     "log in, or send Authorization: Bearer TOKEN"})
    assert post(one, "fwt_not-a-token")[0] == 401
    assert post(one, viewer) == (403, {"code": 403, "message": (
        "viewer may not post alerts (a token whose role is alerter, operator or admin may)")})
    assert post(b'[{"labels":') == (400, {"code": 400, "message": (
        "parsing alerts body failed, because Expecting value: line 1 column 12 (char 11)")})
    assert post([{"annotations": {}}]) == (422, {"code": 602, "message":
                                                 "0.labels in body is required"})
    assert post([{"labels": {}}, {"labels": {"a": ""}}]) == (
        400, "at least one label pair required; at least one label pair required")
    assert post(one, kind="text/plain") == (415, {"code": 415, "message": (
        "unsupported media type 'text/plain', only [application/json] are allowed")})
    assert post([{"labels": {"alertname": "A", "x": "y" * 5000}}])[0] == 413
    # an alerter may post and nothing else
    assert request(url, "/api/v1/hosts", alerter)[:2] == (403, {"error":
                                                              "alerter may not read"})
    assert post(one) == (200, None)
    flood = [{"labels": {"alertname": "Flood", "host": f"h-{i}"}} for i in range(8)]
    assert post(flood) == (429, {"code": 429, "message": (
        "4 new alert(s) refused: the console holds 5 alerts still firing (web.alerts_max)")})
    assert post(one) == (200, None)             # one held already: merged, not refused
    now = time.time()
    resolved = [{**a, "startsAt": rfc3339(now - 60), "endsAt": rfc3339(now - 1)}
                for a in flood[:4]]
    assert post(resolved) == (200, None)        # resolved: they make room for new ones
    assert post(flood[4:6]) == (200, None)

    status, listed, _ = request(url, "/api/v1/prometheus/alerts", viewer)
    assert status == 200 and listed["limit"] == 5
    held = sorted((a["labels"]["alertname"], a["state"], a["labels"]["host"])
                  for a in listed["alerts"])
    assert [h[:2] for h in held] == [("A", "firing"), ("Flood", "firing"), ("Flood", "firing"),
                                     ("Flood", "resolved"), ("Flood", "resolved")]
    assert [h[2] for h in held[1:3]] == ["h-4", "h-5"]
    assert listed["counts"] == {
        "alerts_unauthorized": 2, "alerts_forbidden": 1, "alerts_unparsable": 2,
        "alerts_invalid": 2, "alerts_bad_type": 1, "alerts_too_large": 1,
        "alerts_received": 16, "alerts_resolved": 4, "alerts_new": 7,
        "alerts_refused_full": 4}
    assert request(url, "/api/v2/alerts", alerter, method="GET")[0] == 405
