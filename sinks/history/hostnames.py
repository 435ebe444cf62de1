"""Host names in the history lake: the hostname an agent gave in its HELLO, keyed by the uuid
the router stamped (Spark DataFrames, no I/O).

A body's ``hostname`` (a STATS's, a REGISTER's) is what its sender said: a local process
or a misconfigured agent can say anything, so it never names a host here (SECURITY.md, the
live graphite sink does the same: sinks/graphite/sink.py). Two rules, one source:

- a row (a metric, a result) is named by :func:`bind`: the HELLO of its uuid latest at or
  before the row's ts, as the live graphite sink named it when it arrived; a row older than
  its uuid's first HELLO takes that HELLO's name (the live sink took the first STATS's claim
  there: the lake has something better); a uuid without a HELLO in the lake (expired, or
  sent before the history sink ran) has no name (callers show the uuid);
- a uuid as a whole (``hosts``, the hostname of timelines and availability) is named by
  :func:`latest`: its latest HELLO.

HELLOs are few (one per agent connection) and consecutive ones with the same name are
folded into one *term*, so :func:`bind` is a broadcast join: the rows are never shuffled.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

#: a HELLO hostname is cut to this many characters, as the graphite sink and registry do
MAX_HOSTNAME = 255


def hellos(registrations: DataFrame) -> DataFrame:
    """uuid, ts, hostname of the HELLOs (``registrations`` table) that name a host, and of
    the agent's own REGISTERs (``name`` ``agent``): the same party says both, at every start,
    and the REGISTER is spooled until acknowledged, so a lake whose history sink missed the
    HELLO (it connected after the agent) still names the host, as the registry does."""
    own = (F.col("kind") == "HELLO") | ((F.col("kind") == "REGISTER")
                                       & (F.col("name") == "agent"))
    said = own & F.col("hostname").isNotNull() & (F.col("hostname") != "")
    return registrations.filter(said).select(
        "uuid", "ts", F.substring("hostname", 1, MAX_HOSTNAME).alias("hostname"))


def latest(registrations: DataFrame) -> DataFrame:
    """uuid, hostname: each uuid's latest HELLO (same ts: the greatest name)."""
    return (hellos(registrations).groupBy("uuid")
            .agg(F.max_by("hostname", F.struct("ts", "hostname")).alias("hostname")))


def named(registrations: DataFrame, host: str) -> DataFrame:
    """uuid: the uuids some HELLO named ``host``."""
    return hellos(registrations).filter(F.col("hostname") == host).select("uuid").distinct()


def terms(registrations: DataFrame) -> DataFrame:
    """uuid, hostname, start, end: the stretch of time each name held, from its HELLO to the
    uuid's next HELLO naming another host (``end`` null: still holds; ``start`` null for a
    uuid's first name: it also names what came before)."""
    order = Window.partitionBy("uuid").orderBy("ts", "hostname")
    changes = (hellos(registrations)
               .withColumn("prev", F.lag("hostname").over(order))
               .filter(F.col("prev").isNull() | (F.col("prev") != F.col("hostname"))))
    first = F.lag("ts").over(order).isNull()
    return changes.select("uuid", "hostname",
                          F.when(~first, F.col("ts")).alias("start"),
                          F.lead("ts").over(order).alias("end"))


def bind(df: DataFrame, registrations: DataFrame, at: str = "ts") -> DataFrame:
    """``df`` with ``hostname`` (replacing any column of that name) bound by the HELLO rule
    of the module docstring, at the row's timestamp column ``at``; null without a HELLO."""
    t = terms(registrations).select(
        F.col("uuid").alias("_uuid"), F.col("hostname").alias("_name"),
        F.col("start").alias("_start"), F.col("end").alias("_end"))
    on = ((F.col("uuid") == F.col("_uuid"))
          & (F.col("_start").isNull() | (F.col("_start") <= F.col(at)))
          & (F.col("_end").isNull() | (F.col(at) < F.col("_end"))))
    named = F.col("_name").alias("hostname")
    cols = [named if c == "hostname" else F.col(c) for c in df.columns]
    if "hostname" not in df.columns:
        cols.append(named)
    return df.drop("hostname").join(F.broadcast(t), on, "left").select(*cols)
