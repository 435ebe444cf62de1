"""query.tactical: the overview's summary, each problem state split into unhandled and
handled, the fleet's own faults by kind."""

from __future__ import annotations

from query.tactical import summary


def test_problem_states_are_split_and_the_others_only_counted():
    got = summary([("DOWN", 2), ("UP", 10)], [("CRITICAL", 3), ("OK", 40)],
                  {("host", "DOWN"): (1, 1), ("check", "CRITICAL"): (1, 2),
                   ("process", "DOWN"): (1, 0)}, [], [])
    assert got["hosts"] == [
        {"state": "DOWN", "count": 2, "unhandled": 1, "handled": 1},
        {"state": "UP", "count": 10, "unhandled": None, "handled": None}]
    assert got["checks"] == [
        {"state": "CRITICAL", "count": 3, "unhandled": 1, "handled": 2},
        {"state": "OK", "count": 40, "unhandled": None, "handled": None}]
    # a problem state nothing is in: none of either
    assert summary([], [("WARNING", 0)], {}, [], [])["checks"] == [
        {"state": "WARNING", "count": 0, "unhandled": 0, "handled": 0}]


def test_the_fleet_s_own_by_kind_worst_state_first():
    faults = [{"kind": "sink", "name": "graphite", "state": "WARNING"},
              {"kind": "sink", "name": "history", "state": "CRITICAL"},
              {"kind": "router", "name": "r2", "state": "DOWN"},
              {"kind": "channel", "name": "slack-ops", "state": "CRITICAL"}]
    routers = [{"reachable": True}, {"reachable": False}]
    tiles = {t["kind"]: t for t in summary([], [], {}, faults, routers)["fleet"]}
    assert list(tiles) == ["router", "site", "sink", "scheduler", "channel"]
    assert tiles["channel"] == {"kind": "channel", "label": "Alert channels",
                                "state": "CRITICAL", "faults": 1, "text": "slack-ops"}
    assert tiles["router"] == {"kind": "router", "label": "Routers", "state": "DOWN",
                               "faults": 1, "text": "1 of 2 answering"}
    assert (tiles["sink"]["state"], tiles["sink"]["text"]) == ("CRITICAL", "graphite, history")
    assert (tiles["site"]["state"], tiles["site"]["faults"], tiles["site"]["text"]) == \
        ("OK", 0, "ok")
