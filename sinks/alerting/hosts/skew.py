"""A sender's clock against the sink's: counted, and shown as "clock skew N s".

A sender's clock decides nothing here (results are ordered by
:mod:`sinks.alerting.checks.ordering`), but one far off is a fault worth seeing: its times in every
table and page are wrong. The skew of a message is its ``ts`` minus the sink's clock when it arrived
(the relay's delay reads as a few milliseconds behind). HEARTBEATs and RESULTs further off than the
``clock_skew`` setting are counted (``clock_skewed``); an agent's skew, from its latest
heartbeat, is kept in ``host_state.clock_skew`` (whole seconds; NULL within the setting),
which ``fleetwatch status`` and the console show for that host.

Writes are only made when the value shown changes: each sink remembers what it wrote
per agent (:class:`Shown`, bounded).
"""

from __future__ import annotations

import functools

from sqlalchemy import text

#: the message types whose ``ts`` is compared with the sink's clock
TYPES = frozenset({"HEARTBEAT", "RESULT"})
#: agents whose shown skew a sink remembers, at most (then it forgets them all and
#: writes each once again)
REMEMBER_MAX = 100_000


def beyond(ts: float, now: float, threshold: float) -> int | None:
    """The skew of a message sent at ``ts`` and received at ``now``, in whole seconds, when
    it is more than ``threshold`` seconds either way (0: never); else None."""
    skew = ts - now
    if threshold <= 0 or abs(skew) <= threshold:
        return None
    return round(skew)


def counted(batch, now: float, threshold: float) -> int:
    """How many of a batch's HEARTBEATs and RESULTs are more than ``threshold`` off."""
    return sum(1 for r in batch if r.message.type in TYPES
               and beyond(r.message.ts, now, threshold) is not None)


class Shown:
    """What this sink last wrote as each agent's skew."""

    def __init__(self):
        self.written: dict[str, int | None] = {}

    def changed(self, skews: dict[str, int | None]) -> dict[str, int | None]:
        """Those of ``skews`` (uuid -> skew or None) that differ from what was written
        (an agent never written counts as changed), remembered as written."""
        if len(self.written) > REMEMBER_MAX:
            self.written.clear()
        out = {u: s for u, s in skews.items() if u not in self.written
               or self.written[u] != s}
        self.written.update(out)
        return out


def record(conn, shown: Shown, skews: dict[str, int | None]) -> int:
    """Write the agents' skews that changed (their ``host_state`` rows exist: the caller
    saved them in this transaction); return how many were written."""
    changed = shown.changed(skews)
    if changed:
        conn.execute(_update(), [{"uuid": u, "skew": s} for u, s in sorted(changed.items())])
    return len(changed)


@functools.lru_cache(maxsize=1)
def _update():
    return text("UPDATE host_state SET clock_skew = :skew WHERE uuid = :uuid AND name = ''")
