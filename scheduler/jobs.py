"""The job table: what to run where and how often, from the registry; and each job's slots.

Pure logic, no sockets and no APScheduler: :func:`jobs_from_rows` turns the registry's
``plugins`` rows into :class:`JobSpec`\\ s, :func:`diff` says what changed between two
readings, and :class:`Plan` holds the current jobs and turns a job firing at a time into a
:class:`Run` (slot, command id, when to send it) while counting skipped slots. The clock and
the random source are injected.
"""

from __future__ import annotations

import functools
import math
import random
import threading
from collections import Counter
from dataclasses import dataclass, field

from scheduler import slots

#: a job firing this early before its slot still counts as that slot (clock rounding)
EARLY = 0.005
#: longest interval a job keeps (366 days, SPEC 4.6): a longer one would put slots past any
#: date a clock or APScheduler can hold (a declared interval of 1e15 s), so it is lowered
MAX_INTERVAL = 366 * 86400.0

Key = tuple[str, str]          # (uuid, plugin)


@dataclass(frozen=True)
class JobSpec:
    uuid: str
    plugin: str
    interval: float
    timeout: float | None = None
    hostname: str | None = None
    source: str = "agent"

    @property
    def key(self) -> Key:
        return (self.uuid, self.plugin)

    @functools.cached_property
    def phase(self) -> float:
        return slots.phase(self.uuid, self.plugin, self.interval)

    def next_run(self, now: float) -> float:
        return slots.next_slot(now, self.phase, self.interval)


@dataclass(frozen=True)
class Run:
    """One RUN to send: to ``uuid``, for ``slot``, not before ``due``, not after ``expires``."""

    uuid: str
    plugin: str
    slot: float
    command_id: str
    timeout: float | None
    due: float
    expires: float


@dataclass
class Diff:
    added: list[JobSpec] = field(default_factory=list)
    removed: list[Key] = field(default_factory=list)
    rescheduled: list[JobSpec] = field(default_factory=list)   # the interval changed
    updated: list[JobSpec] = field(default_factory=list)       # timeout or hostname changed

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.rescheduled or self.updated)

    def summary(self) -> str:
        return (f"{len(self.added)} added, {len(self.removed)} removed, "
                f"{len(self.rescheduled)} rescheduled, {len(self.updated)} updated")


def _positive(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    value = float(value)
    return value if math.isfinite(value) and value > 0 else None


def jobs_from_rows(rows: list[dict], min_interval: float = 1.0,
                   counts: Counter | None = None) -> dict[Key, JobSpec]:
    """One job per (uuid, plugin) declared with an interval.

    A plugin without a positive ``interval`` in its spec runs on demand only (``on_demand``);
    one declared ``passive`` (its agent makes its results, a device's SNMP checks) never runs
    here (``passive``);
    a shorter interval than ``min_interval`` is raised to it (``interval_raised``), a longer
    one than :data:`MAX_INTERVAL` lowered to it (``interval_lowered``). Two sources
    of one agent declaring one plugin name give one job: the agent's own declaration wins,
    then the first source by name (``duplicate``).
    """
    counts = counts if counts is not None else Counter()
    jobs: dict[Key, JobSpec] = {}
    for row in sorted(rows, key=lambda r: (r["source"] != "agent", r["source"])):
        spec = row.get("spec") if isinstance(row.get("spec"), dict) else {}
        if spec.get("passive") is True:
            counts["passive"] += 1          # its agent makes its results: no RUN (SPEC 4.5)
            continue
        interval = _positive(spec.get("interval"))
        if interval is None:
            counts["on_demand"] += 1
            continue
        if interval < min_interval:
            counts["interval_raised"] += 1
            interval = min_interval
        elif interval > MAX_INTERVAL:
            counts["interval_lowered"] += 1
            interval = MAX_INTERVAL
        job = JobSpec(row["uuid"], row["name"], slots.normal_interval(interval),
                      _positive(spec.get("timeout")), row.get("hostname"), row["source"])
        if job.key in jobs:
            counts["duplicate"] += 1
            continue
        jobs[job.key] = job
    return jobs


def diff(old: dict[Key, JobSpec], new: dict[Key, JobSpec]) -> Diff:
    d = Diff()
    for key, job in new.items():
        before = old.get(key)
        if before is None:
            d.added.append(job)
        elif before.interval != job.interval:
            d.rescheduled.append(job)
        elif before != job:
            d.updated.append(job)
    d.removed = [key for key in old if key not in new]
    return d


class Plan:
    """The current jobs and the last slot sent for each; safe to call from several threads.

    :meth:`update` takes a new reading of the registry; :meth:`fire` is what a job does when
    APScheduler runs it. ``counts``: ``fired``, ``skipped`` (slots missed, e.g. a scheduler
    busy or stopped for longer than an interval: they are not caught up), ``fired_twice`` (a
    slot already sent), ``fired_unknown`` (a job removed meanwhile).
    """

    def __init__(self, min_interval: float = 1.0, jitter: float = 5.0,
                 rng: random.Random | None = None):
        self.min_interval, self.jitter = min_interval, jitter
        self.rng = rng or random.Random()
        self.jobs: dict[Key, JobSpec] = {}
        self.last: dict[Key, float] = {}
        self.counts: Counter = Counter()
        self.notes: Counter = Counter()          # of the last reading (on_demand, ...)
        self._lock = threading.Lock()

    def configure(self, min_interval: float, jitter: float) -> None:
        """New settings (a config reload); the next :meth:`update` applies ``min_interval``."""
        with self._lock:
            self.min_interval, self.jitter = min_interval, jitter

    def update(self, rows: list[dict]) -> Diff:
        notes: Counter = Counter()
        new = jobs_from_rows(rows, self.min_interval, notes)
        with self._lock:
            d = diff(self.jobs, new)
            for key in d.removed:
                self.last.pop(key, None)
            for job in d.rescheduled:
                self.last.pop(job.key, None)
            self.jobs, self.notes = new, notes
        return d

    def fire(self, key: Key, now: float) -> Run | None:
        with self._lock:
            job = self.jobs.get(key)
            if job is None:
                self.counts["fired_unknown"] += 1
                return None
            slot = slots.slot_at(now + EARLY, job.phase, job.interval)
            last = self.last.get(key)
            if last is not None:
                if slot <= last:
                    self.counts["fired_twice"] += 1
                    return None
                missed = round((slot - last) / job.interval) - 1
                if missed > 0:
                    self.counts["skipped"] += missed
            self.last[key] = slot
            self.counts["fired"] += 1
            delay = self.rng.uniform(0, slots.jitter_bound(self.jitter, job.interval))
        return Run(job.uuid, job.plugin, slot, slots.command_id(job.uuid, job.plugin, slot),
                   job.timeout, slot + delay, slot + job.interval)

    def snapshot(self) -> tuple[dict[Key, JobSpec], Counter]:
        with self._lock:
            return dict(self.jobs), Counter(self.counts)
