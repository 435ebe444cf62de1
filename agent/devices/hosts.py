"""Each device as a host of the fleet, on the agent's side: its own connections to the
routers, under its own uuid, with the agent's own parts (SPEC.md 7.2).

A device ``SLUG`` polled by the agent ``POLLER`` is the host ``POLLER@SLUG``: a
:class:`DeviceHost` holds its links and DEALERs (:mod:`agent.links`, with the agent's CURVE
key, which the routers bind to its devices too), its :class:`agent.routers.Routers` (HELLO
``role: device``, its name as hostname, its parents: the poller's hostname unless its config
says others), its :class:`agent.outbox.Outbox` (its at-most-once queue; its spooled messages
in the devices' one spool, :class:`DeviceSpool`) and, for its synthetic checks, a
:class:`agent.runner.Runner` whose jobs run on the devices' own plugin workers
(``devices.max_running``).

What makes it more than a copy of the agent:

- **It heartbeats only while it answers** (:meth:`DeviceHost.answering`): an SNMP poll
  answered, or its ``alive`` check in OK or WARNING, within its last two intervals. A device
  that stops answering goes silent and the alerting sinks call it DOWN by their host timeout;
  a poller that stops makes all its devices silent at once, and its own DOWN makes them
  UNREACHABLE (their parent), one page.
- **Its SNMP checks are made by the poller**, not run on a RUN: ``snmp`` and one ``if_NODE``
  per interface are declared with ``passive: true`` (SPEC 4.5: a scheduler sends no RUN for
  them; the alerting sinks still judge their freshness) and sent as RESULTs at each poll. A
  RUN for one (a scheduler older than ``passive``) is answered with its latest result.
- **A trap is its NOTIFY**, spooled from the devices' loop before an inform is answered; a
  linkDown or linkUp also gives its interface's check at once, and a poll soon after.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading

import fleetwatch
from fleetwatch import protocol

from agent.declared import Declared
from agent.devices import readings as read, synthetic
from agent.devices.notifications import Trap
from agent.links import Link, Links, Sockets
from agent.outbox import Outbox
from agent.routers import Routers, parents as routers_parents
from agent.runner import Runner
from agent.runs import Runs

log = logging.getLogger(__name__)

#: at-most-once messages (STATS, RESULT) a device holds while none of its routers is alive
QUEUE = 64
#: a device answers (heartbeats) for this many of its intervals after its last good sign
ALIVE_INTERVALS = 2
#: trap name -> NOTIFY severity (any other trap: warning)
SEVERITY = {"linkDown": "error", "linkUp": "info", "coldStart": "warning",
            "warmStart": "warning", "authenticationFailure": "warning"}
#: ifOperStatus of a linkDown and a linkUp without one (IF-MIB: down 2, up 1)
LINK_OPER = {"linkDown": 2, "linkUp": 1}


class DeviceSpool:
    """The devices' one spool as each device's :class:`agent.outbox.Outbox` sees it: adds,
    ACKs and durable routes go to it under a lock (traps are spooled from the devices' loop,
    the rest from the agent's thread); its sends and resends are :class:`agent.devices.
    service.Devices`'s, one scan for every device, so it shows a device none."""

    def __init__(self, spool, lock: threading.Lock, spooled=lambda: None):
        self.spool, self.lock = spool, lock
        #: called after each add (from either thread): the owner sends it at its next timers
        self.spooled = spooled

    def __getattr__(self, name):            # fallback, required, max_messages...
        return getattr(self.spool, name)

    def add(self, messages) -> int:
        with self.lock:
            dropped = self.spool.add(messages)
        self.spooled()
        return dropped

    def ack(self, msg_ids, sink=None):
        with self.lock:
            return self.spool.ack(msg_ids, sink)

    def retarget(self, required) -> int:
        with self.lock:
            return self.spool.retarget(required)

    def next_due(self):
        return None

    def next_retry(self):
        return None

    def retry(self, now=None) -> None:
        pass

    def due(self, now=None, limit: int = 256) -> list:
        return []


class DeviceRuns(Runs):
    """A device's plugin runs: its RESULTs also tell it whether it answers (its ``alive``
    check, :meth:`DeviceHost.ran`)."""

    host: DeviceHost

    def _answer(self, answers) -> None:
        answers = list(answers)
        for _, msg in answers:
            self.host.ran(msg)
        super()._answer(answers)


class HostSockets(Sockets):
    """A device's DEALERs, each also entered in ``index`` (socket -> (host, link, is it a
    CURVE monitor)): the agent's loop finds a readable socket's device there."""

    def __init__(self, ctx, uuid: str, poller, keys, index: dict, host: DeviceHost):
        super().__init__(ctx, uuid, poller, keys)
        self.index, self.host = index, host

    def open(self, link: Link):
        sock = super().open(link)
        self.index[sock] = (self.host, link, False)
        monitor = self._monitor_of.get(link.endpoint)
        if monitor is not None:
            self.index[monitor] = (self.host, link, True)
        return sock

    def close(self, link: Link) -> None:
        sock = self.by_link.get(link.endpoint)
        monitor = self._monitor_of.get(link.endpoint)
        self.index.pop(sock, None)
        self.index.pop(monitor, None)
        super().close(link)


@dataclasses.dataclass
class Shared:
    """What every device of one poller shares with it."""

    cfg: object                     # the agent's AgentConfig
    poller: str                     # the agent's uuid
    poller_hostname: str
    instance: str
    ctx: object
    zpoller: object                 # the agent's zmq.Poller
    keys: object
    spool: DeviceSpool
    routes: object                  # agent.spool.acks.FleetRoutes: one for every device
    workers: object                 # the devices' agent.execute.Workers
    counters: object                # the devices' parts' counters (agent.devices.*)
    index: dict                     # socket -> (host, link, monitor?)
    clock: object
    wall: object
    rand: object


class DeviceHost:
    """One device: its uuid, connections, checks and the messages it sends."""

    def __init__(self, device, shared: Shared):
        cfg, devices = shared.cfg, shared.cfg.devices
        self.device, self.name = device, device.name
        self.uuid = protocol.device_uuid(shared.poller, device.name)
        self.clock, self.wall = shared.clock, shared.wall
        beat = devices.heartbeat_interval
        self.heartbeat = beat
        self.sockets = HostSockets(shared.ctx, self.uuid, shared.zpoller, shared.keys,
                                   shared.index, self)
        self.links = Links(cfg.routers, lambda endpoint, learned: Link(
            endpoint, beat, cfg.liveness, cfg.reconnect_min, cfg.reconnect_max,
            learned=learned, rand=shared.rand))
        self.outbox = Outbox(self.uuid, shared.spool, self.links, self.sockets,
                             shared.counters, QUEUE, shared.clock, shared.wall)
        self.outbox.routes = shared.routes
        self.declared = Declared(synthetic.specs(device))
        plugins = dataclasses.replace(cfg.plugins, dirs=list(synthetic.DIRS), checks=[])
        self.runner = Runner(self.uuid, self.declared, plugins, clock=shared.clock,
                             wall=shared.wall)
        self.runs = DeviceRuns(self.runner, shared.workers, self.declared, self.links,
                               self.outbox)
        self.runs.host = self
        self.parents = tuple(device.parents or (shared.poller_hostname,))
        self.routers = Routers(self.uuid, device.name, shared.instance, beat, self.links,
                               self.sockets, self.outbox, self, shared.counters, self.on_run,
                               shared.clock, shared.wall, k=cfg.routers_k)
        self.routers.role = "device"
        self.routers.parents = self.parents
        self.routers.beating = self.answering
        snmp = device.snmp
        self.readings = read.Readings(snmp.max_interfaces, snmp.interfaces.include,
                                      snmp.interfaces.exclude) if snmp is not None else None
        #: the checks the poller makes (``passive``): name -> its latest result
        self.latest: dict[str, read.Check] = {}
        #: their names as last declared (REGISTER and HELLO)
        self.passive: tuple[str, ...] = (read.SNMP_CHECK,) if snmp is not None else ()
        #: until when (the clock) it answers: heartbeats go out until then
        self.alive_until = 0.0
        #: when its timers are due next (agent.devices.service.Devices.timers)
        self.next_at = 0.0
        #: its going quiet was logged (once each time)
        self.quiet_logged = False
        self.polls = 0

    def __repr__(self) -> str:
        return f"DeviceHost({self.name!r}, {self.uuid})"

    # ---------------------------------------------------------------- declared
    def own_wire(self) -> list[dict]:
        """Its plugins on the wire (HELLO, REGISTER): the synthetic checks it runs, then the
        checks the poller makes, ``passive``."""
        timeout = self.device.timeout * (self.device.retries + 1)
        return [*self.declared.own_wire(),
                *({"name": name, "interval": self.device.interval, "timeout": timeout,
                   "passive": True} for name in self.passive)]

    def register(self) -> protocol.Message:
        """Its REGISTER (at start, and when its interfaces change), spooled."""
        return protocol.make("REGISTER", self.uuid, clock=self.wall, name="agent",
                             plugins=self.own_wire(), heartbeat=self.heartbeat,
                             hostname=self.name, version=fleetwatch.__version__,
                             **routers_parents(self.parents))

    def _alive(self, good: bool, interval: float) -> None:
        """A sign of life, or of none: only a good one moves :attr:`alive_until` (one lost
        poll is the ``snmp`` check's problem; the device's silence comes after two)."""
        if good:
            if not self.answering():
                log.info("device %s answers: heartbeats on", self.name)
            self.alive_until = self.clock() + ALIVE_INTERVALS * interval
            self.quiet_logged = False

    def answering(self) -> bool:
        """Whether it heartbeats now: its last good sign is recent enough."""
        if self.clock() < self.alive_until:
            return True
        if not self.quiet_logged and self.alive_until:
            log.info("device %s has not answered for %d intervals: heartbeats off (DOWN "
                     "after the sinks' host timeout)", self.name, ALIVE_INTERVALS)
            self.quiet_logged = True
        return False

    # ---------------------------------------------------------------- what comes in
    def on_run(self, msg: protocol.Message, endpoint: str) -> None:
        """A RUN: one of its synthetic checks runs; one of the poller's checks is answered
        with its latest result (a scheduler that does not know ``passive``)."""
        name = msg.get("plugin")
        if name in self.passive:
            check = self.latest.get(name)
            if check is None:
                check = read.Check(name, read.UNKNOWN, f"{name}: no poll has answered yet")
            self.runs._answer([(endpoint, self._result(check, msg.get("command_id"),
                                                       slot=msg.get("slot")))])
            return
        self.runs.submit(msg, endpoint)

    def ran(self, msg: protocol.Message) -> None:
        """One of its RESULTs of a synthetic check: the ``alive`` check's says if it
        answers."""
        if self.device.snmp is None or self.device.alive_check != "snmp":
            if msg.get("plugin") == self.device.alive_check:
                plugin = self.declared.own.get(msg.get("plugin"))
                interval = plugin.interval if plugin is not None else self.device.interval
                self._alive(msg.get("status") in (read.OK, read.WARNING), interval)

    def polled(self, poll) -> None:
        """A poll came back: its STATS, its checks' RESULTs, its events' NOTIFYs; the
        heartbeats follow its answer; a new set of interfaces is declared again."""
        self.polls += 1
        reading = self.readings.update(poll)
        if self.device.alive_check == "snmp":
            self._alive(poll.ok, self.device.interval)
        if reading.metrics:
            self._at_most_once(protocol.make("STATS", self.uuid, clock=self.wall,
                                             hostname=self.name, metrics=reading.metrics))
        started = self.wall() - poll.duration
        for check in reading.checks:
            self.latest[check.name] = check
            self._at_most_once(self._result(check, started=started, duration=poll.duration))
        if poll.ok:
            names = (read.SNMP_CHECK, *(c.name for c in reading.checks
                                        if c.name.startswith(read.IF_CHECK)))
            if names != self.passive:
                for gone in set(self.passive) - set(names):
                    self.latest.pop(gone, None)
                self.passive = names
                self.outbox.spool_messages([self.register()])
        if reading.events:
            self.outbox.spool_messages([protocol.make(
                "NOTIFY", self.uuid, clock=self.wall, severity=e.severity, source="snmp",
                text=e.text) for e in reading.events])

    def trap_notify(self, trap: Trap) -> protocol.Message:
        """The NOTIFY of ``trap`` (made on the devices' loop, spooled there)."""
        return protocol.make("NOTIFY", self.uuid, clock=self.wall,
                             severity=SEVERITY.get(trap.name, "warning"), source="snmp-trap",
                             text=f"SNMPv{trap.version} {trap.kind} from {trap.address}: "
                                  f"{trap.summary()}")

    def trapped(self, trap: Trap) -> bool:
        """A trap of this device was spooled: a linkDown or linkUp gives its interface's
        check at once. True when a poll should follow soon."""
        fallback = LINK_OPER.get(trap.name)
        if fallback is None or self.readings is None:
            return False
        check = self.readings.link_check(trap.if_index, trap.admin_status, trap.oper_status,
                                         fallback)
        if check is not None:
            self.latest[check.name] = check
            self._at_most_once(self._result(check, started=self.wall()))
        return True

    # ---------------------------------------------------------------- what goes out
    def _result(self, check: read.Check, command_id: str | None = None, slot=None,
                started: float | None = None, duration: float = 0.0) -> protocol.Message:
        boot, seq = self.runner.next_order()
        fields = {"slot": slot} if isinstance(slot, (int, float)) else {}
        return protocol.make("RESULT", self.uuid, clock=self.wall,
                             command_id=command_id or f"p:{os.urandom(12).hex()}",
                             plugin=check.name, status=check.status, output=check.output,
                             perfdata=check.perfdata,
                             started=self.wall() if started is None else started,
                             duration=round(duration, 6), boot=boot, seq=seq, **fields)

    def _at_most_once(self, msg: protocol.Message) -> None:
        """Through an alive link now, else held in its bounded queue."""
        link = self.links.pick()
        if link is None:
            self.outbox.enqueue(msg)
        else:
            self.outbox.send(link, msg)
