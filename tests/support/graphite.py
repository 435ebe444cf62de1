"""The graphite sink against a real carbon-cache (the ``carbon`` fixture of
tests/conftest.py): the sink started with the tests' settings, a raw agent sending STATS,
and waits for points that carbon has written."""

from __future__ import annotations

import time
import uuid as uuidlib
from typing import TYPE_CHECKING

import zmq

from agent.links import connection_id
from fleetwatch import protocol
from sinks.graphite.paths import node, tag_value
from support.fleet import wait_for

if TYPE_CHECKING:
    from fleetwatch.cli.demo.carbon import Carbon


#: the graphite sink's ``prefix`` in these tests
PREFIX = "test"


def graphite_sink(fleet, routers, port: int, name: str = "sink-graphite", **settings):
    extra = {k: settings.pop(k) for k in ("stats_interval",) if k in settings}
    section = {"port": port, "prefix": PREFIX, "flush_interval": 0.1, "reconnect_min": 0.05,
               "reconnect_max": 0.2, "flush_at_exit": 1.0, **settings}
    return fleet.sink("graphite", routers, name=name, graphite=section,
                      **{"stats_interval": 1.0, **extra})


class DealerAgent:
    """A raw DEALER speaking as an agent to a real router, welcomed as ``hostname``."""

    def __init__(self, ctx, info: dict, hostname: str):
        self.uuid = uuidlib.uuid4().hex
        self.hostname = hostname
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.linger = 0
        self.sock.routing_id = connection_id()
        self.sock.connect(info["endpoints"]["agents"])
        self.send("HELLO", hostname=hostname, heartbeat=30.0, role="agent")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.sock.poll(100) and self.sock.recv_multipart()[1] == b"WELCOME":
                return
        raise AssertionError("router sent no WELCOME")

    def send(self, type_: str, ts: float | None = None, **fields) -> protocol.Message:
        clock = (lambda: ts) if ts is not None else time.time
        msg = protocol.make(type_, self.uuid, clock=clock, **fields)
        self.sock.send_multipart(protocol.encode(msg))
        return msg

    def stats(self, metrics: dict, ts: float | None = None) -> protocol.Message:
        return self.send("STATS", ts=ts, hostname=self.hostname, metrics=metrics)


def file_of(carbon: Carbon, series: str):
    """The whisper file of a path (``a.b.c``) or of a tagged series (``a.b;host=h``)."""
    return carbon.tagged_path_of(series) if ";" in series else carbon.path_of(series)


def warm_up(carbon: Carbon, agent: DealerAgent, timeout: float = 20.0,
            tagged: bool = False) -> None:
    """Send STATS until one lands: the sink is connected to the router and carbon writes
    (``tagged``: the sink has ``tags: true``)."""
    path = file_of(carbon, f"{PREFIX}.warmup;host={tag_value(agent.hostname)}" if tagged
                   else f"{PREFIX}.{node(agent.hostname)}.warmup")
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "no warm-up STATS reached carbon"
        agent.stats({"warmup": 1})
        time.sleep(0.1)


def points(carbon: Carbon, metric: str, want: int = 1, timeout: float = 15.0) -> dict:
    """The points of ``metric`` (a path or a tagged series) once it has at least ``want``
    of them."""
    path = file_of(carbon, metric)
    from fleetwatch.cli.demo.carbon import read_points
    got: dict = {}

    def enough():
        nonlocal got
        if not path.exists():
            return False
        got = read_points(path, timeout=timeout)
        return len(got) >= want
    wait_for(enough, timeout, 0.05, f"{want} points of {metric} (have {len(got)})")
    return got


def value_at(carbon: Carbon, metric: str, second: int, timeout: float = 15.0) -> float:
    """The value of ``metric`` at ``second``, once carbon has written it."""
    from fleetwatch.cli.demo.carbon import read_points
    path = file_of(carbon, metric)
    wait_for(lambda: path.exists() and second in read_points(path), timeout, 0.05,
             f"{metric} at {second}")
    return read_points(path)[second]
