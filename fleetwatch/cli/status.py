"""``fleetwatch status``: the agents of the fleet, from the state database and the routers.

The registry's ``agents`` table says who has ever said HELLO; a live PEERS query to every
router (in parallel, one deadline, page by page: SPEC 4.3) says who is attached now. They
are merged per uuid: an agent is ``alive`` when at least one router has it attached, not
alive when every router answered without it, and unknown (None) when it is attached to none
of the routers that answered but some did not answer; ``last_seen`` is the latest of the
registry's time, the routers' and the alerting sinks' last heartbeat; an agent attached but
not yet in the database is shown all the same, and so is an unreachable router.

The exit status says whether the routers could be asked (:data:`EXIT_STATUSES`), so that
scripts can use the command as a health check.

Each agent's checks are the plugins the registry has it declaring (``plugins``), with the
latest result the alerting sink recorded (``checks``): its state, PENDING while it has
never run, the first line of its output and when it ran; and what the alerting sinks judged
(``check_state``, ``host_state``): each check's HARD/SOFT state type, attempt and flapping,
and each agent's UP/DOWN by its heartbeats; a check with no result for its freshness
threshold is ``stale`` (UNKNOWN, type STALE); and what is handled and how (``handled``:
acknowledged, in a downtime, UNREACHABLE behind a parent, on an agent DOWN;
:mod:`fleetwatch.cli.problems`), an agent DOWN behind a parent being UNREACHABLE.
``--problems`` prints only the problems nothing handles, worst first.

Under the routers, a line says the fleet's durability (:mod:`fleetwatch.durability`): ok, or
DEGRADED when a durable route has no sink of its type connected to any router (agents keep
those messages in their spools until one is); ``--json`` has it as ``durability``.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from fleetwatch.ask import Answer, ask_all
from fleetwatch.config import load
from fleetwatch import durability
from fleetwatch.display import ago, escape, first_line, iso, state, table
from fleetwatch.cli.ack import with_acks
from fleetwatch.cli import problems as handling
from fleetwatch.cli.operator import OperatorConfig, add_config, client_keys

log = logging.getLogger(__name__)

#: every router answered
EXIT_OK = 0
#: some router did not answer: its agents may be missing or shown as unknown
EXIT_PARTIAL = 1
#: no router answered (sysexits EX_UNAVAILABLE): the fleet cannot be reached
EXIT_UNREACHABLE = 69
EXIT_STATUSES = {EXIT_OK: "every router answered",
                 EXIT_PARTIAL: "some router did not answer (the routers table says which)",
                 EXIT_UNREACHABLE: "no router answered: the fleet cannot be reached"}


def add_arguments(parser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--problems", action="store_true",
                        help="only the unhandled problems, worst first: agents DOWN, then "
                             "checks CRITICAL, UNKNOWN, WARNING not acknowledged, not in a "
                             "downtime, not unreachable, not on an agent DOWN")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "exit status (the output is printed all the same):\n" + "\n".join(
        f"  {code:<3} {text}" for code, text in EXIT_STATUSES.items()) + \
        "\n  78  a bad operator config"


def exit_status(answers: list[Answer]) -> int:
    """The command's exit status for these routers' answers (:data:`EXIT_STATUSES`)."""
    answered = sum(1 for a in answers if a.get("PEERS") is not None)
    if answered == len(answers) and answers:
        return EXIT_OK
    return EXIT_PARTIAL if answered else EXIT_UNREACHABLE


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def merge(db_agents: list[dict], answers: list[Answer]) -> list[dict]:
    """One entry per agent uuid: uuid, hostname, alive (True, False, or None: unknown, as
    some router did not answer), last_seen (epoch), routers."""
    merged: dict[str, dict] = {}
    for row in db_agents:
        merged[row["uuid"]] = {"uuid": row["uuid"], "hostname": row.get("hostname"),
                               "version": row.get("version"), "alive": False,
                               "last_seen": _number(row.get("last_seen")), "routers": []}
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
            heard = _number(peer.get("last_heard"))
            if heard is not None and (entry["last_seen"] is None or heard > entry["last_seen"]):
                entry["last_seen"] = heard
    everyone = bool(answers) and all(a.get("PEERS") is not None for a in answers)
    for entry in merged.values():
        entry["routers"].sort()
        if not entry["alive"] and not everyone:
            entry["alive"] = None
    return sorted(merged.values(), key=lambda e: (e["hostname"] or "", e["uuid"]))


def checks_of(agents: list[dict], declared: list[dict], results: list[dict],
              now: float) -> list[dict]:
    """One entry per declared (agent, plugin), in the agents' order then by plugin name.

    A plugin declared by several sources of one agent (the agent and a local process) is
    one check: results are kept per (uuid, plugin).
    """
    latest = {(r["uuid"], r["plugin"]): r for r in results}
    by_agent: dict[str, dict[str, dict]] = {}
    for row in declared:
        spec = row.get("spec") if isinstance(row.get("spec"), dict) else {}
        entry = by_agent.setdefault(row["uuid"], {}).setdefault(row["name"], {
            "plugin": row["name"], "sources": [], "interval": _number(spec.get("interval")),
            "timeout": _number(spec.get("timeout"))})
        entry["sources"].append(row["source"])
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
    (epoch seconds here). An agent that left (ephemeral and silent, or deregistered while
    the registry still lists it) is GONE: no problem, pages nobody.

    A host still UP past the deadline the sinks stored (no alerting sink has run its tick
    since: stopped, or behind) is DOWN since that deadline, by the sinks' own rule
    (:func:`sinks.alerting.hosts.expire`), as of ``now``."""
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
            deadline = _number(row.get("deadline"))
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
                agent.update(entry)
                heard = _number(row["last_heard"])
                if heard is not None and (agent["last_seen"] is None
                                          or heard > agent["last_seen"]):
                    agent["last_seen"] = heard


def _read_state(url: str, now: float, warn=None) -> tuple[list, ...]:
    """agents, plugins, checks, check states, host states, acknowledgements, freshness and
    the downtimes that may cover something at ``now`` from the state database; empty (and
    said) if unreadable."""
    from fleetwatch.optional import MissingDependency
    from sinks.state import state_reads
    from sinks.state.reader import Reader, StateError
    reader = None
    try:
        reads = state_reads()
        reader = Reader(url)
        return (*(reader.read(fn) for fn in
                  (reads.agents, reads.plugins, reads.checks, reads.check_state,
                   reads.host_state, reads.acknowledgements, reads.check_freshness)),
                reader.read(handling.read_downtimes, now=now))
    except (MissingDependency, StateError) as e:
        line = f"{e}; showing the routers' view only"
        if warn is None:
            print(f"fleetwatch status: {line}", file=sys.stderr)
        else:
            warn(line)
        return [], [], [], [], [], [], [], []
    finally:
        if reader is not None:
            reader.close()


def with_freshness(checks: list[dict], rows: list[dict], now: float) -> None:
    """Mark the checks the alerting sinks judged stale (``check_freshness``: stale since a
    time it has not been heard after): ``stale`` true, ``stale_since``, state UNKNOWN and
    the stale text as their output (the last real result's other fields stay)."""
    marks = {(r["uuid"], r["plugin"]): r for r in rows}
    for check in checks:
        row = marks.get((check["uuid"], check["plugin"])) or {}
        heard, stale_at = _number(row.get("heard")), handling.stale_since(row)
        stale = stale_at is not None
        check.update(stale=stale, stale_since=iso(stale_at))
        if stale:
            silent = f"for {max(0, int(now - heard))} s" if heard is not None else \
                "since it was declared"
            check.update(state="UNKNOWN", status=3, output=f"stale: no result {silent}")


def _type(check: dict) -> str | None:
    kind = "FLAPPING" if check.get("flapping") else check.get("state_type")
    if check.get("stale"):
        return f"STALE {kind}" if kind else "STALE"
    return kind


def gather(config: OperatorConfig, now: float, warn=None) -> dict:
    """What ``status`` shows, read once (the console reads the fleet through it too): every
    router's PEERS answer and the state database merged. ``agents``, ``checks``, ``routers``
    (endpoint, id, reachable, problem), ``durability`` (:mod:`fleetwatch.durability`),
    ``problems`` (every problem, handled or not: :mod:`fleetwatch.cli.problems`),
    ``unhandled`` (those nothing handles, worst first) and the routers' raw ``answers``. ``warn(line)``: what cannot be read (default: stderr)."""
    answers = ask_all(config.routers, ("PEERS",), config.timeout, keys=client_keys(config))
    db_agents, declared, results, check_states, host_states, acks, fresh, downtimes = \
        _read_state(config.state_url, now, warn)
    agents = merge(db_agents, answers)
    checks = checks_of(agents, declared, results, now)
    with_states(agents, checks, check_states, host_states, now)
    with_freshness(checks, fresh, now)
    with_acks(agents, checks, acks)
    handling.with_handling(agents, checks, check_states, host_states,
                           handling.downtime_of(downtimes, now, db_agents))
    found = handling.problems(agents, checks)
    for entry in agents:
        entry["last_seen"] = iso(entry["last_seen"])
    routers = [{"endpoint": a.endpoint, "id": a.router_id, "reachable": a.reachable,
                "problem": a.problem or None} for a in answers]
    return {"agents": agents, "checks": checks, "routers": routers,
            "durability": durability.assess(answers), "problems": found,
            "unhandled": handling.unhandled(found), "answers": answers}


def run(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    view = gather(config, clock())
    agents, checks, routers, durable, found, answers = (
        view[k] for k in ("agents", "checks", "routers", "durability", "problems", "answers"))
    code = exit_status(answers)
    if code != EXIT_OK:
        missing = sum(1 for a in answers if a.get("PEERS") is None)
        what = "no router answered" if code == EXIT_UNREACHABLE else "some routers did not answer"
        print(f"fleetwatch status: {what} ({missing} of {len(answers)})", file=sys.stderr)
    if args.problems:
        return _problems(found, routers, durable, args.json, code)
    if args.json:
        print(json.dumps({"agents": agents, "checks": checks, "routers": routers,
                          "durability": durable}, indent=2, ensure_ascii=False))
        return code
    print(table(agents, ["hostname", "uuid", "alive", "state", "last_seen", "routers"]))
    if checks:
        print()
        print(table([{**c, "agent": c["hostname"] or c["uuid"], "type": _type(c),
                      "attempt": f"{c['attempt']}/{c['max_attempts']}" if c["attempt"] else None,
                      "output": first_line(c["output"], 60) or None} for c in checks],
                    ["agent", "plugin", "state", "type", "attempt", "last_run", "output"]))
    processes = [{"agent": a["hostname"] or a["uuid"], "process": p["name"], "state": p["state"],
                  "last_heartbeat": p["last_heartbeat"]}
                 for a in agents for p in a.get("processes", [])]
    if processes:
        print()
        print(table(processes, ["agent", "process", "state", "last_heartbeat"]))
    handled = [{"agent": p["hostname"] or p["uuid"], "problem": handling.what(p),
                "handled": handling.cell(p["handled"])}
               for p in found if handling.is_handled(p["handled"])]
    if handled:
        print()
        print(table(handled, ["agent", "problem", "handled"]))
    print()
    print(table(routers, ["endpoint", "id", "reachable", "problem"]))
    for line in durability.lines(durable):
        print(escape(line))
    print()
    print(summary(agents))
    return code


def _problems(found: list[dict], routers: list[dict], durable: dict, as_json: bool,
              code: int) -> int:
    """``status --problems``: the unhandled problems, worst first (and the fleet's
    durability when degraded); the exit status is the routers' all the same
    (:data:`EXIT_STATUSES`)."""
    shown = handling.unhandled(found)
    if as_json:
        print(json.dumps({"problems": shown, "handled": len(found) - len(shown),
                          "routers": routers, "durability": durable}, indent=2,
                         ensure_ascii=False))
        return code
    if durable["state"] == durability.DEGRADED:
        for line in durability.lines(durable):
            print(escape(line))
        print()
    if shown:
        print(table([{**p, "agent": p["hostname"] or p["uuid"], "problem": handling.what(p),
                      "type": _problem_type(p), "output": first_line(p["output"], 60) or None}
                     for p in shown],
                    ["agent", "problem", "state", "type", "since", "output"]))
        print()
    print(handling.summary(shown, len(found) - len(shown)))
    return code


def _problem_type(problem: dict) -> str | None:
    """TYPE as the checks table shows it (:func:`_type`), a SOFT one with its attempt."""
    kind = _type({**problem, "stale": bool(problem["handled"]["stale"])})
    if problem["state_type"] == "SOFT" and not problem["flapping"] and problem["attempt"]:
        kind += f" {problem['attempt']}/{problem['max_attempts']}"
    return kind


def summary(agents: list[dict]) -> str:
    """The table's last line: ``N agents, N alive`` (and how many are unknown)."""
    alive = sum(1 for a in agents if a["alive"] is True)
    unknown = sum(1 for a in agents if a["alive"] is None)
    count = f"{len(agents)} agent" + ("" if len(agents) == 1 else "s")
    return f"{count}, {alive} alive" + (f", {unknown} unknown" if unknown else "")
