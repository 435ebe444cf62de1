"""``fleetwatch status --problems`` over the state real alerting sinks wrote, on SQLite and on
PostgreSQL: two alerting sink objects on one database with a fake clock (a switch and two
racks behind it going silent, a host with failing checks), and the real ``ack`` and
``downtime`` commands run in-process on that clock. The unhandled problems are the switch's
DOWN and the one failing check nobody took; the racks are UNREACHABLE because of the switch,
the acknowledged check and the one in a downtime are handled, and say how. (The same with
real processes: tests/integration/test_acks_e2e.py.)"""

from __future__ import annotations

import functools
import json

import pytest

from support.clock import Clock
from support.threads import in_threads
from fleetwatch import protocol
from fleetwatch.protocol import Relayed

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from sinks.registry import RegistrySink  # noqa: E402
from fleetwatch.store import db  # noqa: E402
from support import alertsink  # noqa: E402
from support.alertsink import QUICK, T0, beat, command, result  # noqa: E402

SW, RACK1, RACK2, WEB = "5a" * 16, "10" * 16, "11" * 16, "a1" * 16
NAMES = {SW: "sw", RACK1: "rack-10", RACK2: "rack-11", WEB: "web-1"}


def hello(url):
    registry = RegistrySink(db.engine(url))
    registry.start()
    registry.write([Relayed(u, "r1", protocol.make("HELLO", u, hostname=name, heartbeat=1.0))
                    for u, name in NAMES.items()])
    registry.write([Relayed(WEB, "r1", protocol.make(
        "REGISTER", WEB, name="agent", hostname="web-1",
        plugins=[{"name": p, "interval": 60, "timeout": 10}
                 for p in ("load", "disk", "cpu", "mem")]))])
    registry.close()


sink = functools.partial(alertsink.sink, **QUICK, renotify_interval=0, host_timeout=10,
                         dependencies=[{"hosts": "rack-*", "parents": ["sw"]}])


@pytest.fixture
def op(url, fleet):
    fleet.state_url = url
    return fleet.write("fleetwatch.yaml", {"routers": ["tcp://127.0.0.1:9"],
                                           "state_url": url, "timeout": 0.2})


def test_problems_leave_out_the_unreachable_the_acknowledged_and_the_downtimed(url, op):
    hello(url)
    clock = Clock(T0)
    a, b = sink(url, clock), sink(url, clock)
    try:
        for i in range(5):                                  # everyone heard until T0+4
            clock.now = T0 + i
            a.write([beat(u) for u in NAMES])
        a.write([result(2, clock.now, "load"), result(1, clock.now, "disk"),
                 result(0, clock.now, "cpu")])
        for i in range(5, 30):                              # only web-1 still beats
            clock.now = T0 + i
            a.write([beat(WEB)])
            in_threads(a.tick, b.tick)
        assert command("ack", op, clock, "add", "web-1", "disk", "--comment", "on it",
                       "--by", "alice")[0] == 0
        assert command("downtime", op, clock, "add", "web-1", "mem", "--for", "1h",
                       "--comment", "upgrade")[0] == 0
        b.write([result(2, clock.now, "mem")])              # held by the downtime
        code, out = command("status", op, clock, "--problems", "--json")
        doc = json.loads(out)
        assert code == 69                                   # the routers' exit status
        assert [(p["hostname"], p["kind"], p["check"], p["state"]) for p in doc["problems"]] == [
            ("sw", "host", None, "DOWN"), ("web-1", "check", "load", "CRITICAL")]
        assert doc["handled"] == 4                          # 2 racks, disk (ack), mem (downtime)
        _, out = command("status", op, clock, "--json")
        doc = json.loads(out)
    finally:
        a.close()
        b.close()
    agents = {x["hostname"]: x for x in doc["agents"]}
    checks = {x["plugin"]: x for x in doc["checks"]}
    assert [(agents[n]["state"], agents[n]["handled"]["unreachable"])
            for n in ("sw", "rack-10", "rack-11", "web-1")] == [
        ("DOWN", None), ("UNREACHABLE", "sw"), ("UNREACHABLE", "sw"), ("UP", None)]
    assert checks["disk"]["handled"]["ack"]["by"] == "alice"
    assert checks["mem"]["handled"]["downtime"]["comment"] == "upgrade"
    assert not any(checks["load"]["handled"].values())
