"""The ``alertmanager`` channel (issue 34): the real deliverer against a real Prometheus
Alertmanager (Debian's ``prometheus-alertmanager``, started here on 127.0.0.1 without
clustering, notifying a webhook of the test's), and against the stand-in of the demo
(fleetwatch/cli/demo/receivers/alertmanager.py ``Alertmanager``) for what a real one
cannot be made to answer (a proxy's 401, a 429, a 503).

A problem is an alert in the Alertmanager's API with the fleet's labels, its fingerprint
the delivery's message id, and the Alertmanager notifies it; its acknowledgement is an
annotation; its recovery resolves it (gone from the API, ``resolved`` at the webhook). A
change of severity leaves one alert firing, not two. Agents' text arrives with its
mentions broken; a refused token fails the alert and the channel at once, and is never
written anywhere. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetwatch.cli.demo.ports import free_port
from fleetwatch.config import build
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(60)

from fleetwatch.cli.demo.receivers.alertmanager import Alertmanager  # noqa: E402
from sinks.alerting.delivery.config import DeliveryConfig  # noqa: E402
from support.delivering import U1, enqueue, fast, recorded, secret_file  # noqa: E402

U2 = "9b1d6c2a-0e5f-4c3b-8a7d-6e5f4d3c2b1a"
BINARY = shutil.which("prometheus-alertmanager")


def event(action: str = "trigger", severity: str = "critical", uuid: str = U1,
          host: str = "web-1", **more) -> dict:
    now = time.time()
    return {"key": f"{uuid}/check/check_disk", "kind": "check", "action": action,
            "severity": severity if action != "resolve" else "ok", "uuid": uuid,
            "hostname": host, "check": "check_disk",
            "status": {"critical": 2, "warning": 1}.get(severity, 0),
            "summary": "DISK CRITICAL - / 95%", "text": "/ 95% used\nfree 1.2 GB",
            "created": now, **({"since": now - 120} if action == "trigger" else {}), **more}


class Hook:
    """The Alertmanager's webhook receiver: each notification's JSON kept (``got``)."""

    def __init__(self):
        hook = self
        self.got: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                hook.got.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook"
        threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True).start()

    def statuses(self, fingerprint: str) -> list[str]:
        """What the notifications said of the alert ``fingerprint``, in order."""
        return [a["status"] for n in self.got for a in n["alerts"]
                if a["fingerprint"] == fingerprint]

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def alertmanager(tmp_path):
    """A real Alertmanager on 127.0.0.1 (no clustering) notifying a :class:`Hook` at once
    (group_wait and group_interval 1 s, resolved alerts too): ``(url, hook)``."""
    if BINARY is None:
        pytest.skip("prometheus-alertmanager is not installed (Debian: apt-get install "
                    "prometheus-alertmanager)")
    hook, port = Hook(), free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text(json.dumps({
        "route": {"receiver": "hook", "group_by": ["alertname"], "group_wait": "1s",
                  "group_interval": "1s", "repeat_interval": "1h"},
        "receivers": [{"name": "hook", "webhook_configs": [{"url": hook.url,
                                                            "send_resolved": True}]}]}))
    proc = subprocess.Popen(
        [BINARY, f"--config.file={config}", f"--web.listen-address=127.0.0.1:{port}",
         f"--storage.path={tmp_path / 'am-data'}", "--cluster.listen-address="],
        stdout=subprocess.DEVNULL, stderr=open(tmp_path / "alertmanager.log", "wb"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _ready(url) or proc.poll() is not None, 15, interval=0.05,
                 what="the Alertmanager to be ready")
        assert proc.poll() is None, (tmp_path / "alertmanager.log").read_text()[-2000:]
        yield url, hook
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        hook.stop()


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as r:
            return r.status == 200
    except OSError:
        return False


def listed(url: str, **labels) -> list[dict]:
    """The Alertmanager's alerts (``GET /api/v2/alerts``) with ``labels``."""
    query = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in labels.items()])
    with urllib.request.urlopen(f"{url}/api/v2/alerts?{query}", timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture
def run(deliverers):
    """``run(url, **channel)``: a deliverer thread with one alertmanager channel ``am``."""
    def start(url: str, **channel) -> DeliveryConfig:
        config = fast({"am": {"type": "alertmanager", "url": url, "timeout": 5,
                              "labels": {"team": "ops"}, **channel}},
                      console_url="https://fleet.example.com/")
        deliverers(config)
        return config
    return start


def test_a_problem_fires_in_the_alertmanager_is_acknowledged_and_resolves(
        eng, run, alertmanager):
    url, hook = alertmanager
    config = run(url)
    enqueue(eng, config, event())
    (alert,) = wait_for(lambda: listed(url, team="ops"), 20, interval=0.05,
                        what="the alert in the Alertmanager")
    assert alert["labels"] == {
        "alertname": "check_disk", "host": "web-1", "uuid": U1, "check": "check_disk",
        "severity": "critical", "fleetwatch_key": f"{U1}/check/check_disk", "team": "ops"}
    assert alert["annotations"] == {
        "summary": "CRITICAL web-1/check_disk: DISK CRITICAL - / 95%",
        "description": "/ 95% used\nfree 1.2 GB",
        "console": f"https://fleet.example.com/hosts/{U1}"}
    assert alert["generatorURL"] == f"https://fleet.example.com/hosts/{U1}"
    assert alert["status"]["state"] == "active"
    (sent,) = wait_for(lambda: recorded(eng), 20, interval=0.05, what="its delivery")
    assert (sent["status"], sent["message_id"]) == ("HTTP 200", alert["fingerprint"])
    fp = alert["fingerprint"]
    wait_for(lambda: hook.statuses(fp) == ["firing"], 20, interval=0.05,
             what=lambda: f"the firing notification (got {hook.got})")

    enqueue(eng, config, event("acknowledge", summary="acknowledged by alice: on it"))
    wait_for(lambda: [a for a in listed(url, team="ops")
                      if a["annotations"].get("acknowledged") == "acknowledged by alice: on it"],
             20, interval=0.05, what="the acknowledgement's annotation")
    (acked,) = listed(url, team="ops")
    assert acked["fingerprint"] == fp and acked["startsAt"] == alert["startsAt"]

    enqueue(eng, config, event("resolve", summary="DISK OK - / 40%"))
    wait_for(lambda: listed(url, team="ops") == [], 20, interval=0.05,
             what="the alert resolved (gone from the API)")
    wait_for(lambda: hook.statuses(fp)[-1:] == ["resolved"], 20, interval=0.05,
             what=lambda: f"the resolved notification (got {hook.statuses(fp)})")
    resolved = [a for n in hook.got for a in n["alerts"] if a["status"] == "resolved"][-1]
    assert resolved["labels"]["severity"] == "critical"      # its labels, not the recovery's
    assert resolved["annotations"]["summary"] == "RECOVERY web-1/check_disk: DISK OK - / 40%"
    assert [d["status"] for d in recorded(eng)] == ["HTTP 200"] * 3


def test_a_change_of_severity_leaves_one_alert_firing(eng, run, alertmanager):
    url, hook = alertmanager
    config = run(url)
    enqueue(eng, config, event(severity="warning"))
    (warning,) = wait_for(lambda: listed(url, team="ops"), 20, interval=0.05,
                          what="the WARNING alert")
    enqueue(eng, config, event(severity="critical"))
    wait_for(lambda: [a["labels"]["severity"] for a in listed(url, team="ops")] ==
             ["critical"], 20, interval=0.05, what="the CRITICAL alert alone")
    enqueue(eng, config, event("resolve"))
    wait_for(lambda: listed(url, team="ops") == [], 20, interval=0.05, what="all resolved")
    wait_for(lambda: "resolved" in hook.statuses(warning["fingerprint"]), 20, interval=0.05,
             what="the WARNING alert resolved at the webhook")


def test_a_group_is_one_post_and_agents_text_arrives_inert(eng, run):
    server = Alertmanager(None, 0).start()
    try:
        config = run(server.url, group_wait=0.3)
        for ev in (event(host="web-1", text="/ 95% @here <!channel> <@U123>\x1b[31m red"),
                   event(uuid=U2, host="web-2@channel")):
            enqueue(eng, config, ev)                # each in a transaction of its own
        wait_for(lambda: server.posts, 20, interval=0.05, what="the group's POST")
        (post,) = server.posts
        assert len(post) == 2 and len(server.firing()) == 2
        by_host = {a["labels"]["host"]: a for a in post}
        assert set(by_host) == {"web-1", "web-2@\u200bchannel"}
        text = by_host["web-1"]["annotations"]["description"]
        assert text == "/ 95% @\u200bhere <\u200b!channel> <\u200b@\u200bU123>\\x1b[31m red"
        sent = wait_for(lambda: recorded(eng), 20, interval=0.05, what="the deliveries")
        assert [(d["status"], d["answer"]) for d in sent] == \
            [("HTTP 200", "posted 2 firing, 0 resolved")] * 2
    finally:
        server.stop()


def test_a_refused_token_fails_the_alert_and_the_channel_at_once(eng, run, tmp_path,
                                                                 caplog):
    server = Alertmanager(None, 0, tokens=("am-secret-ok",)).start()
    try:
        config = run(server.url, token_file=secret_file(tmp_path, "am-token",
                                                         "am-secret-revoked"))
        enqueue(eng, config, event())
        (failed,) = wait_for(lambda: [d for d in recorded(eng) if d["outcome"] == "failed"],
                             20, interval=0.05, what="the refusal")
        assert failed["status"] == "HTTP 401" and server.alerts == {}
        assert "am-secret" not in json.dumps(recorded(eng))
        assert "am-secret" not in caplog.text
        from fleetwatch.actions.channels import listed as channels
        (am,) = channels(eng.url.render_as_string(hide_password=False))
        assert am["state"] == "failing" and am["last_status"] == "HTTP 401"
    finally:
        server.stop()


def test_a_429_waits_its_retry_after_and_a_503_is_retried(eng, run, tmp_path):
    server = Alertmanager(None, 0, tokens=("am-secret",)).start()
    try:
        token = secret_file(tmp_path, "am-token", "am-secret")
        server.failing, server.fail_status, server.retry_after = 1, 429, 1
        config = run(server.url, token_file=token)
        began = time.monotonic()
        enqueue(eng, config, event())
        wait_for(lambda: server.firing(), 20, interval=0.05, what="the alert after the 429")
        assert time.monotonic() - began >= 0.9
        server.failing, server.fail_status = 2, 503
        enqueue(eng, config, event("resolve"))
        wait_for(lambda: not server.firing(), 20, interval=0.05, what="the resolve after 503s")
        tried = [d["status"] for d in recorded(eng)]
        assert tried.count("HTTP 429") == 1 and tried.count("HTTP 503") >= 1
    finally:
        server.stop()


def test_labels_that_the_fleet_sets_are_refused_at_start():
    from fleetwatch.config import ConfigError
    with pytest.raises(ConfigError, match=r"channels\.am\.labels: severity is set by the "
                                          r"fleet"):
        build(DeliveryConfig, {"channels": {"am": {"type": "alertmanager",
                                                   "url": "http://am:9093",
                                                   "labels": {"severity": "page"}}}},
              "sink.yaml", "alerting.delivery")
