"""What the operator commands show of what senders wrote, with a real fleet.

A real fleet (router, registry and alerting sinks, agent) takes hostile input from a local
process on the agent's intake: a NOTIFY whose ``ts`` is far from now, notification text and
heartbeat names with terminal escapes (set-title, clear-screen, CR, a LF forging a row).
``fleetwatch alerts`` and ``status`` run as a user runs them (subprocesses): their tables show
every control character visibly, ``--json`` gives the exact text, and nothing crashes, even
on a time recorded before the codec refused such values.
"""

from __future__ import annotations

import json
import sqlite3

import pytest
import zmq

from fleetwatch import protocol
from support.clock import Clock
from support.fakerouter import relayed
from support.fleet import wait_for
from support.zmqio import recv

pytest.importorskip("sqlalchemy")

from fleetwatch.store import db  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402

TITLE = "\x1b]0;pwned\x07"
CLEAR = "\x1b[2J"
FORGED = "ok\rfine\n2026-01-01 00:00:00 UTC  critical  db-1  forged"
HOSTILE = f"{TITLE}{CLEAR}disk {FORGED}"


def send(sock: zmq.Socket, msg: protocol.Message) -> protocol.Message:
    """Hand the agent's intake ``msg``; its reply (ACK or ERROR)."""
    sock.send_multipart(protocol.encode(msg))
    return protocol.decode(recv(sock, 10.0))


@pytest.fixture
def hostile_fleet(fleet, zctx):
    router = fleet.router()
    fleet.sink("registry", [router])
    fleet.sink("alerting", [router])
    fleet.agent([router])
    intake = fleet.root / "agent-state" / "intake.sock"
    wait_for(intake.exists, 15, what="the agent's intake")
    sock = zctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(f"ipc://{intake}")
    yield fleet, sock, str(fleet.operator_config([router]))
    sock.close(0)


@pytest.mark.timeout(90)
def test_hostile_text_and_far_times_reach_no_terminal(hostile_fleet):
    fleet, sock, op = hostile_fleet
    # heartbeats are not spooled: send them once the alerting sink hears the agent's own
    wait_for(lambda: fleet.db_rows("SELECT 1 FROM host_state WHERE name = ''"), 20,
             what="the alerting sink hearing the agent")
    far = protocol.make("NOTIFY", "local", clock=lambda: 1e15, severity="error", text="far")
    reply = send(sock, far)
    assert reply.type == "ERROR" and reply.get("status") == 400, reply
    assert "ts" in reply.get("reason")
    assert send(sock, protocol.make("NOTIFY", "local", severity="critical",
                                    text=HOSTILE)).type == "ACK"
    assert send(sock, protocol.make("HEARTBEAT", "local", name=f"{CLEAR}backup\nx",
                                    interval=60.0)).type == "ACK"
    wait_for(lambda: fleet.db_rows("SELECT 1 FROM notifications") and
             fleet.db_rows("SELECT 1 FROM host_state WHERE name != ''"), 20,
             what="the notification and the heartbeat recorded")
    assert fleet.db_rows("SELECT text FROM notifications") == [(HOSTILE,)]

    # a time recorded before the codec refused it (an older database): shown, not fatal
    conn = sqlite3.connect(fleet.root / "state.db")
    with conn:
        conn.execute("INSERT INTO notifications (msg_id, uuid, hostname, severity, text, "
                     "source, sent_at, received_at, router) VALUES ('old', 'u', 'h', 'info', "
                     "'legacy', NULL, 1e15, 1e15, 'router-1')")
    conn.close()

    listed = json.loads(fleet.cli("alerts", "--config", op, "--json").stdout)
    assert [a["text"] for a in listed["alerts"]] == ["legacy", HOSTILE]
    assert listed["total"] == 2 and listed["truncated"] is False
    assert listed["alerts"][0]["sent_at"] == repr(1e15)        # the number, as text
    table_text = fleet.cli("alerts", "--config", op).stdout
    assert not set(table_text) & {"\x1b", "\r", "\x07"}
    assert len(table_text.splitlines()) == 3, table_text
    # (the table shows a text's words on one line: CR and LF are spaces there)
    assert "\\x1b]0;pwned\\x07\\x1b[2Jdisk ok fine 2026-01-01" in table_text
    assert "out of range" in table_text.splitlines()[1]

    status = fleet.cli("status", "--config", op)
    assert "\x1b" not in status.stdout and "\\x1b[2Jbackup\\nx" in status.stdout
    processes = json.loads(fleet.cli("status", "--config", op, "--json").stdout)
    names = [p["name"] for a in processes["agents"] for p in a.get("processes", [])]
    assert names == [f"{CLEAR}backup\nx"]
    assert all(proc.alive() for proc in fleet.procs), "a daemon died of its input"


@pytest.mark.timeout(60)
def test_alerts_json_says_it_is_truncated_and_limit_0_is_all(fleet):
    clock = Clock(1_700_000_000.0)
    sink = AlertingSink(db.engine(fleet.state_url), clock=clock)
    sink.start()
    for n in range(60):
        clock.advance(1)
        sink.write([protocol.decode_relayed(relayed("NOTIFY", "a" * 32, severity="info",
                                                    text=f"n{n}")[1])])
    sink.close()
    op = str(fleet.write("fleetwatch.yaml", {"routers": ["tcp://127.0.0.1:9"],
                                             "state_url": fleet.state_url}))
    out = json.loads(fleet.cli("alerts", "--config", op, "--json").stdout)
    assert (len(out["alerts"]), out["total"], out["truncated"]) == (50, 60, True)
    assert out["alerts"][0]["text"] == "n59"
    out = json.loads(fleet.cli("alerts", "--config", op, "--json", "--limit", "0").stdout)
    assert (len(out["alerts"]), out["total"], out["truncated"]) == (60, 60, False)
    out = json.loads(fleet.cli("alerts", "--config", op, "--json", "--limit", "60").stdout)
    assert (len(out["alerts"]), out["truncated"]) == (60, False)
    res = fleet.cli("alerts", "--config", op, "--limit", "5")
    assert len(res.stdout.splitlines()) == 6 and "5 of 60" in res.stderr
