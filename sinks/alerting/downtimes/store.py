"""The SQL side of downtimes: rows added, removed and read; what they held; their ends.

``fleetwatch downtime`` adds and removes rows (:func:`add`, :func:`remove`); every alerting
sink reads those that may cover now (:func:`current`, once per transaction that has an
alert to deliver: :func:`sinks.alerting.holds.held_back`, and what one holds back is
recorded with :func:`record_held`). :func:`uncovered` is the sinks' tick pass that makes a
downtime's end (and a silence's) deliver what it held: it reads only the downtimes whose
cover may have ended since the sink's last look, and when one did, the checks whose state
is owed an alert (a HARD problem, a change or a recovery not told: what a downtime or a
silence held back) that it named. The sink's evaluation locks those as a result's would be,
judges them again on what is read under the lock (of two sinks, the second finds them
told), and delivers their owed alerts once, unless something else still covers them
(:meth:`sinks.alerting.evaluation.Evaluation.owed`). A host held DOWN needs nothing here: it stays
``pending`` and the tick's expiry pass raises it again
(:func:`sinks.alerting.hosts.store.due_hosts`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sqlalchemy import bindparam, func, select, update
from sqlalchemy.engine import Connection

from fleetwatch.logs import Throttle
from sinks.alerting.downtimes import rules as downtimes
from sinks.alerting.silences import store as silencestore
from sinks.alerting.downtimes.rules import Downtime
from sinks.alerting.silences.rules import Subject
from fleetwatch.store import schema
from fleetwatch.store.driver import Prepared

if TYPE_CHECKING:
    from sinks.alerting.port import Port

log = logging.getLogger(__name__)
_throttle = Throttle(log)

#: checks re-evaluated per tick at a downtime's end, at most (the rest at the next tick)
LIMIT = 1000


@functools.lru_cache(maxsize=1)
def _current_stmt() -> Prepared:
    """Not removed before ``since``, begun by ``now``, not over before ``since`` (a
    flexible one's cover may outlast its end by its length). Read in every transaction
    that raises an alert: on the driver's cursor (:mod:`fleetwatch.store.driver`)."""
    t = schema.downtimes
    return Prepared(select(t).where(
        t.c.start <= bindparam("now"),
        t.c.removed.is_(None) | (t.c.removed >= bindparam("since")),
        t.c.end.is_(None) | (t.c.end + func.coalesce(t.c.flexible, 0.0) > bindparam("since")),
    ).order_by(t.c.id))


def current(conn: Connection, now: float, since: float | None = None) -> list[Downtime]:
    """The downtimes that may cover a subject at ``now`` or have covered one since
    ``since`` (default ``now``); one whose schedule cannot be read (written by hand, or a
    cron schedule without croniter installed) is left out, with a warning."""
    since = now if since is None else since
    out = []
    for r in _current_stmt().execute(conn, {"now": now, "since": since}):
        d = Downtime.from_row(r)
        if d.every is not None:
            try:
                downtimes.parse_schedule(d.every, d.duration)
            except ValueError as e:
                _throttle.warning(f"schedule:{d.id}", "downtime %d ignored: %s", d.id, e)
                continue
        out.append(d)
    return out


def add(conn: Connection, d: Downtime) -> int:
    """Record ``d`` (its id is given by the database)."""
    result = conn.execute(schema.downtimes.insert().values(
        host=d.host, check_name=d.check, start=d.start, end=d.end, every=d.every,
        duration=d.duration, flexible=d.flexible, children=d.children, comment=d.comment,
        author=d.author[:255], created=d.created))
    return int(result.inserted_primary_key[0])


def remove(conn: Connection, downtime_id: int, now: float) -> bool:
    """End downtime ``downtime_id`` now; False if it was removed or over already."""
    t = schema.downtimes
    result = conn.execute(update(t).where(
        t.c.id == downtime_id, t.c.removed.is_(None),
        t.c.end.is_(None) | (t.c.end + func.coalesce(t.c.flexible, 0.0) > now))
        .values(removed=now))
    return bool(result.rowcount)


def record_held(conn: Connection, downtime: Downtime, event: dict) -> None:
    """Record that ``downtime`` held ``event`` back."""
    silencestore.record_muted(conn, schema.downtime_suppressed, {"downtime_id": downtime.id},
                            event)


def hosts_in_downtime(port: Port, uuids: Iterable[str]) -> set[str]:
    """The uuids of ``uuids`` whose host a downtime of the whole host (no check) covers
    now: :func:`sinks.alerting.freshness.rules.held` holds their checks' staleness."""
    whole = [d for d in port.downtimes() if d.check is None]
    if not whole:
        return set()
    uuids = sorted(set(uuids))
    names = port.hostnames(uuids)
    return {u for u in uuids if downtimes.covering(
        whole, Subject(u, names.get(u)), port.now, tz=port.tz,
        ancestors=port.ancestors) is not None}


# ---------------------------------------------------------------- the tick

@functools.lru_cache(maxsize=1)
def _owed_stmt():
    c = schema.check_state
    return select(c.c.uuid, c.c.plugin).where(
        (c.c.hard.is_(True) & c.c.flapping.is_(False) & (c.c.notified != c.c.hard_status))
        | (c.c.flapping != c.c.flap_notified)).order_by(c.c.uuid, c.c.plugin)


@functools.lru_cache(maxsize=1)
def _ended_silences_stmt():
    t = schema.silences
    return select(t).where(t.c.until > bindparam("since"), t.c.until <= bindparam("now"),
                           t.c.created <= bindparam("now"))


def ended_covers(conn: Connection, since: float, now: float, tz) -> list[Downtime]:
    """The downtimes (and silences, as downtimes) whose cover may have ended in
    ``(since, now]``."""
    out = [d for d in current(conn, now, since) if downtimes.ended(d, since, now, tz)]
    for r in conn.execute(_ended_silences_stmt(), {"since": since, "now": now}):
        out.append(Downtime(-r.id, r.host, r.check_name, r.created, r.until))
    return out


def uncovered(port: Port, since: float) -> list[tuple[str, str]]:
    """The tick's pass: the checks owed an alert (read without a lock) that a cover that
    ended in ``(since, now]`` names; they get their owed alerts, once
    (:meth:`sinks.alerting.evaluation.Evaluation.owed`)."""
    conn, now = port.conn, port.now
    ended = ended_covers(conn, since, now, port.tz)
    if not ended:
        return []
    owed = [(r.uuid, r.plugin) for r in conn.execute(_owed_stmt())]
    if not owed:
        return []
    names = port.hostnames(u for u, _ in owed)
    return [k for k in owed if any(downtimes.names(d, Subject(k[0], names.get(k[0]), k[1]),
                                                   port.ancestors) for d in ended)][:LIMIT]

