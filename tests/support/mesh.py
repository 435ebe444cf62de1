"""What the routers of a mesh say (SPEC 4.9), for tests and benchmarks: each one's live set
(its MEMBERS answer, as ``fleetwatch routers`` asks it) and which routers each agent is
attached to (every router's PEERS, every page)."""

from __future__ import annotations

from fleetwatch.ask import ask_all


def live_sets(routers: list[dict], timeout: float = 1.0) -> list[set[str] | None]:
    """Each router's live set, by id (None: it did not answer)."""
    out = []
    for answer in ask_all([r["endpoints"]["control"] for r in routers], ("MEMBERS",), timeout):
        members = answer.get("MEMBERS")
        out.append({m["id"] for m in members.get("routers", []) if not m.get("dead")}
                   if members else None)
    return out


def agreed(routers: list[dict]) -> bool:
    """Whether every router of ``routers`` sees exactly them live."""
    want = {r["id"] for r in routers}
    return all(ids == want for ids in live_sets(routers))


def attachments(routers: list[dict], timeout: float = 5.0) -> dict[str, set[str]]:
    """uuid -> the ids of the routers whose PEERS list it now."""
    out: dict[str, set[str]] = {}
    for answer in ask_all([r["endpoints"]["control"] for r in routers], ("PEERS",), timeout):
        peers = answer.get("PEERS")
        for peer in peers.get("agents", []) if peers is not None else []:
            out.setdefault(peer["uuid"], set()).add(answer.router_id)
    return out


def backends(router: dict, timeout: float = 5.0) -> dict[str, dict]:
    """uuid -> what ``router``'s PEERS say of each back-end process whose STATS it relayed
    (``every``: the interval between its last two, None after one)."""
    [answer] = ask_all([router["endpoints"]["control"]], ("PEERS",), timeout)
    peers = answer.get("PEERS")
    return {b["uuid"]: b for b in (peers or {}).get("backends", [])}
