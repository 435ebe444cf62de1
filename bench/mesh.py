"""Convergence of a mesh of routers (SPEC 4.9, issue 20): routers agreeing after a join and
after a leave, and 1,000 agents configured with one router reaching their ``k``.

Real ``fleetwatch router`` processes on 127.0.0.1, five of them started from one seed each
(the previous one), gossiping every ``--interval`` seconds, a router dead after
``--expire-intervals`` of them.

(a) Routers, ``--rounds`` times: a sixth router is started with one seed; the seconds from
    its ready file until every router's view (its MEMBERS answer, as ``fleetwatch routers``
    asks it) lists the same six live; then it is killed (SIGKILL) and the seconds until the
    five left list the same five. Baselines: one gossip interval for a join (the ratio is
    the join in rounds) and the theoretical bound of a leave, ``expire_intervals x
    interval`` (no router can call another dead sooner; the ratio is how close the mesh
    comes to it).
(b) Agents, ``--agent-rounds`` times: ``--agents`` agents, every one configured with the same
    one router (the first), ``routers_k`` ``--k``. 1,000 agent processes do not fit a
    2-core machine, so they run in ``--procs`` processes (this file, ``--role agents``),
    each driving its share of agents with the agent's own link code: per agent an
    ``agent.links.Links``, ``agent.links.Sockets`` (one DEALER per link, a new secret
    routing id each), ``agent.routers.Routers`` (HELLO, WELCOME, heartbeats, liveness,
    reconnects) and its ``agent.attach.Attach`` (``agent.rendezvous.choose``); only the
    spool, the runner and the collectors are left out (a stub outbox sends at once). Each
    agent's loop is shared: one ``zmq.Poller`` per process. Counted from the routers'
    PEERS (every router asked every 0.1 s): the seconds from the processes' start until
    every agent is attached to the seed router (the baseline: admission of 1,000 agents by
    one router), and until every agent is attached to exactly the ``k`` routers
    ``choose(uuid, live, k)`` names and to no other (seed closed when not chosen).

    python bench/mesh.py [--rounds 5] [--interval 1] [--expire-intervals 5]
                         [--agents 1000] [--agent-rounds 3] [--k 3] [--procs 2]
                         [--results bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import collections
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import wait, write_section  # noqa: E402  (bench/results.py)
from support.mesh import agreed, attachments  # noqa: E402  (tests/support/mesh.py)

HEADING = "## Mesh convergence (routers agreeing, agents reaching k)"
POLL = 0.05


# ---------------------------------------------------------------- simulated agents (a role)

def agents_role(seed: str, uuids: list[str], k: int, heartbeat: float) -> int:
    """Drive ``uuids``' link logic (the agent's classes) until standard input closes."""
    import zmq

    from agent.links import Link, Links, Sockets
    from agent.routers import Routers
    from support.dealers import FDS_PER_SOCKET, raise_fd_limit

    raise_fd_limit(len(uuids) * (k + 2) * FDS_PER_SOCKET + 256)
    ctx = zmq.Context(io_threads=1)
    ctx.set(zmq.MAX_SOCKETS, len(uuids) * (k + 2) + 256)
    poller = zmq.Poller()
    owners: dict = {}                    # socket -> (its agent's Routers, its link)

    class OwnedSockets(Sockets):
        """The agent's Sockets, telling the shared loop which agent owns each DEALER."""

        def open(self, link):
            sock = super().open(link)
            owners[sock] = (self.routers, link)
            return sock

        def close(self, link):
            owners.pop(self.by_link.get(link.endpoint), None)
            super().close(link)

    class SendAtOnce:
        """The outbox without a spool: HELLO and HEARTBEAT go out at once."""

        def __init__(self, sockets):
            self.sockets = sockets

        def send(self, link, msg) -> bool:
            return self.sockets.send(link, msg)

        def ack(self, msg) -> None:
            pass

        def durable(self, router, durable) -> None:
            pass

    class NoPlugins:
        @staticmethod
        def own_wire() -> list:
            return []

    agents = []
    for uuid in uuids:
        links = Links([seed], lambda e, learned: Link(e, heartbeat, learned=learned))
        sockets = OwnedSockets(ctx, uuid, poller)
        routers = Routers(uuid, uuid, os.urandom(8).hex(), heartbeat, links, sockets,
                          SendAtOnce(sockets), NoPlugins(), collections.Counter(),
                          lambda msg, endpoint: None, time.monotonic, time.time, k=k)
        sockets.routers = routers
        agents.append(routers)
    poller.register(sys.stdin.fileno(), zmq.POLLIN)
    print("started", flush=True)
    while True:
        events = dict(poller.poll(20))
        if sys.stdin.fileno() in events and not sys.stdin.readline():
            break
        now = time.monotonic()
        for sock in events:
            owner = owners.get(sock)
            if owner is not None:
                owner[0].drain(sock, owner[1], now)
        now = time.monotonic()
        for routers in agents:
            routers.timers(now)
    for routers in agents:
        routers.sockets.close_all()
    ctx.term()
    return 0


# ---------------------------------------------------------------- the measuring side

def start_mesh(fleet, n: int, interval: float, expire: int) -> list[dict]:
    routers: list[dict] = []
    for i in range(1, n + 1):
        seeds = [routers[-1]["endpoints"]["control"]] if routers else []
        routers.append(fleet.router(f"r{i}", log_level="WARNING", mesh={
            "interval": interval, "expire_intervals": expire, "seeds": seeds}))
    wait(lambda: agreed(routers), 60, "the five routers agreeing")
    return routers


def router_rounds(fleet, routers: list[dict], rounds: int, interval: float,
                  expire: int) -> tuple[list[float], list[float]]:
    joins, leaves = [], []
    for n in range(rounds):
        extra = fleet.router(f"join{n}", log_level="WARNING", mesh={
            "interval": interval, "expire_intervals": expire,
            "seeds": [routers[n % len(routers)]["endpoints"]["control"]]})
        ready = time.monotonic()
        six = routers + [extra]
        while not agreed(six):
            time.sleep(POLL)
        joins.append(time.monotonic() - ready)
        killed = time.monotonic()
        extra["proc"].kill()
        while not agreed(routers):
            time.sleep(POLL)
        leaves.append(time.monotonic() - killed)
        print(f"round {n + 1}: join {joins[-1]:.2f} s, leave {leaves[-1]:.2f} s", flush=True)
    return joins, leaves


def agent_round(routers: list[dict], n_agents: int, k: int, procs: int, heartbeat: float,
                tag: str, timeout: float) -> tuple[float, float, float]:
    """One round of (b): seconds until all are attached to the seed, until all are attached
    to their k, and until the routers not chosen (the seed) have forgotten them."""
    from agent.rendezvous import choose
    seed = routers[0]
    uuids = [str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"mesh-bench/{tag}/{i}"))
             for i in range(n_agents)]
    by_endpoint = {r["endpoints"]["agents"]: r["id"] for r in routers}
    want = {u: {by_endpoint[e] for e in choose(u, by_endpoint, k)} for u in uuids}
    share = (n_agents + procs - 1) // procs
    children = []
    for p in range(procs):
        part = uuids[p * share:(p + 1) * share]
        children.append(subprocess.Popen(
            [sys.executable, __file__, "--role", "agents", "--seed", seed["endpoints"]["agents"],
             "--k", str(k), "--heartbeat", str(heartbeat), "--uuids", ",".join(part)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    try:
        for child in children:
            if child.stdout.readline().strip() != "started":
                raise SystemExit("an agents process did not start")
        started = time.monotonic()
        at_seed = at_k = only_k = None
        while only_k is None:
            if time.monotonic() - started > timeout:
                raise SystemExit(f"timed out after {timeout}s: agents not on their k")
            seen = attachments(routers)
            now = time.monotonic()
            if at_seed is None and all(seed["id"] in seen.get(u, ()) for u in uuids):
                at_seed = now - started
            if at_k is None and all(want[u] <= seen.get(u, set()) for u in uuids):
                at_k = now - started
            if at_k is not None and all(seen.get(u) == want[u] for u in uuids):
                only_k = now - started
            time.sleep(0.1)
        at_seed = at_k if at_seed is None else at_seed      # none seen between two polls
        print(f"agents {tag}: all on the seed after {at_seed:.2f} s, all on their {k} after "
              f"{at_k:.2f} s, on those only after {only_k:.2f} s", flush=True)
        return at_seed, at_k, only_k
    finally:
        for child in children:          # each exits when its standard input closes
            try:
                child.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.communicate()


def med(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} s (min {min(values):.2f}, max {max(values):.2f})"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--expire-intervals", type=int, default=5)
    p.add_argument("--agents", type=int, default=1000)
    p.add_argument("--agent-rounds", type=int, default=3)
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--heartbeat", type=float, default=2.0)
    p.add_argument("--results", type=Path)
    p.add_argument("--role", choices=("main", "agents"), default="main")
    p.add_argument("--seed", help=argparse.SUPPRESS)
    p.add_argument("--uuids", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role == "agents":
        return agents_role(args.seed, args.uuids.split(","), args.k, args.heartbeat)

    from support.fleet import Fleet
    command = "python bench/mesh.py " + " ".join(argv if argv is not None else sys.argv[1:])
    describe = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=ROOT,
                              capture_output=True, text=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="fw-mesh-") as tmp:
        fleet = Fleet(Path(tmp))
        try:
            routers = start_mesh(fleet, 5, args.interval, args.expire_intervals)
            joins, leaves = router_rounds(fleet, routers, args.rounds, args.interval,
                                          args.expire_intervals)
            seeds, ks, onlys = [], [], []
            for n in range(args.agent_rounds):
                at_seed, at_k, only_k = agent_round(routers, args.agents, args.k, args.procs,
                                                    args.heartbeat, f"{os.getpid()}-{n}",
                                                    timeout=300)
                seeds.append(at_seed)
                ks.append(at_k)
                onlys.append(only_k)
                # the routers forget this round's agents (expiry) before the next
                wait(lambda: not attachments(routers), 60, "the routers forgetting the agents")
        finally:
            fleet.stop_all()
    bound = args.expire_intervals * args.interval
    join_m, leave_m = statistics.median(joins), statistics.median(leaves)
    seed_m, k_m = statistics.median(seeds), statistics.median(ks)
    rows = [
        "| measure | median (min, max) | baseline | ratio |",
        "|---|---|---|---|",
        f"| 5 routers agreeing after a sixth joins | {med(joins)} | one gossip interval, "
        f"{args.interval:g} s | {join_m / args.interval:.2f} |",
        f"| 5 routers agreeing after one is killed | {med(leaves)} | expire_intervals x "
        f"interval, {bound:g} s | {leave_m / bound:.2f} |",
        f"| {args.agents:,} agents configured with one router: all attached to it | "
        f"{med(seeds)} | | |",
        f"| {args.agents:,} agents configured with one router: all on their k = {args.k} "
        f"of 5 | {med(ks)} | all attached to the seed | {k_m / seed_m:.2f} |",
        f"| ... and on those only (the seed router expired the agents that closed it) | "
        f"{med(onlys)} | router expiry, 3 x heartbeat = {3 * args.heartbeat:g} s after "
        f"the close | |",
    ]
    load = os.getloadavg()[0]
    body = "\n".join(rows)
    notes = (NOTES.format(rounds=args.rounds, agent_rounds=args.agent_rounds,
                          agents=args.agents, procs=args.procs, k=args.k,
                          heartbeat=args.heartbeat, interval=args.interval,
                          expire=args.expire_intervals)
             + f" Code: {describe}. Load average {load:.1f} at the end.")
    print(body)
    if args.results:
        write_section(args.results, HEADING, command, body, notes)
    return 0


NOTES = """Method (bench/mesh.py): five real routers on 127.0.0.1, each started with the
previous one as its only seed, gossip every {interval:g} s, dead after {expire} intervals.
(a) {rounds} rounds: a sixth router started with one seed, timed from its ready file until
every router's MEMBERS answer lists the same six live (polled every 50 ms); then killed
(SIGKILL), timed until the five left list the same five. (b) {agent_rounds} rounds of
{agents} agents, every one configured with the same one router and routers_k {k},
heartbeat {heartbeat:g} s: 1,000 agent processes do not fit the machine, so {procs}
processes each drive their share with the agent's own link code (agent.links Links and
Sockets, agent.routers Routers, agent.attach Attach: one DEALER per link, HELLO, WELCOME,
heartbeats, liveness, the choice by rendezvous hashing), without spool, runner or
collectors, one zmq.Poller per process; counted from every router's PEERS every 0.1 s,
from the processes' start: all attached to the seed (the baseline, one router admitting
them all), all attached to the k routers agent.rendezvous.choose names, and attached to
those only (a router lists an agent that closed its link until it expires it: the agent
sends nothing when it closes a link it did not choose)."""


if __name__ == "__main__":
    sys.exit(main())
