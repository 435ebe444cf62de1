"""The poller's devices at work inside the agent (docs/operating/devices.md).

:class:`Devices` is what :class:`agent.daemon.Agent` holds when its config declares
``devices``: every :class:`agent.devices.hosts.DeviceHost`, the devices' one spool
(``STATE_DIR/devices-spool.db``), and the asyncio loop (:class:`agent.devices.loop.
DevicesLoop`) where the SNMP polls (:class:`agent.devices.snmp.Poller`) and the trap receiver
(:class:`agent.devices.traps.TrapReceiver`) run.

- **Polls** run on the loop, one task a device: the first after a share of
  :data:`FIRST_SPREAD` seconds drawn from its uuid (a thousand devices do not all start at
  once), then in the device's own slot of each ``interval`` (the same share of it: the
  polls spread over the interval), or sooner after a linkDown or linkUp trap. Each poll comes
  back to the agent's thread (:meth:`Devices.taken`), which alone sends.
- **Traps** are spooled on the loop (an inform is answered once its NOTIFY is on disk), then
  handed to the agent's thread for the interface's check.
- **The agent's loop** asks :meth:`Devices.deadline`, calls :meth:`Devices.timers` and hands
  the readable sockets to :meth:`Devices.handle`. Each device keeps when its timers are
  due next, and only those due (or touched by an event since) run; the soonest is rounded
  up to :data:`TICK`: a thousand devices' heartbeats wake the agent a few times a second,
  not a thousand. The spool's due messages are read once for all devices and each sent
  through the links of its own device.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import logging
import math
import os
import socket
import sqlite3
import threading

from fleetwatch.limits import raise_limit
from fleetwatch.logs import Throttle

from agent.devices import synthetic
from agent.devices.hosts import DeviceHost, DeviceSpool, Shared
from agent.devices.loop import DevicesLoop
from agent.execute import Workers
from agent.spool import Spool
from agent.spool.acks import FleetRoutes

log = logging.getLogger(__name__)

#: the first polls are spread over this many seconds (or the interval, if shorter)
FIRST_SPREAD = 10.0
#: the devices' timers are rounded up to a multiple of this (seconds)
TICK = 0.25
#: the spool's file in the state directory
SPOOL_FILE = "devices-spool.db"


class StartError(Exception):
    """The devices cannot start (pysnmp missing, a port taken); ``str()`` is one line."""


def share(uuid: str) -> float:
    """A device's place in its interval, 0 to 1, drawn from its uuid (stable)."""
    return int.from_bytes(hashlib.sha256(uuid.encode()).digest()[:4], "big") / 2 ** 32


def phase(uuid: str, interval: float) -> float:
    """A device's first poll, seconds after start: its :func:`share` of :data:`FIRST_SPREAD`
    (or of the interval, if shorter): a new device is seen within seconds."""
    return share(uuid) * min(interval, FIRST_SPREAD)


def next_poll(uuid: str, interval: float, origin: float, last: float) -> float:
    """When to poll next after a poll started at ``last``: the first of the device's own
    slots (``origin`` + its :func:`share` of the interval + whole intervals) at least half
    an interval after it. So the polls of many devices spread over the whole interval, not
    over the first ones' :data:`FIRST_SPREAD` (bench/snmp.py: 1,000 devices polled flat out
    take the poller about a core), whatever the first poll or a trap's early one did."""
    first = origin + share(uuid) * interval
    slots = math.ceil((last + interval / 2 - first) / interval)
    return first + max(0, slots) * interval


class Devices:
    """Every device of one poller, and what they share."""

    def __init__(self, cfg, poller: str, hostname: str, instance: str, ctx, zpoller, keys,
                 work, clock, wall, rand):
        self.cfg, self.clock, self.wall = cfg, clock, wall
        path = os.path.join(cfg.state_dir, SPOOL_FILE)
        try:
            self.spool = Spool(path, cfg.spool.max_messages, cfg.spool.ack_timeout,
                               cfg.spool.max_backoff, required=cfg.spool.required_acks())
        except (sqlite3.Error, OSError) as e:
            raise StartError(f"spool {path}: {e}") from None
        self.lock = threading.Lock()
        self.counters: collections.Counter = collections.Counter()
        self.index: dict = {}
        #: the synthetic checks' worker threads (``work``: the agent's runner's), all devices'
        self.workers = Workers(cfg.devices.max_running, work)
        view = DeviceSpool(self.spool, self.lock, self._spooled)
        shared = Shared(cfg, poller, hostname, instance, ctx, zpoller, keys,
                        view, FleetRoutes(self.spool.fallback),
                        self.workers, self.counters, self.index, clock, wall, rand)
        try:
            self.hosts = [DeviceHost(device, shared) for device in cfg.devices.hosts]
        except ValueError as e:             # the agent's uuid leaves no room for a device's
            self.spool.close()
            raise StartError(str(e)) from None
        self.by_uuid = {host.uuid: host for host in self.hosts}
        self.by_name = {host.name: host for host in self.hosts}
        self.loop = DevicesLoop()
        self.poller = self.receiver = None
        #: device name -> an asyncio.Event that starts its next poll now (a link trap)
        self.soon: dict[str, asyncio.Event] = {}
        self.throttle = Throttle(log, 10.0, clock)
        #: when the spool's next message is due (the clock; None: none), and the soonest
        #: timer of a device (each keeps its own, ``DeviceHost.next_at``)
        self.next_due: float | None = 0.0
        self.next_at = 0.0

    # ---------------------------------------------------------------- life cycle
    def start(self) -> None:
        """Start the loop, the trap receiver and the polls; spool each device's REGISTER.
        StartError when pysnmp is missing, a secret cannot be read any more (it was at the
        config's load) or the trap port cannot be bound."""
        try:
            self._start()
        except ValueError as e:             # a secret's file gone or emptied since the load
            raise StartError(f"devices: {e}") from None

    def _start(self) -> None:
        polled = [h for h in self.hosts if h.device.snmp is not None]
        traps = self.cfg.devices.traps
        if polled or traps.enabled:
            try:
                from agent.devices import snmp, traps as trapping
            except ModuleNotFoundError as e:
                raise StartError(f"devices polled by SNMP need the Python package {e.name!r}: "
                                 f"pip install 'fleetwatch[snmp]'") from None
        for host in self.hosts:
            for line in synthetic.missing(list(host.declared.own.values())):
                log.warning("device %s: %s (its RUNs will be answered UNKNOWN)", host.name, line)
        wanted = self.cfg.devices.descriptors(self.cfg.device_links)
        before, after = raise_limit(wanted)
        if after < wanted:
            log.warning("descriptor limit %d, below the %d that %d devices may hold "
                        "(LimitNOFILE=: fleetwatch service install sizes the unit)", after,
                        wanted, len(self.hosts))
        elif after > before:
            log.info("descriptor limit raised from %d to %d for %d devices", before, after,
                     len(self.hosts))
        self.workers.start()
        self.loop.start()
        if polled:
            self.poller = self.loop.run(self._make_poller(
                snmp.Poller, self.cfg.devices.max_concurrent))
        if traps.enabled:
            self.receiver = trapping.TrapReceiver(
                self._device_of(), self._on_trap, listen=traps.address,
                communities_file=traps.communities_file,
                users=[snmp.Credentials.of_usm(u) for u in traps.users],
                engine_ids=[(u.user, u.engine_id) for u in traps.users if u.engine_id],
                rate=traps.rate, burst=traps.burst)
            try:
                self.loop.run(self.receiver.start(), timeout=15)
            except OSError as e:
                raise StartError(str(e)) from None
        for host in polled:
            credentials = _credentials(snmp, host.device.snmp)
            target = snmp.Target(host.device.address, host.device.snmp.port, credentials,
                                 host.device.timeout, host.device.retries,
                                 host.device.snmp.max_repetitions,
                                 deadline=min(host.device.interval, 30.0))
            self.loop.submit(self._polling(host, target, host.device.snmp.extra))
        for host in self.hosts:
            host.outbox.spool_messages([host.register()])
        log.info("devices: %d (%d polled by SNMP), traps %s", len(self.hosts), len(polled),
                 "on %s port %d" % self.receiver.address if self.receiver else "off")

    def close(self) -> None:
        cleanups = []
        if self.receiver is not None:
            cleanups.append(self.receiver.close())
        if self.poller is not None:
            cleanups.append(self._close_poller())
        self.loop.close(*cleanups)
        self.workers.close()
        for host in self.hosts:
            host.sockets.close_all()
        self.spool.close()

    async def _close_poller(self) -> None:
        self.poller.close()

    @staticmethod
    async def _make_poller(make, most: int):
        return make(max_concurrent=most)           # its semaphore is the loop's

    # ---------------------------------------------------------------- the loop's side
    async def _polling(self, host: DeviceHost, target, extra: dict) -> None:
        """Poll ``host`` for ever: first at its :func:`phase`, then in its own slot of each
        interval (:func:`next_poll`), or as soon as a link trap asks (:attr:`soon`)."""
        soon = self.soon[host.name] = asyncio.Event()
        clock = asyncio.get_running_loop().time
        origin, interval = clock(), host.device.interval
        wait = phase(host.uuid, interval)
        while True:
            try:
                await asyncio.wait_for(soon.wait(), wait)
            except TimeoutError:
                pass
            soon.clear()
            started = clock()
            poll = await self.poller.poll(target, extra)
            self.loop.post(("poll", host, poll))
            wait = max(0.0, next_poll(host.uuid, interval, origin, started) - clock())

    def _device_of(self):
        """The receiver's ``device_of``: the IP addresses of the devices that take traps
        (names resolved once, here, at start: a name that does not resolve is logged)."""
        addresses: dict[str, str] = {}
        for address, name in self.cfg.devices.trap_sources().items():
            try:
                infos = socket.getaddrinfo(address, None, type=socket.SOCK_DGRAM)
            except OSError as e:
                log.warning("device %s: its address %s does not resolve (%s): its traps are "
                            "not taken", name, address, e.strerror or e)
                continue
            for info in infos:
                addresses.setdefault(str(info[4][0]), name)
        return addresses.get

    def _on_trap(self, trap) -> bool:
        """The receiver's ``on_trap`` (on the loop): the trap's NOTIFY spooled, then the
        trap handed to the agent's thread; False when the spool cannot take it."""
        host = self.by_name.get(trap.device)
        if host is None:
            return False
        try:
            host.outbox.spool_messages([host.trap_notify(trap)], own=False)
        except sqlite3.Error as e:
            self.throttle.warning("trap.spool", "a trap of %s not taken: the spool: %s",
                                  host.name, e)
            return False
        self.loop.post(("trap", host, trap))
        return True

    def _spooled(self) -> None:
        """Something was spooled (either thread): the next timers send it."""
        self.next_due = 0.0

    # ---------------------------------------------------------------- the agent's thread
    def ran(self) -> None:
        """The workers woke the agent: each finished check answered by its device, the
        next ones started."""
        touched = {}
        for job, result in self.workers.finished():
            host = self.by_uuid.get(job.owner)
            if host is not None:
                host.runs._answer(host.runner.finish(job, result))
                touched[host.uuid] = host
                self.touch(host)
        for host in touched.values():
            host.runs.start()

    def taken(self) -> None:
        """What the loop posted: polls and traps, each to its device."""
        for kind, host, item in self.loop.taken():
            self.touch(host)
            if kind == "poll":
                host.polled(item)
            elif host.trapped(item):
                event = self.soon.get(host.name)
                if event is not None:
                    self.loop.loop.call_soon_threadsafe(event.set)

    @property
    def wakes(self) -> list[int]:
        """The descriptors the agent's poller watches for the devices: what the loop posted,
        the synthetic checks' workers."""
        return [self.loop.wake.fileno(), self.workers.wake.fileno()]

    def handle(self, events: dict, now: float) -> None:
        """What ``events`` (the agent's poller's) holds for the devices: what the loop
        posted, finished checks, their readable sockets."""
        if self.loop.wake.fileno() in events:
            self.taken()
        if self.workers.wake.fileno() in events:
            self.ran()
        for sock in events:
            entry = self.index.get(sock)
            if entry is None:
                continue
            host, link, monitor = entry
            self.touch(host)
            if monitor:
                host.routers.handshake_failed(sock, link)
            else:
                host.routers.drain(sock, link, now)

    def deadline(self, now: float) -> float:
        """The next time the devices need the agent's loop, rounded up to :data:`TICK`."""
        soonest = self.next_at
        if self.next_due is not None:
            soonest = min(soonest, self.next_due)
        retry = self.spool.next_retry()
        if retry is not None:
            soonest = min(soonest, now + (retry - self.wall()))
        return math.ceil(soonest / TICK) * TICK if math.isfinite(soonest) else soonest

    def timers(self, now: float) -> None:
        """The timers of the devices that are due (or were touched since: :meth:`touch`),
        each then telling when it is due next; the spool's retries and resends."""
        if now >= self.next_at:
            soonest = math.inf
            for host in self.hosts:
                if host.next_at <= now:
                    host.routers.timers(now)
                    host.outbox.timers(now)
                    host.next_at = min(host.routers.deadline(), host.outbox.deadline(now))
                soonest = min(soonest, host.next_at)
            self.next_at = soonest
        if self.spool.next_retry() is not None or (self.next_due is not None
                                                   and now >= self.next_due):
            with self.lock:
                self.spool.retry(self.wall())
                if self.next_due is not None and now >= self.next_due and \
                        any(h.links.alive() for h in self.hosts):
                    self._resend(now)

    def touch(self, host: DeviceHost) -> None:
        """Something happened to ``host`` (a message, a poll, a check): its timers run at
        the next :meth:`timers`."""
        host.next_at = self.next_at = 0.0

    def _resend(self, now: float) -> None:
        """The spool's due messages, each through its own device's links (one that has no
        alive link keeps it for its next resend)."""
        for msg in self.spool.due(self.wall()):
            host = self.by_uuid.get(msg.uuid)
            if host is None:            # a device no longer in the config: let it go
                self.spool.ack([msg.msg_id], None)
                self.counters["agent.spool.orphans"] += 1
                continue
            host.outbox.resend(msg)
        due = self.spool.next_due()
        self.next_due = None if due is None else now + max(0.0, due - self.wall())

    # ---------------------------------------------------------------- metrics
    def metrics(self) -> dict:
        """The poller's own series about its devices (in the agent's STATS)."""
        out = {f"agent.devices.{k.removeprefix('agent.')}": v
               for k, v in self.counters.items()}
        alive = sum(1 for h in self.hosts if h.answering())
        out.update({"agent.devices.hosts": len(self.hosts), "agent.devices.answering": alive,
                    "agent.devices.spool.size": len(self.spool),
                    "agent.devices.spool.dropped": self.spool.dropped,
                    "agent.devices.routers.alive": sum(len(h.links.alive())
                                                       for h in self.hosts)})
        runs = collections.Counter()
        for host in self.hosts:
            runs.update(host.runner.counters)
            if host.readings is not None:
                runs.update({f"agent.devices.readings.{k}": v
                             for k, v in host.readings.counts.items()})
        out.update({k.replace("agent.runs.", "agent.devices.runs."): v
                    for k, v in runs.items()})
        for prefix, counts in (("snmp", self.poller and self.poller.counts),
                               ("traps", self.receiver and self.receiver.counters)):
            for name, value in _snapshot(counts).items():
                key = name if name.startswith(prefix) else f"{prefix}_{name}"
                out[f"agent.devices.{key}"] = value
        return out


def _snapshot(counts) -> dict:
    """A copy of a Counter the devices' loop writes to (a copy made while it adds a key
    is tried again)."""
    for _ in range(5):
        try:
            return dict(counts or {})
        except RuntimeError:
            continue
    return {}


def _credentials(snmp, config):
    if config.version == "2c":
        return snmp.Credentials.v2c(config.community_file)
    return snmp.Credentials.of_usm(config)

