"""Devices as hosts of the fleet, end to end with real processes: a real Net-SNMP daemon
(the stand-in switch, tests/support/snmpd.py), routers, the registry and alerting sinks,
the graphite sink with a real carbon-cache, the scheduler, a webhook receiver, real traps
(Net-SNMP's ``snmptrap``), and an agent that polls the switch as its device.

What a user checks: the device is a host in ``fleetwatch status --json`` (UP, under its
own name and uuid ``POLLER@NAME``, its poller's hostname as its parent) with its ``snmp``
and ``if_NODE`` checks and a synthetic check the scheduler runs; its interface series reach
Graphite under its name; snmpd stopped makes it DOWN; the poller killed makes it
UNREACHABLE while the poller is DOWN, one page; a linkDown trap pages for its interface at
once and is one notification though a router is killed as it comes.
"""

from __future__ import annotations

import json
import signal

import pytest

from support.channelservers import HttpReceiver
from support.fleet import wait_for
from support.graphite import PREFIX, graphite_sink, points
from support.snmpd import COMMUNITY, free_udp_port
from support.snmptraps import LINK_DOWN, Sender, link_varbinds

pytest.importorskip("pysnmp")
pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(180)

SWITCH = "sw-test"


def community_file(fleet) -> str:
    secret = fleet.root / "community"
    secret.write_text(COMMUNITY + "\n")
    secret.chmod(0o600)
    return str(secret)


def devices(fleet, daemon, interval: float = 3, checks=(), **section) -> dict:
    """The agent's ``devices:`` section: the switch polled every ``interval`` seconds."""
    return {"hosts": [{"name": SWITCH, "address": "127.0.0.1", "interval": interval,
                       "timeout": 1, "retries": 1, "checks": list(checks),
                       "snmp": {"version": "2c", "port": daemon.port,
                                "community_file": community_file(fleet)}}],
            "heartbeat_interval": 0.3, **section}


def pager(url: str) -> dict:
    return {"channels": {"pager": {"type": "webhook", "url": url, "routing_key": "KEY"}},
            "rules": [{"channels": ["pager"]}], "retry": {"initial": 0.2, "max": 1},
            "poll_interval": 0.1}


def host_of(status: dict, name: str) -> dict | None:
    return next((a for a in status["agents"] if a.get("hostname") == name), None)


def checks_of(status: dict, uuid: str) -> dict[str, dict]:
    return {c["plugin"]: c for c in status["checks"] if c["uuid"] == uuid}


def test_a_polled_switch_is_a_host_with_its_checks_and_graphs_and_goes_down_with_snmpd(
        fleet, snmpd, carbon):
    router = fleet.router(sink_types=("registry", "alerting", "graphite"))
    fleet.sink("registry", [router])
    fleet.sink("alerting", [router], alerting={"tick_interval": 0.2, "max_check_attempts": 1,
                                               "host_timeout": 3})
    graphite_sink(fleet, [router], carbon.port)
    fleet.scheduler([router])
    tcp = {"type": "tcp", "port": int(router["endpoints"]["agents"].rsplit(":", 1)[1]),
           "interval": 1, "timeout": 5}
    fleet.agent([router], devices=devices(fleet, snmpd, checks=[tcp]))
    op = fleet.operator_config([router])

    def up():
        status = fleet.status(op, check=False)
        host = host_of(status, SWITCH)
        if host is None or host.get("state") != "UP":
            return None
        checks = checks_of(status, host["uuid"])
        judged = all(checks.get(n, {}).get("state", "PENDING") != "PENDING"
                     for n in ("snmp", "if_lo", "tcp"))
        return (host, checks) if judged else None

    host, checks = wait_for(up, 60, 0.2, "the switch UP with its checks")
    poller = host_of(fleet.status(op, check=False), "agent-host")
    assert host["uuid"] == f"{poller['uuid']}@{SWITCH}"
    (parents,), = fleet.db_rows("SELECT parents FROM agents WHERE uuid = ?", (host["uuid"],))
    assert json.loads(parents) == ["agent-host"]
    assert checks["snmp"]["state"] == "OK" and checks["snmp"]["output"].startswith("SNMP OK")
    assert checks["if_lo"]["state"] == "OK" and "up" in checks["if_lo"]["output"]
    assert checks["tcp"]["state"] == "OK"                  # run by the scheduler's RUNs
    jobs = json.loads(fleet.cli("scheduler", "--config", str(fleet.root / "scheduler.yaml"),
                                "--list", "--json").stdout)
    mine = {j["plugin"] for j in jobs["jobs"] if j["uuid"] == host["uuid"]}
    assert mine == {"tcp"}                                  # snmp and if_* are passive
    assert jobs["passive"] >= 2
    # its interface's traffic, in bit/s, under its own name (two polls make a rate)
    points(carbon, f"{PREFIX}.{SWITCH}.if.lo.in_bps", want=1, timeout=30)
    points(carbon, f"{PREFIX}.{SWITCH}.uptime_seconds", want=1, timeout=30)

    snmpd.stop()

    def down():
        status = fleet.status(op, check=False)
        host = host_of(status, SWITCH)
        return status if host and host.get("state") == "DOWN" else None

    status = wait_for(down, 40, 0.2, "the switch DOWN once snmpd stopped")
    assert host_of(status, "agent-host")["state"] == "UP"     # its poller is not


def test_the_poller_killed_makes_its_switch_unreachable_and_pages_once(fleet, snmpd):
    receiver = HttpReceiver().start()
    try:
        router = fleet.router(sink_types=("registry", "alerting"))
        fleet.sink("registry", [router])
        fleet.sink("alerting", [router], alerting={
            "tick_interval": 0.2, "host_timeout": 3, "delivery": pager(receiver.url)})
        agent = fleet.agent([router], devices=devices(fleet, snmpd))
        op = fleet.operator_config([router])

        def both_up():
            status = fleet.status(op, check=False)
            registered = fleet.db_rows("SELECT hostname, parents FROM agents")
            return all((host_of(status, n) or {}).get("state") == "UP"
                       for n in (SWITCH, "agent-host")) and \
                (SWITCH, '["agent-host"]') in registered and \
                "agent-host" in {name for name, _ in registered}
        # the switch's REGISTER (its parents) and the poller's: a parent the registry has
        # not heard of yet (its REGISTER resent later: the sink started after the agent) is
        # no parent, and its switch would be DOWN
        wait_for(both_up, 60, 0.2, "the poller and its switch UP, both registered")

        agent.signal(signal.SIGKILL)

        seen = {}

        def held():
            status = fleet.status(op, check=False)
            seen.update({n: (host_of(status, n) or {}).get("state")
                         for n in (SWITCH, "agent-host")})
            return status if seen == {SWITCH: "UNREACHABLE", "agent-host": "DOWN"} else None
        status = wait_for(held, 40, 0.2, lambda: f"the switch UNREACHABLE behind its DOWN "
                                                 f"poller (last seen: {seen})")
        assert host_of(status, SWITCH)["handled"]["unreachable"] == "agent-host"
        wait_for(lambda: receiver.posts, 15, 0.05, "the poller's page")
        wait_for(lambda: fleet.db_rows("SELECT count(*) FROM outbox WHERE state != 'sent'")
                 == [(0,)], 10, 0.05, "the page marked sent, nothing else queued")
        assert [(p["event_action"], p["payload"]["source"]) for p in receiver.posts] == [
            ("trigger", "agent-host")]
    finally:
        receiver.stop()


def test_a_link_down_trap_pages_for_the_interface_once_across_a_router_kill(
        fleet, snmpd, tmp_path):
    receiver = HttpReceiver().start()
    try:
        routers = [fleet.router(name, sink_types=("registry", "alerting"))
                   for name in ("router-1", "router-2")]
        fleet.sink("registry", routers)
        fleet.sink("alerting", routers, alerting={
            "tick_interval": 0.2, "host_timeout": 3, "max_check_attempts": 1,
            "delivery": pager(receiver.url)})
        port = free_udp_port()
        # polled every 60 s: only the trap can turn the interface CRITICAL in this test
        section = devices(fleet, snmpd, interval=60, traps={
            "listen": f"127.0.0.1:{port}", "communities_file": community_file(fleet)})
        fleet.agent(routers, devices=section)
        op = fleet.operator_config(routers)

        def polled():
            status = fleet.status(op, check=False)
            host = host_of(status, SWITCH)
            if host is None or host.get("state") != "UP":
                return None
            return host if "if_lo" in checks_of(status, host["uuid"]) else None
        device = wait_for(polled, 60, 0.2, "the switch UP, its interfaces polled")
        index = snmpd.bulkwalk("1.3.6.1.2.1.2.2.1.2")       # ifDescr: lo's ifIndex
        lo = next(int(oid.rsplit(".", 1)[1]) for oid, v in index.items() if "lo" in v)

        traps = Sender(tmp_path / "traps", port)
        spool = fleet.root / "agent-state" / "devices-spool.db"

        def spooled() -> int:
            import sqlite3
            conn = sqlite3.connect(spool)
            try:
                return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
            finally:
                conn.close()

        def paged(word: str) -> list[dict]:
            return [p for p in receiver.posts if p["payload"]["source"] == SWITCH
                    and word in p["payload"]["summary"]]

        def notified():
            return fleet.db_rows("SELECT severity, text FROM notifications WHERE uuid = ? "
                                 "ORDER BY received_at", (device["uuid"],))
        # the trap, both routers up: its interface's check at once (a RESULT: at most once,
        # so not sent across a kill), and its NOTIFY
        sent = traps.send(LINK_DOWN, link_varbinds(lo, 1, 2), community=COMMUNITY)
        assert sent.returncode == 0, sent.stderr
        pages = wait_for(lambda: paged("if_lo"), 20, 0.05, "the interface's page")
        assert pages[0]["event_action"] == "trigger"
        wait_for(lambda: paged("linkDown"), 20, 0.05, "the trap's notification's page")
        wait_for(lambda: spooled() == 0, 20, 0.1, "the trap's NOTIFY acknowledged")
        # another as a router is killed: its NOTIFY (spooled before the inform is answered,
        # whichever router it went to) is one notification and one page all the same
        sent = traps.send(LINK_DOWN, link_varbinds(lo, 1, 2), community=COMMUNITY)
        assert sent.returncode == 0, sent.stderr
        routers[0]["proc"].signal(signal.SIGKILL)
        wait_for(lambda: len(notified()) == 2, 20, 0.05, "the second trap's notification")
        wait_for(lambda: spooled() == 0, 20, 0.1, "the second trap's NOTIFY acknowledged")
        rows = notified()
        assert len(rows) == 2, rows
        for severity, text in rows:
            assert severity == "error"
            assert text.startswith(f"SNMPv2c trap from 127.0.0.1: linkDown ifIndex.{lo}={lo} ")
        wait_for(lambda: len(paged("linkDown")) == 2, 20, 0.05, "the second trap's page")
        assert len(paged("linkDown")) == 2                  # each notification's own page
    finally:
        receiver.stop()
