"""A real carbon-cache on 127.0.0.1 for the demo, the tests and the benchmark.

:class:`Carbon` writes ``carbon.conf``, ``storage-schemas.conf`` and
``storage-aggregation.conf`` into ``DIR/conf`` (carbon reads the last two from the directory
of ``--config``), then runs carbon-cache in the foreground as a child process (the carbon
package's ``carbon-cache.py``, found beside the running Python, through :func:`serve`; see
below). Its output goes to ``DIR/carbon-cache.out``. The traps of carbon's
defaults are set here once: every listener on 127.0.0.1 (carbon's default is 0.0.0.0), the
pickle receiver off (it unpickles network input), UDP off, ``MAX_CREATES_PER_MINUTE`` and
``MAX_UPDATES_PER_SECOND`` unlimited (the shipped example caps creates at 50 a minute),
and short retentions chosen by the caller (a ``1s`` archive costs 12 bytes a point).

Tagged series (``name;host=web1``, the graphite sink's ``tags: true``): whisper keeps them
under ``_tagged/`` by a hash of the name (``TAG_HASH_FILENAMES``), so graphite-web finds
them only through its tag database. Given ``tagdb`` (graphite-web's base URL), carbon is
told to register each tagged series there when it creates its file (``ENABLE_TAGS``,
``GRAPHITE_URL``: carbon POSTs to ``GRAPHITE_URL/tags/tagMultiSeries``; carbon 1.1.10 has
no ``TAGDB_URL`` setting), and again on every ``TAG_UPDATE_INTERVAL``-th write (100).
carbon 1.1.10 logs a registration that fails (graphite-web not up yet, restarting, or slower
than carbon's 5 s under load) and forgets it: the series would stay out of the tag database
until one of those writes happens to be its own (carbon counts the writes of all series
together), long after the host page looked for it. The process started here sends a batch
that failed again instead (:func:`_retry_tags`: after 1 s, doubling to 10 s), so the order in
which graphite-web and carbon start matters no more; and in batches of 20 series rather than
100 (``TAG_BATCH_SIZE``: graphite-web took more than 5 s for 100 on a loaded machine).
Without ``tagdb``, ``ENABLE_TAGS`` is off (carbon's default is on, posting to port 80).

carbon-cache 1.1.10 (with Twisted 26) does not write its in-memory cache when it stops: its
writer thread ends with the reactor, so every point it read in the last second or so before
a SIGTERM is lost (measured: 45 of 50 points read just before a stop). The process started
here is ``python -m fleetwatch.cli.demo.carbon``: carbon-cache itself, plus the retries of
tag registrations above and a shutdown trigger that writes the cache to whisper before the
listeners close, so :meth:`Carbon.stop` loses nothing that carbon had read
(``WHISPER_LOCK_WRITES`` is on: the trigger and the writer thread may write at once).

Whisper files land in ``DIR/storage/whisper/``: metric ``a.b.c`` is ``a/b/c.wsp`` there.
:func:`read_points` reads one back, retrying while carbon is still creating it (a reader
can meet a half-written header: whisper raises CorruptWhisperFile).

Usage::

    carbon = Carbon("/tmp/x", retentions="1s:1h").start()   # port: a free one
    ... send to 127.0.0.1:carbon.port ...
    carbon.stop()
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import time
from pathlib import Path

from fleetwatch.cli.demo.ports import free_port
from fleetwatch.cli.demo.server import LocalServer

CARBON_CONF = """\
[cache]
STORAGE_DIR = {storage}/
LOCAL_DATA_DIR = {storage}/whisper/
LOG_DIR = {storage}/log/
PID_DIR = {storage}/
WHITELISTS_DIR = {storage}/lists/
USER =
MAX_CACHE_SIZE = inf
MAX_UPDATES_PER_SECOND = inf
MAX_CREATES_PER_MINUTE = inf
CACHE_WRITE_STRATEGY = sorted
WHISPER_AUTOFLUSH = False
WHISPER_LOCK_WRITES = True
WHISPER_FALLOCATE_CREATE = True
LINE_RECEIVER_INTERFACE = 127.0.0.1
LINE_RECEIVER_PORT = {port}
ENABLE_UDP_LISTENER = False
UDP_RECEIVER_INTERFACE = 127.0.0.1
PICKLE_RECEIVER_INTERFACE = 127.0.0.1
PICKLE_RECEIVER_PORT = 0
CACHE_QUERY_INTERFACE = 127.0.0.1
CACHE_QUERY_PORT = {query_port}
LOG_LISTENER_CONNECTIONS = False
LOG_LISTENER_CONN_SUCCESS = False
LOG_LISTENER_CONN_LOST = False
LOG_UPDATES = False
LOG_CREATES = False
LOG_CACHE_HITS = False
ENABLE_MANHOLE = False
ENABLE_AMQP = False
USE_FLOW_CONTROL = True
CARBON_METRIC_INTERVAL = 60
{tags}"""

#: carbon.conf's tag lines: carbon 1.1.10 has ENABLE_TAGS on by default, posting every new
#: tagged series to GRAPHITE_URL (default http://127.0.0.1:80) + /tags/tagMultiSeries
TAGS_OFF = "ENABLE_TAGS = False\n"
TAGS_ON = """\
ENABLE_TAGS = True
GRAPHITE_URL = {url}
SKIP_TAGS_FOR_NONTAGGED = True
TAG_HASH_FILENAMES = True
TAG_BATCH_SIZE = 20
"""

SCHEMAS = """\
[carbon]
pattern = ^carbon\\.
retentions = 60s:1d

[default]
pattern = .*
retentions = {retentions}
"""

AGGREGATION = """\
[default]
pattern = .*
xFilesFactor = 0
aggregationMethod = average
"""


class CarbonError(RuntimeError):
    """carbon-cache could not be found, configured or started."""


def carbon_script() -> str:
    """``carbon-cache.py`` of this Python's environment, else the first on PATH."""
    beside = Path(sys.executable).parent / "carbon-cache.py"
    if beside.exists():
        return str(beside)
    found = shutil.which("carbon-cache.py")
    if found is None:
        raise CarbonError("carbon-cache.py not found: pip install 'fleetwatch[all]' "
                          "(carbon, whisper and twisted)")
    return found


class Carbon(LocalServer):
    """One carbon-cache process serving ``root`` (its configs, whisper files and logs; what it
    prints goes to ``carbon-cache.out``, see :meth:`output`)."""

    name = "carbon-cache"
    error = CarbonError

    def __init__(self, root, port: int | None = None, retentions: str = "10s:1d,1m:30d",
                 tagdb: str = ""):
        self.root = Path(root).resolve()
        self.tagdb = tagdb.rstrip("/")
        self.conf_dir = self.root / "conf"
        self.storage = self.root / "storage"
        self.whisper_dir = self.storage / "whisper"
        self.port = port or free_port()
        self.query_port = free_port()
        self.retentions = retentions
        self.log_path = self.root / "carbon-cache.out"

    @property
    def config_path(self) -> Path:
        return self.conf_dir / "carbon.conf"

    def write_config(self) -> None:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        for sub in ("whisper", "log", "lists"):
            (self.storage / sub).mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(CARBON_CONF.format(
            storage=self.storage, port=self.port, query_port=self.query_port,
            tags=TAGS_ON.format(url=self.tagdb) if self.tagdb else TAGS_OFF))
        (self.conf_dir / "storage-schemas.conf").write_text(
            SCHEMAS.format(retentions=self.retentions))
        (self.conf_dir / "storage-aggregation.conf").write_text(AGGREGATION)

    def command(self) -> list[str]:
        """The command line of carbon-cache for this directory (after :meth:`write_config`),
        for a caller that runs its processes itself; it stops cleanly on SIGTERM."""
        return [sys.executable, "-m", "fleetwatch.cli.demo.carbon", f"--config={self.config_path}",
                f"--pidfile={self.storage / 'carbon-cache.pid'}", "--nodaemon", "start"]

    def start(self, timeout: float = 15.0) -> "Carbon":
        """Write the configs, start carbon-cache, return once its line port accepts
        (SIGTERM stops it: carbon writes its cache to disk first)."""
        if self.alive():
            return self
        self.write_config()
        return self.launch(timeout)

    def ready(self) -> bool:
        return self.accepting()

    @property
    def waiting(self) -> str:
        return f"not listening on 127.0.0.1:{self.port}"

    def accepting(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), 0.5):
                return True
        except OSError:
            return False

    def path_of(self, metric: str) -> Path:
        """The whisper file of an untagged ``metric``."""
        return self.whisper_dir.joinpath(*metric.split(".")).with_suffix(".wsp")

    def tagged_path_of(self, series: str) -> Path:
        """The whisper file of a tagged series ``name;tag=value`` (tags in sorted order)."""
        from carbon.util import TaggedSeries  # carbon is installed wherever it runs
        encoded = TaggedSeries.encode(TaggedSeries.parse(series).path, os.sep, hash_only=True)
        return self.whisper_dir / f"{encoded}.wsp"

    def describe(self) -> str:
        return (f"carbon-cache pid {self.proc.pid if self.proc else '-'}: plaintext on "
                f"127.0.0.1:{self.port}, cache query on 127.0.0.1:{self.query_port}; "
                f"whisper files in {self.whisper_dir}; config {self.config_path}")


def read_points(path, since: float | None = None, timeout: float = 10.0) -> dict[int, float]:
    """``{timestamp: value}`` of the non-empty points of a whisper file, retrying while the
    file is missing or half-created, until ``timeout``."""
    import whisper
    deadline = time.monotonic() + timeout
    path = str(path)
    while True:
        try:
            (start, _end, step), values = whisper.fetch(path, since or 0)
            return {start + i * step: v for i, v in enumerate(values) if v is not None}
        except (FileNotFoundError, whisper.CorruptWhisperFile):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _write_cache(writer) -> None:
    """Shutdown trigger: write every cached point before carbon stops listening."""
    from carbon.cache import MetricCache
    try:
        writer.writeCachedDataPoints()
    except Exception as e:  # carbon is stopping anyway: say why the cache may be lost
        print(f"fleetwatch.cli.demo.carbon: writing the cache at shutdown failed: {e!r}", flush=True)
    print(f"fleetwatch.cli.demo.carbon: cache written at shutdown ({len(MetricCache())} metrics left)",
          flush=True)


#: waits (s) before a tag registration that failed is sent again: the first, the longest
TAG_RETRY = (1.0, 10.0)


def _retry_tags(writer, reactor) -> None:
    """carbon's ``tag`` (a batch of new series POSTed to graphite-web's tagMultiSeries), with a
    batch that failed put back in carbon's tag queue after a wait (:data:`TAG_RETRY`); each
    failure printed, and the first batch through after them. The waits are in carbon's tag
    thread (which does nothing else) and end at shutdown."""
    import threading

    from carbon import database
    from carbon.http import httpRequest
    stopping = threading.Event()
    reactor.addSystemEventTrigger("before", "shutdown", stopping.set)
    wait = [TAG_RETRY[0]]

    def tag(self, *metrics):
        try:
            httpRequest(self.graphite_url + "/tags/tagMultiSeries",
                        [("path", metric) for metric in metrics])
        except Exception as e:  # graphite-web down or slow: the batch again, later
            print(f"fleetwatch.cli.demo.carbon: registering {len(metrics)} tagged series "
                  f"failed ({e}): sent again in {wait[0]:g} s", flush=True)
            if stopping.wait(wait[0]):
                return
            wait[0] = min(wait[0] * 2, TAG_RETRY[1])
            for metric in metrics:
                writer.tagQueue.add(metric)
            return
        if wait[0] != TAG_RETRY[0]:
            print(f"fleetwatch.cli.demo.carbon: registered {len(metrics)} tagged series",
                  flush=True)
            wait[0] = TAG_RETRY[0]
    database.TimeSeriesDatabase.tag = tag


def serve(argv: list[str]) -> None:
    """Run carbon-cache in this process (argv as for ``carbon-cache.py``), with
    :func:`_write_cache` added to its shutdown and :func:`_retry_tags`."""
    from carbon.util import run_twistd_plugin
    from twisted.plugins.carbon_cache_plugin import serviceMaker

    def make_service(options):
        # carbon's optional protobuf receiver (unused: the graphite sink sends plaintext) was
        # generated for protobuf 3 and raises TypeError on import under protobuf 4 and later,
        # which the Spark Connect client (the connect extra) brings: import it as absent
        sys.modules.setdefault("carbon.protobuf", None)
        # carbon.service installs a reactor on import: only now, after twistd chose it
        from carbon import service
        root = service.createCacheService(options)
        from twisted.internet import reactor

        from carbon import writer  # importable only now: it reads the settings at import
        reactor.addSystemEventTrigger("before", "shutdown", _write_cache, writer)
        _retry_tags(writer, reactor)
        return root
    serviceMaker.makeService = make_service
    script = carbon_script()
    sys.argv = [script, *argv]
    run_twistd_plugin(script)


if __name__ == "__main__":
    serve(sys.argv[1:])
