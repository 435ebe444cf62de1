"""One process of simulated agents for bench/fleetsim.py, speaking FWP/1 (fleetwatch/SPEC.md).

    python bench/fleetsim_agents.py SETTINGS_JSON

Each simulated agent is its own DEALER (a new secret routing id per connection) to one
router's ``agents`` endpoint: HELLO (with its plugins), HEARTBEAT every ``heartbeat``
seconds, STATS of ``metrics`` values every ``stats`` seconds, its REGISTER of ``plugins``
plugins through a spool until the registry ACKs it, and, for one agent in ``notify_every``,
a NOTIFY every ``notify_interval`` seconds kept in the spool and resent (``retry``, ``dup``)
after 2 s, doubling up to 60 s, until the alerting sink ACKs it. A RUN is answered at once
with a RESULT (a repeated command id with a copy of the first, as SPEC 4.5 says). An ERROR
401 makes an attached agent say HELLO again; a connection silent for 3 heartbeat intervals
(or a HELLO unanswered that long) is closed and reopened after a jittered backoff doubling
from 0.5 s to 30 s, as the agent does (SPEC 5).

The socket wake-ups go through one epoll over the sockets' ZMQ_FD (level-triggered, each
socket drained while ZMQ_EVENTS says POLLIN, after every receive and send), so a wake-up
costs what is ready, not what is open. The descriptor limit and the contexts of at most 1,000
sockets are those of tests/support/dealers.py.

Standard input takes commands, one a line: ``phase NAME`` (latencies are kept per phase
from then on), ``quiet`` (no new HEARTBEAT, STATS, NOTIFY or HELLO, no
RESULT for a RUN, no reconnection; spooled messages are still resent until ACKed), ``stop`` (print the totals and exit; also at end of input). Standard
output gets a JSON line every half second (``attached``, ``spool``, ``phase``) and, at
the end, one with ``final``: messages sent (on attached connections) and received by type,
losses, reconnects and latency percentiles per phase.
"""

from __future__ import annotations

import heapq
import json
import os
import random
import select
import sys
import time
from array import array
from collections import Counter, deque
from pathlib import Path

import zmq

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from agent.links import connection_id  # noqa: E402
from fleetsim_report import summary  # noqa: E402  (bench/, this script's directory)
from fleetwatch import protocol  # noqa: E402
from support.dealers import FDS_PER_SOCKET, PER_CONTEXT, raise_fd_limit  # noqa: E402

SIG = protocol.SIGNATURE
LIVENESS = 3
RECONNECT_MIN, RECONNECT_MAX = 0.5, 30.0
ACK_TIMEOUT, MAX_BACKOFF = 2.0, 60.0
REPORT_EVERY = 0.5
RESULTS_KEPT = 8            # command ids remembered per agent for repeated RUNs
HB, STATS, NOTE, RESEND, CONNECT = range(5)
POLLIN = zmq.POLLIN


class Agent:
    __slots__ = ("n", "uuid", "endpoint", "sock", "fd", "attached", "hello_at", "heard",
                 "beats", "spool", "registered", "results", "backoff", "welcomed")

    def __init__(self, n: int, uuid: str, endpoint: str):
        self.n, self.uuid, self.endpoint = n, uuid, endpoint
        self.sock = None
        self.fd = -1
        self.attached = False
        self.hello_at = self.heard = 0.0
        self.beats: deque = deque()        # send times of the heartbeats not yet answered
        self.spool: dict[str, list] = {}   # msg_id -> [message, first sent, retry]
        self.registered = False
        self.results: dict[str, list] = {}  # command_id -> [RESULT message, repeats]
        self.backoff = RECONNECT_MIN
        self.welcomed = 0


class Fleet:
    """The agents of this process and their one loop."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.hb = float(cfg["heartbeat"])
        self.stats_every = float(cfg["stats"])
        self.sent, self.received, self.errors, self.counts = Counter(), Counter(), Counter(), Counter()
        self.phase = "attach"
        self.lat: dict[str, dict[str, array]] = {}
        self.quiet = False
        self.contexts: list[zmq.Context] = []
        self.epoll = select.epoll()
        self.by_fd: dict[int, Agent] = {}
        self.timers: list = []
        self.seq = 0
        self.metrics = json.dumps({f"sim.metric{i:02d}": float(i) for i in range(cfg["metrics"])})
        self.plugins = [{"name": f"sim{i}", "interval": cfg["check_interval"], "timeout": 10.0}
                        for i in range(cfg["plugins"])]
        self.keys = self._keys()
        first, routers = cfg["first"], cfg["routers"]
        self.agents = [Agent(n, f"{cfg['prefix']}-{n:05d}", routers[n % len(routers)])
                       for n in range(first, first + cfg["count"])]

    def _keys(self):
        if not self.cfg.get("curve"):
            return None
        from fleetwatch import security
        return security.read_certificate(self.cfg["router_public"])

    # ---------------------------------------------------------------- helpers
    def sample(self, kind: str, value: float) -> None:
        phase = self.lat.setdefault(self.phase, {})
        values = phase.get(kind)
        if values is None:
            values = phase[kind] = array("d")
        values.append(value)

    def at(self, due: float, kind: int, agent: Agent, arg=None) -> None:
        self.seq += 1
        heapq.heappush(self.timers, (due, self.seq, kind, agent, arg))

    # ---------------------------------------------------------------- connections
    def connect(self, agent: Agent, now: float) -> None:
        ctx = self.contexts[agent.n % len(self.contexts)]
        sock = ctx.socket(zmq.DEALER)
        sock.linger = 0
        sock.routing_id = connection_id()
        if self.keys is not None:
            from fleetwatch import security
            own = security.read_certificate(
                os.path.join(self.cfg["agent_keys"], agent.uuid + security.SECRET_SUFFIX),
                need_secret=True)
            security.client(sock, own, self.keys)
        sock.connect(agent.endpoint)
        agent.sock, agent.fd = sock, sock.getsockopt(zmq.FD)
        self.by_fd[agent.fd] = agent
        self.epoll.register(agent.fd, select.EPOLLIN)
        agent.attached, agent.heard = False, now
        self.say_hello(agent, now)

    def say_hello(self, agent: Agent, now: float) -> None:
        agent.hello_at = now
        agent.beats.clear()
        frames = protocol.encode(protocol.make(
            "HELLO", agent.uuid, hostname=agent.uuid, heartbeat=self.hb, role="agent",
            plugins=self.plugins or None, instance=self.cfg["prefix"]))
        self.send(agent, frames, "HELLO", counted=True)

    def reconnect(self, agent: Agent, now: float) -> None:
        self.counts["reconnects"] += 1
        self.close(agent)
        delay = agent.backoff * random.uniform(0.75, 1.25)
        agent.backoff = min(RECONNECT_MAX, agent.backoff * 2)
        self.at(now + delay, CONNECT, agent)

    def close(self, agent: Agent) -> None:
        if agent.sock is None:
            return
        self.epoll.unregister(agent.fd)
        del self.by_fd[agent.fd]
        agent.sock.close(0)
        agent.sock, agent.fd, agent.attached = None, -1, False
        agent.beats.clear()

    def send(self, agent: Agent, frames, type_: str, counted: bool = False) -> None:
        try:
            agent.sock.send_multipart(frames, zmq.NOBLOCK)
        except zmq.Again:
            self.counts[f"blocked.{type_}"] += 1
            return
        if agent.attached or counted:
            self.sent[type_] += 1
        else:
            self.counts[f"sent_unattached.{type_}"] += 1
        self.drain(agent)

    # ---------------------------------------------------------------- receiving
    def drain(self, agent: Agent) -> None:
        sock = agent.sock
        while sock is not None and sock.getsockopt(zmq.EVENTS) & POLLIN:
            self.handle(agent, sock.recv_multipart(zmq.NOBLOCK))
            sock = agent.sock

    def handle(self, agent: Agent, frames: list[bytes]) -> None:
        now = time.monotonic()
        agent.heard = now
        type_ = frames[1].decode("ascii", "replace") if len(frames) == 3 else "?"
        self.received[type_] += 1
        if type_ == "HEARTBEAT":
            if agent.beats:
                self.sample("heartbeat_rtt", now - agent.beats.popleft())
            else:
                self.counts["heartbeat_unmatched"] += 1
        elif type_ == "WELCOME":
            self.welcome(agent, now)
        elif type_ == "ACK":
            self.ack(agent, json.loads(frames[2]), now)
        elif type_ == "RUN":
            self.run(agent, json.loads(frames[2]))
        elif type_ == "ERROR":
            status = json.loads(frames[2]).get("status")
            self.errors[str(status)] += 1
            if status == protocol.HELLO_REQUIRED and agent.attached and not self.quiet:
                self.counts["forgotten_401"] += 1
                agent.attached = False
                self.say_hello(agent, now)

    def welcome(self, agent: Agent, now: float) -> None:
        if not agent.attached:
            self.sample("hello_to_welcome", now - agent.hello_at)
        agent.attached, agent.backoff = True, RECONNECT_MIN
        agent.welcomed += 1
        if not agent.registered and not any(e[0].type == "REGISTER" for e in agent.spool.values()):
            self.spool(agent, protocol.make("REGISTER", agent.uuid, name="agent",
                                            plugins=self.plugins, heartbeat=self.hb,
                                            hostname=agent.uuid), now)

    def ack(self, agent: Agent, body: dict, now: float) -> None:
        sink = body.get("sink") or "?"
        for msg_id in body.get("msg_ids") or ():
            self.counts[f"acks.{sink}"] += 1
            entry = agent.spool.get(msg_id)
            owner = "registry" if entry is not None and entry[0].type == "REGISTER" else "alerting"
            if sink != owner:
                continue
            if entry is None:
                self.counts["acks_repeated"] += 1
                continue
            del agent.spool[msg_id]
            kind = entry[0].type
            self.counts[f"acked.{kind}"] += 1
            if kind == "REGISTER":
                agent.registered = True
            else:
                self.sample("notify_to_ack", now - entry[1])

    def run(self, agent: Agent, body: dict) -> None:
        if self.quiet:
            self.counts["runs_unanswered_quiet"] += 1
            return
        command_id = body.get("command_id", "")
        kept = agent.results.get(command_id)
        if kept is not None:
            kept[1] += 1
            self.counts["runs_repeated"] += 1
            self.send(agent, protocol.encode(protocol.resend(kept[0], kept[1])), "RESULT")
            return
        slot = body.get("slot")
        wall = time.time()
        if isinstance(slot, (int, float)):
            self.sample("slot_to_run", wall - slot)
        msg = protocol.make("RESULT", agent.uuid, command_id=command_id,
                            plugin=body.get("plugin", ""), status=0, output="OK - simulated",
                            perfdata=[{"label": "time", "value": 0.001, "uom": "s", "warn": None,
                                       "crit": None, "min": None, "max": None}],
                            slot=slot, started=wall, duration=0.0)
        if len(agent.results) >= RESULTS_KEPT:
            agent.results.pop(next(iter(agent.results)))
        agent.results[command_id] = [msg, 0]
        self.send(agent, protocol.encode(msg), "RESULT")

    # ---------------------------------------------------------------- spool
    def spool(self, agent: Agent, msg, now: float) -> None:
        agent.spool[msg.msg_id] = [msg, now, 0]
        self.counts[f"spooled.{msg.type}"] += 1
        if agent.attached:
            self.send(agent, protocol.encode(msg), msg.type)
        self.at(now + ACK_TIMEOUT, RESEND, agent, msg.msg_id)

    def resend(self, agent: Agent, msg_id: str, now: float) -> None:
        entry = agent.spool.get(msg_id)
        if entry is None:
            return
        entry[2] += 1
        if agent.attached:
            self.counts[f"resent.{entry[0].type}"] += 1
            self.send(agent, protocol.encode(protocol.resend(entry[0], entry[2])), entry[0].type)
        self.at(now + min(MAX_BACKOFF, ACK_TIMEOUT * 2 ** entry[2]), RESEND, agent, msg_id)

    # ---------------------------------------------------------------- timers
    def beat(self, agent: Agent, now: float) -> None:
        self.at(now + self.hb, HB, agent)
        if agent.sock is None or self.quiet:
            return
        if now - (agent.heard if agent.attached else agent.hello_at) > LIVENESS * self.hb:
            self.counts["silent_router" if agent.attached else "hello_unanswered"] += 1
            self.reconnect(agent, now)
            return
        if agent.attached and not self.quiet:
            beats = agent.beats
            while beats and now - beats[0] > LIVENESS * self.hb:    # never answered
                beats.popleft()
                self.counts["heartbeat_unanswered"] += 1
            beats.append(now)
            body = ('{"msg_id":"%s","uuid":"%s","ts":%r,"interval":%r}'
                    % (os.urandom(16).hex(), agent.uuid, time.time(), self.hb)).encode()
            self.send(agent, [SIG, b"HEARTBEAT", body], "HEARTBEAT")

    def stats(self, agent: Agent, now: float) -> None:
        self.at(now + self.stats_every, STATS, agent)
        if agent.attached and not self.quiet:
            body = ('{"msg_id":"%s","uuid":"%s","ts":%r,"hostname":"%s","metrics":%s}'
                    % (os.urandom(16).hex(), agent.uuid, time.time(), agent.uuid,
                       self.metrics)).encode()
            self.send(agent, [SIG, b"STATS", body], "STATS")

    def note(self, agent: Agent, now: float) -> None:
        self.at(now + self.cfg["notify_interval"], NOTE, agent)
        if agent.attached and not self.quiet:
            self.spool(agent, protocol.make("NOTIFY", agent.uuid, severity="info",
                                            text="simulated notification"), now)

    def fire(self, now: float) -> None:
        timers = self.timers
        while timers and timers[0][0] <= now:
            due, _, kind, agent, arg = heapq.heappop(timers)
            if kind == HB:
                self.sample("timer_lag", now - due)     # how far behind this loop runs
                self.beat(agent, now)
            elif kind == STATS:
                self.stats(agent, now)
            elif kind == NOTE:
                self.note(agent, now)
            elif kind == RESEND:
                self.resend(agent, arg, now)
            elif kind == CONNECT:
                self.connect(agent, now)

    # ---------------------------------------------------------------- the loop
    def start(self) -> None:
        count = len(self.agents)
        for _ in range(max(1, -(-count // PER_CONTEXT))):
            ctx = zmq.Context(io_threads=1)
            ctx.set(zmq.MAX_SOCKETS, 2 * PER_CONTEXT + 8)
            self.contexts.append(ctx)
        now = time.monotonic()
        spread = max(1.0, count / self.cfg["connect_rate"])
        for i, agent in enumerate(self.agents):
            offset = spread * i / count
            self.at(now + offset, CONNECT, agent)
            self.at(now + offset + self.hb * random.random(), HB, agent)
            self.at(now + offset + self.stats_every * random.random(), STATS, agent)
            if self.cfg["notify_every"] and agent.n % self.cfg["notify_every"] == 0:
                self.at(now + offset + self.cfg["notify_interval"] * random.random(), NOTE, agent)

    def loop(self) -> None:
        stdin = sys.stdin.fileno()
        os.set_blocking(stdin, False)
        self.epoll.register(stdin, select.EPOLLIN)
        pending = b""
        next_report = time.monotonic()
        while True:
            now = time.monotonic()
            wait = min(self.timers[0][0] if self.timers else now + 1, next_report) - now
            for fd, _ in self.epoll.poll(max(0.0, wait)):
                if fd == stdin:
                    chunk = os.read(stdin, 4096)
                    if not chunk:
                        return
                    pending += chunk
                    while b"\n" in pending:
                        line, pending = pending.split(b"\n", 1)
                        if self.command(line.decode().split()):
                            return
                    continue
                agent = self.by_fd.get(fd)
                if agent is not None:
                    self.drain(agent)
            now = time.monotonic()
            self.fire(now)
            if now >= next_report:
                self.report()
                next_report = now + REPORT_EVERY

    def command(self, words: list[str]) -> bool:
        if words[:1] == ["phase"] and len(words) == 2:
            self.phase = words[1]
        elif words == ["quiet"]:
            self.quiet = True
        elif words == ["stop"]:
            return True
        return False

    def report(self) -> None:
        attached = sum(1 for a in self.agents if a.attached)
        spool = sum(len(a.spool) for a in self.agents)
        print(json.dumps({"t": time.time(), "attached": attached, "spool": spool,
                          "phase": self.phase}), flush=True)

    def final(self) -> dict:
        unacked = Counter(e[0].type for a in self.agents for e in a.spool.values())
        return {"agents": len(self.agents), "sent": dict(self.sent),
                "received": dict(self.received), "errors": dict(self.errors),
                "counts": dict(self.counts), "unacked": dict(unacked),
                "attached": sum(1 for a in self.agents if a.attached),
                "latency": {phase: {kind: summary(values) for kind, values in kinds.items()}
                            for phase, kinds in self.lat.items()}}

    def close_all(self) -> None:
        for agent in self.agents:
            self.close(agent)
        for ctx in self.contexts:
            ctx.term()


def main(argv: list[str]) -> int:
    cfg = json.loads(argv[0])
    needed = cfg["count"] * FDS_PER_SOCKET + 64
    limit = raise_fd_limit(needed)
    if limit < needed:
        print(f"fleetsim_agents: {cfg['count']} agents need about {needed} descriptors, the "
              f"limit is {limit}", file=sys.stderr)
        return 77
    fleet = Fleet(cfg)
    fleet.start()
    try:
        fleet.loop()
        print(json.dumps({"final": fleet.final()}), flush=True)
    finally:
        fleet.close_all()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
