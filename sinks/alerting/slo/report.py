"""The SLOs as ``fleetwatch slo`` and the console read them back: readers of a connection
(``fn(conn, **kwargs)``, as :class:`fleetwatch.store.reader.Reader` runs them), over the
tables the alerting sinks keep (:mod:`sinks.alerting.slo.store`).

:func:`listed` gives each SLO the sinks declared with its state (``ok``, ``ticket``,
``page``); :func:`report` adds, read now from the buckets: the SLI and the error budget
left over the window, the burn rates over 5 min, 30 min, 1 h and 6 h, and the worst
offenders (the hosts that spent most of the budget; of an SLO ``per_host``, each one's own
budget left and state).
"""

from __future__ import annotations

from sqlalchemy import select

from fleetwatch.store import schema
from fleetwatch.store.db import has_tables
from sinks.alerting.series.config import Selector
from sinks.alerting.slo import rules, store
from sinks.alerting.slo.config import RULE, Slo

#: the worst offenders a report lists by default
OFFENDERS = 5
TABLES = ("slos", "slo_state", "slo_buckets")


def slo_of(row) -> Slo:
    """The :class:`Slo` a ``slos`` row declares."""
    patterns = tuple((RULE + p) if row.source == "rules" else p for p in row.patterns or ())
    return Slo(row.name, row.objective, row.window_seconds, row.source, patterns,
               Selector(tuple(row.hosts or ("*",))), bool(row.per_host), row.downtime,
               row.sli)


def _rows(conn, names: list[str] | None):
    t = schema.slos
    stmt = select(t).order_by(t.c.name)
    if names:
        stmt = stmt.where(t.c.name.in_(names))
    return list(conn.execute(stmt))


def _entry(row, state) -> dict:
    slo = slo_of(row)
    at = rules.factors(slo)
    return {"name": row.name, "objective": row.objective,
            "window": rules.duration(row.window_seconds),
            "window_seconds": row.window_seconds, "source": row.source,
            row.source: list(row.patterns or ()), "hosts": list(row.hosts or ()),
            "per_host": bool(row.per_host), "downtime_counts_as": row.downtime,
            "measures": row.sli, "configured": row.configured,
            "state": state.level if state is not None else None,
            "since": state.since if state is not None else None,
            "told": state.told if state is not None else None,
            "judged": state.updated if state is not None and state.updated else None,
            "page_at": round(at[rules.PAGE], 4), "ticket_at": round(at[rules.TICKET], 4)}


def listed(conn, names: list[str] | None = None) -> list[dict]:
    """Each SLO an alerting sink declared (``names``: those only), by name, with its state
    as last judged (None: not judged yet)."""
    if not has_tables(conn, *TABLES):
        return []
    t = schema.slo_state
    states = {r.slo: r for r in conn.execute(select(t).where(t.c.uuid == ""))}
    return [_entry(row, states.get(row.name)) for row in _rows(conn, names)]


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


def report(conn, now: float, names: list[str] | None = None,
           offenders: int = OFFENDERS) -> list[dict]:
    """:func:`listed`, each with its figures read now: ``sli`` and ``budget_left``
    (percent, None without events), ``good``, ``bad``, ``excluded`` over the window, the
    ``burn`` rates, ``offenders`` (at most ``offenders``: uuid, hostname, good, bad,
    ``spent``: the percent of the SLO's budget its bad events took; per host also its own
    ``budget_left`` and ``state``) and, per host, how many hosts are ``alerting``."""
    if not has_tables(conn, *TABLES):
        return []
    out = []
    t = schema.slo_state
    states = {(r.slo, r.uuid): r for r in conn.execute(select(t))}
    for row in _rows(conn, names):
        slo = slo_of(row)
        entry = _entry(row, states.get((row.name, "")))
        whole = store.window_tally(conn, slo, now)
        burns = {w: rules.burn(tally, slo) for w, tally in
                 store.burn_tallies(conn, slo.name, now)[""].items()}
        worst = store.host_tallies(conn, slo, now, limit=offenders) if offenders else []
        names_of = _hostnames(conn, [u for u, _ in worst])
        listed_hosts = []
        for uuid, tally in worst:
            host = {"uuid": uuid, "hostname": names_of.get(uuid), "good": tally.good,
                    "bad": tally.bad, "excluded": tally.excluded,
                    "spent": _rounded(rules.spent_share(tally.bad, whole, slo), 3)}
            if slo.per_host:
                own = states.get((row.name, uuid))
                host["budget_left"] = _rounded(rules.budget_left(tally, slo), 3)
                host["state"] = own.level if own is not None else rules.OK
            listed_hosts.append(host)
        entry.update({
            "sli": _rounded(rules.sli(whole), 5),
            "budget_left": _rounded(rules.budget_left(whole, slo), 3),
            "good": whole.good, "bad": whole.bad, "excluded": whole.excluded,
            "burn": {w: _rounded(b) for w, b in burns.items()},
            "offenders": listed_hosts})
        if slo.per_host:
            entry["alerting"] = sum(1 for (name, uuid), s in states.items()
                                    if name == row.name and uuid and s.level != rules.OK)
        out.append(entry)
    return out


def _hostnames(conn, uuids: list[str]) -> dict[str, str | None]:
    if not uuids:
        return {}
    t = schema.agents
    return dict(conn.execute(select(t.c.uuid, t.c.hostname).where(t.c.uuid.in_(uuids))).all())
