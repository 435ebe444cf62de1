"""The fleet's own faults as problems (query/faults.py), the routers of the whole mesh asked
(fleetwatch.ask.ask_mesh, Remembered) and the durability never ok while a router does not
answer: from given answers and STATS, on an injected clock (issue 31, items 10 and 11)."""

from __future__ import annotations

import pytest

from fleetwatch import durability, protocol
from fleetwatch.ask import Answer, Remembered, ask_mesh
from query import faults

pytest.importorskip("zmq")

from web.health import Health  # noqa: E402
from support.clock import Clock  # noqa: E402

DURABLE = {"NOTIFY": ["alerting", "history"], "REGISTER": ["registry", "history"]}


def peers(name: str, sinks: dict, durable: dict = DURABLE) -> Answer:
    msg = protocol.make("PEERS", name, router=name, agents=[], total=0, sinks=sinks,
                        durable=durable)
    return Answer(f"tcp://{name}:2", {"PEERS": msg})


def entry(name: str, dead: bool = False) -> dict:
    out = {"id": name, "incarnation": 7, "beat": 3,
           "endpoints": {"agents": f"tcp://{name}:1", "control": f"tcp://{name}:2",
                         "tail": f"tcp://{name}:3"}}
    return {**out, "dead": True} if dead else out


def members(name: str, live: list[str], dead: list[str] = ()):
    return protocol.make("MEMBERS", name, router=name,
                         routers=[entry(n) for n in live] + [entry(n, True) for n in dead])


def table(answers: dict[str, dict]):
    """A fake :func:`fleetwatch.ask.ask_all` answering from ``answers`` (endpoint -> replies
    by type; missing: no answer), recording what was asked."""
    asked = []

    def ask(endpoints, types, timeout, keys=None, fields=None):
        asked.append((list(endpoints), types))
        return [Answer(e, dict(answers[e])) if e in answers else
                Answer(e, problem="no answer within 1s") for e in endpoints]
    return ask, asked


def test_ask_mesh_asks_the_routers_the_seed_names_and_says_how_each_is_known():
    full = {"tcp://r1:2": {"PEERS": peers("r1", {}).get("PEERS"),
                           "MEMBERS": members("r1", ["r1", "r2", "r3"], ["r4"])},
            "tcp://r2:2": {"PEERS": peers("r2", {}).get("PEERS"),
                           "MEMBERS": members("r2", ["r2", "r1", "r3"], ["r4"])}}
    ask, asked = table(full)
    got = ask_mesh(["tcp://r1:2"], ("PEERS",), 1.0, ask=ask)
    assert asked == [(["tcp://r1:2"], ("PEERS", "MEMBERS")),
                     (["tcp://r2:2", "tcp://r3:2", "tcp://r4:2"], ("PEERS", "MEMBERS"))]
    assert [(a.router_id, a.known, a.reachable) for a in got] == [
        ("r1", "configured", True), ("r2", "live", True), ("r3", "live", False),
        ("r4", "dead", False)]


def test_a_router_older_than_meshes_refusing_members_is_no_problem():
    refused = protocol.make("ERROR", "r1", status=405, reason="MEMBERS not accepted here")

    def ask(endpoints, types, timeout, keys=None):
        return [Answer(endpoints[0], {"PEERS": peers("r1", {}).get("PEERS"),
                                      "ERROR": refused}, problem="ERROR 405 MEMBERS not "
                                                                 "accepted here")]
    [got] = ask_mesh(["tcp://r1:2"], ("PEERS",), 1.0, ask=ask)
    assert got.problem == "" and faults.of_routers([got]) == []


def test_remembered_routers_are_asked_after_the_mesh_forgot_them():
    clock = Clock(1000.0)
    seen = Remembered(600, clock)
    seen.take([Answer("tcp://r1:2", {"MEMBERS": members("r1", ["r1", "r2"])})])
    assert seen.endpoints() == ["tcp://r1:2", "tcp://r2:2"]
    ask, asked = table({"tcp://r1:2": {"PEERS": peers("r1", {}).get("PEERS"),
                                       "MEMBERS": members("r1", ["r1"])}})
    got = ask_mesh(["tcp://r1:2"], ("PEERS",), 1.0, also=seen.endpoints(), ask=ask)
    assert [(a.endpoint, a.known) for a in got] == [("tcp://r1:2", "configured"),
                                                    ("tcp://r2:2", "remembered")]
    seen.take(got)                                  # named by the id it had
    [router] = faults.of_routers(got)
    assert (router["kind"], router["name"], router["state"]) == ("router", "r2", "DOWN")
    assert router["output"].endswith(", seen before")
    clock.now += 601
    seen.take(got)                                  # r2 silent for longer: forgotten
    assert seen.endpoints() == ["tcp://r1:2"]


def test_routers_not_answering_and_sink_types_without_a_sink_worst_first():
    live = Answer("tcp://r3:2", problem="no answer within 2s", known="live", mesh_id="r3")
    found = faults.of_routers([
        peers("r1", {"alerting": 1, "history": 0, "registry": 1, "graphite": 0}),
        peers("r2", {"alerting": 1, "history": 0, "registry": 0, "graphite": 0}),
        live])
    assert [(f["kind"], f["name"], f["state"]) for f in found] == [
        ("router", "r3", "DOWN"), ("sink", "graphite", "CRITICAL"),
        ("sink", "history", "CRITICAL"), ("sink", "registry", "WARNING")]
    assert found[0]["output"] == ("not answering at tcp://r3:2: no answer within 2s, live for "
                                  "the routers that answered")
    assert found[1]["output"] == ("no graphite sink connected to any router: what the routers "
                                  "route to it is dropped (counted)")
    assert found[2]["output"] == ("no history sink connected to any router: NOTIFY, REGISTER "
                                  "wait in the agents' spools until one is")
    assert found[3]["output"].startswith("no registry sink connected to r2 (1 of 2 routers)")


def test_the_durability_is_not_ok_while_a_router_does_not_answer():
    everything = {"alerting": 1, "history": 1, "registry": 1}
    found = durability.assess([peers("r1", everything),
                               Answer("tcp://r2:2", problem="no answer", mesh_id="r2")])
    assert found["state"] == durability.UNKNOWN and found["unanswered"] == ["r2"]
    assert durability.lines(found)[0].startswith(
        "durability: unknown: r2 did not answer (ok on the routers that did: NOTIFY -> ")
    assert durability.assess([peers("r1", everything)])["state"] == durability.OK


def stats(uuid: str, metrics: dict, router: str, **fields) -> list[bytes]:
    return protocol.encode_tail(protocol.make("STATS", uuid, metrics=metrics, **fields),
                                uuid, router)


def test_a_site_whose_uplink_is_down_and_a_silent_scheduler():
    clock = Clock(1000.0)
    health = Health(lambda: [], clock=clock)
    health.take(stats("r1", {"router.agents": 1}, "r1", source="router"))
    # a site router's own STATS, relayed by the central router (SPEC 4.10)
    health.take(stats("paris", {"router.site.up": 1}, "r1,paris", source="router"))
    health.take(stats("lyon", {"router.site.up": 1}, "r1,lyon", source="router"))
    # a scheduler's STATS from control, as a scheduler-role identity sends them (SPEC 4.3)
    health.take(stats("sched-1", {"scheduler.runs": 5}, "r1,sched-1", source="scheduler"))
    clock.now += 10
    health.take(stats("sched-1", {"scheduler.runs": 9}, "r1,sched-1", source="scheduler"))
    health.take(stats("lyon", {"router.site.up": 0}, "r1,lyon", source="router"))
    assert faults.of_health(health.snapshot(), clock()) == [
        faults.fault("site", "lyon", "DOWN", "uplink down: its STATS say its uplink is down "
                     "(router.site.up 0); its agents are UNREACHABLE behind it", clock.now)]
    clock.now += 31                         # 3 of the scheduler's 10 s: silent
    found = faults.of_health(health.snapshot(), clock())
    assert [(f["kind"], f["name"], f["state"]) for f in found] == [
        ("site", "lyon", "DOWN"), ("scheduler", "sched-1", "CRITICAL")]
    assert found[1]["output"] == "no STATS for 31 s: the checks it schedules are not run"
    clock.now += faults.DEFAULT_EVERY * 3 - 30  # paris, heard once: silent past 3 minutes
    assert [f["name"] for f in faults.of_health(health.snapshot(), clock())] == [
        "lyon", "paris", "sched-1"]


def test_no_scheduler_heard_at_all():
    clock = Clock(1000.0)
    health = Health(lambda: [], clock=clock)
    health.take(stats("r1", {"router.agents": 1}, "r1", source="router"))
    assert faults.of_health(health.snapshot(), clock()) == []
    clock.now += faults.NONE_HEARD_AFTER + 1
    health.take(stats("r1", {"router.agents": 1}, "r1", source="router"))
    assert faults.of_health(health.snapshot(), clock(), checks=False) == []
    [found] = faults.of_health(health.snapshot(), clock())
    assert (found["kind"], found["state"]) == ("scheduler", "CRITICAL")
    assert found["output"].startswith("no scheduler heard in 181 s")


def told(name: str, backends=None, sites_lost=(), agents=(), uptime: float = 30.0) -> Answer:
    """A router's PEERS answer with what it heard (SPEC 4.3: ``backends``, ``sites_lost``)."""
    msg = protocol.make("PEERS", name, router=name, total=len(agents), sinks={},
                        durable=DURABLE, agents=[{"uuid": u} for u in agents],
                        backends=list(backends or []), sites_lost=list(sites_lost),
                        uptime=uptime)
    return Answer(f"tcp://{name}:2", {"PEERS": msg})


def backend(uuid: str, ago: float, every: float | None = 10.0, role: str = "scheduler"):
    return {"uuid": uuid, "role": role, "hostname": "h", "last_heard": 5000.0 - ago,
            "every": every, "ago": ago}


def lost(site: str, ago: float, agents: int = 3) -> dict:
    return {"site": site, "hostname": "h", "last_heard": 5000.0 - ago, "expired": 4990.0,
            "agents": agents, "ago": ago}


def test_the_routers_word_on_site_links_lost_and_silent_schedulers():
    """From the routers' answers alone (``status --problems`` follows no tail): a site one
    router lost and none lists linked is DOWN; a scheduler is silent as the router that
    heard it last tells, by that router's clock (issue 31, item 11)."""
    found = faults.of_routers([
        told("r1", [backend("sched-1", 31.0), backend("sched-2", 40.0), backend("s", 999.0,
                                                                                  role="sink")],
             [lost("paris", 12.0), lost("lyon", 50.0, 7)]),
        # sched-2 heard by r2 a moment ago (it moved), lyon linked to r2 again
        told("r2", [backend("sched-2", 1.0, every=None)], agents=["lyon"])])
    assert [(f["kind"], f["name"], f["state"]) for f in found] == [
        ("site", "paris", "DOWN"), ("scheduler", "sched-1", "CRITICAL")]
    assert found[0] == faults.fault(
        "site", "paris", "DOWN", "link lost: router r1 heard nothing from it for 12 s; its 3 "
        "agents are UNREACHABLE behind it", 4988.0)
    assert found[1]["output"] == ("no STATS for 31 s (last through router r1): the checks it "
                                  "schedules are not run")
    # heard once (no interval yet): silent past 3 of the default 60 s
    assert faults.of_routers([told("r1", [backend("sched-1", 170.0, every=None)])]) == []


def test_no_scheduler_through_any_router_and_routers_that_say_nothing_of_it():
    young, old = told("r1", uptime=30.0), told("r2", uptime=faults.NONE_HEARD_AFTER + 1)
    assert faults.of_routers([young]) == []
    [found] = faults.of_routers([young, old])
    assert (found["kind"], found["name"], found["state"]) == ("scheduler", "-", "CRITICAL")
    assert found["output"] == ("no scheduler's STATS through any router in 181 s: no check "
                               "is scheduled")
    assert faults.of_routers([young, old], checks=False) == []
    # a router older than these fields says nothing: nothing is concluded
    assert faults.of_routers([peers("r3", {})]) == []


def test_a_fault_told_twice_is_listed_once():
    twice = [faults.fault("scheduler", "s", "CRITICAL", "by the routers"),
             faults.fault("scheduler", "s", "CRITICAL", "by the tail")]
    assert faults.ordered(twice) == twice[:1]
