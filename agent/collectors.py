"""Host statistics: psutil behind a small interface, one function per collector.

:class:`PsutilSource` is the only place that calls psutil (Telegraf's ``ps.go``); tests pass
a fake with the same methods. :class:`Collectors` runs the configured collectors and returns
one flat dict ``name -> finite number`` (``cpu.percent``, ``load.1``, ``disk.root.free``...).
A collector that fails is logged (throttled) and skipped; the others still report.
"""

from __future__ import annotations

import logging
import math
import re
import time

from fleetwatch.logs import Throttle

log = logging.getLogger(__name__)

#: Filesystems that hold no data of the machine's own (kernel interfaces, memory, read-only
#: images, a container's overlay of another filesystem): never reported by ``disk``.
PSEUDO_FS = frozenset({
    "autofs", "binfmt_misc", "bpf", "cgroup", "cgroup2", "configfs", "debugfs", "devpts",
    "devtmpfs", "efivarfs", "fusectl", "hugetlbfs", "mqueue", "nsfs", "overlay", "proc",
    "pstore", "ramfs", "rpc_pipefs", "securityfs", "squashfs", "sysfs", "tmpfs", "tracefs",
    "iso9660", "erofs", "aufs", "devfs", "nfsd", "selinuxfs", "shm", "fuse.lxcfs",
    "fuse.gvfsd-fuse", "fuse.portal", "fuse.snapfuse", "fuse.squashfuse",
})
#: ``device`` values that name no device (each such mount is its own)
NO_DEVICE = frozenset({"", "none"})

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")


def mount_name(mountpoint: str) -> str:
    """A metric-safe name for a mount point: ``/`` -> ``root``, ``/var/lib`` -> ``var_lib``."""
    name = _UNSAFE.sub("_", mountpoint.strip("/")).strip("_")
    return name or "root"


def disks(partitions) -> list:
    """The partitions ``disk`` reports: no pseudo filesystem, and each device once, at its
    shortest mount point (then the first in sort order), so that the metric name stays the
    same however many bind mounts of it exist (systemd's ``ProtectSystem=``, ``BindPaths=``,
    ``StateDirectory=`` and containers add them, in any order). Shortest first."""
    chosen: dict = {}
    for part in partitions:
        if part.fstype in PSEUDO_FS:
            continue
        key = part.mountpoint if part.device in NO_DEVICE else part.device
        best = chosen.get(key)
        if best is None or (len(part.mountpoint), part.mountpoint) < \
                (len(best.mountpoint), best.mountpoint):
            chosen[key] = part
    return sorted(chosen.values(), key=lambda p: (len(p.mountpoint), p.mountpoint))


class PsutilSource:
    """The few psutil calls the collectors use (the production source)."""

    def __init__(self):
        import psutil
        self._ps = psutil

    def cpu_times(self):
        return self._ps.cpu_times()

    def getloadavg(self):
        return self._ps.getloadavg()

    def virtual_memory(self):
        return self._ps.virtual_memory()

    def swap_memory(self):
        return self._ps.swap_memory()

    def disk_partitions(self):
        # all=False: physical devices only (no nodev filesystems, so no NFS hangs).
        return self._ps.disk_partitions(all=False)

    def disk_usage(self, path: str):
        return self._ps.disk_usage(path)

    def disk_io_counters(self):
        return self._ps.disk_io_counters(perdisk=False)

    def net_io_counters(self):
        return self._ps.net_io_counters(pernic=False)

    def pids(self):
        return self._ps.pids()

    def boot_time(self) -> float:
        return self._ps.boot_time()


class Collectors:
    """Run the named collectors over a source; :meth:`collect` returns the flat metrics."""

    def __init__(self, names, source=None, clock=time.time, throttle: Throttle | None = None):
        self.names = list(names)
        self.source = source if source is not None else PsutilSource()
        self.clock = clock
        self.throttle = throttle or Throttle(log, 60.0)
        self.failures = 0
        self._cpu_prev = None

    def prime(self) -> None:
        """Start the cpu counters now, so the first collection covers one interval."""
        if "cpu" in self.names:
            try:
                self._cpu()
            except Exception as e:  # reported again, throttled, by collect()
                log.debug("cpu collector cannot be primed: %s", e)

    def select(self, names) -> None:
        """Run ``names`` from now on (a config reload); a collector added is primed."""
        added = [n for n in names if n not in self.names]
        self.names = list(names)
        if "cpu" in added:
            self._cpu_prev = None
            self.prime()

    def collect(self) -> dict[str, float]:
        metrics: dict[str, float] = {}
        for name in self.names:
            try:
                values = getattr(self, f"_{name}")()
            except Exception as e:  # a collector must never stop the others
                self.failures += 1
                self.throttle.warning(f"collector.{name}", "collector %s failed: %s: %s",
                                      name, type(e).__name__, e)
                continue
            for key, value in values.items():
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if math.isfinite(value):
                    metrics[key] = value
        return metrics

    # ---------------------------------------------------------------- collectors
    def _cpu(self) -> dict:
        """Percentages over the time since the last call (since boot on the first call)."""
        now = self.source.cpu_times()
        times = now._asdict()
        prev = self._cpu_prev or {k: 0.0 for k in times}
        self._cpu_prev = times
        delta = {k: max(0.0, times[k] - prev.get(k, 0.0)) for k in times}
        # On Linux guest time is already counted in user and nice.
        total = sum(v for k, v in delta.items() if k not in ("guest", "guest_nice"))
        if total <= 0:
            return {}
        idle = delta.get("idle", 0.0) + delta.get("iowait", 0.0)
        out = {"cpu.percent": round(100.0 * (total - idle) / total, 2)}
        for key in ("user", "system", "iowait", "steal"):
            if key in delta:
                out[f"cpu.{key}"] = round(100.0 * delta[key] / total, 2)
        return out

    def _load(self) -> dict:
        one, five, fifteen = self.source.getloadavg()
        return {"load.1": one, "load.5": five, "load.15": fifteen}

    def _memory(self) -> dict:
        m = self.source.virtual_memory()
        return {"memory.total": m.total, "memory.available": m.available,
                "memory.used_percent": m.percent}

    def _swap(self) -> dict:
        s = self.source.swap_memory()
        return {"swap.total": s.total, "swap.used": s.used, "swap.used_percent": s.percent}

    def _disk(self) -> dict:
        out: dict = {}
        for part in disks(self.source.disk_partitions()):
            name = mount_name(part.mountpoint)
            if f"disk.{name}.free" in out:
                continue
            try:
                usage = self.source.disk_usage(part.mountpoint)
            except OSError as e:
                self.throttle.warning(f"disk.{name}", "disk %s: %s", part.mountpoint, e)
                continue
            out[f"disk.{name}.used_percent"] = usage.percent
            out[f"disk.{name}.free"] = usage.free
        return out

    def _diskio(self) -> dict:
        c = self.source.disk_io_counters()
        if c is None:  # no disks (some containers)
            return {}
        return {"diskio.read_bytes": c.read_bytes, "diskio.write_bytes": c.write_bytes,
                "diskio.reads": c.read_count, "diskio.writes": c.write_count}

    def _netio(self) -> dict:
        c = self.source.net_io_counters()
        if c is None:
            return {}
        return {"netio.bytes_sent": c.bytes_sent, "netio.bytes_recv": c.bytes_recv,
                "netio.packets_sent": c.packets_sent, "netio.packets_recv": c.packets_recv,
                "netio.errin": c.errin, "netio.errout": c.errout,
                "netio.dropin": c.dropin, "netio.dropout": c.dropout}

    def _procs(self) -> dict:
        return {"procs.count": len(self.source.pids())}

    def _uptime(self) -> dict:
        return {"uptime.seconds": round(max(0.0, self.clock() - self.source.boot_time()), 1)}
