"""The one place a SparkSession is made for fleetwatch (compaction, queries, replay, expire).

``session(master, conf)``: ``spark.master`` from the operator config (``local[*]`` by
default, a cluster URL when set). In local mode Spark binds 127.0.0.1 only (driver host,
bind address and ``SPARK_LOCAL_IP``: without it Spark picks the first non-loopback address
and listens there) and uses as many shuffle partitions as cores (the default 200 makes 200
tiny tasks and files per step). Always: no web UI, no console progress bars, log4j2 at ERROR
on stderr (sinks/history/log4j2.properties), UTC session time zone (table dates are UTC
days), partition values kept as strings (``date`` is a string column: never inferred into a
DATE), Parquet timestamps as INT64 micros (read by any Parquet reader, unlike INT96), and a
repeated map key keeps its last value (as Python's json does) instead of failing the job.
Settings from the config's ``history.conf`` win over these.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

LOG4J2 = Path(__file__).with_name("log4j2.properties")
APP_NAME = "fleetwatch-history"


def is_local(master: str) -> bool:
    return master == "local" or master.startswith("local[")


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
        "spark.sql.execution.pythonUDF.arrow.enabled": "false",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2}",
        "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG4J2}",
    }
    if is_local(master):
        conf.update({
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.sql.shuffle.partitions": str(local_cores(master)),
        })
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
    """A SparkSession (the running one if this process has one already)."""
    settings = merged(master, conf)
    if is_local(settings["spark.master"]):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def from_settings(settings):
    """The session for a :class:`sinks.history.config.HistorySettings`."""
    return session(settings.master, settings.spark_conf())
