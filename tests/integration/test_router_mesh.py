"""Routers that find each other (SPEC 4.9), with real processes on 127.0.0.1: three routers
from one seed each agree on the live set; an agent, a sink and a scheduler configured with
one router follow a router that joins and drop it when it is killed; a router stopped
(SIGSTOP) past the expiry is dropped and comes back (SIGCONT); with CURVE only the keys of
``security.routers`` join; a router killed while NOTIFYs flow loses none; bad MEMBERS
bodies are refused and counted."""

from __future__ import annotations

import json
import shutil
import signal

import pytest
import zmq

from fleetwatch import protocol, security
from fleetwatch.ask import ask_all
from fleetwatch.cli import routers as routers_cli
from support.fleet import intake_path, landed, wait_for, wait_intake
from support.routerclients import backend_pull, dealer
from support.zmqio import stats_from

pytestmark = pytest.mark.timeout(240)

#: gossip every 0.3 s, a router dead after 5 of them (1.5 s)
MESH = {"interval": 0.3, "expire_intervals": 5}


def mesh_router(fleet, name: str, seed: dict | None = None, **extra) -> dict:
    mesh = {**MESH, "seeds": [seed["endpoints"]["control"]] if seed else [],
            **extra.pop("mesh", {})}
    return fleet.router(name, mesh=mesh, **extra)


def seen(routers: list[dict], timeout: float = 1.0, keys=None) -> dict[str, set[str]]:
    """router id -> the ids it sees live, for the routers that answered MEMBERS."""
    doc = routers_cli.views(ask_all([r["endpoints"]["control"] for r in routers],
                                    ("MEMBERS",), timeout, keys=keys))
    return {v["router"]: {m["id"] for m in v["live"]} for v in doc["routers"]
            if v["problem"] is None}


def agree(routers: list[dict], ids: set[str], timeout: float = 20.0, keys=None) -> None:
    """Wait until each of ``routers`` sees exactly ``ids`` live."""
    names = {r["id"] for r in routers}
    wait_for(lambda: seen(routers, keys=keys) == {n: ids for n in names}, timeout, 0.1,
             what=f"{sorted(names)} agreeing on {sorted(ids)}")


def attached(router: dict, uuid: str) -> bool:
    [answer] = ask_all([router["endpoints"]["control"]], ("PEERS",), 1.0)
    peers = answer.get("PEERS")
    return peers is not None and uuid in {a["uuid"] for a in peers.get("agents", [])}


def sinks_of(router: dict) -> dict:
    [answer] = ask_all([router["endpoints"]["control"]], ("PEERS",), 1.0)
    peers = answer.get("PEERS")
    return peers.get("sinks", {}) if peers is not None else {}


def uuid_of(fleet, name: str = "agent") -> str:
    path = fleet.root / f"{name}-state" / "uuid"
    wait_for(path.exists, 15, what="the agent's uuid")
    return path.read_text().strip()


def routers_command(fleet, *configured: dict) -> tuple[int, dict]:
    """``fleetwatch routers --json`` with ``configured`` routers: its exit status and
    document."""
    res = fleet.cli("routers", "--config", str(fleet.operator_config(list(configured))),
                    "--json", check=False)
    return res.returncode, json.loads(res.stdout)


def test_three_routers_from_one_seed_each_and_the_fleet_follows_a_router_that_joins(
        fleet, tmp_path):
    r1 = mesh_router(fleet, "r1")
    r2 = mesh_router(fleet, "r2", r1)
    agree([r1, r2], {"r1", "r2"})
    lake = tmp_path / "lake"
    sink = fleet.sink("history", [r1], history={"lake": str(lake), "rotate_seconds": 0.5})
    agent = fleet.agent([r1])
    scheduler = fleet.scheduler([r1])
    uuid = uuid_of(fleet)
    # configured with r1 only, both learn r2 from r1's WELCOME
    wait_for(lambda: attached(r2, uuid), 15, what="the agent attached to r2")
    wait_for(lambda: sinks_of(r2).get("history") == 1, 15, what="the sink pulling from r2")

    # a third router, its one seed r2: everyone agrees, and the agent and the sink follow
    r3 = mesh_router(fleet, "r3", r2)
    agree([r1, r2, r3], {"r1", "r2", "r3"})
    wait_for(lambda: attached(r3, uuid), 15, what="the agent attached to r3")
    wait_for(lambda: sinks_of(r3).get("history") == 1, 15, what="the sink pulling from r3")
    wait_for(lambda: f"router r3 at {r3['endpoints']['control']} welcomed us" in scheduler.log(),
             15, what="the scheduler linked to r3")
    wait_for(lambda: any(ln["type"] == "STATS" and ln["uuid"] == uuid and ln["router"] == "r3"
                         for ln in landed(lake)), 15,
             what="a STATS of the agent relayed by r3 in the lake")
    status, doc = routers_command(fleet, r1)
    assert status == 0 and doc["live"] == ["r1", "r2", "r3"] and not doc["disagreements"]
    views = {v["router"]: v for v in doc["routers"]}
    assert set(views) == {"r1", "r2", "r3"}
    row = next(m for m in views["r1"]["live"] if m["id"] == "r3")
    assert row["control"] == r3["endpoints"]["control"] and row["beat"] >= 1
    assert row["agents"] == r3["endpoints"]["agents"] and row["incarnation"] > 0

    # r3 killed: the others drop it within the expiry and a few seconds; so do the agent
    # and the sink, which stop connecting to it
    r3["proc"].kill()
    agree([r1, r2], {"r1", "r2"}, timeout=1.5 + 8)
    assert {m["id"] for m in routers_cli.views(ask_all(
        [r1["endpoints"]["control"]], ("MEMBERS",), 1.0))["routers"][0]["dead"]} == {"r3"}
    wait_for(lambda: f"({r3['endpoints']['agents']}) is no longer named by the routers"
             in agent.log(), 15, what="the agent dropping r3")
    wait_for(lambda: f"({r3['endpoints']['control']}): no router names it any more"
             in sink.log(), 15, what="the sink dropping r3")
    wait_for(lambda: f"({r3['endpoints']['control']}): no router names it any more"
             in scheduler.log(), 15, what="the scheduler dropping r3")
    status, doc = routers_command(fleet, r1)
    assert status == 0 and doc["live"] == ["r1", "r2"], doc
    assert "r3" in {m["id"] for m in {v["router"]: v for v in doc["routers"]}["r1"]["dead"]}
    assert attached(r1, uuid) and attached(r2, uuid)


def test_a_router_stopped_past_the_expiry_is_dropped_and_comes_back(fleet):
    r1 = mesh_router(fleet, "r1")
    r2 = mesh_router(fleet, "r2", r1)
    r3 = mesh_router(fleet, "r3", r2)
    agree([r1, r2, r3], {"r1", "r2", "r3"})
    r2["proc"].signal(signal.SIGSTOP)
    try:
        agree([r1, r3], {"r1", "r3"}, timeout=1.5 + 8)
        # r1 and r3 agree: r2 is dead (asked all the same, it does not answer)
        status, doc = routers_command(fleet, r1)
        assert status == 0 and doc["live"] == ["r1", "r3"], doc
        stopped = next(v for v in doc["routers"] if v["endpoint"] == r2["endpoints"]["control"])
        assert stopped["problem"] and stopped["router"] == "r2"     # as the mesh names it
        # configured, a router that does not answer is a failure
        status, doc = routers_command(fleet, r1, r2)
        assert status == routers_cli.EXIT_DISAGREE, doc
    finally:
        r2["proc"].signal(signal.SIGCONT)
    agree([r1, r2, r3], {"r1", "r2", "r3"})
    status, doc = routers_command(fleet, r1)
    assert status == 0 and doc["live"] == ["r1", "r2", "r3"], doc


def test_with_curve_only_the_keys_of_security_routers_join(fleet, zctx, keys):
    allowed = fleet.root / "mesh-keys"
    allowed.mkdir()
    shutil.copy(keys.router_public, allowed)           # the fleet's router key may join
    secure = {**keys.router_security(), "routers": str(allowed)}
    cli_secret = keys.backend("operator")
    cli = security.ClientKeys(security.ClientSecurity(**keys.client(cli_secret)))
    sink_cert = security.read_certificate(keys.backend("graphite"))    # (before the routers)
    r1 = mesh_router(fleet, "r1", security=secure)
    r2 = mesh_router(fleet, "r2", r1, security=secure)
    agree([r1, r2], {"r1", "r2"}, keys=cli)

    # a router presenting a router key not in security.routers: its handshake is refused
    intruder_public, intruder_secret = keys.make("minted", "intruder",
                                                 {"role": "router", "name": "intruder"})
    r3 = mesh_router(fleet, "r3", r1, security=secure, mesh={"key": intruder_secret})
    graphite = backend_pull(zctx, r1["endpoints"]["sinks"]["graphite"], sink_cert, keys)
    stats_from(graphite, lambda m: m.get("router.refused.unknown_key", 0) >= 2, router="r1")
    assert "r3" not in seen([r1, r2], keys=cli)["r1"]

    # a back-end key (the operator's) may ask, not tell: 403, counted, nothing merged
    forged = {"id": "forged", "incarnation": 1, "beat": 1,
              "endpoints": {"agents": "tcp://127.0.0.1:1", "control": "tcp://127.0.0.1:2",
                            "tail": "tcp://127.0.0.1:3"}}
    sock = dealer(zctx, r1["endpoints"]["control"], None, cli.own, keys)
    sock.send_multipart(protocol.encode_control(protocol.make("MEMBERS", "operator",
                                                              routers=[forged])))
    assert sock.poll(5000)
    err = protocol.decode(sock.recv_multipart())
    assert err.type == "ERROR" and err.body["status"] == protocol.FORBIDDEN, err
    sock.send_multipart(protocol.encode_control(protocol.make("MEMBERS", "operator")))
    assert sock.poll(5000)
    answer = protocol.decode(sock.recv_multipart())
    assert answer.type == "MEMBERS"
    assert {e["id"] for e in answer.body["routers"]} == {"r1", "r2"}
    metrics = stats_from(graphite, lambda m: m.get("router.mesh.refused", 0) >= 1, router="r1")
    assert metrics["router.mesh.members"] == 2

    # its key allowed (the allowlist is re-read by itself): it joins
    shutil.copy(intruder_public, allowed)
    agree([r1, r2, r3], {"r1", "r2", "r3"}, keys=cli)


def test_a_router_killed_while_notifies_flow_loses_none(fleet):
    from agent.client import Client
    r1 = mesh_router(fleet, "r1")
    r2 = mesh_router(fleet, "r2", r1)
    agree([r1, r2], {"r1", "r2"})
    fleet.sink("alerting", [r1])
    fleet.sink("registry", [r1])
    fleet.agent([r1], spool={"ack_timeout": 0.3, "max_backoff": 1.0})
    uuid = uuid_of(fleet)
    wait_for(lambda: attached(r2, uuid) and sinks_of(r2).get("alerting") == 1, 15,
             what="the agent and the alerting sink on r2 too")
    wait_intake(intake_path(fleet))
    ids = []
    with Client(config_path=str(fleet.root / "agent.yaml"), timeout=10) as fw:
        for n in range(40):
            ids.append(fw.notify(f"event {n}", severity="warning", source="test"))
            if n == 20:
                r1["proc"].kill()           # the router the agent and the sink were given
    wait_for(lambda: len({r[0] for r in fleet.db_rows("SELECT msg_id FROM notifications")}
                         & set(ids)) == len(ids), 30, what="every NOTIFY recorded")
    rows = fleet.db_rows("SELECT count(*), count(DISTINCT msg_id) FROM notifications")
    assert rows == [(len(ids), len(ids))]
    agree([r2], {"r2"}, timeout=1.5 + 8)         # the survivor drops the killed router


def test_bad_members_bodies_are_refused_and_counted_and_the_router_goes_on(fleet, zctx):
    from support.zmqio import pull
    r1 = mesh_router(fleet, "r1")
    graphite = pull(zctx, r1["endpoints"]["sinks"]["graphite"])
    sock = dealer(zctx, r1["endpoints"]["control"], None, None, None)

    def ask(body: bytes) -> protocol.Message:
        sock.send_multipart([protocol.SIGNATURE, b"MEMBERS", b"", body])
        assert sock.poll(5000), body[:60]
        return protocol.decode(sock.recv_multipart())

    good = {"id": "r2", "incarnation": 1, "beat": 1,
            "endpoints": {"agents": "tcp://127.0.0.1:1", "control": "tcp://127.0.0.1:2",
                          "tail": "tcp://127.0.0.1:3"}}
    refused = [b"{", json.dumps({"msg_id": "m", "uuid": "x", "ts": 1, "routers": "r2"}).encode(),
               json.dumps({"msg_id": "m", "uuid": "x", "ts": 1, "routers": [good] * 257}).encode(),
               json.dumps({"msg_id": "m", "uuid": "x", "ts": 1, "routers": [1, 2]}).encode()]
    for body in refused:
        err = ask(body)
        assert err.type == "ERROR" and err.body["status"] == protocol.BAD_REQUEST, err
        # refusals are answered at most once a second per connection: a new one each
        sock.close(0)
        sock = dealer(zctx, r1["endpoints"]["control"], None, None, None)
    # malformed entries are skipped, counted, the rest merged; its own id is never taken
    impostor = {**good, "id": "r1", "incarnation": 2 ** 52}
    answer = ask(json.dumps({"msg_id": "m", "uuid": "x", "ts": 1, "routers": [
        {"id": "-bad"}, {**good, "beat": -1}, impostor, good]}).encode())
    assert answer.type == "MEMBERS"
    assert {e["id"]: e.get("dead", False) for e in answer.body["routers"]} == \
        {"r1": False, "r2": False}
    metrics = stats_from(graphite, lambda m: m.get("router.mesh.bad", 0) >= 6, router="r1")
    assert metrics["router.mesh.impostors"] == 1 and metrics["router.mesh.members"] == 2
    assert r1["proc"].alive()
    sock.close(0)
