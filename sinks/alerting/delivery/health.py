"""Each alert channel's health, judged from the sends of every alerting sink, and what a
change of it does.

A channel is ``failing`` after an attempt it refused for good (a permanent
:class:`sinks.alerting.delivery.channels.SendError`: auth refused, a URL gone, a 4xx) or
after :data:`FAILING_AFTER` attempts in a row that failed (5xx, time-outs, refused
connections); one attempt sent makes it ``ok`` again. Its row of the ``channels`` table
says since when and why; :func:`attempted` keeps it, in the transaction that records the
attempt (:mod:`sinks.alerting.delivery.deliverer`), on the channel's row locked (PostgreSQL:
FOR UPDATE; SQLite's writers take turns), so that with several alerting sinks on one
database a change is judged once. A change is told once:

- to ``failing``: an alert of kind ``channel`` (key ``channel/NAME``, critical: "channel
  NAME failing since 03:12: HTTP 401 invalid_auth") to the channel's ``fallback``;
- back to ``ok``: its resolve, to the fallback and to the channel itself.

While a channel fails, each of its alerts also goes to its fallback, once
(:func:`fall_back`). ``fleetwatch channels`` and the fleet's faults (:mod:`query.faults`)
read the rows.
"""

from __future__ import annotations

from sqlalchemy import and_, exists, func, insert, literal, or_, select, update
from sqlalchemy.engine import Connection

from fleetwatch.display import human
from fleetwatch.store.schema import channels as table, deliveries, outbox

#: failed attempts in a row (none refused for good) that make a channel failing
FAILING_AFTER = 3
OK, FAILING, UNKNOWN = "ok", "failing", "unknown"
#: the longest error kept on a channel's row
ERROR_MAX = 500


def declare(conn: Connection, configured: dict, now: float) -> None:
    """The rows of the channels a sink has (``configured``: name -> channel): a new one
    ``unknown``; each one's ``fallback`` and when it was last ``configured``."""
    known = set(conn.scalars(select(table.c.name).where(table.c.name.in_(list(configured)))))
    for name, channel in configured.items():
        values = {"fallback": channel.fallback or None, "configured": now,
                  "type": channel.type}
        if name in known:
            conn.execute(update(table).where(table.c.name == name).values(**values))
        else:
            conn.execute(insert(table).values(name=name, state=UNKNOWN, since=now,
                                              failures=0, **values))


def attempted(conn: Connection, name: str, sent: bool, permanent: bool, tried,
              now: float) -> dict | None:
    """Record one attempt on channel ``name`` (``tried``: its
    :class:`sinks.alerting.delivery.deliverer.Tried`); the change it made, as the alert
    that tells it (:func:`told`), or None."""
    if sent and conn.execute(update(table).where(table.c.name == name, table.c.state == OK)
                             .values(failures=0, last_ok=tried.started,
                                     last_attempt=tried.started,
                                     last_status=tried.status)).rowcount:
        return None                     # (the common case, one statement: ok, and still ok)
    row = conn.execute(select(table).where(table.c.name == name).with_for_update()).first()
    if row is None:             # a channel a sink of an older config still sends to
        conn.execute(insert(table).values(name=name, state=UNKNOWN, since=now, failures=0,
                                          configured=now))
        row = conn.execute(select(table).where(table.c.name == name)).first()
    what = tried.answer if not tried.status or tried.answer.startswith(tried.status) \
        else f"{tried.status} {tried.answer}"
    if sent:
        conn.execute(update(table).where(table.c.name == name).values(
            state=OK, since=now if row.state != OK else row.since, failures=0,
            last_ok=tried.started, last_attempt=tried.started, last_status=tried.status))
        if row.state == FAILING:
            return told(name, "resolve", f"channel {name} works again (it failed since "
                                         f"{human(row.since)}: {row.last_error})", now)
        return None
    failures = row.failures + 1
    error = " ".join(what.split())[:ERROR_MAX]
    values = {"failures": failures, "last_attempt": tried.started,
              "last_status": tried.status, "last_error": error}
    begins = row.state != FAILING and (permanent or failures >= FAILING_AFTER)
    if begins:      # failing since the first failed attempt after the last one sent
        values.update(state=FAILING, since=_first_failed(conn, name, row.last_ok)
                      or tried.started)
    conn.execute(update(table).where(table.c.name == name).values(**values))
    if begins:
        return told(name, "trigger", f"channel {name} failing since "
                                     f"{human(values['since'])}: {error}", now)
    return None


def _first_failed(conn: Connection, name: str, last_ok: float | None) -> float | None:
    return conn.execute(select(func.min(deliveries.c.started)).where(
        deliveries.c.channel == name, deliveries.c.outcome != "sent",
        deliveries.c.started > (last_ok or 0.0))).scalar()


def told(name: str, action: str, summary: str, now: float) -> dict:
    """The alert of a channel's change (an event as :mod:`.events` makes them)."""
    return {"key": f"channel/{name}", "kind": "channel", "action": action,
            "severity": "critical" if action == "trigger" else "ok", "uuid": None,
            "hostname": None, "check": name, "status": None, "summary": summary,
            "text": summary, "created": now}


def fall_back(conn: Connection, now: float) -> int:
    """Put in the outbox of each failing channel's fallback the alerts the channel has not
    sent since it fails (pending, or failed in an attempt since; not a test message of
    ``fleetwatch channels test``), each once; how many were
    added. The failing channels' rows are locked first (PostgreSQL: FOR UPDATE), so two
    sinks doing it at once add each alert once."""
    failing = conn.execute(select(table.c.name, table.c.fallback, table.c.since).where(
        table.c.state == FAILING, table.c.fallback.is_not(None))
        .order_by(table.c.name).with_for_update()).all()
    added = 0
    for name, fallback, since in failing:
        mine, theirs = outbox.alias("mine"), outbox.alias("theirs")
        tried_since = exists().where(deliveries.c.outbox_id == mine.c.id,
                                     deliveries.c.started >= since)
        rows = select(mine.c.event_id, mine.c.key, literal(fallback), literal("pending"),
                      literal(0), literal(now), literal(now)).where(
            mine.c.channel == name, ~mine.c.key.like("test/%"),     # (channels test NAME)
            or_(mine.c.state == "pending", and_(mine.c.state == "failed", tried_since)),
            ~exists().where(theirs.c.event_id == mine.c.event_id,
                            theirs.c.channel == fallback))
        added += conn.execute(insert(outbox).from_select(
            ["event_id", "key", "channel", "state", "attempts", "next_attempt", "created"],
            rows)).rowcount or 0
    return added
