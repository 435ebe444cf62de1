"""The trap receiver (agent/devices/traps.py) on a real UDP port of 127.0.0.1, on an asyncio
loop in a thread as the agent runs it, sent real notifications by Net-SNMP's ``snmptrap``
and ``snmpinform`` (v2c and v3 authPriv, traps and informs), and datagrams pysnmp encodes
where one must be sent exactly (twice, in a burst) or garbage."""

import gc
import socket
import warnings

import pytest
from pysnmp.proto.api import v2c
from support.fleet import wait_for
from support.snmpd import USERS, User
from support.snmptraps import COLD_START, LINK_DOWN, LINK_UP, Sender, encoded, link_varbinds

from agent.devices.loop import DevicesLoop
from agent.devices.snmp import Credentials
from agent.devices.traps import TrapReceiver

pytestmark = pytest.mark.timeout(60)

COMMUNITY = "fwtest-trap"
#: the v3 users the receiver knows: snmpd's (SHA/AES, SHA-256/AES-256, SHA/AES-256, MD5/DES,
#: SHA-512/AES-192; Net-SNMP's words, the receiver's are without the dash)
SHA_AES = USERS[0]
DEVICES = {"127.0.0.1": "switch-1"}


class Receiving:
    """A started TrapReceiver and what it was handed."""

    def __init__(self, loop, receiver, got):
        self.loop, self.receiver, self.got = loop, receiver, got

    @property
    def counters(self):
        return self.receiver.counters

    def wait(self, counter: str, n: int = 1):
        wait_for(lambda: self.counters[counter] >= n, 10,
                 what=lambda: f"{counter} >= {n}: {dict(self.counters)}")


@pytest.fixture
def devices_loop():
    """The devices' asyncio loop, in a thread, as the agent runs it
    (:class:`agent.devices.loop.DevicesLoop`)."""
    running = DevicesLoop()
    running.start()
    yield running
    running.close()


@pytest.fixture
def receiving(devices_loop, tmp_path):
    """``start(taker=None, **kw)``: a TrapReceiver started on 127.0.0.1 (an ephemeral port)
    knowing DEVICES, COMMUNITY and the v3 USERS, its secrets in files; ``taker`` (default:
    keep every trap) is its ``on_trap``. Closed after the test."""
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "communities").write_text(f"# the switches'\n{COMMUNITY}\n")
    users = []
    for user in USERS:
        (secrets / f"{user.name}.auth").write_text(user.auth_key + "\n")
        (secrets / f"{user.name}.priv").write_text(user.priv_key + "\n")
        users.append(Credentials.v3(user.name, user.auth.replace("-", ""),
                                    secrets / f"{user.name}.auth", user.priv.replace("-", ""),
                                    secrets / f"{user.name}.priv"))
    started = []

    def start(taker=None, devices=DEVICES, listen=("127.0.0.1", 0), **kw) -> Receiving:
        got = []
        receiver = TrapReceiver(devices.get, taker or got.append, listen=listen,
                                communities_file=str(secrets / "communities"), users=users,
                                **kw)
        devices_loop.run(receiver.start())
        started.append(receiver)
        return Receiving(devices_loop, receiver, got)

    yield start
    for receiver in started:
        devices_loop.run(receiver.close())


@pytest.fixture
def sender(tmp_path):
    """``make(port, host="127.0.0.1")``: a :class:`support.snmptraps.Sender` to there."""
    return lambda port, host="127.0.0.1": Sender(tmp_path / "tools", port, host)


def send_datagrams(port: int, *datagrams: bytes, source: str = "127.0.0.1",
                   answers: int = 0) -> list[bytes]:
    """Send ``datagrams`` from one UDP socket; the first ``answers`` datagrams answered."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((source, 0))
        s.settimeout(5)
        for datagram in datagrams:
            s.sendto(datagram, ("127.0.0.1", port))
        return [s.recv(65535) for _ in range(answers)]


def test_a_v2c_link_down_by_number_gives_the_interface(receiving, sender):
    r = receiving()
    done = sender(r.receiver.address[1]).send(LINK_DOWN, link_varbinds(4, 1, 2),
                                              community=COMMUNITY)
    assert done.returncode == 0, done.stderr
    r.wait("traps_received")
    (trap,) = r.got
    assert (trap.device, trap.address, trap.version, trap.kind) == \
        ("switch-1", "127.0.0.1", "2c", "trap")
    assert (trap.name, trap.oid, trap.user) == ("linkDown", LINK_DOWN, "")
    assert (trap.if_index, trap.admin_status, trap.oper_status) == (4, 1, 2)
    assert trap.uptime > 0
    assert [f"{v.name}={v.value}" for v in trap.varbinds] == \
        ["ifIndex.4=4", "ifAdminStatus.4=1", "ifOperStatus.4=2"]
    assert r.counters["traps_auth_failed"] == r.counters["traps_malformed"] == 0


def test_a_v2c_inform_is_answered_once_taken_and_not_when_refused(receiving, sender):
    answers = iter([False, None, None])     # refuse the first: its sender sends it again
    seen = []

    def taker(trap):
        seen.append(trap)
        return next(answers)
    r = receiving(taker)
    send = sender(r.receiver.address[1]).send
    done = send(LINK_UP, link_varbinds(3, 1, 1), community=COMMUNITY, inform=True,
                timeout=1, retries=1)
    assert done.returncode == 0, done.stderr            # answered, at the second sending
    assert [t.kind for t in seen] == ["inform", "inform"]
    assert (seen[1].name, seen[1].if_index, seen[1].oper_status) == ("linkUp", 3, 1)
    assert (r.counters["traps_refused"], r.counters["traps_received"],
            r.counters["traps_informs"]) == (1, 1, 1)
    r2 = receiving(lambda trap: False)
    done = sender(r2.receiver.address[1]).send(COLD_START, community=COMMUNITY, inform=True,
                                               timeout=0.5)
    assert done.returncode != 0 and "Timeout" in done.stderr
    assert r2.counters["traps_refused"] == 1


def test_a_resent_inform_already_taken_is_answered_again_and_handed_on_once(receiving):
    r = receiving()
    inform = encoded(COLD_START, community=COMMUNITY, pdu_type="inform", request_id=4711)
    answers = send_datagrams(r.receiver.address[1], inform, inform, answers=2)
    assert len(answers) == 2                            # both answered...
    r.wait("traps_duplicates")
    assert len(r.got) == 1                              # ...one handed on
    assert r.counters["traps_received"] == 1
    other = encoded(COLD_START, community=COMMUNITY, pdu_type="inform", request_id=4712,
                    varbinds=[("1.3.6.1.2.1.1.5.0", v2c.OctetString(b"another"))])
    send_datagrams(r.receiver.address[1], other, answers=1)
    assert len(r.got) == 2


@pytest.mark.parametrize("user", USERS, ids=lambda u: f"{u.auth}-{u.priv}")
def test_v3_authpriv_traps_and_informs_are_received(receiving, sender, user):
    r = receiving()
    send = sender(r.receiver.address[1]).send
    trap = send(LINK_DOWN, link_varbinds(2, 1, 2), user=user)
    assert trap.returncode == 0, trap.stderr
    r.wait("traps_received")                            # its engine ID learned on the way
    done = send(COLD_START, user=user, inform=True)
    assert done.returncode == 0, done.stderr
    assert [(t.version, t.kind, t.user, t.name) for t in r.got] == [
        ("3", "trap", user.name, "linkDown"), ("3", "inform", user.name, "coldStart")]
    assert r.got[0].if_index == 2 and r.got[0].oper_status == 2
    assert r.counters["traps_v3_discovery"] >= 1       # the inform's sender found our engine
    assert r.counters["traps_auth_failed"] == 0
    assert r.receiver.learned["127.0.0.1"][0][1] == user.name


def test_v3_with_a_wrong_key_or_user_is_counted_and_never_delivered(receiving, sender, caplog):
    r = receiving()
    send = sender(r.receiver.address[1]).send
    wrong_key = User(SHA_AES.name, "SHA", "not-the-auth-key", "AES",
                                  SHA_AES.priv_key)
    assert send(COLD_START, user=wrong_key, engine_id="0x8000000001020304").returncode == 0
    r.wait("traps_auth_failed")
    stranger = User("nobody", "SHA", SHA_AES.auth_key, "AES", SHA_AES.priv_key)
    assert send(COLD_START, user=stranger).returncode == 0
    r.wait("traps_auth_failed", 2)
    refused = send(COLD_START, user=wrong_key, inform=True, timeout=0.5)
    assert refused.returncode != 0                      # Net-SNMP: an authentication failure
    assert r.got == []
    assert "not-the-auth-key" not in caplog.text and SHA_AES.auth_key not in caplog.text
    assert "switch-1" in caplog.text


def test_a_wrong_community_is_counted_and_never_delivered(receiving, sender, caplog):
    r = receiving()
    send = sender(r.receiver.address[1]).send
    assert send(LINK_DOWN, link_varbinds(4, 1, 2), community="guessed").returncode == 0
    r.wait("traps_auth_failed")
    assert send(COLD_START, community=COMMUNITY).returncode == 0
    r.wait("traps_received")
    assert [t.name for t in r.got] == ["coldStart"]
    assert "guessed" not in caplog.text and COMMUNITY not in caplog.text
    assert "Unknown SNMP community name" in caplog.text


def test_a_trap_from_an_address_no_device_has_is_dropped_and_counted(receiving, sender):
    r = receiving(devices={"127.0.0.1": "switch-1", "127.0.0.3": "switch-3"})
    send = sender(r.receiver.address[1]).send
    # a varbind naming a known device's address changes nothing: the UDP peer decides
    done = send(LINK_DOWN, [*link_varbinds(4, 1, 2), "1.3.6.1.6.3.18.1.3.0", "a",
                            "127.0.0.1"], community=COMMUNITY, source="127.0.0.2")
    assert done.returncode == 0, done.stderr
    r.wait("traps_unknown_source")
    inform = send(COLD_START, community=COMMUNITY, source="127.0.0.2", inform=True,
                  timeout=0.5)
    assert inform.returncode != 0                       # not answered either
    assert send(COLD_START, community=COMMUNITY, source="127.0.0.3").returncode == 0
    r.wait("traps_received")
    assert [(t.device, t.address) for t in r.got] == [("switch-3", "127.0.0.3")]
    assert r.counters["traps_unknown_source"] == 2


def test_a_flood_from_one_source_is_bounded_and_the_others_still_come_in(receiving):
    r = receiving(rate=0.001, burst=5, devices={"127.0.0.1": "switch-1",
                                                 "127.0.0.4": "switch-4"})
    port = r.receiver.address[1]
    flood = [encoded(LINK_DOWN, community=COMMUNITY, request_id=n) for n in range(40)]
    send_datagrams(port, *flood)
    r.wait("traps_rate_limited", 35)
    send_datagrams(port, encoded(COLD_START, community=COMMUNITY), source="127.0.0.4")
    wait_for(lambda: len(r.got) == 6, 10, what=lambda: f"6 traps: {dict(r.counters)}")
    assert (r.counters["traps_received"], r.counters["traps_rate_limited"]) == (6, 35)
    assert [t.device for t in r.got].count("switch-4") == 1


def test_garbage_never_stops_the_receiver(receiving, sender):
    r = receiving()
    port = r.receiver.address[1]
    good = encoded(COLD_START, community=COMMUNITY)
    no_trap_oid = encoded(None, community=COMMUNITY, varbinds=[
        ("1.3.6.1.6.3.1.1.4.1.0", v2c.OctetString(b"linkDown"))])     # not an OID
    garbage = [b"", b"\x00", b"\x30\x82\xff\xff", good[:len(good) // 2], b"\xff" * 1400,
               b"\x30" * 60000, no_trap_oid,
               encoded(None, community=COMMUNITY, pdu_type="get",       # a GET, to a trap port
                       varbinds=[("1.3.6.1.2.1.1.1.0", v2c.Null())]),
               encoded(LINK_DOWN, community=COMMUNITY,
                       varbinds=[("1.3.6.1.4.1.1.1", v2c.OctetString(b"\x1b]0;pwned\x07"))]),
               encoded(LINK_DOWN, community=COMMUNITY,
                       varbinds=[(f"1.3.6.1.4.1.1.{n}", v2c.OctetString(b"v" * 400))
                                 for n in range(100)])]
    send_datagrams(port, *garbage)
    wait_for(lambda: len(r.got) == 2, 10, what=lambda: f"2 traps: {dict(r.counters)}")
    hostile, big = r.got
    assert hostile.varbinds[0].value == "\\x1b]0;pwned\\x07"
    assert (len(big.varbinds), big.dropped, big.cut) == (64, 36, 64)
    assert r.counters["traps_malformed"] + r.counters["traps_auth_failed"] == \
        len(garbage) - 2, dict(r.counters)
    assert (r.counters["traps_varbinds_dropped"], r.counters["traps_values_cut"]) == (36, 64)
    assert sender(port).send(COLD_START, community=COMMUNITY).returncode == 0
    wait_for(lambda: len(r.got) == 3, 10, what="a trap after the garbage")


def test_a_taker_that_fails_refuses_the_trap_and_the_receiver_goes_on(receiving, sender):
    calls = []

    def taker(trap):
        calls.append(trap)
        if len(calls) == 1:
            raise RuntimeError("the spool is gone")
    r = receiving(taker)
    send = sender(r.receiver.address[1]).send
    assert send(COLD_START, community=COMMUNITY).returncode == 0
    r.wait("traps_refused")
    assert send(COLD_START, community=COMMUNITY).returncode == 0
    r.wait("traps_received")
    assert len(calls) == 2


def test_start_and_close_leave_no_socket_behind(devices_loop, tmp_path):
    (tmp_path / "communities").write_text(COMMUNITY + "\n")
    made = lambda listen: TrapReceiver(DEVICES.get, lambda trap: None, listen=listen,  # noqa
                                       communities_file=str(tmp_path / "communities"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        receiver = made(("127.0.0.1", 0))
        host, port = devices_loop.run(receiver.start())
        busy = made((host, port))
        with pytest.raises(OSError, match=f"traps: cannot listen on 127.0.0.1:{port}: "
                                          f"Address already in use"):
            devices_loop.run(busy.start())
        devices_loop.run(receiver.close())
        devices_loop.run(receiver.close())              # twice: nothing more to do
        del receiver, busy
        gc.collect()
    assert [w for w in caught if issubclass(w.category, ResourceWarning)] == []
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, port))                            # the port is free again


def test_a_receiver_on_ipv6_takes_v2c_and_v3(receiving, sender):
    r = receiving(listen=("::1", 0), devices={"::1": "switch-6"})
    send = sender(r.receiver.address[1], "::1").send
    assert send(LINK_DOWN, link_varbinds(5, 1, 2), community=COMMUNITY).returncode == 0
    done = send(COLD_START, user=SHA_AES, inform=True)
    assert done.returncode == 0, done.stderr
    r.wait("traps_received", 2)
    assert [(t.device, t.address, t.version, t.if_index) for t in r.got] == [
        ("switch-6", "::1", "2c", 5), ("switch-6", "::1", "3", None)]


def test_an_engine_id_given_beforehand_needs_no_learning(receiving, sender):
    r = receiving(engine_ids=[(SHA_AES.name, "0x8000000001020304")])
    done = sender(r.receiver.address[1]).send(COLD_START, user=SHA_AES,
                                              engine_id="0x8000000001020304")
    assert done.returncode == 0, done.stderr
    r.wait("traps_received")
    assert r.receiver.learned == {} and r.counters["traps_auth_failed"] == 0


def test_engine_ids_learned_from_one_address_are_bounded(receiving, sender):
    r = receiving(max_engine_ids=2)
    send = sender(r.receiver.address[1]).send
    wrong_key = User(SHA_AES.name, "SHA", "not-the-auth-key", "AES", SHA_AES.priv_key)
    # a wrong key under a new engine ID: tried, not kept
    assert send(COLD_START, user=wrong_key, engine_id="0x8000000001020301").returncode == 0
    r.wait("traps_auth_failed")
    assert r.receiver.learned == {}
    assert send(COLD_START, user=SHA_AES, engine_id="0x8000000001020304").returncode == 0
    r.wait("traps_received")
    assert r.receiver.learned == {"127.0.0.1": [(bytes.fromhex("8000000001020304"),
                                                 SHA_AES.name)]}
    # two tries spent: a third engine ID waits a minute
    assert send(COLD_START, user=SHA_AES, engine_id="0x8000000001020305").returncode == 0
    r.wait("traps_engine_ids_refused")
    assert send(COLD_START, user=SHA_AES, engine_id="0x8000000001020304").returncode == 0
    r.wait("traps_received", 2)
    assert r.counters["traps_auth_failed"] == 2 and len(r.got) == 2


def test_a_v1_trap_is_the_sender_address_and_keeps_no_community(receiving, sender):
    r = receiving(devices={"127.0.0.1": "switch-1", "127.0.0.3": "switch-3"})
    done = sender(r.receiver.address[1]).send_v1(
        "1.3.6.1.4.1.8072.4", "127.0.0.3", 6, 17, ["1.3.6.1.2.1.1.5.0", "s", "sw\x1b[2J"],
        community=COMMUNITY)
    assert done.returncode == 0, done.stderr
    r.wait("traps_received")
    (trap,) = r.got
    assert (trap.version, trap.device, trap.address) == ("1", "switch-1", "127.0.0.1")
    assert trap.name == "1.3.6.1.4.1.8072.4.0.17"       # enterprise.0.specific (RFC 3584)
    assert COMMUNITY not in repr(trap)
    assert {v.name: v.value for v in trap.varbinds}["sysName.0"] == "sw\\x1b[2J"


def test_a_receiver_that_could_take_nothing_is_refused_at_construction(tmp_path):
    with pytest.raises(ValueError, match="no communities_file and no users"):
        TrapReceiver(DEVICES.get, lambda trap: None)
    (tmp_path / "communities").write_text("\n")
    with pytest.raises(ValueError, match="holds no community"):
        TrapReceiver(DEVICES.get, lambda trap: None,
                     communities_file=str(tmp_path / "communities"))
