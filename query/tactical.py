"""The overview's tactical summary, as Checkmk's tactical overview and Icinga Web 2's
dashboard give it at a glance: hosts and checks by state, each state that is a problem
split into **unhandled** (nobody is on it: acknowledged, in a downtime, behind a host or a
parent down, all count as handled, :mod:`query.handling`) and handled, and the fleet's own
faults by kind (routers, sites, sinks, schedulers: :mod:`query.faults`).

Pure: from the counts by state, the problems split into unhandled and handled
(:func:`query.problems.counts`, in SQL), the faults and the routers' answers.
"""

from __future__ import annotations

from query.faults import KINDS, STATES as FAULT_STATES

#: the host and check states that are problems (the others are counted, not split)
HOST_PROBLEMS = ("DOWN", "UNREACHABLE")
CHECK_PROBLEMS = ("CRITICAL", "UNKNOWN", "WARNING")
#: what each kind of the fleet's own is called on a tile
LABELS = {"router": "Routers", "site": "Sites", "sink": "Sinks", "scheduler": "Schedulers",
          "channel": "Alert channels"}


def summary(hosts: list[tuple[str, int]], checks: list[tuple[str, int]],
            split: dict[tuple[str, str], tuple[int, int]], faults: list[dict],
            routers: list[dict]) -> dict:
    """``hosts`` and ``checks``: one tile per state (``state``, ``count``, and for a problem
    state ``unhandled`` and ``handled``: ``split``, (kind, state) -> those two counts), in
    the order given (worst first); ``fleet``: one tile per kind of the fleet's own
    (``kind``, ``label``, ``state``: its worst fault's or OK, ``faults``, ``text``)."""
    return {"hosts": _tiles(hosts, split, "host", HOST_PROBLEMS),
            "checks": _tiles(checks, split, "check", CHECK_PROBLEMS),
            "fleet": [_fleet_tile(kind, [f for f in faults if f["kind"] == kind], routers)
                      for kind in KINDS]}


def _tiles(counts, split, kind, problem_states) -> list[dict]:
    tiles = []
    for state, count in counts:
        tile = {"state": state, "count": count, "unhandled": None, "handled": None}
        if state in problem_states:
            unhandled, handled = split.get((kind, state), (0, 0))
            tile.update(unhandled=unhandled, handled=handled)
        tiles.append(tile)
    return tiles


def _fleet_tile(kind: str, faults: list[dict], routers: list[dict]) -> dict:
    worst = min((FAULT_STATES.index(f["state"]) for f in faults), default=None)
    state = "OK" if worst is None else FAULT_STATES[worst]
    if kind == "router":
        answering = sum(1 for r in routers if r.get("reachable"))
        text = f"{answering} of {len(routers)} answering"
    elif faults:
        text = ", ".join(f["name"] for f in faults[:3]) + (" ..." if len(faults) > 3 else "")
    else:
        text = "ok"
    return {"kind": kind, "label": LABELS[kind], "state": state, "faults": len(faults),
            "text": text}
