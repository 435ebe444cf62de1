"""An SLO's arithmetic and its alert state machine. Pure: no SQL, no clock of its own.

**Events.** An SLI counts events, each good or bad (or excluded: neither): a check result
(``results``: good when OK), or a second (``time``: the seconds between two results of a
check or rule, in the state the first one said). ``good + bad`` is the total.

**Error budget.** An objective of 99.9 % allows ``allowed = 0.1 %`` of the events to be bad
over the window. The budget left is ``1 - bad / (allowed * total)`` (in percent; below 0
once spent); the SLI is ``good / total``.

**Burn rate.** Over a span, ``(bad / total) / allowed``: 1 spends the budget in exactly the
window, 14.4 a 30-day budget in 50 hours. The alerts are the SRE workbook's multi-window,
multi-burn-rate ones (chapter 5, "Alerting on SLOs", recommendation 6), as Sloth and Pyrra
make them:

- **page** (critical) when the burn rate over 1 h AND over 5 min are both at least the fast
  burn: 2 % of the budget spent in an hour (14.4 for a 30-day window);
- **ticket** (warning) when over 6 h AND over 30 min both are at least the slow burn: 5 % of
  the budget in 6 hours (6 for a 30-day window);
- **ok** otherwise. The short window makes an alert end soon after the burning stopped.

The factors scale with the window as Sloth's do (``0.02 * window / 1h``): a 7-day window
pages at 3.36. A span without events burns nothing.

**State.** Each SLO (and each host of one ``per_host``) has a state row: its level
(``ok``, ``ticket``, ``page``) since when, and the level last told. :func:`step` says what
to tell: a change of level alerts (a trigger, or a resolve back to ok); an alert held back
(a silence, a downtime) is not told, so it is raised again at the next judgement while it
is still true, as a check's is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from fleetwatch.display import iso
from sinks.alerting.slo.config import Slo

#: the burn-rate windows: name -> seconds
WINDOWS = {"5m": 300.0, "30m": 1800.0, "1h": 3600.0, "6h": 21600.0}
#: the longest of them: how long the fine buckets are kept
LONGEST = max(WINDOWS.values())
OK, TICKET, PAGE = "ok", "ticket", "page"
LEVELS = (OK, TICKET, PAGE)
#: a level's alert: severity and status (a check's: 0 OK, 1 WARNING, 2 CRITICAL)
SEVERITY = {OK: "ok", TICKET: "warning", PAGE: "critical"}
STATUS = {OK: 0, TICKET: 1, PAGE: 2}
#: the share of the budget that pages when spent within 1 h, and tickets within 6 h
PAGE_SPENT, TICKET_SPENT = 0.02, 0.05
#: (long window, short window) of each alerting level
PAIRS = {PAGE: ("1h", "5m"), TICKET: ("6h", "30m")}


@dataclass(frozen=True)
class Tally:
    """Events of a span: good, bad, excluded (counts, or seconds)."""

    good: float = 0.0
    bad: float = 0.0
    excluded: float = 0.0

    @property
    def total(self) -> float:
        return self.good + self.bad

    def __add__(self, other: Tally) -> Tally:
        return Tally(self.good + other.good, self.bad + other.bad,
                     self.excluded + other.excluded)


def sli(tally: Tally) -> float | None:
    """The percent of good events, None without any."""
    return 100.0 * tally.good / tally.total if tally.total > 0 else None


def burn(tally: Tally, slo: Slo) -> float | None:
    """The burn rate of ``tally``'s span, None without events."""
    if tally.total <= 0:
        return None
    return (tally.bad / tally.total) / slo.allowed


def budget_left(tally: Tally, slo: Slo) -> float | None:
    """The percent of the window's error budget not spent (negative: overspent), None
    without events."""
    if tally.total <= 0:
        return None
    return 100.0 * (1.0 - tally.bad / (slo.allowed * tally.total))


def spent_share(bad: float, whole: Tally, slo: Slo) -> float | None:
    """The percent of the SLO's whole budget (``whole``'s) that ``bad`` events took: a host's
    share, what the worst offenders are ranked by."""
    if whole.total <= 0:
        return None
    return 100.0 * bad / (slo.allowed * whole.total)


def factors(slo: Slo) -> dict[str, float]:
    """The burn rate at which each alerting level fires: 14.4 and 6 for a 30-day window."""
    return {PAGE: PAGE_SPENT * slo.window / WINDOWS["1h"],
            TICKET: TICKET_SPENT * slo.window / WINDOWS["6h"]}


def judge(burns: dict[str, float | None], slo: Slo) -> str:
    """The level the burn rates over :data:`WINDOWS` say."""
    at = factors(slo)
    for level in (PAGE, TICKET):
        long, short = PAIRS[level]
        if all(burns.get(w) is not None and burns[w] >= at[level] for w in (long, short)):
            return level
    return OK


# ---------------------------------------------------------------- buckets

def start_of(t: float, width: float) -> float:
    """The start of the bucket of ``width`` seconds that holds time ``t``."""
    return math.floor(t / width) * width


def spans(t0: float, t1: float, width: float) -> list[tuple[float, float]]:
    """``[t0, t1)`` cut at the buckets of ``width``: (bucket start, seconds in it)."""
    out = []
    at = t0
    while at < t1:
        start = start_of(at, width)
        end = min(start + width, t1)
        out.append((start, end - at))
        at = end
    return out


def since(now: float, window: float, width: float) -> float:
    """The buckets of ``width`` that overlap ``(now - window, now]`` start after this: a
    window is read to whole buckets, so it is between ``window`` and ``window + width``
    long."""
    return now - window - width


# ---------------------------------------------------------------- state and alerts

@dataclass(frozen=True)
class State:
    """One SLO's (or one host's of it) alert state."""

    level: str = OK           # as last judged
    since: float = 0.0        # ... since when
    told: str = OK            # the level last told (its alert went out)
    told_at: float | None = None


def step(state: State, level: str, now: float) -> State:
    """``state`` judged ``level`` at ``now``."""
    if level == state.level:
        return state
    return State(level, now, state.told, state.told_at)


def owed(state: State) -> bool:
    """Whether ``state`` has an alert to tell."""
    return state.level != state.told


def told(state: State, now: float) -> State:
    """``state`` once its alert went out."""
    return State(state.level, state.since, state.level, now)


def duration(seconds: float) -> str:
    """``30d``, ``2d 2h``, ``6h``, ``4h 10m``, ``45s``: a window or a time left, in its
    largest unit and the next, a zero part left out."""
    s = max(0, int(seconds))
    units = (("d", 86400), ("h", 3600), ("m", 60), ("s", 1))
    for i, (unit, size) in enumerate(units):
        if s >= size or unit == "s":
            text = f"{s // size}{unit}"
            if i + 1 < len(units):
                rest_unit, rest_size = units[i + 1]
                rest = s % size // rest_size
                text += f" {rest}{rest_unit}" if rest else ""
            return text
    return "0s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def rates(burns: dict[str, float | None]) -> str:
    """``5m 0.0x, 30m 2.1x, 1h 15.0x, 6h 3.2x``."""
    return ", ".join(f"{w} {_rate(burns.get(w))}" for w in WINDOWS)


def event(slo: Slo, state: State, burns: dict[str, float | None], now: float,
          uuid: str = "", hostname: str | None = None, left: float | None = None) -> dict:
    """The alert of ``state``'s level (kind ``slo``, check ``slo:NAME``), key ``slo/NAME``
    for the SLO as a whole (``uuid`` "", ``hostname`` what its hosts are:
    :attr:`Slo.where`) or ``UUID/slo/NAME`` for one host of an SLO ``per_host``. ``left``:
    the budget left, in percent, when known."""
    level = state.level
    key = f"{uuid}/slo/{slo.name}" if uuid else f"slo/{slo.name}"
    window = duration(slo.window)
    at = factors(slo)
    if level == OK:
        action = "resolve"
        summary = f"error budget no longer burning fast ({rates(burns)})"
    else:
        action = "trigger"
        long, short = PAIRS[level]
        rate = burns.get(long) or 0.0
        gone = f"; at this rate the {window} budget lasts {duration(slo.window / rate)}" \
            if rate > 0 else ""
        summary = (f"error budget burning {_rate(burns.get(long))} over {long} and "
                   f"{_rate(burns.get(short))} over {short} ({level} at {at[level]:.3g}x)"
                   f"{gone}")
    what = "results" if slo.sli == "results" else "time"
    checks = ", ".join(p[len("rule:"):] if slo.source == "rules" else p
                       for p in slo.patterns)
    lines = [f"SLO {slo.name}: {slo.objective:g}% of the {what} of {slo.source} {checks} "
             f"good over {window}, on {'host ' + (hostname or uuid) if uuid else slo.where}.",
             f"Burn rates: {rates(burns)} (page at {at[PAGE]:.3g}x over 1h and 5m, ticket "
             f"at {at[TICKET]:.3g}x over 6h and 30m)."]
    if left is not None:
        lines.append(f"Error budget left over {window}: {left:.1f}%.")
    if level != OK:
        lines.append(f"Burning since {iso(state.since)}.")
    out = {"key": key, "kind": "slo", "action": action, "severity": SEVERITY[level],
           "uuid": uuid, "hostname": (hostname or uuid) if uuid else slo.where,
           "check": slo.check, "status": STATUS[level], "summary": summary,
           "text": "\n".join(lines), "created": now}
    if action == "trigger":
        out["since"] = state.since
    return out
