"""Slots: when a plugin of an agent runs, the same on every scheduler.

A job (an agent's uuid, a plugin, an interval) runs at the slots ``phase + k * interval``
(seconds since the Unix epoch, any integer k). The phase comes from a stable hash of uuid and
plugin (SHA-256, not Python's salted ``hash()``), so two schedulers on two machines compute
the same slots, and a fleet of agents declaring the same plugin at the same interval is spread
over the interval instead of firing in lockstep. The command id is derived from the slot
(``s:`` and 24 hex digits of SHA-256 over ``uuid|plugin|slot``, the slot in whole seconds), so
every scheduler sends the same id for one slot and the agent runs it once.

Phases are in milliseconds, so a fleet spreads within each second too (whole-second phases
would fire every 1 s job of a fleet at the same instant, and a 60 s fleet in 60 bursts).
Intervals are rounded to milliseconds and are at least one second, so two slots of one job
never round to the same whole second, with one exception that :func:`phase` avoids: with a
one-second interval and a phase ending in .500, Python's round-half-to-even would turn the
slots 11.5 and 12.5 into the same "12"; a whole-second interval's phase never ends in .500.
"""

from __future__ import annotations

import hashlib
import math


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


def normal_interval(interval: float) -> float:
    """``interval`` rounded to milliseconds (whole seconds stay whole)."""
    return float(round(interval)) if interval == round(interval) else round(interval, 3)


def phase(uuid: str, plugin: str, interval: float) -> float:
    """Where in each interval the job's slots fall: 0 <= phase < interval, in milliseconds."""
    h = int.from_bytes(_digest(f"{uuid}|{plugin}")[:8], "big")
    ms = round(normal_interval(interval) * 1000)
    p = h % ms
    if ms % 1000 == 0 and p % 1000 == 500:
        p += 1          # a whole-second interval: no slot on a half second (see above)
    return p / 1000


def slot_at(t: float, phase_: float, interval: float) -> float:
    """The latest slot at or before ``t``."""
    k = math.floor((t - phase_) / interval)
    return round(phase_ + k * interval, 3)


def next_slot(t: float, phase_: float, interval: float) -> float:
    """The first slot strictly after ``t``."""
    slot = slot_at(t, phase_, interval)
    return round(slot + interval, 3)


def command_id(uuid: str, plugin: str, slot: float) -> str:
    """The RUN command id of a slot: ``s:`` + 24 hex digits (SPEC 4, RUN)."""
    return "s:" + hashlib.sha256(f"{uuid}|{plugin}|{slot:.0f}".encode("utf-8")).hexdigest()[:24]


def jitter_bound(jitter: float, interval: float) -> float:
    """The largest delay before a slot's RUN is sent: ``jitter``, at most a tenth of the
    interval."""
    return max(0.0, min(jitter, interval / 10))
