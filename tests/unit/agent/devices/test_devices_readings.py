"""What a device's polls say (agent/devices/readings.py): metrics, checks and events from
two polls, without snmpd (the polls are made here, as agent/devices/snmp.py fills them)."""

import dataclasses

import pytest

from agent.devices import poll as polled, readings
from agent.devices.readings import CRITICAL, OK, UNKNOWN, WARNING, Readings
from plugins.output import parse

pytestmark = pytest.mark.timeout(30)

GIGABIT = 1_000_000_000


def interface(index=1, name="eth0", **fields):
    values = dict(admin_status=1, oper_status=1, speed=GIGABIT, high_speed=1000,
                  hc_in_octets=0, hc_out_octets=0, in_octets=0, out_octets=0, in_errors=0,
                  out_errors=0, in_discards=0, out_discards=0)
    values.update(fields)
    return polled.Interface(index=index, name=name, **values)


def poll(at=100.0, uptime=360_000, interfaces=(), **fields):
    """A good poll at ``at`` seconds, sysUpTime ``uptime`` hundredths."""
    return polled.Poll(at=at, system=polled.System(uptime=uptime, name="sw1"),
                     interfaces={i.index: i for i in interfaces}, duration=0.05,
                     answered=True, **fields)


def later(first, seconds=60.0, interfaces=(), **fields):
    """A poll ``seconds`` after ``first``, its uptime advanced as much."""
    return poll(at=first.at + seconds, uptime=first.system.uptime + int(seconds * 100),
                interfaces=interfaces, **fields)


def checks(reading):
    return {c.name: c for c in reading.checks}


def test_the_first_poll_gives_states_and_speeds_but_no_rates():
    r = Readings().update(poll(interfaces=[interface(hc_in_octets=10**9)]))
    assert r.metrics == {"uptime_seconds": 3600.0, "poll_seconds": 0.05,
                         "if.eth0.oper_up": 1, "if.eth0.speed_bps": GIGABIT}
    c = checks(r)
    assert (c["snmp"].status, c["if_eth0"].status) == (OK, OK)
    assert c["if_eth0"].output == "IF OK - eth0 up, 1 Gb/s"
    assert c["snmp"].output == "SNMP OK - answered in 0.050s, 1 interfaces, sysName sw1"
    assert r.events == []


def test_rates_come_from_the_64_bit_counters_per_second():
    device = Readings()
    first = poll(interfaces=[interface(hc_in_octets=1000, hc_out_octets=5000, in_errors=3,
                                       out_discards=10)])
    device.update(first)
    second = later(first, 60, interfaces=[interface(
        hc_in_octets=1000 + 7_500_000, hc_out_octets=5000 + 750_000, in_errors=9,
        out_discards=10, in_octets=123)])       # the 32-bit ones are not looked at
    m = device.update(second).metrics
    assert m["if.eth0.in_bps"] == 1_000_000         # 7.5 MB in 60 s
    assert m["if.eth0.out_bps"] == 100_000
    assert m["if.eth0.in_errors_ps"] == 0.1
    assert m["if.eth0.out_discards_ps"] == 0
    assert m["if.eth0.utilisation_percent"] == pytest.approx(0.1)
    c = checks(device.update(later(second, 60, interfaces=[interface(
        hc_in_octets=second.interfaces[1].hc_in_octets + 15_000_000,
        hc_out_octets=second.interfaces[1].hc_out_octets, in_errors=9)])))["if_eth0"]
    assert c.output == "IF OK - eth0 up, 1 Gb/s, in 2 Mb/s, out 0 b/s"
    assert [(p["label"], p["value"], p["min"], p["max"]) for p in c.perfdata] == \
        [("in_bps", 2_000_000, 0, GIGABIT), ("out_bps", 0, 0, GIGABIT)]
    # the line a Nagios plugin would print parses back into the same perfdata
    assert parse(c.line.encode()).perfdata == c.perfdata
    assert parse(c.line.encode()).text == c.output


def test_the_32_bit_counters_stand_in_when_the_device_has_no_64_bit_ones():
    device = Readings()
    first = poll(interfaces=[interface(hc_in_octets=None, hc_out_octets=None,
                                       in_octets=2**32 - 1000, out_octets=100)])
    device.update(first)
    m = device.update(later(first, 10, interfaces=[interface(
        hc_in_octets=None, hc_out_octets=None, in_octets=500, out_octets=200)])).metrics
    assert m["if.eth0.in_bps"] == 1500 * 8 / 10      # wrapped once: 2^32 added
    assert m["if.eth0.out_bps"] == 100 * 8 / 10
    assert device.counts["counter_wraps"] == 1


def test_a_rate_is_taken_as_counted_whatever_the_speed_claims():
    device = Readings()                               # Linux's lo says 10 Mbit/s
    first = poll(interfaces=[interface(name="lo", speed=10**7, hc_in_octets=0)])
    device.update(first)
    m = device.update(later(first, 1, interfaces=[interface(
        name="lo", speed=10**7, hc_in_octets=10**8)])).metrics
    assert m["if.lo.in_bps"] == 8 * 10**8 and m["if.lo.utilisation_percent"] == 8000


@pytest.mark.parametrize("before, after, why", [
    ({"hc_in_octets": 10**12}, {"hc_in_octets": 5}, "counter_resets"),      # 64-bit: reset
    ({"hc_in_octets": None, "in_octets": 10**6},                            # 32-bit, lower
     {"hc_in_octets": None, "in_octets": 5}, "counter_resets"),             # half: reset
    ({"hc_in_octets": None, "in_octets": 2**32 - 10, "speed": 10**7},       # a wrap would
     {"hc_in_octets": None, "in_octets": 2**31, "speed": 10**7},            # be past the
     "rates_impossible"),                                                   # speed: reset
    ({"in_errors": 100}, {"in_errors": 3}, "counter_resets"),               # "clear counters"
])
def test_a_counter_that_cannot_have_moved_so_gives_no_rate(before, after, why):
    device = Readings()
    first = poll(interfaces=[interface(**before)])
    device.update(first)
    m = device.update(later(first, 60, interfaces=[interface(**after)])).metrics
    metric = "if.eth0.in_errors_ps" if "in_errors" in before else "if.eth0.in_bps"
    assert metric not in m
    assert all(v >= 0 for v in m.values())
    assert device.counts[why] == 1


def test_a_reboot_is_an_event_and_gives_no_rates():
    device = Readings()
    first = poll(uptime=8_640_000, interfaces=[interface(hc_in_octets=10**9)])  # a day up
    device.update(first)
    # 60 s later the device says it has been up 20 s: it rebooted about 20 s ago, and its
    # counters (lower or not) say nothing about the minute
    r = device.update(poll(at=first.at + 60, uptime=2000,
                           interfaces=[interface(hc_in_octets=10**9 + 10**6)]))
    assert [(e.kind, e.severity) for e in r.events] == [("reboot", "warning")]
    assert r.events[0].text.startswith("rebooted about 20s ago: sysUpTime 20s, was 1d 0h")
    assert "if.eth0.in_bps" not in r.metrics and r.metrics["uptime_seconds"] == 20
    assert device.counts["reboots"] == 1


def test_a_reboot_shorter_than_the_interval_is_seen_too():
    device = Readings()
    first = poll(uptime=10_000)                          # up 100 s
    device.update(first)
    # 60 s later it should say 160 s: it says 130 s, so it rebooted (the slack is 3.3 s)
    assert device.update(poll(at=first.at + 60, uptime=13_000)).events
    assert not Readings().read(first, poll(at=first.at + 60, uptime=15_800)).events


def test_sys_uptime_wrapping_after_497_days_is_no_reboot():
    device = Readings()
    first = poll(uptime=2**32 - 3000)                    # 30 s before the wrap
    device.update(first)
    r = device.update(poll(at=first.at + 60, uptime=3000))
    assert r.events == [] and device.counts["uptime_wraps"] == 1


@pytest.mark.parametrize("admin, oper, status, text", [
    (1, 1, OK, "IF OK - Gi0/1 (uplink to core) up"),
    (1, 2, CRITICAL, "IF CRITICAL - Gi0/1 (uplink to core) down"),
    (1, 7, CRITICAL, "IF CRITICAL - Gi0/1 (uplink to core) lowerLayerDown"),
    (1, 6, CRITICAL, "IF CRITICAL - Gi0/1 (uplink to core) notPresent"),
    (1, 5, OK, "IF OK - Gi0/1 (uplink to core) dormant"),
    (1, 3, WARNING, "IF WARNING - Gi0/1 (uplink to core) testing"),
    (1, 4, UNKNOWN, "IF UNKNOWN - Gi0/1 (uplink to core) unknown"),
    (1, None, UNKNOWN, "IF UNKNOWN - Gi0/1 (uplink to core) unknown"),
    (2, 2, OK, "IF OK - Gi0/1 (uplink to core) admin down"),       # never an alert
    (2, 1, OK, "IF OK - Gi0/1 (uplink to core) admin down"),
    (None, 2, CRITICAL, "IF CRITICAL - Gi0/1 (uplink to core) down (admin status unknown)"),
])
def test_an_interface_check_follows_its_admin_and_oper_status(admin, oper, status, text):
    r = Readings().update(poll(interfaces=[interface(
        3, "Gi0/1", alias="uplink to core", admin_status=admin, oper_status=oper, speed=0,
        high_speed=0)]))
    check = checks(r)["if_Gi0_1"]
    assert (check.status, check.output) == (status, text)
    assert ("if.Gi0_1.oper_up" in r.metrics) == (oper is not None)


def test_interface_names_become_distinct_path_nodes():
    device = Readings()
    found = [interface(5, "Gi0/1"), interface(9, "Gi0.1"), interface(12, "Gi0_1"),
             interface(2, None, descr="Port 2 \\x1b[31m"), interface(7, None, descr=None),
             interface(8, "x" * 80), interface(1, "")]
    r = device.update(poll(interfaces=found))
    assert device.interface_nodes({i.index: i for i in found}) == {
        1: "if1", 2: "Port_2_x1b_31m", 5: "Gi0_1", 7: "if7", 8: "x" * 48, 9: "Gi0_1_9",
        12: "Gi0_1_12"}
    assert {c.name for c in r.checks} == {"snmp", "if_if1", "if_Port_2_x1b_31m", "if_Gi0_1",
                                          "if_if7", "if_" + "x" * 48, "if_Gi0_1_9",
                                          "if_Gi0_1_12"}
    assert device.counts["name_collisions"] >= 2
    assert all(len(c.name) <= 64 for c in r.checks)


def test_include_exclude_and_the_bound_choose_the_interfaces():
    found = {i: interface(i, name) for i, name in enumerate(
        ["lo", "Gi0/1", "Gi0/2", "Gi0/3", "Vlan10", "Gi0/4"], start=1)}
    device = Readings(include=["Gi*", "Vlan*"], exclude=["Gi0/3"], max_interfaces=3)
    assert device.interface_nodes(found) == {2: "Gi0_1", 3: "Gi0_2", 5: "Vlan10"}
    assert device.counts["interfaces_dropped"] == 1              # Gi0/4, past the bound


def test_a_failed_poll_gives_the_reachability_check_and_keeps_the_last_good_poll():
    device = Readings()
    first = poll(interfaces=[interface(hc_in_octets=0)])
    device.update(first)
    timed_out = polled.Poll(at=first.at + 60, error="10.0.0.1:161: no SNMP answer",
                          fault=polled.TIMEOUT, duration=2.0)
    r = device.update(timed_out)
    assert r.metrics == {} and r.events == []
    assert [(c.name, c.status, c.output) for c in r.checks] == \
        [("snmp", CRITICAL, "SNMP CRITICAL - 10.0.0.1:161: no SNMP answer")]
    refused = dataclasses.replace(timed_out, fault=polled.AUTH, error="wrong digest")
    assert device.update(refused).checks[0].status == UNKNOWN      # answered, unreadable
    # the next good poll's rates run from the last good one, two minutes back
    r = device.update(later(first, 120, interfaces=[interface(hc_in_octets=1_200_000)]))
    assert r.metrics["if.eth0.in_bps"] == 80_000
    assert device.counts["polls_failed"] == 2


def test_speed_comes_from_if_high_speed_past_if_speed_s_ceiling():
    fast = interface(speed=2**32 - 1, high_speed=40_000)
    assert readings.interface_speed(fast) == 40 * GIGABIT
    assert readings.interface_speed(interface(speed=100_000_000)) == 100_000_000
    assert readings.interface_speed(interface(speed=0, high_speed=0)) is None
    r = Readings().update(poll(interfaces=[fast]))
    assert checks(r)["if_eth0"].output == "IF OK - eth0 up, 40 Gb/s"


def test_processors_storage_and_extra_oids():
    storage = {
        1: polled.Storage(1, "Physical memory", "1.3.6.1.2.1.25.2.1.2", 1024, 1000, 250),
        10: polled.Storage(10, "Swap space", "1.3.6.1.2.1.25.2.1.3", 1024, 0, 0),
        36: polled.Storage(36, "/", "1.3.6.1.2.1.25.2.1.4", 4096, 100, 50),
        40: polled.Storage(40, "/var/lib", "1.3.6.1.2.1.25.2.1.4", 4096, 10, 1),
        41: polled.Storage(41, "/var.lib", "1.3.6.1.2.1.25.2.1.4", 4096, 10, None),
        50: polled.Storage(50, "odd", None, None, None, None),
    }
    device = Readings()
    m = device.update(poll(processors={196608: 10, 196609: 30}, storage=storage, extra={
        "temperature": 41, "env.fan": "1200", "word": "hello", "missing": None,
        "not.a.number": "nan"})).metrics
    assert {k: v for k, v in m.items() if k.startswith("cpu")} == {
        "cpu.0.load_percent": 10, "cpu.1.load_percent": 30, "cpu.load_percent": 20}
    assert {k: v for k, v in m.items() if k.startswith("storage")} == {
        "storage.Physical_memory.size_bytes": 1024000,
        "storage.Physical_memory.used_bytes": 256000,
        "storage.Physical_memory.used_percent": 25,
        "storage.Swap_space.size_bytes": 0, "storage.Swap_space.used_bytes": 0,
        "storage.root.size_bytes": 409600, "storage.root.used_bytes": 204800,
        "storage.root.used_percent": 50,
        "storage.var_lib.size_bytes": 40960, "storage.var_lib.used_bytes": 4096,
        "storage.var_lib.used_percent": 10,
        "storage.var_lib_41.size_bytes": 40960}
    assert (m["temperature"], m["env.fan"]) == (41, 1200.0)
    assert "word" not in m and "missing" not in m and "not.a.number" not in m
    assert (device.counts["extra_not_numeric"], device.counts["extra_missing"]) == (2, 1)


def test_storage_entries_are_bounded():
    storage = {i: polled.Storage(i, f"/mnt/{i}", None, 4096, 10, 1) for i in range(1, 11)}
    device = Readings(max_storage=4)
    m = device.update(poll(storage=storage)).metrics
    assert len([k for k in m if k.endswith(".size_bytes")]) == 4
    assert device.counts["storage_dropped"] == 6


def test_numbers_and_durations_read_as_an_operator_would():
    assert [readings.bits(x) for x in (12, 1500, 2.5e9, 1e13)] == \
        ["12 b/s", "1.5 kb/s", "2.5 Gb/s", "10 Tb/s"]
    assert [readings.duration(x) for x in (42, 423, 7500, 273600)] == \
        ["42s", "7m 3s", "2h 5m", "3d 4h"]
