"""The fleet's durability, from what its routers say in PEERS (SPEC 4.1 and 4.3).

Each router answers PEERS with its durable routes (``durable``: spooled type -> the sink
types agents must have its ACK from) and its sink connections per type (``sinks``). A
durable route is *missing* when no router that answered has a sink of its type connected:
agents then keep those messages in their spools (bounded, drops counted) until one connects,
and the fleet's durability is **degraded**. A route some routers serve and others do not is
*partial*: agents resend through the routers that can (SPEC 4.2), so nothing is lost, but an
operator wants to know. Routers older than these fields say nothing: with none that says
anything, the state is unknown; and while a router asked does not answer, what it serves is
not known: the state is unknown then too, never ok (``unanswered`` names them). Pure
logic: ``fleetwatch status`` and the console show it.
"""

from __future__ import annotations

from fleetwatch.ask import Answer

OK, DEGRADED, UNKNOWN = "ok", "degraded", "unknown"


def _routes(reply) -> dict[str, list[str]] | None:
    durable = reply.get("durable")
    if not isinstance(durable, dict):
        return None
    return {str(t): [str(s) for s in sinks if isinstance(s, str)]
            for t, sinks in durable.items() if isinstance(sinks, list)}


def _connected(reply, sink: str) -> bool:
    sinks = reply.get("sinks")
    count = sinks.get(sink) if isinstance(sinks, dict) else None
    return isinstance(count, int) and not isinstance(count, bool) and count > 0


def assess(answers: list[Answer]) -> dict:
    """``{"state", "routes": [{"type", "sink", "served_by", "not_served_by"}], "missing",
    "partial", "unanswered"}``: every durable route any answering router named, with the
    routers that have a sink of its type connected and those that do not; ``missing`` and
    ``partial`` list the (type, sink) of the routes served by none, and by some only;
    ``unanswered`` the routers that did not answer."""
    seen: dict[tuple[str, str], dict] = {}
    told = False
    unanswered = [a.router_id or a.endpoint for a in answers if a.get("PEERS") is None]
    for answer in answers:
        reply = answer.get("PEERS")
        routes = _routes(reply) if reply is not None else None
        if routes is None:
            continue
        told = True
        router = answer.router_id or answer.endpoint
        for type_, sinks in sorted(routes.items()):
            for sink in sinks:
                entry = seen.setdefault((type_, sink), {"type": type_, "sink": sink,
                                                        "served_by": [], "not_served_by": []})
                entry["served_by" if _connected(reply, sink) else "not_served_by"].append(router)
    routes = list(seen.values())     # types in order, sinks as the routers list them
    missing = [{"type": r["type"], "sink": r["sink"]} for r in routes if not r["served_by"]]
    partial = [{"type": r["type"], "sink": r["sink"], "not_served_by": r["not_served_by"]}
               for r in routes if r["served_by"] and r["not_served_by"]]
    state = UNKNOWN if not told or (unanswered and not missing) else DEGRADED if missing else OK
    return {"state": state, "routes": routes, "missing": missing, "partial": partial,
            "unanswered": unanswered}


def lines(found: dict) -> list[str]:
    """What ``status`` prints of it: one line, and one per partial route."""
    unanswered = found.get("unanswered") or []
    if found["state"] == UNKNOWN and not found["routes"]:
        return ["durability: unknown (no router said its durable routes)"]
    if found["state"] in (OK, UNKNOWN):
        routes: dict[str, list[str]] = {}
        for r in found["routes"]:
            routes.setdefault(r["type"], []).append(r["sink"])
        told = "; ".join(f"{t} -> {', '.join(s)}" for t, s in routes.items()) or "none"
        out = [f"durability: ok ({told})" if found["state"] == OK else
               f"durability: unknown: {', '.join(unanswered)} did not answer (ok on the "
               f"routers that did: {told})"]
    else:
        by_sink: dict[str, list[str]] = {}
        for m in found["missing"]:
            by_sink.setdefault(m["sink"], []).append(m["type"])
        out = [f"durability: DEGRADED: no {sink} sink connected to any router: "
               f"{', '.join(types)} wait in the agents' spools until one is"
               for sink, types in by_sink.items()]
    for p in found["partial"]:
        out.append(f"  {p['type']} -> {p['sink']}: no {p['sink']} sink on "
                   f"{', '.join(p['not_served_by'])} (agents resend through the others)")
    return out
