"""Problems and how they are handled: what ``status``, ``alerts`` and the console show
beside a problem, and the unhandled problems ``status --problems`` and the console's
problems page list, worst first.

A **problem** is an agent DOWN (or UNREACHABLE), a local process DOWN, or a check whose
state is not OK (WARNING, CRITICAL, UNKNOWN, a stale check's UNKNOWN included; PENDING is
none). It is **handled**, as Icinga 2 and Checkmk count their "unhandled problems", when

- an operator acknowledged it (``ack``: by, comment, until; ``fleetwatch ack``);
- it is in a downtime now (``downtime``: id, by, comment, until);
- it is UNREACHABLE because of a parent DOWN or in a HARD problem (``unreachable``: the
  parent, ``HOST`` or ``HOST/CHECK``), as the alerting sinks recorded it;
- it is a check (or a process) of an agent that is DOWN or UNREACHABLE (``host``): the
  agent's own problem is the one to look at.

``stale`` (``since``: when the check became stale) is said too, but is no handling: a check
that stopped reporting is a problem like any. SOFT problems count, as in Icinga Web and
Checkmk (a problem on its way to HARD is one to look at): they come after the HARD problems
of their state.

Everything here is plain data in and out: the rows are read by :mod:`query.fleet`,
and every text goes through :func:`fleetwatch.display.table` (the commands) or the
console's templates, which escape what senders wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from fleetwatch.display import Stamp, human, iso
from fleetwatch.protocol import number

#: (hostname, uuid, check or None, when its problem began or None) -> the downtime covering
#: it now (:func:`downtime_of`), or None
DowntimeOf = Callable[[str | None, str, str | None, float | None], "dict | None"]
#: a problem's rank: lower is worse (agents, processes, then checks by state)
RANK = {"DOWN": 0, "UNREACHABLE": 0, "CRITICAL": 2, "UNKNOWN": 3, "WARNING": 4}
#: the reasons that make a problem handled (``stale`` is shown, and is not one)
HANDLING = ("ack", "downtime", "unreachable", "host")


def stale_since(row: dict) -> float | None:
    """Since when a ``check_freshness`` row says its check is stale: ``stale_at`` when it
    has not been heard after it; None when it is not stale."""
    stale_at, heard = number(row.get("stale_at")), number(row.get("heard"))
    return stale_at if stale_at is not None and (heard is None or stale_at >= heard) else None



def none(hostname: str | None, uuid: str, check: str | None,
         problem: float | None = None) -> None:
    """No downtime covers anything (a database without downtimes)."""
    return None


def read_downtimes(conn, now: float) -> list:
    """The downtimes that may cover something at ``now`` (the sinks' own query,
    :func:`sinks.alerting.downtimes.store.current`); none before the table exists."""
    from fleetwatch.store.db import has_tables
    if not has_tables(conn, "downtimes"):
        return []
    from sinks.alerting.downtimes import store as downtimestore
    return downtimestore.current(conn, now)


def downtime_of(rows: list, now: float, agents: Iterable[dict] = (), tz=None) -> DowntimeOf:
    """What covers a subject at ``now``, by the sinks' matcher
    (:func:`sinks.alerting.downtimes.rules.covering`, in the local time zone unless ``tz``): the
    downtime as ``--json`` shows it (``id``, ``by``, ``comment``, ``until``: the end of the
    cover now, None for none, ``every``, ``flexible``). ``--children`` follows the parents the
    agents declared (``agents``: the registry's rows with ``parents``)."""
    if not rows:
        return none
    from sinks.alerting.dependencies import rules as dependencies
    from sinks.alerting.downtimes import rules as downtimes
    from sinks.alerting.silences.rules import Subject
    found = [r if isinstance(r, downtimes.Downtime) else downtimes.Downtime.from_row(r)
             for r in rows]
    graph = dependencies.Graph(declared={
        a["hostname"]: dependencies.declared_refs(a.get("parents"))[0]
        for a in agents if a.get("hostname") and a.get("parents")})

    def of(hostname, uuid, check, problem=None):
        d = downtimes.covering(found, Subject(uuid, hostname, check), now, problem, tz,
                               graph.ancestors)
        if d is None:
            return None
        end = downtimes.cover(d, now, problem, tz)[1]
        return {"id": d.id, "by": d.author, "comment": d.comment,
                "until": iso(end) if end != float("inf") else None, "every": d.every,
                "flexible": d.flexible}
    return of


# ---------------------------------------------------------------- acknowledgements

def ack_shown(row: dict) -> dict:
    """What ``status``, ``alerts`` and the console show of an acknowledgement (``ack`` in
    ``--json``)."""
    return {"id": row["id"], "by": row["author"], "comment": row["comment"],
            "sticky": bool(row["sticky"]), "created": iso(row["created"]),
            "until": iso(row.get("expire"))}


def ack_cell(ack: dict | None) -> str | None:
    """``ACK alice: on it (until 2026-...)`` for a table, or None."""
    if not ack:
        return None
    text = f"ACK {ack['by']}" + (f": {ack['comment']}" if ack["comment"] else "")
    return text + (f" (until {human(ack['until'])})" if ack["until"] else "")


def with_acks(agents: list[dict], checks: list[dict], rows: list[dict]) -> None:
    """``ack`` on each check and each agent: the running acknowledgement of its problem (a
    check's, an agent's DOWN), None when there is none."""
    by_key = {}
    for row in sorted(rows, key=lambda r: r["id"]):
        by_key[row["key"]] = ack_shown(row)
    for check in checks:
        check["ack"] = by_key.get(f"{check['uuid']}/check/{check['plugin']}")
    for agent in agents:
        agent["ack"] = by_key.get(f"{agent['uuid']}/host")


def acks_on_alerts(alerts: list[dict], rows: list[dict]) -> None:
    """``ack`` on each alert (a trigger since its key's last resolve) an acknowledgement
    covers; None on the others."""
    by_key = {r["key"]: ack_shown(r) for r in sorted(rows, key=lambda r: r["id"])}
    for alert, current in zip(alerts, _current(alerts, by_key)):
        alert["ack"] = by_key[alert["key"]] if current else None


# ---------------------------------------------------------------- handling

def handled(ack: dict | None = None, downtime: dict | None = None,
            unreachable: str | None = None, host: str | None = None,
            stale: dict | None = None) -> dict:
    """The ``handled`` object of a row, as ``--json`` prints it."""
    return {"ack": ack, "downtime": downtime, "unreachable": unreachable, "host": host,
            "stale": stale}


def is_handled(how: dict | None) -> bool:
    return bool(how) and any(how.get(reason) for reason in HANDLING)


def with_handling(agents: list[dict], checks: list[dict], check_states: list[dict],
                  host_states: list[dict], downtime: DowntimeOf = none) -> None:
    """``handled`` on every agent, process and check (after ``with_states``,
    ``with_freshness`` and ``with_acks`` have run): who is on it and why it pages nobody.
    A downtime is looked up only for a problem (an agent or a process DOWN, a check neither
    OK nor PENDING): matching every agent and check of a large fleet against every downtime
    would cost seconds.

    An agent DOWN that the sinks recorded UNREACHABLE (``host_state.unreachable``) gets the
    state UNREACHABLE; a check held because of a parent has ``check_state.unreachable``."""
    parent_of_host = {r["uuid"]: r.get("unreachable") for r in host_states if not r["name"]}
    judged = {(r["uuid"], r["plugin"]): r for r in check_states}
    by_uuid = {}
    for agent in agents:
        parent = parent_of_host.get(agent["uuid"])
        if parent and agent.get("state") == "DOWN":
            agent["state"] = "UNREACHABLE"
        else:
            parent = None
        host = _host_problem(agent)
        covered = downtime(agent.get("hostname"), agent["uuid"], None,
                           _ts(agent.get("state_since"))) if host else None
        agent["handled"] = handled(agent.get("ack"), covered, parent)
        by_uuid[agent["uuid"]] = agent
        for process in agent.get("processes", []):
            covered = downtime(agent.get("hostname"), agent["uuid"], process["name"],
                               _ts(process.get("state_since"))) \
                if process["state"] == "DOWN" else None
            process["handled"] = handled(None, covered, None, host)
    for check in checks:
        agent = by_uuid.get(check["uuid"]) or {}
        stale = {"since": check["stale_since"]} if check.get("stale") else None
        row = judged.get((check["uuid"], check["plugin"])) or {}
        covered = downtime(check.get("hostname"), check["uuid"], check["plugin"],
                           _problem_since(row)) if check.get("status") else None
        check["handled"] = handled(check.get("ack"), covered, row.get("unreachable") or None,
                                   _host_problem(agent), stale)


def _problem_since(row: dict) -> float | None:
    """When a check's problem began, as the sinks tell a flexible downtime: its HARD
    problem's start (:func:`sinks.alerting.checks.rules.problem_since`); None while it has
    none."""
    return number(row.get("since")) if row.get("hard") and row.get("hard_status") else None


def _ts(stamp) -> float | None:
    return stamp.ts if isinstance(stamp, Stamp) else None


def _host_problem(agent: dict) -> str | None:
    state = agent.get("state")
    return state if state in ("DOWN", "UNREACHABLE") else None


# ---------------------------------------------------------------- the problems

def problems(agents: list[dict], checks: list[dict]) -> list[dict]:
    """Every problem (handled or not) as one row: ``kind`` host, process or check,
    ``uuid``, ``hostname``, ``check`` (the plugin), ``process``, ``state``, ``status``,
    ``state_type`` (HARD, SOFT; None for a host), ``flapping``, ``attempt``, ``max_attempts``, ``since``,
    ``output``, ``handled``; worst first (:func:`worst_first`)."""
    rows = []
    for agent in agents:
        base = {"uuid": agent["uuid"], "hostname": agent.get("hostname"), "check": None,
                "process": None, "status": None, "state_type": None, "flapping": None,
                "attempt": None, "max_attempts": None, "output": None}
        if _host_problem(agent):
            rows.append({**base, "kind": "host", "state": agent["state"],
                         "since": agent.get("state_since"), "handled": agent.get("handled")})
        for p in agent.get("processes", []):
            if p["state"] == "DOWN":
                rows.append({**base, "kind": "process", "process": p["name"], "state": "DOWN",
                             "since": p.get("state_since"), "handled": p.get("handled")})
    for c in checks:
        if c.get("status") is None or c["status"] == 0:
            continue
        rows.append({"kind": "check", "uuid": c["uuid"], "hostname": c.get("hostname"),
                     "check": c["plugin"], "process": None, "state": c["state"],
                     "status": c["status"], "state_type": c.get("state_type"),
                     "flapping": c.get("flapping"), "attempt": c.get("attempt"), "max_attempts": c.get("max_attempts"),
                     "since": c.get("hard_since") if c.get("state_type") == "HARD"
                     else c.get("last_run"),
                     "output": c.get("output"), "handled": c.get("handled")})
    return worst_first(rows)


def worst_first(rows: list[dict]) -> list[dict]:
    """Agents DOWN or UNREACHABLE, then processes DOWN, then checks CRITICAL, UNKNOWN,
    WARNING; HARD before SOFT; then the newest first (Icinga Web's order), then by name."""
    def key(row):
        rank = 1 if row["kind"] == "process" else RANK.get(row["state"], 3)
        since = _ts(row.get("since")) or 0.0
        return (rank, row.get("state_type") == "SOFT", -since, row.get("hostname") or "",
                row["uuid"], row.get("check") or row.get("process") or "")
    return sorted(rows, key=key)


def unhandled(rows: list[dict]) -> list[dict]:
    """The rows of :func:`problems` that nothing handles: the on-call view."""
    return [r for r in rows if not is_handled(r.get("handled"))]


# ---------------------------------------------------------------- texts

def downtime_text(downtime: dict) -> str:
    """``DOWNTIME by bob until 2026-11-25 20:00:00 UTC: kernel update``."""
    text = "DOWNTIME" + (f" by {downtime['by']}" if downtime.get("by") else "")
    if downtime.get("until") is not None:
        text += f" until {human(downtime['until'])}"
    return text + (f": {downtime['comment']}" if downtime.get("comment") else "")


def cell(how: dict | None) -> str | None:
    """How a problem is handled, for a table: ``ACK alice: on it (until ...)``,
    ``DOWNTIME ...``, ``UNREACHABLE (because of sw-3)``, ``host DOWN``, ``STALE since
    ...``, joined by ``; ``; None when there is nothing to say."""
    if not how:
        return None
    parts = []
    if how.get("ack"):
        parts.append(ack_cell(how["ack"]))
    if how.get("downtime"):
        parts.append(downtime_text(how["downtime"]))
    if how.get("unreachable"):
        parts.append(f"UNREACHABLE (because of {how['unreachable']})")
    if how.get("host"):
        parts.append(f"host {how['host']}")
    if how.get("stale"):
        parts.append(f"STALE since {human(how['stale']['since'])}")
    return "; ".join(parts) or None


def kept_back(kept: dict | None) -> str:
    """What kept a notification back, as ``alerts`` and the console's alerts say it:
    ``muted by silence 3``, ``held by downtime 1``; '' for nothing."""
    if not kept:
        return ""
    return "; ".join(f"{'muted' if what == 'silence' else 'held'} by {what} {ref}"
                     for what, ref in kept.items())


def what(row: dict) -> str:
    """The problem's name in a table: the check, ``process NAME``, or the host's state."""
    if row["kind"] == "check":
        return row["check"]
    return f"process {row['process']}" if row["kind"] == "process" else row["state"]


def count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def summary(shown: list[dict], handled_count: int) -> str:
    """The last line of ``status --problems``: ``2 unhandled problems (3 handled)``."""
    text = count(len(shown), "unhandled problem") if shown else "no unhandled problems"
    return text + (f" ({handled_count} handled: fleetwatch status lists them)"
                   if handled_count else "")


# ---------------------------------------------------------------- alerts

def on_alerts(alerts: list[dict], by_key: dict[str, dict]) -> None:
    """``handled`` on each alert: a trigger since its key's last resolve gets its problem's
    handling now (``by_key``: key -> handled object); the others None."""
    for alert, current in zip(alerts, _current(alerts, by_key)):
        alert["handled"] = by_key[alert["key"]] if current else None


def _current(alerts: list[dict], keys) -> list[bool]:
    """For each alert: whether it is a trigger of one of ``keys`` since that key's last
    resolve (the problem it opened is still the one now)."""
    resolved: dict[str, float] = {}
    for alert in alerts:
        if alert.get("action") == "resolve" and alert.get("key") in keys:
            at = alert.get("received_at") or 0
            resolved[alert["key"]] = max(resolved.get(alert["key"], 0), at)
    return [alert.get("key") in keys and alert.get("action") == "trigger"
            and (alert.get("received_at") or 0) > resolved.get(alert["key"], -1)
            for alert in alerts]
