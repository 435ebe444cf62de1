"""web.tiles: the health page's tiles, their states from the faults and from problem
counters that grew between two reports, worst first."""

from __future__ import annotations

from web.tiles import growth, tiles


def process(pid: str, metrics: dict, before: dict | None = None, heard: float = 160.0,
            then: float = 100.0, hostname: str | None = None) -> dict:
    return {"id": pid, "hostname": hostname, "metrics": metrics, "heard": heard,
            "before": before, "before_heard": then if before is not None else None}


def test_growth_is_per_minute_of_the_problem_counters_a_restart_counted_from_zero():
    p = process("r1", {"router.dropped.STATS": 30, "router.relayed": 900,
                       "router.bad.frames": 4, "router.refused": 2},
                {"router.dropped.STATS": 10, "router.relayed": 100, "router.bad.frames": 9,
                 "router.refused": 2})
    assert growth(p) == {"router.dropped.STATS": 20.0, "router.bad.frames": 4.0}
    assert growth(process("r1", {"router.dropped.STATS": 30})) == {}     # one report only


ROUTERS = [{"endpoint": "tcp://a:1", "id": "r1", "reachable": True, "agents": 12,
            "sinks": {"alerting": 1, "graphite": 1}, "problem": None},
           {"endpoint": "tcp://b:1", "id": "r2", "reachable": True, "agents": 3,
            "sinks": {"alerting": 1}, "problem": None},
           {"endpoint": "tcp://c:1", "id": None, "reachable": False, "agents": None,
            "sinks": None, "problem": "no answer within 1s"}]


def test_worst_first_each_with_the_figures_that_explain_it():
    faults = [{"kind": "router", "name": "tcp://c:1", "state": "DOWN",
               "output": "not answering at tcp://c:1: no answer within 1s"},
              {"kind": "sink", "name": "graphite", "state": "WARNING",
               "output": "connected to r1 only"},
              {"kind": "site", "name": "site-a", "state": "DOWN", "output": "link lost"}]
    snapshot = {"router_stats": [process("r2", {"router.dropped.NOTIFY": 6},
                                         {"router.dropped.NOTIFY": 0})],
                "sinks": [process("alerting@h", {"sink.alerting.written": 5,
                                                 "sink.write_failed": 1})],
                "schedulers": [process("s1", {"scheduler.runs": 9}, hostname="mon-1")]}
    got = [(t["state"], t["kind"], t["name"], t["figures"]) for t in
           tiles(ROUTERS, faults, snapshot)]
    assert got == [
        ("down", "router", "tcp://c:1",
         ["not answering", "not answering at tcp://c:1: no answer within 1s"]),
        ("down", "site", "site-a", ["link lost"]),
        ("degraded", "router", "r2", ["3 agents", "router.dropped.NOTIFY +6/min"]),
        ("degraded", "sink", "graphite", ["1 connected", "connected to r1 only"]),
        ("ok", "router", "r1", ["12 agents", "sinks: alerting 1, graphite 1"]),
        ("ok", "sink", "alerting", ["1 connected"]),
        ("ok", "scheduler", "mon-1", ["reporting"])]


def test_a_sink_type_with_no_sink_and_a_silent_scheduler_are_down():
    faults = [{"kind": "sink", "name": "history", "state": "CRITICAL",
               "output": "no history sink connected"},
              {"kind": "scheduler", "name": "s1", "state": "CRITICAL",
               "output": "silent for 200 s"}]
    snapshot = {"schedulers": [process("s1", {"scheduler.runs": 9})]}
    got = [(t["state"], t["kind"], t["name"]) for t in tiles(ROUTERS[:1], faults, snapshot)]
    assert got == [("down", "sink", "history"), ("down", "scheduler", "s1"),
                   ("ok", "router", "r1"), ("ok", "sink", "alerting"), ("ok", "sink", "graphite")]
