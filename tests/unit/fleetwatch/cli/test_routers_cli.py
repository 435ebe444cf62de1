"""``fleetwatch routers`` without routers: the views, the disagreements and the exit status
from given MEMBERS answers (fleetwatch/cli/routers.py)."""

from __future__ import annotations

from fleetwatch import protocol
from fleetwatch.ask import Answer
from fleetwatch.cli import routers as cli


def entry(name: str, dead: bool = False) -> dict:
    out = {"id": name, "incarnation": 7, "beat": 3, "age": 0.25,
           "endpoints": {"agents": f"tcp://{name}:1", "control": f"tcp://{name}:2",
                         "tail": f"tcp://{name}:3"}}
    return {**out, "dead": True} if dead else out


def answer(name: str, live: list[str], dead: list[str] = ()) -> Answer:
    msg = protocol.make("MEMBERS", name, router=name,
                        routers=[entry(n) for n in live] + [entry(n, True) for n in dead])
    return Answer(f"tcp://{name}:2", {"MEMBERS": msg})


def silent(name: str) -> Answer:
    return Answer(f"tcp://{name}:2", problem="no answer within 1s")


def test_agreeing_routers():
    doc = cli.views([answer("r1", ["r1", "r2"]), answer("r2", ["r2", "r1"])], ("tcp://r1:2",))
    assert doc["live"] == ["r1", "r2"] and doc["disagreements"] == []
    assert cli.exit_status(doc) == cli.EXIT_OK
    row = doc["routers"][0]["live"][1]
    assert row == {"id": "r2", "agents": "tcp://r2:1", "control": "tcp://r2:2",
                   "tail": "tcp://r2:3", "incarnation": 7, "beat": 3, "last_heard": 0.25}
    text = cli.render(doc)
    assert "router r1 at tcp://r1:2 sees 2 live" in text and "agree: r1, r2" in text


def test_a_router_seen_live_by_one_and_dead_or_unknown_by_others():
    doc = cli.views([answer("r1", ["r1", "r2", "r3"]), answer("r2", ["r2", "r1"], ["r3"]),
                     answer("r3", ["r3", "r1", "r2"]), answer("r4", ["r4"])])
    by_router = {d["router"]: d for d in doc["disagreements"]}
    assert by_router["r3"] == {"router": "r3", "live_for": ["r1", "r3"], "dead_for": ["r2"],
                               "unknown_to": ["r4"]}
    assert set(by_router) == {"r1", "r2", "r3", "r4"}
    assert cli.exit_status(doc) == cli.EXIT_DISAGREE
    assert "r3: live for r1, r3; dead for r2; unknown to r4" in cli.render(doc)


def test_who_does_not_answer_counts_when_configured_or_seen_live():
    dead_only = cli.views([answer("r1", ["r1"], ["r2"]), silent("r2")], ("tcp://r1:2",))
    assert cli.exit_status(dead_only) == cli.EXIT_OK
    assert "(seen dead: not counted)" in cli.render(dead_only)
    configured = cli.views([answer("r1", ["r1"], ["r2"]), silent("r2")],
                           ("tcp://r1:2", "tcp://r2:2"))
    assert cli.exit_status(configured) == cli.EXIT_DISAGREE
    live = cli.views([answer("r1", ["r1", "r2"]), silent("r2")], ("tcp://r1:2",))
    assert cli.exit_status(live) == cli.EXIT_DISAGREE
    assert cli.exit_status(cli.views([silent("r1")], ("tcp://r1:2",))) == cli.EXIT_UNREACHABLE


def test_gather_follows_the_routers_named_live_or_dead():
    asked = []
    table = {"tcp://r1:2": answer("r1", ["r1", "r2"], ["r3"]),
             "tcp://r2:2": answer("r2", ["r2", "r1"], ["r3"]), "tcp://r3:2": silent("r3")}

    def ask(endpoints, types, timeout, keys=None):
        asked.append(list(endpoints))
        return [table[e] for e in endpoints]
    got = cli.gather(["tcp://r1:2"], 1.0, ask=ask)
    assert asked == [["tcp://r1:2"], ["tcp://r2:2", "tcp://r3:2"]]
    assert [a.endpoint for a in got] == ["tcp://r1:2", "tcp://r2:2", "tcp://r3:2"]


def test_gather_asks_a_router_that_answered_once_only():
    """A configured endpoint that is not the one a router advertises (an address, an alias)
    is not asked again under its advertised name."""
    asked = []

    def ask(endpoints, types, timeout, keys=None):
        asked.append(list(endpoints))
        return [answer("r1", ["r1"]) if e == "tcp://10.0.0.1:2" else silent("x")
                for e in endpoints]
    got = cli.gather(["tcp://10.0.0.1:2"], 1.0, ask=ask)
    assert asked == [["tcp://10.0.0.1:2"]] and len(got) == 1
