"""A router that is behind its inbound queue (issue 31, 13): a real, bound relay driven a
step at a time with clocks the test moves, and a real agent connection.

Under CPU contention a router's queue of agent messages can be seconds long. Judged by the
clock, agents whose heartbeats wait in that queue looked silent: they were expired, their
queued heartbeats answered 401, and they were sent back through admission, a loop that did
not converge at 10,000 agents. Silence is judged up to the time the queue was last emptied.
"""

from __future__ import annotations

import pytest
import zmq

from fleetwatch import protocol
from fleetwatch.config import build
from router.config import RouterConfig
from router.relay import Relay
from support.clock import Clock
from support.zmqio import expect

pytestmark = pytest.mark.timeout(30)

UUID = "c" * 32
CONFIG = {"id": "r-backlog", "expiry_intervals": 3.0,
          "bind": {"agents": "tcp://127.0.0.1:*", "control": "tcp://127.0.0.1:*",
                   "tail": "tcp://127.0.0.1:*", "sinks": {"alerting": "tcp://127.0.0.1:*"}},
          "routes": {"HEARTBEAT": ["alerting"]}}


@pytest.fixture
def relay():
    clock, monotonic = Clock(), Clock(1000.0)
    r = Relay(build(RouterConfig, CONFIG), clock=clock, monotonic=monotonic,
              fqdn=lambda: "localhost")
    r.bind()
    yield r, clock, monotonic
    r.close()


@pytest.fixture
def agent(relay):
    r = relay[0]
    ctx = zmq.Context.instance()
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(r.endpoints["agents"])
    yield sock
    sock.close(linger=0)


def queued(r: Relay) -> None:
    """Wait (bounded) until the agents socket has a message to read."""
    assert r.agents.poll(5000, zmq.POLLIN), "the agent's message never reached the router"


def test_agents_whose_heartbeats_wait_in_the_queue_are_not_expired(relay, agent):
    r, clock, monotonic = relay
    agent.send_multipart(protocol.encode(protocol.make(
        "HELLO", UUID, hostname="h", heartbeat=1.0, role="agent")))
    queued(r)
    r.read_agents(clock())
    expect(agent, "WELCOME")
    assert r.peers.by_uuid(UUID) is not None

    # the router falls 10 s behind: the agent kept beating, its heartbeat is queued unread
    clock.advance(10.0)
    monotonic.advance(10.0)
    agent.send_multipart(protocol.encode(protocol.make("HEARTBEAT", UUID, interval=1.0)))
    queued(r)
    r.sweep()
    assert r.peers.by_uuid(UUID) is not None, "expired with its heartbeat in the queue"
    r.read_agents(clock())
    assert expect(agent, "HEARTBEAT").uuid == "r-backlog"      # answered, not 401
    assert r.counters.received[b"HEARTBEAT"] == 1

    # then really silent: once the queue is found empty, its silence counts
    clock.advance(3.5)
    monotonic.advance(3.5)
    r.read_agents(clock())                                      # nothing queued
    r.sweep()
    assert r.peers.by_uuid(UUID) is None
