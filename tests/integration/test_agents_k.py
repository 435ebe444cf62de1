"""Agents attach to k of a mesh's live routers (SPEC 4.9, issue 20), with real processes on
127.0.0.1: five routers from one seed each; agents each configured with one router end up
linked to exactly the three ``agent.rendezvous.choose`` names (every router's PEERS, the
agents' own STATS); a router killed moves only the agents that had it, each to its next
best, while a NOTIFY sent meanwhile is recorded once; ``fleetwatch run`` (asking every
router: two answer 404; or given one router, learning the others from its WELCOME) and a
scheduler configured with one router reach an agent attached to three of the five."""

from __future__ import annotations

import json
import stat

import pytest

from agent.client import Client
from agent.rendezvous import choose
from fleetwatch import protocol
from support.fleet import wait_for
from support.mesh import agreed, attachments
from support.tail import Tail

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(240)

#: gossip every 0.3 s, a router dead after 5 of them (1.5 s)
MESH = {"interval": 0.3, "expire_intervals": 5}
K = 3


def mesh_of_five(fleet) -> list[dict]:
    """r1 .. r5, each started with the previous one as its only seed; once they agree."""
    routers: list[dict] = []
    for n in range(1, 6):
        seeds = [routers[-1]["endpoints"]["control"]] if routers else []
        routers.append(fleet.router(f"r{n}", mesh={**MESH, "seeds": seeds}, durable={
            "NOTIFY": ["alerting"], "REGISTER": ["registry"]}))   # (no history sink here)
    wait_for(lambda: agreed(routers), 30, 0.1, what="the five routers agreeing")
    return routers


def expected(uuid: str, routers: list[dict]) -> set[str]:
    """The ids of the k routers ``uuid`` ranks first among ``routers`` (SPEC 4.9's score)."""
    by_endpoint = {r["endpoints"]["agents"]: r["id"] for r in routers}
    return {by_endpoint[e] for e in choose(uuid, by_endpoint, K)}


def uuids_of(fleet, names: list[str]) -> dict[str, str]:
    """agent name -> uuid, once each agent has written it."""
    paths = {n: fleet.root / f"{n}-state" / "uuid" for n in names}
    wait_for(lambda: all(p.exists() and p.read_text().strip() for p in paths.values()), 20,
             what="the agents' uuids")
    return {n: p.read_text().strip() for n, p in paths.items()}


def newest_stats(tail: Tail) -> dict[str, dict]:
    """uuid -> the metrics of its newest STATS seen on the tails."""
    out = {}
    for relayed in tail.pump():
        msg = relayed.message
        if msg.type == "STATS" and "agent.routers.alive" in msg.body.get("metrics", {}):
            out[msg.uuid] = msg.body["metrics"]
    return out


def test_agents_configured_with_one_router_attach_to_their_k_and_only_a_lost_routers_move(
        fleet, zctx):
    routers = mesh_of_five(fleet)
    fleet.sink("alerting", routers[:1])
    fleet.sink("registry", routers[:1])
    tail = Tail(zctx, [r["endpoints"]["tail"] for r in routers], [protocol.topic("STATS")])
    names = [f"agent-{n}" for n in range(8)]
    try:
        procs = {n: fleet.agent([routers[i % 5]], n, routers_k=K,
                                spool={"ack_timeout": 0.3, "max_backoff": 1.0})
                 for i, n in enumerate(names)}
        uuids = uuids_of(fleet, names)
        want = {u: expected(u, routers) for u in uuids.values()}
        wait_for(lambda: attachments(routers) == want, 40, 0.2,
                 what="every agent attached to its k routers, and to no other")

        def stats_say_k():
            seen = newest_stats(tail)
            return all(seen.get(u, {}).get("agent.routers.alive") == K
                       and seen[u].get("agent.routers.live") == 5 for u in uuids.values())
        wait_for(stats_say_k, 20, 0.1, what="each agent's STATS: 3 alive of 5 live")

        # a router that some agents have and others not is killed (never r1: the sinks are there)
        gone = max(routers[1:], key=lambda r: min(
            sum(r["id"] in w for w in want.values()), sum(r["id"] not in w for w in want.values())))
        movers = {n for n, u in uuids.items() if gone["id"] in want[u]}
        stayers = set(names) - movers
        assert movers and stayers
        logged = {n: procs[n].log().count("attaching to router") for n in names}
        sender = sorted(movers)[0]
        gone["proc"].kill()
        with Client(config_path=str(fleet.root / f"{sender}.yaml"), timeout=10) as fw:
            msg_id = fw.notify("a router left", severity="warning", source="test")
        rest = [r for r in routers if r is not gone]
        after = {u: expected(u, rest) for u in uuids.values()}
        for n in movers:        # each to its next best: the two it kept and one more
            assert len(after[uuids[n]] & want[uuids[n]]) == K - 1
        for n in stayers:
            assert after[uuids[n]] == want[uuids[n]]
        wait_for(lambda: attachments(rest) == after, 40, 0.2,
                 what="the agents of the killed router on their next best")
        wait_for(lambda: fleet.db_rows("SELECT count(*) FROM notifications WHERE msg_id = ?",
                                       (msg_id,)) == [(1,)], 30, 0.2,
                 what="the NOTIFY recorded")
        # its ACK came back through a router the sender chose: its spool is empty
        wait_for(lambda: newest_stats(tail).get(uuids[sender], {}).get("agent.spool.size") == 0,
                 20, 0.1, what="the sender's spool emptied by the ACK")
        # the others never moved: no new attachment, no link closed by choice
        for n in stayers:
            assert procs[n].log().count("attaching to router") == logged[n], n
            assert "no longer among" not in procs[n].log() and \
                "no longer named" not in procs[n].log(), n
        for n in movers:
            assert procs[n].log().count("attaching to router") <= logged[n] + 1, n
        assert fleet.db_rows("SELECT count(*) FROM notifications WHERE msg_id = ?",
                             (msg_id,)) == [(1,)]
    finally:
        tail.close()


def tick_plugin(fleet):
    folder = fleet.root / "plugins"
    folder.mkdir(exist_ok=True)
    script = folder / "check_tick"
    script.write_text("#!/bin/sh\necho 'TICK OK | ticks=1'\nexit 1\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return folder


def test_run_and_a_scheduler_reach_an_agent_attached_to_three_of_five(fleet, zctx):
    routers = mesh_of_five(fleet)
    fleet.sink("alerting", routers[:1])
    fleet.sink("registry", routers[:1])
    folder = tick_plugin(fleet)
    fleet.agent([routers[0]], routers_k=K, hostname="web-1", plugins={
        "dirs": [str(folder)],
        "checks": [{"name": "tick", "command": "check_tick", "interval": 1, "timeout": 5}]})
    [uuid] = uuids_of(fleet, ["agent"]).values()
    want = expected(uuid, routers)
    wait_for(lambda: attachments(routers).get(uuid) == want, 30, 0.2,
             what="the agent on its three routers")
    op = str(fleet.operator_config(routers))             # asks every router
    wait_for(lambda: any(c["uuid"] == uuid and c["plugin"] == "tick"
                         for c in fleet.status(op, check=False)["checks"]), 20, 0.2,
             what="the registry listing the plugin")

    # fleetwatch run: three routers forward it, two answer 404, which is no failure
    res = fleet.cli("run", "web-1", "tick", "--config", op, "--json")
    doc = json.loads(res.stdout)
    assert set(doc["accepted"]) == want and set(doc["refused"]) == {r["id"] for r in routers} - want
    assert all("404" in why or "not attached" in why or "no agent" in why
               for why in doc["refused"].values()), doc
    res = fleet.cli("run", "web-1", "tick", "--config", op, "--wait", check=False)
    assert res.returncode == 1 and "TICK OK" in res.stdout, res.stdout + res.stderr
    # configured with one router the agent is not on: the others are learnt from its WELCOME
    other = next(r for r in routers if r["id"] not in want)
    lone = fleet.write("lone.yaml", {"routers": [other["endpoints"]["control"]],
                                     "state_url": fleet.state_url, "timeout": 1.0})
    doc = json.loads(fleet.cli("run", "web-1", "tick", "--config", str(lone), "--json").stdout)
    assert set(doc["accepted"]) == want and other["id"] in doc["refused"], doc

    # a scheduler configured with one router that is not the agent's learns the others
    first = next(r for r in routers if r["id"] not in want)
    tail = Tail(zctx, [r["endpoints"]["tail"] for r in routers], [protocol.topic("RESULT")])
    try:
        fleet.scheduler([first])
        results = lambda: {r.message.get("slot") for r in tail.pump()       # noqa: E731
                           if r.message.get("plugin") == "tick" and r.message.get("slot")}
        wait_for(lambda: len(results()) >= 3, 40, 0.2, what="three scheduled slots answered")
    finally:
        tail.close()
