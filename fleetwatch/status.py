"""``fleetwatch status``: the agents of the fleet, from the state database and the routers.

The registry's ``agents`` table says who has ever said HELLO; a live PEERS query to every
router (in parallel, one deadline) says who is attached now. They are merged per uuid: an
agent is ``alive`` when at least one router has it attached; ``last_seen`` is the latest of
the database's and the routers' times; an agent attached but not yet in the database is
shown all the same, and so is an unreachable router.
"""

from __future__ import annotations

import json
import logging
import sys

from fleetwatch.ask import Answer, ask_all
from fleetwatch.config import load
from fleetwatch.display import iso, table
from fleetwatch.operator import DEFAULT_PATH, OperatorConfig, client_keys

log = logging.getLogger(__name__)


def add_arguments(parser) -> None:
    parser.add_argument("--config", default=DEFAULT_PATH, metavar="PATH",
                        help=f"operator config (default {DEFAULT_PATH})")
    parser.add_argument("--json", action="store_true", help="print one JSON document")


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None


def merge(db_agents: list[dict], answers: list[Answer]) -> list[dict]:
    """One entry per agent uuid: uuid, hostname, alive, last_seen (epoch), routers."""
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
    for entry in merged.values():
        entry["routers"].sort()
    return sorted(merged.values(), key=lambda e: (e["hostname"] or "", e["uuid"]))


def run(args) -> int:
    config = load(OperatorConfig, args.config)
    from sinks import MissingDependency
    from fleetwatch.statedb import StateError, read
    answers = ask_all(config.routers, ("PEERS",), config.timeout, keys=client_keys(config))
    try:
        db_agents = read(config.state_url, "agents")
    except (MissingDependency, StateError) as e:
        print(f"fleetwatch status: {e}; showing the routers' view only", file=sys.stderr)
        db_agents = []
    agents = merge(db_agents, answers)
    for entry in agents:
        entry["last_seen"] = iso(entry["last_seen"])
    routers = [{"endpoint": a.endpoint, "id": a.router_id, "reachable": a.reachable,
                "problem": a.problem or None} for a in answers]
    if args.json:
        print(json.dumps({"agents": agents, "routers": routers}, indent=2))
        return 0
    print(table(agents, ["hostname", "uuid", "alive", "last_seen", "routers"]))
    print()
    print(table(routers, ["endpoint", "id", "reachable", "problem"]))
    return 0
