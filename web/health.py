"""The fleet's own health for the console: the latest counters of every router, sink and
scheduler, the routers' drops per agent, and the agents whose spools or STATS queues
dropped, as their STATS pass on the routers' tails.

:class:`Health` subscribes to ``STATS/`` on every router's tail (the topic prefix is
filtered on the routers: nothing else reaches the console) in a thread of its own, and keeps
the last STATS of each back-end process (router, sink or scheduler, as the routers' stamp
says: :func:`fleetwatch.protocol.reporter`; an agent's STATS claiming such a ``source`` is
an agent's, SPEC 4.3) and, of the agents, only those whose drop counters are not zero
(:data:`AGENT_DROPS`): a fleet of 10,000 agents costs a dictionary of the few that drop. What it has not heard from for
:data:`FORGET` seconds is forgotten. A tail subscriber that falls behind loses messages at
the routers' high-water mark (SPEC: by design), never slows a router or a sink; the console
receives about 1,000 STATS a second at 10,000 agents (one every 10 s each), drained in
batches (:data:`BATCH`): bench/web.py measures what that costs.

Nothing here is needed for the other pages: a console whose tails cannot be reached shows
the health page saying so.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import zmq

from fleetwatch import protocol
from fleetwatch.protocol import ProtocolError

log = logging.getLogger(__name__)

#: an agent's counters that say it lost something (its spool full, its STATS queue full,
#: metric names of local processes refused past ``local.max_metric_names``)
AGENT_DROPS = ("agent.spool.dropped", "agent.stats.dropped", "agent.runs.malformed",
               "agent.intake.names_refused")
#: seconds after which a process not heard from is forgotten
FORGET = 600.0
#: seconds between two askings of the tail endpoints (routers join the mesh: SPEC 4.9)
RESOLVE_EVERY = 30.0
#: most agents kept with drops (the worst are shown; a bound on memory)
MAX_AGENTS = 10_000
#: seconds the thread lets STATS gather between two drains: woken once a batch rather than
#: once a message, it costs a third of the CPU at 1,000 STATS a second (bench/web.py)
BATCH = 0.2
#: STATS the subscription holds while it waits (a few seconds of 10,000 agents')
QUEUE = 10_000


_SOURCE = b'"source":'
_METRICS = b'"metrics":{'
_DROP_KEYS = tuple(b'"' + k.encode() + b'":' for k in AGENT_DROPS)


def quiet(body: bytes) -> bool:
    """Whether a STATS body (as agents encode it: compact JSON) is an agent's whose drop
    counters are all 0 or absent: what the health page does not keep, told by looking for
    the keys in the bytes (a thirtieth of decoding them). Anything else (a ``source``, a
    counter not 0, another encoding) is not quiet, and is decoded."""
    if not (body[:1] == b"{" and body[-1:] == b"}" and _METRICS in body) or _SOURCE in body:
        return False
    for key in _DROP_KEYS:
        at = body.find(key)
        if at < 0:
            continue
        at += len(key)
        if body[at:at + 1] != b"0" or body[at + 1:at + 2] not in (b",", b"}"):
            return False
    return True


class Health:
    """The latest STATS of the fleet's processes, from the routers' tails.

    ``endpoints()`` gives the tail endpoints (the operator config's ``tail``, or those the
    routers' WELCOME names); ``keys`` the CURVE keys of the operator (or None)."""

    def __init__(self, endpoints: Callable[[], list[str]], keys=None, clock=time.time,
                 monotonic=time.monotonic):
        self.endpoints, self.keys, self.clock, self.monotonic = endpoints, keys, clock, monotonic
        self.backends: dict[tuple[str, str], dict] = {}
        self.agents: dict[str, dict] = {}
        #: (router, agent uuid, TYPE, sink type) -> the drops the router reported, summed
        self.router_drops: dict[tuple, dict] = {}
        self.connected: list[str] = []
        self.received = self.bad = 0
        self.started = clock()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="health", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    # ------------------------------------------------------------ the thread
    def _run(self) -> None:
        ctx = zmq.Context.instance()
        sub = ctx.socket(zmq.SUB)
        sub.linger = 0
        sub.rcvhwm = QUEUE
        if self.keys is not None:
            self.keys.apply(sub)
        sub.setsockopt(zmq.SUBSCRIBE, b"STATS/")
        next_resolve = 0.0
        try:
            while not self._stop.is_set():
                if self.monotonic() >= next_resolve:
                    next_resolve = self.monotonic() + RESOLVE_EVERY
                    self._connect(sub)
                if not sub.poll(500):
                    continue
                for _ in range(QUEUE):          # a batch, then look at the stop flag again
                    try:
                        frames = sub.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self.take(frames)
                self._stop.wait(BATCH)
        finally:
            sub.close(0)

    def _connect(self, sub) -> None:
        try:
            found = self.endpoints()
        except Exception as e:  # a router down, a bad key: the page says so, the thread lives
            log.warning("health: cannot learn the routers' tail endpoints: %s", e)
            return
        new = [e for e in found if e not in self.connected]
        for endpoint in new:
            try:
                sub.connect(endpoint)
            except zmq.ZMQError as e:
                log.warning("health: cannot connect to tail %s: %s", endpoint, e)
                continue
            self.connected.append(endpoint)
        if new and self.connected:
            log.info("health: following STATS on %s", ", ".join(self.connected))

    # ------------------------------------------------------------ what is kept
    def take(self, frames: list[bytes]) -> None:
        """One tail message: kept if it is a back-end process's STATS or an agent's with
        drops; a malformed one is counted. An agent's STATS whose drop counters are 0 (the
        most of them by far) is passed over without decoding (:func:`quiet`)."""
        if len(frames) in (3, 4) and frames[0].startswith(b"STATS/") and quiet(frames[2]):
            self.received += 1
            if self.agents:                     # its counters were reset: it restarted
                uuid = frames[0].split(b"/")[1].decode("utf-8", "replace")
                with self._lock:
                    self.agents.pop(uuid, None)
            return
        try:
            relayed = protocol.decode_tail(frames)
        except ProtocolError:
            self.bad += 1
            return
        msg = relayed.message
        metrics = msg.get("metrics")
        if msg.type != "STATS" or not isinstance(metrics, dict):
            self.bad += 1
            return
        self.received += 1
        now = self.clock()
        source = protocol.reporter(relayed)         # the stamp's word, not the body's
        hostname = msg.get("hostname") if isinstance(msg.get("hostname"), str) else None
        numbers = {str(k)[:200]: v for k, v in metrics.items()
                   if isinstance(v, (int, float)) and not isinstance(v, bool)}
        with self._lock:
            if source is not None:
                last = self.backends.get((source, relayed.uuid))
                self.backends[(source, relayed.uuid)] = {
                    "source": source, "id": relayed.uuid, "hostname": hostname,
                    "version": msg.get("version")[:64]
                    if isinstance(msg.get("version"), str) else None,
                    "router": relayed.router, "heard": now, "metrics": numbers,
                    # its reporting interval as seen (a fault once silent for 3 of them)
                    "every": now - last["heard"] if last else None,
                    # the report before: how fast its counters grow (web/tiles.py)
                    "before": last["metrics"] if last else None,
                    "before_heard": last["heard"] if last else None}
                drops = msg.get("drops")
                if source == "router" and isinstance(drops, list):
                    self._router_drops(relayed.uuid, drops[:500], now)
                return
            dropped = {k: numbers[k] for k in AGENT_DROPS if numbers.get(k)}
            if dropped:
                if relayed.uuid in self.agents or len(self.agents) < MAX_AGENTS:
                    self.agents[relayed.uuid] = {"uuid": relayed.uuid, "hostname": hostname,
                                                 "heard": now, "drops": dropped}
            else:
                self.agents.pop(relayed.uuid, None)

    def _router_drops(self, router: str, drops: list, now: float) -> None:
        """Add a router's report of its drops per agent (each entry is reported once)."""
        for d in drops:
            if not isinstance(d, dict) or not isinstance(d.get("count"), int):
                continue
            key = (router, str(d.get("uuid"))[:64], str(d.get("type"))[:16],
                   str(d.get("sink"))[:32])
            entry = self.router_drops.get(key)
            if entry is None:
                if len(self.router_drops) >= MAX_AGENTS:
                    continue
                entry = self.router_drops[key] = {
                    "router": key[0], "uuid": key[1], "type": key[2], "sink": key[3],
                    "count": 0, "heard": now}
            entry["count"] += max(0, d["count"])
            entry["heard"] = now

    def snapshot(self) -> dict:
        """What the health page shows: ``router_stats``, ``sinks``, ``schedulers`` (each:
        source, id, hostname, version (None from a process before 1.0.0), router, heard,
        metrics), ``router_drops`` (per router, its
        drops per agent), ``agents`` with drops (the most first), and the tail's
        ``connected`` endpoints, ``received`` and ``bad`` counts."""
        now = self.clock()
        with self._lock:
            for key in [k for k, v in self.backends.items() if now - v["heard"] > FORGET]:
                del self.backends[key]
            for key in [k for k, v in self.agents.items() if now - v["heard"] > FORGET]:
                del self.agents[key]
            backends = sorted(self.backends.values(), key=lambda b: (b["source"], b["id"]))
            for key in [k for k, v in self.router_drops.items() if now - v["heard"] > FORGET]:
                del self.router_drops[key]
            agents = sorted(self.agents.values(), key=lambda a: -sum(a["drops"].values()))
            drops = sorted(self.router_drops.values(), key=lambda d: -d["count"])
        return {"router_stats": [b for b in backends if b["source"] == "router"],
                "sinks": [b for b in backends if b["source"] == "sink"],
                "schedulers": [b for b in backends if b["source"] == "scheduler"],
                "router_drops": drops[:200], "router_drops_total": len(drops),
                "agents": agents[:200], "agents_total": len(agents),
                "connected": list(self.connected), "received": self.received,
                "bad": self.bad, "since": self.started}
