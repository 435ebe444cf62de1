"""The alert lifecycle for the history lake: rows of the ``lifecycle`` table read from the
state database (SQLAlchemy Core, no PySpark; compaction writes them, docs/concepts/lake.md
"The lifecycle table").

One row per thing that happened, with an ``event_id`` that names it for good:

=============  ==================  =====================================================
kind           from                rows (``event_id``)
=============  ==================  =====================================================
``alert``      ``alert_events``    one per alert event, its action (``alert/ID``)
``muted``      ``suppressed``      one per alert a silence muted (``muted/SILENCE/...``)
``held``       ``downtime_         one per alert a downtime held back
               suppressed``        (``held/DOWNTIME/...``)
``ack``        ``acknowledgements`` ``start`` at its creation, ``end`` when it ended
                                   (``ack/ID/start``, ``ack/ID/end``)
``downtime``   ``downtimes``       per occurrence: ``start`` at its start (``end``: the
                                   planned end), ``end`` at its end or removal
                                   (``downtime/ID/START/start``, ``.../end``)
=============  ==================  =====================================================

:func:`export` reads incrementally from a :class:`Mark` (the watermark compaction keeps
with its manifest): the alert events and mutes recorded since ``through`` less :data:`LAG`,
and the acknowledgements and downtimes created or ended since then or still *open* at the
last export (an ack ended by its expiry gets an ``ended`` in the past, a recurring downtime
lasts for months: the ids carried in the mark find them again). The overlap gives rows
already stored; compaction drops them by ``event_id`` (the same second line of defence as
msg_ids), so a rerun or a run killed before its commit adds no row twice.

The same run reads the ``deliveries`` table's rows (:mod:`fleetwatch.lake.deliveries`: every
attempt to send an alert) with their own watermark in the :class:`Mark`: a lake exported
before that table came (a mark without it) copies every delivery the state database still
holds once, not only those of the last hour.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

from sqlalchemy import or_, select
from sqlalchemy.engine import Connection
from sqlalchemy.exc import SQLAlchemyError

from fleetwatch.lake import deliveries
from fleetwatch.lake.manifest import read_json
from fleetwatch.store import db, schema

log = logging.getLogger(__name__)

NAME = "lifecycle"
#: seconds read again before the watermark: a transaction that committed after the last
#: export with an earlier ``created`` (the sinks' clocks must agree with compaction's to
#: within this)
LAG = 3600.0
START, END = "start", "end"


@dataclass(frozen=True)
class Mark:
    """How far the lifecycle was exported: events up to ``through`` (None: never), and the
    acknowledgements and downtimes still open then (their end is still to come)."""

    through: float | None = None
    acks: tuple[int, ...] = ()
    downtimes: tuple[int, ...] = ()
    #: deliveries up to this (None: never, as in a mark written before the table came)
    deliveries: float | None = None

    def to_json(self) -> dict:
        return {"through": self.through, "acks": list(self.acks),
                "downtimes": list(self.downtimes), "deliveries": self.deliveries}

    @classmethod
    def from_json(cls, data: dict | None) -> "Mark":
        if not data:
            return cls()
        return cls(data.get("through"), tuple(data.get("acks", ())),
                   tuple(data.get("downtimes", ())), data.get("deliveries"))


@dataclass
class Export:
    rows: list[dict] = field(default_factory=list)
    #: the ``deliveries`` table's rows (:mod:`fleetwatch.lake.deliveries`)
    deliveries: list[dict] = field(default_factory=list)
    mark: Mark = field(default_factory=Mark)
    #: whether anything happened since the last export (a row after its watermark, an
    #: ack or downtime opened or closed): else the rows are the overlap, normally stored
    #: already, and compaction need not run for them
    news: bool = False


def read(lake, url: str, now: float, out=print) -> Export | None:
    """What :func:`export` gives from the state database at ``url`` since the watermark
    kept in ``lake`` (a :class:`fleetwatch.lake.manifest.Lake`); None without a ``url``, or
    when the database cannot be read (the landing files are compacted anyway, the
    lifecycle at the next run)."""
    if not url:
        return None
    if not db.exists(url):
        out(f"{NAME}: no state database at {url}")
        return None
    mark = Mark.from_json(read_json(lake.lifecycle_mark)
                          if os.path.exists(lake.lifecycle_mark) else None)
    eng = db.engine(url, writer=False)
    try:
        with eng.connect() as conn:
            return export(conn, mark, now)
    except SQLAlchemyError as e:
        log.warning("the lifecycle is not exported this run: %s", e)
        out(f"{NAME}: the state database could not be read (next run): "
            f"{str(e).splitlines()[0][:200]}")
        return None
    finally:
        eng.dispose()


def _row(kind: str, action: str, ts: float, event_id: str, id_: int, **fields) -> dict:
    row = {"ts": ts, "event_id": event_id, "kind": kind, "action": action, "id": id_,
           "key": None, "uuid": None, "hostname": None, "check_name": None,
           "severity": None, "status": None, "text": None, "author": None, "comment": None,
           "start": None, "end": None, "reason": None, "details": None}
    row.update(fields)
    return row


def export(conn: Connection, mark: Mark, now: float) -> Export:
    """The lifecycle rows that happened up to ``now`` since ``mark`` (with the overlap the
    module docstring explains), the deliveries since theirs, and the mark to keep once
    they are stored."""
    since = None if mark.through is None else mark.through - LAG
    out = Export()
    if db.has_tables(conn, "alert_events"):
        out.rows += _alerts(conn, since, now)
    if db.has_tables(conn, "suppressed"):
        out.rows += _muted(conn, schema.suppressed, "muted", since, now)
    if db.has_tables(conn, "downtime_suppressed"):
        out.rows += _muted(conn, schema.downtime_suppressed, "held", since, now)
    acks: list[int] = []
    if db.has_tables(conn, "acknowledgements"):
        rows, acks = _acks(conn, since, now, mark.acks)
        out.rows += rows
    downtimes: list[int] = []
    if db.has_tables(conn, "downtimes"):
        rows, downtimes = _downtimes(conn, since, now, mark.downtimes)
        out.rows += rows
    sent = mark.deliveries                  # a database without the table: still never
    if db.has_tables(conn, deliveries.NAME):
        out.deliveries = deliveries.rows(conn, None if sent is None else sent - LAG, now)
        sent = now
    out.mark = Mark(now, tuple(sorted(acks)), tuple(sorted(downtimes)), sent)
    out.news = ((out.mark.acks, out.mark.downtimes) != (mark.acks, mark.downtimes)
                or any(mark.through is None or r["ts"] > mark.through for r in out.rows)
                or any(mark.deliveries is None or r["ts"] > mark.deliveries
                       for r in out.deliveries))
    return out


def _recent(column, since: float | None, now: float):
    return (column <= now) if since is None else (column >= since) & (column <= now)


def _alerts(conn: Connection, since: float | None, now: float) -> list[dict]:
    t = schema.alert_events
    out = []
    for r in conn.execute(select(t).where(_recent(t.c.created, since, now))).mappings():
        out.append(_row("alert", r["action"], r["created"], f"alert/{r['id']}", r["id"],
                        key=r["key"], uuid=r["uuid"], hostname=r["hostname"],
                        check_name=r["check_name"], severity=r["severity"],
                        status=r["status"], text=r["summary"],
                        details=json.dumps({"kind": r["kind"]})))
    return out


def _muted(conn: Connection, table, kind: str, since: float | None,
           now: float) -> list[dict]:
    """The alerts a silence muted (``suppressed``) or a downtime held (``downtime_suppressed``):
    one row per (silence or downtime, key, action, severity), when it was first muted."""
    by = table.c.silence_id if "silence_id" in table.c else table.c.downtime_id
    out = []
    for r in conn.execute(select(table).where(_recent(table.c.created, since, now))).mappings():
        owner = r[by.name]
        out.append(_row(kind, r["action"], r["created"],
                        f"{kind}/{owner}/{r['action']}/{r['severity']}/{r['key']}", owner,
                        key=r["key"], uuid=r["uuid"], hostname=r["hostname"],
                        check_name=r["check_name"], severity=r["severity"],
                        text=r["summary"], details=json.dumps({"kind": r["kind"]})))
    return out


def _acks(conn: Connection, since: float | None, now: float,
          open_ids: tuple[int, ...]) -> tuple[list[dict], list[int]]:
    t = schema.acknowledgements
    query = select(t)
    if since is not None:
        query = query.where(or_(t.c.created >= since, t.c.ended >= since,
                                t.c.id.in_(open_ids)))
    rows, still_open = [], []
    for r in conn.execute(query).mappings():
        common = dict(key=r["key"], uuid=r["uuid"], check_name=r["check_name"],
                      status=r["status"], author=r["author"], comment=r["comment"],
                      start=r["created"],
                      details=json.dumps({"sticky": r["sticky"], "notify": r["notify"]}))
        if r["created"] <= now:
            rows.append(_row("ack", START, r["created"], f"ack/{r['id']}/start", r["id"],
                             **{**common, "end": r["expire"]}))
        ended = r["ended"]
        if ended is not None and ended <= now:
            rows.append(_row("ack", END, ended, f"ack/{r['id']}/end", r["id"],
                             **{**common, "end": ended, "reason": r["end_reason"]}))
        if r["created"] > now or ended is None or ended > now:
            still_open.append(r["id"])
    return rows, still_open


def _downtimes(conn: Connection, since: float | None, now: float,
               open_ids: tuple[int, ...]) -> tuple[list[dict], list[int]]:
    from sinks.alerting.downtimes.rules import Downtime, occurrences
    t = schema.downtimes
    query = select(t)
    if since is not None:
        query = query.where(or_(t.c.created >= since, t.c.removed >= since,
                                t.c.id.in_(open_ids)))
    rows, still_open = [], []
    for r in conn.execute(query).mappings():
        d = Downtime.from_row(r)
        # an open one was exported up to ``since``; a new one from its first window
        low = since if since is not None and d.id in open_ids else d.start
        common = dict(hostname=d.host, check_name=d.check, author=d.author,
                      comment=d.comment,
                      details=json.dumps({"every": d.every, "duration": d.duration,
                                          "flexible": d.flexible, "children": d.children}))
        for start, end in occurrences(d, low, now + 1e-6):
            if d.removed is not None and d.removed <= start:
                continue            # removed before this window began: it never ran
            cut = end if d.removed is None else min(end, d.removed)
            ident = f"downtime/{d.id}/{start:.3f}"
            if start <= now:
                rows.append(_row("downtime", START, start, f"{ident}/start", d.id, **common,
                                 start=start, end=_finite(end)))
            if cut <= now:
                rows.append(_row("downtime", END, cut, f"{ident}/end", d.id, **common,
                                 start=start, end=cut,
                                 reason="removed" if cut < end else "ended"))
        if d.removed is None and (d.end is None or d.end > now):
            still_open.append(d.id)
    return rows, still_open


def _finite(t: float) -> float | None:
    return None if t == float("inf") else t
