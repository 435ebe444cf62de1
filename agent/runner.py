"""The plugin runner's logic: which RUN runs, when, and what RESULT answers it.

No sockets and no threads here: the daemon hands :meth:`Runner.submit` each RUN with the
link it came from, starts the jobs :meth:`Runner.take` gives it (in :class:`agent.execute.
Workers`), and hands each finished one to :meth:`Runner.finish`. Both return the RESULTs to
send as (origin, message) pairs. Rules (SPEC.md 4.5):

- only a declared plugin runs; its command must resolve (``os.path.realpath``) to an
  executable regular file inside one of the plugin directories; one a local process
  declared must also be allowed by the config's ``local.plugins`` and never resolve to an
  exec-wrapper (checked at every RUN: the agent runs nothing its config did not allow);
- at most ``max_running`` run at once, ``max_queued`` more wait; past that a RUN is
  answered UNKNOWN "agent busy";
- a command id runs once: a RUN repeating it (another router, another scheduler) gets the
  first RESULT again, with the same msg_id, or, while the run is still going, is answered
  when it ends; ids are remembered for ``cache_age`` seconds, ``cache_size`` at most;
- a crash, a timeout, a signal, an exit status above 3 or a failure to start is UNKNOWN (3)
  with the reason in the output.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import time
from dataclasses import dataclass, field

from fleetwatch import protocol
from fleetwatch.logs import Throttle

from agent.declared import Plugin
from agent.execute import Finished, Launch, execute
from agent.plugins_config import command_problem

log = logging.getLogger(__name__)

#: Counters published in the agent's STATS (from zero).
COUNTERS = tuple(f"agent.runs.{c}" for c in (
    "started", "ok", "warning", "critical", "unknown", "timeouts", "undeclared", "refused",
    "busy", "duplicates", "malformed", "bad_perfdata"))
STATUS_COUNTER = ("agent.runs.ok", "agent.runs.warning", "agent.runs.critical",
                  "agent.runs.unknown")
UNKNOWN = 3
#: Encoded size a RESULT's text fields may take together (the body limit is 256 KiB).
RESULT_BUDGET = 200_000
#: Answers kept for RUNs repeating one in flight.
MAX_WAITERS = 16
#: seconds the wall clock may move against the monotonic one between two RESULTs before
#: they are numbered anew (NTP's slewing moves it far less; a step or a VM restored from a
#: snapshot, far more)
CLOCK_STEP = 2.0


@dataclass
class Job:
    command_id: str
    plugin: Plugin
    launch: Launch
    slot: float | None
    waiters: list = field(default_factory=list)
    #: its place among this agent run's RESULTs (:meth:`Runner.take`: when it started)
    boot: str = ""
    seq: int = 0
    #: the uuid whose runner made it (a device's jobs are dispatched by it: agent.devices)
    owner: str = ""


@dataclass(frozen=True)
class Outcome:
    """A run's RESULT fields, computed in the worker thread."""

    status: int
    output: str
    long_output: str = ""
    perfdata: list = field(default_factory=list)
    started: float = 0.0
    duration: float = 0.0
    timed_out: bool = False
    bad_perfdata: int = 0


def resolve(command: str, dirs) -> tuple[str, str] | str:
    """(the executable's real path, the name to give it) or the reason it cannot run.

    The first directory holding ``command`` decides; the file, symlinks followed, must be
    an executable regular file inside one of ``dirs``.
    """
    problem = command_problem(command)
    if problem:
        return f"command {problem}"
    roots = [os.path.realpath(d) for d in dirs]
    for d in dirs:
        candidate = os.path.join(d, command)
        if not os.path.lexists(candidate):
            continue
        real = os.path.realpath(candidate)
        if not any(real == r or real.startswith(r.rstrip(os.sep) + os.sep) for r in roots):
            return f"command {command!r} resolves to {real} outside the plugin directories"
        if not os.path.isfile(real):
            return f"command {command!r} ({real}) is not a regular file"
        if not os.access(real, os.X_OK):
            return f"command {command!r} ({real}) is not executable"
        return real, candidate
    return f"command {command!r} not found in the plugin directories ({', '.join(dirs)})"


def outcome(plugin: str, launch: Launch, done: Finished) -> Outcome:
    """The RESULT fields for a finished process (pure: no I/O)."""
    # imported at the first result: an agent that runs no plugin never loads the parser
    from plugins.output import parse

    parsed = parse(done.stdout)
    stderr = done.stderr.decode("utf-8", errors="replace").strip()
    text, long_output = parsed.text, parsed.long_output
    if not text:
        first, _, rest = stderr.partition("\n")
        text = "(No output on stdout)" + (f" stderr: {first.strip()}" if first else "")
        long_output = _join(long_output, rest.strip())
        stderr = ""
    notes = [f"[{n} more bytes of {what} discarded]" for n, what in
             ((done.stdout_dropped, "stdout"), (done.stderr_dropped, "stderr")) if n]
    fail = None
    if done.error is not None:
        fail = f"cannot run {launch.path}: {done.error}"
    elif done.stopped:
        fail = "the agent is stopping: plugin killed"
    elif done.timed_out:
        fail = f"plugin timed out after {launch.timeout:g}s (process group killed)"
    elif done.returncode is not None and done.returncode < 0:
        fail = f"plugin killed by signal {_signame(-done.returncode)}"
    elif done.returncode is not None and done.returncode > 3:
        fail = f"plugin exited with status {done.returncode} (expected 0 to 3)"
    if fail is None:
        return _fit(Outcome(done.returncode, text, _join(long_output, *notes), parsed.perfdata,
                            done.started, done.duration, bad_perfdata=parsed.bad_perfdata))
    output = f"UNKNOWN - {plugin}: {fail}"
    if done.error is None and parsed.text:
        output += f": {text}"
    return _fit(Outcome(UNKNOWN, output, _join(long_output, stderr, *notes), [], done.started,
                        done.duration, timed_out=done.timed_out))


def _join(*parts: str) -> str:
    return "\n".join(p for p in parts if p)


def _signame(number: int) -> str:
    try:
        return f"{number} ({signal.Signals(number).name})"
    except ValueError:
        return str(number)


def _size(*values) -> int:
    return len(json.dumps(values))


def _fit(o: Outcome) -> Outcome:
    """Shorten the long output, then perfdata, then the text until the RESULT fits."""
    if _size(o.output, o.long_output, o.perfdata) <= RESULT_BUDGET:
        return o
    long_output, perfdata, output = o.long_output, o.perfdata, o.output
    while long_output and _size(output, long_output, perfdata) > RESULT_BUDGET:
        long_output = long_output[:len(long_output) // 2] + " [truncated]"
        if len(long_output) < 64:
            long_output = ""
    while perfdata and _size(output, long_output, perfdata) > RESULT_BUDGET:
        perfdata = perfdata[:len(perfdata) // 2]
    while _size(output, long_output, perfdata) > RESULT_BUDGET:
        output = output[:len(output) // 2]
    return Outcome(o.status, output, long_output, perfdata, o.started, o.duration, o.timed_out,
                   o.bad_perfdata)


class Runner:
    """Declared plugins, the run queue and the command-id cache of one agent."""

    def __init__(self, uuid: str, declared, cfg, launcher=execute, clock=time.monotonic,
                 wall=time.time, cache_size: int = 10_000, cache_age: float = 3600.0,
                 cache_bytes: int = 32 * 1024 * 1024, boot: str | None = None):
        self.uuid, self.declared, self.cfg = uuid, declared, cfg
        #: this run of the agent, and the number of its last RESULT: what orders results
        #: on the receiver's side, whatever the wall clock does (SPEC 4.5)
        self.boot, self.seq = boot or os.urandom(8).hex(), 0
        self.launcher = launcher
        self.clock, self.wall = clock, wall
        #: the wall clock less the monotonic one when the last RESULT was numbered: a jump
        #: in it is a clock step, or this process resumed from a VM snapshot (:meth:`next_order`)
        self._offset = wall() - clock()
        self.cache_size, self.cache_age, self.cache_bytes = cache_size, cache_age, cache_bytes
        #: command_id -> [expiry (clock), RESULT, repeats sent, approximate bytes]
        self.cache: collections.OrderedDict = collections.OrderedDict()
        self.cached_bytes = 0
        self.queued: collections.deque[Job] = collections.deque()
        self.inflight: dict[str, Job] = {}
        self.running = 0
        self.counters = collections.Counter(dict.fromkeys(COUNTERS, 0))
        self.throttle = Throttle(log, 10.0, clock)

    def gauges(self) -> dict:
        return {"agent.runs.running": self.running, "agent.runs.queued": len(self.queued),
                "agent.plugins.declared": len(self.declared)}

    # ---------------------------------------------------------------- loop thread
    def submit(self, msg: protocol.Message, origin) -> list[tuple[object, protocol.Message]]:
        """A RUN from ``origin``: the RESULTs to send now (maybe none)."""
        command_id, name = msg.get("command_id"), msg.get("plugin")
        if not protocol.ID_PATTERN.fullmatch(command_id):
            self.counters["agent.runs.malformed"] += 1
            self.throttle.warning("malformed", "RUN with a malformed command_id %r dropped",
                                  command_id[:64])
            return []
        self._expire()
        cached = self.cache.get(command_id)
        if cached is not None:
            self.counters["agent.runs.duplicates"] += 1
            cached[2] += 1
            return [(origin, protocol.resend(cached[1], cached[2]))]
        job = self.inflight.get(command_id)
        if job is not None:
            self.counters["agent.runs.duplicates"] += 1
            if len(job.waiters) < MAX_WAITERS:
                job.waiters.append(origin)
            return []
        slot = msg.get("slot")
        slot = slot if isinstance(slot, (int, float)) and not isinstance(slot, bool) else None
        plugin = self.declared.get(name)
        if plugin is None:
            self.counters["agent.runs.undeclared"] += 1
            self.throttle.warning("undeclared", "RUN for undeclared plugin %r refused", name)
            return self._refuse(origin, command_id, name, slot,
                                f"plugin {name!r} is not declared by this agent")
        found = resolve(plugin.command, self.cfg.dirs)
        if not isinstance(found, str):
            problem = self.declared.local_problem(plugin, found[0])
            if problem:
                found = f"plugin {name!r} of local process {plugin.owner!r}: {problem}"
        if isinstance(found, str):
            self.counters["agent.runs.refused"] += 1
            self.throttle.warning(f"refused.{name}", "plugin %s: %s", name, found)
            return self._refuse(origin, command_id, name, slot, found)
        if len(self.inflight) >= self.cfg.max_running + self.cfg.max_queued:
            self.counters["agent.runs.busy"] += 1
            self.throttle.warning("busy", "agent busy: RUN %s for %s refused", command_id, name)
            return self._refuse(origin, command_id, name, slot,
                                f"agent busy: {self.running} plugins running, "
                                f"{len(self.queued)} waiting")
        timeout = plugin.timeout
        asked = msg.get("timeout")
        if isinstance(asked, (int, float)) and not isinstance(asked, bool) and asked > 0:
            timeout = min(timeout, asked)
        path, argv0 = found
        launch = Launch(path, argv0, plugin.args, timeout, self.cfg.output_limit, self.cfg.grace)
        job = Job(command_id, plugin, launch, slot, [origin], owner=self.uuid)
        self.inflight[command_id] = job
        self.queued.append(job)
        return []

    def take(self) -> list[Job]:
        """The queued jobs to start now, counted as running."""
        jobs = []
        while self.queued and self.running < self.cfg.max_running:
            jobs.append(self.queued.popleft())
            jobs[-1].boot, jobs[-1].seq = self.next_order()
            self.running += 1
            self.counters["agent.runs.started"] += 1
        return jobs

    def finish(self, job: Job, result) -> list[tuple[object, protocol.Message]]:
        """A job the workers ran: its RESULT, once for each RUN that asked for it."""
        self.running -= 1
        self.inflight.pop(job.command_id, None)
        if not isinstance(result, Outcome):  # the worker failed: still answer
            result = Outcome(UNKNOWN, f"UNKNOWN - {job.plugin.name}: agent error: {result}",
                             started=self.wall())
        self.counters[STATUS_COUNTER[result.status]] += 1
        self.counters["agent.runs.timeouts"] += result.timed_out
        self.counters["agent.runs.bad_perfdata"] += result.bad_perfdata
        msg = protocol.make("RESULT", self.uuid, clock=self.wall, command_id=job.command_id,
                            plugin=job.plugin.name, status=result.status, output=result.output,
                            long_output=result.long_output, perfdata=result.perfdata,
                            slot=job.slot, started=result.started,
                            duration=round(result.duration, 6), boot=job.boot, seq=job.seq)
        self._remember(job.command_id, msg, len(job.waiters) - 1)
        return [(origin, msg if i == 0 else protocol.resend(msg, i))
                for i, origin in enumerate(job.waiters)]

    # ---------------------------------------------------------------- worker threads
    def work(self, job: Job, stop=None) -> Outcome:
        """Run ``job`` (called in a worker thread: touches nothing shared)."""
        return outcome(job.plugin.name, job.launch, self.launcher(job.launch, stop))

    # ---------------------------------------------------------------- cache
    def _refuse(self, origin, command_id: str, name: str, slot, reason: str):
        self.counters["agent.runs.unknown"] += 1
        boot, seq = self.next_order()
        msg = protocol.make("RESULT", self.uuid, clock=self.wall, command_id=command_id,
                            plugin=name, status=UNKNOWN, output=f"UNKNOWN - {reason}",
                            long_output="", perfdata=[], slot=slot, started=self.wall(),
                            duration=0.0, boot=boot, seq=seq)
        self._remember(command_id, msg, 0)
        return [(origin, msg)]

    def next_order(self) -> tuple[str, int]:
        """The ``boot`` and ``seq`` of the next RESULT. A wall clock that moved against the
        monotonic one by more than :data:`CLOCK_STEP` since the last RESULT (NTP stepped
        it, or this process was restored from a VM snapshot, with its ``seq`` of then)
        starts a new ``boot``: the receivers then order by arrival, and a restored agent's
        numbers, already sent once, hide nothing (SPEC 4.5)."""
        offset = self.wall() - self.clock()
        if abs(offset - self._offset) > CLOCK_STEP:
            log.info("the wall clock moved %+.1f s against the monotonic one: results are "
                     "numbered anew", offset - self._offset)
            self.boot, self.seq = os.urandom(8).hex(), 0
        self._offset = offset
        self.seq += 1
        return self.boot, self.seq

    def _remember(self, command_id: str, msg: protocol.Message, repeats: int) -> None:
        size = 256 + len(msg.get("output")) + len(msg.get("long_output", "")) + \
            128 * len(msg.get("perfdata", ()))
        self._forget(command_id)
        self.cache[command_id] = [self.clock() + self.cache_age, msg, repeats, size]
        self.cached_bytes += size
        while len(self.cache) > self.cache_size or self.cached_bytes > self.cache_bytes:
            self._forget(next(iter(self.cache)))

    def _forget(self, command_id: str) -> None:
        entry = self.cache.pop(command_id, None)
        if entry is not None:
            self.cached_bytes -= entry[3]

    def _expire(self) -> None:
        now = self.clock()
        while self.cache:
            command_id, entry = next(iter(self.cache.items()))
            if entry[0] > now:
                return
            self._forget(command_id)

