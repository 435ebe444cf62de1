"""The fleetwatch version of each process of the fleet, and how many versions it runs.

During a rolling upgrade (docs/operating/upgrading.md) an operator asks which processes
still run the old release. Each says its version somewhere already read: an agent in its
HELLO and REGISTER (the registry's ``agents.version``, :mod:`query.fleet`), a router in its
PEERS answers (``version``, SPEC 4.3), a sink or a scheduler in the STATS it sends through a
router, which the router's PEERS answers list (``backends``: :mod:`router.heard`). A process
of a release before 1.0.0 says nothing there: its version is None ("unknown").

Pure functions over what ``status`` and the console already have: the merged agents and the
routers' PEERS answers (:class:`fleetwatch.ask.Answer`).
"""

from __future__ import annotations

from collections import Counter

from query.faults import Heard

#: the name of the versions of processes that do not say theirs (a release before 1.0.0)
UNKNOWN = "unknown"


def of_answer(answer) -> str | None:
    """The version a router's PEERS answer says (None: unreachable, or before 1.0.0)."""
    reply = answer.get("PEERS")
    version = reply.get("version") if reply is not None else None
    return version[:64] if isinstance(version, str) else None


def backends(answers) -> list[dict]:
    """The sinks and schedulers the routers heard (PEERS ``backends``, each as the router
    that heard it last: :class:`query.faults.Heard`): uuid, role, hostname, version, router
    (the one that heard it last) and ago (seconds since, by that router's clock)."""
    heard = Heard()
    for a in answers:
        reply = a.get("PEERS")
        if reply is not None:
            heard.take(a.router_id or a.endpoint, reply)
    out = []
    for uuid, b in sorted(heard.backends.items(), key=lambda kv: (str(kv[1].get("role")),
                                                                  kv[0])):
        version = b.get("version")
        out.append({"uuid": uuid, "role": b.get("role"), "hostname": b.get("hostname"),
                    "version": version[:64] if isinstance(version, str) else None,
                    "router": b.get("router"), "ago": b.get("ago")})
    return out


def tally(agents: list[dict], routers: list[dict], processes: list[dict]) -> dict[str, int]:
    """How many processes run each version, newest first (:func:`order`), the processes of
    unknown version under :data:`UNKNOWN`, last: the agents, the routers that answered and
    the back-end ``processes``."""
    counts = Counter(p.get("version") or UNKNOWN for p in (
        *agents, *(r for r in routers if r.get("reachable")), *processes))
    return {v: counts[v] for v in sorted(counts, key=order)}


def order(version: str) -> tuple:
    """A sort key putting the newest version first, :data:`UNKNOWN` last: by the numbers of
    ``MAJOR.MINOR.PATCH`` (a pre-release such as ``1.0.1~test`` or ``1.1.0rc1`` before its
    release), then by text."""
    if version == UNKNOWN:
        return (1, ())
    core = version.split("+")[0]
    numbers = []
    for part in core.split("."):
        digits = len(part) - len(part.lstrip("0123456789"))
        numbers.append(-int(part[:digits]) if digits else 0)
        if digits < len(part):              # a pre-release suffix: before the release
            numbers.append(1)
            break
        numbers.append(0)
    return (0, tuple(numbers), version)


def line(counts: dict[str, int]) -> str | None:
    """``2 versions: 1.1.0 (12), 1.0.0 (3)`` when the fleet runs more than one (the
    processes that do not say theirs counted as one, ``unknown``), else None."""
    if len(counts) < 2:
        return None
    return f"{len(counts)} versions: " + ", ".join(f"{v} ({n})" for v, n in counts.items())
