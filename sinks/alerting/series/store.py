"""The ``rules`` table: the rules on series a sink's config declares, for the console.

A sink writes its rules at its start and at each reload (:func:`declare`): the table then
holds that config's rules, each with the sink's name and the time. Alerting sinks of one
fleet share one config; should two differ, the last to start or reload is what the console
shows (their checks are what each judges).
"""

from __future__ import annotations

from sqlalchemy import delete, insert

from fleetwatch.store import schema


def declare(conn, specs, sink: str, now: float) -> None:
    """Replace the declared rules by ``specs`` (:class:`sinks.alerting.series.config.
    RuleSpec`, validated) of sink ``sink``."""
    t = schema.rules
    conn.execute(delete(t))
    rows = []
    for spec in specs:
        rule = spec.compiled()
        rows.append({
            "name": rule.name, "expr": rule.text, "hosts": list(rule.hosts.terms),
            "warning": str(rule.warning) if rule.warning is not None else "",
            "critical": str(rule.critical) if rule.critical is not None else "",
            "hold": rule.hold, "keep_firing": rule.keep_firing,
            "stale_after": rule.stale_after, "max_attempts": rule.max_attempts,
            "sink": sink[:255], "configured": now})
    if rows:
        conn.execute(insert(t), rows)
