"""The router's file descriptors: how many its unit allows for the agents it is sized for,
and the headroom it reports in its STATS.

A router holds one descriptor per agent connection (1,000 DEALERs attached: 1,000 more
descriptors, measured with tests/support/dealers.py) besides a few dozen of its own (each
socket's mailbox, the poller, the sinks', control clients' and tail subscribers'
connections). :func:`nofile` allows two per agent of ``max_agents`` (room for connections
that replace others before the old ones are gone, as in a reconnect storm) and
:data:`RESERVED` more: the unit's ``LimitNOFILE=``. Out of descriptors, libzmq spins on
``accept()`` at full CPU and new agents never attach (docs/development/decisions.md), so
:class:`Descriptors` puts ``router.fd_used``, ``router.fd_limit`` and
``router.fd_headroom_pct`` in every STATS and warns once when less than
:data:`WARN_BELOW_PCT` of the limit is left (again only after the headroom came back).
"""

from __future__ import annotations

import logging
import os
import resource
import time

from fleetwatch.limits import raise_limit
from fleetwatch.logs import Throttle

log = logging.getLogger(__name__)

__all__ = ["raise_limit"]          # the router's main raises its own limit with it

#: descriptors allowed per agent the router is sized for
PER_AGENT = 2
#: descriptors allowed beyond the agents' (the router's own, sinks, control, tail, logs)
RESERVED = 1024
#: the headroom (% of the limit left) under which the router warns
WARN_BELOW_PCT = 20.0
#: the headroom above which a new fall under WARN_BELOW_PCT warns again
REARM_ABOVE_PCT = 25.0
#: at most one warning this often, however the headroom comes and goes (seconds)
WARN_PERIOD = 3600.0
#: the most agents a router may be sized for: the limit must stay under the kernel's
#: nr_open (1,048,576 by default), past which systemd cannot start the unit
MAX_AGENTS = 500_000


def nofile(max_agents: int) -> int:
    """``LimitNOFILE=`` for a router sized for ``max_agents`` agents."""
    return PER_AGENT * max_agents + RESERVED


def count_open() -> int | None:
    """Descriptors open in this process (Linux's /proc/self/fd, else /dev/fd); None if
    neither can be listed."""
    for path in ("/proc/self/fd", "/dev/fd"):
        try:
            return len(os.listdir(path)) - 1     # less the one the listing itself opened
        except OSError:
            continue
    return None


def soft_limit() -> int | None:
    """The soft RLIMIT_NOFILE, what opening one more descriptor is checked against."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


class Descriptors:
    """Descriptors in use against the limit, as STATS metrics, with the low-headroom
    warning. ``count`` and ``limit`` are injected (tests give numbers)."""

    def __init__(self, count=count_open, limit=soft_limit, clock=time.monotonic,
                 logger: logging.Logger = log):
        self.count, self.limit = count, limit
        self.throttle = Throttle(logger, WARN_PERIOD, clock)
        #: under WARN_BELOW_PCT since the last warning (no new one until it came back)
        self.low = False

    def metrics(self) -> dict[str, float]:
        """``router.fd_used``, ``router.fd_limit``, ``router.fd_headroom_pct`` (none when
        either number is unknown); warns as it reads them."""
        used, limit = self.count(), self.limit()
        if used is None or not limit:
            return {}
        headroom = round(100.0 * (limit - used) / limit, 1)
        self.check(used, limit, headroom)
        return {"router.fd_used": used, "router.fd_limit": limit,
                "router.fd_headroom_pct": headroom}

    def check(self, used: int, limit: int, headroom: float) -> None:
        if headroom < WARN_BELOW_PCT and not self.low:
            self.low = True
            self.throttle.warning(
                "fd_headroom", "file descriptors: %d of %d in use, %.1f %% left (under %d %%): "
                "new agents cannot attach once none is left; raise max_agents and reinstall "
                "the unit (LimitNOFILE=), or spread the agents over more routers",
                used, limit, headroom, WARN_BELOW_PCT)
        elif headroom > REARM_ABOVE_PCT:
            self.low = False
