"""The agent's own metrics, sent in every STATS next to the host's (agent/README.md,
"Metrics"): its event counters, from zero at start, and gauges read from the parts that
hold them (spool, links, intake, collectors, runner), plus ``agent.uptime``.
"""

from __future__ import annotations

import collections

#: The agent's event counters, reported (from zero) in every STATS.
COUNTERS = ("agent.spool.acked", "agent.spool.acks_ignored", "agent.spool.resent",
            "agent.spool.durable_unavailable",
            "agent.spool.errors", "agent.routers.expired", "agent.routers.dropped",
            "agent.routers.unchosen", "agent.routers.parked",
            "agent.stats.dropped",
            "fleetwatch.cli.send.dropped",
            "agent.router.errors", "agent.router.handshake_failed")


def counters() -> collections.Counter:
    """The event counters, each at zero (others, such as the reloader's, join as counted)."""
    return collections.Counter(dict.fromkeys(COUNTERS, 0))


class SelfStats:
    """Reads the agent's own metrics from the objects that keep them."""

    def __init__(self, counters: collections.Counter, spool, links, intake, collectors,
                 runner, clock, started: float, attach=None, otlp=None):
        self.counters, self.spool, self.links, self.intake = counters, spool, links, intake
        #: agent.attach.Attach: the live set it ranks (``agent.routers.live``)
        self.attach = attach
        self.collectors, self.runner, self.clock = collectors, runner, clock
        self.started = started
        #: agent.otlp.intake.OtlpIntake when the OTLP intake is enabled (agent.otlp.*)
        self.otlp = otlp

    def metrics(self) -> dict:
        return {
            **self.counters,
            "agent.spool.size": len(self.spool),
            "agent.spool.dropped": self.spool.dropped,
            "agent.spool.superseded": self.spool.superseded,
            "agent.spool.write_errors": self.spool.write_errors,
            "agent.spool.unsaved": self.spool.unsaved,
            "agent.routers.alive": len(self.links.alive()),
            "agent.routers.known": len(self.links),
            "agent.routers.live": len(self.attach.live() or ()) if self.attach else 0,
            "agent.intake.received": self.intake.received,
            "agent.intake.errors": self.intake.errors,
            "agent.intake.refused": self.intake.refused,
            "agent.intake.names": len(self.intake.metric_names),
            "agent.intake.names_refused": self.intake.names_refused,
            "agent.collectors.failures": self.collectors.failures,
            **self.runner.counters,
            **self.runner.gauges(),
            **(self.otlp.metrics() if self.otlp is not None else {}),
            "agent.uptime": round(self.clock() - self.started, 1),
        }
