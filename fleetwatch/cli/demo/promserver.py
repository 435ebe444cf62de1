"""Debian's Prometheus in the demo (``/usr/bin/prometheus``, package ``prometheus``): the
remote_write sink's receiver, and a server whose alert pages through fleetwatch.

:class:`PrometheusServer` writes ``DIR/prometheus.yml`` and ``DIR/rules.yml``: no scrape job
(the fleet's series come by remote write, docs/operating/remote-write.md: a scrape of the
prometheus sink beside it would store each series twice), rules judged every 5 s, one
alerting rule, :data:`ALERT` (``vector(1)``: always firing, labelled with the demo host), and
the console as its Alertmanager (``POST /api/v2/alerts`` with an ``alerter`` token read from
``DIR/token``; docs/operating/prometheus-alerts.md), which the alerting sink makes the check
``prom:DemoFromPrometheus`` of that host. Its TSDB is ``DIR/data``, kept across starts.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from pathlib import Path

import yaml

from fleetwatch import private

#: the demo's alerting rule in Prometheus, and the check it becomes in fleetwatch
ALERT = "DemoFromPrometheus"
CHECK = f"prom:{ALERT}"
SUMMARY = "an alert from Prometheus: acknowledge it in the console"
#: seconds between two resends of a firing alert (Prometheus' default: 1 minute)
RESEND = "5s"


def binary() -> str | None:
    return shutil.which("prometheus")


def missing() -> str:
    """Why the demo runs no Prometheus."""
    return ("no prometheus command: Debian's Prometheus is not installed (apt-get install "
            "prometheus; make install does)")


class PrometheusServer:
    """A Prometheus of the demo in ``root`` on 127.0.0.1:``port``, taking remote writes and
    sending its alerts to the console at ``console`` (host:port; None: nowhere) as the
    demo's alert ``host``."""

    def __init__(self, root: Path, port: int, host: str, console: str | None):
        self.root, self.port, self.host, self.console = Path(root), port, host, console

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def write_url(self) -> str:
        return f"{self.url}/api/v1/write"

    @property
    def config_path(self) -> Path:
        return self.root / "prometheus.yml"

    @property
    def token_path(self) -> Path:
        return self.root / "token"

    @property
    def log_path(self) -> Path:
        return self.root.parent / "logs" / "prometheus-server.log"

    def write_config(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        config = {"global": {"scrape_interval": "15s", "evaluation_interval": "5s"},
                  "rule_files": ["rules.yml"]}
        if self.console:
            config["alerting"] = {"alertmanagers": [{
                "static_configs": [{"targets": [self.console]}],
                "authorization": {"credentials_file": str(self.token_path)}}]}
        rules = {"groups": [{"name": "demo", "rules": [{
            "alert": ALERT, "expr": "vector(1)",
            "labels": {"host": self.host, "severity": "warning"},
            "annotations": {"summary": SUMMARY}}]}]}
        private.write(self.config_path, yaml.safe_dump(config, sort_keys=False))
        private.write(self.root / "rules.yml", yaml.safe_dump(rules, sort_keys=False))

    def command(self) -> list[str]:
        return [binary() or "prometheus", f"--config.file={self.config_path}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--web.external-url={self.url}/", "--web.enable-remote-write-receiver",
                f"--rules.alert.resend-delay={RESEND}"]

    def ready(self) -> bool:
        """Whether it answers ``/-/ready``."""
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as res:
                return res.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False
