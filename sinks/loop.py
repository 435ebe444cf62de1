"""The PULL/ACK loop every sink type runs: a thin socket adapter around a sink object.

The control DEALERs to the configured routers are :class:`fleetwatch.link.Links`: HELLO
(``role: sink``, ``sink: TYPE``) every ``hello_interval`` until the router answers WELCOME,
a new socket after a refused handshake. The WELCOME names the router (the id it stamps on
what it relays) and the endpoint of its PUSH for this sink type, to which the loop connects
its one shared PULL.

Each wake-up drains up to ``batch`` messages (:class:`sinks.receiver.Receiver`), waiting up
to ``batch_wait`` for more while the batch is not full (under load, one transaction of
hundreds of messages costs much less per message than many of a few) and holds no message
this sink ACKs (an agent's spool waits on that ACK: such a batch is written at once, and
what arrives during its transaction forms the next one, so batches still grow with the
load), lets
:class:`sinks.intake.Intake` decode, filter and deduplicate them, has the sink write the fresh
ones in one transaction and only then sends the ACKs: one per (router, agent), through the
control socket of the router named in the ROUTER frame. A failed write is logged and counted
and nothing is ACKed: the agents resend.

The raw hook, for a sink that needs few of the fields it stores (the history sink): a sink
with ``raw = True`` gets each batch's frame lists first, through ``sort_raw(raw) -> (kept,
to_decode)``. It keeps what it takes as it is (``kept``, a list with one item per message,
opaque to the loop), counts and drops what it refuses, and returns the frame lists the loop
must decode (``to_decode``: the types it ACKs). Those go through the Intake as above, and the
loop then calls ``write_raw(kept, fresh)`` instead of ``write(fresh)``: one transaction for
both, ACKs after it. Other sinks take the default path.

SIGTERM or SIGINT (see :meth:`SinkLoop.stop`) ends the loop after the current batch, whose
ACKs get ``ACK_LINGER`` to leave before the process exits. Under systemd the loop sends
READY once its sockets are open, pings the watchdog from each iteration, and STOPPING.

With ``security.curve`` every socket (the DEALERs and the PULL) is a CURVE client presenting
the sink's back-end key and trusting the routers' shared key.
"""

from __future__ import annotations

import logging
import socket
import time
from collections import Counter

import zmq

from fleetwatch import __version__, protocol, sdnotify
from fleetwatch.link import Link, Links
from fleetwatch.logs import Throttle
from sinks.base import Sink, WriteError
from sinks.config import SinkConfig
from sinks.dedupe import Dedupe
from sinks.intake import Batch, Intake
from sinks.receiver import Receiver

log = logging.getLogger(__name__)

#: messages queued on the PULL per router before the router's PUSH sees back-pressure
PULL_HWM = 10_000
#: msg_ids per ACK body at most (keeps an ACK far below the body size limit)
ACK_CHUNK = 1000
#: longest poll, so that a stop request is seen promptly
MAX_WAIT = 0.25
#: milliseconds the ACKs still queued at stop get to reach the routers
ACK_LINGER = 2000


class SinkLoop:
    def __init__(self, sink: Sink, config: SinkConfig, ctx: zmq.Context | None = None,
                 clock=time.monotonic, hostname: str | None = None, keys=None,
                 notifier=None):
        from fleetwatch.security import ClientKeys
        self.sink, self.config, self.clock = sink, config, clock
        self.keys = keys if keys is not None else ClientKeys(config.security)
        #: an own context is terminated at the end, which is what lets the last ACKs leave
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.notifier = notifier if notifier is not None else sdnotify.Notifier.from_env()
        self.hostname = hostname or socket.gethostname()
        self.sink_id = (config.name or f"{sink.type}@{self.hostname}")[:protocol.MAX_ID]
        self.counts: Counter = Counter()
        self.throttle = Throttle(log)
        self.intake = Intake(sink.handles, sink.acks, Dedupe(config.dedupe_window),
                             self.counts, self.throttle)
        #: the sink takes the raw hook (see the module docstring)
        self.raw = getattr(sink, "raw", False) is True
        self.links = Links(self.ctx, config.routers, self.sink_id, "sink", self.keys,
                           self.counts, fields={"sink": sink.type}, hostname=self.hostname,
                           throttle=self.throttle)
        self.by_router: dict[str, zmq.Socket] = {}
        self.pull: zmq.Socket | None = None
        self.pulling: set[str] = set()
        self.stopping = False
        #: the last drain filled a whole batch: more may be waiting (no tick until read)
        self.backlog = False
        #: the types this sink ACKs, as in an ENVELOPE: a batch holding one is not held back
        self.acked_types = frozenset(t.encode() for t in sink.acks)
        #: set by ``fleetwatch sink``: SIGHUP re-reads the config between batches (sinks/reload.py)
        self.reloader = None

    # ---------------------------------------------------------------- life cycle
    def stop(self, *_args) -> None:
        """Ask the loop to end after the current batch (safe from a signal handler)."""
        self.stopping = True

    def open(self) -> None:
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.linger = 0
        self.pull.rcvhwm = PULL_HWM
        self.keys.apply(self.pull)
        self.receiver = Receiver(self.pull, self.clock, self.counts)
        self.links.open()

    def close(self) -> None:
        self.links.close(ACK_LINGER)
        if self.pull is not None:
            self.pull.close(0)
        self.by_router, self.pull = {}, None

    def run(self) -> int:
        """Start the sink (may raise :class:`WriteError`), then loop until :meth:`stop`."""
        self.sink.start()
        self.open()
        log.info("sink %s (%s) started, fleetwatch %s: routers %s; CURVE %s", self.sink_id,
                 self.sink.type, __version__, ", ".join(self.config.routers),
                 f"on (key {self.keys.own.path})" if self.keys.enabled else "off")
        poller = zmq.Poller()
        poller.register(self.pull, zmq.POLLIN)
        self.links.register(poller)
        next_stats = self.clock() + self.config.stats_interval
        tick_every = getattr(self.sink, "tick_interval", None)
        next_tick = self.clock() + tick_every if tick_every else float("inf")
        self.notifier.ready(f"sink {self.sink_id}: routers {', '.join(self.config.routers)}")
        try:
            while not self.stopping:
                now = self.clock()
                wake = self.links.hellos(now, self.config.hello_interval)
                if now >= next_stats:
                    log.info("counters: %s", self.report())
                    self._publish_counters()
                    next_stats = now + self.config.stats_interval
                if now >= next_tick and not self.backlog:
                    self._tick()
                    next_tick = now + tick_every
                wait = max(0.0, min(wake, next_stats, next_tick, now + MAX_WAIT) - now)
                events = dict(poller.poll(wait * 1000))
                for link, msg in self.links.receive(events):
                    if msg.type == "WELCOME":
                        self._welcome(link, msg)
                    else:
                        self._error(link, msg)
                self.backlog = False
                if self.pull in events:
                    self.drain()
                if self.reloader is not None:
                    self.reloader.poll()
                self.notifier.tick()
        finally:
            self.notifier.stopping()
            log.info("stopping; final counters: %s", self.report())
            self.close()
            self.sink.close()
            if self._own_ctx:
                self.ctx.term()
            self.notifier.close()
        return 0

    def merged_counts(self) -> Counter:
        merged = Counter(self.counts)
        merged.update({f"{self.sink.type}.{k}": v for k, v in dict(self.sink.counts).items()})
        return merged

    def report(self) -> str:
        merged = self.merged_counts()
        return " ".join(f"{k}={v}" for k, v in sorted(merged.items()) if v) or "nothing yet"

    def _publish_counters(self) -> None:
        """The sink's counters as a STATS (source ``sink``) through one router that knows
        us, turn by turn, so they reach the graphite and history sinks like the routers'
        own (SPEC 4.3); each report goes through one router only, never twice. A sink with
        ``drops`` (the remote_write sink's ledger: ``chunks()``, ``reported(chunk)``) has
        them carried too, as a router's are (SPEC 4.7.2): the first chunk with the
        counters, the others in STATS of no metrics; a chunk leaves the ledger once a
        router took it."""
        metrics = {f"sink.{k}": v for k, v in self.merged_counts().items()}
        ledger = getattr(self.sink, "drops", None)
        chunks = ledger.chunks() if ledger is not None else []
        if not chunks:
            self.links.report(metrics)
            return
        for n, chunk in enumerate(chunks):
            if not self.links.report(metrics if n == 0 else {}, drops=chunk):
                return                  # kept for the next report
            ledger.reported(chunk)

    # ---------------------------------------------------------------- control
    def _welcome(self, link: Link, msg: protocol.Message) -> None:
        router_id = link.router_id
        endpoints = msg.get("endpoints") or {}
        sinks = endpoints.get("sinks") if isinstance(endpoints, dict) else None
        endpoint = sinks.get(self.sink.type) if isinstance(sinks, dict) else None
        self.by_router[router_id] = link.socket
        welcomed = getattr(self.sink, "welcomed", None)
        if welcomed is not None:            # (the alerting sink's rules follow the tails)
            welcomed(router_id, endpoints, self.ctx, self.keys)
        if not isinstance(endpoint, str) or not endpoint:
            self.counts["welcome_without_endpoint"] += 1
            self.throttle.warning("no_endpoint", "router %s has no endpoint for sink type %s",
                                  router_id, self.sink.type)
            return
        if endpoint not in self.pulling:
            try:
                self.pull.connect(endpoint)
            except zmq.ZMQError as e:
                self.counts["pull_connect_failed"] += 1
                log.error("cannot connect to %s of router %s: %s", endpoint, router_id, e)
                return
            self.pulling.add(endpoint)
            log.info("router %s: its %s endpoint %s", router_id, self.sink.type, endpoint)

    def _error(self, link: Link, msg: protocol.Message) -> None:
        status = msg.get("status")
        self.counts[f"router_error_{status}"] += 1
        if status == protocol.NOT_FOUND:
            self.throttle.warning("error_404", "router %s: agent gone (ref %s); it will resend",
                                  link.label, msg.get("ref"))
        else:
            self.throttle.warning(f"error_{status}", "router %s answered ERROR %s %s (ref %s)",
                                  link.label, status, msg.get("reason"),
                                  msg.get("ref"))

    # ---------------------------------------------------------------- data
    def _tick(self) -> None:
        """The sink's periodic work (the alerting sink: hosts gone silent); like a write,
        a failure is counted and logged, never fatal. Skipped while messages wait on the
        PULL: what a host said may be among them."""
        try:
            self.sink.tick()
        except WriteError as e:
            self.counts["tick_failed"] += 1
            self.throttle.warning("tick_failed", "%s", e)
        except Exception:  # a bug in a sink must not take the process down: counted, logged
            self.counts["tick_crashed"] += 1
            log.exception("sink %s failed on its periodic tick", self.sink.type)

    def gather(self) -> list[list[bytes]]:
        """Up to ``batch`` messages: those waiting, and those that arrive within
        ``batch_wait`` while the batch is not full and holds no message this sink ACKs.
        ``backlog``: a whole batch was already waiting (the sink is behind: its tick waits
        until it has read)."""
        limit, linger = self.config.batch, self.config.batch_wait
        raw = self.receiver.take(limit)
        self.backlog = len(raw) >= limit
        if linger <= 0 or self.backlog or self.owes_ack(raw):
            return raw
        deadline = time.monotonic() + linger
        while len(raw) < limit and not self.stopping:
            left = deadline - time.monotonic()
            if left <= 0 or not self.pull.poll(left * 1000):
                break
            more = self.receiver.take(limit - len(raw))
            raw += more
            if self.owes_ack(more):
                break
        return raw

    def owes_ack(self, raw: list[list[bytes]]) -> bool:
        """Whether one of ``raw`` is of a type this sink ACKs (the TYPE of its ENVELOPE
        frame, undecoded: a message the intake then refuses only ends the wait early)."""
        acked = self.acked_types
        return bool(acked) and any(len(frames) > 1 and frames[1].partition(b"/")[0] in acked
                                   for frames in raw)

    def drain(self) -> None:
        """Read up to ``batch`` messages (:meth:`gather`), write them, then ACK what was
        committed."""
        raw = self.gather()
        kept = None
        if self.raw:
            try:
                kept, raw_decode = self.sink.sort_raw(raw)
            except Exception:  # a bug in a sink must not take the process down: counted, logged
                self.counts["sort_crashed"] += len(raw)
                log.exception("sink %s failed sorting a batch of %d; dropped, not acked",
                              self.sink.type, len(raw))
                return
            self.counts["received"] += len(raw) - len(raw_decode)
            raw = raw_decode
        batch = self.intake.prepare(raw)
        count = len(batch.fresh) + len(kept or ())
        if count:
            try:
                if kept is None:
                    self.sink.write(batch.fresh)
                else:
                    self.sink.write_raw(kept, batch.fresh)
            except WriteError as e:
                self.counts["write_failed"] += count
                self.throttle.warning("write_failed", "%s; %d messages not acked (agents resend)",
                                      e, count)
                return
            except Exception:  # a bug in a sink must not take the process down: counted, logged
                self.counts["write_crashed"] += count
                log.exception("sink %s failed on a batch of %d; not acked", self.sink.type,
                              count)
                return
        self.intake.committed(batch)
        self.counts["written"] += len(kept or ())
        self.send_acks(batch)

    def send_acks(self, batch: Batch) -> None:
        for (router, uuid), ids in batch.acks.items():
            sock = self.by_router.get(router)
            if sock is None or sock.closed:     # (a link dropped: its router left, SPEC 4.9)
                self.counts["ack_unroutable"] += len(ids)
                self.throttle.warning("ack_unroutable", "no control link to router %s: "
                                      "%d msg_ids not acked", router, len(ids))
                continue
            for start in range(0, len(ids), ACK_CHUNK):
                chunk = ids[start:start + ACK_CHUNK]
                ack = protocol.make("ACK", self.sink_id, msg_ids=chunk, sink=self.sink.type)
                try:
                    sock.send_multipart(protocol.encode_control(ack, uuid), zmq.NOBLOCK)
                except zmq.ZMQError as e:
                    self.counts["ack_dropped"] += len(chunk)
                    self.throttle.warning("ack_dropped", "ACK to router %s not sent: %s",
                                          router, e)
                    continue
                self.counts["acked"] += len(chunk)
