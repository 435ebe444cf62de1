"""Sites with CURVE (SPEC 4.10, 7.1, 7.4), real routers: a site router's uplink presents its
site key (`site.key`, named by the site's id), which the central router's `security.sites`
must list; a key not listed fails the handshake, a listed key of another site's name is
refused 403 at the link's HELLO; the agents behind a CURVE site are bound to their keys by
the site router as by any router. A site key speaks for no agent attached to the central
router itself, whatever its messages say and however far ahead their clock (issue 31)."""

from __future__ import annotations

import shutil
import time

import pytest

from fleetwatch import protocol, security
from support.fleet import wait_for
from support.routerclients import Agent, backend_pull, dealer
from support.sites import central, site
from support.zmqio import recv_until, stats_from

pytestmark = pytest.mark.timeout(120)


def site_key(keys, name: str, allowed_dir=None) -> str:
    """A site key named ``name`` (its public file copied into ``allowed_dir``): its secret."""
    public, secret = keys.make("site-keys", name, {"role": "site", "name": name})
    if allowed_dir is not None:
        shutil.copy(public, allowed_dir)
    return secret


def public_of(secret: str) -> str:
    return secret.removesuffix("_secret")


def test_a_curve_site_links_with_its_key_and_others_are_refused(fleet, zctx, keys):
    allowed = fleet.root / "sites-allowed"
    allowed.mkdir()
    good = site_key(keys, "site-1", allowed)
    unlisted = site_key(keys, "site-2")
    wrong_name = site_key(keys, "site-9", allowed)
    sink = security.read_certificate(keys.backend("sink"))
    operator = security.read_certificate(keys.backend("operator"))
    uuid = "agent-behind-site-1"
    agent_cert = security.read_certificate(keys.agent(uuid))
    centre = central(fleet, security={**keys.router_security(), "sites": str(allowed)})
    alerting = backend_pull(zctx, centre["endpoints"]["sinks"]["alerting"], sink, keys)
    graphite = backend_pull(zctx, centre["endpoints"]["sinks"]["graphite"], sink, keys)
    sites = [centre["endpoints"]["sites"]]
    edge = site(fleet, "site-1", sites, security=keys.router_security(), site={"key": good})

    agent = Agent(zctx, edge["endpoints"]["agents"], uuid, agent_cert, keys)
    wait_for(lambda: agent.welcome().get("durable", {}).get("NOTIFY") == ["alerting"], 20,
             0.3, what="the site's uplink up (the centre's durable routes told)")
    sent = agent.send("NOTIFY", severity="error", text="over curve")
    frames = recv_until(alerting, lambda f: f[1].startswith(f"NOTIFY/{uuid}/".encode()), 10,
                        what="the NOTIFY at the centre")
    assert protocol.decode_relayed(frames).path == ("central-1", "site-1")
    control = dealer(zctx, centre["endpoints"]["control"], None, operator, keys)
    control.send_multipart(protocol.encode_control(
        protocol.make("ACK", "sink", msg_ids=[sent.msg_id], sink="alerting"), uuid))
    got = recv_until(agent.sock, lambda f: f[1] == b"ACK", 10, what="the ACK down")
    assert protocol.decode(got).get("msg_ids") == [sent.msg_id]

    # a site key the centre does not list: the handshake fails, nothing links
    site(fleet, "site-2", sites, security=keys.router_security(), site={"key": unlisted})
    # a listed key, but of another site's name: 403 at the link's HELLO
    site(fleet, "site-3", sites, security=keys.router_security(), site={"key": wrong_name})
    metrics = stats_from(graphite, lambda m: m.get("router.refused.unknown_key", 0) >= 1
                         and m.get("router.sites.impostors", 0) >= 1, 20, router="central-1")
    assert metrics["router.sites.links"] == 1

    # its key allowed later (the allowlist is re-read by itself): site-2 dials again, links
    shutil.copy(public_of(unlisted), allowed)
    stats_from(graphite, lambda m: m.get("router.sites.links") == 2, 30, router="central-1")


#: 9999-12-31T23:59:59Z: the ``ts`` of the forged messages (issue 31, item 1)
YEAR_9999 = 253402300799.0


def test_a_site_key_cannot_speak_for_an_agent_attached_to_the_centre(fleet, zctx, keys):
    """The attack of issue 31: with an admitted site key, a DEREGISTER and a HELLO sent up
    the `sites` socket for an agent attached to the central router itself, both dated in
    year 9999. The centre refuses both (403 down the link, counted `router.sites.foreign`):
    the agent keeps its name and parents, its heartbeats still count, and when it goes
    silent it is DOWN within its host timeout."""
    from support.fleet import agent_uuid_for
    allowed = fleet.root / "sites-allowed"
    allowed.mkdir()
    rogue_cert = security.read_certificate(site_key(keys, "site-1", allowed))
    uuid = agent_uuid_for(fleet)
    backends = {n: keys.backend(n) for n in ("registry", "alerting", "graphite")}
    centre = central(fleet, sink_types=("registry", "alerting", "graphite"),
                     security={**keys.router_security(), "sites": str(allowed)})
    fleet.sink("registry", [centre], security=keys.client(backends["registry"]))
    fleet.sink("alerting", [centre], security=keys.client(backends["alerting"]),
               alerting={"tick_interval": 0.2, "host_timeout": 3})
    graphite = backend_pull(zctx, centre["endpoints"]["sinks"]["graphite"],
                            security.read_certificate(backends["graphite"]), keys)
    fleet.agent([centre], security=keys.client(keys.agent(uuid)), heartbeat_interval=0.3)

    def host() -> tuple | None:
        got = fleet.db_rows("SELECT a.hostname, a.parents, a.gone, h.up, h.gone, "
                            "h.last_heard FROM agents a JOIN host_state h ON h.uuid = a.uuid "
                            "WHERE a.uuid = ? AND h.name = ''", (uuid,))
        return got[0] if got else None
    wait_for(lambda: (host() or ())[:5] == ("agent-host", None, None, 1, None), 30, 0.1,
             what="the agent heard at the centre")

    link = dealer(zctx, centre["endpoints"]["sites"], None, rogue_cert, keys)
    hello = protocol.make("HELLO", "site-1", hostname="site-1", heartbeat=1.0, role="site")
    link.send_multipart([protocol.SIGNATURE, b"HELLO/site-1/site-1",
                         protocol.encode_body(hello)])
    assert recv_until(link, lambda f: f[1] == b"WELCOME", 10, what="the link's WELCOME")
    forged = [protocol.make("HELLO", uuid, lambda: YEAR_9999, hostname="renamed-by-site",
                            heartbeat=1.0),
              protocol.make("DEREGISTER", uuid, lambda: YEAR_9999, reason="forged")]
    for msg in forged:
        link.send_multipart([protocol.SIGNATURE, f"{msg.type}/{uuid}/site-1".encode(),
                             protocol.encode_body(msg)])
    attacked = time.time()

    # its heartbeats still count; its name and parents are its own
    wait_for(lambda: (host() or (0,) * 6)[5] > attacked + 1.0, 15, 0.1,
             what="the agent's heartbeats counted after the attack")
    assert host()[:5] == ("agent-host", None, None, 1, None)
    assert fleet.db_rows("SELECT router FROM agent_routers WHERE uuid = ?", (uuid,)) \
        == [("central-1",)]
    # the centre refused both, down the link, and counted them
    refused = protocol.decode_down(recv_until(link, lambda f: f[1] == b"ERROR", 10,
                                              what="the centre's refusal"))
    assert (refused[0], refused[1].get("status")) == (uuid, protocol.FORBIDDEN)
    stats_from(graphite, lambda m: m.get("router.sites.foreign", 0) >= 2, 15,
               router="central-1")

    # silent, it is DOWN within its timeout (3 s), and paged
    fleet.procs[-1].kill()
    silent = time.monotonic()
    wait_for(lambda: (host() or (None,) * 5)[3] == 0, 3 + 10, 0.1,
             what="the silent agent DOWN")
    assert host()[4] is None and time.monotonic() - silent < 3 + 10
    op = fleet.operator_config([centre])
    wait_for(lambda: [(a["hostname"], a["severity"]) for a in fleet.alerts(op)]
             == [("agent-host", "critical")], 10, 0.3, what="the DOWN alert")
