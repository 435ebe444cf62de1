"""The routers' tails, for the rules: every STATS and RESULT the fleet relays, to each
alerting sink that has rules.

A router hands each STATS to ONE sink of a type (its PUSH deals them round robin, SPEC 4.1),
so two alerting sinks fed by their PULL would each see half of a host's points and judge
different windows. The tail is the other way out of a router: a SUB gets every message it
relays (SPEC 4.1 "The tail"). So each sink with rules subscribes to ``STATS/`` and
``RESULT/`` on the tail of every router that welcomed it (the WELCOME's ``endpoints.tail``),
with its back-end key: every sink holds the same windows, whichever sink the PUSH chose.

A :class:`TailFeed` owns its SUB in a thread of its own (a socket is used by one thread),
reads the messages in batches, decodes them (a frame that is not one is counted, never
fatal) and hands each to ``observe(uuid, type, body)`` under the sink's series lock. It
decodes only what the rules read (:func:`lean`): the envelope, and the body as JSON whose
``uuid`` is the stamp's; the rules take a metric only if it is a finite number. That is
about 40 % less than the full check of every field a sink's own intake does
(bench/rules.py). A router numbers what it
publishes per type (SEQ), so what this subscriber lost (its queue at the router full) is
counted, ``tail_lost``, as ``fleetwatch tail`` reports it. Endpoints to connect come from
the loop's thread through a queue.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import Counter

import zmq

from fleetwatch import protocol
from fleetwatch.protocol import FORBIDDEN, MAX_BODY, TAIL_SEQ, ProtocolError

log = logging.getLogger(__name__)

#: what the rules read from the tails
TOPICS = (b"STATS/", b"RESULT/")
#: messages queued in this subscriber (the io thread fills it while the GIL is busy): a
#: burst of a 10,000-host fleet's STATS fits
RCVHWM = 200_000
#: messages taken per lock of the series
BATCH = 1000
#: the types the rules read
TYPES = frozenset({"STATS", "RESULT"})


class TailFeed:
    """A SUB on the routers' tails feeding ``observe(uuid, type, body)`` (under ``lock``)."""

    def __init__(self, observe, lock: threading.Lock, counts: Counter,
                 ctx: zmq.Context | None = None, keys=None):
        self.observe, self.lock, self.counts = observe, lock, counts
        self.ctx = ctx or zmq.Context.instance()
        self.keys = keys
        self.connected: set[str] = set()
        self._pending: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        #: (router, type) -> the last SEQ number seen (SPEC 4.1: per type, per router)
        self._seq: dict[tuple[str, str], int] = {}
        self._thread = threading.Thread(target=self._run, name="rules-tail", daemon=True)

    def start(self) -> "TailFeed":
        self._thread.start()
        return self

    def connect(self, endpoint: str) -> None:
        """Subscribe to the tail at ``endpoint`` too (any thread; done by the feed's)."""
        if endpoint not in self.connected:
            self.connected.add(endpoint)
            self._pending.put(endpoint)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _run(self) -> None:
        sub = self.ctx.socket(zmq.SUB)
        sub.linger = 0
        sub.rcvhwm = RCVHWM
        if self.keys is not None:
            self.keys.apply(sub)
        for topic in TOPICS:
            sub.setsockopt(zmq.SUBSCRIBE, topic)
        try:
            while not self._stop.is_set():
                self._connect_pending(sub)
                if sub.poll(100):
                    self._take(sub)
        finally:
            sub.close(0)

    def _connect_pending(self, sub: zmq.Socket) -> None:
        while True:
            try:
                endpoint = self._pending.get_nowait()
            except queue.Empty:
                return
            try:
                sub.connect(endpoint)
                log.info("rules: following the tail at %s", endpoint)
            except zmq.ZMQError as e:
                with self.lock:
                    self.counts["tail_connect_failed"] += 1
                log.error("rules: cannot follow the tail at %s: %s", endpoint, e)

    def _take(self, sub: zmq.Socket) -> None:
        """Up to BATCH messages decoded, then observed under the lock (the counts too: the
        sink copies them under it)."""
        batch, counts = [], Counter()
        for _ in range(BATCH):
            try:
                frames = sub.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            try:
                type_, uuid, router, seq, body = lean(frames)
            except ProtocolError as e:
                counts["tail_forbidden" if e.status == FORBIDDEN else "tail_bad"] += 1
                continue
            counts["tail_lost"] += self._numbered(router, type_, seq)
            batch.append((uuid, type_, body))
        with self.lock:
            self.counts.update(+counts)
            for uuid, type_, body in batch:
                try:
                    self.observe(uuid, type_, body)
                except Exception:   # a bug must not stop the rules' intake: counted, logged
                    self.counts["observe_crashed"] += 1
                    log.exception("rules: a %s of %s could not be read", type_, uuid)

    def _numbered(self, router: str, type_: str, seq) -> int:
        """What this subscriber lost before this message: a router's SEQ (per type) more
        than one past the last seen (SPEC 4.1)."""
        if not seq:
            return 0
        key = (router, type_)
        last = self._seq.get(key)
        self._seq[key] = seq[0]
        return seq[0] - last - 1 if last is not None and seq[0] > last + 1 else 0


def lean(frames: list[bytes]):
    """(type, uuid, router, seq, body) of a tail message, decoded as far as the rules read
    it: ENVELOPE, SIGNATURE, BODY[, SEQ] (SPEC 4.1), the body a JSON object whose ``uuid``
    is the stamp's (else ``403``, as a sink's intake refuses it); ProtocolError otherwise."""
    if len(frames) not in (3, 4):
        raise ProtocolError(protocol.BAD_REQUEST, f"expected 4 frames, got {len(frames)}")
    protocol.check_signature(frames[1])
    type_, uuid, path = protocol.parse_path(frames[0], TYPES)
    if len(frames[2]) > MAX_BODY:
        raise ProtocolError(protocol.BAD_REQUEST, "body too large")
    try:
        body = json.loads(frames[2])
    except (ValueError, RecursionError):
        raise ProtocolError(protocol.BAD_REQUEST, "body is not JSON") from None
    if not isinstance(body, dict):
        raise ProtocolError(protocol.BAD_REQUEST, "body is not a JSON object")
    if body.get("uuid") != uuid:
        raise ProtocolError(FORBIDDEN, "body uuid is not the sender")
    seq = None
    if len(frames) == 4:
        if len(frames[3]) != TAIL_SEQ.size:
            raise ProtocolError(protocol.BAD_REQUEST, "SEQ of another length")
        seq = TAIL_SEQ.unpack(frames[3])
    return type_, uuid, path[0], seq, body
