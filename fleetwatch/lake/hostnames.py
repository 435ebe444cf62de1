"""Host names in the history lake: the hostname an agent gave of itself, in its HELLO or in
its own REGISTER (``name`` ``agent``), keyed by the uuid the router stamped (Spark
DataFrames, no I/O).

The stamped uuid is the sender, authenticated by its router: what it says binds itself
only (SECURITY.md). Two of its messages are the agent's own word on its hostname, the same
word (one agent process sends one hostname), and the lake takes both, as the registry does
(fleetwatch/SPEC.md 4.1):

- its HELLO, once per connection and best effort: a history sink that was not connected at
  that moment (it started after the agents, or was restarting) never gets it, and a lake
  named from HELLOs alone would not know that agent until it reconnects;
- its own REGISTER, at each start and each reload that changes its plugins or parents: the
  agent spools it until every sink type of the routers' durable routes has ACKed it, the
  history sink among them by default (SPEC 4.1 "Durable routes", 4.2), so it reaches the
  lake when the HELLO did not. The name ``agent`` is the agent's alone: its intake refuses
  it to local processes (SPEC 4.4), so a REGISTER of that name under a uuid is that agent's.

Nothing else names a host: not a REGISTER of another name (a local process's declaration,
relayed under its agent's uuid with whatever ``hostname`` the process wrote in it), not a
STATS's ``hostname`` (a local process or a misconfigured agent can say anything: the live
graphite sink does not take it either once it knows the HELLO, sinks/graphite/sink.py).
Those two messages are the uuid's *namings*, ordered by their ``ts`` (the agent's clock, as
every row's), each name cut to 255 characters. Two rules:

- a row (a metric, a result) is named by :func:`bind`: the naming of its uuid latest at or
  before the row's ts, so a later HELLO or REGISTER with a new name takes over from its ts.
  That is how the live graphite sink named the row when it arrived (it takes HELLOs, which
  say what the same run's REGISTER says); a row older than its uuid's first naming takes
  that naming's name (the live sink took the first STATS's claim there: the lake has
  something better); a uuid with no naming in the lake (expired, or none reached the
  history sink: routers whose routes do not make REGISTER durable for it) has no name
  (callers show the uuid);
- a uuid as a whole (``hosts``, the hostname of timelines and availability, the ``drops``
  view) is named by :func:`latest`: its latest naming.

Namings are few (a HELLO per connection, a REGISTER per start or reload) and consecutive
ones with the same name (a start's HELLO and REGISTER) are folded into one *term*, so
:func:`bind` is a broadcast join: the rows are never shuffled.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

#: a hostname is cut to this many characters, as the graphite sink and registry do
MAX_HOSTNAME = 255
#: the REGISTER name only the agent itself sends (SPEC 4.4): its REGISTER names its host
OWN = "agent"


def namings(registrations: DataFrame) -> DataFrame:
    """uuid, ts, hostname of the rows of the ``registrations`` table that name a host: the
    HELLOs and the agent's own REGISTERs (``name`` ``agent``) with a hostname."""
    own = (F.col("kind") == "HELLO") | ((F.col("kind") == "REGISTER")
                                       & (F.col("name") == OWN))
    said = own & F.col("hostname").isNotNull() & (F.col("hostname") != "")
    return registrations.filter(said).select(
        "uuid", "ts", F.substring("hostname", 1, MAX_HOSTNAME).alias("hostname"))


def latest(registrations: DataFrame) -> DataFrame:
    """uuid, hostname: each uuid's latest naming (same ts: the greatest name)."""
    return (namings(registrations).groupBy("uuid")
            .agg(F.max_by("hostname", F.struct("ts", "hostname")).alias("hostname")))


def named(registrations: DataFrame, host: str) -> DataFrame:
    """uuid: the uuids some naming named ``host``."""
    return namings(registrations).filter(F.col("hostname") == host).select("uuid").distinct()


def terms(registrations: DataFrame) -> DataFrame:
    """uuid, hostname, start, end: the stretch of time each name held, from its naming to the
    uuid's next naming of another host (``end`` null: still holds; ``start`` null for a
    uuid's first name: it also names what came before)."""
    order = Window.partitionBy("uuid").orderBy("ts", "hostname")
    changes = (namings(registrations)
               .withColumn("prev", F.lag("hostname").over(order))
               .filter(F.col("prev").isNull() | (F.col("prev") != F.col("hostname"))))
    first = F.lag("ts").over(order).isNull()
    return changes.select("uuid", "hostname",
                          F.when(~first, F.col("ts")).alias("start"),
                          F.lead("ts").over(order).alias("end"))


def bind(df: DataFrame, registrations: DataFrame, at: str = "ts") -> DataFrame:
    """``df`` with ``hostname`` (replacing any column of that name) bound by the naming rule
    of the module docstring, at the row's timestamp column ``at``; null without a naming."""
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
