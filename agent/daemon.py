"""The agent's main loop: one thread, one zmq.Poller over the router DEALERs and the intake.

Each wake-up drains the sockets that are readable, then runs the timers: reconnects,
liveness expiry, heartbeats, the stats collection (one STATS message per collection, the
agent's own counters included), the at-most-once queue and the spool's resends. Traffic
leaves only through alive routers; NOTIFY and REGISTER wait in the spool until every sink
type they need (``spool.ack_from``) has ACKed them, STATS and HEARTBEAT wait in a bounded
queue (oldest dropped, counted). A spool that cannot be written (a full disk) keeps its
bookkeeping in memory (:mod:`agent.spool`): the loop still sends, and sleeps until its next
timer (a retry of the writes among them).
A RUN goes to the :class:`agent.runner.Runner`; plugins run in :class:`agent.execute.Workers`
threads, whose finished jobs wake the poller through a socket pair, so that this thread alone
sends their RESULTs (SPEC.md 4.5).
SIGTERM and SIGINT wake the poller through a socket pair and stop the loop cleanly; SIGHUP
wakes it to re-read the config (:mod:`agent.reload`).
"""

from __future__ import annotations

import collections
import logging
import math
import os
import random
import secrets
import signal
import socket
import sqlite3
import threading
import time

import zmq

import fleetwatch
from fleetwatch import protocol, sdnotify
from fleetwatch.logs import Throttle

from agent import reload
from agent.declared import Declared, Refused
from agent.execute import Workers
from agent.intake import DURABLE_TYPES, Intake, IntakeSocket, group_id
from agent.links import Link, Links, Sockets
from agent.runner import Runner, resolve

log = logging.getLogger(__name__)

FROM_ROUTER = frozenset({"WELCOME", "HEARTBEAT", "ACK", "RUN", "ERROR"})
DRAIN = 256
SPOOL_REPORT_PERIOD = 60.0
MAX_POLL = 5.0
#: The agent's event counters, reported (from zero) in every STATS.
COUNTERS = ("agent.spool.acked", "agent.spool.acks_ignored", "agent.spool.resent",
            "agent.spool.errors", "agent.routers.expired", "agent.stats.dropped",
            "fleetwatch.cli.send.dropped",
            "agent.router.errors", "agent.router.handshake_failed")


class StartError(Exception):
    """The agent cannot start (its intake cannot be bound); ``str()`` is one line."""


class Agent:
    """The daemon: owns every socket; the spool, links and collectors hold the logic."""

    def __init__(self, cfg, uuid: str, hostname: str, spool, collectors,
                 ctx: zmq.Context | None = None, clock=time.monotonic, wall=time.time,
                 rand=random.random, keys=None, notifier=None, config_path: str | None = None):
        from fleetwatch.security import ClientKeys
        self.cfg, self.uuid, self.hostname = cfg, uuid, hostname
        #: new at each start: two processes alternating on one uuid are a cloned machine
        self.instance = secrets.token_hex(8)
        self.keys = keys if keys is not None else ClientKeys(cfg.security)
        self.spool, self.collectors = spool, collectors
        #: systemd: READY once the intake is bound, the watchdog from :meth:`step`, STOPPING
        self.notifier = notifier if notifier is not None else sdnotify.Notifier.from_env()
        self.clock, self.wall = clock, wall
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.poller = zmq.Poller()
        self.sockets = Sockets(self.ctx, uuid, self.poller, self.keys)
        self.links = Links(cfg.routers, lambda endpoint, learned: Link(
            endpoint, cfg.heartbeat_interval, cfg.liveness, cfg.reconnect_min,
            cfg.reconnect_max, learned=learned, rand=rand))
        self.intake = Intake(uuid, hostname, allow=cfg.local.allow, names=cfg.local.names)
        self.intake_sock: IntakeSocket | None = None
        self.queue: collections.deque = collections.deque(maxlen=max(1, cfg.stats_buffer))
        self.last_via: collections.OrderedDict = collections.OrderedDict()
        self.declared = Declared(cfg.plugins.checks, os.path.join(cfg.state_dir, "plugins.json"),
                                 cfg.local.plugins)
        self.runner = Runner(uuid, self.declared, cfg.plugins, clock=clock, wall=wall)
        self.workers = Workers(cfg.plugins.max_running, self.runner.work)
        self.counters = collections.Counter(dict.fromkeys(COUNTERS, 0))
        self.throttle = Throttle(log, 10.0, clock)
        self.started = clock()
        self.next_stats = self.started + cfg.stats_interval
        self.unreported_drops = 0
        self.next_drop_report = 0.0
        self._stop = False
        self._wake_r = self._wake_w = None
        #: SIGHUP re-reads ``config_path`` (agent/reload.py says what changes live)
        self.reloader = reload.reloader(self, config_path) if config_path else None

    # ---------------------------------------------------------------- life cycle
    def stop(self, *_):
        self._stop = True

    def _install_signals(self):
        if threading.current_thread() is not threading.main_thread():
            return
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self.stop)
        if self.reloader is not None:
            signal.signal(signal.SIGHUP, self.reloader.request)
        self.poller.register(self._wake_r, zmq.POLLIN)

    def run(self) -> int:
        try:
            gid = group_id(self.cfg.intake_group) if self.cfg.intake_group else None
            self.intake_sock = IntakeSocket(self.ctx, self.cfg.intake_endpoint, gid=gid)
        except (zmq.ZMQError, OSError, KeyError) as e:
            self.close()
            raise StartError(f"cannot bind the intake {self.cfg.intake_endpoint}: {e}") from None
        self._install_signals()
        self.poller.register(self.intake_sock.sock, zmq.POLLIN)
        self.workers.start()
        # pyzmq's poll() reports a plain socket by its file descriptor: register that
        self.poller.register(self.workers.wake.fileno(), zmq.POLLIN)
        self._check_plugins()
        self.collectors.prime()
        # The registry learns hostname and version from REGISTER too: unlike HELLO, it is
        # resent until acknowledged, so a registry that starts after the agent still has them.
        self._spool([self._register()])
        self.notifier.ready(f"agent {self.uuid} ({self.hostname})")
        log.info("agent %s (%s) started, routers: %s", self.uuid, self.hostname,
                 ", ".join(self.cfg.routers))
        log.info("spool keeps %s", "; ".join(
            f"{t} until ACKed by {' and '.join(sorted(s))}"
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
        finally:
            self.notifier.stopping()
            self.close()
        log.info("agent stopped (%d messages left in the spool)", len(self.spool))
        return 0

    def close(self):
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
        if self._wake_r is not None:
            signal.set_wakeup_fd(-1)
            self._wake_r.close()
            self._wake_w.close()

    def step(self) -> None:
        """One wake-up: poll until the next deadline, drain, run the timers."""
        timeout = max(0.0, min(self._deadline() - self.clock(), MAX_POLL,
                               self.notifier.watchdog_timeout()))
        events = dict(self.poller.poll(math.ceil(timeout * 1000)))
        if self._wake_r is not None and self._wake_r.fileno() in events:
            try:
                self._wake_r.recv(64)
            except BlockingIOError:
                pass  # nothing left to read: the flag is what matters
        now = self.clock()
        try:
            if self.reloader is not None:
                self.reloader.poll()
            if self.intake_sock is not None and self.intake_sock.sock in events:
                self._on_intake()
            if self.workers.wake.fileno() in events:
                self._on_finished()
            for sock, link in list(self.sockets.by_socket.items()):
                if sock in events:
                    self._drain_router(sock, link, now)
            for monitor, link in list(self.sockets.monitors.items()):
                if monitor in events:
                    self._handshake_failed(monitor, link)
            self._timers(self.clock())
        except sqlite3.Error as e:  # disk full or gone: keep running, messages stay put
            self.counters["agent.spool.errors"] += 1
            self.throttle.warning("spool", "spool: %s: %s", type(e).__name__, e)
        self.notifier.tick()

    def _register(self) -> protocol.Message:
        """The agent's own REGISTER: its plugins, hostname and version (at start, and when
        a config reload changes the plugins)."""
        return protocol.make("REGISTER", self.uuid, clock=self.wall, name="agent",
                             plugins=self.declared.own_wire(),
                             heartbeat=self.cfg.heartbeat_interval,
                             hostname=self.hostname, version=fleetwatch.__version__)

    def _deadline(self) -> float:
        now = self.clock()
        deadlines = [self.next_stats, *(link.deadline() for link in self.links)]
        if self.links.alive():
            if self.queue:
                return now
            due = self.spool.next_due()
            if due is not None:
                deadlines.append(now + (due - self.wall()))
        retry = self.spool.next_retry()      # bookkeeping held in memory (a full disk)
        if retry is not None:
            deadlines.append(now + (retry - self.wall()))
        if self.unreported_drops:
            deadlines.append(self.next_drop_report)
        return min(deadlines)

    # ---------------------------------------------------------------- timers
    def _timers(self, now: float) -> None:
        for link in self.links:
            if link.reconnect_due(now):
                self._connect(link, now)
            elif link.expired(now):
                self.sockets.close(link)
                delay = link.closed(now)
                log.warning("router %s silent for %d intervals, reconnecting in %.2fs",
                            link.endpoint, link.liveness, delay)
                self.counters["agent.routers.expired"] += 1
            elif link.heartbeat_due(now):
                self._send(link, protocol.make("HEARTBEAT", self.uuid, clock=self.wall,
                                               interval=self.cfg.heartbeat_interval))
        if now >= self.next_stats:
            self.next_stats = max(self.next_stats + self.cfg.stats_interval, now)
            self._collect()
        if self.unreported_drops and now >= self.next_drop_report:
            self._report_drops(now)
        self.spool.retry(self.wall())
        if self.links.alive():
            self._flush_queue()
            self._resend()

    def _connect(self, link: Link, now: float) -> None:
        try:
            self.sockets.open(link)
        except zmq.ZMQError as e:  # a malformed endpoint, most likely learned from WELCOME
            self.sockets.close(link)
            log.error("cannot connect to %s: %s%s", link.endpoint, e,
                      " (forgotten)" if link.learned else "")
            if link.learned:
                self.links.remove(link)
            else:
                link.closed(now)
            return
        link.opened(now)
        self._hello(link)

    def _flush_queue(self) -> None:
        while self.queue:
            link = self.links.pick()
            if link is None:
                return
            if not self._send(link, self.queue.popleft()):
                self.counters["agent.stats.dropped"] += 1

    def _resend(self) -> None:
        for msg in self.spool.due(self.wall()):
            avoid = self.last_via.get(msg.msg_id) if msg.get("dup") else None
            link = self.links.pick(avoid)
            if link is None:
                return
            self._send(link, msg)
            self.last_via[msg.msg_id] = link.endpoint
            self.last_via.move_to_end(msg.msg_id)
            if len(self.last_via) > 10000:
                self.last_via.popitem(last=False)
            if msg.get("dup"):
                self.counters["agent.spool.resent"] += 1

    def _collect(self) -> None:
        metrics = self.collectors.collect()
        metrics.update(self.own_metrics())
        self._enqueue(protocol.make("STATS", self.uuid, clock=self.wall,
                                    hostname=self.hostname, metrics=metrics))

    def own_metrics(self) -> dict:
        return {
            **self.counters,
            "agent.spool.size": len(self.spool),
            "agent.spool.dropped": self.spool.dropped,
            "agent.spool.superseded": self.spool.superseded,
            "agent.spool.write_errors": self.spool.write_errors,
            "agent.spool.unsaved": self.spool.unsaved,
            "agent.routers.alive": len(self.links.alive()),
            "agent.routers.known": len(self.links),
            "agent.intake.received": self.intake.received,
            "agent.intake.errors": self.intake.errors,
            "agent.intake.refused": self.intake.refused,
            "agent.collectors.failures": self.collectors.failures,
            **self.runner.counters,
            **self.runner.gauges(),
            "agent.uptime": round(self.clock() - self.started, 1),
        }

    def _enqueue(self, msg: protocol.Message) -> None:
        if len(self.queue) == self.queue.maxlen:
            self.counters["agent.stats.dropped"] += 1
            self.throttle.warning("queue", "no router alive: oldest STATS/HEARTBEAT dropped")
        self.queue.append(msg)

    # ---------------------------------------------------------------- spool
    def _spool(self, messages, own: bool = True) -> None:
        """Commit ``messages`` to the spool. When it cannot (a full disk), the agent's own
        (``own``) are sent at most once, through the STATS queue; a local process's raise
        sqlite3.Error (the intake answers 500)."""
        try:
            dropped = self.spool.add(messages)
        except sqlite3.Error as e:
            if not own:
                raise
            self.throttle.warning("spool.own", "spool write failed (%s: %s): the agent's own "
                                  "%s sent once, not spooled", type(e).__name__, e,
                                  "/".join(sorted({m.type for m in messages})))
            for msg in messages:
                self._enqueue(msg)
            return
        if dropped:
            self.unreported_drops += dropped

    def _report_drops(self, now: float) -> None:
        n, self.unreported_drops = self.unreported_drops, 0
        self.next_drop_report = now + SPOOL_REPORT_PERIOD
        log.warning("spool full (%d messages): %d oldest notifications dropped",
                    self.spool.max_messages, n)
        self._spool([protocol.make("NOTIFY", self.uuid, clock=self.wall, severity="warning",
                                   source="agent",
                                   text=f"spool full: {n} oldest notifications dropped")])

    # ---------------------------------------------------------------- sockets
    def _send(self, link: Link, msg: protocol.Message) -> bool:
        if self.sockets.send(link, msg):
            return True
        self.counters["fleetwatch.cli.send.dropped"] += 1
        self.throttle.warning(f"send.{link.endpoint}", "router %s: queue full, %s dropped",
                              link.endpoint, msg.type)
        return False

    def _hello(self, link: Link) -> None:
        self._send(link, protocol.make("HELLO", self.uuid, clock=self.wall,
                                       hostname=self.hostname,
                                       heartbeat=self.cfg.heartbeat_interval,
                                       version=fleetwatch.__version__, role="agent",
                                       instance=self.instance,
                                       plugins=self.declared.own_wire()))

    def _on_intake(self) -> None:
        durable, declarations = [], []
        for envelope, frames in self.intake_sock.drain(DRAIN):
            msg, err = self.intake.accept(frames)
            if err is None and msg is not None and msg.type == "REGISTER" \
                    and msg.get("plugins") is not None:
                msg, err = self._local_plugins(msg, declarations)
            if err is not None:
                self.intake_sock.reply(envelope, err)
            elif msg is None:
                continue
            elif msg.type in DURABLE_TYPES:
                durable.append((envelope, msg))
            else:
                self._enqueue(msg)
                self.intake_sock.reply(envelope, self.intake.ack(msg))
        if not durable:
            return
        try:
            self._spool([msg for _, msg in durable], own=False)
        except Exception as e:  # sqlite3.Error, OSError: the disk is full or gone
            self.throttle.warning("intake.spool", "spool write failed, %d local messages "
                                  "refused (500): %s: %s", len(durable), type(e).__name__, e)
            for envelope, msg in durable:
                self.intake_sock.reply(envelope, protocol.error(
                    protocol.INTERNAL, "spool write failed", ref=msg.msg_id, uuid=self.uuid))
            return
        for process, plugins in declarations:
            self.declared.apply(process, plugins)
        for envelope, msg in durable:
            self.intake_sock.reply(envelope, self.intake.ack(msg))

    def _local_plugins(self, msg: protocol.Message, declarations: list):
        """A local REGISTER declaring plugins: (the REGISTER to forward, None) or
        (None, ERROR); the declaration itself is applied once the REGISTER is spooled."""
        try:
            plugins, forward = self.declared.prepare(msg)
        except Refused as e:
            self.intake.refused += 1
            self.throttle.warning("intake.plugins", "intake: refused a REGISTER from %s: %s",
                                  msg.get("name"), e.reason)
            return None, protocol.error(e.status, e.reason, ref=msg.msg_id, uuid=self.uuid)
        declarations.append((msg.get("name"), plugins))
        return forward, None

    def _drain_router(self, sock: zmq.Socket, link: Link, now: float) -> None:
        for _ in range(DRAIN):
            try:
                frames = sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                msg = protocol.decode(frames, FROM_ROUTER)
            except protocol.ProtocolError as e:
                self.counters["agent.router.errors"] += 1
                self.throttle.warning(f"router.{link.endpoint}", "router %s: bad message: %s",
                                      link.endpoint, e)
                continue
            link.heard(now)
            self._on_router(link, msg, now)
            if link.endpoint not in self.sockets.by_link:
                return  # the link was closed while handling (an alias)

    def _handshake_failed(self, monitor: zmq.Socket, link: Link) -> None:
        """CURVE: the router refused our key or cannot be verified; libzmq retries."""
        from fleetwatch.ask import handshake_problem
        for event in self.sockets.handshake_failures(monitor):
            self.counters["agent.router.handshake_failed"] += 1
            self.throttle.warning(f"handshake.{link.endpoint}", "router %s: %s",
                                  link.endpoint, handshake_problem(event))

    def _on_router(self, link: Link, msg: protocol.Message, now: float) -> None:
        if msg.type == "ACK":
            acked = self.spool.ack(msg.get("msg_ids"), msg.get("sink"))
            for msg_id in acked.removed:
                self.last_via.pop(msg_id, None)
            self.counters["agent.spool.acked"] += len(acked.removed)
            self.counters["agent.spool.acks_ignored"] += acked.ignored
        elif msg.type == "WELCOME":
            self._welcome(link, msg, now)
        elif msg.type == "ERROR":
            if msg.get("status") == protocol.HELLO_REQUIRED:
                log.info("router %s asks for HELLO again", link.endpoint)
                link.hello_required(now)
                self._hello(link)
            else:
                self.throttle.warning(f"error.{link.endpoint}", "router %s: ERROR %s %s (%s)",
                                      link.endpoint, msg.get("status"), msg.get("reason"),
                                      msg.get("ref"))
        elif msg.type == "RUN":
            self._answer(self.runner.submit(msg, link.endpoint))
            self._start_runs()

    def _welcome(self, link: Link, msg: protocol.Message, now: float) -> None:
        link.welcomed(now, msg.get("router"))
        other = self.links.duplicate_of(link)
        if other is not None:
            log.info("%s is router %s, already linked through %s: dropping it",
                     link.endpoint, link.router_id, other.endpoint)
            self.sockets.close(link)
            self.links.remove(link)
            return
        for new in self.links.learn(msg.get("routers")):
            log.info("router %s told us of %s", link.router_id, new.endpoint)

    # ---------------------------------------------------------------- plugins
    def _check_plugins(self) -> None:
        for d in self.cfg.plugins.dirs:
            if not os.path.isdir(d):
                log.warning("plugin directory %s does not exist", d)
        for name in list(self.declared.own):
            found = resolve(self.declared.own[name].command, self.cfg.plugins.dirs)
            if isinstance(found, str):
                log.warning("plugin %s: %s (its RUNs will be answered UNKNOWN)", name, found)
        log.info("plugins declared: %d in the config (%s), %d by local processes",
                 len(self.declared.own), ", ".join(self.declared.own) or "none",
                 len(self.declared) - len(self.declared.own))

    def _start_runs(self) -> None:
        for job in self.runner.take():
            self.workers.submit(job)

    def _on_finished(self) -> None:
        for job, result in self.workers.finished():
            self._answer(self.runner.finish(job, result))
        self._start_runs()

    def _answer(self, answers) -> None:
        """Each RESULT through the link its RUN came from, else any live one (at most once:
        with no router alive it waits in the bounded STATS queue)."""
        for origin, msg in answers:
            link = next((k for k in self.links if k.endpoint == origin), None)
            if link is None or not link.alive:
                link = self.links.pick()
            if link is None:
                self._enqueue(msg)
            else:
                self._send(link, msg)
