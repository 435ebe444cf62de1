"""Real remote-write receivers on 127.0.0.1 for the remote_write sink's tests and benchmark:
Debian's ``prometheus`` with ``--web.enable-remote-write-receiver`` and Debian's
``victoria-metrics`` with ``-search.latencyOffset=0s -search.disableCache`` (by default a
query sees a write only 30 s later) and ``/internal/force_flush`` before each query (about
1 s sooner still), each on a free port it keeps
across a restart (:meth:`Receiver.stop` then :meth:`Receiver.start` again: the sink's
outage), with its data in the test's directory; :meth:`Receiver.query` is its
``/api/v1/query``."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from fleetwatch.cli.demo.ports import free_port
from support.fleet import Proc, wait_for

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
VICTORIA = shutil.which("victoria-metrics") or "/usr/bin/victoria-metrics"


class Receiver:
    """One receiver process; ``kind`` names it in logs."""

    kind = "receiver"
    #: the path that answers 200 once the receiver serves
    ready_path = "/-/ready"
    #: the path remote writes go to
    write_path = "/api/v1/write"

    def __init__(self, root: Path):
        self.root = Path(root) / self.kind
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.proc: Proc | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def write_url(self) -> str:
        return self.url + self.write_path

    def argv(self) -> list[str]:
        raise NotImplementedError

    def start(self) -> "Receiver":
        self.proc = Proc(self.kind, self.argv(), self.root / f"{self.kind}.log")

        def ready():
            assert self.proc.alive(), f"{self.kind} died:\n{self.proc.log()[-3000:]}"
            try:
                with urllib.request.urlopen(self.url + self.ready_path, timeout=2) as r:
                    return r.status == 200
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                return False
        wait_for(ready, 30, 0.05, f"{self.kind} ready")
        return self

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop(15)

    def flush(self) -> None:
        """Make what was written visible to queries (a no-op but for VictoriaMetrics)."""

    def query(self, promql: str) -> list[dict]:
        """The result vector of an instant query at now."""
        self.flush()
        url = f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
        with urllib.request.urlopen(url, timeout=10) as r:
            answer = json.loads(r.read())
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def value(self, promql: str) -> float | None:
        """The one value an instant query returns, None for none."""
        result = self.query(promql)
        assert len(result) <= 1, result
        return float(result[0]["value"][1]) if result else None


class PrometheusReceiver(Receiver):
    kind = "prometheus"

    def argv(self) -> list[str]:
        config = self.root / "prometheus.yml"
        config.write_text("global: {scrape_interval: 15s}\n")
        return [PROMETHEUS, f"--config.file={config}",
                f"--storage.tsdb.path={self.root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--web.external-url={self.url}/", "--web.enable-remote-write-receiver"]


class VictoriaMetrics(Receiver):
    kind = "victoria-metrics"
    ready_path = "/health"

    def argv(self) -> list[str]:
        return [VICTORIA, f"-httpListenAddr=127.0.0.1:{self.port}",
                f"-storageDataPath={self.root / 'data'}", "-retentionPeriod=1d",
                "-search.latencyOffset=0s", "-search.disableCache"]

    def flush(self) -> None:
        with urllib.request.urlopen(self.url + "/internal/force_flush", timeout=10) as r:
            r.read()


RECEIVERS = {"prometheus": PrometheusReceiver, "victoria-metrics": VictoriaMetrics}


def available(kind: str) -> bool:
    binary = PROMETHEUS if kind == "prometheus" else VICTORIA
    flag = "--version" if kind == "prometheus" else "-version"
    try:
        return subprocess.run([binary, flag], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
