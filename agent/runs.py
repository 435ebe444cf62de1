"""Plugin runs as the agent's loop sees them (SPEC.md 4.5): a RUN to the
:class:`agent.runner.Runner`, its jobs to the :class:`agent.execute.Workers` threads, their
RESULTs back out.

The workers' finished jobs wake the poller through a socket pair, so that the loop thread
alone sends the RESULTs: through the router the RUN came from, else any live one, else (at
most once) the bounded STATS queue. At start and at a reload of ``plugins`` the declared
checks are looked up in the plugin directories, and what cannot run is logged.
"""

from __future__ import annotations

import logging
import os

from fleetwatch import protocol

from agent.declared import Declared
from agent.execute import Workers
from agent.links import Links
from agent.outbox import Outbox
from agent.runner import Runner, resolve

log = logging.getLogger(__name__)


class Runs:
    """The loop's side of plugin runs: submit, start, finish, answer."""

    def __init__(self, runner: Runner, workers: Workers, declared: Declared, links: Links,
                 outbox: Outbox):
        self.runner, self.workers, self.declared = runner, workers, declared
        self.links, self.outbox = links, outbox

    def check(self, dirs) -> None:
        """Log plugin directories that do not exist and declared checks that do not resolve."""
        for d in dirs:
            if not os.path.isdir(d):
                log.warning("plugin directory %s does not exist", d)
        for name in list(self.declared.own):
            found = resolve(self.declared.own[name].command, dirs)
            if isinstance(found, str):
                log.warning("plugin %s: %s (its RUNs will be answered UNKNOWN)", name, found)
        log.info("plugins declared: %d in the config (%s), %d by local processes",
                 len(self.declared.own), ", ".join(self.declared.own) or "none",
                 len(self.declared) - len(self.declared.own))

    def submit(self, msg: protocol.Message, endpoint: str) -> None:
        """A RUN from the router at ``endpoint``."""
        self._answer(self.runner.submit(msg, endpoint))
        self.start()

    def start(self) -> None:
        """Hand the runner's waiting jobs to free workers."""
        for job in self.runner.take():
            self.workers.submit(job)

    def finished(self) -> None:
        """The workers woke the poller: answer their finished jobs, start the next ones."""
        for job, result in self.workers.finished():
            self._answer(self.runner.finish(job, result))
        self.start()

    def _answer(self, answers) -> None:
        """Each RESULT through the link its RUN came from, else any live one (at most once:
        with no router alive it waits in the bounded STATS queue)."""
        for origin, msg in answers:
            link = next((k for k in self.links if k.endpoint == origin), None)
            if link is None or not link.alive:
                link = self.links.pick()
            if link is None:
                self.outbox.enqueue(msg)
            else:
                self.outbox.send(link, msg)
