"""SLOs at work in the alerting sink: events counted, burn rates judged, alerts told.

Two calls, each acting on a transaction the sink runs (a :class:`sinks.alerting.port.Port`):

- :func:`count`, in the transaction of a batch's results (through the port, from
  :meth:`sinks.alerting.evaluation.Evaluation.results`), with each applied result: those of
  an SLO's checks (or rules) on its hosts become events, added to the ``slo_buckets`` of
  their span in one statement for the whole batch (an upsert that adds: ``ON CONFLICT DO
  UPDATE SET good = good + excluded.good``, the same SQL on SQLite and PostgreSQL, rows in
  key order so that two sinks never deadlock on them). A ``results`` SLI counts each
  result (good when OK), a ``time`` SLI the seconds since the check's previous result in
  the state that result said (at most :func:`sinks.alerting.slo.config.gap`: the rest is
  time nobody judged the check). A result in a downtime counts as ``downtime_counts_as``
  says (the downtime judged at the result's arrival).
- :func:`tick`, from the sink's tick, in a transaction of its own: each SLO due (judged
  ``rule_interval`` ago or more) has its own ``slo_state`` row locked (PostgreSQL: FOR
  UPDATE; SQLite's writers take turns) and judged again under the lock, so of two sinks one
  judges it; burn rates over 5 min, 30 min, 1 h and 6 h (:mod:`sinks.alerting.slo.rules`),
  its level, an alert through :meth:`Port.deliver` (silences and downtimes hold it, check
  ``slo:NAME``) when the level changed from the one told; then, for an SLO ``per_host``,
  each host burning now or not ok before; then the buckets no window needs are deleted.

**Buckets** (bounded, whatever the traffic; ``uuid`` "" is the SLO as a whole):

========  ====================  ======================  =================================
width     of                    kept                    for
========  ====================  ======================  =================================
1 min     the SLO               6 h                     its burn rates
1 h       the SLO               its window              its SLI and budget
5 min     each host (per_host)  6 h                     a host's burn rates
1 h / 1 d each host             its window              a host's budget, worst offenders
========  ====================  ======================  =================================

A host's window is read by the hour for windows up to 7 days, by the day beyond. So an SLO
has at most 361 + 721 rows of its own and, per host, 73 (per_host) + 169 (7 days) or 31
(30 days): 1,000 hosts of a 30-day SLO per host, about 105,000 rows. A window is read to
whole buckets (:func:`sinks.alerting.slo.rules.since`): the 5-minute burn rate is over 5 to
6 minutes, a host's over 5 to 10.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import case, delete, func, insert, select, text, update

from fleetwatch.store import db, schema
from fleetwatch.store.driver import Prepared
from sinks.alerting import locks
from sinks.alerting.checks.rules import OK as CHECK_OK
from sinks.alerting.checks.rules import problem_since
from sinks.alerting.downtimes.rules import covering
from sinks.alerting.silences.rules import Subject
from sinks.alerting.slo import config as sloconfig
from sinks.alerting.slo import rules
from sinks.alerting.slo.config import Host, Slo

if TYPE_CHECKING:
    from sinks.alerting.port import Port

log = logging.getLogger(__name__)

#: the buckets' widths (seconds): the SLO's fine and coarse, a host's fine
FINE, COARSE, HOST_FINE = 60, 3600, 300
#: a host's coarse buckets: by the hour for windows up to this long, else by the day
HOURLY_UP_TO = 7 * 86400.0
#: an SLO no sink has declared for this long is forgotten (its rows deleted, a told alert
#: resolved)
FORGET_AFTER = 86400.0
#: hosts whose figures one statement reads
CHUNK = 500
#: a bucket row's columns, as :func:`add` writes them
COLUMNS = ("slo", "uuid", "width", "start", "good", "bad", "excluded")


def host_width(slo: Slo) -> int:
    """The width of a host's coarse buckets."""
    return COARSE if slo.window <= HOURLY_UP_TO else 86400


def widths(slo: Slo) -> list[tuple[bool, int]]:
    """(of a host?, width) of each kind of bucket ``slo`` keeps."""
    out = [(False, FINE), (False, COARSE), (True, host_width(slo))]
    if slo.per_host:
        out.append((True, HOST_FINE))
    return out


def kept(slo: Slo, width: int) -> float:
    """Seconds a bucket of ``width`` is kept after its start."""
    return (rules.LONGEST if width in (FINE, HOST_FINE) else slo.window) + width


# ---------------------------------------------------------------- counting

@functools.lru_cache(maxsize=16)
def _add(n: int) -> Prepared:
    """The upsert that adds ``n`` spans' events to their buckets, built once per ``n`` and
    run on the driver's cursor (:mod:`fleetwatch.store.driver`; it is on the results' path):
    the same SQL on SQLite 3.24+ and PostgreSQL."""
    values = ", ".join("(" + ", ".join(f":{c}_{i}" for c in COLUMNS) + ")" for i in range(n))
    return Prepared(text(
        f"INSERT INTO slo_buckets ({', '.join(COLUMNS)}) VALUES {values} "
        "ON CONFLICT (slo, uuid, width, start) DO UPDATE SET "
        "good = slo_buckets.good + excluded.good, bad = slo_buckets.bad + excluded.bad, "
        "excluded = slo_buckets.excluded + excluded.excluded"))


def add(conn, adds: dict[tuple, list[float]]) -> None:
    """Add ``adds`` ((slo, uuid, width, start) -> [good, bad, excluded]) to their buckets,
    in key order (two sinks adding to the same buckets never deadlock), a few statements
    for them all."""
    rows = [{"slo": k[0], "uuid": k[1], "width": k[2], "start": k[3], "good": v[0],
             "bad": v[1], "excluded": v[2]} for k, v in sorted(adds.items())]
    for chunk in db._chunks(rows):        # (the chunks of db.insert_many: 64, 32, ... rows)
        _add(len(chunk)).execute(conn, db._numbered(chunk, COLUMNS))


def hosts(conn, uuids: Iterable[str]) -> dict[str, Host]:
    """What the registry knows of the agents ``uuids``, as a selector reads it."""
    t = schema.agents
    uuids = sorted(set(uuids))
    out: dict[str, Host] = {}
    for i in range(0, len(uuids), CHUNK):
        for r in conn.execute(select(t.c.uuid, t.c.hostname, t.c.site, t.c.parents)
                              .where(t.c.uuid.in_(uuids[i:i + CHUNK]))):
            out[r.uuid] = Host.of(r)
    return out


def wanted(config) -> bool:
    """Whether an alerting config has SLOs (the sink's tick runs :func:`tick` then)."""
    return bool(sloconfig.of(config))


def count(port: Port, applied: list, slos: list[Slo] | None = None) -> int:
    """Count the events of ``applied`` results (each ``(key, hostname, previous, new,
    row)``: the check's ``(uuid, plugin)``, its host's name or None, the
    :class:`~sinks.alerting.checks.rules.CheckState` before and after the result, its
    ``checks`` row or None) for the SLOs (``slos``, else the port's config's) whose checks
    and hosts they are; how many bucket rows were added to. A result that does not move the
    check's time (a stale one, :mod:`sinks.alerting.freshness`) counts at ``now``, and adds
    no span of time."""
    slos = sloconfig.of(port.config) if slos is None else slos
    if not slos or not applied:
        return 0
    now = port.now
    mine: dict[str, list[Slo]] = {}
    picked = []
    for item in applied:
        plugin = item[0][1]
        if plugin not in mine:
            mine[plugin] = [s for s in slos if s.counts(plugin)]
        if mine[plugin]:
            picked.append(item)
    if not picked:
        return 0
    downtimes = port.downtimes() if any(s.downtime != "bad" for s in slos) else []
    # what the registry knows of the hosts: the sites and parents only when a selector
    # names some, the names (the sink's lookups, kept) when a selector or a downtime needs
    # them and the caller did not give them
    uuids = {item[0][0] for item in picked}
    terms = {t for s in slos for t in s.hosts.terms}
    known = hosts(port.conn, uuids) if any(":" in t for t in terms) else {}
    unnamed = {item[0][0] for item in picked if item[1] is None} - set(known)
    names = port.hostnames(unnamed) if unnamed and (downtimes or terms != {"*"}) else {}
    longest = sloconfig.gap(port.config)
    adds: dict[tuple, list[float]] = {}

    def event(slo: Slo, uuid: str, at: float, seconds: float | None, how: int) -> None:
        for of_host, width in widths(slo):
            first = at - (seconds or 0.0)
            if now - first > kept(slo, width):
                continue        # (a result older than the buckets kept)
            parts = [(rules.start_of(at, width), 1.0)] if seconds is None \
                else rules.spans(first, at, width)
            for start, amount in parts:
                row = adds.setdefault((slo.name, uuid if of_host else "", width, start),
                                      [0.0, 0.0, 0.0])
                row[how] += amount

    for (uuid, plugin), hostname, before, after, row in picked:
        host = known.get(uuid) or Host(hostname or names.get(uuid) or uuid)
        for slo in mine[plugin]:
            if not slo.hosts(host):
                continue
            at = after.last_result
            moved = at is not None and (before.last_result is None
                                        or at > before.last_result)
            if slo.sli == "results":
                # (a stale result does not move the check's time: it counts now)
                at, status, seconds = min(at, now) if moved else now, after.status, None
            else:
                if not moved or before.last_result is None:
                    continue    # (its first result, or a stale one: no span before it)
                at = min(at, now)
                status, seconds = before.status, min(at - before.last_result, longest)
            how = 0 if status == CHECK_OK else 1
            if slo.downtime != "bad" and downtimes and covering(
                    downtimes, Subject(uuid, host.hostname, plugin), now,
                    problem_since(after) or now, port.tz, port.ancestors) is not None:
                how = 0 if slo.downtime == "good" else 2
            event(slo, uuid, at, seconds, how)
            port.counts[f"slo_{('good', 'bad', 'excluded')[how]}"] += 1
    add(port.conn, adds)
    return len(adds)


# ---------------------------------------------------------------- reading the buckets

def _sums(t, width: int, edges: dict[str, float]):
    """SUM(good), SUM(bad), SUM(excluded) of the buckets of ``width`` after each edge."""
    cols = []
    for name, after in edges.items():
        for what in ("good", "bad", "excluded"):
            cols.append(func.coalesce(func.sum(case((t.c.start > after, t.c[what]),
                                                    else_=0.0)), 0.0).label(f"{what}_{name}"))
    return cols


def _tallies(row, names: Iterable[str]) -> dict[str, rules.Tally]:
    m = row._mapping
    return {n: rules.Tally(float(m[f"good_{n}"]), float(m[f"bad_{n}"]),
                           float(m[f"excluded_{n}"])) for n in names}


def burn_tallies(conn, slo_name: str, now: float, uuids: list[str] | None = None
                 ) -> dict[str, dict[str, rules.Tally]]:
    """The events of each burn-rate window (:data:`sinks.alerting.slo.rules.WINDOWS`): of
    the SLO (``uuids`` None: key "") or of each host of ``uuids`` that has any."""
    t = schema.slo_buckets
    width = FINE if uuids is None else HOST_FINE
    edges = {n: rules.since(now, w, width) for n, w in rules.WINDOWS.items()}
    oldest = min(edges.values())
    where = [t.c.slo == slo_name, t.c.width == width, t.c.start > oldest]
    if uuids is None:
        row = conn.execute(select(*_sums(t, width, edges)).where(t.c.uuid == "", *where)) \
            .first()
        return {"": _tallies(row, edges)}
    out = {}
    for i in range(0, len(uuids), CHUNK):
        for row in conn.execute(select(t.c.uuid, *_sums(t, width, edges))
                                .where(t.c.uuid.in_(uuids[i:i + CHUNK]), *where)
                                .group_by(t.c.uuid)):
            out[row.uuid] = _tallies(row, edges)
    return out


def window_tally(conn, slo: Slo, now: float) -> rules.Tally:
    """The SLO's events over its window (to the hour)."""
    t = schema.slo_buckets
    row = conn.execute(select(*_sums(t, COARSE, {"w": rules.since(now, slo.window, COARSE)}))
                       .where(t.c.slo == slo.name, t.c.uuid == "",
                              t.c.width == COARSE)).first()
    return _tallies(row, ["w"])["w"]


def host_tallies(conn, slo: Slo, now: float, uuids: list[str] | None = None,
                 limit: int | None = None) -> list[tuple[str, rules.Tally]]:
    """(uuid, its events over the window) of the hosts ``uuids`` (None: every host with
    events), the most bad first, at most ``limit``."""
    t = schema.slo_buckets
    width = host_width(slo)
    after = rules.since(now, slo.window, width)
    bad = func.sum(t.c.bad)
    stmt = select(t.c.uuid, func.sum(t.c.good), bad, func.sum(t.c.excluded)).where(
        t.c.slo == slo.name, t.c.uuid != "", t.c.width == width, t.c.start > after) \
        .group_by(t.c.uuid).order_by(bad.desc(), t.c.uuid)
    if uuids is not None:
        stmt = stmt.where(t.c.uuid.in_(uuids))
    if limit is not None:
        stmt = stmt.limit(limit)
    return [(r[0], rules.Tally(float(r[1]), float(r[2]), float(r[3])))
            for r in conn.execute(stmt)]


def _burning(conn, slo: Slo, now: float) -> list[str]:
    """The hosts of ``slo`` with a bad event in the last 30 minutes: the only ones that may
    be burning fast enough to alert (both levels need their short window burning)."""
    t = schema.slo_buckets
    after = rules.since(now, rules.WINDOWS["30m"], HOST_FINE)
    return [r[0] for r in conn.execute(
        select(t.c.uuid).where(t.c.slo == slo.name, t.c.width == HOST_FINE,
                               t.c.start > after, t.c.uuid != "")
        .group_by(t.c.uuid).having(func.sum(t.c.bad) > 0))]


# ---------------------------------------------------------------- the tick

def _state(row) -> rules.State:
    return rules.State(row.level, row.since, row.told, row.told_at)


def _placeholder(now: float):
    return lambda key: {"slo": key[0], "uuid": key[1], "level": rules.OK, "since": now,
                        "told": rules.OK, "told_at": None, "burn": None, "updated": 0.0}


def declare(conn, slos: list[Slo], now: float) -> None:
    """The ``slos`` rows of ``slos``, as this sink's config says them, configured now (in
    name order: two sinks declaring at once never deadlock)."""
    db.upsert_many(conn, schema.slos, [{**slo.spec(), "configured": now}
                                       for slo in sorted(slos, key=lambda s: s.name)],
                   update=[c.name for c in schema.slos.columns if c.name != "name"])


def due(conn, slos: list[Slo], now: float, every: float) -> list[Slo]:
    """The SLOs not judged for ``every`` seconds (their own state row's ``updated``)."""
    t = schema.slo_state
    judged = dict(conn.execute(select(t.c.slo, t.c.updated).where(t.c.uuid == "")).all())
    return [s for s in slos if now - judged.get(s.name, 0.0) >= every]


def tick(port: Port, slos: list[Slo] | None = None) -> None:
    """Judge each SLO due (:func:`due`), its hosts when ``per_host``, and tell what
    changed; forget the SLOs no sink has declared for :data:`FORGET_AFTER`."""
    slos = sloconfig.of(port.config) if slos is None else slos
    if not slos:
        return
    conn, now, every = port.conn, port.now, sloconfig.interval(port.config)
    waiting = due(conn, slos, now, every)
    if not waiting:
        return
    declare(conn, waiting, now)
    for slo in sorted(waiting, key=lambda s: s.name):
        (row,) = locks.lock(conn, schema.slo_state, ("slo", "uuid"), [(slo.name, "")],
                            _placeholder(now), None).values()
        if now - row.updated < every:
            continue                    # another sink judged it meanwhile
        judge(port, slo, row)
        port.counts["slo_judged"] += 1
    forget(port, [s.name for s in slos])


def judge(port: Port, slo: Slo, row) -> None:
    """``slo`` judged now, its state ``row`` locked: the SLO's level, then its hosts', an
    alert for each change not told; old buckets deleted."""
    conn, now = port.conn, port.now
    burns = {w: rules.burn(t, slo) for w, t in burn_tallies(conn, slo.name, now)[""].items()}
    state = _tell(port, slo, rules.step(_state(row), rules.judge(burns, slo), now), burns,
                  "", None)
    _save(conn, slo.name, "", state, burns, now)
    if slo.per_host:
        _judge_hosts(port, slo)
    purge(conn, slo, now)


def _tell(port: Port, slo: Slo, state: rules.State, burns: dict, uuid: str,
          hostname: str | None) -> rules.State:
    """``state`` once its owed alert (if any) went out; unchanged when something held it
    back (it is raised again at the next judgement)."""
    if not rules.owed(state):
        return state
    now = port.now
    if uuid:
        (_, tally), = host_tallies(port.conn, slo, now, [uuid]) or [(uuid, rules.Tally())]
    else:
        tally = window_tally(port.conn, slo, now)
    event = rules.event(slo, state, burns, now, uuid, hostname, rules.budget_left(tally, slo))
    if port.deliver(event, slo.check, state.since if state.level != rules.OK else None):
        port.counts[f"slo_{state.level}"] += 1
        return rules.told(state, now)
    return state


def _save(conn, slo_name: str, uuid: str, state: rules.State, burns: dict,
          now: float) -> None:
    t = schema.slo_state
    conn.execute(update(t).where(t.c.slo == slo_name, t.c.uuid == uuid).values(
        level=state.level, since=state.since, told=state.told, told_at=state.told_at,
        burn={w: None if b is None else round(b, 4) for w, b in burns.items()},
        updated=now))


def _judge_hosts(port: Port, slo: Slo) -> None:
    """Each host of ``slo`` burning now (:func:`_burning`) or not ok before: its level, an
    alert for a change not told. A host's row is kept while it is not ok (or not told so)."""
    conn, now = port.conn, port.now
    t = schema.slo_state
    rows = {r.uuid: r for r in conn.execute(
        select(t).where(t.c.slo == slo.name, t.c.uuid != "").order_by(t.c.uuid))}
    uuids = sorted(set(rows) | set(_burning(conn, slo, now)))
    if not uuids:
        return
    tallies = burn_tallies(conn, slo.name, now, uuids)
    names = port.hostnames(uuids)
    for uuid in uuids:
        burns = {w: rules.burn(tally, slo) for w, tally in tallies.get(uuid, {}).items()} \
            or {w: None for w in rules.WINDOWS}
        before = _state(rows[uuid]) if uuid in rows else rules.State(since=now)
        state = _tell(port, slo, rules.step(before, rules.judge(burns, slo), now), burns,
                      uuid, names.get(uuid))
        if state.level == rules.OK and state.told == rules.OK:
            if uuid in rows:
                conn.execute(delete(t).where(t.c.slo == slo.name, t.c.uuid == uuid))
            continue
        if uuid not in rows:
            conn.execute(insert(t).values(slo=slo.name, uuid=uuid, level=state.level,
                                          since=state.since, told=state.told,
                                          told_at=state.told_at, burn=None, updated=now))
        _save(conn, slo.name, uuid, state, burns, now)


def purge(conn, slo: Slo, now: float) -> int:
    """Delete ``slo``'s buckets no window needs any more (and those of a width it no longer
    keeps: its window or ``per_host`` changed); how many."""
    t = schema.slo_buckets
    gone = 0
    used = {w for _, w in widths(slo)}
    for width in sorted(used):
        gone += conn.execute(delete(t).where(t.c.slo == slo.name, t.c.width == width,
                                             t.c.start < now - kept(slo, width))).rowcount
    gone += conn.execute(delete(t).where(t.c.slo == slo.name,
                                         t.c.width.not_in(sorted(used)))).rowcount
    return gone


def forget(port: Port, names: list[str]) -> None:
    """The SLOs in the ``slos`` table that no sink declared for :data:`FORGET_AFTER`
    (gone from every config): a told alert resolved ("closed"), their rows deleted."""
    conn, now = port.conn, port.now
    t = schema.slos
    old = [r for r in conn.execute(select(t).where(
        t.c.configured < now - FORGET_AFTER, t.c.name.not_in(names)).order_by(t.c.name))]
    for slo in old:
        states = schema.slo_state
        for row in conn.execute(select(states).where(
                states.c.slo == slo.name, states.c.told != rules.OK).with_for_update()):
            key = f"{row.uuid}/slo/{slo.name}" if row.uuid else f"slo/{slo.name}"
            summary = "closed: the SLO is in no alerting sink's config any more"
            port.deliver({"key": key, "kind": "slo", "action": "resolve", "severity": "ok",
                          "uuid": row.uuid, "hostname": port.hostname(row.uuid)
                          if row.uuid else "all hosts", "check": sloconfig.PREFIX + slo.name,
                          "status": 0, "summary": summary, "text": summary, "created": now},
                         sloconfig.PREFIX + slo.name)
        for table in (schema.slo_buckets, schema.slo_state):
            conn.execute(delete(table).where(table.c.slo == slo.name))
        conn.execute(delete(t).where(t.c.name == slo.name))
        log.info("SLO %s forgotten: in no alerting sink's config since %s", slo.name,
                 slo.configured)

