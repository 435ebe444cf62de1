"""Alert evaluation in the alerting sink, on SQLite and on PostgreSQL.

First the sink objects on a real database, two at once (threads, each its own engine) and a
fake clock where time matters: one alert per transition whoever evaluates it, NOTIFY
duplicates, silences (made with the real ``fleetwatch silence`` command), a plugin's own
``max_check_attempts``, hosts gone silent versus a router that lost them. Then real
processes: two routers and two alerting sinks under a stream of results sent twice (once
through each router), and a real agent whose router dies (no alert) and which then stops
(one DOWN) and comes back (one UP).
"""

from __future__ import annotations

import json
import re
import time

import pytest
import zmq

from support.clock import Clock
from support.fleet import wait_for
from support.zmqio import recv
from support.threads import in_threads
from fleetwatch import protocol
from fleetwatch.config import build
from fleetwatch.protocol import Relayed

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from fleetwatch.store import db, schema  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402
from sinks.alerting.config import AlertingConfig  # noqa: E402
from sinks.registry import RegistrySink  # noqa: E402

WEB, DB = "a1" * 16, "b2" * 16
T0 = 1_700_000_000.0


def sink(url, clock=time.time, **settings) -> AlertingSink:
    s = AlertingSink(db.engine(url), clock, build(AlertingConfig, {
        "renotify_interval": 0, **settings}), deliver=False)
    s.start()
    return s


def msg(type_, uuid=WEB, router="r1", **fields) -> Relayed:
    return Relayed(uuid, router, protocol.make(type_, uuid, **fields))


def result(plugin, status, started, uuid=WEB, router="r1") -> Relayed:
    return msg("RESULT", uuid, router, command_id=f"s:{plugin[:8]}{int(started * 10)}",
               plugin=plugin, status=status, output=f"{plugin} status {status}",
               started=started)


def events(url, **where) -> list[tuple]:
    """(key, action, severity) of every alert event, in order."""
    from sinks.alerting.delivery import store as outbox
    eng = db.engine(url, writer=False)
    try:
        with eng.connect() as conn:
            stmt = outbox.alert_events.select().order_by(outbox.alert_events.c.id)
            for k, v in where.items():
                stmt = stmt.where(outbox.alert_events.c[k] == v)
            return [(r.key, r.action, r.severity) for r in conn.execute(stmt)]
    finally:
        eng.dispose()


def rows(url, table) -> list[dict]:
    eng = db.engine(url, writer=False)
    try:
        with eng.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(schema.metadata.tables[table].select())]
    finally:
        eng.dispose()


def hello(url, uuid=WEB, hostname="web-1", plugins=None):
    registry = RegistrySink(db.engine(url))
    registry.start()
    batch = [msg("HELLO", uuid, hostname=hostname, heartbeat=1.0)]
    if plugins:
        batch.append(msg("REGISTER", uuid, name="agent", plugins=plugins))
    registry.write(batch)
    registry.close()


# ---------------------------------------------------------------- sink objects, shared state

#: per check: CRITICAL HARD at the 3rd, recovery, WARNING HARD at the 3rd, recovery
STREAM = [0, 2, 2, 2, 2, 0, 0, 1, 1, 1, 0, 0]
EXPECTED = [("trigger", "critical"), ("resolve", "ok"), ("trigger", "warning"),
            ("resolve", "ok")]


def test_two_sinks_evaluating_the_same_results_alert_once_per_transition(url):
    a, b = sink(url), sink(url)
    checks = [(uuid, p) for uuid in (WEB, DB) for p in ("load", "disk", "swap")]
    # one result per transaction: many chances for the two sinks to collide
    batches = [[result(p, s, 100.0 + i, uuid)] for i, s in enumerate(STREAM)
               for uuid, p in checks]
    try:
        for _ in range(2):   # twice: the second round is all duplicates and changes nothing
            in_threads(lambda: [a.write(x) for x in batches],
                       lambda: [b.write(x) for x in batches])
    finally:
        a.close()
        b.close()
    got = events(url)
    for uuid, plugin in checks:
        key = f"{uuid}/check/{plugin}"
        assert [(act, sev) for k, act, sev in got if k == key] == EXPECTED, key
    assert len(got) == len(checks) * len(EXPECTED)
    assert a.counts["result_recorded"] + b.counts["result_recorded"] == len(STREAM) * len(checks)
    states = {(r["uuid"], r["plugin"]): r for r in rows(url, "check_state")}
    assert all(s["last_result"] == 100.0 + len(STREAM) - 1 and s["hard"] and s["status"] == 0
               for s in states.values())


def test_a_notify_resent_to_both_sinks_alerts_once(url):
    a, b = sink(url), sink(url)
    notes = [msg("NOTIFY", severity="critical", text=f"disk {i} on fire\ndetails",
                 source="backup") for i in range(30)]
    try:
        in_threads(lambda: a.write(notes), lambda: b.write(list(reversed(notes))))
        a.write(notes[:5])
    finally:
        a.close()
        b.close()
    got = events(url)
    assert sorted(k for k, _, _ in got) == sorted(f"{WEB}/notify/{n.message.msg_id}"
                                                  for n in notes)
    assert {(act, sev) for _, act, sev in got} == {("trigger", "critical")}
    recorded = a.counts["notify_recorded"] + b.counts["notify_recorded"]
    assert recorded == 30 and a.counts["notify_already_recorded"] >= 5


def test_a_batch_of_notifications_costs_a_few_statements_not_a_few_each(url):
    """bench/notify_rtt.py (issue 31, item 14): each NOTIFY was an insert of its row, one of
    its alert and one of its outbox rows, one at a time: the sink's CPU per NOTIFY. A batch's
    are now written a few statements for all; what a user sees is the same: one alert per new
    notification, in msg_id order, routed to its channels; none for a duplicate in the
    batch or one already recorded."""
    from sqlalchemy import event as sqlevent
    s = sink(url, delivery={"channels": {
        "pager": {"type": "webhook", "url": "http://127.0.0.1:1/", "timeout": 5},
        "mail": {"type": "email", "to": ["ops@example.org"], "timeout": 5}},
        "rules": [{"severity": ["critical"], "channels": ["pager", "mail"]},
                  {"severity": ["warning"], "channels": ["mail"]}]})
    statements: list[str] = []
    sqlevent.listen(s.engine, "before_cursor_execute",
                    lambda conn, cur, stmt, *rest: statements.append(stmt))

    def write(batch) -> int:
        statements.clear()
        s.write(batch)
        return len(statements)

    def note(i, severity="critical"):
        return msg("NOTIFY", severity=severity, text=f"disk {i} full", source="disk")
    first = [note(0, "warning")]
    old = [note(i) for i in range(1, 6)]
    new = [note(i, "warning" if i % 2 else "critical") for i in range(6, 46)]
    try:
        write(first)            # (warm: the tables' first use, the hostname looked up)
        write(old)
        one = write([note(99)])
        many = write(old + new + new[:3])   # 5 recorded already, 3 twice in the batch
    finally:
        s.close()
    # 45 rows to insert: 32 + 8 + 4 + 1 (db.insert_fresh), one insert of their 40 alerts
    assert many <= one + 4, (one, many)
    assert s.counts["notify_recorded"] == 1 + 5 + 1 + 40
    assert s.counts["notify_already_recorded"] == 5 + 3
    notified = sorted(new, key=lambda r: r.message.msg_id)
    got = [(k, sev) for k, _, sev in events(url)]
    assert got[-40:] == [(f"{WEB}/notify/{r.message.msg_id}", r.message.body["severity"])
                         for r in notified]
    assert len(got) == 1 + 5 + 1 + 40
    ids = {r["id"]: r["key"] for r in rows(url, "alert_events")}
    routed = [(ids[r["event_id"]], r["channel"]) for r in
              sorted(rows(url, "outbox"), key=lambda r: r["id"])][-60:]
    assert routed == [(f"{WEB}/notify/{r.message.msg_id}", c) for r in notified
                      for c in (("pager", "mail") if r.message.body["severity"] == "critical"
                                else ("mail",))]


def test_a_plugin_declared_max_check_attempts_wins(url):
    hello(url, plugins=[{"name": "load", "interval": 60, "max_check_attempts": 1},
                        {"name": "disk", "interval": 60}])
    s = sink(url)
    try:
        s.write([result("load", 2, 100.0), result("disk", 2, 100.0)])
        s.write([result("disk", 2, 101.0)])
    finally:
        s.close()
    assert events(url) == [(f"{WEB}/check/load", "trigger", "critical")]
    state = {r["plugin"]: r for r in rows(url, "check_state")}
    assert state["load"]["max_attempts"] == 1 and state["disk"]["max_attempts"] == 3
    assert not state["disk"]["hard"] and state["disk"]["attempt"] == 2


def test_reminders_while_a_problem_lasts(url):
    clock = Clock()
    s = sink(url, clock, renotify_interval=600)
    try:
        for i in range(10):         # a result every 5 minutes, CRITICAL all along
            clock.now = T0 + 300 * i
            s.write([result("load", 2, clock.now)])
    finally:
        s.close()
    assert [a for _, a, _ in events(url)] == ["trigger"] * 4   # HARD at 2, then 4, 6, 8


def test_silence_mutes_alerts_and_the_truth_comes_out_when_it_ends(url, fleet):
    hello(url)
    fleet.state_url = url
    op = fleet.operator_config([{"endpoints": {"control": "tcp://127.0.0.1:9"}}])
    s = sink(url, max_check_attempts=1)
    try:
        out = fleet.cli("silence", "WEB-*", "lo*", "--for", "2h", "--reason", "upgrade",
                        "--force", "--config", str(op)).stdout     # (before its checks ran)
        silence_id = int(re.match(r"silence (\d+): WEB-\* lo\* until ", out).group(1))
        s.write([result("load", 2, 100.0), result("disk", 2, 100.0)])
        s.write([result("load", 2, 101.0)])          # raised again, recorded once
        assert events(url) == [(f"{WEB}/check/disk", "trigger", "critical")]
        (muted,) = rows(url, "suppressed")
        assert muted["silence_id"] == silence_id and muted["key"] == f"{WEB}/check/load"
        listed = json.loads(fleet.cli("silences", "--json", "--config", str(op)).stdout)
        assert [(x["id"], x["suppressed"], x["active"]) for x in listed["silences"]] == [
            (silence_id, 1, True)]
        fleet.cli("silences", "--remove", str(silence_id), "--config", str(op))
        s.write([result("load", 2, 102.0)])          # still CRITICAL: told now
        s.write([result("load", 0, 103.0)])
    finally:
        s.close()
    assert events(url, key=f"{WEB}/check/load") == [
        (f"{WEB}/check/load", "trigger", "critical"), (f"{WEB}/check/load", "resolve", "ok")]
    assert fleet.cli("silences", "--json", "--config", str(op)).stdout.count('"id"') == 0


def test_a_host_lost_by_one_router_is_no_alert_and_silent_on_all_is_one_down(url):
    clock = Clock()
    a, b = sink(url, clock), sink(url, clock)
    beat = lambda router: msg("HEARTBEAT", WEB, router, interval=1.0)  # noqa: E731
    try:
        for i in range(20):                # both routers, spread over both sinks
            clock.now = T0 + i
            (a if i % 2 else b).write([beat("r1"), beat("r2")])
            a.tick()
            b.tick()
        for i in range(20, 40):            # r1 lost it; r2 still relays it
            clock.now = T0 + i
            (a if i % 2 else b).write([beat("r2")])
            a.tick()
            b.tick()
        assert events(url) == []
        assert a.counts["host_router_lost"] + b.counts["host_router_lost"] == 1
        for i in range(40, 80):            # the agent stops: both sinks tick
            clock.now = T0 + i
            in_threads(a.tick, b.tick)
        clock.now = T0 + 80
        b.write([beat("r1")])
        a.tick()
        b.tick()
    finally:
        a.close()
        b.close()
    assert events(url) == [(f"{WEB}/host", "trigger", "critical"),
                           (f"{WEB}/host", "resolve", "ok")]
    (host,) = rows(url, "host_state")
    assert host["up"] and host["routers"] == {"r1": T0 + 80}


def test_a_new_sink_waits_one_timeout_before_calling_hosts_down(url):
    clock = Clock()
    s = sink(url, clock)
    s.write([msg("HEARTBEAT", interval=1.0)])
    s.close()
    clock.now += 3600                      # no alerting sink ran for an hour
    late = sink(url, clock)
    try:
        late.tick()
        late.write([msg("HEARTBEAT", interval=1.0)])     # the host was fine all along
        clock.now += 5
        late.tick()
        assert events(url) == []
        clock.now += 11
        late.tick()
    finally:
        late.close()
    assert events(url) == [(f"{WEB}/host", "trigger", "critical")]


def test_the_alert_commits_with_the_state_or_not_at_all(tmp_path):
    """enqueue runs in the write's transaction: if it fails, the NOTIFY is not recorded (so
    not ACKed, and resent) and the check state does not move."""
    from sqlalchemy.exc import OperationalError
    from sinks.base import WriteError
    url = f"sqlite:///{tmp_path / 'state.db'}"
    sent: list[dict] = []

    def failing(conn, event, rules):
        raise OperationalError("INSERT INTO outbox", {}, Exception("disk full"))

    def fake(conn, event, rules):
        sent.append(event)
        return []
    s = AlertingSink(db.engine(url), config=build(AlertingConfig, {"max_check_attempts": 1}),
                     enqueue=failing, deliver=False)
    s.start()
    note = msg("NOTIFY", severity="warning", text="almost full", source="disk-watch")
    with pytest.raises(WriteError, match="disk full"):
        s.write([note, result("load", 2, 100.0)])
    assert rows(url, "notifications") == [] and rows(url, "check_state") == []
    s._enqueue = fake
    s.write([note, result("load", 2, 100.0)])
    s.close()
    assert [(e["kind"], e["action"], e["severity"]) for e in sent] == [
        ("notify", "trigger", "warning"), ("check", "trigger", "critical")]
    fields = {"key", "kind", "action", "severity", "uuid", "hostname", "check", "status",
              "summary", "text", "created"}
    assert all(fields <= set(e) for e in sent)
    assert sent[0]["key"] == f"{WEB}/notify/{note.message.msg_id}"
    assert sent[0]["source"] == "disk-watch" and sent[0]["check"] is None
    assert sent[1]["key"] == f"{WEB}/check/load" and sent[1]["status"] == 2
    assert sent[1]["summary"] == "load status 2" and sent[1]["check"] == "load"


# ---------------------------------------------------------------- real processes

def agent_socket(ctx, router: dict, uuid: str, hostname: str) -> zmq.Socket:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(router["endpoints"]["agents"])
    sock.send_multipart(protocol.encode(protocol.make("HELLO", uuid, hostname=hostname,
                                                      heartbeat=5.0, role="agent")))
    assert protocol.decode(recv(sock)).type == "WELCOME"
    return sock


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_two_alerting_sinks_and_two_routers_under_a_stream_of_results(fleet, zctx, backend,
                                                                       request):
    if backend == "postgresql":
        pytest.importorskip("psycopg")
        fleet.state_url = request.getfixturevalue("pg_url")
    url = fleet.state_url
    routers = {name: fleet.router(name) for name in ("router-1", "router-2")}
    sinks = [fleet.sink("alerting", list(routers.values()), name=f"alerting-{i}",
                        stats_interval=0.5, alerting={"renotify_interval": 0})
             for i in (1, 2)]
    wait_for(lambda: all(f"router {name} at" in s.log() for s in sinks for name in routers),
             20, what="both sinks welcomed by both routers")
    agents = {uuid: [agent_socket(zctx, r, uuid, host) for r in routers.values()]
              for uuid, host in ((WEB, "web-1"), (DB, "db-1"))}
    checks = [(uuid, p) for uuid in agents for p in ("load", "disk", "swap")]

    def applied(step_started):
        have = {(r["uuid"], r["plugin"]): r["last_result"] for r in rows(url, "check_state")}
        return all(have.get(c) == step_started for c in checks)

    # A NOTIFY through both routers (a resend that took the other router): one alert.
    note = protocol.make("NOTIFY", WEB, severity="error", text="through both routers")
    for sock in agents[WEB]:
        sock.send_multipart(protocol.encode(note))
    for i, status in enumerate(STREAM):
        started = 1000.0 + i
        for uuid, plugin in checks:
            res = protocol.make("RESULT", uuid, command_id=f"s:{plugin}{i}", plugin=plugin,
                                status=status, output=f"{plugin} is {status}", started=started)
            for sock in agents[uuid]:            # every result through both routers
                sock.send_multipart(protocol.encode(res))
        wait_for(lambda: applied(started), 20, what=f"step {i} applied to every check")
    got = events(url)
    for uuid, plugin in checks:
        key = f"{uuid}/check/{plugin}"
        assert [(a, s) for k, a, s in got if k == key] == EXPECTED, key
    assert [e for e in got if "/notify/" in e[0]] == [
        (f"{WEB}/notify/{note.msg_id}", "trigger", "error")]
    assert len(got) == len(checks) * len(EXPECTED) + 1
    acks = []
    for sock in agents[WEB]:
        while sock.poll(2000 if not acks else 200):
            reply = protocol.decode(sock.recv_multipart())
            if reply.type == "ACK":
                acks.extend(reply.get("msg_ids"))
    assert acks.count(note.msg_id) == 2, "each copy is ACKed through its router"
    for s in sinks:                         # both sinks took part
        wait_for(lambda: re.search(r"alerting\.result=\d+", s.log()), 10,
                 what="a sink's result counter")


def test_a_real_agent_lost_by_a_router_then_stopped_then_back(fleet):
    r1, r2 = fleet.router("router-1"), fleet.router("router-2")
    alerting = {"host_timeout_min": 2.0, "tick_interval": 0.1}
    sinks = [fleet.sink("alerting", [r1, r2], name=f"alerting-{i}", stats_interval=0.5,
                        alerting=alerting) for i in (1, 2)]
    fleet.sink("registry", [r1, r2], name="registry")
    wait_for(lambda: all(f"router {n} at" in s.log() for s in sinks
                         for n in ("router-1", "router-2")), 20, what="sinks welcomed")
    agent = fleet.agent([r1, r2], heartbeat_interval=0.2)

    def hosts():
        return {r["name"]: r for r in rows(fleet.state_url, "host_state")}

    def routers_heard():
        host = hosts().get("")
        return host and set(host["routers"])
    wait_for(lambda: routers_heard() == {"router-1", "router-2"}, 20,
             what="heartbeats through both routers")
    r1["proc"].kill()                                    # router-1 dies: it lost the agent
    wait_for(lambda: routers_heard() == {"router-2"}, 20, what="router-1 dropped")
    lost = lambda: sum(int(n) for s in sinks  # noqa: E731
                       for n in re.findall(r"alerting\.host_router_lost=(\d+)", s.log())[-1:])
    wait_for(lambda: lost() >= 1, 10, what="the lost router counted")
    assert events(fleet.state_url) == []
    agent.stop()                                         # the agent stops: DOWN, once
    wait_for(lambda: events(fleet.state_url), 20, what="the DOWN alert")
    uuid = hosts()[""]["uuid"]
    op = fleet.operator_config([r2])
    status = json.loads(fleet.cli("status", "--config", str(op), "--json").stdout)
    (entry,) = [a for a in status["agents"] if a["uuid"] == uuid]
    assert entry["state"] == "DOWN" and entry["hostname"] == "agent-host"
    agent = fleet.agent([r2], heartbeat_interval=0.2)   # back, same uuid: UP, once
    wait_for(lambda: len(events(fleet.state_url)) == 2, 20, what="the UP alert")
    wait_for(lambda: hosts()[""]["up"] and not hosts()[""]["pending"], 10, what="UP recorded")
    assert events(fleet.state_url) == [(f"{uuid}/host", "trigger", "critical"),
                                       (f"{uuid}/host", "resolve", "ok")]
    (host,) = rows(fleet.state_url, "host_state")
    assert host["routers"].keys() == {"router-2"}
    text = fleet.cli("status", "--config", str(op)).stdout
    assert re.search(r"agent-host\s+\S+\s+yes\s+UP", text), text
