"""A host behind a site whose uplink is down is UNREACHABLE because of its site, not DOWN
(SPEC 4.10), with real processes: a central router with the registry and an alerting sink,
a site router whose uplink runs through a TCP proxy, a real agent at the site. The site
heartbeats upstream as a host named by its id; the registry gives the agent its site as a
parent (the envelope's path); cut the uplink and the site is DOWN, the agent UNREACHABLE
behind it."""

from __future__ import annotations

import json
import signal

import pytest

from support.fleet import wait_for
from support.routerclients import FakeControl
from support.sites import central, site
from support.tcpproxy import TcpProxy

pytestmark = pytest.mark.timeout(180)


def hosts(fleet) -> dict[str, tuple[bool, str | None]]:
    return {r[0]: (bool(r[1]), r[2]) for r in fleet.db_rows(
        "SELECT a.hostname, h.up, h.unreachable FROM host_state h JOIN agents a "
        "ON a.uuid = h.uuid WHERE h.name = ''")}


def test_an_agent_behind_a_site_whose_uplink_is_down_is_unreachable(fleet, zctx):
    centre = central(fleet, sink_types=("registry", "alerting"))
    fleet.sink("registry", [centre])
    fleet.sink("alerting", [centre], alerting={"tick_interval": 0.2, "host_timeout": 3})
    control = FakeControl(zctx, centre["endpoints"]["control"])
    def connected():                            # (a HELLO relayed before would be lost)
        control.send("PEERS")
        sinks = control.expect("PEERS").get("sinks")
        return sinks.get("registry") and sinks.get("alerting")
    wait_for(connected, 15, 0.1, what="the centre's sinks connected")
    host, port = centre["endpoints"]["sites"].removeprefix("tcp://").rsplit(":", 1)
    proxy = TcpProxy(host, int(port))
    try:
        edge = site(fleet, "site-1", [proxy.endpoint])
        fleet.agent([edge])
        wait_for(lambda: hosts(fleet) == {"site-1": (True, None), "agent-host": (True, None)},
                 30, 0.1, what="the site and its agent heard at the centre")
        assert fleet.db_rows("SELECT parents FROM agents WHERE hostname = 'agent-host'") \
            in ([('["site-1"]',)], [(["site-1"],)])
        # the site it is behind, which the console's lists filter and group by; the site
        # router itself is attached centrally
        assert fleet.db_rows("SELECT hostname, site FROM agents ORDER BY hostname") == [
            ("agent-host", "site-1"), ("site-1", None)]
        # fleetwatch status, asking the central router only, has both alive through it
        shown = {a["hostname"]: a for a in fleet.status(fleet.operator_config([centre]))
                 ["agents"]}
        assert {(h, shown[h]["alive"], tuple(shown[h]["routers"]))
                for h in ("agent-host", "site-1")} == {("agent-host", True, ("central-1",)),
                                                       ("site-1", True, ("central-1",))}

        proxy.cut()
        wait_for(lambda: hosts(fleet) == {"site-1": (False, None),
                                          "agent-host": (False, "site-1")},
                 30, 0.1, what="the site DOWN, its agent UNREACHABLE behind it")
        proxy.restore()
        wait_for(lambda: hosts(fleet) == {"site-1": (True, None), "agent-host": (True, None)},
                 30, 0.1, what="both back")

        # The site router itself stopped (SIGSTOP), then let go: its agent, whose link to it
        # expired meanwhile, attaches again a moment after the site is heard upstream.
        edge["proc"].signal(signal.SIGSTOP)
        try:
            wait_for(lambda: hosts(fleet) == {"site-1": (False, None),
                                              "agent-host": (False, "site-1")},
                     30, 0.1, what="the stopped site DOWN, its agent UNREACHABLE")
        finally:
            edge["proc"].signal(signal.SIGCONT)
        wait_for(lambda: hosts(fleet) == {"site-1": (True, None), "agent-host": (True, None)},
                 30, 0.1, what="both back after SIGCONT")
        # the site was paged DOWN and UP, twice; its agent never: neither while UNREACHABLE
        # nor in the moments between the site's return and its own heartbeats', which come
        # through it (freshness.returned)
        alerts = json.loads(fleet.command("alerts", "--config", str(fleet.operator_config(
            [centre])), "--json").stdout)["alerts"]
        assert sorted((a["hostname"], a["severity"]) for a in alerts) == [
            ("site-1", "critical"), ("site-1", "critical"), ("site-1", "ok"),
            ("site-1", "ok")], alerts
    finally:
        proxy.close()
