"""``fleetwatch routers``: the routers' live set as each router sees it, and where they differ.

Asks MEMBERS (SPEC 4.9, without ``routers``: nothing is merged) of every router of the
operator config, then of every router their answers name, live or dead, that was not asked
yet (a few rounds, one deadline each), and prints per router the live set it sees (id,
endpoints, incarnation, beat, when its beat last advanced there) and the routers it holds
dead. A *disagreement* is a router that one router sees live and another that answered
sees dead or does not know. A router that does not answer is a failure when it is
configured or some router sees it live; one only seen dead is shown, not counted. The exit
status says whether the routers answered and agree (:data:`EXIT_STATUSES`), so that the
command serves as a health check of the mesh.
"""

from __future__ import annotations

import argparse
import json

from fleetwatch.ask import Answer, ask_all, ask_mesh, members_of
from fleetwatch.cli.operator import OperatorConfig, add_config, client_keys
from fleetwatch.config import load
from fleetwatch.display import escape, table

#: every router answered and they all see the same live set
EXIT_OK = 0
#: some router did not answer, or the routers' views differ
EXIT_DISAGREE = 1
#: no router answered (sysexits EX_UNAVAILABLE)
EXIT_UNREACHABLE = 69
EXIT_STATUSES = {EXIT_OK: "every router answered and they agree on the live routers",
                 EXIT_DISAGREE: "some router did not answer, or their views of the live "
                                "routers differ (the output says which)",
                 EXIT_UNREACHABLE: "no router answered"}


def add_arguments(parser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = "exit status (the output is printed all the same):\n" + "\n".join(
        f"  {code:<3} {text}" for code, text in EXIT_STATUSES.items()) + \
        "\n  78  a bad operator config"


def gather(endpoints: list[str], timeout: float, keys=None, ask=ask_all) -> list[Answer]:
    """MEMBERS of every endpoint, and of the control endpoints the answers name for
    routers that have not answered yet (:func:`fleetwatch.ask.ask_mesh`)."""
    return ask_mesh(endpoints, (), timeout, keys, ask=ask)


def views(answers: list[Answer], configured: tuple[str, ...] = ()) -> dict:
    """Each router's view and the disagreements, as ``--json`` prints them; a view's
    ``counts``: whether its router not answering is a failure (``configured`` endpoints,
    and those some router sees live)."""
    routers, seen_live = [], {}
    for answer in answers:
        msg = answer.get("MEMBERS")
        entries = members_of(answer)
        view = {"endpoint": answer.endpoint, "router": answer.router_id,
                "problem": (answer.problem or "no answer") if msg is None else None,
                "live": [_row(e) for e in entries if not e.get("dead")],
                "dead": [_row(e) for e in entries if e.get("dead")]}
        routers.append(view)
        if msg is not None:
            seen_live[view["router"] or answer.endpoint] = view
    everyone = sorted({r["id"] for v in seen_live.values() for r in v["live"]})
    disagreements = []
    for ident in everyone:
        live = sorted(k for k, v in seen_live.items() if ident in {r["id"] for r in v["live"]})
        dead = sorted(k for k, v in seen_live.items() if ident in {r["id"] for r in v["dead"]})
        unknown = sorted(set(seen_live) - set(live) - set(dead))
        if dead or unknown:
            disagreements.append({"router": ident, "live_for": live, "dead_for": dead,
                                  "unknown_to": unknown})
    live_controls = {r["control"] for v in seen_live.values() for r in v["live"]}
    for view in routers:
        view["counts"] = view["endpoint"] in configured or view["endpoint"] in live_controls
    return {"routers": routers, "live": everyone, "disagreements": disagreements}


def _row(entry: dict) -> dict:
    ends = entry["endpoints"]
    return {"id": entry["id"], "agents": ends.get("agents"), "control": ends.get("control"),
            "tail": ends.get("tail"), "incarnation": entry.get("incarnation"),
            "beat": entry.get("beat"), "last_heard": entry.get("age")}


def exit_status(document: dict) -> int:
    answered = [r for r in document["routers"] if r["problem"] is None]
    if not answered:
        return EXIT_UNREACHABLE
    silent = [r for r in document["routers"] if r["problem"] is not None and r["counts"]]
    if silent or document["disagreements"]:
        return EXIT_DISAGREE
    return EXIT_OK


def render(document: dict) -> str:
    lines = []
    for view in document["routers"]:
        name = escape(view["router"] or "?")
        if view["problem"] is not None:
            seen = "" if view["counts"] else " (seen dead: not counted)"
            lines.append(f"router {name} at {escape(view['endpoint'])}: "
                         f"{escape(view['problem'])}{seen}")
            continue
        lines.append(f"router {name} at {escape(view['endpoint'])} sees {len(view['live'])} "
                     f"live:")
        rows = [{**r, "last_heard": f"{r['last_heard']}s ago"
                 if r["last_heard"] is not None else None} for r in view["live"]]
        lines += ["  " + line for line in table(rows, ["id", "agents", "control", "tail",
                                                       "incarnation", "beat",
                                                       "last_heard"]).splitlines()]
        for r in view["dead"]:
            lines.append(f"  dead: {escape(r['id'])} (beat {r['beat']}, last advanced "
                         f"{r['last_heard']}s ago)")
    if document["disagreements"]:
        lines.append("disagreements:")
        for d in document["disagreements"]:
            parts = [f"live for {', '.join(d['live_for'])}"]
            if d["dead_for"]:
                parts.append(f"dead for {', '.join(d['dead_for'])}")
            if d["unknown_to"]:
                parts.append(f"unknown to {', '.join(d['unknown_to'])}")
            lines.append(f"  {escape(d['router'])}: " + "; ".join(escape(p) for p in parts))
    else:
        lines.append(f"the routers that answered agree: {', '.join(document['live']) or 'none'}")
    return "\n".join(lines)


def run(args) -> int:
    config = load(OperatorConfig, args.config)
    document = views(gather(config.routers, config.timeout, client_keys(config)),
                     tuple(config.routers))
    print(json.dumps(document, indent=2) if args.json else render(document))
    return exit_status(document)
