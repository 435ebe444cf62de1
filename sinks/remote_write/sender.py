"""Getting the queue to the receiver: rounds of requests over up to ``max_shards`` connections.

One thread (:class:`Sender`) runs rounds. A round takes the oldest samples of the queue
(:meth:`sinks.remote_write.queue.SpillQueue.take`: up to ``shards x max_samples_per_send``,
waiting up to ``batch_wait`` for one full request), hashes each sample's series to a shard
(:func:`split`: the crc32 of its encoded labels, so a series always lands on the same shard
of a round, in queue order), and sends each shard's samples as requests of at most
``max_samples_per_send``, the shards at once, each on its own connection
(:class:`sinks.remote_write.client.Client`). The round ends when every shard is done, and
only then are its records done and the next round taken: so every series' samples reach the
receiver in order, whatever the number of shards, which is chosen again at each round
(:func:`shards_for`): one per full request waiting, at most ``max_shards``. A fleet that
keeps up uses one connection; after an outage the backlog goes out over all of them.

A request's answer decides (:func:`verdict`):

- 2xx: sent (``samples_sent``);
- 5xx, 429, or no answer (refused, reset, timeout): sent again after a backoff doubling from
  ``min_backoff`` to ``max_backoff``, each wait drawn between half of it and all of it
  (jitter: shards and sinks that failed together do not retry together); a 429's or 503's
  ``Retry-After`` is waited for instead when longer (at most :data:`MAX_RETRY_AFTER`). Counted
  ``retries``; nothing is dropped while the receiver is down: the queue holds it (and drops
  by its own bound);
- any other status (400 for a sample out of order or out of bounds, 401, 404, 413...): the
  receiver will never take it, so it is dropped and counted (``samples_dropped_4xx``, and
  ``http_STATUS``), its error text logged sanitised (control characters escaped, cut to
  200 characters), at most once every 30 s per status. Never retried forever.

At stop (:meth:`Sender.stop`) the sender goes on for at most ``flush_at_exit`` seconds while
the queue has samples, then stops retrying; the queue keeps what was not done.
"""

from __future__ import annotations

import logging
import math
import random
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from fleetwatch.display import escape
from fleetwatch.logs import Throttle
from sinks.remote_write import wire
from sinks.remote_write.client import Answer, Client, SendError
from sinks.remote_write.queue import SpillQueue, samples

log = logging.getLogger(__name__)

#: longest wait a Retry-After may ask for
MAX_RETRY_AFTER = 300.0
#: characters of a receiver's error text logged
MAX_LOGGED = 200
#: what a request's answer means
SENT, RETRY, REFUSED = "sent", "retry", "refused"
COUNTERS = ("samples_sent", "requests", "retries", "samples_dropped_4xx", "rounds",
            "round_crashed")


def verdict(status: int | None) -> str:
    if status is not None and 200 <= status < 300:
        return SENT
    if status is None or status == 429 or status >= 500:
        return RETRY
    return REFUSED


def shards_for(waiting: int, per_send: int, max_shards: int) -> int:
    """Shards for a round: one per full request waiting, 1 to ``max_shards``."""
    return max(1, min(max_shards, math.ceil(waiting / per_send)))


def split(records: list[bytes], shards: int) -> list[list[bytes]]:
    """Each record's samples, to the shard their series hashes to, in record order."""
    out: list[list[bytes]] = [[] for _ in range(shards)]
    if shards == 1:
        out[0] = [data for rec in records for _, data in samples(rec)]
        return out
    for rec in records:
        for shard, data in samples(rec):
            out[shard % shards].append(data)
    return out


class Backoff:
    """Waits before retries: doubling from ``low`` to ``high``, each drawn in [d/2, d]."""

    def __init__(self, low: float, high: float, rand=random.random):
        self.low, self.high, self.rand = low, high, rand
        self.failures = 0

    def next(self, retry_after: float | None = None) -> float:
        d = min(self.high, self.low * 2 ** min(self.failures, 60))
        self.failures += 1
        wait = d / 2 + self.rand() * d / 2
        if retry_after is not None:
            wait = max(wait, min(retry_after, MAX_RETRY_AFTER))
        return wait

    def reset(self) -> None:
        self.failures = 0


class Sender:
    """The sending thread (module docstring): ``headers`` go with every request;
    ``client(shard)`` makes a :class:`sinks.remote_write.client.Client` (tests pass
    another)."""

    def __init__(self, queue: SpillQueue, settings, headers: dict[str, str] | None = None,
                 client=None, rand=random.random):
        self.queue, self.settings = queue, settings
        headers = settings.headers if headers is None else headers
        self.client = client or (lambda shard: Client(
            settings.url, headers, settings.timeout, settings.ca_file))
        self.rand = rand
        self.clients: dict[int, Client] = {}
        self.stopping = threading.Event()      # stop retrying now
        self.draining = False                  # stop once the queue is empty
        self.lock = threading.Lock()
        self._counts: Counter = Counter({k: 0 for k in COUNTERS})
        self.shards = 1
        self.throttle = Throttle(log, 30.0)
        self.pool: ThreadPoolExecutor | None = None
        self.thread = threading.Thread(target=self._run, name="remote-write", daemon=True)

    def snapshot(self) -> Counter:
        with self.lock:
            out = Counter(self._counts)
        out["shards"] = self.shards
        return out

    def _count(self, **deltas) -> None:
        with self.lock:
            for key, n in deltas.items():
                self._counts[key] += n

    # ---------------------------------------------------------------- life cycle
    def start(self) -> None:
        self.thread.start()

    def stop(self, flush: float) -> None:
        """Send for at most ``flush`` seconds while anything is queued, then stop."""
        self.draining = True
        self.thread.join(flush)
        self.stopping.set()
        self.thread.join(self.settings.timeout + 5)
        if self.pool is not None:
            self.pool.shutdown(wait=True)
        for c in self.clients.values():
            c.close()

    def _run(self) -> None:
        s = self.settings
        while not self.stopping.is_set():
            if self.draining and not self.queue.waiting():
                return
            shards = shards_for(self.queue.waiting(), s.max_samples_per_send, s.max_shards)
            records = self.queue.take(shards * s.max_samples_per_send,
                                      0 if self.draining else s.batch_wait)
            if not records:
                if self.queue.closed:
                    return
                continue
            try:
                finished = self.round(records, shards)
            except Exception:  # a bug must not end the sending: counted, logged, given up
                self._count(round_crashed=1)
                log.exception("a remote-write round of %d messages failed: given up",
                              len(records))
                finished = not self.stopping.wait(1.0)
            if not finished:
                return          # stopping: the queue keeps the round's records
            self.queue.done()

    # ---------------------------------------------------------------- a round
    def round(self, records: list[bytes], shards: int) -> bool:
        """Send the records' samples over ``shards`` connections; False when stopped first."""
        self.shards = shards
        parts = split(records, shards)
        self._count(rounds=1)
        if shards == 1:
            return self.send_shard(0, parts[0])
        if self.pool is None:
            self.pool = ThreadPoolExecutor(self.settings.max_shards,
                                           thread_name_prefix="remote-write-shard")
        jobs = [self.pool.submit(self.send_shard, i, part) for i, part in enumerate(parts)
                if part]
        return all([job.result() for job in jobs])

    def send_shard(self, shard: int, series: list[bytes]) -> bool:
        """A shard's samples, in requests of ``max_samples_per_send``; False when stopped
        before they were all answered."""
        per = self.settings.max_samples_per_send
        client = self.clients.get(shard)
        if client is None:
            client = self.clients[shard] = self.client(shard)
        for at in range(0, len(series), per):
            if not self.send(client, series[at:at + per]):
                return False
        return True

    def send(self, client: Client, chunk: list[bytes]) -> bool:
        """One request, again until it is answered for good; False when stopped first."""
        body = wire.compress(wire.write_request(chunk))
        backoff = Backoff(self.settings.min_backoff, self.settings.max_backoff, self.rand)
        while True:
            try:
                answer = client.post(body)
                status, why = answer.status, None
            except SendError as e:
                answer, status, why = None, None, str(e)
            self._count(requests=1)
            kind = verdict(status)
            if kind == SENT:
                self._count(samples_sent=len(chunk))
                return True
            if kind == REFUSED:
                self._refused(answer, len(chunk))
                return True
            self._count(retries=1)
            wait = backoff.next(answer.retry_after if answer is not None else None)
            self.throttle.warning(f"retry_{status}", "the receiver %s: %s; %d samples sent "
                                  "again in %.1f s", self.settings.url,
                                  why or f"answered {status} {_text(answer)}", len(chunk),
                                  wait)
            if self.stopping.wait(wait):
                return False

    def _refused(self, answer: Answer, n: int) -> None:
        with self.lock:
            self._counts["samples_dropped_4xx"] += n
            self._counts[f"http_{answer.status}"] += 1
        self.throttle.warning(f"refused_{answer.status}", "the receiver %s refused %d samples "
                              "(%d, not sent again): %s", self.settings.url, n, answer.status,
                              _text(answer))


def _text(answer: Answer | None) -> str:
    """A receiver's error text as a log may show it: one line, control characters escaped."""
    if answer is None:
        return ""
    text = escape(answer.text.decode("utf-8", "replace").strip())
    return text[:MAX_LOGGED] + ("..." if len(text) > MAX_LOGGED else "")
