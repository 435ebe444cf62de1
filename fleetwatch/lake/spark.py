"""The one place a SparkSession is made for fleetwatch (compaction, queries, replay, expire).

``session(master, conf)``: ``spark.master`` from the operator config (``local[*]`` by
default, a cluster URL when set). In local mode, and with a master on loopback (the local
cluster of fleetwatch/lake/cluster.py), Spark binds 127.0.0.1 only (driver host, bind address
and ``SPARK_LOCAL_IP``: without it Spark picks the first non-loopback address and listens
there); in local mode it uses as many shuffle partitions as cores (the default 200 makes 200
tiny tasks and files per step). Always: no web UI, no console progress bars, log4j2 at ERROR
on stderr (fleetwatch/lake/log4j2.properties), UTC session time zone (table dates are UTC
days), partition values kept as strings (``date`` is a string column: never inferred into a
DATE), Parquet timestamps as INT64 micros (read by any Parquet reader, unlike INT96), a
repeated map key keeps its last value (as Python's json does) instead of failing the job,
and the classes Spark generates for queries stay compiled (:data:`CODEGEN_CACHE`).
Settings from the config's ``history.conf`` win over these.

``remote(url, conf)``: with ``history.remote`` (``sc://HOST:15002``) the session is a Spark
Connect client's instead (no JVM here, no Java needed), taking the ``spark.sql.*`` settings
above; the rest are the Connect server's (docs/operating/history-cluster.md).

Java: Spark runs ``$JAVA_HOME/bin/java``, or ``java`` on the PATH without JAVA_HOME (as its
``spark-class`` does); without it :func:`session` raises :class:`JavaMissing`, one line,
before Spark's launcher fails with a Py4J traceback. The first session of a process reads
its JVM's stderr and drops the lines the JVM prints before any logging config applies
(:data:`JVM_BANNER`); everything else is passed on to this process's stderr.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

log = logging.getLogger(__name__)

LOG4J2 = Path(__file__).with_name("log4j2.properties")
APP_NAME = "fleetwatch-history"
JAVA_PACKAGE = "openjdk-17-jre-headless"
#: the classes of generated code a JVM keeps compiled (Spark's default is 100): one
#: compaction generates about 150, so a session that compacts again (``compact --every``,
#: the demo) or answers queries for long (``history serve``, a Spark Connect server)
#: compiled most of them anew each time: a warm compaction of the tests' lake took 5.1
#: core-seconds, 3.5 with these kept
CODEGEN_CACHE = ("spark.sql.codegen.cache.maxEntries", "1000")
#: what the JVM prints on stderr whatever the log level (``--add-modules`` of Spark's launcher)
JVM_BANNER = (b"WARNING: Using incubator modules:",)


class JavaMissing(RuntimeError):
    """No java for Spark; ``str()`` is the one line to show."""


def java() -> str:
    """The java Spark will run (JavaMissing if there is none)."""
    home = os.environ.get("JAVA_HOME")
    if home:
        path = os.path.join(home, "bin", "java")
        if os.access(path, os.X_OK):
            return path
        where = f"JAVA_HOME={home} has no bin/java"
    else:
        found = shutil.which("java")
        if found:
            return found
        where = "no java on the PATH, JAVA_HOME not set"
    raise JavaMissing(f"Java 17 or 21 is needed for the history side ({where}): "
                      f"apt-get install {JAVA_PACKAGE}")


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


LOOPBACK = ("127.0.0.1", "localhost", "[::1]")


def on_loopback(master: str) -> bool:
    """Whether ``master`` runs on this machine only: ``local[...]``, or a cluster whose
    master listens on loopback (``fleetwatch history cluster start``): the driver then
    binds 127.0.0.1 too, where the executors reach it."""
    if is_local(master):
        return True
    match = re.fullmatch(r"spark://([^/]+?)(?::\d+)?", master)
    return bool(match) and match.group(1) in LOOPBACK


def local_cores(master: str) -> int:
    """Cores a ``local[N]`` / ``local[*]`` / ``local`` master uses."""
    match = re.fullmatch(r"local\[(\d+|\*)(?:,\d+)?\]", master)
    if match and match.group(1) != "*":
        return max(1, int(match.group(1)))
    if master == "local":
        return 1
    return os.cpu_count() or 1


def defaults(master: str) -> dict[str, str]:
    """fleetwatch's Spark settings for ``master`` (before the config's own ``conf``)."""
    conf = {
        "spark.master": master,
        "spark.app.name": APP_NAME,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
        "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
        "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
        CODEGEN_CACHE[0]: CODEGEN_CACHE[1],
        "spark.sql.execution.pythonUDF.arrow.enabled": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2}",
        "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2}",
    }
    if on_loopback(master):
        conf.update({
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        })
    if is_local(master):
        conf["spark.sql.shuffle.partitions"] = str(local_cores(master))
    return conf


def merged(master: str, conf: dict[str, str] | None = None) -> dict[str, str]:
    """``defaults(master)`` with ``conf`` on top; java options are joined, not replaced."""
    out = defaults(master)
    for key, value in (conf or {}).items():
        if key.endswith("extraJavaOptions") and key in out:
            value = f"{out[key]} {value}"
        out[key] = value
    return out


def session(master: str = "local[*]", conf: dict[str, str] | None = None):
    """A SparkSession (the running one if this process has one already); JavaMissing
    without java."""
    java()
    settings = merged(master, conf)
    if on_loopback(settings["spark.master"]):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession
    if SparkContext._gateway is None:   # pyspark's own test for "no JVM yet"
        SparkContext(conf=SparkConf().setAll(settings.items()), gateway=_gateway(settings))
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _gateway(settings: dict[str, str]):
    """pyspark's JVM gateway with the JVM's stderr read by :func:`_forward`."""
    from pyspark import SparkConf
    from pyspark.java_gateway import launch_gateway
    gateway = launch_gateway(SparkConf().setAll(settings.items()),
                             popen_kwargs={"stderr": subprocess.PIPE})
    if gateway.proc is not None:        # None: the JVM was there already (spark-submit)
        threading.Thread(target=_forward, args=(gateway.proc.stderr,), daemon=True,
                         name="jvm-stderr").start()
    return gateway


def _forward(pipe, fd: int = 2) -> None:
    """The JVM's stderr lines, but :data:`JVM_BANNER`, to ``fd`` until the JVM exits."""
    for line in iter(pipe.readline, b""):
        if line.startswith(JVM_BANNER):
            continue
        try:
            os.write(fd, line)
        except OSError as e:   # keep reading: a JVM writing into a full pipe would hang
            log.debug("JVM stderr line dropped: %s", e)


#: what ``pyspark.sql.connect`` needs besides PySpark (its ``connect`` extra)
CONNECT_MODULES = ("grpc", "grpc_status", "google.protobuf", "pandas", "pyarrow", "zstandard")


def remote(url: str, conf: dict[str, str] | None = None):
    """A Spark Connect session on the server at ``url`` (``sc://HOST:PORT``), with
    fleetwatch's session settings (:func:`session_settings`); MissingDependency without
    the client's packages (the ``connect`` extra)."""
    from fleetwatch.optional import optional_import
    for module in CONNECT_MODULES:
        optional_import(module, "a Spark Connect session (history.remote)")
    from pyspark.sql import SparkSession
    builder = SparkSession.builder.remote(url)
    for key, value in session_settings(conf).items():
        builder = builder.config(key, value)
    return builder.getOrCreate()


def session_settings(conf: dict[str, str] | None = None) -> dict[str, str]:
    """The settings a Spark Connect session takes from :func:`merged`: the ``spark.sql.*``
    ones (time zone, partition types, timestamps, map keys; shuffle partitions when the
    config sets them). The rest (master, memory, UI, Java options, the JVM-wide
    :data:`CODEGEN_CACHE`) belong to the server."""
    def ours(key: str) -> bool:
        return key.startswith("spark.sql.") and key != CODEGEN_CACHE[0]
    out = {k: v for k, v in merged("connect", conf).items() if ours(k)}
    ignored = sorted(k for k in (conf or {}) if not ours(k))
    if ignored:
        log.info("history.conf settings left to the Spark Connect server: %s",
                 ", ".join(ignored))
    return out


class Lazy:
    """A Spark session made by ``make()`` at its first :meth:`get` and kept until
    :meth:`stop`: ``history compact --every`` starts no JVM while its runs find nothing to
    do (the demo's first, at its start)."""

    def __init__(self, make):
        self.make, self.session = make, None

    def get(self):
        if self.session is None:
            self.session = self.make()
        return self.session

    def stop(self) -> None:
        """The session stopped, if one was made; the next :meth:`get` makes another."""
        session, self.session = self.session, None
        if session is not None:
            session.stop()


def from_settings(settings):
    """The session for a :class:`sinks.history.config.HistorySettings`: on its Spark
    Connect server when ``remote`` is set, else a session of this process."""
    if getattr(settings, "remote", ""):
        return remote(settings.remote, settings.spark_conf())
    return session(settings.master, settings.spark_conf())
