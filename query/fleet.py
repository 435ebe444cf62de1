"""What the fleet looks like, read once: the one query layer of ``fleetwatch status``,
``status --problems``, ``alerts`` and the console (:mod:`web`).

The state database's rows (:mod:`fleetwatch.store.reads`) and, for ``status``, every router's
PEERS answer, merged per agent:

- :func:`read` reads the rows of one *scope*: every agent (``status``), or the agents
  ``uuids`` and the checks ``pairs`` a console page shows (one host, a page of hosts, the
  problems), so that a page of a fleet of 10,000 hosts reads its own rows, not the fleet's;
- :func:`assemble` merges them (:func:`merge`, :func:`checks_of`, :func:`with_states`,
  :func:`with_freshness`, the acknowledgements, :func:`query.handling.with_handling`)
  into ``agents``, ``checks``, ``problems`` (handled or not) and ``unhandled``.

:mod:`query.pages` chooses the scopes of the console's pages (and counts states) in
SQL. Only :func:`read` needs SQLAlchemy (imported when called): ``status`` shows the routers'
view without it. Everything here is plain data: times are epoch seconds in, ISO 8601
(:func:`fleetwatch.display.iso`) out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from fleetwatch.display import ago, iso, state
from fleetwatch.protocol import number
from query import handling

if TYPE_CHECKING:
    from fleetwatch.ask import Answer
    from fleetwatch.store import reads

#: a scope larger than this is read whole and cut here: an ``IN`` of tens of thousands of
#: values costs the database more than the rows it saves (and SQLite allows 32,766)
SCOPE_MAX = 5000


@dataclass
class Rows:
    """The state database's rows of one scope (:func:`read`), empty when unreadable."""
    agents: list = field(default_factory=list)
    plugins: list = field(default_factory=list)
    checks: list = field(default_factory=list)
    check_state: list = field(default_factory=list)
    host_state: list = field(default_factory=list)
    acks: list = field(default_factory=list)
    freshness: list = field(default_factory=list)
    downtimes: list = field(default_factory=list)
    #: the agents whose parents a downtime with ``children`` follows (all, when one has)
    parents: list = field(default_factory=list)
    #: the alert channels' health (a reading of the whole fleet only)
    channels: list = field(default_factory=list)


def read(conn, now: float, uuids: reads.Uuids = None, pairs: reads.Pairs = None,
         results: bool = True) -> Rows:
    """The rows of the agents ``uuids`` (None: all) and of their checks ``pairs`` (None:
    all of theirs; empty: none, for a list of agents alone), and the downtimes that may
    cover something at ``now``. Without ``results``, not the checks' declarations and
    latest results: only what judges their state and handling (``alerts``)."""
    from fleetwatch.store import reads      # SQLAlchemy: only where a database is read
    whole = uuids is None or _large(uuids) or _large(pairs)
    u, p = (None, None) if whole else (uuids, pairs)
    # PostgreSQL filters (uuid, plugin) IN (a list) row by row against the whole list:
    # there the agents' checks are read by uuid (an index, a hashed list) and cut here
    cut = whole or (pairs is not None and conn.dialect.name != "sqlite")
    if cut and not whole:
        p = None
    rows = Rows(agents=reads.agents(conn, uuids=u), host_state=reads.host_state(conn, u),
                acks=reads.acknowledgements(conn, now, uuids=u),
                downtimes=handling.read_downtimes(conn, now))
    if pairs is None or pairs:          # what judges an agent does not read its checks
        rows.check_state = reads.check_state(conn, u, p)
        rows.freshness = reads.check_freshness(conn, u, p)
        if results:
            rows.plugins, rows.checks = reads.plugins(conn, u, p), reads.checks(conn, uuids=u,
                                                                                pairs=p)
    if uuids is not None and cut:
        rows = _cut(rows, set(uuids), None if pairs is None else set(pairs))
    if uuids is None:
        rows.parents = rows.agents
        rows.channels = reads.channels(conn)
    elif any(getattr(d, "children", False) for d in rows.downtimes):
        rows.parents = _ancestors(conn, rows.agents)
    return rows


#: most levels of parents followed up from a scope (a deeper chain is cut there)
MAX_DEPTH = 32


def _ancestors(conn, agents: list) -> list[dict]:
    """The scope's agents and, level by level, the agents they name as parents (hostname and
    parents): what a downtime with ``children`` follows up from a host in scope, read without
    the rest of the fleet."""
    from sqlalchemy import select, true

    from sinks.alerting.dependencies.rules import declared_refs
    from fleetwatch.store import schema
    from fleetwatch.store.reads import present
    found = {a["hostname"]: a for a in agents if a.get("hostname")}
    level = list(found.values())
    a = schema.agents
    here = a.c.gone.is_(None) if "gone" not in present(conn, a)[1] else true()
    for _ in range(MAX_DEPTH):
        wanted = {ref.host for row in level for ref in declared_refs(row.get("parents"))[0]}
        wanted -= found.keys()
        if not wanted:
            break
        level = [dict(r._mapping) for r in conn.execute(
            select(a.c.hostname, a.c.parents).where(a.c.hostname.in_(sorted(wanted)), here))]
        found.update((r["hostname"], r) for r in level)
    return list(found.values())


def _large(scope) -> bool:
    return scope is not None and len(scope) > SCOPE_MAX


def _cut(rows: Rows, uuids: set, pairs: set | None) -> Rows:
    def keep(items, name="plugin"):
        return [r for r in items if r["uuid"] in uuids
                and (pairs is None or (r["uuid"], r[name]) in pairs)]
    return Rows([r for r in rows.agents if r["uuid"] in uuids], keep(rows.plugins, "name"),
                keep(rows.checks), keep(rows.check_state),
                [r for r in rows.host_state if r["uuid"] in uuids],
                [r for r in rows.acks if r["uuid"] in uuids], keep(rows.freshness),
                rows.downtimes)


def assemble(rows: Rows, now: float, answers=()) -> dict:
    """``agents`` (the database's, merged with the routers' PEERS ``answers``), their
    ``checks``, every ``problem`` (handled or not, worst first) and the ``unhandled`` ones.
    Without answers (the console: it asks the routers for their health only) ``alive`` is
    None, and ``state`` (UP, DOWN, UNREACHABLE, GONE: the alerting sinks' judgement) says
    what it knows."""
    agents = merge(rows.agents, answers)
    checks = checks_of(agents, rows.plugins, rows.checks, now)
    with_states(agents, checks, rows.check_state, rows.host_state, now)
    with_freshness(checks, rows.freshness, now)
    handling.with_acks(agents, checks, rows.acks)
    handling.with_handling(agents, checks, rows.check_state, rows.host_state,
                           handling.downtime_of(rows.downtimes, now, rows.parents))
    found = handling.problems(agents, checks)
    for entry in agents:
        entry["last_seen"] = iso(entry["last_seen"])
    return {"agents": agents, "checks": checks, "problems": found,
            "unhandled": handling.unhandled(found)}



def merge(db_agents: list[dict], answers: list[Answer]) -> list[dict]:
    """One entry per agent uuid: uuid, hostname, alive (True, False, or None: unknown, as
    some router did not answer, or none was asked), last_seen (epoch), routers (those that
    have it attached; without answers, those the registry recorded it through)."""
    merged: dict[str, dict] = {}
    for row in db_agents:
        # without answers (the console), the routers the registry saw it through
        merged[row["uuid"]] = {"uuid": row["uuid"], "hostname": row.get("hostname"),
                               "version": row.get("version"), "alive": False,
                               "last_seen": number(row.get("last_seen")),
                               "routers": [] if answers else sorted(row.get("routers") or ())}
    for answer in answers:
        reply = answer.get("PEERS")
        if reply is None:
            continue
        router = answer.router_id or answer.endpoint
        for peer in reply.get("agents") or []:
            if not isinstance(peer, dict) or not isinstance(peer.get("uuid"), str):
                continue
            entry = merged.setdefault(peer["uuid"], {
                "uuid": peer["uuid"], "hostname": None, "version": None, "alive": False,
                "last_seen": None, "routers": []})
            if isinstance(peer.get("hostname"), str) and not entry["hostname"]:
                entry["hostname"] = peer["hostname"]
            entry["alive"] = True
            if router not in entry["routers"]:
                entry["routers"].append(router)
            heard = number(peer.get("last_heard"))
            if heard is not None and (entry["last_seen"] is None or heard > entry["last_seen"]):
                entry["last_seen"] = heard
    everyone = bool(answers) and all(a.get("PEERS") is not None for a in answers)
    for entry in merged.values():
        entry["routers"].sort()
        if not entry["alive"] and not everyone:
            entry["alive"] = None
    return sorted(merged.values(), key=lambda e: (e["hostname"] or "", e["uuid"]))


#: the check name of a rule on series (sinks.alerting.series): ``rule:NAME``
RULE = "rule:"
#: the checks no agent declares, judged by the alerting sinks: their name's prefix -> the
#: source ``status`` shows (rules on series; alerts Prometheus posted to the console,
#: ``prom:ALERTNAME``: sinks.alerting.external)
JUDGED = {RULE: "rules", "prom:": "prometheus"}


def checks_of(agents: list[dict], declared: list[dict], results: list[dict],
              now: float) -> list[dict]:
    """One entry per declared (agent, plugin), and per check the alerting sinks judge with
    a result (:data:`JUDGED`: ``rule:NAME``, source ``rules``; ``prom:ALERTNAME``, source
    ``prometheus``), in the agents' order then by plugin name.

    A plugin declared by several sources of one agent (the agent and a local process) is
    one check: results are kept per (uuid, plugin).
    """
    latest = {(r["uuid"], r["plugin"]): r for r in results}
    by_agent: dict[str, dict[str, dict]] = {}
    for row in declared:
        spec = row.get("spec") if isinstance(row.get("spec"), dict) else {}
        entry = by_agent.setdefault(row["uuid"], {}).setdefault(row["name"], {
            "plugin": row["name"], "sources": [], "interval": number(spec.get("interval")),
            "timeout": number(spec.get("timeout"))})
        entry["sources"].append(row["source"])
    for (uuid, name) in latest:         # the checks the alerting sinks judge themselves
        source = JUDGED.get(name[:name.find(":") + 1]) if ":" in name else None
        if source is not None:
            by_agent.setdefault(uuid, {}).setdefault(name, {
                "plugin": name, "sources": [source], "interval": None, "timeout": None})
    out = []
    for agent in agents:
        for name in sorted(by_agent.get(agent["uuid"], {})):
            entry = by_agent[agent["uuid"]][name]
            result = latest.get((agent["uuid"], name)) or {}
            ran = result.get("started") if result.get("started") is not None \
                else result.get("last_result")
            out.append({"uuid": agent["uuid"], "hostname": agent.get("hostname"), **entry,
                        "state": state(result.get("status")), "status": result.get("status"),
                        "output": result.get("output"), "long_output": result.get("long_output"),
                        "perfdata": result.get("perfdata"), "command_id": result.get("command_id"),
                        "duration": result.get("duration"), "router": result.get("router"),
                        "last_run": iso(ran), "ago": ago(ran, now)})
    return out


def with_states(agents: list[dict], checks: list[dict], check_states: list[dict],
                host_states: list[dict], now: float | None = None) -> None:
    """Add what the alerting sinks judged: each check's state type (HARD/SOFT), attempt and
    flapping (None while never evaluated); each agent's ``state`` UP/DOWN since when, and
    its heartbeating local ``processes`` -- these keys only for agents the alerting sinks
    have heard heartbeats from. An agent's last heartbeat counts for its ``last_seen``
    (epoch seconds here); its ``clock_skew`` is its clock minus the sinks' in whole seconds
    when further off than their ``clock_skew`` setting, else None
    (:mod:`sinks.alerting.hosts.skew`). An agent that left (ephemeral and silent, or deregistered
    while the registry still lists it) is GONE: no problem, pages nobody.

    A host still UP past the deadline the sinks stored (no alerting sink has run its tick
    since: stopped, or behind) is DOWN since that deadline, by the sinks' own rule
    (:func:`sinks.alerting.hosts.rules.expire`), as of ``now``."""
    judged = {(r["uuid"], r["plugin"]): r for r in check_states}
    for check in checks:
        row = judged.get((check["uuid"], check["plugin"]))
        if row is None or row.get("last_result") is None:
            check.update(state_type=None, attempt=None, max_attempts=None, flapping=None,
                         percent_change=None, hard_since=None)
            continue
        check.update(state_type="HARD" if row["hard"] else "SOFT", attempt=row["attempt"],
                     max_attempts=row["max_attempts"], flapping=bool(row["flapping"]),
                     percent_change=row["percent"], hard_since=iso(row["since"]))
    hosts: dict[str, list[dict]] = {}
    for row in host_states:
        hosts.setdefault(row["uuid"], []).append(row)
    for agent in agents:
        for row in hosts.get(agent["uuid"], []):
            up, since = row["up"], row["since"]
            deadline = number(row.get("deadline"))
            if up and now is not None and deadline and now > deadline:
                up, since = False, deadline
            name = "UP" if up else "DOWN"
            if row.get("gone") is not None:     # deregistered, or ephemeral gone silent
                name, since = "GONE", row["gone"]
            entry = {"state": name, "state_since": iso(since),
                     "last_heartbeat": iso(row["last_heard"])}
            if row["name"]:
                agent.setdefault("processes", []).append({"name": row["name"], **entry})
            else:
                agent.update(entry, clock_skew=row.get("clock_skew"))
                heard = number(row["last_heard"])
                if heard is not None and (agent["last_seen"] is None
                                          or heard > agent["last_seen"]):
                    agent["last_seen"] = heard


def with_freshness(checks: list[dict], rows: list[dict], now: float) -> None:
    """Mark the checks the alerting sinks judged stale (``check_freshness``: stale since a
    time it has not been heard after): ``stale`` true, ``stale_since``, state UNKNOWN and
    the stale text as their output (the last real result's other fields stay)."""
    marks = {(r["uuid"], r["plugin"]): r for r in rows}
    for check in checks:
        row = marks.get((check["uuid"], check["plugin"])) or {}
        heard, stale_at = number(row.get("heard")), handling.stale_since(row)
        stale = stale_at is not None
        check.update(stale=stale, stale_since=iso(stale_at))
        if stale:
            silent = f"for {max(0, int(now - heard))} s" if heard is not None else \
                "since it was declared"
            check.update(state="UNKNOWN", status=3, output=f"stale: no result {silent}")


def handled_by_key(alerts: list[dict], rows: Rows, now: float) -> dict[str, dict]:
    """key -> how the problem of that key is handled now (a check's, an agent's, a local
    process's), judged as ``status`` judges it (:mod:`query.handling`): what ``alerts``
    and the console say beside an alert. ``rows``: those of the alerts' agents."""
    names = {r["uuid"]: r.get("hostname") for r in rows.agents}
    names.update({a["uuid"]: a["hostname"] for a in alerts if a.get("uuid") and a["hostname"]})
    agents = [{"uuid": u, "hostname": names.get(u), "last_seen": None}
              for u in sorted({r["uuid"] for r in rows.host_state})]
    checks = [{"uuid": r["uuid"], "plugin": r["plugin"], "hostname": names.get(r["uuid"]),
               "state": None, "status": r["status"], "output": None} for r in rows.check_state]
    with_states(agents, checks, rows.check_state, rows.host_state, now)
    with_freshness(checks, rows.freshness, now)
    handling.with_acks(agents, checks, rows.acks)
    handling.with_handling(agents, checks, rows.check_state, rows.host_state,
                           handling.downtime_of(rows.downtimes, now, rows.parents))
    out = {f"{c['uuid']}/check/{c['plugin']}": c["handled"] for c in checks}
    for agent in agents:
        out[f"{agent['uuid']}/host"] = agent["handled"]
        for process in agent.get("processes", []):
            out[f"{agent['uuid']}/process/{process['name']}"] = process["handled"]
    return out
