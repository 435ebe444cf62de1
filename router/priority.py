"""The router's CPU priority: under contention it goes first (``nice``, SPEC 7.6).

A router shares its machine with whatever runs there: sinks, a scheduler, agents, a fleet
simulator. Its agents give up on it after ``liveness`` (3) heartbeats without an answer and
reconnect, and a reconnection costs the router more than the heartbeats it replaces: a
router held back by its neighbours answers late, its agents reconnect, it falls further
behind. On a 2-core machine running 10,000 simulated agents at 1 s heartbeats beside the
sinks, a router with an equal share never attached the fleet (1,152 to 2,891 agents after
60 s, 60,000 to 110,000 answers to connections already gone); with its share raised by
``nice: -10``, all 10,000 attached in 15 s (bench/RESULTS.md). The daemons that keep a
cluster's heartbeats (corosync, keepalived) raise their priority for the same reason.

Once bound, the router lowers the nice value of each of its threads (its own and libzmq's
I/O thread) to ``nice`` and, when it leads its own session (as a daemon, the demo or a test
starts it; Linux's autogroup then weighs sessions, not processes, against each other), its
session's. Lowering needs root or CAP_SYS_NICE: without it one warning says so and the
router runs as it is. Its systemd unit says ``Nice=`` (and ``CPUWeight=``, the same weight
among the machine's services) itself (:mod:`fleetwatch.cli.units`). ``nice: 0`` leaves the
priority alone.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

AUTOGROUP = "/proc/self/autogroup"


def cpu_weight(nice: int) -> int:
    """``CPUWeight=`` for a unit as heavy as a process at ``nice`` among ones at 0 (the
    kernel's weights: about 1.25 times per step; 100 is systemd's default)."""
    return max(1, min(10000, round(100 * 1.25 ** -nice)))


def threads() -> list[int]:
    """This process's threads (Linux sets a nice value per thread), or itself."""
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return [0]


def apply(nice: int, autogroup: str = AUTOGROUP) -> str:
    """Lower this process's nice value (and its session's, when it leads one) to ``nice``;
    a line saying what was done. Never raises: a router runs whatever its priority."""
    if nice == 0:
        return "priority left as it is (nice: 0)"
    try:
        for tid in threads():
            if os.getpriority(os.PRIO_PROCESS, tid) > nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
    except OSError as e:
        log.warning("cannot raise the router's CPU priority to nice %d (%s): under CPU "
                    "contention it may answer its agents late and set off reconnections; "
                    "run it as root or with CAP_SYS_NICE (its systemd unit sets Nice= "
                    "itself), or set nice: 0 to keep the priority it was given", nice,
                    e.strerror or e)
        return f"priority not raised: {e.strerror or e}"
    said = f"nice {nice}"
    if os.getsid(0) == os.getpid() and os.path.exists(autogroup):
        try:
            with open(autogroup, "w") as f:
                f.write(f"{nice}\n")
            said += ", its session's too"
        except OSError as e:       # (a unit without CAP_SYS_NICE: its Nice= is what counts)
            log.debug("cannot set the session's nice value: %s", e)
    log.info("CPU priority: %s (nice in the config: under contention the router goes first)",
             said)
    return said
