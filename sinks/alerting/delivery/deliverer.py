"""The deliverer: sends the alerting sink's outbox rows, with retries, from its own thread.

Each round (:meth:`Deliverer.run_once`) claims a batch of due rows in one short
transaction (:func:`sinks.alerting.delivery.store.claim`), sends them one by one outside any
transaction and records each outcome in its own (:func:`sinks.alerting.delivery.store.mark`).
Each channel's sends go on a lane of their own (a thread), in order; a channel whose lane
is still sending is not claimed for, so one that is slow to answer (a service timing out, a
hung connection) never delays another channel's alerts. A
channel with ``group_wait`` (:mod:`sinks.alerting.delivery.grouping`) has its rows claimed group
by group; an email channel sends a group as one message, and its outcome is the outcome of every
row in it:

- sent: the row is done;
- :class:`sinks.alerting.delivery.channels.SendError` ``permanent`` (a 4xx webhook answer, a 5xx
  SMTP reply): failed at once, logged and counted -- retrying would only repeat the refusal;
- any other error: retried after ``retry.initial * 2**(attempts-1)`` seconds, at most
  ``retry.max``, shortened by up to ``retry.jitter`` at random (sinks that failed together
  do not retry together), and failed once the alert is ``retry.max_age`` old.

A channel that fails with a retryable error is left alone for a while (the same backoff,
counted per channel): with a mail server down, a hundred waiting alerts cost one connection
attempt per round, not a hundred timeouts. The claim's lease is checked before each send:
a row is only sent while the lease leaves room for twice the channel's timeout, so another
sink never takes over a row that is still being sent.

Times are wall-clock seconds (``time.time``): leases are compared between sinks sharing one
database, possibly on several machines, whose clocks are assumed to agree to well within a
lease.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from fleetwatch.logs import Throttle
from sinks.alerting.delivery import grouping, health
from sinks.alerting.delivery import store as outbox
from sinks.alerting.delivery.channels import Receipt, SendError, link
from sinks.alerting.delivery.senders import senders as build_senders
from sinks.alerting.delivery.config import DeliveryConfig

log = logging.getLogger(__name__)

#: seconds between two purges of old sent and failed alerts
PURGE_EVERY = 3600.0
#: channels sending at once, each on its lane (a thread, made when first needed)
LANES = 32


class Deliverer:
    def __init__(self, engine: Engine, config: DeliveryConfig, senders: dict | None = None,
                 name: str = "alerting", clock=time.time, rand=random.random):
        self.engine, self.config, self.clock, self.rand = engine, config, clock, rand
        self.senders = build_senders(config) if senders is None else senders
        self.worker = f"{name}:{os.getpid()}:{uuid.uuid4().hex[:8]}"[:128]
        self.counts: Counter = Counter()
        self._counting = threading.Lock()
        self.throttle = Throttle(log)
        #: the channels whose lane is sending (not claimed for meanwhile), and the lanes:
        #: each channel's sends on a thread of its own while the deliverer runs (None:
        #: :meth:`run_once` sends them itself, in turn, as tests call it)
        self.busy: set[str] = set()
        self._lanes: ThreadPoolExecutor | None = None
        #: channel -> (consecutive retryable failures, not tried again before)
        self.resting: dict[str, tuple[int, float]] = {}
        self.next_purge = 0.0
        self._wake, self._stop = threading.Event(), threading.Event()
        self._thread: threading.Thread | None = None
        #: a reloaded config, taken by the thread before its next round (:meth:`reconfigure`)
        self._next_config = config

    # ---------------------------------------------------------------- policy (pure)
    def backoff(self, failures: int) -> float:
        r = self.config.retry
        delay = min(r.max, r.initial * 2 ** min(max(failures - 1, 0), 30))
        return delay * (1 - r.jitter * self.rand())

    def _usable(self, now: float) -> list[str]:
        return [c for c in self.senders if self.resting.get(c, (0, 0.0))[1] <= now
                and c not in self.busy]

    def _count(self, key: str, n: int = 1) -> None:
        with self._counting:        # (lanes count from their threads)
            self.counts[key] += n

    # ---------------------------------------------------------------- one round
    def run_once(self) -> int:
        """Claim and send one batch; return how many rows were claimed."""
        now = self.clock()
        if now >= self.next_purge:
            self._housekeeping(now)
        waits = grouping.waits(self.config.parsed_channels())
        with self.engine.begin() as conn:
            fallen = health.fall_back(conn, now)    # failing channels' alerts: their fallback
            rows = outbox.claim(conn, self.worker, now, self.config.lease, self.config.batch,
                                self._usable(now), waits)
        if fallen:
            self._count("fell_back", fallen)
            log.warning("%d alert(s) of failing channels put to their fallback", fallen)
        # channels whose sender makes a group one message (email); others send each row
        grouped = {name: by for name, (_, by) in waits.items()
                   if hasattr(self.senders.get(name), "send_group")}
        lanes: dict[str, list[list[dict]]] = {}
        for send in grouping.sends(rows, grouped):
            lanes.setdefault(send[0]["channel"], []).append(send)
        for channel, sends in lanes.items():
            lane = (channel, self.senders[channel], sends, grouped.get(channel, ()))
            if self._lanes is None:
                self._lane(*lane)
            else:
                self.busy.add(channel)
                self._lanes.submit(self._lane, *lane)
        return len(rows)

    def _lane(self, channel: str, sender, sends: list[list[dict]], by) -> None:
        """Send one channel's claimed ``sends`` in order: on a lane of its own, so that a
        channel that is slow to answer (a time-out, a held answer) never delays another's
        sends; the next round claims for it again once it is done."""
        try:
            for i, send in enumerate(sends):
                now = self.clock()
                if now + 2 * sender.timeout > send[0]["lease_until"] or self._stop.is_set():
                    # the lease would not cover the send: later
                    self._give_back([r for later in sends[i:] for r in later])
                    break
                if self.resting.get(channel, (0, 0.0))[1] > now:
                    self._give_back(send)        # its channel just failed in this batch
                    continue
                self._attempt(send, sender, grouping.title(by, grouping.group_of(
                    send[0]["event"], by)))
        except Exception:  # the deliverer outlives its bugs: logged, the lease expires
            self._count("crashed")
            log.exception("channel %s: its sends failed", channel)
        finally:
            self.busy.discard(channel)
            self._wake.set()

    def _attempt(self, rows: list[dict], sender, title: str = "") -> None:
        """Send one alert, or a group of them as one message; what the service answered is
        recorded with the outcome (:class:`Tried`, the ``deliveries`` table)."""
        channel, first = rows[0]["channel"], rows[0]
        started, began = self.clock(), time.monotonic()
        console = self.config.console_url
        events = [{**r["event"], "link": link(r["event"], r["event_id"], console)}
                  if console else r["event"] for r in rows]
        try:
            if len(rows) == 1:
                receipt = sender.send(events[0], ref=str(first["id"]),
                                      **self._follows(sender, first))
            else:
                receipt = sender.send_group(events, ref=f"{first['id']}+{len(rows)}",
                                            title=title)
        except SendError as e:
            self._failed(rows, e, Tried.of(started, began, e))
            return
        except Exception as e:  # a bug in a sender must not stop delivery: retried, logged
            log.exception("channel %s crashed on alert %s", channel, first["id"])
            crash = SendError(f"{e.__class__.__name__}: {e}")
            self._failed(rows, crash, Tried.of(started, began, crash))
            return
        tried = Tried.of(started, began, receipt)
        self.resting.pop(channel, None)
        self._count(f"sent.{channel}", len(rows))
        if len(rows) == 1:
            log.info("alert sent to %s: %s %s (attempt %d)", channel,
                     first["event"].get("action"), first["event"].get("key"),
                     first["attempts"] + 1)
        else:
            self._count(f"grouped.{channel}", 1)
            log.info("%d alerts sent to %s in one message (%s)", len(rows), channel,
                     title or "the channel's group")
        self._mark(rows, outbox.SENT, tried=tried)

    def _follows(self, sender, row: dict) -> dict:
        """For a sender that threads (Slack's bot): an acknowledgement's or a recovery's
        ``thread``, the message of its problem (:func:`sinks.alerting.delivery.store.
        thread_of`), else nothing."""
        if not getattr(sender, "threads", False) or \
                row["event"].get("action") not in ("acknowledge", "resolve"):
            return {}
        try:
            with self.engine.connect() as conn:
                return {"thread": outbox.thread_of(conn, row["event"].get("key") or "?",
                                                   row["channel"])}
        except SQLAlchemyError as e:        # posted on its own, not in the thread
            self.throttle.warning("thread", "cannot read the problem's message: %s", e)
            return {}

    def _failed(self, rows: list[dict], e: SendError, tried: "Tried | None" = None) -> None:
        channel, now = rows[0]["channel"], self.clock()
        attempts = max(r["attempts"] for r in rows) + 1
        old = [r for r in rows if now - r["created"] >= self.config.retry.max_age]
        done = rows if e.permanent else old
        if done:
            why = "refused" if e.permanent else f"undelivered after {attempts} attempts"
            self._count(f"failed.{channel}", len(done))
            log.error("%s to channel %s failed, %s: %s", _which(done), channel, why, e)
            self._mark(done, outbox.FAILED, error=str(e), tried=tried, permanent=e.permanent)
        retry = [r for r in rows if r not in done]
        if not retry:
            return
        failures = self.resting.get(channel, (0, 0.0))[0] + 1
        wait = max(self.backoff(failures), e.retry_after or 0.0)
        self.resting[channel] = (failures, now + wait)
        self._count(f"retry.{channel}", len(retry))
        self.throttle.warning(f"retry.{channel}", "channel %s: %s; alerts to it wait, next "
                              "try in %.0f s", channel, e, wait)
        # a group is retried as a group: one next attempt for all its rows
        retry_at = now + max(self.backoff(attempts), e.retry_after or 0.0)
        self._mark(retry, outbox.PENDING, error=str(e), next_attempt=retry_at, tried=tried,
                   judge=not done)      # (one attempt tells the channel's health once)

    def _mark(self, rows: list[dict], state: str, error: str | None = None,
              next_attempt: float | None = None, tried: "Tried | None" = None,
              permanent: bool = False, judge: bool = True) -> None:
        """Record the outcome ``state`` of ``rows`` and, for an attempt, what it got
        (``tried``: a ``deliveries`` row each, ``retry`` for a row pending again) and what
        it says of the channel (:func:`sinks.alerting.delivery.health.attempted`: the alert
        of a change, enqueued here), in one transaction. An attempt is recorded even when
        the claim had expired (it was made); the channel is judged only by a claim still
        held."""
        change = None
        try:
            with self.engine.begin() as conn:
                now = self.clock()
                ours = outbox.mark(conn, [r["id"] for r in rows], self.worker, now,
                                   state, error=error, next_attempt=next_attempt)
                if tried is not None:
                    outcome = "retry" if state == outbox.PENDING else state
                    outbox.record(conn, rows, self.worker, outcome, tried)
                if tried is not None and ours and judge:
                    change = health.attempted(conn, rows[0]["channel"], state == outbox.SENT,
                                              permanent, tried, now)
                    if change is not None:
                        self._tell(conn, rows[0]["channel"], change, now)
        except SQLAlchemyError as e:
            self._count("mark_failed", 1)
            self.throttle.warning("mark_failed", "cannot record the outcome of %s (%s); "
                                  "the lease expires and it is tried again: %s",
                                  _which(rows), state, e)
            return
        if ours < len(rows):
            self._count("lease_lost", 1)
            self.throttle.warning("lease_lost", "%s: our claim had expired when marking "
                                  "it %s", _which(rows), state)

    def _tell(self, conn, channel: str, change: dict, now: float) -> None:
        """The alert of a channel's change: to its fallback and where the rules route it,
        never to the channel itself (its resolve goes where its trigger went)."""
        parsed = self.config.parsed_channels().get(channel)
        outbox.enqueue(conn, change, self.config, now,
                       also=[parsed.fallback] if parsed and parsed.fallback else [],
                       skip=(channel,))
        self._count(f"channel_{'recovered' if change['action'] == 'resolve' else 'failing'}")
        (log.info if change["action"] == "resolve" else log.error)("%s", change["summary"])
        self._wake.set()

    def _give_back(self, rows: list[dict]) -> None:
        try:
            with self.engine.begin() as conn:
                outbox.mark(conn, [r["id"] for r in rows], self.worker, self.clock(),
                            outbox.PENDING, attempted=False)
        except SQLAlchemyError as e:
            self.throttle.warning("give_back", "cannot give back %d alert(s) (their lease "
                                  "expires): %s", len(rows), e)

    def _housekeeping(self, now: float) -> None:
        self.next_purge = now + PURGE_EVERY
        with self.engine.begin() as conn:
            gone = outbox.purge(conn, now - self.config.keep)
            stale = outbox.fail_orphans(conn, list(self.senders),
                                        now - self.config.retry.max_age, now)
        if gone or stale:
            log.info("outbox: %d old alert(s) purged, %d for removed channels failed",
                     gone, stale)

    # ---------------------------------------------------------------- thread
    def start(self) -> None:
        if not self.senders:
            log.info("no alert channels configured: alerts are recorded, not sent")
        self._lanes = ThreadPoolExecutor(max_workers=LANES, thread_name_prefix="deliver")
        self._thread = threading.Thread(target=self._run, name="deliverer", daemon=True)
        self._thread.start()

    def reconfigure(self, config: DeliveryConfig) -> None:
        """New channels, retry and outbox settings (a config reload; any thread): the
        deliverer's thread takes them before its next round, never within one."""
        self._next_config = config
        self.wake()

    def _take_config(self) -> None:
        config = self._next_config
        if config is self.config:
            return
        self.senders = build_senders(config)
        self.config = config
        self._declare()
        self.resting = {c: r for c, r in self.resting.items() if c in self.senders}
        self.next_purge = 0.0        # alerts of removed channels: failed once too old
        log.info("delivery settings reloaded: channels %s", ", ".join(self.senders) or "none")

    def wake(self) -> None:
        """Look at the outbox now (an alert was just committed)."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            deadline = time.monotonic() + timeout
            self._thread.join(timeout)
            if self._lanes is not None:
                self._lanes.shutdown(wait=False)    # (each gives back what it holds)
                while self.busy and time.monotonic() < deadline:
                    self._wake.wait(0.05)   # (each lane sets it when done)
                    self._wake.clear()
            if self._thread.is_alive() or self.busy:    # still sending: giving its row
                log.warning("deliverer still sending at stop; its claims expire in %.0f s",
                            self.config.lease)      # back could send it twice
                return
        try:
            with self.engine.begin() as conn:
                outbox.release(conn, self.worker)
        except SQLAlchemyError as e:
            log.warning("cannot release claimed alerts at stop (their lease expires): %s", e)

    def _declare(self) -> None:
        """The configured channels' rows (:func:`sinks.alerting.delivery.health.declare`)."""
        try:
            with self.engine.begin() as conn:
                health.declare(conn, self.config.parsed_channels(), self.clock())
        except SQLAlchemyError as e:
            self.throttle.warning("declare", "cannot record the channels: %s", e)

    def _run(self) -> None:
        self._declare()
        while not self._stop.is_set():
            busy = 0
            self._wake.clear()          # (a lane done from now on wakes the next wait)
            try:
                self._take_config()
                busy = self.run_once() if self.senders else 0
            except SQLAlchemyError as e:
                self._count("db_errors")
                self.throttle.warning("db", "outbox unavailable: %s", e)
            except Exception:  # the deliverer outlives its bugs: logged, the sink keeps going
                self._count("crashed", 1)
                log.exception("deliverer round failed")
            if busy < self.config.batch:    # (a full batch: more may be due at once)
                self._wake.wait(self.config.poll_interval)


@dataclass(frozen=True)
class Tried:
    """One attempt to send, as the ``deliveries`` table keeps it: when it started (wall
    clock), how long it took (seconds), and what the service answered (a
    :class:`sinks.alerting.delivery.channels.Receipt`, or a
    :class:`sinks.alerting.delivery.channels.SendError`'s status and reason)."""

    started: float
    latency: float
    status: str | None
    message_id: str | None
    answer: str

    @classmethod
    def of(cls, started: float, began: float, answer) -> "Tried":
        latency = round(time.monotonic() - began, 6)
        if isinstance(answer, Receipt):
            return cls(started, latency, answer.status, answer.message_id, answer.answer)
        if isinstance(answer, SendError):
            return cls(started, latency, answer.status, None, str(answer))
        return cls(started, latency, None, None, "")      # a sender that says nothing


def _which(rows: list[dict]) -> str:
    """``alert 17 (KEY)`` or ``3 alerts (17, 18, 20)``, for log lines."""
    if len(rows) == 1:
        return f"alert {rows[0]['id']} ({rows[0]['event'].get('key')})"
    ids = ", ".join(str(r["id"]) for r in rows[:5])
    return f"{len(rows)} alerts ({ids}{', ...' if len(rows) > 5 else ''})"
