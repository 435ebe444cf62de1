"""Sites (SPEC 4.10) with real routers: site routers that forward their agents' traffic to a
central router over one uplink each, and ACK and RUN back down, in one level and in a tree.
The uplink's outage (a TCP proxy cut) is in test_sites_outage.py."""

from __future__ import annotations

import pytest
import zmq

from fleetwatch import protocol
from support.fleet import wait_for
from support.routerclients import FakeAgent, FakeControl
from support.sites import central, site
from support.zmqio import pull, recv_until, stats_from

pytestmark = pytest.mark.timeout(120)


def welcomed(agent: FakeAgent) -> protocol.Message:
    """HELLO until the site's WELCOME tells the centre's durable routes (alerting only)."""
    def told():
        msg = agent.hello(heartbeat=1.0)
        return msg if msg.get("durable", {}).get("NOTIFY") == ["alerting"] else None
    return wait_for(told, 15, interval=0.2, what="the centre's durable routes told by the site")


def relayed_notify(sock: zmq.Socket, text: str) -> protocol.Relayed:
    frames = recv_until(sock, lambda f: protocol.decode_relayed(f).message.get("text") == text,
                        10, what=f"NOTIFY {text}")
    return protocol.decode_relayed(frames)


def test_site_relays_up_with_its_path_and_acks_and_runs_come_down(fleet, zctx):
    centre = central(fleet)
    edge = site(fleet, "site-1", [centre["endpoints"]["sites"]])
    alerting = pull(zctx, centre["endpoints"]["sinks"]["alerting"])
    agent = FakeAgent(zctx, edge["endpoints"]["agents"])
    welcome = welcomed(agent)
    assert welcome.get("router") == "site-1"

    sent = agent.notify("through the site")
    got = relayed_notify(alerting, "through the site")
    assert (got.uuid, got.router, got.path) == (agent.uuid, "central-1", ("central-1", "site-1"))

    control = FakeControl(zctx, centre["endpoints"]["control"])
    control.send("ACK", target=agent.uuid, msg_ids=[sent.msg_id], sink="alerting")
    assert agent.expect("ACK").get("msg_ids") == [sent.msg_id]
    run = control.send("RUN", target=agent.uuid, command_id="c-1", plugin="check_disk")
    assert agent.expect("RUN").msg_id == run.msg_id

    # an agent the centre never heard of is not found there, as before
    control.send("RUN", target="nobody-here", command_id="c-2", plugin="check_disk")
    assert control.expect("ERROR").get("status") == protocol.NOT_FOUND

    # the site's own STATS reach the centre's sinks named as its HELLO names it (SPEC 4.10:
    # the site's id), so that no sink counts them a hostname_mismatch
    graphite = pull(zctx, centre["endpoints"]["sinks"]["graphite"])
    frames = recv_until(graphite, lambda f: protocol.decode_relayed(f).uuid == "site-1", 15,
                        what="the site's own STATS")
    assert protocol.decode_relayed(frames).message.get("hostname") == "site-1"


def test_site_behind_a_site_two_levels(fleet, zctx):
    centre = central(fleet)
    middle = site(fleet, "site-1", [centre["endpoints"]["sites"]], sites=True)
    leaf = site(fleet, "site-2", [middle["endpoints"]["sites"]])
    alerting = pull(zctx, centre["endpoints"]["sinks"]["alerting"])
    agent = FakeAgent(zctx, leaf["endpoints"]["agents"])
    welcomed(agent)

    sent = agent.notify("two levels down")
    got = relayed_notify(alerting, "two levels down")
    assert got.path == ("central-1", "site-1", "site-2")
    assert got.router == "central-1"

    control = FakeControl(zctx, centre["endpoints"]["control"])
    control.send("ACK", target=agent.uuid, msg_ids=[sent.msg_id], sink="alerting")
    assert agent.expect("ACK").get("msg_ids") == [sent.msg_id]
    run = control.send("RUN", target=agent.uuid, command_id="c-1", plugin="check_load")
    assert agent.expect("RUN").msg_id == run.msg_id

    # both sites heartbeat upstream as hosts of their own
    beats = set()
    def both():
        frames = alerting.recv_multipart() if alerting.poll(200) else None
        if frames:
            r = protocol.decode_relayed(frames)
            if r.message.type == "HEARTBEAT":
                beats.add((r.uuid, r.path))
        return {("site-1", ("central-1", "site-1")),
                ("site-2", ("central-1", "site-1", "site-2"))} <= beats
    wait_for(both, 10, interval=0.0, what="both sites' heartbeats")


def test_bad_site_links_are_refused_counted_and_the_centre_goes_on(fleet, zctx):
    centre = central(fleet)
    alerting = pull(zctx, centre["endpoints"]["sinks"]["alerting"])
    graphite = pull(zctx, centre["endpoints"]["sinks"]["graphite"])
    link = zctx.socket(zmq.DEALER)
    link.linger = 0
    link.connect(centre["endpoints"]["sites"])
    sig = protocol.SIGNATURE

    def answer(frames: list[bytes]) -> tuple[str, protocol.Message]:
        link.send_multipart(frames)
        assert link.poll(5000), f"no answer to {frames[:2]}"
        return protocol.decode_down(link.recv_multipart())

    def status(frames: list[bytes]) -> int:
        target, msg = answer(frames)
        assert msg.type == "ERROR", msg
        return msg.get("status")

    notify = protocol.encode_body(protocol.make("NOTIFY", "a-1", severity="error", text="x"))
    assert status([sig, b"NOTIFY/a-1/rogue", notify]) == protocol.HELLO_REQUIRED
    assert status([sig, b"NOTIFY/a-1/rogue"]) == protocol.BAD_REQUEST
    assert status([b"FWP\x02", b"NOTIFY/a-1/rogue", notify]) == protocol.VERSION_NOT_SUPPORTED
    assert status([b"junk", b"NOTIFY/a-1/rogue", notify]) == protocol.BAD_REQUEST
    agent_hello = protocol.make("HELLO", "rogue", hostname="h", heartbeat=1.0)
    assert status([sig, b"HELLO/rogue/rogue", protocol.encode_body(agent_hello)]) \
        == protocol.BAD_REQUEST                         # a link's HELLO says role site
    hello = protocol.make("HELLO", "rogue", hostname="rogue", heartbeat=1.0, role="site")
    target, welcome = answer([sig, b"HELLO/rogue/rogue", protocol.encode_body(hello)])
    assert (target, welcome.type, welcome.get("router")) == ("", "WELCOME", "central-1")
    assert status([sig, b"NOTIFY/a-1/other-site", notify]) == protocol.FORBIDDEN
    for envelope in (b"NOTIFY/a-1/rogue,,x", b"WELCOME/a-1/rogue", b"NOTIFY/a 1/rogue",
                     b"NOTIFY/a-1/" + b",".join([b"rogue"] * protocol.MAX_PATH)):
        assert status([sig, envelope, notify]) in (protocol.BAD_REQUEST, protocol.NOT_ALLOWED)
    beat = protocol.make("HEARTBEAT", "rogue", interval=1.0)
    assert answer([sig, b"HEARTBEAT/rogue/rogue", protocol.encode_body(beat)])[1].type \
        == "HEARTBEAT"

    link.send_multipart([sig, b"NOTIFY/a-1/rogue", notify])     # and it still relays
    got = protocol.decode_relayed(recv_until(alerting, lambda f: f[1].startswith(b"NOTIFY/a-1/"),
                                             10, what="the NOTIFY relayed"))
    assert got.path == ("central-1", "rogue")
    metrics = stats_from(graphite, lambda m: m.get("router.sites.links") == 1, 15,
                         router="central-1")
    assert metrics["router.sites.bad"] >= 8 and metrics["router.sites.unknown"] >= 1
    assert metrics["router.sites.agents"] == 1


def test_the_centres_peers_list_its_sites_and_the_agents_behind_them(fleet, zctx):
    centre = central(fleet)
    site(fleet, "site-1", [centre["endpoints"]["sites"]])
    edge = site(fleet, "site-2", [centre["endpoints"]["sites"]])
    agent = FakeAgent(zctx, edge["endpoints"]["agents"], uuid="zz-agent")
    welcomed(agent)
    agent.send("HEARTBEAT", interval=1.0)
    control = FakeControl(zctx, centre["endpoints"]["control"])

    def listed():
        control.send("PEERS", limit=2)
        first = control.expect("PEERS")
        control.send("PEERS", after=first.get("next") or "~")
        rest = control.expect("PEERS")
        entries = first.get("agents") + rest.get("agents")
        return (first.get("total"), entries) if first.get("total") == 3 else None
    total, entries = wait_for(listed, 10, 0.2, what="the sites and the agent in PEERS")
    assert [(e["uuid"], e["hostname"], e.get("site")) for e in entries] == [
        ("site-1", "site-1", None), ("site-2", "site-2", None),
        ("zz-agent", "", "site-2")]
    assert all(e["last_heard"] >= e["since"] > 0 for e in entries)


def test_an_agent_behind_sites_is_told_503_when_its_notify_cannot_be_taken(fleet, zctx):
    """No custody anywhere: the central router with no alerting sink, or a site in the
    middle of a tree with its uplink down, answers the agent's NOTIFY 503 down the links."""
    from support.tcpproxy import TcpProxy
    centre = central(fleet)
    host, port = centre["endpoints"]["sites"].removeprefix("tcp://").rsplit(":", 1)
    proxy = TcpProxy(host, int(port))
    try:
        middle = site(fleet, "site-1", [proxy.endpoint], sites=True)
        leaf = site(fleet, "site-2", [middle["endpoints"]["sites"]])
        agent = FakeAgent(zctx, leaf["endpoints"]["agents"])
        welcomed(agent)

        def refused(text: str) -> str:
            """NOTIFY (again: the agent would resend it), and the reason of a 503 naming
            ``text``, or "" (the 503s are at most one a second per uuid)."""
            agent.notify("kept by the agent")
            try:
                got = agent.expect("ERROR", 1.2, durable=True)
            except AssertionError:
                return ""
            assert (got.get("status"), got.get("ref")) == (protocol.UNAVAILABLE, "NOTIFY")
            return got.get("reason") if text in got.get("reason") else ""
        why = wait_for(lambda: refused("no alerting sink"), 15, 0.0,
                       what="503 from the centre (no alerting sink)")
        assert "router central-1" in why
        proxy.cut()
        wait_for(lambda: refused("uplink of site router site-1 is down"), 20, 0.0,
                 what="503 from the middle site (its uplink down)")
    finally:
        proxy.close()


def test_a_restarted_centre_knows_the_agents_behind_a_tree_again_from_their_hellos(fleet, zctx):
    """When a site's messages go over a link again, it says again the last HELLO of every
    agent it speaks for: its own and those behind the sites below it (SPEC 4.10). A central
    router restarted while the top uplink was cut lists them again in PEERS, though none of
    them sent anything after its one HELLO (each said a heartbeat of 60 s: not expired)."""
    from support.tcpproxy import TcpProxy

    def sites_endpoint(router: dict) -> tuple[str, int]:
        host, port = router["endpoints"]["sites"].removeprefix("tcp://").rsplit(":", 1)
        return host, int(port)

    def peers(control: FakeControl) -> dict:
        control.send("PEERS")
        return {e["uuid"]: e.get("site") for e in control.expect("PEERS").get("agents")}

    centre = central(fleet)
    proxy = TcpProxy(*sites_endpoint(centre))
    try:
        middle = site(fleet, "site-1", [proxy.endpoint], sites=True)
        leaf = site(fleet, "site-2", [middle["endpoints"]["sites"]])
        below = FakeAgent(zctx, leaf["endpoints"]["agents"], uuid="agent-below")
        here = FakeAgent(zctx, middle["endpoints"]["agents"], uuid="agent-middle")
        for agent in (below, here):
            agent.hello(heartbeat=60.0)
        behind = {"site-2": "site-1", "agent-below": "site-1", "agent-middle": "site-1"}
        control = FakeControl(zctx, centre["endpoints"]["control"])
        wait_for(lambda: peers(control) == {"site-1": None, **behind}, 15, 0.2,
                 what="the centre's PEERS before the restart")

        proxy.cut()
        centre["proc"].stop()
        centre = central(fleet)                 # a new process: it knows no uuid
        proxy.target = sites_endpoint(centre)
        control = FakeControl(zctx, centre["endpoints"]["control"])
        assert peers(control) == {}
        proxy.restore()
        wait_for(lambda: peers(control) == {"site-1": None, **behind}, 30, 0.2,
                 what="the agents behind the tree in the restarted centre's PEERS")
        for agent in (below, here):             # nobody asked the agents for a HELLO
            while agent.sock.poll(0):
                msg = protocol.decode(agent.sock.recv_multipart())
                assert (msg.type, msg.get("status")) != ("ERROR", protocol.HELLO_REQUIRED)
    finally:
        proxy.close()


#: gossip every 0.2 s: the two central routers know each other within a second
MESH = {"interval": 0.2, "expire_intervals": 10}


def test_a_site_cannot_speak_for_an_agent_attached_to_another_router_of_the_mesh(fleet, zctx):
    """Issue 31, item 1, across a mesh: an agent attached to central-2 only; a site linked
    to central-1 sends a HELLO renaming it and a DEREGISTER for it. central-1 knows its own
    agents, not central-2's: it asks the mesh (ATTACHED) before the site may speak for a
    uuid, so both are refused (403 down the link, `router.sites.foreign`), and the registry
    keeps the agent's name, parents and presence; a uuid no router has passes, in order."""
    c1 = central(fleet, "central-1", sink_types=("registry", "graphite"), mesh=MESH)
    c2 = central(fleet, "central-2", sink_types=("registry", "graphite"),
                 mesh={**MESH, "seeds": [c1["endpoints"]["control"]]})
    fleet.sink("registry", [c1, c2])
    graphite = pull(zctx, c1["endpoints"]["sinks"]["graphite"])
    op = fleet.operator_config([c1])
    wait_for(lambda: {r["id"] for r in fleet.status(op, check=False)["routers"]
                      if r["reachable"]} == {"central-1", "central-2"}, 20, 0.2,
             what="the two central routers meshed")
    agent = FakeAgent(zctx, c2["endpoints"]["agents"])

    def row(uuid: str):
        got = fleet.db_rows("SELECT hostname, parents, gone FROM agents WHERE uuid = ?", (uuid,))
        return got[0] if got else None

    def registered():       # HELLO again until the registry sink, connecting, has it
        return agent.hello(heartbeat=30.0).type == "WELCOME" and row(agent.uuid)
    wait_for(registered, 15, 0.3, what="the agent registered through central-2")
    assert row(agent.uuid) == (f"host-{agent.uuid[:6]}", None, None)

    link = zctx.socket(zmq.DEALER)
    link.linger = 0
    link.connect(c1["endpoints"]["sites"])
    hello = protocol.make("HELLO", "site-1", hostname="site-1", heartbeat=1.0, role="site")
    link.send_multipart([protocol.SIGNATURE, b"HELLO/site-1/site-1", protocol.encode_body(hello)])
    assert recv_until(link, lambda f: f[1] == b"WELCOME", 10, what="the link's WELCOME")
    newcomer = "a" * 32                             # attached nowhere: the site may speak
    for uuid, msg in [
            (agent.uuid, protocol.make("HELLO", agent.uuid, hostname="renamed-by-site",
                                       heartbeat=1.0)),
            (agent.uuid, protocol.make("DEREGISTER", agent.uuid, reason="forged")),
            (newcomer, protocol.make("HELLO", newcomer, hostname="behind-site-1",
                                     heartbeat=1.0))]:
        link.send_multipart([protocol.SIGNATURE, f"{msg.type}/{uuid}/site-1".encode(),
                             protocol.encode_body(msg)])

    refused = protocol.decode_down(recv_until(link, lambda f: f[1] == b"ERROR", 10,
                                              what="central-1's refusal"))
    assert (refused[0], refused[1].get("status")) == (agent.uuid, protocol.FORBIDDEN)
    assert "attached to router central-2 of the mesh" in refused[1].get("reason")
    wait_for(lambda: row(newcomer), 15, 0.1, what="the newcomer's HELLO through the site")
    assert row(newcomer)[:2] == ("behind-site-1", '["site-1"]')
    assert row(agent.uuid) == (f"host-{agent.uuid[:6]}", None, None)
    stats_from(graphite, lambda m: m.get("router.sites.foreign", 0) >= 2, 15,
               router="central-1")

    # a site's burst (its agents after an outage): 7,000 uuids, seven ATTACHED at once, every
    # one answered, none taken unverified
    burst = [f"{i:032x}" for i in range(1, 7001)]
    for uuid in burst:
        msg = protocol.make("HEARTBEAT", uuid)
        link.send_multipart([protocol.SIGNATURE, f"HEARTBEAT/{uuid}/site-1".encode(),
                             protocol.encode_body(msg)])
    got = stats_from(graphite, lambda m: m.get("router.sites.agents") == 7001
                     and m.get("router.sites.checking") == 0, 20, router="central-1")
    assert got["router.sites.unverified"] == 0 and got["router.sites.held_dropped"] == 0
