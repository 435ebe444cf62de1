"""The agent's main loop: one thread, one zmq.Poller over the router DEALERs and the intake.

Each wake-up drains the sockets that are readable, then runs the timers: reconnects,
liveness expiry and heartbeats (:mod:`agent.routers`), the stats collection (one STATS
message per collection, the agent's own metrics included: :mod:`agent.selfstats`), the
at-most-once queue and the spool's resends (:mod:`agent.outbox`). Local processes' messages
are taken by :mod:`agent.reception`; a RUN goes to :mod:`agent.runs`, whose worker threads
wake the poller through a socket pair, so that this thread alone sends (SPEC.md 4.5). A spool
that cannot be written (a full disk) keeps its bookkeeping in memory (:mod:`agent.spool`):
the loop still sends, and sleeps until its next timer (a retry of the writes among them).
SIGTERM and SIGINT wake the poller (:mod:`agent.wakeup`) and stop the loop cleanly; SIGHUP
wakes it to re-read the config (:mod:`agent.reload`).
"""

from __future__ import annotations

import logging
import math
import os
import random
import sqlite3
import time

import zmq

import fleetwatch
from fleetwatch import protocol, sdnotify
from fleetwatch.logs import Throttle

from agent import reload, selfstats
from agent.declared import Declared
from agent.execute import Workers
from agent.intake import Intake, IntakeSocket, group_id
from agent.links import Link, Links, Sockets
from agent.outbox import Outbox
from agent.reception import Reception
from agent.routers import Routers, ephemeral, parents as routers_parents
from agent.runner import Runner
from agent.runs import Runs
from agent.wakeup import Wakeup

log = logging.getLogger(__name__)

MAX_POLL = 5.0


class StartError(Exception):
    """The agent cannot start (its intake cannot be bound); ``str()`` is one line."""


class Agent:
    """The daemon: owns every socket and the loop; its parts hold the logic."""

    def __init__(self, cfg, uuid: str, hostname: str, spool, collectors,
                 ctx: zmq.Context | None = None, clock=time.monotonic, wall=time.time,
                 rand=random.random, keys=None, notifier=None, config_path: str | None = None):
        from fleetwatch.security import ClientKeys
        self.cfg, self.uuid, self.hostname = cfg, uuid, hostname
        #: the OTLP/HTTP intake (agent.otlp: imported only when enabled) and its listener
        self.otlp = self.otlp_listener = None
        if cfg.otlp.enabled:
            self.otlp = otlp_intake(cfg.otlp, clock)
        #: new at each start: two processes alternating on one uuid are a cloned machine
        #: (os.urandom, not secrets: see agent.links.connection_id)
        self.instance = os.urandom(8).hex()
        self.keys = keys if keys is not None else ClientKeys(cfg.security)
        self.spool, self.collectors = spool, collectors
        #: systemd: READY once the intake is bound, the watchdog from :meth:`step`, STOPPING
        self.notifier = notifier if notifier is not None else sdnotify.Notifier.from_env()
        self.clock, self.wall = clock, wall
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        if cfg.devices.hosts:               # libzmq's default is 1,023 sockets a context
            self.ctx.set(zmq.MAX_SOCKETS, cfg.devices.sockets(cfg.device_links))
        self.poller = zmq.Poller()
        self.sockets = Sockets(self.ctx, uuid, self.poller, self.keys)
        self.links = Links(cfg.routers, lambda endpoint, learned: Link(
            endpoint, cfg.heartbeat_interval, cfg.liveness, cfg.reconnect_min,
            cfg.reconnect_max, learned=learned, rand=rand))
        self.intake = Intake(uuid, hostname, allow=cfg.local.allow, names=cfg.local.names,
                             max_metric_names=cfg.local.max_metric_names, clock=clock)
        self.intake_sock: IntakeSocket | None = None
        self.declared = Declared(cfg.plugins.checks, os.path.join(cfg.state_dir, "plugins.json"),
                                 cfg.local.plugins)
        self.runner = Runner(uuid, self.declared, cfg.plugins, clock=clock, wall=wall)
        self.workers = Workers(cfg.plugins.max_running, self.runner.work)
        self.counters = selfstats.counters()
        self.throttle = Throttle(log, 10.0, clock)
        self.started = clock()
        self.next_stats = self.started + cfg.stats_interval
        self.outbox = Outbox(uuid, spool, self.links, self.sockets, self.counters,
                             cfg.stats_buffer, clock, wall)
        self.runs = Runs(self.runner, self.workers, self.declared, self.links, self.outbox)
        self.routers = Routers(uuid, hostname, self.instance, cfg.heartbeat_interval,
                               self.links, self.sockets, self.outbox, self.declared,
                               self.counters, self.runs.submit, clock, wall,
                               k=cfg.routers_k)
        self.routers.parents = tuple(cfg.parents)
        self.routers.ephemeral = cfg.ephemeral
        self.reception = Reception(uuid, self.intake, self.declared, self.outbox, clock)
        self.selfstats = selfstats.SelfStats(self.counters, spool, self.links, self.intake,
                                             collectors, self.runner, clock, self.started,
                                             self.routers.attach, otlp=self.otlp)
        #: the devices this agent polls (agent.devices: imported only when it has some)
        self.devices = None
        if cfg.devices.hosts:
            self.devices = devices(self, rand)
        self.wakeup = Wakeup()
        self._stop = False
        #: SIGHUP re-reads ``config_path`` (agent/reload.py says what changes live)
        self.reloader = reload.reloader(self, config_path) if config_path else None

    # ---------------------------------------------------------------- life cycle
    def stop(self, *_):
        self._stop = True

    def run(self) -> int:
        try:
            gid = group_id(self.cfg.intake_group) if self.cfg.intake_group else None
            self.intake_sock = IntakeSocket(self.ctx, self.cfg.intake_endpoint, gid=gid)
        except (zmq.ZMQError, OSError, KeyError) as e:
            self.close()
            why = zmq.strerror(e.errno) if isinstance(e, zmq.ZMQError) else e
            raise StartError(f"cannot bind the intake {self.cfg.intake_endpoint}: {why}") \
                from None
        if self.otlp is not None:
            self._listen_otlp()
        self.wakeup.install(self.poller, self.stop,
                            self.reloader.request if self.reloader is not None else None)
        self.poller.register(self.intake_sock.sock, zmq.POLLIN)
        self.workers.start()
        # pyzmq's poll() reports a plain socket by its file descriptor: register that
        self.poller.register(self.workers.wake.fileno(), zmq.POLLIN)
        self.runs.check(self.cfg.plugins.dirs)
        if self.devices is not None:
            self._start_devices()
        self.collectors.prime()
        # The registry learns hostname and version from REGISTER too: unlike HELLO, it is
        # resent until acknowledged, so a registry that starts after the agent still has them.
        self.outbox.spool_messages([self.register()])
        self.notifier.ready(f"agent {self.uuid} ({self.hostname})")
        log.info("agent %s (%s) started, fleetwatch %s, routers: %s", self.uuid,
                 self.hostname, fleetwatch.__version__, ", ".join(self.cfg.routers))
        log.info("spool keeps %s (until a router's WELCOME tells its durable routes)",
                 "; ".join(f"{t} until ACKed by {' and '.join(sorted(s)) or 'none'}"
                           for t, s in sorted(self.spool.required.items())))
        if self.keys.enabled:
            from fleetwatch.security import key_hint
            log.info("CURVE on: key %s (public %s), routers' key %s", self.keys.own.path,
                     key_hint(self.keys.own.public), self.keys.router.path)
        else:
            log.warning("CURVE off: plain TCP to the routers (security.curve is false)")
        try:
            while not self._stop:
                self.step()
            if self.cfg.deregister_on_stop:
                self.depart()
        finally:
            self.notifier.stopping()
            self.close()
        log.info("agent stopped (%d messages left in the spool)", len(self.spool))
        return 0

    def depart(self) -> bool:
        """``deregister_on_stop``: the DEREGISTER, sent through a live router and resent
        until the registry and the alerting sinks ACKed it or ``deregister_timeout`` passed
        (:mod:`agent.departure`). Until it is out the links keep connecting; after, the agent
        sends nothing else (no HEARTBEAT, no HELLO) and runs nothing. True when ACKed."""
        from agent.departure import Departure, deregister
        now = self.clock()
        departure = Departure(deregister(self.uuid, "stop", self.wall),
                              now + self.cfg.deregister_timeout, self.cfg.spool.ack_timeout,
                              self.cfg.spool.max_backoff, wall=self.wall)
        self.outbox.departure = departure
        self.routers.on_run = lambda msg, endpoint: None      # leaving: no new runs
        log.info("deregistering (deregister_on_stop), waiting at most %.0fs",
                 self.cfg.deregister_timeout)
        while not departure.done and (now := self.clock()) < departure.until:
            if not departure.sends:
                self.routers.timers(now)
            if departure.due(now) and self.links.alive():
                link = self.links.pick(departure.via)
                departure.sent(now, link.endpoint, self.outbox.send(link, departure.outgoing()))
                self.routers.leaving = bool(departure.sends)
            if self.links.alive():
                wait = departure.deadline(now)
            elif not departure.sends:           # a router may still WELCOME us
                wait = min(departure.until, self.routers.deadline())
            else:
                wait = departure.until
            events = dict(self.poller.poll(max(0, math.ceil((wait - now) * 1000))))
            self.wakeup.drain(events)
            for sock, link in list(self.sockets.by_socket.items()):
                if sock in events:
                    self.routers.drain(sock, link, self.clock())
            for monitor, link in list(self.sockets.monitors.items()):
                if monitor in events:
                    self.routers.handshake_failed(monitor, link)
        (log.info if departure.done else log.warning)("deregistration %s",
                                                      departure.summary())
        return departure.done

    def _listen_otlp(self) -> None:
        from agent.otlp.listener import Listener
        host, port = self.cfg.otlp.address
        try:
            self.otlp_listener = Listener(host, port, self.otlp)
        except OSError as e:
            self.close()
            raise StartError(f"cannot listen for OTLP on {self.cfg.otlp.listen}: "
                             f"{e.strerror or e}") from None
        self.otlp_listener.start()

    def _start_devices(self) -> None:
        from agent.devices.service import StartError as DevicesError
        try:
            self.devices.start()
        except DevicesError as e:
            self.close()
            raise StartError(str(e)) from None
        for fd in self.devices.wakes:
            self.poller.register(fd, zmq.POLLIN)

    def close(self):
        if self.devices is not None:
            if self.devices.loop.thread.is_alive():
                for fd in self.devices.wakes:
                    self.poller.unregister(fd)
            self.devices.close()
            self.devices = None
        if self.otlp_listener is not None:
            self.otlp_listener.close()
            self.otlp_listener = None
        if self.workers.threads:
            self.poller.unregister(self.workers.wake.fileno())
        self.workers.close()
        self.sockets.close_all()
        if self.intake_sock is not None:
            self.poller.unregister(self.intake_sock.sock)
            self.intake_sock.close()
            self.intake_sock = None
        self.spool.close()
        if self._own_ctx:
            self.ctx.term()
        self.wakeup.close()

    def step(self) -> None:
        """One wake-up: poll until the next deadline, drain, run the timers."""
        timeout = max(0.0, min(self._deadline() - self.clock(), MAX_POLL,
                               self.notifier.watchdog_timeout()))
        events = dict(self.poller.poll(math.ceil(timeout * 1000)))
        self.wakeup.drain(events)
        now = self.clock()
        try:
            if self.reloader is not None:
                self.reloader.poll()
            if self.intake_sock is not None and self.intake_sock.sock in events:
                self.reception.drain(self.intake_sock)
            if self.workers.wake.fileno() in events:
                self.runs.finished()
            for sock, link in list(self.sockets.by_socket.items()):
                if sock in events:
                    self.routers.drain(sock, link, now)
            for monitor, link in list(self.sockets.monitors.items()):
                if monitor in events:
                    self.routers.handshake_failed(monitor, link)
            if self.devices is not None:
                self.devices.handle(events, now)
            self._timers(self.clock())
        except sqlite3.Error as e:  # disk full or gone: keep running, messages stay put
            self.counters["agent.spool.errors"] += 1
            self.throttle.warning("spool", "spool: %s: %s", type(e).__name__, e)
        self.notifier.tick()

    def register(self) -> protocol.Message:
        """The agent's own REGISTER: its plugins, hostname, version and parents (at start,
        and when a config reload changes the plugins or the parents)."""
        return protocol.make("REGISTER", self.uuid, clock=self.wall, name="agent",
                             plugins=self.declared.own_wire(),
                             heartbeat=self.cfg.heartbeat_interval,
                             hostname=self.hostname, version=fleetwatch.__version__,
                             **routers_parents(self.routers.parents),
                             **ephemeral(self.routers.ephemeral))

    def _deadline(self) -> float:
        now = self.clock()
        otlp = self.otlp.next_send if self.otlp is not None else math.inf
        devices = self.devices.deadline(now) if self.devices is not None else math.inf
        return min(self.next_stats, self.routers.deadline(), self.outbox.deadline(now), otlp,
                   devices)

    def _timers(self, now: float) -> None:
        self.routers.timers(now)
        if now >= self.next_stats:
            self.next_stats = max(self.next_stats + self.cfg.stats_interval, now)
            self._collect()
        if self.otlp is not None and now >= self.otlp.next_send:
            self._send_otlp(now)
        self.outbox.timers(now)
        if self.devices is not None:
            self.devices.timers(now)

    def _send_otlp(self, now: float) -> None:
        """The OTLP series written since the last send, in STATS of their own through the
        STATS queue; while no router is alive they may fill half of it, then they are held
        (latest values) and exports answered 503 (SPEC.md 4.4.1)."""
        self.otlp.next_send = max(self.otlp.next_send + self.cfg.otlp.interval, now)
        queue = self.outbox.queue
        room = bool(self.links.alive()) or len(queue) < queue.maxlen // 2
        for msg in self.otlp.messages(self.uuid, self.hostname, self.wall, room):
            self.outbox.enqueue(msg)

    def _collect(self) -> None:
        metrics = self.collectors.collect()
        metrics.update(self.selfstats.metrics())
        if self.devices is not None:
            metrics.update(self.devices.metrics())
        self.outbox.enqueue(protocol.make("STATS", self.uuid, clock=self.wall,
                                          hostname=self.hostname, metrics=metrics))


def devices(agent: Agent, rand):
    """The devices of an agent whose config declares some (imports agent.devices; pysnmp
    only at start, when one is polled by SNMP or traps are taken)."""
    from agent.devices.service import Devices, StartError as DevicesError
    try:
        return Devices(agent.cfg, agent.uuid, agent.hostname, agent.instance, agent.ctx,
                       agent.poller, agent.keys, agent.runner.work, agent.clock,
                       agent.wall, rand)
    except DevicesError as e:
        raise StartError(str(e)) from None


def otlp_intake(cfg, clock):
    """The OTLP intake of an agent whose ``otlp`` section is enabled (imports agent.otlp,
    opentelemetry-proto and protobuf); StartError when the ``otlp`` extra is missing."""
    try:
        from agent.otlp.intake import OtlpIntake
    except ModuleNotFoundError as e:
        raise StartError(f"otlp.enabled needs the Python package {e.name!r}: pip install "
                         f"'fleetwatch[otlp]'") from None
    return OtlpIntake(cfg, clock)
