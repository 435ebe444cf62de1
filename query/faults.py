"""The fleet's own faults, as problems: what ``status --problems``, the console's problem
lists and ``/api/v1/problems`` show before the hosts' problems (a fault of the fleet can
make the hosts' problems wrong: a sink missing leaves checks stale).

Each fault is ``{"kind", "name", "state", "since", "output"}``, listed worst first (by
``state``: DOWN, CRITICAL, WARNING; then by kind in this order; then by name), each
``(kind, name)`` once:

- ``router`` DOWN: a router that did not answer, of the operator config or of the mesh
  (SPEC 4.9: live for the routers that answered, held dead by them, or remembered by the
  console: :class:`fleetwatch.ask.Remembered`);
- ``site`` DOWN: a site router whose link is down (SPEC 4.10): a central router expired its
  link and no router lists it linked (PEERS ``sites_lost``), or its last STATS said
  ``router.site.up`` 0, or its STATS stopped (:func:`silent`);
- ``sink`` CRITICAL: a sink type some router binds with no sink of it connected to any
  router that answered: the durable types it must ACK wait in the agents' spools, the rest
  routed to it are dropped and counted; WARNING when only some routers lack one;
- ``scheduler`` CRITICAL: a scheduler whose STATS stopped (:func:`silent`: as the routers
  that relayed them last heard it, PEERS ``backends``, or as the console's tail did), or,
  in a fleet that declares checks, none heard at all while a router has been up, or the
  console has followed the routers' STATS, for :data:`NONE_HEARD_AFTER` seconds;
- ``channel`` CRITICAL: an alert channel the alerting sinks judged failing (the state
  database's ``channels``: :func:`of_channels`): alerts to it are not reaching anyone, or
  reach its fallback only.

From the routers' PEERS answers (:func:`of_routers`: ``status`` and the console) and the
console's tail of the fleet's STATS (:func:`of_health`: :mod:`web.health`), and the
state database's channels (:func:`of_channels`). Pure logic.
"""

from __future__ import annotations

from fleetwatch.display import iso
from fleetwatch.protocol import number

#: states, worst first, and the kinds in their order within a state
STATES = ("DOWN", "CRITICAL", "WARNING")
KINDS = ("router", "site", "sink", "scheduler", "channel")
#: a process is silent once this many of its reporting intervals passed without its STATS
SILENT_INTERVALS = 3
#: its reporting interval while fewer than two of its STATS were heard (the scheduler's
#: default ``stats_interval``, the longest of the fleet's)
DEFAULT_EVERY = 60.0
#: seconds of following the tails without a scheduler's STATS before "no scheduler heard"
NONE_HEARD_AFTER = SILENT_INTERVALS * DEFAULT_EVERY


def fault(kind: str, name: str, state: str, output: str, since: float | None = None) -> dict:
    return {"kind": kind, "name": name, "state": state, "since": iso(since), "output": output}


def ordered(faults: list[dict]) -> list[dict]:
    """Worst first: by state, then kind (:data:`STATES`, :data:`KINDS`), then name; of two
    faults of one ``(kind, name)`` (told by the routers and by the console's tail), the
    first."""
    seen, once = set(), []
    for f in sorted(faults, key=lambda f: (STATES.index(f["state"]), KINDS.index(f["kind"]),
                                           f["name"])):
        if (f["kind"], f["name"]) not in seen:
            seen.add((f["kind"], f["name"]))
            once.append(f)
    return once



def of_routers(answers, checks: bool = True) -> list[dict]:
    """The routers that did not answer (PEERS), the sink types with no sink connected, the
    sites whose link a router lost and the schedulers silent, from the routers' answers
    (:func:`fleetwatch.ask.ask_mesh`: every page of each), worst first; ``checks``: whether
    the fleet declares any check (without, a fleet needs no scheduler)."""
    found = []
    heard = Heard()
    served: dict[str, list[str]] = {}       # sink type -> routers with one connected
    lacking: dict[str, list[str]] = {}      # sink type -> routers without
    durable: dict[str, list[str]] = {}      # sink type -> the types that wait for it
    answered = 0
    for answer in answers:
        name = answer.router_id or answer.endpoint
        reply = answer.get("PEERS")
        if reply is None:
            how = {"live": ", live for the routers that answered",
                   "dead": ", held dead by the routers that answered",
                   "remembered": ", seen before"}.get(getattr(answer, "known", ""), "")
            found.append(fault("router", name, "DOWN",
                               f"not answering at {answer.endpoint}: "
                               f"{answer.problem or 'no answer'}{how}"))
            continue
        answered += 1
        heard.take(name, reply)
        sinks = reply.get("sinks")
        for sink, count in (sinks.items() if isinstance(sinks, dict) else ()):
            ok = isinstance(count, int) and not isinstance(count, bool) and count > 0
            (served if ok else lacking).setdefault(str(sink), []).append(name)
        routes = reply.get("durable")
        for type_, wanted in (routes.items() if isinstance(routes, dict) else ()):
            for sink in wanted if isinstance(wanted, list) else ():
                types = durable.setdefault(str(sink), [])
                if type_ not in types:
                    types.append(str(type_))
    for sink in sorted(lacking):
        if sink not in served:
            waits = sorted(durable.get(sink, []))
            then = (f"{', '.join(waits)} wait in the agents' spools until one is" if waits
                    else "what the routers route to it is dropped (counted)")
            found.append(fault("sink", sink, "CRITICAL",
                               f"no {sink} sink connected to any router: {then}"))
        else:
            found.append(fault("sink", sink, "WARNING",
                               f"no {sink} sink connected to {', '.join(lacking[sink])} "
                               f"({len(lacking[sink])} of {len(lacking[sink]) + len(served[sink])}"
                               f" routers): what they route to it is dropped (counted)"))
    return ordered(found + heard.faults(checks))


class Heard:
    """The routers' word on the back-end processes and the site links (PEERS
    ``backends``, ``sites_lost``, ``uptime``: :mod:`router.heard`), merged: each process
    as the router that heard it last, each site lost unless some router lists it linked.
    Times are the routers' own (``ago``), never this machine's clock."""

    def __init__(self):
        self.backends: dict[str, dict] = {}
        self.lost: dict[str, dict] = {}
        self.linked: set[str] = set()
        self.uptime: float | None = None     # the longest a router that lists backends was up

    def take(self, router: str, reply) -> None:
        for entry in reply.get("agents") or ():
            if isinstance(entry, dict) and not entry.get("site"):    # a site linked is one
                self.linked.add(str(entry.get("uuid")))
        backends, uptime = reply.get("backends"), number(reply.get("uptime"))
        if isinstance(backends, list) and uptime is not None:
            self.uptime = max(self.uptime or 0.0, uptime)
            for b in backends:
                self._keep(self.backends, b, "uuid", router)
        lost = reply.get("sites_lost")
        for site in lost if isinstance(lost, list) else ():
            self._keep(self.lost, site, "site", router)

    @staticmethod
    def _keep(into: dict, entry, key: str, router: str) -> None:
        """``entry`` of ``router`` into ``into`` by its ``key`` when it is the freshest (the
        least ``ago``); its ``every`` kept from another router's when it has none."""
        if not isinstance(entry, dict) or not isinstance(entry.get(key), str) \
                or number(entry.get("ago")) is None:
            return
        old = into.get(entry[key])
        if old is None or entry["ago"] < old["ago"]:
            every = number(entry.get("every")) or (old or {}).get("every")
            into[entry[key]] = {**entry, "every": every, "router": router}
        elif old.get("every") is None:
            old["every"] = number(entry.get("every"))

    def faults(self, checks: bool) -> list[dict]:
        found = []
        for name, site in sorted(self.lost.items()):
            if name in self.linked:
                continue
            agents = site.get("agents")
            behind = f"its {agents} agents are" if isinstance(agents, int) else "its agents are"
            found.append(fault("site", name, "DOWN",
                               f"link lost: router {site['router']} heard nothing from it for "
                               f"{int(site['ago'])} s; {behind} UNREACHABLE behind it",
                               number(site.get("last_heard"))))
        schedulers = {u: b for u, b in self.backends.items() if b.get("role") == "scheduler"}
        for name, b in sorted(schedulers.items()):
            if silent({"heard": 0.0, "every": b["every"]}, b["ago"]) is not None:
                found.append(fault("scheduler", name, "CRITICAL",
                                   f"no STATS for {int(b['ago'])} s (last through router "
                                   f"{b['router']}): the checks it schedules are not run",
                                   number(b.get("last_heard"))))
        if checks and not schedulers and self.uptime is not None \
                and self.uptime > NONE_HEARD_AFTER:
            found.append(fault("scheduler", "-", "CRITICAL",
                               f"no scheduler's STATS through any router in "
                               f"{int(self.uptime)} s: no check is scheduled"))
        return found


def silent(process: dict, now: float) -> float | None:
    """Seconds a process (a :mod:`web.health` entry: ``heard``, ``every``) has been silent
    past :data:`SILENT_INTERVALS` of its reporting interval, or None while it is not."""
    every = process.get("every") or DEFAULT_EVERY
    quiet = now - process["heard"]
    return quiet if quiet > SILENT_INTERVALS * every else None


def of_health(snapshot: dict, now: float, checks: bool = True) -> list[dict]:
    """The sites whose uplink is down and the schedulers silent, from the STATS the
    console follows (:meth:`web.health.Health.snapshot`), worst first; ``checks``: whether
    the fleet declares any check (without, a fleet needs no scheduler)."""
    found = []
    for router in snapshot.get("router_stats", []):
        up = router["metrics"].get("router.site.up")
        if up is None:                      # not a site router
            continue
        quiet = silent(router, now)
        if up == 0 or quiet is not None:
            said = (f"no STATS for {int(quiet)} s" if quiet is not None
                    else "its STATS say its uplink is down (router.site.up 0)")
            found.append(fault("site", router["id"], "DOWN",
                               f"uplink down: {said}; its agents are UNREACHABLE behind it",
                               router["heard"]))
    schedulers = snapshot.get("schedulers", [])
    for scheduler in schedulers:
        quiet = silent(scheduler, now)
        if quiet is not None:
            found.append(fault("scheduler", scheduler["id"], "CRITICAL",
                               f"no STATS for {int(quiet)} s: the checks it schedules are not "
                               f"run", scheduler["heard"]))
    followed = snapshot.get("since")
    if checks and not schedulers and snapshot.get("router_stats") and followed is not None \
            and now - followed > NONE_HEARD_AFTER:
        found.append(fault("scheduler", "-", "CRITICAL",
                           f"no scheduler heard in {int(now - followed)} s: no check is "
                           f"scheduled"))
    return ordered(found)


def of_channels(channels: list[dict]) -> list[dict]:
    """The failing alert channels (rows of :func:`fleetwatch.store.reads.channels`), each
    with why and where its alerts go meanwhile."""
    found = []
    for c in channels:
        if c["state"] != "failing":
            continue
        why = " ".join(str(c.get("last_error") or "").split())[:300]
        meanwhile = f"its alerts go to {c['fallback']}" if c.get("fallback") \
            else "no fallback: its alerts reach nobody"
        found.append(fault("channel", c["name"], "CRITICAL",
                           f"alert channel failing ({c['failures']} attempts in a row): "
                           f"{why}; {meanwhile}", c["since"]))
    return ordered(found)
