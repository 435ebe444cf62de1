"""Dynamic fleets: agents that leave (DEREGISTER), ephemeral ones that go silent, and
``fleetwatch forget``; on SQLite and on PostgreSQL, then with real processes.

First the registry and alerting sinks as objects on one real database and a fake clock
(:mod:`support.alertsink`): ten generations of 1,000 ephemeral agents leave 1,000 registry
rows and page nobody, while a plain agent gone silent still pages; a deregistered agent's
plugins, jobs, checks and DOWN alerting end, its told problem is resolved (no page), a
heartbeat sent before its DEREGISTER does not bring it back and one sent after does, and it
is forgotten ``forget_after`` later; ``fleetwatch forget`` refuses an ambiguous hostname and
says what it removed. Then real processes: an agent stopped with ``deregister_on_stop``, one
deregistered by ``fleetwatch agent --deregister`` and an ephemeral one killed page nobody,
get no more RUNs and leave ``status`` and the registry; a plain agent killed pages.
"""

from __future__ import annotations

import functools
import json
import signal

import pytest

from support.channelservers import HttpReceiver
from support.clock import Clock
from support.fleet import wait_for

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(300)

from scheduler.service import read_registry  # noqa: E402
from sinks.registry import RegistrySink  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from fleetwatch.store.reader import Reader  # noqa: E402
from support import alertsink  # noqa: E402
from support.alertsink import QUICK, T0, WEB, beat, msg, result, rows  # noqa: E402

HOUR = 3600.0
forget = functools.partial(alertsink.command, "forget")


def registry(url, clock, batch) -> RegistrySink:
    """A real registry sink on ``clock`` writes ``batch`` (and is closed)."""
    sink = RegistrySink(db.engine(url), clock)
    sink.start()
    try:
        sink.write(batch)
    finally:
        sink.close()
    return sink


def agents_of(uuids, ephemeral: bool, plugins=("load",)) -> list:
    """Each agent's HELLO and its own REGISTER of ``plugins`` (every minute)."""
    flag = {"ephemeral": True} if ephemeral else {}
    return [m for u in uuids for m in (
        msg("HELLO", u, hostname=f"i-{u[:8]}", heartbeat=1.0, **flag),
        msg("REGISTER", u, name="agent", plugins=[{"name": p, "interval": 60, "timeout": 10}
                                                   for p in plugins], **flag))]


def scheduled(url) -> set[str]:
    """The uuids the scheduler would make jobs for (scheduler.service.read_registry)."""
    reader = Reader(url)
    try:
        return {row["uuid"] for row in read_registry(reader)}
    finally:
        reader.close()


def events(url) -> list[dict]:
    """Every alert event, oldest first."""
    eng = db.engine(url, writer=False)
    try:
        with eng.connect() as conn:
            from fleetwatch.store import reads
            return reads.alert_events(conn, limit=100_000)[::-1]
    finally:
        eng.dispose()


GENERATIONS = 5


def test_generations_of_ephemeral_agents_leave_one_and_page_nobody(url):
    """Five generations of 1,000 ephemeral agents, each gone then forgotten: the tables
    hold one generation at the end, and only the steady agent was ever paged."""
    clock = Clock(T0)
    sink = alertsink.sink(url, clock, **QUICK, forget_after=HOUR)
    steady = "5" * 32
    registry(url, clock, agents_of([steady], ephemeral=False))
    try:
        for generation in range(GENERATIONS):
            uuids = [f"g{generation}-{i:05d}" for i in range(1000)]
            registry(url, clock, agents_of(uuids, ephemeral=True))
            sink.write([beat(u) for u in [*uuids, steady]])
            assert len(scheduled(url)) == 1001
            clock.advance(11)                       # past the 10 s timeout: GONE
            sink.tick()
            sink.tick()                             # (1,000 hosts a tick at most)
            assert scheduled(url) == {steady}       # their jobs end at once
            gone = [r for r in rows(url, "host_state") if r["gone"] is not None]
            assert len(gone) == 1000 and not [r for r in gone if r["up"]]
            clock.advance(HOUR)                     # forgotten
            sink.tick()
            sink.write([beat(steady)])              # (steady is DOWN, then back each time)
        uuids = [f"g{GENERATIONS}-{i:05d}" for i in range(1000)]
        registry(url, clock, agents_of(uuids, ephemeral=True))
        sink.write([beat(u) for u in uuids])
        assert len(rows(url, "agents")) == 1001 and len(rows(url, "plugins")) == 1001
        assert len(rows(url, "host_state")) == 1001
        hosts = [(e["key"], e["action"]) for e in events(url) if e["kind"] == "host"]
        assert hosts == [(f"{steady}/host", a) for a in ["trigger", "resolve"] * GENERATIONS]
        assert sink.counts["host_gone"] == sink.counts["host_forgotten"] == 1000 * GENERATIONS
    finally:
        sink.close()


def test_a_deregistered_agent_ends_its_checks_jobs_and_down_alerting(url):
    clock = Clock(T0)
    sink = alertsink.sink(url, clock, **QUICK, forget_after=HOUR)
    try:
        registry(url, clock, agents_of([WEB], ephemeral=False))
        sink.write([beat(), result(2, clock.advance(1))])
        assert alertsink.told(url) == ["trigger"] and scheduled(url) == {WEB}
        late = msg("HEARTBEAT", interval=1.0, ts=clock() - 0.5)    # sent before it left...
        leave = msg("DEREGISTER", reason="stop", ts=clock())
        registry(url, clock, [leave])
        sink.write([leave])
        assert scheduled(url) == set() and rows(url, "plugins") == []
        assert [r["gone"] for r in rows(url, "agents")] == [leave.message.ts]
        assert alertsink.told(url) == ["trigger", "resolve"]      # closed: pages nobody
        (closed,) = [e for e in events(url) if e["action"] == "resolve"]
        assert closed["severity"] == "ok" and "deregistered" in closed["summary"]
        assert rows(url, "check_state") == rows(url, "checks") == []
        assert rows(url, "notified_problems") == []
        clock.advance(1)
        sink.write([late])                              # ...relayed after: ignored
        registry(url, clock, [msg("HELLO", hostname="web-1", heartbeat=1.0,
                                  ts=leave.message.ts - 1)])
        assert [r["gone"] for r in rows(url, "agents")] == [leave.message.ts]
        for _ in range(3):
            clock.advance(30)
            sink.tick()
        assert [e["kind"] for e in events(url)] == ["check", "check"]    # no DOWN
        assert sink.counts["heartbeat_after_deregister"] == 1
        clock.advance(HOUR)
        sink.tick()
        for table in ("agents", "plugins", "host_state", "check_state", "check_freshness"):
            assert rows(url, table) == [], table
    finally:
        sink.close()


def test_a_deregister_dated_in_the_future_decides_no_gone_for_long(url):
    """Issue 31: a DEREGISTER's ``ts`` is the sender's clock; the sinks bound it by theirs.
    One dated in year 9999 leaves the agent GONE only until its next HELLO (the registry)
    and heartbeat (the alerting sink): then it is timed again, DOWN when silent."""
    clock = Clock(T0)
    sink = alertsink.sink(url, clock, **QUICK)
    try:
        registry(url, clock, agents_of([WEB], ephemeral=False))
        sink.write([msg("HEARTBEAT", interval=1.0, ts=clock())])
        forged = msg("DEREGISTER", reason="forged", ts=253402300799.0)
        registry(url, clock, [forged])
        sink.write([forged])
        assert [r["gone"] for r in rows(url, "agents")] == [T0]
        clock.advance(1)
        registry(url, clock, [msg("HELLO", hostname="web-1", heartbeat=1.0, ts=clock())])
        sink.write([msg("HEARTBEAT", interval=1.0, ts=clock())])
        assert [(r["hostname"], r["gone"]) for r in rows(url, "agents")] == [("web-1", None)]
        assert [(r["up"], r["gone"]) for r in rows(url, "host_state")] == [(True, None)]
        assert sink.counts["heartbeat_after_deregister"] == 0
        clock.advance(11)
        sink.tick()
        assert alertsink.told(url, f"{WEB}/host") == ["trigger"]
    finally:
        sink.close()


def test_an_agent_back_after_deregistering_is_a_new_one(url):
    clock = Clock(T0)
    sink = alertsink.sink(url, clock, **QUICK)
    try:
        registry(url, clock, agents_of([WEB], ephemeral=False))
        sink.write([beat()])
        leave = msg("DEREGISTER")
        registry(url, clock, [leave])
        sink.write([leave])
        clock.advance(5)
        registry(url, clock, agents_of([WEB], ephemeral=False))   # restarted
        sink.write([beat()])
        assert [r["gone"] for r in rows(url, "agents")] == [None]
        assert [(r["up"], r["gone"]) for r in rows(url, "host_state")] == [(True, None)]
        assert scheduled(url) == {WEB} and events(url) == []
        clock.advance(11)
        sink.tick()                                     # and pages when it goes silent
        assert alertsink.told(url, f"{WEB}/host") == ["trigger"]
    finally:
        sink.close()


def test_forget_by_hand(url, fleet):
    fleet.state_url = url
    op = fleet.operator_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])
    clock = Clock(T0)
    twins = {"b1" * 16: "twin", "b2" * 16: "TWIN"}
    alertsink.hello(url, {WEB: "web-1", **twins}, clock, plugins=["load"])
    sink = alertsink.sink(url, clock, **QUICK)
    try:
        sink.write([beat(u) for u in (WEB, *twins)])
    finally:
        sink.close()
    code, out = forget(op, clock, "twin")
    assert code == 1 and out == ""
    assert forget(op, clock, "nobody")[0] == 1
    code, out = forget(op, clock, "web-1", "--json")
    assert code == 0
    assert json.loads(out) == {"uuid": WEB, "hostname": "web-1", "last_heard": T0, "removed": {
        "agent_routers": 1, "plugins": 1, "host_state": 1, "agents": 1}}
    code, out = forget(op, clock, "b1" * 16)
    assert code == 0 and out.startswith(f"forgot twin [{'b1' * 16}]: agent_routers 1")
    assert [r["uuid"] for r in rows(url, "agents")] == ["b2" * 16]


# ---------------------------------------------------------------- real processes

def jobs_line(scheduler) -> str:
    """The running scheduler's latest ``jobs: N (...)`` log line."""
    lines = [line for line in scheduler.log().splitlines() if "jobs: " in line]
    return lines[-1] if lines else ""


def test_agents_that_leave_page_nobody_and_get_no_runs_end_to_end(fleet):
    pager = HttpReceiver().start()
    try:
        folder = fleet.root / "plugins"
        folder.mkdir()
        (folder / "check_ok").write_text("#!/bin/sh\necho OK\n")
        (folder / "check_ok").chmod(0o755)
        router = fleet.router()
        fleet.sink("registry", [router])
        # host_timeout: the oneshot agent is stopped, then deregistered by a second command,
        # which must start and reach the sinks within it (8 s was too short on a loaded
        # machine: it was paged DOWN once)
        fleet.sink("alerting", [router], alerting={
            "host_timeout": 15, "tick_interval": 0.2, "forget_after": 2,
            "delivery": {"channels": {"pager": {"type": "webhook", "url": pager.url,
                                               "timeout": 2}},
                         "rules": [{"channels": ["pager"]}],
                         "retry": {"initial": 0.05, "max": 0.2}, "poll_interval": 0.1}})
        checks = {"dirs": [str(folder)], "checks": [
            {"name": "check_ok", "command": "check_ok", "interval": 1, "timeout": 5}]}
        agents = {
            "leaver": fleet.agent([router], "leaver", plugins=checks,
                                  deregister_on_stop=True, deregister_timeout=20),
            "oneshot": fleet.agent([router], "oneshot", plugins=checks),
            "ephemeral": fleet.agent([router], "ephemeral", plugins=checks, ephemeral=True),
            "steady": fleet.agent([router], "steady", plugins=checks)}
        op = fleet.operator_config([router])
        scheduler = fleet.scheduler([router])

        def ran():
            return {c["hostname"] for c in fleet.status(op)["checks"] if c["last_run"]}
        wait_for(lambda: ran() == {f"{n}-host" for n in agents}, 60, 0.3, "every check run")
        assert agents["leaver"].stop(30) == 0
        assert "deregistration acknowledged by registry and alerting" in \
            agents["leaver"].log()
        agents["oneshot"].stop()
        res = fleet.cli("agent", "--deregister", "--config", str(fleet.root / "oneshot.yaml"))
        assert res.stdout.startswith("deregistered ") and "registry and alerting" in res.stdout
        agents["ephemeral"].signal(signal.SIGKILL)
        agents["steady"].signal(signal.SIGKILL)

        def keys(action="trigger"):
            return {p["dedup_key"] for p in list(pager.posts) if p["event_action"] == action}
        (down,) = wait_for(keys, 60, 0.2, "the steady agent paged DOWN")
        hosts = {a["hostname"]: a for a in fleet.status(op)["agents"]}
        assert down == f"{hosts['steady-host']['uuid']}/host"

        def left():
            return {a["hostname"] for a in fleet.status(op)["agents"]}
        wait_for(lambda: left() == {"steady-host"}, 30, 0.3, "the others gone from status")
        assert fleet.db_rows("SELECT hostname FROM agents") == [("steady-host",)]
        assert fleet.db_rows("SELECT DISTINCT uuid FROM plugins") == \
            [(hosts["steady-host"]["uuid"],)]
        wait_for(lambda: "jobs: 1 (" in jobs_line(scheduler), 30, 0.2,
                 "the running scheduler down to the steady agent's job")
        jobs = fleet.cli("scheduler", "--list", "--config",
                         str(fleet.root / "scheduler.yaml")).stdout
        assert "steady-host" in jobs and "leaver-host" not in jobs \
            and "ephemeral-host" not in jobs and "oneshot-host" not in jobs
        assert keys() == {down}                         # nobody else was paged
    finally:
        pager.stop()


def test_deregister_says_in_one_line_when_it_cannot(fleet):
    from support.fleet import agent_uuid_for
    nowhere = [{"endpoints": {"agents": "tcp://127.0.0.1:9"}}]
    path = fleet.agent_config(nowhere, "lonely", deregister_timeout=1)
    res = fleet.cli("agent", "--deregister", "--config", str(path), check=False)
    assert res.returncode == 73 and res.stderr.count("\n") == 1
    assert "never ran" in res.stderr
    uuid = agent_uuid_for(fleet, "lonely")
    res = fleet.cli("agent", "--deregister", "--config", str(path), check=False)
    assert res.returncode == 75 and res.stdout == ""
    assert res.stderr == (f"fleetwatch agent: deregistration of {uuid} (lonely-host) not "
                          f"acknowledged by registry and alerting (no router answered) "
                          f"within 1s\n")


def test_an_agent_whose_intake_cannot_be_bound_says_so_and_exits(fleet):
    """Its intake's address taken (another process bound it): one line and exit 73, at
    once; not a process hanging forever in its ZeroMQ context's term() with nothing logged
    (the failed socket was left open), which is what a demo in a deep directory met."""
    import socket
    import time
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        endpoint = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        nowhere = [{"endpoints": {"agents": "tcp://127.0.0.1:9"}}]
        path = fleet.agent_config(nowhere, "blocked", intake=endpoint)
        started = time.monotonic()
        res = fleet.cli("agent", "--config", str(path), check=False, timeout=20)
        assert res.returncode == 73, res
        assert res.stderr.endswith(f"cannot bind the intake {endpoint}: Address already in "
                                   f"use\n"), res.stderr
        assert time.monotonic() - started < 15
    finally:
        taken.close()
