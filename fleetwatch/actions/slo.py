"""The SLOs as an operator reads them, for ``fleetwatch slo`` and the console alike.

The alerting sinks declare their configs' SLOs in the state database and keep each one's
events and alert state (:mod:`sinks.alerting.slo.store`); :func:`listed` and
:func:`report` read them back (:mod:`sinks.alerting.slo.report`), and :func:`document`
makes them what ``slo list --json`` and ``slo report --json`` print and ``GET
/api/v1/slos`` answers: times in ISO 8601.
"""

from __future__ import annotations

from fleetwatch.actions.database import Unavailable, reading
from fleetwatch.display import iso

__all__ = ["Unavailable", "amount", "document", "listed", "percent", "rate", "report"]

TIMES = ("configured", "since", "judged")


def listed(state_url: str, names: list[str] | None = None, reader=None) -> list[dict]:
    """Each SLO a sink declared (``names``: those only) with its state."""
    from sinks.alerting.slo import report as reports
    with reading(state_url, reader) as (reader, _):
        return reader.read(reports.listed, names=names) or []


def report(state_url: str, now: float, names: list[str] | None = None,
           offenders: int = 5, reader=None) -> list[dict]:
    """Each SLO with its SLI, budget left, burn rates, state and worst offenders, now."""
    from sinks.alerting.slo import report as reports
    with reading(state_url, reader) as (reader, _):
        return reader.read(reports.report, now=now, names=names, offenders=offenders) or []


def document(slos: list[dict]) -> dict:
    """``{"slos": [...], "alerting": N}``: N of them paging or ticketing now."""
    return {"slos": [{**s, **{k: iso(s[k]) for k in TIMES if k in s}} for s in slos],
            "alerting": sum(1 for s in slos if s.get("state") in ("ticket", "page"))}


def percent(value: float | None, digits: int = 3) -> str:
    """``99.912%``, ``-12.5%``; ``-`` for None (no events)."""
    if value is None:
        return "-"
    text = f"{value:.{digits}f}".rstrip("0").rstrip(".") if digits else f"{value:.0f}"
    return f"{text}%"


def rate(value: float | None) -> str:
    """A burn rate: ``14.4x``; ``-`` for None (no events)."""
    return "-" if value is None else f"{value:.1f}x"


def amount(value: float, measures: str) -> str:
    """A count of results (``120``), or of seconds as a duration (``2h 5m``)."""
    if measures == "time":
        from sinks.alerting.slo.rules import duration
        return duration(value)
    return f"{value:.0f}"
