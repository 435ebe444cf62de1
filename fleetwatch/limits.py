"""The process's descriptor limit: raised, at start, to what a process sized for its load
wants (a router for its agents, a poller for its devices), as far as the hard limit allows."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger(__name__)


def raise_limit(wanted: int) -> tuple[int, int]:
    """Raise the soft limit to ``wanted`` as far as the hard limit allows (a process started
    outside its unit often has a soft limit of 1,024); never lower it. (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            log.warning("cannot raise the descriptor limit from %d to %d: %s", soft, target, e)
    return soft, resource.getrlimit(resource.RLIMIT_NOFILE)[0]
