"""The sink types: one table, from which every other list of them is derived.

A sink type is named here once, with the class that implements it (imported lazily by
:func:`sinks.load_sink`), the port of the router's PUSH socket for it by default, the
message types it takes (which are also what the default routing table sends it) and those
it acknowledges. Derived from it: ``sinks.SINKS``, each sink class's ``handles`` and
``acks``, the protocol's ``ACK_OWNERS`` and ``ACKING_SINKS`` (SPEC 4.2), the routers'
``DEFAULT_ROUTES`` and ``bind.sinks`` defaults, the demo's sinks and the commands' help.
A new sink type is one row here and its own package (docs/development/tour.md).

The core: no import of any component (the agent reads the protocol's tables from here and
never loads a sink).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SinkType:
    """One sink type."""

    name: str
    #: "module:Class", imported only when a process runs this type
    implementation: str
    #: the port of the router's PUSH socket for it by default (``bind.sinks``)
    port: int
    #: the message types it takes; the default routing table sends it these
    handles: frozenset[str]
    #: those of ``handles`` it acknowledges once committed
    acks: frozenset[str] = frozenset()
    #: the spooled types whose ACK an agent waits for from this type when no router said
    #: otherwise, and the type an ACK without ``sink`` is taken to come from (SPEC 4.2)
    owns: frozenset[str] = frozenset()


#: The sink types, in the order lists of them are shown. Add a type here; nothing is
#: discovered.
TYPES = (
    SinkType("registry", "sinks.registry:RegistrySink", 5560,
             frozenset({"HELLO", "REGISTER", "DEREGISTER"}),
             acks=frozenset({"REGISTER", "DEREGISTER"}), owns=frozenset({"REGISTER"})),
    SinkType("alerting", "sinks.alerting.sink:AlertingSink", 5561,
             frozenset({"NOTIFY", "HEARTBEAT", "RESULT", "DEREGISTER"}),
             acks=frozenset({"NOTIFY", "DEREGISTER"}), owns=frozenset({"NOTIFY"})),
    SinkType("graphite", "sinks.graphite.sink:GraphiteSink", 5562,
             frozenset({"STATS", "RESULT", "HELLO"})),
    SinkType("history", "sinks.history.sink:HistorySink", 5563,
             frozenset({"HELLO", "HEARTBEAT", "STATS", "NOTIFY", "REGISTER", "RESULT"}),
             acks=frozenset({"NOTIFY", "REGISTER"})),
    SinkType("prometheus", "sinks.prometheus.sink:PrometheusSink", 5564,
             frozenset({"STATS", "RESULT", "HELLO"})),
    SinkType("remote_write", "sinks.remote_write.sink:RemoteWriteSink", 5565,
             frozenset({"STATS", "RESULT", "HELLO"})),
)

#: name -> its :class:`SinkType`
BY_NAME = {t.name: t for t in TYPES}
#: the names, in the table's order
NAMES = tuple(BY_NAME)

#: the types an agent spools until a sink ACKs them (SPEC 4.2), in the order shown
SPOOLED = ("NOTIFY", "REGISTER")
#: the message types the default routing table names, in the order it is shown
ROUTED = ("HELLO", "REGISTER", "STATS", "HEARTBEAT", "NOTIFY", "RESULT", "DEREGISTER")


def acking() -> dict[str, tuple[str, ...]]:
    """Spooled type -> the sink types that ACK it."""
    return {m: tuple(t.name for t in TYPES if m in t.acks) for m in SPOOLED}


def owners() -> dict[str, str]:
    """Spooled type -> the sink type whose ACK an agent waits for by default."""
    return {m: t.name for m in SPOOLED for t in TYPES if m in t.owns}


def routes() -> dict[str, list[str]]:
    """The default routing table: message type -> the sink types that take it."""
    return {m: [t.name for t in TYPES if m in t.handles] for m in ROUTED}


def endpoints() -> dict[str, str]:
    """The router's default ``bind.sinks``: sink type -> the endpoint of its PUSH socket."""
    return {t.name: f"tcp://*:{t.port}" for t in TYPES}
