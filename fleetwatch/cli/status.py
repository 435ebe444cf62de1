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
:mod:`query.handling`), an agent DOWN behind a parent being UNREACHABLE.
``--problems`` prints only the problems nothing handles, worst first.

Under the routers, a line says the fleet's durability (:mod:`fleetwatch.durability`): ok, or
DEGRADED when a durable route has no sink of its type connected to any router (agents keep
those messages in their spools until one is); ``--json`` has it as ``durability``.

Each process shows its fleetwatch version (:mod:`query.versions`): the agents' and the
routers' tables a ``version`` column, the sinks and schedulers the routers heard a table of
their own (``backends``), and a line above the summary when the fleet runs more than one
version (``2 versions: 1.1.0 (12), 1.0.0 (3)``; ``--json``: ``versions``), as during a
rolling upgrade (docs/operating/upgrading.md).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from fleetwatch.ask import Answer, ask_all, ask_mesh
from fleetwatch.config import load
from fleetwatch import durability
from fleetwatch.display import escape, first_line, skew, table
from query import faults, fleet, handling, versions
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
                        help="only the fleet's own faults (routers not answering, site "
                             "links lost, sink types without a sink, schedulers silent) "
                             "and the unhandled problems, worst first: "
                             "agents DOWN, then checks CRITICAL, UNKNOWN, WARNING not "
                             "acknowledged, not in a downtime, not unreachable, not on an "
                             "agent DOWN")
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


def _read_state(url: str, now: float, warn=None):
    """The state database's rows (:func:`query.fleet.read`); none (and said) if
    unreadable."""
    from fleetwatch.optional import MissingDependency
    from fleetwatch.store import state_reads
    from fleetwatch.store.reader import Reader, StateError
    reader = None
    try:
        state_reads()
        reader = Reader(url)
        return reader.read(fleet.read, now=now) or fleet.Rows()
    except (MissingDependency, StateError) as e:
        line = f"{e}; showing the routers' view only"
        if warn is None:
            print(f"fleetwatch status: {line}", file=sys.stderr)
        else:
            warn(line)
        return None
    finally:
        if reader is not None:
            reader.close()


def _type(check: dict) -> str | None:
    kind = "FLAPPING" if check.get("flapping") else check.get("state_type")
    if check.get("stale"):
        return f"STALE {kind}" if kind else "STALE"
    return kind


def gather(config: OperatorConfig, now: float, warn=None) -> dict:
    """What ``status`` shows, read once: the PEERS answer of every router of the mesh (the
    operator config's and those they name: :func:`fleetwatch.ask.ask_mesh`) and the state
    database merged (:mod:`query.fleet`, the console's reading too). ``agents``,
    ``checks``, ``routers`` (endpoint, id, reachable, problem, known, version), ``backends``
    (the sinks and schedulers the routers heard, with their version:
    :func:`query.versions.backends`), ``versions`` (version -> processes running it:
    :func:`query.versions.tally`), ``durability``
    (:mod:`fleetwatch.durability`), ``fleet`` (the routers' and sinks' faults, worst first:
    :mod:`query.faults`), ``problems`` (every problem, handled or not:
    :mod:`query.handling`), ``unhandled`` (those nothing handles, worst first) and the
    routers' raw ``answers``. ``warn(line)``: what cannot be read (default: stderr)."""
    answers = ask_mesh(config.routers, ("PEERS",), config.timeout, keys=client_keys(config),
                       ask=ask_all)
    rows = _read_state(config.state_url, now, warn) or fleet.Rows()
    # a router the mesh holds dead has no agents: it leaves no agent unknown
    view = fleet.assemble(rows, now, [a for a in answers if a.reachable or a.known != "dead"])
    routers = [{"endpoint": a.endpoint, "id": a.router_id, "reachable": a.reachable,
                "problem": a.problem or None, "known": a.known,
                "version": versions.of_answer(a)} for a in answers]
    processes = versions.backends(answers)
    return {**view, "routers": routers, "backends": processes,
            "versions": versions.tally(view["agents"], routers, processes),
            "durability": durability.assess(answers),
            "fleet": faults.ordered(faults.of_routers(answers, bool(view["checks"]))
                                    + faults.of_channels(rows.channels)),
            "answers": answers}


def run(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    view = gather(config, clock())
    agents, checks, routers, durable, found, answers, own, backends, running = (
        view[k] for k in ("agents", "checks", "routers", "durability", "problems", "answers",
                          "fleet", "backends", "versions"))
    code = exit_status(answers)
    if code != EXIT_OK:
        missing = sum(1 for a in answers if a.get("PEERS") is None)
        what = "no router answered" if code == EXIT_UNREACHABLE else "some routers did not answer"
        print(f"fleetwatch status: {what} ({missing} of {len(answers)})", file=sys.stderr)
    if args.problems:
        return _problems(found, routers, durable, args.json, code, own)
    if args.json:
        print(json.dumps({"agents": agents, "checks": checks, "routers": routers,
                          "backends": backends, "durability": durable, "fleet": own,
                          "versions": running}, indent=2, ensure_ascii=False))
        return code
    print(table(agents, ["hostname", "uuid", "alive", "state", "last_seen", "routers",
                         "version"]))
    for agent in agents:            # a sender's clock far off the sinks' (sinks.alerting.hosts.skew)
        if agent.get("clock_skew") is not None:
            print(escape(f"{agent['hostname'] or agent['uuid']}: "
                         f"{skew(agent['clock_skew'])} (its clock against the sinks')"))
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
    print(table(routers, ["endpoint", "id", "reachable", "version", "problem"]))
    for line in durability.lines(durable):
        print(escape(line))
    if backends:
        print()
        print(table([{**b, "process": b["role"], "via_router": b["router"]} for b in backends],
                    ["process", "uuid", "hostname", "version", "via_router"]))
    if own:
        print()
        print(_fleet_table(own))
    print()
    several = versions.line(running)
    if several:
        print(escape(several))
    print(summary(agents))
    return code


def _problems(found: list[dict], routers: list[dict], durable: dict, as_json: bool,
              code: int, own: list[dict] = ()) -> int:
    """``status --problems``: the fleet's own faults (``own``: :mod:`query.faults`), then
    the unhandled problems, worst first (and the fleet's durability when not ok); the exit
    status is the routers' all the same (:data:`EXIT_STATUSES`)."""
    shown = handling.unhandled(found)
    if as_json:
        print(json.dumps({"fleet": list(own), "problems": shown,
                          "handled": len(found) - len(shown), "routers": routers,
                          "durability": durable}, indent=2, ensure_ascii=False))
        return code
    if own:
        print(_fleet_table(own))
        print()
    if durable["state"] != durability.OK and durable["routes"]:
        for line in durability.lines(durable):
            print(escape(line))
        print()
    if shown:
        print(table([{**p, "agent": p["hostname"] or p["uuid"], "problem": handling.what(p),
                      "type": _problem_type(p), "output": first_line(p["output"], 60) or None}
                     for p in shown],
                    ["agent", "problem", "state", "type", "since", "output"]))
        print()
    faults_line = f"{len(own)} fault{'' if len(own) == 1 else 's'} of the fleet itself; " \
        if own else ""
    print(faults_line + handling.summary(shown, len(found) - len(shown)))
    return code


def _fleet_table(own: list[dict]) -> str:
    """The fleet's own faults as a table: ``WHAT NAME STATE SINCE OUTPUT``."""
    return table([{**f, "what": f["kind"]} for f in own],
                 ["what", "name", "state", "since", "output"])


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
