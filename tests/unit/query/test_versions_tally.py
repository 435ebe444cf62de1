"""The versions a fleet runs (query/versions.py), as ``fleetwatch status`` and the console
show them: each process's from what the routers' PEERS answers and the registry say, and
the line a rolling upgrade shows while two releases run."""

from __future__ import annotations

from fleetwatch import protocol
from fleetwatch.ask import Answer
from query import versions


def answer(router: str, version: str | None = None, backends=None) -> Answer:
    fields = {"router": router, "agents": [], "total": 0, "uptime": 10.0,
              "backends": backends or [], "version": version}
    return Answer(f"tcp://{router}:1", {"PEERS": protocol.make("PEERS", router, **fields)})


def backend(uuid: str, role: str, ago: float, version: str | None = None) -> dict:
    entry = {"uuid": uuid, "role": role, "hostname": "h", "last_heard": 1.0, "every": 10.0,
             "ago": ago}
    return {**entry, "version": version} if version is not None else entry


def test_each_router_says_its_version_and_an_older_one_nothing():
    assert versions.of_answer(answer("r1", "1.0.0")) == "1.0.0"
    assert versions.of_answer(answer("r0")) is None                 # before 1.0.0
    assert versions.of_answer(Answer("tcp://gone:1", problem="no answer")) is None


def test_the_sinks_and_schedulers_each_as_the_router_that_heard_it_last():
    answers = [answer("r1", "1.0.0", [backend("s1", "sink", 5.0, "1.0.0"),
                                      backend("sch", "scheduler", 3.0)]),
               answer("r2", "1.0.0", [backend("s1", "sink", 1.0, "1.1.0")]),
               Answer("tcp://gone:1", problem="no answer")]
    assert versions.backends(answers) == [
        {"uuid": "sch", "role": "scheduler", "hostname": "h", "version": None,
         "router": "r1", "ago": 3.0},
        {"uuid": "s1", "role": "sink", "hostname": "h", "version": "1.1.0", "router": "r2",
         "ago": 1.0}]


def test_a_fleet_of_two_versions_says_so_newest_first_and_one_version_says_nothing():
    agents = [{"version": "0.9.0"}] * 3 + [{"version": "1.0.0"}] * 10
    routers = [{"reachable": True, "version": "1.0.0"}, {"reachable": False, "version": None}]
    processes = [{"version": "1.0.0"}]
    counts = versions.tally(agents, routers, processes)
    assert counts == {"1.0.0": 12, "0.9.0": 3}
    assert versions.line(counts) == "2 versions: 1.0.0 (12), 0.9.0 (3)"
    assert versions.line(versions.tally(agents[3:], routers, processes)) is None
    older = versions.tally(agents[3:], [{"reachable": True}], [])
    assert versions.line(older) == "2 versions: 1.0.0 (10), unknown (1)"


def test_versions_are_ordered_by_their_numbers_a_pre_release_before_its_release():
    found = ["0.9.0", "unknown", "1.0.1~test", "1.10.0", "1.0.1", "1.9.2"]
    assert sorted(found, key=versions.order) == [
        "1.10.0", "1.9.2", "1.0.1", "1.0.1~test", "0.9.0", "unknown"]
