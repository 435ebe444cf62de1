"""Dependencies end to end, on SQLite and on PostgreSQL: a parent and the children behind
it going silent page once, for the parent; the children are UNREACHABLE (recorded, paging
nobody) until the parent is back, then those still silent are DOWN and page, once.

First two alerting sink objects on one real database with a fake clock (the parents from
the config, from agents' HELLOs through the real registry sink, a parent check); then real
processes: a router, the registry sink, two alerting sinks, a real agent as the parent, 20
children (real connections, tests/support/dealers.py) and a real HTTP receiver; and a real
agent whose ``parents:`` reach the registry through a real router.
"""

from __future__ import annotations

import functools
import json
import logging
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from support.channelservers import HttpReceiver
from support.clock import Clock
from support.fleet import wait_for
from support.threads import in_threads

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from sinks.registry import RegistrySink  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from support import alertsink  # noqa: E402
from support.alertsink import QUICK, T0, beat, result, rows  # noqa: E402

SW = "5a" * 16
CHILDREN = [f"{i:02d}" * 16 for i in range(10, 30)]          # 20 uuids
DEALERS = str(Path(__file__).parents[1] / "support" / "dealers.py")


def name_of(uuid: str) -> str:
    return "sw" if uuid == SW else f"rack-{uuid[:2]}"


def hello(url, uuids, **fields):
    alertsink.hello(url, {u: name_of(u) for u in uuids}, **fields)


sink = functools.partial(alertsink.sink, **QUICK, renotify_interval=0, host_timeout=10)


def events(url) -> list[tuple[str, str, str | None]]:
    """(action, hostname, check) of every alert event, in order."""
    return [(e["action"], e["hostname"], e["check_name"]) for e in rows(url, "alert_events")]


def unreachable(url) -> dict[str, str | None]:
    return {name_of(r["uuid"]): r["unreachable"] for r in rows(url, "host_state")
            if not r["name"]}


RACK = [{"hosts": "rack-*", "parents": ["sw"]}]


def test_a_parent_and_20_children_silent_page_once_then_the_children_after_it(url):
    hello(url, [SW, *CHILDREN])
    clock = Clock(T0)
    a, b = sink(url, clock, dependencies=RACK), sink(url, clock, dependencies=RACK)
    try:
        for i in range(5):                              # all heard until T0+4
            clock.now = T0 + i
            a.write([beat(u) for u in (SW, *CHILDREN)])
        clock.now = T0 + 4.5                            # the parent is heard a little later:
        b.write([beat(SW)])                             # its deadline comes after theirs
        for i in range(15, 40):                         # children past T0+14, parent T0+14.5
            clock.now = T0 + i / 1.0
            in_threads(a.tick, b.tick)
        assert events(url) == [("trigger", "sw", None)]               # one page
        assert unreachable(url) == {"sw": None, **{name_of(u): "sw" for u in CHILDREN}}
        assert a.counts["host_held"] + b.counts["host_held"] >= 20    # held at T0+15 first
        clock.now = T0 + 40
        b.write([beat(SW)])                             # the parent is back, they are not
        for i in range(41, 53):                         # their heartbeats may come through
            clock.now = T0 + i                          # it a moment later: each child is
            b.write([beat(SW)])                         # given its timeout (10 s) first
            in_threads(a.tick, b.tick)
            if i < 50:
                assert events(url) == [("trigger", "sw", None), ("resolve", "sw", None)]
    finally:
        a.close()
        b.close()
    got = events(url)
    assert got[:2] == [("trigger", "sw", None), ("resolve", "sw", None)]
    assert sorted(got[2:]) == sorted(("trigger", name_of(u), None) for u in CHILDREN)
    # each child's DOWN names the parent it was UNREACHABLE behind (the channels show it)
    assert {(e["details"] or {}).get("parent") for e in rows(url, "alert_events")[2:]} == {
        "sw, up again: this host was UNREACHABLE behind it"}
    assert unreachable(url) == {"sw": None, **{name_of(u): None for u in CHILDREN}}


def test_a_child_whose_parent_is_heard_after_its_deadline_is_down(url):
    hello(url, [SW, CHILDREN[0]])
    clock = Clock(T0)
    s = sink(url, clock, dependencies=RACK)
    try:
        for i in range(30):
            clock.now = T0 + i
            s.write([beat(SW)] + ([beat(CHILDREN[0])] if i < 5 else []))
            s.tick()
    finally:
        s.close()
    assert events(url) == [("trigger", "rack-10", None)]


def test_a_child_back_while_unreachable_pages_nobody(url):
    hello(url, [SW, CHILDREN[0]])
    clock = Clock(T0)
    s = sink(url, clock, dependencies=RACK)
    try:
        for i in range(40):
            clock.now = T0 + i
            s.write([beat(u) for u in (SW, CHILDREN[0]) if i < 5 or (u != SW and i > 30)])
            s.tick()
    finally:
        s.close()
    assert events(url) == [("trigger", "sw", None)]
    assert unreachable(url) == {"sw": None, "rack-10": None}


def test_declared_parents_and_a_parent_check_soft_then_hard(url):
    """The child declares its parent in its HELLO: a check of another host. The parent
    check SOFT: the silent child is held; HARD: it is UNREACHABLE; one page, the check's."""
    poller, child = SW, CHILDREN[0]
    hello(url, [poller])
    hello(url, [child], parents=["sw/ping_rack", "not/a/ref"])
    clock = Clock(T0)
    s = sink(url, clock, max_check_attempts=3)
    try:
        for i in range(40):
            clock.now = T0 + i
            batch = [beat(poller)] + ([beat(child)] if i < 5 else [])
            if i >= 14:                         # CRITICAL from T0+14: HARD at the third
                batch.append(result(2, clock.now, "ping_rack", poller))
            s.write(batch)
            s.tick()
            if i == 15:                         # past the child's deadline, the check SOFT
                assert unreachable(url)["rack-10"] is None
                assert s.counts["host_held"] >= 1 and events(url) == []
    finally:
        s.close()
    assert events(url) == [("trigger", "sw", "ping_rack")]
    assert unreachable(url)["rack-10"] == "sw/ping_rack"
    (agent,) = [r for r in rows(url, "agents") if r["uuid"] == child]
    assert agent["parents"] == ["sw/ping_rack"]


def test_a_parent_check_left_soft_holds_a_child_for_hold_max_at_most(url):
    from sinks.alerting.dependencies.store import HOLD_MAX
    poller, child = SW, CHILDREN[0]
    hello(url, [poller])
    hello(url, [child], parents=["sw/ping_rack"])
    clock = Clock(T0)
    s = sink(url, clock, max_check_attempts=3)
    try:
        s.write([beat(poller), beat(child), result(2, T0, "ping_rack", poller)])   # SOFT 1
        for now in (T0 + 11, T0 + 10 + HOLD_MAX, T0 + 10 + HOLD_MAX + 1):
            clock.now = now
            s.write([beat(poller)])
            s.tick()
            if now < T0 + 10 + HOLD_MAX + 1:
                assert events(url) == [], now                   # held, not judged
    finally:
        s.close()
    assert events(url) == [("trigger", "rack-10", None)]


def test_a_check_held_by_its_parent_check_is_told_at_the_tick_when_it_recovers(url):
    web = CHILDREN[0]
    hello(url, [web])
    rules = [{"hosts": "rack-*", "checks": "http*", "parents": ["nginx_proc"]}]
    clock = Clock(T0)
    a, b = sink(url, clock, dependencies=rules), sink(url, clock, dependencies=rules)
    noted = []                                  # the sinks' on_hold: every hold, committed
    a.on_hold = b.on_hold = lambda reason, by, event: noted.append(
        (reason, by, event["key"], event["created"]))
    try:
        a.write([result(2, clock.advance(1), "nginx_proc", web)])         # HARD: paged
        b.write([result(2, clock.advance(1), "http", web)])               # held
        (held,) = [r for r in rows(url, "check_state") if r["plugin"] == "http"]
        assert held["unreachable"] == "rack-10/nginx_proc"
        a.write([result(2, clock.advance(1), "http", web)])               # still held
        b.write([result(0, clock.advance(1), "nginx_proc", web)])         # recovers
        in_threads(a.tick, b.tick)                                        # http told, once
        in_threads(a.tick, b.tick)
    finally:
        a.close()
        b.close()
    assert events(url) == [("trigger", "rack-10", "nginx_proc"),
                           ("resolve", "rack-10", "nginx_proc"),
                           ("trigger", "rack-10", "http")]
    assert all(r["unreachable"] is None for r in rows(url, "check_state"))
    assert noted == [("parent down", "rack-10/nginx_proc", f"{web}/check/http", T0 + t)
                     for t in (2, 3)]


def test_a_cycle_agents_declare_is_broken_and_logged_not_a_crash(url, caplog):
    one, two = CHILDREN[0], CHILDREN[1]
    hello(url, [one], parents=["rack-11"])
    hello(url, [two], parents=["rack-10"])
    clock = Clock(T0)
    s = sink(url, clock)
    try:
        with caplog.at_level(logging.WARNING):
            for i in range(30):
                clock.now = T0 + i
                s.write([beat(u) for u in (one, two) if i < 5])
                s.tick()
    finally:
        s.close()
    assert "cycle rack-10 -> rack-11 -> rack-10" in caplog.text
    # the edge rack-11 -> rack-10 is dropped: rack-11 is DOWN, rack-10 UNREACHABLE behind it
    assert events(url) == [("trigger", "rack-11", None)]
    assert unreachable(url) == {"rack-10": "rack-11", "rack-11": None}


def test_the_registry_keeps_the_parents_of_hello_and_the_agents_own_register(url):
    child = CHILDREN[0]

    def parents():
        return [r["parents"] for r in rows(url, "agents") if r["uuid"] == child]

    msg = functools.partial(alertsink.msg, uuid=child)
    registry = RegistrySink(db.engine(url))
    registry.start()
    try:
        registry.write([msg("HELLO", hostname="rack-10", heartbeat=1.0, parents=["sw"])])
        assert parents() == [["sw"]]
        registry.write([msg("REGISTER", name="agent", hostname="rack-10",
                            parents=["sw", "sw/ping", "a/b/c"])])
        assert parents() == [["sw", "sw/ping"]] and registry.counts["bad_parent"] == 1
        registry.write([msg("REGISTER", name="backup", plugins=[])])     # a local process's
        assert parents() == [["sw", "sw/ping"]]
        registry.write([msg("HELLO", hostname="rack-10", heartbeat=1.0)])  # declares none
        assert parents() == [None]
    finally:
        registry.close()


# ---------------------------------------------------------------- real processes

def test_a_parent_and_20_children_going_silent_page_once_on_a_real_receiver(fleet):
    receiver = HttpReceiver().start()
    dealers = None
    try:
        router = fleet.router(limits={"hellos_per_second": 1000.0})
        routers = [router]
        delivery = {"channels": {"pager": {"type": "webhook", "url": receiver.url,
                                           "routing_key": "KEY"}},
                    "rules": [{"channels": ["pager"]}],
                    "retry": {"initial": 0.2, "max": 1}, "poll_interval": 0.1}
        alerting = {"tick_interval": 0.2, "host_timeout": 3,
                    "dependencies": [{"hosts": "rack-*", "parents": ["parent-host"]}],
                    "delivery": delivery}
        fleet.sink("registry", routers)
        for name in ("alerting-1", "alerting-2"):
            fleet.sink("alerting", routers, name=name, alerting=alerting)
        parent = fleet.agent(routers, "parent")

        def up():
            return {r[0] for r in fleet.db_rows(
                "SELECT a.hostname FROM host_state h JOIN agents a ON a.uuid = h.uuid "
                "WHERE h.name = '' AND h.up")}
        # the sinks are attached (a HELLO is not resent: the children's must not be lost)
        wait_for(lambda: up() == {"parent-host"}, 30, 0.1, "the parent heard")
        dealers = subprocess.Popen(
            [sys.executable, DEALERS, router["endpoints"]["agents"], "20", "rack",
             "--heartbeat", "0.3", "--beat", "--timeout", "30"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert dealers.stdout.readline().strip() == "ready 20", dealers.stderr.read()
        wait_for(lambda: len(up()) == 21, 30, 0.1, "the parent and 20 children heard")

        parent.signal(signal.SIGKILL)                   # silent together
        dealers.stdin.close()
        assert dealers.wait(10) == 0

        def unreachable_children():
            return [r for r in fleet.db_rows(
                "SELECT unreachable FROM host_state WHERE name = '' AND unreachable IS NOT "
                "NULL") if r[0] == "parent-host"]
        wait_for(lambda: len(unreachable_children()) == 20, 30, 0.1,
                 "20 children UNREACHABLE")
        wait_for(lambda: receiver.posts, 10, 0.05, "the parent's page")
        # the receiver has the POST before the sender marks it sent: wait for the mark, and
        # nothing else may be waiting in the outbox (no child queued behind a hold)
        wait_for(lambda: fleet.db_rows("SELECT count(*) FROM outbox WHERE state != 'sent'")
                 == [(0,)], 10, 0.05, "the parent's page marked sent, nothing else queued")
        assert [(p["event_action"], p["payload"]["source"]) for p in receiver.posts] == [
            ("trigger", "parent-host")]
        shown = {a["hostname"]: a for a in fleet.status(fleet.operator_config(routers))
                 ["agents"]}
        assert shown["parent-host"]["state"] == "DOWN"
        assert {shown[f"rack-{n}"]["state"] for n in range(20)} == {"UNREACHABLE"}
        assert shown["rack-7"]["handled"]["unreachable"] == "parent-host"

        fleet.agent(routers, "parent")                  # back; its children are not
        wait_for(lambda: len(receiver.posts) >= 22, 30, 0.1, "the children's pages")
        wait_for(lambda: fleet.db_rows("SELECT count(*) FROM outbox WHERE state != 'sent'")
                 == [(0,)], 10, 0.1, "every page sent")
        got = [(p["event_action"], p["payload"]["source"]) for p in receiver.posts]
        # the parent's resolve and its children's pages are separate keys: in any order
        assert got[0] == ("trigger", "parent-host")
        assert sorted(got[1:]) == sorted([("resolve", "parent-host")] +
                                         [("trigger", f"rack-{n}") for n in range(20)])
        children = [p for p in receiver.posts if p["payload"]["source"] != "parent-host"]
        assert len({p["dedup_key"] for p in children}) == 20
    finally:
        if dealers is not None and dealers.poll() is None:
            dealers.kill()
            dealers.wait(5)
        receiver.stop()


def test_an_agents_parents_reach_the_registry_through_a_real_router(fleet):
    router = fleet.router()
    fleet.sink("registry", [router])
    fleet.agent([router], parents=["sw-3", "poller-1/ping_sw3"])

    def parents():
        found = fleet.db_rows("SELECT hostname, parents FROM agents")
        return [(h, json.loads(p)) for h, p in found if p]
    got = wait_for(parents, 30, 0.1, "the agent's parents in the registry")
    assert got == [("agent-host", ["sw-3", "poller-1/ping_sw3"])]
