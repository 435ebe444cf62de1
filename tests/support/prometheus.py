"""The prometheus sink as a real process, its scrapes, and a real Prometheus server
(Debian's ``prometheus``, the Makefile's system packages) scraping it, on 127.0.0.1."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

from support.fleet import Proc, wait_for

#: the sink types of the routers in these tests
SINK_TYPES = ("registry", "alerting", "prometheus")
#: Debian's Prometheus server
PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"

_SERVING = re.compile(r"on (http://\S+/metrics) for scrapes")


def prometheus_sink(fleet, routers, name: str = "sink-prometheus", **settings) -> tuple[Proc, str]:
    """A ``fleetwatch sink prometheus`` on a port of its choosing; (the process, its URL read
    from its log once it serves)."""
    extra = {k: settings.pop(k) for k in ("stats_interval",) if k in settings}
    proc = fleet.sink("prometheus", routers, name=name,
                      prometheus={"listen": "127.0.0.1:0", **settings},
                      **{"stats_interval": 1.0, **extra})

    def url():
        assert proc.alive(), f"the prometheus sink died:\n{proc.log()}"
        found = _SERVING.search(proc.log())
        return found.group(1) if found else None
    return proc, wait_for(url, 20, 0.05, "the prometheus sink serving")


def scrape(url: str, openmetrics: bool = False) -> tuple[str, str]:
    """(the content type, the body) of one scrape."""
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
        return r.headers["Content-Type"], r.read().decode()


def samples(text: str, openmetrics: bool = False) -> dict[tuple, float]:
    """(name, sorted label pairs) -> value of a scrape, parsed by prometheus_client's own
    parsers (which fail on an invalid exposition)."""
    if openmetrics:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(url: str, name: str, **labels) -> float | None:
    """The value of the series ``name`` whose labels include ``labels`` in a scrape."""
    for (got, pairs), v in samples(scrape(url)[1]).items():
        if got == name and set(labels.items()) <= set(pairs):
            return v
    return None


def counter(url: str, name: str, **labels) -> float | None:
    """The value of a fleetwatch counter ``name`` in a scrape, served as ``name_total``
    where the sink knows it for a counter (sinks/prometheus/catalogue.py), else as
    ``name``."""
    got = value(url, name + "_total", **labels)
    return got if got is not None else value(url, name, **labels)


class PrometheusServer:
    """A real Prometheus scraping ``targets`` (host:port) every second, its storage in
    ``root``, listening on 127.0.0.1:``port``; :meth:`query` is its HTTP API."""

    def __init__(self, root: Path, targets: list[str], port: int):
        self.root, self.port = Path(root), port
        self.root.mkdir(parents=True, exist_ok=True)
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                  # honor_labels: the sink's instance (an agent's uuid) is kept, not
                  # renamed exported_instance (docs/operating/prometheus.md)
                  "scrape_configs": [{"job_name": "fleetwatch", "honor_labels": True,
                                      "static_configs": [{"targets": targets}]}]}
        self.config = self.root / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "PrometheusServer":
        self.proc = Proc("prometheus", [
            PROMETHEUS, f"--config.file={self.config}",
            f"--storage.tsdb.path={self.root / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}"], self.root / "prometheus.log")

        def ready():
            assert self.proc.alive(), f"prometheus died:\n{self.proc.log()[-3000:]}"
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return False
        wait_for(ready, 30, 0.1, "prometheus ready")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(10)

    def query(self, promql: str) -> list[dict]:
        """The result vector of an instant query (``/api/v1/query``)."""
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            answer = json.loads(r.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def targets(self) -> list[dict]:
        with urllib.request.urlopen(f"{self.url}/api/v1/targets", timeout=10) as r:
            return json.loads(r.read())["data"]["activeTargets"]


def prometheus_available() -> bool:
    try:
        return subprocess.run([PROMETHEUS, "--version"], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
