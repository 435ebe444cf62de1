"""What SIGHUP (``systemctl reload fleetwatch-sink-TYPE``) changes in a running sink.

Every sink: ``log_level``, ``stats_interval``, ``hello_interval``, ``batch`` and ``batch_wait`` (the loop reads
them from its config at each turn). A sink type may add its own live settings with a
``live_settings`` policy and a ``reconfigure(config, changed)`` method, called in the loop's
thread between two batches: the alerting sink takes its whole ``alerting`` section but
``tick_interval`` (thresholds and flapping at the next batch, delivery rules at the next
alert, channels and retry settings at the deliverer's next round). The sections of other
sink types are ignored. Everything else (routers, name, state database, keys, dedupe window,
the graphite, history and prometheus sections) takes effect at restart. The mechanism, and how a bad
file is handled, is :mod:`fleetwatch.reload`'s.
"""

from __future__ import annotations

from fleetwatch import logs
from fleetwatch.reload import IGNORE, LIVE, Reloader
from sinks.config import SinkConfig

LOOP_POLICY = {"log_level": LIVE, "stats_interval": LIVE, "hello_interval": LIVE,
               "batch": LIVE, "batch_wait": LIVE}
#: the config sections that belong to one sink type each
SECTIONS = ("graphite", "alerting", "history", "prometheus")


def policy(sink) -> dict[str, str]:
    out = dict(LOOP_POLICY)
    out.update({section: IGNORE for section in SECTIONS if section != sink.type})
    out.update(getattr(sink, "live_settings", {}))
    return out


def reloader(loop, path: str) -> Reloader:
    """The reloader of a :class:`sinks.loop.SinkLoop`, counted in its counters."""
    def apply(old: SinkConfig, new: SinkConfig, changed: list[str]) -> None:
        if "log_level" in changed:
            logs.set_level(new.log_level)
        loop.config = new
        reconfigure = getattr(loop.sink, "reconfigure", None)
        if reconfigure is not None and any(p.split(".")[0] == loop.sink.type for p in changed):
            reconfigure(new, changed)
    return Reloader(SinkConfig, path, loop.config, policy(loop.sink), apply,
                    notifier=loop.notifier, counts=loop.counts, prefix="config_")
