"""The demo's supervision of its processes once they run: never a half fleet.

A child that dies is started again after a backoff (15, 30, 60 s), with a line saying
how it died (a signal by name: a SIGBUS is a file it had mapped changed under it, such as
the state database's ``-shm``) and where its log is. One that keeps dying (:data:`GIVE_UP`
lives in a row each shorter than :data:`STEADY`), or refuses its config or keys (exit 78,
which a restart does not fix), stops the whole demo: :meth:`Supervisor.check` returns the
reason. Pure logic: the children, the start function and the clock are given.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

#: seconds before the n-th restart in a row (the last repeats); the first long enough to
#: watch a failover after ``kill -9`` on a router (docs/getting-started.md)
BACKOFF = (15.0, 30.0, 60.0)
#: a child that lived this long was well: its next death counts as the first
STEADY = 120.0
#: deaths in a row after which the demo stops instead of starting it again
GIVE_UP = 4
#: what an exit status of the processes says (fleetwatch's own, sysexits.h)
MEANING = {69: "a service it needs is unavailable", 74: "a file it needs cannot be written",
           78: "its config or keys are wrong"}


def death(returncode: int) -> str:
    """How a child ended: ``died of SIGBUS (signal 7)``, ``exited with status 74 (a file
    it needs cannot be written)``."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = "signal"
        return f"died of {name} (signal {-returncode})"
    meaning = MEANING.get(returncode)
    return f"exited with status {returncode}" + (f" ({meaning})" if meaning else "")


class Supervisor:
    """Watches ``children`` (each with ``name``, ``log`` and ``popen``) that ``start``
    started; :meth:`check` once in a while."""

    def __init__(self, children: list, start: Callable, clock=time.monotonic,
                 say: Callable[[str], None] = print):
        self.children, self.start, self.clock, self.say = children, start, clock, say
        now = clock()
        self.born = {c.name: now for c in children}
        self.deaths: dict[str, int] = {}
        #: name -> when it is started again
        self.due: dict[str, float] = {}

    def check(self) -> str | None:
        """Report the children that died and schedule them; start again those whose wait
        is over. The reason to stop the demo, or None."""
        now = self.clock()
        for child in self.children:
            if child.name in self.due:
                if now >= self.due[child.name]:
                    del self.due[child.name]
                    self.start(child)
                    self.born[child.name] = now
                    self.say(f"  {child.name} started again (pid {child.popen.pid})")
                continue
            code = child.popen.poll()
            if code is None:
                continue
            lived = now - self.born[child.name]
            deaths = 1 if lived >= STEADY else self.deaths.get(child.name, 0) + 1
            self.deaths[child.name] = deaths
            how = f"{child.name} {death(code)} after {lived:.0f} s"
            if code == 78:
                return f"{how}: a restart does not fix that; see {child.log}"
            if deaths >= GIVE_UP:
                return f"{how}, {deaths} deaths in a row: stopping; see {child.log}"
            wait = BACKOFF[min(deaths, len(BACKOFF)) - 1]
            self.due[child.name] = now + wait
            self.say(f"  {child.name} {death(code)}; starting it again in {wait:g} s "
                     f"(see {child.log})")
        return None
