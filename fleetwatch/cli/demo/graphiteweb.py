"""A real graphite-web on 127.0.0.1 over a carbon-cache's whisper files, for the demo and the
tests: the render API (``/render?target=...&format=json``, ``/metrics/find``) that the
console's graphs read (:mod:`fleetwatch.graphs`).

:class:`GraphiteWeb` writes a settings module into ``DIR`` (graphite-web reads its
``local_settings`` from the module named by ``GRAPHITE_SETTINGS_MODULE``): the carbon's
whisper directory, graphite-web's own storage (its SQLite database, index and logs) in
``DIR/storage``, a ``SECRET_KEY`` made afresh each time, times in UTC, and carbon's cache
query port as ``CARBONLINK_HOSTS`` so points carbon has read but not yet written are served
too, and the tag database (``TAGDB``, graphite-web's default written out: its tables in the
same SQLite database), where carbon registers tagged series (``/tags/tagMultiSeries``) when
it is given this graphite-web's URL (:class:`~fleetwatch.cli.demo.carbon.Carbon`'s
``tagdb``) and the console finds them (``/tags/findSeries``). The process it runs is
``python -m fleetwatch.cli.demo.graphiteweb``: it creates or upgrades graphite-web's tables
(``migrate``; graphite-web keeps users, tags and dashboards in Django's database even when
only the render API is used), then becomes gunicorn serving ``graphite.wsgi`` on
``127.0.0.1:PORT``.

gunicorn is the WSGI server graphite-web's own documentation deploys with: maintained, a
pre-fork server for Unix, and it stops cleanly on SIGTERM (workers finish the request in
hand, ``--graceful-timeout`` bounds the wait). The demo runs it with two workers.

Usage::

    web = GraphiteWeb("/tmp/x/graphite-web", carbon).start()   # port: a free one
    ... GET web.url + "/render?target=...&format=json" ...
    web.stop()

With tagged series, the port comes first: carbon must know graphite-web's URL before it
starts (started first, graphite-web has the series from carbon's first registration; a
registration it missed is sent again within seconds)::

    port = free_port()
    carbon = Carbon("/tmp/x/carbon", tagdb=f"http://127.0.0.1:{port}")
    web = GraphiteWeb.over("/tmp/x/graphite-web", carbon, port).start()
    carbon.start()
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import secrets
import sys
import urllib.error
import urllib.request
from pathlib import Path

from fleetwatch.cli.demo.ports import free_port
from fleetwatch.cli.demo.server import LocalServer

#: graphite-web's local settings (a Python module it imports), written by :meth:`write_config`
SETTINGS = """\
# Written by fleetwatch (fleetwatch/cli/demo/graphiteweb.py) at each start; edits are lost.
SECRET_KEY = {secret!r}
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
STORAGE_DIR = {storage!r}
WHISPER_DIR = {whisper!r}
STANDARD_DIRS = [{whisper!r}]
LOG_DIR = {logs!r}
INDEX_FILE = {index!r}
CARBONLINK_HOSTS = {carbonlink!r}
CARBONLINK_TIMEOUT = 1.0
TAGDB = "graphite.tags.localdatabase.LocalDatabaseTagDB"
DEFAULT_CACHE_DURATION = 0
LOG_RENDERING_PERFORMANCE = False
LOG_CACHE_PERFORMANCE = False
LOG_INFO_PERFORMANCE = False
"""

#: the settings module's name (beside nothing else in ``DIR``: it goes first on the path)
MODULE = "fleetwatch_graphite_settings"
WORKERS = 2


class GraphiteWebError(RuntimeError):
    """graphite-web could not be found, configured or started."""


def missing() -> str | None:
    """None when graphite-web and gunicorn are installed, else what to install."""
    missing = [name for name in ("graphite", "gunicorn", "django")
               if importlib.util.find_spec(name) is None]
    if missing:
        return (f"graphite-web not installed ({', '.join(missing)} missing): "
                f"GRAPHITE_NO_PREFIX=True pip install 'fleetwatch[all]'")
    return None


class GraphiteWeb(LocalServer):
    """One graphite-web (gunicorn) serving the whisper files of ``whisper_dir``; what it
    prints goes to ``graphite-web.out`` (:meth:`output`), its logs to ``storage/log/``."""

    name = "graphite-web"
    error = GraphiteWebError

    def __init__(self, root, whisper_dir, carbonlink_port: int | None = None,
                 port: int | None = None):
        self.root = Path(root).resolve()
        self.whisper_dir = Path(whisper_dir).resolve()
        self.carbonlink_port = carbonlink_port
        self.port = port or free_port()
        self.log_path = self.root / "graphite-web.out"

    @classmethod
    def over(cls, root, carbon, port: int | None = None) -> "GraphiteWeb":
        """A graphite-web over a :class:`~fleetwatch.cli.demo.carbon.Carbon`'s files, asking
        its cache for points not yet written."""
        return cls(root, carbon.whisper_dir, carbon.query_port, port)

    @property
    def url(self) -> str:
        """The base of the render API (``graphite.url`` of the operator config)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def storage(self) -> Path:
        return self.root / "storage"

    @property
    def settings_path(self) -> Path:
        return self.root / f"{MODULE}.py"

    def write_config(self) -> None:
        """The settings module, with a new SECRET_KEY (0600: the key signs sessions)."""
        from fleetwatch import private
        for sub in ("log/webapp",):
            (self.storage / sub).mkdir(parents=True, exist_ok=True)
        self.whisper_dir.mkdir(parents=True, exist_ok=True)
        carbonlink = [f"127.0.0.1:{self.carbonlink_port}:a"] if self.carbonlink_port else []
        private.write(self.settings_path, SETTINGS.format(
            secret=secrets.token_urlsafe(48), storage=f"{self.storage}/",
            whisper=f"{self.whisper_dir}/", logs=f"{self.storage / 'log' / 'webapp'}/",
            index=str(self.storage / "index"), carbonlink=carbonlink))

    def command(self) -> list[str]:
        """The command line of graphite-web for this directory (after :meth:`write_config`),
        for a caller that runs its processes itself; it stops cleanly on SIGTERM."""
        return [sys.executable, "-m", "fleetwatch.cli.demo.graphiteweb", "--dir",
                str(self.root), "--port", str(self.port)]

    def start(self, timeout: float = 30.0) -> "GraphiteWeb":
        """Write the settings, start graphite-web, return once it answers (SIGTERM stops
        it: gunicorn stops its workers)."""
        if self.alive():
            return self
        problem = missing()
        if problem:
            raise GraphiteWebError(problem)
        self.write_config()
        return self.launch(timeout, poll=0.1)

    def ready(self) -> bool:
        return self.answering()

    @property
    def waiting(self) -> str:
        return f"not answering on {self.url}"

    def answering(self) -> bool:
        """Whether graphite-web answers a metrics query (its tables made, a worker up)."""
        try:
            with urllib.request.urlopen(f"{self.url}/metrics/find?query=*", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.HTTPError):
            return False


def environment(root: Path) -> dict[str, str]:
    """The environment graphite-web runs in: its settings module found in ``root``."""
    path = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "DJANGO_SETTINGS_MODULE": "graphite.settings",
            "GRAPHITE_SETTINGS_MODULE": MODULE}


def migrate(root: Path) -> None:
    """Create or upgrade graphite-web's tables in its SQLite database (in this process)."""
    os.environ.update(environment(root))
    sys.path.insert(0, str(root))
    import django
    from django.core.management import call_command
    django.setup()
    call_command("migrate", run_syncdb=True, interactive=False, verbosity=0)


def gunicorn_argv(port: int) -> list[str]:
    return [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}",
            "--workers", str(WORKERS), "--graceful-timeout", "3", "--timeout", "60",
            "--error-logfile", "-", "--log-level", "warning", "graphite.wsgi:application"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m fleetwatch.cli.demo.graphiteweb")
    parser.add_argument("--dir", required=True, help="where the settings module is")
    parser.add_argument("--port", type=int, required=True, help="port on 127.0.0.1")
    args = parser.parse_args(argv)
    root = Path(args.dir).resolve()
    migrate(root)
    sys.stdout.flush()
    sys.stderr.flush()
    # gunicorn in this process's place: the pid the caller holds is the server's
    os.execve(sys.executable, gunicorn_argv(args.port), environment(root))


if __name__ == "__main__":
    main()
