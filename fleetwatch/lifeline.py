"""Children that die with their parent: Linux's parent-death signal.

``subprocess.Popen(..., preexec_fn=die_with_parent())`` asks the kernel, in the child
between fork and exec, to send it ``sig`` (SIGTERM by default: a JVM runs its shutdown
hooks) when the thread that started it ends, however it ends (SIGKILL too); the setting
survives exec, so a launcher script that execs its real program (Spark's ``spark-class``)
passes it on. A parent that died before the child asked is caught by comparing the child's
parent with the pid it was started from. Elsewhere than Linux it does nothing.

Only the parent *thread* counts: start such children from a thread that lives as long as
the process (the main thread).
"""

from __future__ import annotations

import ctypes
import os
import signal

PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM):
    """A ``preexec_fn`` giving the child ``sig`` when this process (its starting thread)
    ends."""
    parent = os.getpid()

    def preexec() -> None:
        try:
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, sig)
        except (OSError, AttributeError):      # no prctl: not Linux
            return
        if os.getppid() != parent:              # the parent died before prctl took
            os.kill(os.getpid(), sig)
    return preexec
