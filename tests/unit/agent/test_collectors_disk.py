"""The disk collector over fake psutil partitions: bind mounts (systemd's ProtectSystem=,
StateDirectory=, BindPaths=; containers) and pseudo filesystems must not add metrics, and
the metric names must not depend on the order /proc/mounts lists them in."""

from __future__ import annotations

import random
from collections import namedtuple

from agent.collectors import Collectors, disks

Part = namedtuple("Part", "device mountpoint fstype opts")
Usage = namedtuple("Usage", "total used free percent")

#: what an agent under systemd sees: / and /boot, / again at the paths systemd bind-mounts
#: for the service, /home twice, a container's overlay, and pseudo filesystems
MOUNTS = [
    Part("/dev/sda1", "/var/lib/fleetwatch/agent", "ext4", "rw,bind"),
    Part("/dev/sda1", "/", "ext4", "ro"),
    Part("/dev/sda1", "/run/fleetwatch/agent", "ext4", "rw"),
    Part("/dev/sda2", "/boot", "ext4", "ro"),
    Part("/dev/sdb1", "/srv/home-bind", "xfs", "rw"),
    Part("/dev/sdb1", "/home", "xfs", "ro"),
    Part("overlay", "/var/lib/docker/overlay2/abc/merged", "overlay", "rw"),
    Part("tmpfs", "/tmp", "tmpfs", "rw"),
    Part("/dev/loop3", "/snap/core/1", "squashfs", "ro"),
    Part("lxcfs", "/proc/cpuinfo", "fuse.lxcfs", "rw"),
    Part("none", "/mnt/a", "ext4", "rw"),        # no device name: each mount is its own
    Part("none", "/mnt/b", "ext4", "rw"),
]

USAGE = {"/": Usage(100, 40, 60, 40.0), "/boot": Usage(10, 5, 5, 50.0),
         "/home": Usage(200, 20, 180, 10.0), "/mnt/a": Usage(1, 0, 1, 0.0),
         "/mnt/b": Usage(1, 0, 1, 0.0)}


class FakeSource:
    def __init__(self, parts):
        self.parts = parts
        self.asked: list[str] = []

    def disk_partitions(self):
        return list(self.parts)

    def disk_usage(self, path):
        self.asked.append(path)
        return USAGE[path]


def test_each_device_once_at_its_shortest_mount_point_no_pseudo_filesystems():
    chosen = disks(MOUNTS)
    assert [p.mountpoint for p in chosen] == ["/", "/boot", "/home", "/mnt/a", "/mnt/b"]


def test_metric_names_do_not_depend_on_mount_order():
    expected = None
    rng = random.Random(7)
    orders = [MOUNTS, MOUNTS[::-1], *(rng.sample(MOUNTS, len(MOUNTS)) for _ in range(200))]
    for order in orders:
        source = FakeSource(order)
        metrics = Collectors(["disk"], source=source).collect()
        if expected is None:
            expected = metrics
        assert metrics == expected
        assert sorted(source.asked) == ["/", "/boot", "/home", "/mnt/a", "/mnt/b"]
    assert expected == {
        "disk.root.used_percent": 40.0, "disk.root.free": 60,
        "disk.boot.used_percent": 50.0, "disk.boot.free": 5,
        "disk.home.used_percent": 10.0, "disk.home.free": 180,
        "disk.mnt_a.used_percent": 0.0, "disk.mnt_a.free": 1,
        "disk.mnt_b.used_percent": 0.0, "disk.mnt_b.free": 1,
    }


def test_equal_lengths_pick_the_first_in_sort_order():
    parts = [Part("/dev/sdc1", "/data/b", "ext4", ""), Part("/dev/sdc1", "/data/a", "ext4", "")]
    assert [p.mountpoint for p in disks(parts)] == ["/data/a"]
    assert [p.mountpoint for p in disks(parts[::-1])] == ["/data/a"]


def test_a_real_psutil_partition_list_goes_through():
    psutil = __import__("psutil")
    chosen = disks(psutil.disk_partitions(all=False))
    devices = [p.device for p in chosen if p.device not in ("", "none")]
    assert len(devices) == len(set(devices))
    assert all(p.fstype not in ("tmpfs", "overlay", "squashfs", "proc") for p in chosen)


def test_select_changes_the_collectors_and_primes_cpu():
    CpuTimes = namedtuple("CpuTimes", "user system idle")

    class Source(FakeSource):
        def __init__(self):
            super().__init__(MOUNTS)
            self.cpu = CpuTimes(10, 10, 80)

        def cpu_times(self):
            return self.cpu

        def getloadavg(self):
            return (1.0, 2.0, 3.0)

    source = Source()
    c = Collectors(["load"], source=source)
    assert set(c.collect()) == {"load.1", "load.5", "load.15"}
    c.select(["cpu", "disk"])
    source.cpu = CpuTimes(20, 10, 90)      # the first figures cover the time since select
    m = c.collect()
    assert "load.1" not in m and m["disk.root.free"] == 60
    assert m["cpu.percent"] == 50.0
