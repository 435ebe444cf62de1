"""The health page's tiles: one per router, sink type, scheduler, and site with a fault, each
with its state (``down``, ``degraded``, ``ok``) and the one or two figures that explain it,
worst first; the counters stay behind a fold below them.

- **down**: a fault of the fleet names it (:mod:`query.faults`: a router not answering, a
  sink type with no sink, a scheduler silent, a site's link lost);
- **degraded**: a fault of state WARNING (a sink type some routers lack), or one of its
  counters that say something was lost or refused (:data:`PROBLEM_WORDS`) grew between its
  last two reports: the figure is how fast, per minute. A counter that is not zero but no
  longer grows is history (the health page's counters still show it), not a state;
- **ok**: the rest, with its usual figure (a router's agents, a sink type's connections).

Pure: from the routers' answers, the faults and the latest STATS of each process with the
ones before (:class:`web.health.Health`: ``metrics`` and ``before``).
"""

from __future__ import annotations

from fleetwatch.sinktypes import NAMES as SINK_TYPES

#: a counter whose name has one of these is a problem when it is not zero (health page)
PROBLEM_WORDS = ("dropped", "drops", "bad", "failed", "errors", "unsent", "refused", "expired",
                 "missing", "unavailable", "malformed", "excess", "misframed", "rate_limited")
#: tile states, worst first
STATES = ("down", "degraded", "ok")
#: the kinds, in their order within a state
KINDS = ("router", "site", "sink", "scheduler")


def is_problem(counter: str) -> bool:
    return any(word in counter for word in PROBLEM_WORDS)


def growth(process: dict) -> dict[str, float]:
    """Per minute, how fast each problem counter of ``process`` grew between its last two
    reports (``before``, ``before_heard``); a counter that went down (the process restarted)
    counts from 0. Empty with one report only."""
    before, then = process.get("before"), process.get("before_heard")
    if not before or then is None or process["heard"] <= then:
        return {}
    minutes = (process["heard"] - then) / 60
    grown = {}
    for name, value in process["metrics"].items():
        if is_problem(name):
            old = before.get(name, 0)
            delta = value - old if value >= old else value
            if delta > 0:
                grown[name] = delta / minutes
    return grown


def tile(kind: str, name: str, state: str, *figures: str) -> dict:
    return {"kind": kind, "name": name, "state": state, "figures": [f for f in figures if f]}


def _rate(grown: dict[str, float]) -> str | None:
    if not grown:
        return None
    worst = max(grown, key=grown.get)
    more = f" (+{len(grown) - 1} more)" if len(grown) > 1 else ""
    return f"{worst} +{grown[worst]:.3g}/min{more}"


def tiles(routers: list[dict], faults: list[dict], snapshot: dict | None) -> list[dict]:
    """The tiles, worst first (by state, then kind, then name)."""
    snapshot = snapshot or {}
    fault = {(f["kind"], f["name"]): f for f in faults}
    made = []
    counters = {p["id"]: p for p in snapshot.get("router_stats", [])}
    for r in routers:
        name = r.get("id") or r["endpoint"]
        found = fault.get(("router", name)) or fault.get(("router", r["endpoint"]))
        grown = growth(counters[r["id"]]) if r.get("id") in counters else {}
        if found or not r.get("reachable"):
            made.append(tile("router", name, "down", "not answering",
                             found["output"] if found else r.get("problem")))
            continue
        sinks = ", ".join(f"{t} {n}" for t, n in sorted((r.get("sinks") or {}).items()))
        made.append(tile("router", name, "degraded" if grown else "ok",
                         f"{r.get('agents') or 0} agents", _rate(grown) or
                         (f"sinks: {sinks}" if sinks else "no sink connected")))
    connected: dict[str, int] = {}
    for r in routers:
        for kind, n in (r.get("sinks") or {}).items():
            connected[kind] = max(connected.get(kind, 0), n)
    by_type: dict[str, dict] = {}
    for process in snapshot.get("sinks", []):
        kinds = {k.split(".")[1] for k in process["metrics"] if k.count(".") >= 2}
        for kind in kinds & set(SINK_TYPES):
            for name, rate in growth(process).items():
                by_type.setdefault(kind, {})[f"{process['id']} {name}"] = rate
    for kind in sorted(set(connected) | {n for k, n in fault if k == "sink"},
                       key=lambda k: (SINK_TYPES.index(k) if k in SINK_TYPES else 99, k)):
        found, grown = fault.get(("sink", kind)), by_type.get(kind, {})
        state = "down" if found and found["state"] == "CRITICAL" else \
            "degraded" if found or grown else "ok"
        made.append(tile("sink", kind, state, f"{connected.get(kind, 0)} connected",
                         found["output"] if found else _rate(grown)))
    for process in snapshot.get("schedulers", []):
        name = process.get("hostname") or process["id"]
        found = fault.get(("scheduler", process["id"])) or fault.get(("scheduler", name))
        grown = growth(process)
        state = "down" if found else "degraded" if grown else "ok"
        made.append(tile("scheduler", name, state,
                         found["output"] if found else _rate(grown) or "reporting"))
    shown = {(t["kind"], t["name"]) for t in made}
    for f in faults:            # what only a fault names (a site, a scheduler never heard)
        if f["kind"] in ("site", "scheduler") and (f["kind"], f["name"]) not in shown:
            made.append(tile(f["kind"], f["name"], "down", f["output"]))
    return sorted(made, key=lambda t: (STATES.index(t["state"]), KINDS.index(t["kind"]),
                                       t["name"]))
