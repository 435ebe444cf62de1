"""agent/devices/traps.py without sockets: a notification's varbinds (pysnmp's values, as
pysnmp hands them over) into a Trap, and the per-source token buckets on a fake clock."""

import pytest
from pysnmp.proto import rfc1902
from pysnmp.proto.rfc1902 import ObjectName

from agent.devices import oids
from agent.devices.notifications import (MAX_VALUE, MAX_VARBINDS, TRAP_COMMUNITY, Malformed,
                                         decode, text)
from agent.devices.traps import Buckets, peer

pytestmark = pytest.mark.timeout(30)

RECEIVED = dict(address="192.0.2.7", port=50000, device="sw1", version="2c", kind="trap",
                at=12.5)


def notification(oid: str, *varbinds, uptime: int = 123456):
    """The varbinds of a v2 notification: sysUpTime.0, snmpTrapOID.0, then ``varbinds``."""
    return [(ObjectName(oids.SYS_UPTIME), rfc1902.TimeTicks(uptime)),
            (ObjectName(oids.SNMP_TRAP_OID), rfc1902.ObjectName(oid)),
            *((ObjectName(name), value) for name, value in varbinds)]


def test_link_down_gives_its_interface_and_statuses():
    trap = decode(notification(oids.LINK_DOWN,
                               (oids.IF_INDEX + ".4", rfc1902.Integer32(4)),
                               (oids.IF_ADMIN_STATUS + ".4", rfc1902.Integer32(1)),
                               (oids.IF_OPER_STATUS + ".4", rfc1902.Integer32(2))),
                  **RECEIVED)
    assert (trap.oid, trap.name, trap.uptime) == (oids.LINK_DOWN, "linkDown", 1234.56)
    assert (trap.if_index, trap.admin_status, trap.oper_status) == (4, 1, 2)
    assert oids.IF_STATUS[trap.oper_status] == "down"
    assert [(v.name, v.type, v.value) for v in trap.varbinds] == [
        ("ifIndex.4", "Integer32", "4"), ("ifAdminStatus.4", "Integer32", "1"),
        ("ifOperStatus.4", "Integer32", "2")]
    assert (trap.address, trap.device, trap.at) == ("192.0.2.7", "sw1", 12.5)
    assert trap.summary() == "linkDown ifIndex.4=4 ifAdminStatus.4=1 ifOperStatus.4=2"


def test_link_up_without_if_index_takes_it_from_the_status_index():
    trap = decode(notification(oids.LINK_UP, (oids.IF_OPER_STATUS + ".17",
                                              rfc1902.Integer32(1))), **RECEIVED)
    assert (trap.name, trap.if_index, trap.admin_status, trap.oper_status) == \
        ("linkUp", 17, None, 1)


def test_generic_and_unknown_notifications_are_named_or_numeric():
    names = {oid: decode(notification(oid), **RECEIVED).name
             for oid in (oids.COLD_START, oids.WARM_START, oids.AUTHENTICATION_FAILURE,
                         "1.3.6.1.4.1.9.9.41.2.0.1")}
    assert list(names.values()) == ["coldStart", "warmStart", "authenticationFailure",
                                    "1.3.6.1.4.1.9.9.41.2.0.1"]


def test_a_link_field_that_is_no_integer_is_left_out():
    trap = decode(notification(oids.LINK_DOWN, (oids.IF_INDEX + ".4",
                                                rfc1902.OctetString(b"four"))), **RECEIVED)
    assert trap.if_index is None
    assert trap.varbinds[0].value == "four"


@pytest.mark.parametrize("varbinds, why", [
    ([(ObjectName(oids.SYS_UPTIME), rfc1902.TimeTicks(1))], "no snmpTrapOID.0"),
    ([(ObjectName(oids.SNMP_TRAP_OID), rfc1902.OctetString(b"linkDown"))],
     "snmpTrapOID.0 is a OctetString, not an OID"),
])
def test_a_notification_without_its_oid_is_malformed(varbinds, why):
    with pytest.raises(Malformed, match=why):
        decode(varbinds, **RECEIVED)


def test_without_sys_uptime_the_uptime_is_none():
    trap = decode([(ObjectName(oids.SNMP_TRAP_OID), rfc1902.ObjectName(oids.COLD_START))],
                  **RECEIVED)
    assert (trap.name, trap.uptime) == ("coldStart", None)


@pytest.mark.parametrize("value, shown", [
    (rfc1902.OctetString(b"Gi0/1 uplink"), "Gi0/1 uplink"),
    (rfc1902.OctetString("caf\u00e9".encode()), "caf\u00e9"),
    (rfc1902.OctetString(b"\x1b[31mred\x1b[0m and text"), "\\x1b[31mred\\x1b[0m and text"),
    (rfc1902.OctetString(b"line\nbreak"), "line\\nbreak"),
    (rfc1902.OctetString(b"\x00\x1b\x2f\x8a\xcc\x01"), "0x001b2f8acc01"),     # a MAC address
    (rfc1902.OctetString(b"\xff\xfe"), "0xfffe"),
    (rfc1902.IpAddress("192.0.2.1"), "192.0.2.1"),
    (rfc1902.TimeTicks(4242), "4242"),
    (rfc1902.Counter64(2 ** 64 - 1), str(2 ** 64 - 1)),
    (rfc1902.Integer32(-5), "-5"),
    (rfc1902.ObjectName("1.3.6.1.4.1.8072"), "1.3.6.1.4.1.8072"),
])
def test_values_become_text_with_control_characters_escaped(value, shown):
    assert text(value) == shown


def test_varbinds_and_values_are_bounded():
    many = [(f"1.3.6.1.4.1.99999.{n}", rfc1902.Integer32(n)) for n in range(MAX_VARBINDS + 6)]
    trap = decode(notification("1.3.6.1.4.1.99999.0.1", ("1.3.6.1.4.1.99999.100",
                                                         rfc1902.OctetString(b"x" * 1000)),
                               *many), **RECEIVED)
    assert len(trap.varbinds) == MAX_VARBINDS and trap.dropped == 7
    assert trap.varbinds[0].value == "x" * MAX_VALUE and trap.cut == 1
    escaped = decode(notification(oids.COLD_START, ("1.3.6.1.4.1.99999.1", rfc1902.OctetString(
        b"\x1b" * 60 + b"a" * 240))), **RECEIVED)
    assert len(escaped.varbinds[0].value) == MAX_VALUE and escaped.cut == 1
    assert "\x1b" not in escaped.varbinds[0].value
    assert len(trap.summary(100)) == 100 and trap.summary(100).endswith("...")


def test_a_v1_community_varbind_is_never_kept():
    trap = decode(notification(oids.COLD_START, (TRAP_COMMUNITY, rfc1902.OctetString(b"s3cret")),
                               ("1.3.6.1.6.3.18.1.3.0", rfc1902.IpAddress("192.0.2.99"))),
                  **RECEIVED)
    assert [v.name for v in trap.varbinds] == ["1.3.6.1.6.3.18.1.3.0"]
    assert "s3cret" not in repr(trap)
    # the device is the UDP peer's, whatever snmpTrapAddress says
    assert trap.address == "192.0.2.7"


def test_buckets_allow_a_burst_then_the_rate_per_source():
    now = [100.0]
    buckets = Buckets(rate=2.0, burst=3, clock=lambda: now[0], max_sources=2)
    assert [buckets.take("a") for _ in range(4)] == [True, True, True, False]
    assert buckets.take("b")                        # another source has its own bucket
    now[0] += 0.5                                   # one token back
    assert [buckets.take("a") for _ in range(2)] == [True, False]
    now[0] += 100                                   # never more than the burst
    assert [buckets.take("a") for _ in range(4)] == [True, True, True, False]
    buckets.take("c")                               # a third source: the oldest forgotten
    assert list(buckets.buckets) == ["a", "c"]


def test_a_dual_stack_socket_peer_is_asked_as_ipv4():
    assert [peer(a) for a in ("192.0.2.7", "::ffff:192.0.2.7", "2001:db8::7", "::1")] == \
        ["192.0.2.7", "192.0.2.7", "2001:db8::7", "::1"]
