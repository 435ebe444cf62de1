"""``fleetwatch status --problems`` over the state real alerting sinks wrote, on SQLite and on
PostgreSQL: two alerting sink objects on one database with a fake clock (a switch and two
racks behind it going silent, a host with failing checks), and the real ``ack`` and
``downtime`` commands run in-process on that clock. The unhandled problems are the switch's
DOWN and the one failing check nobody took; the racks are UNREACHABLE because of the switch,
the acknowledged check and the one in a downtime are handled, and say how. (The same with
real processes: tests/integration/test_acks_e2e.py.)"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from support.clock import Clock
from support.threads import in_threads
from fleetwatch import cli, protocol
from fleetwatch.config import build
from fleetwatch.protocol import Relayed

pytest.importorskip("sqlalchemy")
pytestmark = pytest.mark.timeout(120)

from sinks.alerting.config import AlertingConfig  # noqa: E402
from sinks.alerting.sink import AlertingSink  # noqa: E402
from sinks.registry import RegistrySink  # noqa: E402
from sinks.state import db  # noqa: E402

T0 = 1_700_000_000.0
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


def sink(url, clock) -> AlertingSink:
    s = AlertingSink(db.engine(url), clock, build(AlertingConfig, {
        "host_timeout": 10, "renotify_interval": 0, "flap_detection": False,
        "max_check_attempts": 1, "dependencies": [{"hosts": "rack-*", "parents": ["sw"]}]},
        "sink.yaml", "alerting"), deliver=False)
    s.start()
    return s


def beat(uuid: str) -> Relayed:
    return Relayed(uuid, "r1", protocol.make("HEARTBEAT", uuid, interval=1.0))


def result(plugin: str, status: int, started: float) -> Relayed:
    return Relayed(WEB, "r1", protocol.make(
        "RESULT", WEB, command_id=f"s:{plugin}{int(started)}", plugin=plugin, status=status,
        output=f"{plugin} status {status}", started=started))


def command(name, op, clock, *argv) -> tuple[int, str]:
    """``fleetwatch NAME ARGV --config OP`` in-process on ``clock``: (exit status, stdout)."""
    module, _ = cli.entry(name)
    out = io.StringIO()
    args = cli.parser_for(name).parse_args([*argv, "--config", str(op)])
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = module.run(args, clock)
    return code, out.getvalue()


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
        a.write([result("load", 2, clock.now), result("disk", 1, clock.now),
                 result("cpu", 0, clock.now)])
        for i in range(5, 30):                              # only web-1 still beats
            clock.now = T0 + i
            a.write([beat(WEB)])
            in_threads(a.tick, b.tick)
        assert command("ack", op, clock, "add", "web-1", "disk", "--comment", "on it",
                       "--by", "alice")[0] == 0
        assert command("downtime", op, clock, "add", "web-1", "mem", "--for", "1h",
                       "--comment", "upgrade")[0] == 0
        b.write([result("mem", 2, clock.now)])              # held by the downtime
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
