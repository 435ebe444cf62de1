"""The scheduler process: the registry read every ``refresh_interval``, APScheduler jobs for
what it declares, RUNs through :class:`scheduler.dispatch.Dispatcher`.

Three kinds of thread: the main thread reads the registry and adds, removes or reschedules
APScheduler jobs for what changed (:class:`scheduler.jobs.Plan` says what); APScheduler's
thread runs the jobs at their slots, and a job only turns its slot into a
:class:`scheduler.jobs.Run` and queues it; the dispatcher's thread owns the sockets.

Each job is an APScheduler ``IntervalTrigger`` whose start date is the job's next slot, so it
fires on the slot grid (APScheduler's own ``jitter`` is not used: it accumulates from one run
to the next and would drift off the grid, and with it the command ids). ``coalesce`` and a
misfire grace of one interval mean a scheduler that falls behind sends the latest slot only,
and the plan counts the slots skipped. Jitter is applied by the dispatcher, before sending.

A registry that cannot be read keeps the jobs as they are (counted, logged once a minute);
until the first reading succeeds (a database still starting at boot) it is retried every
second. If the sender thread dies (a bug: its traceback is logged) the process exits 70; if
it hangs (its loop has not turned for half the watchdog period), the main thread stops
pinging systemd's watchdog, which then restarts the scheduler.

SIGHUP (``systemctl reload``) re-reads the config (:data:`POLICY` says what changes live;
routers, id, state_url and keys take effect at restart) and the registry at once: a new
job is picked up without waiting for ``refresh_interval``. Jobs keep their slots, which
depend only on uuid, plugin and interval.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter
from datetime import datetime, timezone

from apscheduler.executors.debug import DebugExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from fleetwatch import __version__, logs, sdnotify
from fleetwatch.logs import Throttle
from fleetwatch.reload import LIVE, Reloader
from fleetwatch.store.reader import Reader, StateError, safe_url
from scheduler.config import SchedulerConfig
from scheduler.dispatch import Dispatcher
from scheduler.jobs import Diff, JobSpec, Key, Plan

log = logging.getLogger(__name__)

#: what a config reload changes in a running scheduler (fleetwatch/reload.py)
POLICY = {name: LIVE for name in ("log_level", "refresh_interval", "jitter", "min_interval",
                                  "hello_interval", "stats_interval")}
#: the main loop's longest sleep while it withholds the watchdog's pings
STALLED_WAIT = 0.25


def read_registry(reader: Reader) -> list[dict]:
    """The registry's ``plugins`` rows, each with its agent's ``hostname`` (or None); none of
    an agent that left (deregistered, or ephemeral and gone silent: ``reads.gone``), so its
    jobs are dropped at the next refresh."""
    from fleetwatch.store import reads
    plugins = reader.read(reads.plugins)
    if not plugins:
        return []
    gone = reader.read(reads.gone)
    plugins = [row for row in plugins if row["uuid"] not in gone]
    hostnames = {a["uuid"]: a.get("hostname") for a in reader.read(reads.agents)}
    return [{**row, "hostname": hostnames.get(row["uuid"])} for row in plugins]


def job_id(key: Key) -> str:
    return f"{key[0]}|{key[1]}"     # a uuid holds no "|"


class Service:
    def __init__(self, config: SchedulerConfig, keys=None, reader: Reader | None = None,
                 ctx=None, clock=time.time, notifier=None, config_path: str | None = None):
        self.config, self.clock = config, clock
        #: systemd: READY once started, the watchdog from the main thread's loop, STOPPING
        self.notifier = notifier if notifier is not None else sdnotify.Notifier.from_env()
        self.reader = reader or Reader(config.state_url)
        self.plan = Plan(config.min_interval, config.jitter)
        self.dispatcher = Dispatcher(config.routers, config.sender_id, keys, ctx, clock,
                                     config.hello_interval, config.stats_interval,
                                     extra=self.counters)
        # The jobs only queue a run: executing them in APScheduler's own thread (the
        # "debug" executor) saves a thread pool hand-off per run (about 20 us of CPU).
        self.aps = BackgroundScheduler(timezone=timezone.utc,
                                       executors={"default": DebugExecutor()},
                                       job_defaults={"coalesce": True, "max_instances": 1})
        self.throttle = Throttle(log, 60.0)
        self.refreshes = self.refresh_failed = 0
        self._stop = threading.Event()
        self.reload_counts: Counter = Counter()
        self.reloader = Reloader(SchedulerConfig, config_path, config, POLICY, self._reconfigure,
                                 self.notifier, self.reload_counts, "config_") \
            if config_path else None

    # ---------------------------------------------------------------- life cycle
    def stop(self, *_args) -> None:
        """End :meth:`run` (safe from a signal handler)."""
        self._stop.set()

    def reload(self, *_args) -> None:
        """Re-read the config and the registry soon (SIGHUP; safe from a signal handler)."""
        if self.reloader is not None:
            self.reloader.request()

    def _reconfigure(self, old: SchedulerConfig, new: SchedulerConfig, changed) -> None:
        if "log_level" in changed:
            logs.set_level(new.log_level)
        self.config = new
        self.plan.configure(new.min_interval, new.jitter)
        self.dispatcher.hello_interval = new.hello_interval
        self.dispatcher.stats_interval = new.stats_interval

    def watchdog(self) -> bool:
        """Ping systemd's watchdog if the sender thread turned within half its period;
        False (logged, throttled) while it did not: a hung sender gets the process
        restarted, as a hung main loop would."""
        limit = self.notifier.interval
        silent = self.dispatcher.silent_for()
        if limit is not None and silent > limit:
            self.throttle.warning("sender_hung", "the sender thread has not turned for %.1f s: "
                                  "not pinging the watchdog", silent)
            return False
        self.notifier.tick()
        return True

    def run(self) -> int:
        log.info("scheduler %s started, fleetwatch %s: routers %s; state %s",
                 self.config.sender_id, __version__, ", ".join(self.config.routers),
                 safe_url(self.config.state_url))
        self.dispatcher.start()
        self.aps.start()
        self.notifier.ready(f"scheduler {self.config.sender_id}")
        next_refresh = 0.0
        try:
            while not self._stop.is_set():
                if not self.dispatcher.alive():     # its traceback is in the log
                    log.error("the sender thread is gone: stopping")
                    return os.EX_SOFTWARE
                if self.reloader is not None and self.reloader.poll():
                    next_refresh = 0.0              # and the registry, at once
                if time.monotonic() >= next_refresh:
                    self.refresh()
                    # until the registry has been read once, try again every second
                    wait = self.config.refresh_interval if self.refreshes else 1.0
                    next_refresh = time.monotonic() + min(wait, self.config.refresh_interval)
                due = self.notifier.watchdog_timeout() if self.watchdog() else STALLED_WAIT
                self._stop.wait(max(0.0, min(1.0, next_refresh - time.monotonic(), due)))
        finally:
            self.notifier.stopping()
            self.aps.shutdown(wait=False)
            self.dispatcher.stop()
            self.reader.close()
        return 0

    def counters(self) -> dict:
        jobs, counts = self.plan.snapshot()
        counts["jobs"] = len(jobs)
        counts["refresh_failed"] = self.refresh_failed
        counts.update(self.reload_counts)
        return counts

    # ---------------------------------------------------------------- registry
    def refresh(self) -> Diff | None:
        """Read the registry and bring the APScheduler jobs in line with it."""
        try:
            rows = read_registry(self.reader)
        except StateError as e:
            self.refresh_failed += 1
            self.throttle.warning("refresh", "%s; keeping the %d jobs as they are", e,
                                  len(self.plan.jobs))
            return None
        self.refreshes += 1
        diff = self.plan.update(rows)
        if diff:
            self.apply(diff)
            log.info("jobs: %d (%s)", len(self.plan.jobs), diff.summary())
        return diff

    def apply(self, diff: Diff) -> None:
        now = self.clock()
        for key in diff.removed:
            self._remove(key)
        for job in diff.rescheduled:
            self._remove(job.key)
            self._add(job, now)
        for job in diff.added:
            self._add(job, now)

    def _add(self, job: JobSpec, now: float) -> None:
        start = datetime.fromtimestamp(job.next_run(now), tz=timezone.utc)
        trigger = IntervalTrigger(seconds=job.interval, start_date=start, timezone=timezone.utc)
        self.aps.add_job(self._fire, trigger, args=job.key, id=job_id(job.key),
                         name=job_id(job.key), misfire_grace_time=max(1, int(job.interval)),
                         replace_existing=True)

    def _remove(self, key: Key) -> None:
        from apscheduler.jobstores.base import JobLookupError
        try:
            self.aps.remove_job(job_id(key))
        except JobLookupError:
            pass

    def _fire(self, uuid: str, plugin: str) -> None:
        run = self.plan.fire((uuid, plugin), self.clock())
        if run is not None:
            self.dispatcher.submit(run)
