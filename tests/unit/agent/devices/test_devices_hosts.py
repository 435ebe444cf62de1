"""A device as a host, on the poller's side (agent/devices/hosts.py, service.py), with an
injected clock and no router: what it declares, what a poll and a trap make it send, when
it heartbeats, and how a RUN for one of its poller-made checks is answered."""

from __future__ import annotations

import collections
import threading

import pytest
import zmq

from agent.config import AgentConfig
from agent.devices import poll as polled
from agent.devices.hosts import ALIVE_INTERVALS, DeviceHost, DeviceSpool, Shared
from agent.devices.notifications import Trap
from agent.devices.service import FIRST_SPREAD, TICK, Devices, phase
from agent.execute import Workers
from agent.spool import Spool
from agent.spool.acks import FleetRoutes
from fleetwatch import protocol
from fleetwatch.config import build

pytestmark = pytest.mark.timeout(30)

POLLER = "0f3c4a2e-9d7b-4c1e-8a5f-2b6d9e1c7a40"


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def made(tmp_path):
    """(make(device settings) -> DeviceHost, the clock, the devices' spool)."""
    secret = tmp_path / "community"
    secret.write_text("public\n")
    clock = Clock()
    spool = Spool(str(tmp_path / "devices-spool.db"))
    ctx = zmq.Context()
    spooled = []

    def make(**device) -> DeviceHost:
        settings = {"name": "sw1", "address": "192.0.2.10", "interval": 60,
                    "snmp": {"version": "2c", "community_file": str(secret)}, **device}
        cfg = build(AgentConfig, {"routers": ["tcp://127.0.0.1:5555"],
                                  "state_dir": str(tmp_path),
                                  "devices": {"hosts": [settings]}}, "agent.yaml")
        shared = Shared(cfg, POLLER, "poller-1", "i1", ctx, zmq.Poller(), None,
                        DeviceSpool(spool, threading.Lock(), lambda: spooled.append(1)),
                        FleetRoutes(spool.fallback), Workers(1, lambda job, stop: None),
                        collections.Counter(), {}, clock, lambda: 1.7e9 + clock.now, lambda: 0.5)
        return DeviceHost(cfg.devices.hosts[0], shared)

    yield make, clock, spool
    spool.close()
    ctx.term()


def interface(index: int, name: str, oper: int = 1, admin: int = 1, octets: int = 0):
    return polled.Interface(index=index, name=name, admin_status=admin, oper_status=oper,
                            speed=1_000_000_000, hc_in_octets=octets, hc_out_octets=octets)


def good(at: float, *interfaces, uptime: int = 100_000) -> polled.Poll:
    return polled.Poll(at=at, system=polled.System(uptime=uptime, name="sw1"),
                       interfaces={i.index: i for i in interfaces}, duration=0.02,
                       answered=True)


def queued(host: DeviceHost, type_: str) -> list[protocol.Message]:
    return [m for m in host.outbox.queue if m.type == type_]


def spooled(spool: Spool, type_: str) -> list[protocol.Message]:
    return [m for m in spool.due(now=2e9) if m.type == type_]


def test_a_device_is_its_pollers_uuid_at_its_name_and_declares_its_checks_passive(made):
    make, _, _ = made
    host = make(checks=[{"type": "tcp", "port": 22}])
    assert host.uuid == f"{POLLER}@sw1"
    assert host.routers.role == "device" and host.routers.parents == ("poller-1",)
    wire = {p["name"]: p for p in host.own_wire()}
    assert wire["tcp"] == {"name": "tcp", "interval": 60.0, "timeout": 10.0}
    assert wire["snmp"] == {"name": "snmp", "interval": 60.0, "timeout": 4.0, "passive": True}
    register = host.register()
    assert register.get("hostname") == "sw1" and register.get("parents") == ["poller-1"]


def test_a_poll_sends_stats_and_results_and_declares_its_interfaces_again(made):
    make, clock, spool = made
    host = make()
    host.polled(good(clock.now, interface(1, "lo"), interface(2, "Gi0/1", oper=2)))
    stats, = queued(host, "STATS")
    assert stats.uuid == host.uuid and stats.get("hostname") == "sw1"
    assert "uptime_seconds" in stats.get("metrics")
    results = {m.get("plugin"): m for m in queued(host, "RESULT")}
    assert set(results) == {"snmp", "if_lo", "if_Gi0_1"}
    assert results["if_Gi0_1"].get("status") == 2
    assert results["if_lo"].get("command_id").startswith("p:")
    seqs = [m.get("seq") for m in queued(host, "RESULT")]
    assert seqs == sorted(seqs) and len(set(seqs)) == 3          # ordered, as RUN answers
    register, = spooled(spool, "REGISTER")
    passive = [p["name"] for p in register.get("plugins") if p.get("passive")]
    assert passive == ["snmp", "if_lo", "if_Gi0_1"]
    host.polled(good(clock.now + 60, interface(1, "lo"), interface(2, "Gi0/1", oper=2),
                     uptime=106_000))
    assert spooled(spool, "REGISTER") == []             # the same interfaces: not again


def test_it_heartbeats_while_it_answers_and_stops_two_intervals_after(made):
    make, clock, _ = made
    host = make(interval=10)
    assert not host.answering()                         # no poll yet: silent
    host.polled(good(clock.now, interface(1, "lo")))
    assert host.answering()
    clock.now += 10
    host.polled(polled.Poll(at=clock.now, error="no answer", fault=polled.TIMEOUT))
    assert host.answering()                             # one lost poll: the check's problem
    snmp = [m for m in queued(host, "RESULT") if m.get("plugin") == "snmp"][-1]
    assert snmp.get("status") == 2
    clock.now += ALIVE_INTERVALS * 10 - 10 + 0.01
    assert not host.answering()


def test_a_run_for_a_passive_check_is_answered_with_its_latest_result(made):
    make, clock, _ = made
    host = make()
    run = protocol.make("RUN", POLLER, command_id="s:" + "a" * 24, plugin="if_lo", slot=60.0)
    host.on_run(run, "tcp://127.0.0.1:5555")
    first, = queued(host, "RESULT")
    assert first.get("status") == 3 and first.get("command_id") == "s:" + "a" * 24
    host.polled(good(clock.now, interface(1, "lo")))
    host.outbox.queue.clear()
    host.on_run(run, "tcp://127.0.0.1:5555")
    answer, = queued(host, "RESULT")
    assert (answer.get("plugin"), answer.get("status"), answer.get("slot")) == ("if_lo", 0, 60.0)
    assert "up" in answer.get("output")


def test_a_link_down_trap_gives_the_interfaces_check_at_once(made):
    make, clock, _ = made
    host = make()
    host.polled(good(clock.now, interface(1, "lo"), interface(4, "eth0")))
    host.outbox.queue.clear()
    trap = Trap(address="192.0.2.10", port=50000, device="sw1", version="2c", kind="trap",
                oid="1.3.6.1.6.3.1.1.5.3", name="linkDown", uptime=1.0, varbinds=(),
                if_index=4, admin_status=1, oper_status=2)
    assert host.trapped(trap)                            # a poll should follow
    result, = queued(host, "RESULT")
    assert (result.get("plugin"), result.get("status")) == ("if_eth0", 2)
    notify = host.trap_notify(trap)
    assert notify.uuid == host.uuid and notify.get("severity") == "error"
    assert notify.get("text").startswith("SNMPv2c trap from 192.0.2.10: linkDown")
    unknown = Trap(**{**trap.__dict__, "if_index": 99})
    host.outbox.queue.clear()
    host.trapped(unknown)                                # an ifIndex it never polled
    assert queued(host, "RESULT") == []


def test_a_device_alive_by_its_check_heartbeats_on_that_checks_results(made):
    make, clock, _ = made
    host = make(snmp=None, checks=[{"type": "http", "name": "home"}], alive="http_home")
    assert {p["name"] for p in host.own_wire()} == {"http_home"}
    result = protocol.make("RESULT", host.uuid, command_id="s:1", plugin="http_home",
                           status=1, output="HTTP WARNING")
    host.ran(result)
    assert host.answering()
    clock.now += 2 * 60 + 1
    assert not host.answering()


def test_the_devices_spool_shows_a_device_nothing_due_and_says_when_it_takes_one(tmp_path):
    spool = Spool(str(tmp_path / "s.db"))
    told = []
    view = DeviceSpool(spool, threading.Lock(), lambda: told.append(1))
    view.add([protocol.make("NOTIFY", POLLER + "@sw1", severity="info", text="x")])
    assert told == [1] and len(spool) == 1
    assert view.due() == [] and view.next_due() is None and view.next_retry() is None
    assert view.max_messages == spool.max_messages        # the rest is the spool's
    spool.close()


def test_first_polls_are_spread_and_timers_rounded_to_a_tick():
    shares = [phase(f"{POLLER}@sw{i}", 60) for i in range(200)]
    assert all(0 <= s < FIRST_SPREAD for s in shares)
    assert max(shares) - min(shares) > FIRST_SPREAD / 2
    assert all(s < 2 for s in (phase(f"{POLLER}@r{i}", 2) for i in range(50)))
    fake = type("D", (), {"next_at": 10.01, "next_due": None, "spool": type(
        "S", (), {"next_retry": staticmethod(lambda: None)})(), "wall": staticmethod(lambda: 0)})
    assert Devices.deadline(fake, 0.0) == pytest.approx(10.0 + TICK)


def test_polls_keep_to_their_slot_of_the_interval_whatever_came_before():
    """After the first poll (within FIRST_SPREAD s) each device polls in its own slot of
    the interval: a thousand devices spread over it, not bunched into the first seconds."""
    from agent.devices.service import next_poll, share
    uuid = f"{POLLER}@sw7"
    slot = share(uuid) * 60
    assert next_poll(uuid, 60, 0.0, phase(uuid, 60)) % 60 == pytest.approx(slot)
    after = next_poll(uuid, 60, 0.0, 1000.0)
    assert after >= 1030 and after % 60 == pytest.approx(slot)
    assert next_poll(uuid, 60, 0.0, after) == pytest.approx(after + 60)
    starts = sorted(next_poll(f"{POLLER}@d{i}", 60, 0.0, 100.0) % 60 for i in range(1000))
    assert max(b - a for a, b in zip(starts, starts[1:])) < 2       # no gap of the interval


def test_a_secret_gone_since_the_config_was_read_stops_the_start_with_one_line(tmp_path):
    """The community file was readable at load and removed before start: a StartError
    naming the file, never a traceback (and never the secret)."""
    from agent.devices.service import StartError
    secret = tmp_path / "community"
    secret.write_text("s3cret\n")
    cfg = build(AgentConfig, {"routers": ["tcp://127.0.0.1:5555"], "state_dir": str(tmp_path),
                              "devices": {"hosts": [{"name": "sw1", "address": "127.0.0.1",
                                                     "snmp": {"community_file": str(secret)}}]}},
                "agent.yaml")
    secret.unlink()
    ctx = zmq.Context()
    devices = Devices(cfg, POLLER, "poller-1", "i1", ctx, zmq.Poller(), None,
                      lambda job, stop: None, Clock(), lambda: 1.7e9, lambda: 0.5)
    try:
        with pytest.raises(StartError, match=str(secret)) as caught:
            devices.start()
        assert "s3cret" not in str(caught.value)
    finally:
        devices.close()
        ctx.term()
