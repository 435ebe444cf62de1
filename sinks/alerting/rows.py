"""A batch's messages as rows: what the alerting sink stores and evaluates.

Plain functions of relayed messages, no database: a NOTIFY becomes its ``notifications``
row, a RESULT its ``checks`` row (or None when it cannot be one), a batch's HEARTBEATs the
routers each agent (or local process) was heard through. :func:`order` is a result's place
in time (:mod:`sinks.alerting.checks.ordering`: the agent's run and sequence, the sink's clock on
arrival), which both the ``checks`` table (the newest wins) and the check state machine
(results evaluated oldest first) go by.
"""

from __future__ import annotations

from fleetwatch.protocol import Relayed, number
from fleetwatch.store import schema
from sinks.alerting.checks import ordering
from sinks.alerting.external.naming import PREFIX as PROMETHEUS_PREFIX
from sinks.alerting.series.config import PREFIX as RULE_PREFIX


def notification_row(relayed: Relayed, now: float) -> dict:
    """The ``notifications`` row of a relayed NOTIFY (stamped uuid, not the body's)."""
    msg = relayed.message
    hostname, source = msg.get("hostname"), msg.get("source")
    return {
        "msg_id": msg.msg_id,
        "uuid": relayed.uuid,
        "hostname": hostname[:255] if isinstance(hostname, str) else None,
        "severity": msg.get("severity"),
        "text": msg.get("text"),
        "source": source[:255] if isinstance(source, str) else None,
        "sent_at": float(msg.ts),
        "received_at": now,
        "router": relayed.router,
    }


#: prefixes of the checks the alerting sinks judge themselves (rules on series, Prometheus'
#: alerts): a RESULT of such a name is no agent's to send (SPEC 4.5)
JUDGED_PREFIXES = (RULE_PREFIX, PROMETHEUS_PREFIX)


def judged(plugin: str) -> bool:
    """Whether ``plugin`` names a check the alerting sinks judge (:data:`JUDGED_PREFIXES`)."""
    return plugin.startswith(JUDGED_PREFIXES)


def check_row(relayed: Relayed, now: float) -> dict | None:
    """The ``checks`` row of a relayed RESULT (stamped uuid) received at ``now``, or None if
    it cannot be one."""
    msg = relayed.message
    plugin, long_output, boot = msg.get("plugin"), msg.get("long_output"), msg.get("boot")
    if not 0 < len(plugin) <= 255 or len(msg.get("command_id")) > schema.ID.length:
        return None
    return {
        "uuid": relayed.uuid,
        "plugin": plugin,
        "status": msg.get("status"),
        "output": msg.get("output"),
        "long_output": long_output if isinstance(long_output, str) else "",
        "perfdata": msg.get("perfdata") or [],
        "command_id": msg.get("command_id"),
        "slot": number(msg.get("slot")),
        "started": number(msg.get("started")),
        "duration": number(msg.get("duration")),
        "last_result": float(msg.ts),
        "router": relayed.router,
        "received_at": now,
        "boot": boot if isinstance(boot, str) else None,
        "seq": number(msg.get("seq")),
    }


def judged_row(uuid: str, check: str, status: int, output: str, at: float, source: str,
               kind: str, long_output: str = "") -> dict:
    """A result a sink judged itself (a rule's, a Prometheus alert's) as the ``checks`` row a
    RESULT would make (:func:`check_row`): its time ``at`` (an evaluation's slot, the same on
    every sink, so that two sinks judging one slot give one transition), ``source`` in the
    ``router`` column, its command id ``KIND-SLOT``."""
    return {
        "uuid": uuid, "plugin": check, "status": status, "output": output[:4096],
        "long_output": long_output[:8192], "perfdata": [], "command_id": f"{kind}-{int(at)}",
        "slot": at, "started": at, "duration": None, "last_result": at,
        "router": source, "received_at": at, "boot": None, "seq": None,
    }


def order(row: dict) -> ordering.Order:
    """A ``checks`` row's place in time: the agent's ``started`` when it gave it, else the
    message's ts, bounded by its arrival; its agent run and sequence when given."""
    sent = row["last_result"] if row["started"] is None else row["started"]
    return ordering.of(sent, row["received_at"], row["boot"], row["seq"])


def heartbeats(batch: list[Relayed]) -> dict[tuple[str, str],
                                              list[tuple[str, float | None, float]]]:
    """(uuid, name) -> [(router, interval, sent)] of a batch's HEARTBEATs, each router once
    (its latest ``ts``, ``sent``, and the interval it gave)."""
    out: dict[tuple[str, str], dict[str, tuple[float | None, float]]] = {}
    for r in batch:
        if r.message.type != "HEARTBEAT":
            continue
        name = r.message.get("name")
        name = name[:255] if isinstance(name, str) else ""
        interval = number(r.message.get("interval"))
        routers = out.setdefault((r.uuid, name), {})
        sent = max(r.message.ts, routers.get(r.router, (None, r.message.ts))[1])
        routers[r.router] = (interval if interval and interval > 0 else None, sent)
    return {k: [(router, i, sent) for router, (i, sent) in v.items()] for k, v in out.items()}
