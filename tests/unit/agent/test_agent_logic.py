"""The agent's logic without sockets: spool, link state machine, collectors, identity."""

from __future__ import annotations

import logging
import os
import stat
from collections import namedtuple

import pytest

from support.clock import Clock
from agent import identity
from agent.collectors import Collectors, mount_name
from agent.intake import Intake
from agent.links import ALIVE, CONNECTING, DEAD, Link, Links
from agent.spool import Spool
from fleetwatch import protocol


def notify(text: str, clock) -> protocol.Message:
    return protocol.make("NOTIFY", "agent-uuid", clock=clock, severity="error", text=text)


# ---------------------------------------------------------------- spool

@pytest.fixture
def clock():
    return Clock(1000.0)


@pytest.fixture
def spool(tmp_path, clock):
    s = Spool(str(tmp_path / "spool.db"), max_messages=5, ack_timeout=2.0, max_backoff=10.0,
              clock=clock)
    yield s
    s.close()


def test_spool_first_send_immediate_then_doubling_resends(spool, clock):
    msg = notify("disk full", clock)
    assert spool.add([msg]) == 0
    assert len(spool) == 1
    first = spool.due()
    assert [m.msg_id for m in first] == [msg.msg_id]
    assert "dup" not in first[0].body and "retry" not in first[0].body
    assert spool.due() == []
    sent_at = []
    for _ in range(6):
        nd = spool.next_due()
        clock.now = nd - 0.01
        assert spool.due() == []
        clock.now = nd
        (again,) = spool.due()
        sent_at.append(clock.now)
        assert again.msg_id == msg.msg_id and again.get("dup") is True
        assert again.get("retry") == len(sent_at)
        assert again.get("text") == "disk full"
    gaps = [round(b - a, 6) for a, b in zip([1000.0, *sent_at], sent_at)]
    assert gaps == [2.0, 4.0, 8.0, 10.0, 10.0, 10.0]


def test_spool_ack_removes(spool, clock):
    a, b = notify("a", clock), notify("b", clock)
    spool.add([a, b])
    assert spool.ack([a.msg_id, "unknown", 7]).removed == [a.msg_id]
    assert spool.pending() == [b.msg_id]
    clock.advance(100)
    assert [m.msg_id for m in spool.due()] == [b.msg_id]
    assert spool.ack([b.msg_id], "alerting").removed == [b.msg_id]
    assert len(spool) == 0 and spool.next_due() is None


def test_spool_same_msg_id_kept_once(spool, clock):
    a = notify("a", clock)
    spool.add([a])
    spool.add([a])
    assert len(spool) == 1


def test_spool_bounded_oldest_dropped_and_counted(spool, clock):
    msgs = [notify(str(i), clock) for i in range(8)]
    assert spool.add(msgs[:4]) == 0
    assert spool.add(msgs[4:]) == 3
    assert len(spool) == 5 and spool.dropped == 3
    assert spool.pending() == [m.msg_id for m in msgs[3:]]
    assert spool.add([notify("x", clock)]) == 1
    assert spool.dropped == 4


def test_spool_persists_across_reopen(tmp_path, clock):
    path = str(tmp_path / "spool.db")
    s = Spool(path, max_messages=2, ack_timeout=2.0, max_backoff=10.0, clock=clock)
    msgs = [notify(str(i), clock) for i in range(3)]
    s.add(msgs)
    s.due()
    s.close()
    s = Spool(path, max_messages=2, ack_timeout=2.0, max_backoff=10.0, clock=clock)
    assert len(s) == 2 and s.dropped == 1
    assert s.pending() == [msgs[1].msg_id, msgs[2].msg_id]
    again = s.due()  # everything is due at once after a restart, marked as a resend
    assert [m.msg_id for m in again] == [msgs[1].msg_id, msgs[2].msg_id]
    assert all(m.get("dup") is True and m.get("retry") == 1 for m in again)
    assert again[0].body["text"] == "1" and again[0].type == "NOTIFY"
    s.close()


def test_spool_clock_going_back_does_not_stall(spool, clock):
    spool.add([notify("a", clock)])
    spool.due()
    clock.advance(-3600)
    assert len(spool.due()) == 1


# ---------------------------------------------------------------- links

def make_link(rand=lambda: 0.5, **kw):
    opts = dict(interval=1.0, liveness=3, reconnect_min=0.5, reconnect_max=4.0, rand=rand)
    opts.update(kw)
    return Link("tcp://r1:5555", **opts)


def test_link_lifecycle_and_liveness():
    link = make_link()
    assert link.state == DEAD and link.reconnect_due(0.0)
    link.opened(10.0)
    assert link.state == CONNECTING and not link.heartbeat_due(11.0)
    link.welcomed(10.2, "router-1")
    assert link.state == ALIVE and link.router_id == "router-1"
    assert link.heartbeat_due(11.0) and not link.heartbeat_due(11.5)
    assert link.heartbeat_due(12.0)
    link.heard(12.5)
    assert not link.expired(15.4)
    assert link.expired(15.5)
    assert link.deadline() == 13.0


def test_link_connecting_without_welcome_expires():
    link = make_link()
    link.opened(0.0)
    assert not link.expired(2.9) and link.expired(3.0)


def test_link_backoff_doubles_to_max_with_jitter_bounds():
    for r, factor in ((0.0, 0.75), (0.5, 1.0), (0.999999, 1.25)):
        link = make_link(rand=lambda r=r: r)
        delays = []
        for _ in range(6):
            link.opened(0.0)
            delays.append(link.closed(100.0))
            assert link.reconnect_at == 100.0 + delays[-1]
        expected = [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
        assert delays == pytest.approx([e * factor for e in expected], rel=1e-5)


def test_link_backoff_resets_after_welcome():
    link = make_link()
    link.opened(0)
    link.closed(0)
    link.opened(1)
    link.closed(1)
    assert link.backoff == 2.0
    link.opened(5)
    link.welcomed(5, "r")
    assert link.backoff == 0.5


def test_link_401_means_hello_again():
    link = make_link()
    link.opened(0)
    link.welcomed(0.1, "r")
    link.hello_required(0.5)
    assert link.state == CONNECTING and not link.alive
    assert not link.heartbeat_due(5)


def test_links_learn_pick_round_robin_and_avoid():
    links = Links(["tcp://a:1"], lambda e, learned: Link(e, 1.0, learned=learned))
    new = links.learn(["tcp://a:1", "tcp://b:1", "", 3])
    assert [link.endpoint for link in new] == ["tcp://b:1"] and new[0].learned
    assert links.pick() is None
    for i, link in enumerate(links):
        link.opened(0)
        link.welcomed(0, f"r{i}")
    picked = {links.pick().endpoint for _ in range(4)}
    assert picked == {"tcp://a:1", "tcp://b:1"}
    assert all(links.pick(avoid="tcp://a:1").endpoint == "tcp://b:1" for _ in range(3))


def test_links_alias_of_a_known_router():
    links = Links(["tcp://a:1"], lambda e, learned: Link(e, 1.0, learned=learned))
    (alias,) = links.learn(["tcp://a.example:1"])
    a = links.links["tcp://a:1"]
    a.opened(0)
    a.welcomed(0, "r1")
    alias.opened(0)
    alias.welcomed(0, "r1")
    assert links.duplicate_of(alias) is a
    links.remove(alias)
    assert links.learn(["tcp://a.example:1"]) == []


# ---------------------------------------------------------------- collectors

CpuTimes = namedtuple("CpuTimes", "user nice system idle iowait irq softirq steal guest guest_nice")
Mem = namedtuple("Mem", "total available percent")
Swap = namedtuple("Swap", "total used percent")
Part = namedtuple("Part", "device mountpoint fstype")
Usage = namedtuple("Usage", "total used free percent")
DiskIO = namedtuple("DiskIO", "read_count write_count read_bytes write_bytes")
NetIO = namedtuple("NetIO", "bytes_sent bytes_recv packets_sent packets_recv errin errout "
                            "dropin dropout")


class FakePsutil:
    def __init__(self):
        self.cpu = CpuTimes(10, 0, 10, 80, 0, 0, 0, 0, 0, 0)
        self.fail = set()

    def _check(self, name):
        if name in self.fail:
            raise RuntimeError(f"{name} broke")

    def cpu_times(self):
        self._check("cpu")
        return self.cpu

    def getloadavg(self):
        self._check("load")
        return (0.5, 0.25, 0.125)

    def virtual_memory(self):
        return Mem(1000, 250, 75.0)

    def swap_memory(self):
        return Swap(0, 0, 0.0)

    def disk_partitions(self):
        return [Part("/dev/sda1", "/", "ext4"), Part("/dev/sda2", "/var/lib", "xfs"),
                Part("tmpfs", "/run", "tmpfs"), Part("/dev/loop0", "/snap/x/1", "squashfs"),
                Part("/dev/sdb1", "/mnt/data disk", "ext4"), Part("/dev/sdc", "/gone", "ext4")]

    def disk_usage(self, path):
        if path == "/gone":
            raise PermissionError(13, "Permission denied")
        return Usage(100, 40, 60, 40.0)

    def disk_io_counters(self):
        return None

    def net_io_counters(self):
        return NetIO(1, 2, 3, 4, 0, 0, 0, 0)

    def pids(self):
        return [1, 2, 3]

    def boot_time(self):
        return 500.0


def test_mount_names():
    assert mount_name("/") == "root"
    assert mount_name("/var/lib") == "var_lib"
    assert mount_name("/mnt/data disk") == "mnt_data_disk"
    assert mount_name("/srv/ü.x/") == "srv_x"


def test_collectors_flat_metrics_from_fake_psutil():
    ps = FakePsutil()
    c = Collectors(["cpu", "load", "memory", "swap", "disk", "diskio", "netio", "procs",
                    "uptime"], source=ps, clock=lambda: 1500.0)
    m = c.collect()
    assert m["cpu.percent"] == 20.0 and m["cpu.user"] == 10.0 and m["cpu.iowait"] == 0.0
    assert m["load.1"] == 0.5 and m["load.15"] == 0.125
    assert m["memory.used_percent"] == 75.0 and m["memory.available"] == 250
    assert m["disk.root.used_percent"] == 40.0 and m["disk.var_lib.free"] == 60
    assert "disk.mnt_data_disk.free" in m
    assert not any(k.startswith(("disk.run", "disk.snap", "disk.gone")) for k in m)
    assert not any(k.startswith("diskio.") for k in m)
    assert m["netio.bytes_recv"] == 2 and m["procs.count"] == 3
    assert m["uptime.seconds"] == 1000.0
    # the next cpu figures cover only the interval since the last call
    ps.cpu = CpuTimes(20, 0, 10, 90, 0, 0, 0, 0, 0, 0)
    m = c.collect()
    assert m["cpu.percent"] == 50.0 and m["cpu.system"] == 0.0


def test_failing_collector_is_skipped_and_logged(caplog):
    ps = FakePsutil()
    ps.fail = {"load"}
    c = Collectors(["load", "memory", "procs"], source=ps)
    with caplog.at_level(logging.WARNING, "agent.collectors"):
        m = c.collect()
        c.collect()
    assert "memory.total" in m and "procs.count" in m and "load.1" not in m
    assert c.failures == 2
    assert len([r for r in caplog.records if "load" in r.getMessage()]) == 1  # throttled


# ---------------------------------------------------------------- intake logic

def test_intake_rewrites_uuid_keeps_msg_id_and_source():
    intake = Intake("agent-uuid", "host-1")
    local = protocol.make("NOTIFY", "local", severity="error", text="x", source="backup")
    msg, err = intake.accept(protocol.encode(protocol.resend(local, 4)))
    assert err is None
    assert msg.uuid == "agent-uuid" and msg.msg_id == local.msg_id
    assert msg.get("source") == "backup" and "dup" not in msg.body and "retry" not in msg.body
    stats, _ = intake.accept(protocol.encode(protocol.make("STATS", "local", metrics={"a": 1})))
    assert stats.get("hostname") == "host-1"


def test_intake_refuses_bad_input_with_status():
    intake = Intake("agent-uuid", "host-1")
    ack = protocol.make("ACK", "local", msg_ids=["x"])
    cases = [
        (protocol.encode(ack), protocol.NOT_ALLOWED),
        ([protocol.SIGNATURE, b"NOTIFY", b"not json"], protocol.BAD_REQUEST),
        ([b"FWP\x07", b"NOTIFY", b"{}"], protocol.VERSION_NOT_SUPPORTED),
        ([protocol.SIGNATURE, b"NOTIFY"], protocol.BAD_REQUEST),
    ]
    for frames, status in cases:
        msg, err = intake.accept(frames)
        assert msg is None and err.type == "ERROR" and err.get("status") == status
    assert intake.accept([b"GET / HTTP/1.1"]) == (None, None)  # foreign: dropped
    assert intake.errors == 5 and intake.received == 5


# ---------------------------------------------------------------- identity

def test_identity_created_once_and_kept(tmp_path):
    state = tmp_path / "state"
    first = identity.load_or_create(str(state))
    assert stat.S_IMODE(os.stat(state).st_mode) == 0o750
    assert stat.S_IMODE(os.stat(state / "uuid").st_mode) == 0o644
    assert identity.load_or_create(str(state)) == first
    assert (state / "uuid").read_text() == first + "\n"
    assert not (state / "uuid.tmp").exists()


def test_identity_new_uuid_keeps_old(tmp_path):
    ids = iter(["11111111-aaaa", "22222222-bbbb"])
    state = str(tmp_path)
    assert identity.renew(state, factory=lambda: next(ids)) == (None, "11111111-aaaa")
    assert identity.renew(state, factory=lambda: next(ids)) == ("11111111-aaaa",
                                                                "22222222-bbbb")
    assert identity.load_or_create(state) == "22222222-bbbb"
    assert (tmp_path / "uuid.old").read_text().strip() == "11111111-aaaa"


def test_identity_garbage_file_is_an_error(tmp_path):
    (tmp_path / "uuid").write_text("not a uuid at all\n")
    with pytest.raises(identity.IdentityError, match="--new-uuid"):
        identity.load_or_create(str(tmp_path))


def test_state_dir_lock_is_exclusive(tmp_path):
    fd = identity.lock(str(tmp_path))
    try:
        with pytest.raises(identity.StateDirBusy):
            identity.lock(str(tmp_path))
    finally:
        os.close(fd)
    os.close(identity.lock(str(tmp_path)))


def test_agent_imports_no_heavy_packages():
    import subprocess
    import sys

    code = ("import sys, agent.main, agent.daemon, agent.client, fleetwatch.cli.send; "
            "bad = [m for m in ('sqlalchemy', 'pyspark', 'apscheduler') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_links_learned_from_welcome_are_capped():
    from agent.links import MAX_LINKS

    links = Links(["tcp://a:1"], lambda e, learned: Link(e, 1.0, learned=learned))
    links.learn([f"tcp://h{i}:1" for i in range(500)])
    assert len(links) == MAX_LINKS


def test_links_drop_learned_routers_no_alive_router_names():
    """SPEC 4.9: a learned link that the newest WELCOME of every alive link leaves out is
    unlisted (to be dropped), unless it is alive itself; configured ones never; nothing
    while no alive link told."""
    links = Links(["tcp://a:1"], lambda e, learned: Link(e, 1.0, learned=learned))
    b, c = links.learn(["tcp://a:1", "tcp://b:1", "tcp://c:1"])
    assert links.unlisted() == []
    a = links.links["tcp://a:1"]
    for i, link in enumerate((a, b, c)):
        link.opened(0)
        link.welcomed(0, f"r{i}")
    a.told = ["tcp://a:1", "tcp://b:1"]
    c.told = ["tcp://c.alias:1"]
    assert links.unlisted() == []               # c answers: kept, whatever it names
    c.closed(1)                                 # c is dead: a's list decides
    assert links.unlisted() == [c]
    b.told = ["tcp://b:1", "tcp://c:1"]         # b still names it: kept
    assert links.unlisted() == []
    b.told = ["tcp://b:1"]
    a.told = ["tcp://b:1"]                      # the configured link is never unlisted
    assert links.unlisted() == [c]
    for link in (a, b):
        link.closed(1)
    assert links.unlisted() == []               # nobody alive tells: nothing is dropped
    links.forget(c)
    assert links.learn(["tcp://c:1"])[0].endpoint == "tcp://c:1"     # named again: back
