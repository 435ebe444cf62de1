"""Polling a real Net-SNMP daemon (tests/support/snmpd.py) with agent/devices/snmp.py: what a
poll reads is what Net-SNMP's own ``snmpbulkwalk`` reads, over v2c and v3; wrong credentials
fail as a Poll, never as an exception; a device that does not answer delays no other."""

import asyncio
import dataclasses
import socket
import time

import pytest

from agent.devices import oids, snmp
from agent.devices.readings import Readings
from support.fleet import wait_for
from support.snmpd import COMMUNITY, EXTEND_RESULT, NO_HR, NO_IFX, USERS, extend_oid

pytestmark = pytest.mark.timeout(90)


def community_file(tmp_path, community=COMMUNITY):
    path = tmp_path / f"{community}.community"
    path.write_text(community + "\n")
    return path


def v2c(tmp_path, community=COMMUNITY):
    return snmp.Credentials.v2c(community_file(tmp_path, community))


def v3(tmp_path, user, auth_key=None):
    """The v3 credentials of :data:`support.snmpd.USERS`' ``user``, keys in files, named as a
    fleetwatch config names the protocols (``SHA-256`` -> ``SHA256``)."""
    (tmp_path / "auth").write_text(auth_key or user.auth_key)
    (tmp_path / "priv").write_text(user.priv_key)
    return snmp.Credentials.v3(user.name, user.auth.replace("-", ""), tmp_path / "auth",
                               user.priv.replace("-", ""), tmp_path / "priv")


def run(coroutine_function, *args, **poller_options):
    """Run ``coroutine_function(poller, *args)`` on a fresh loop with a Poller closed after."""
    async def main():
        poller = snmp.Poller(**poller_options)
        try:
            return await coroutine_function(poller, *args)
        finally:
            poller.close()
    return asyncio.run(main())


def poll_once(target, extra=None, **poller_options):
    return run(lambda poller: poller.poll(target, extra), **poller_options)


def column(daemon, oid, **kw) -> dict[int, str]:
    """``snmpbulkwalk`` of a column: {row index: the value as the tool prints it, without its
    type (``STRING: "lo"`` -> ``lo``)}."""
    out = {}
    for name, value in daemon.bulkwalk(oid, **kw).items():
        _, _, text = value.partition(": ")
        out[int(name.rsplit(".", 1)[1])] = text.strip('"')
    return out


def walked_interfaces(daemon, **kw) -> dict[int, tuple]:
    """(ifName, ifDescr, ifType, ifAdminStatus, ifOperStatus, ifSpeed) of each interface, as
    snmpbulkwalk reads them."""
    columns = [column(daemon, c, **kw) for c in (oids.IF_NAME, oids.IF_DESCR, oids.IF_TYPE,
                                                  oids.IF_ADMIN_STATUS, oids.IF_OPER_STATUS,
                                                  oids.IF_SPEED)]
    return {i: tuple(c.get(i) for c in columns) for i in columns[1]}


def polled_interfaces(poll) -> dict[int, tuple]:
    return {i: (f.name, f.descr, str(f.type), str(f.admin_status), str(f.oper_status),
                str(f.speed)) for i, f in poll.interfaces.items()}


def test_a_v2c_poll_reads_what_snmpbulkwalk_reads(snmpd, tmp_path):
    result = poll_once(snmp.Target(snmpd.host, snmpd.port, v2c(tmp_path)))
    assert result.ok, result.error
    assert result.answered and result.fault == "" and result.requests >= 4
    walked = walked_interfaces(snmpd)
    assert walked and polled_interfaces(result) == walked
    lo = next(i for i in result.interfaces.values() if i.name == "lo")
    assert lo.hc_in_octets > 0 and lo.in_errors == 0
    sys_name = snmpd.get(oids.SYS_NAME).stdout.partition(": ")[2].strip().strip('"')
    assert sys_name and result.system.name == sys_name and result.system.uptime > 0
    assert result.system.object_id.startswith("1.3.6.1.4.1.8072.")    # Net-SNMP's
    storage = column(snmpd, oids.HR_STORAGE_DESCR)
    assert {i: s.descr for i, s in result.storage.items()} == storage
    assert result.processors == {i: int(v) for i, v in
                                 column(snmpd, oids.HR_PROCESSOR_LOAD).items()}


@pytest.mark.parametrize("user", USERS, ids=[f"{u.auth}-{u.priv}" for u in USERS])
def test_a_v3_poll_reads_what_snmpbulkwalk_reads(snmpd, tmp_path, user):
    result = poll_once(snmp.Target(snmpd.host, snmpd.port, v3(tmp_path, user)))
    assert result.ok, result.error
    assert polled_interfaces(result) == walked_interfaces(snmpd, user=user.name)


def test_a_wrong_community_times_out_into_the_poll_s_error(snmpd, tmp_path):
    started = time.monotonic()
    result = poll_once(snmp.Target(snmpd.host, snmpd.port, v2c(tmp_path, "not-the-one"),
                                   timeout=0.5, retries=1))
    assert time.monotonic() - started < 5
    assert (result.fault, result.answered) == (snmp.TIMEOUT, False)
    assert result.error == (f"127.0.0.1:{snmpd.port}: no SNMP answer in 2 tries of 0.5s "
                            "(down, or not our community)")
    assert "not-the-one" not in result.error and result.interfaces == {}
    assert 1.0 <= result.duration < 5


def test_a_wrong_v3_key_is_an_authentication_error(snmpd, tmp_path):
    user = USERS[0]
    result = poll_once(snmp.Target(snmpd.host, snmpd.port,
                                   v3(tmp_path, user, auth_key="wrong-auth-key-9")))
    assert (result.fault, result.answered) == (snmp.AUTH, True)
    assert result.error == (f"127.0.0.1:{snmpd.port}: authentication failure: wrong digest "
                            "(the v3 auth key or protocol is not the device's)")
    assert "wrong-auth-key-9" not in result.error
    (tmp_path / "nobody").mkdir()
    stranger = v3(tmp_path / "nobody", dataclasses.replace(user, name="nobody"))
    result = poll_once(snmp.Target(snmpd.host, snmpd.port, stranger))
    assert result.fault == snmp.AUTH and "the device knows no v3 user 'nobody'" in result.error
    # a wrong privacy key: Net-SNMP cannot decrypt the request, and says nothing
    (tmp_path / "auth").write_text(user.auth_key)
    (tmp_path / "priv").write_text("wrong-priv-key-9")
    secret = snmp.Credentials.v3(user.name, "SHA", tmp_path / "auth", "AES", tmp_path / "priv")
    result = poll_once(snmp.Target(snmpd.host, snmpd.port, secret, timeout=0.5, retries=0))
    assert result.error == (f"127.0.0.1:{snmpd.port}: no SNMP answer in 1 try of 0.5s "
                            "(down, or not our privacy key)")


def test_one_v3_user_name_with_two_keys_gets_each_its_own(snmpd, tmp_path):
    """pysnmp keys its users by name: two devices with a user of one name but other keys are
    polled through two engines, at once, each with its own keys."""
    user = USERS[0]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    right = snmp.Target(snmpd.host, snmpd.port, v3(tmp_path / "a", user))
    wrong = snmp.Target(snmpd.host, snmpd.port, v3(tmp_path / "b", user, "another-auth-key"))

    async def go(poller):
        results = await poller.poll_all([(right, None), (wrong, None), (right, None)])
        return results, poller.counts["engines"]
    (first, refused, again), engines = run(go)
    assert first.ok and again.ok, (first.error, again.error)
    assert refused.fault == snmp.AUTH and engines == 2


def test_extra_oids_are_read_by_number(snmpd, tmp_path):
    extra = {"answer": extend_oid("fwnumber"), "word": "." + extend_oid("fwcheck"),
             "status": extend_oid("fwfail", EXTEND_RESULT), "absent": "1.3.6.1.4.1.99999.1.0",
             "bad": "not.an.oid"}
    # more than one GET's worth: the system group and 16 extras take two
    extra.update({f"uptime{n}": oids.SYS_UPTIME for n in range(12)})
    poller_counts = {}

    async def go(poller):
        result = await poller.poll(snmp.Target(snmpd.host, snmpd.port, v2c(tmp_path)), extra)
        poller_counts.update(poller.counts)
        return result
    result = run(go)
    assert result.ok, result.error
    assert {k: result.extra[k] for k in ("answer", "word", "status", "absent")} == \
        {"answer": "42", "word": "hello-from-extend", "status": 3, "absent": None}
    assert "bad" not in result.extra and poller_counts["extra_invalid"] == 1
    assert all(isinstance(result.extra[f"uptime{n}"], int) for n in range(12))
    metrics = Readings().update(result).metrics
    assert (metrics["answer"], metrics["status"]) == (42.0, 3)
    assert "word" not in metrics and "absent" not in metrics


def test_a_device_without_host_resources_or_if_x_table_polls_without_error(snmpd, tmp_path):
    result = poll_once(snmp.Target(snmpd.host, snmpd.port, v2c(tmp_path, NO_HR)))
    assert result.ok, result.error
    assert result.interfaces and result.processors == {} and result.storage == {}
    device = Readings()
    first = poll_once(snmp.Target(snmpd.host, snmpd.port, v2c(tmp_path, NO_IFX)))
    assert first.ok, first.error
    lo = next(i for i in first.interfaces.values() if i.descr == "lo")
    assert (lo.name, lo.hc_in_octets, lo.high_speed) == (None, None, None)
    assert lo.in_octets > 0                           # the 32-bit counters stand in
    device.update(first)

    def moved():          # Net-SNMP reads the kernel's counters again every few seconds
        later = poll_once(snmp.Target(snmpd.host, snmpd.port, v2c(tmp_path, NO_IFX)))
        return later if later.interfaces[lo.index].in_octets != lo.in_octets else None
    metrics = device.update(wait_for(moved, 20, 0.5, "lo's counters to move")).metrics
    # our own polls went over lo: its 32-bit octets moved, and became a rate
    assert metrics["if.lo.in_bps"] > 0 and metrics["if.lo.oper_up"] == 1


def test_rows_are_bounded_and_any_repetitions_read_the_same(snmpd, tmp_path):
    credentials = v2c(tmp_path)
    whole = poll_once(snmp.Target(snmpd.host, snmpd.port, credentials))
    one_by_one = poll_once(snmp.Target(snmpd.host, snmpd.port, credentials,
                                       max_repetitions=1))
    assert polled_interfaces(one_by_one) == polled_interfaces(whole)
    assert one_by_one.requests > whole.requests
    cut = poll_once(snmp.Target(snmpd.host, snmpd.port, credentials, max_rows=2))
    assert cut.ok and cut.truncated and list(cut.interfaces) == list(whole.interfaces)[:2]


def test_later_polls_reuse_names_and_sizes_and_read_the_same(snmpd, tmp_path):
    target = snmp.Target(snmpd.host, snmpd.port, v2c(tmp_path))

    async def three(poller):
        return [await poller.poll(target) for _ in range(3)]
    first, second, third = run(three, names_every=2)
    assert polled_interfaces(first) == polled_interfaces(second) == polled_interfaces(third)
    # the second asks for as many rows as the first found, and not the names again
    assert second.requests < first.requests
    assert third.requests > second.requests           # names read again: every 2 polls


def test_a_device_that_does_not_answer_delays_no_other(snmpds, tmp_path):
    answering, paused = snmpds("answering"), snmpds("paused")
    paused.pause()
    credentials = v2c(tmp_path)
    silent = snmp.Target(paused.host, paused.port, credentials, timeout=2, retries=1)
    others = [snmp.Target(answering.host, answering.port, credentials, timeout=2,
                          max_repetitions=r) for r in (5, 10, 25, 50)]
    done = {}

    async def go(poller):
        started = time.monotonic()

        async def one(target):
            result = await poller.poll(target)
            done[target] = (time.monotonic() - started, result)
        # two at a time: the silent device holds one place for 4 s, the others take turns
        # in the other
        await asyncio.gather(one(silent), *(one(t) for t in others))
    run(go, max_concurrent=2)
    took, result = done[silent]
    assert result.fault == snmp.TIMEOUT and took >= 4
    for target in others:
        took, result = done[target]
        assert result.ok, result.error
        assert took < 2, f"{target} finished after {took:.2f}s"
    paused.resume()                            # answering again: polls succeed again
    assert poll_once(silent).ok


def test_garbage_answers_and_bad_addresses_are_failed_polls(snmpd, tmp_path):
    garbage = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    garbage.bind(("127.0.0.1", 0))
    garbage.setblocking(False)
    credentials = v2c(tmp_path)

    async def go(poller):
        loop = asyncio.get_running_loop()

        def answer():
            try:
                data, peer = garbage.recvfrom(65536)
            except BlockingIOError:
                return
            for reply in (b"\x30\x03\x02\x01\x09", data[::-1], b"\xff" * 300):
                garbage.sendto(reply, peer)
        loop.add_reader(garbage.fileno(), answer)
        try:
            results = await poller.poll_all([
                (snmp.Target("127.0.0.1", garbage.getsockname()[1], credentials,
                             timeout=0.5, retries=0), None),
                (snmp.Target("no-such-host.invalid", 161, credentials), None),
                (snmp.Target(snmpd.host, snmpd.port, credentials), None)])
        finally:
            loop.remove_reader(garbage.fileno())
        return results, dict(poller.counts)
    try:
        (nonsense, nowhere, fine), counts = run(go)
    finally:
        garbage.close()
    assert nonsense.fault == snmp.TIMEOUT and not nonsense.answered
    assert nowhere.fault == snmp.ADDRESS and "no-such-host.invalid" in nowhere.error
    assert fine.ok, fine.error
    assert counts["polls"] == 3 and counts["polls_failed"] == 2
    assert counts["polls_failed.timeout"] == counts["polls_failed.address"] == 1


@pytest.mark.parametrize("answer_from", ["the device", "another address"])
def test_an_answer_is_the_device_s_only_from_the_device_s_address(snmpd, tmp_path,
                                                                   answer_from):
    """A relay stands for the device: it passes each request to snmpd and snmpd's answer back
    to the poller, from its own address (the device's) or from another one, which could
    be any device answering for another (pysnmp matches answers by request-id alone)."""
    front, back = (socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2))
    for s in (front, back):
        s.bind(("127.0.0.1", 0))
        s.setblocking(False)
    answering = front if answer_from == "the device" else back
    device, other = front.getsockname()[1], back.getsockname()[1]
    poller_at = {}

    def relay_request():
        data, poller_at["peer"] = front.recvfrom(65536)
        back.sendto(data, (snmpd.host, snmpd.port))

    def relay_answer():
        data, _ = back.recvfrom(65536)
        answering.sendto(data, poller_at["peer"])

    async def go(poller):
        loop = asyncio.get_running_loop()
        loop.add_reader(front.fileno(), relay_request)
        loop.add_reader(back.fileno(), relay_answer)
        try:
            result = await poller.poll(snmp.Target("127.0.0.1", device, v2c(tmp_path),
                                                   timeout=0.5, retries=0))
        finally:
            loop.remove_reader(front.fileno())
            loop.remove_reader(back.fileno())
        return result, poller.counts["foreign_answers"]
    try:
        result, foreign = run(go)
    finally:
        front.close()
        back.close()
    if answer_from == "the device":
        assert result.ok and result.interfaces and foreign == 0, result.error
    else:
        assert (result.fault, foreign, result.interfaces) == (snmp.INVALID, 1, {})
        assert result.error == (f"127.0.0.1:{device}: answered from 127.0.0.1:{other}, "
                                "not the device's")


def test_a_whole_poll_is_bounded_by_its_deadline(snmpd, tmp_path):
    snmpd.pause()
    try:
        result = poll_once(snmp.Target(snmpd.host, snmpd.port, v2c(tmp_path), timeout=5,
                                       retries=3, deadline=1))
    finally:
        snmpd.resume()
    assert result.fault == snmp.DEADLINE and 1 <= result.duration < 3
    assert result.error == f"127.0.0.1:{snmpd.port}: the poll took longer than its 1s"


def test_credentials_come_from_files_and_never_show_their_secrets(tmp_path):
    credentials = v2c(tmp_path, "s3cret-community")
    assert credentials.community == "s3cret-community"
    assert "s3cret" not in repr(credentials) and "s3cret" not in str(credentials)
    user = v3(tmp_path, USERS[0])
    assert USERS[0].auth_key not in repr(user) and USERS[0].priv_key not in repr(user)
    with pytest.raises(ValueError) as missing:
        snmp.Credentials.v2c(tmp_path / "absent")
    assert str(missing.value).startswith("SNMP community: ")
    assert str(tmp_path / "absent") in str(missing.value)
    short = tmp_path / "short"
    short.write_text("seven77\n")
    with pytest.raises(ValueError) as too_short:
        snmp.Credentials.v3("fwuser", "SHA", short)
    assert str(too_short.value) == (f"SNMPv3 auth key: {short}: holds fewer than 8 "
                                    "characters (USM needs at least 8)")
    assert "seven77" not in str(too_short.value)
    for protocols, wrong in ((("SHA1", None), "auth protocol 'SHA1'"),
                             (("SHA", "AES512"), "privacy protocol 'AES512'")):
        with pytest.raises(ValueError, match=wrong):
            snmp.Credentials.v3("fwuser", protocols[0], tmp_path / "auth", protocols[1],
                                tmp_path / "priv")


def test_text_a_device_sends_is_kept_escaped_and_cut():
    assert snmp.device_text(b"eth0\x1b[2J\r\n\x00\x00") == "eth0\\x1b[2J\\r\\n"
    assert snmp.device_text(b"\xff\xfeport") == "\ufffd\ufffdport"
    assert len(snmp.device_text(b"x" * 1000)) == snmp.MAX_TEXT
    assert snmp.numeric_oid(".1.3.6.1.2.1.1.3.0") == "1.3.6.1.2.1.1.3.0"
    assert snmp.numeric_oid("sysUpTime.0") is None and snmp.numeric_oid(42) is None
