"""Sites with CURVE (SPEC 4.10, 7.1, 7.4), real routers: a site router's uplink presents its
site key (`site.key`, named by the site's id), which the central router's `security.sites`
must list; a key not listed fails the handshake, a listed key of another site's name is
refused 403 at the link's HELLO; the agents behind a CURVE site are bound to their keys by
the site router as by any router."""

from __future__ import annotations

import shutil

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
