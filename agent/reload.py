"""What SIGHUP (``systemctl reload fleetwatch-agent``) changes in a running agent.

Live: ``log_level``; ``stats_interval`` and ``collectors``; the whole ``plugins`` section
(directories, limits, the declared checks: a changed set of checks is announced at once in a
new REGISTER, spooled like the first); the ``local`` intake limits; ``parents`` and
``ephemeral`` (announced in a new REGISTER, and in every HELLO after); ``deregister_on_stop``
and ``deregister_timeout`` (read at stop). Everything else (routers and routers_k,
state_dir and the intake socket, hostname, heartbeat and reconnect timing, the STATS buffer,
the spool, the CURVE keys, the ``otlp`` intake, the ``devices``) takes effect at restart, which keeps the uuid and the spool.
The mechanism, and how a bad file is handled, is :mod:`fleetwatch.reload`'s.
"""

from __future__ import annotations

import logging

from fleetwatch import logs
from fleetwatch.reload import LIVE, Reloader

log = logging.getLogger(__name__)

POLICY = {"log_level": LIVE, "stats_interval": LIVE, "collectors": LIVE, "plugins": LIVE,
          "local": LIVE, "parents": LIVE, "ephemeral": LIVE, "deregister_on_stop": LIVE,
          "deregister_timeout": LIVE}


def reloader(agent, path: str) -> Reloader:
    """The agent's reloader: its config from ``path``, counted in the agent's counters."""
    from agent.config import AgentConfig
    return Reloader(AgentConfig, path, agent.cfg, POLICY, lambda old, new, changed:
                    apply(agent, old, new, changed), notifier=agent.notifier,
                    counts=agent.counters, prefix="agent.config.")


def apply(agent, old, new, changed: list[str]) -> None:
    """Make the running agent use ``new`` (its loop thread; ``changed``: live paths)."""
    if "log_level" in changed:
        logs.set_level(new.log_level)
    agent.cfg = new
    if "stats_interval" in changed:
        agent.next_stats = min(agent.next_stats, agent.clock() + new.stats_interval)
    if "collectors" in changed:
        agent.collectors.select(new.collectors)
    if any(p.startswith("local.") for p in changed):
        agent.intake.allow = frozenset(new.local.allow)
        agent.intake.names = tuple(new.local.names)
        agent.intake.metric_names.limit = new.local.max_metric_names
        agent.declared.replace_local_commands(new.local.plugins)
    if "parents" in changed or "ephemeral" in changed:
        agent.routers.parents = tuple(new.parents)
        agent.routers.ephemeral = new.ephemeral
        agent.outbox.spool_messages([agent.register()])
    if any(p.startswith("plugins.") for p in changed):
        agent.runner.cfg = new.plugins
        if new.plugins.max_running != old.plugins.max_running:
            agent.workers.resize(new.plugins.max_running)
            agent.runs.start()
        if agent.declared.replace_own(new.plugins.checks):
            agent.outbox.spool_messages([agent.register()])
        agent.runs.check(new.plugins.dirs)
