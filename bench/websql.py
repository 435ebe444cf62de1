"""The bare SQL of each console page and API list (for bench/web.py): the queries that fetch
the rows the page shows, through SQLAlchemy Core, fetched as mappings. Each takes an open
connection, a random host's ``uuid`` and ``now``: the floor under the console's answer on the
same database, with no HTTP, session, router, merging, template or JSON in it."""

from __future__ import annotations

from sqlalchemy import String, and_, cast, func, or_, select

from fleetwatch.store.schema import (acknowledgements, agents, alert_events, check_freshness,
                                check_state, checks, downtimes, host_state, notifications,
                                outbox)

LIMIT = 100
ALERTS = 50

_ack = and_(acknowledgements.c.uuid == checks.c.uuid,
            acknowledgements.c.check_name == checks.c.plugin, acknowledgements.c.ended.is_(None))
_host = and_(host_state.c.uuid == agents.c.uuid, host_state.c.name == "")


def _all(conn, query) -> list:
    return conn.execute(query).mappings().all()


def _not_ok(conn) -> list:
    """Every check not OK, with its host's name, its state and its acknowledgement."""
    return _all(conn, select(checks.c.uuid, checks.c.plugin, checks.c.status, checks.c.output,
                             checks.c.last_result, agents.c.hostname, check_state.c.hard,
                             check_state.c.since, check_state.c.unreachable,
                             acknowledgements.c.id.label("ack"))
                .join(agents, agents.c.uuid == checks.c.uuid)
                .join(check_state, and_(check_state.c.uuid == checks.c.uuid,
                                        check_state.c.plugin == checks.c.plugin))
                .outerjoin(acknowledgements, _ack)
                .where(checks.c.status != 0))


def _down(conn) -> list:
    return _all(conn, select(host_state, agents.c.hostname)
                .join(agents, agents.c.uuid == host_state.c.uuid)
                .where(host_state.c.name == "", host_state.c.up.is_(False)))


def overview(conn, uuid: str, now: float) -> None:
    """Hosts and checks counted by state, the checks not OK and the hosts DOWN."""
    _all(conn, select(host_state.c.up, func.count()).where(host_state.c.name == "")
         .group_by(host_state.c.up))
    _all(conn, select(check_state.c.status, check_state.c.hard, func.count())
         .group_by(check_state.c.status, check_state.c.hard))
    _not_ok(conn)
    _down(conn)


def problems(conn, uuid: str, now: float) -> None:
    """The problems and what handles them: checks not OK, hosts DOWN, stale checks, the
    acknowledgements and the downtimes that may cover now."""
    _not_ok(conn)
    _down(conn)
    _all(conn, select(check_freshness).where(check_freshness.c.stale_at.is_not(None)))
    _all(conn, select(acknowledgements).where(acknowledgements.c.ended.is_(None)))
    _all(conn, select(downtimes).where(downtimes.c.removed.is_(None), downtimes.c.start <= now,
                                       or_(downtimes.c.end.is_(None), downtimes.c.end > now)))


def _problem_checks(conn, where=(), order=(), limit: int | None = LIMIT) -> list:
    """A page of the checks not OK (:func:`_checks`): a filtered, sorted problem list's
    floor."""
    return _checks(conn, [checks.c.status != 0, *where], order, limit, acks=True)


def problems_critical(conn, uuid: str, now: float) -> None:
    _problem_checks(conn, [checks.c.status == 2], [check_state.c.since.desc()])


def problems_search(conn, uuid: str, now: float) -> None:
    _problem_checks(conn, [agents.c.hostname.like("web01%"),
                           checks.c.output.ilike("%critical%")], [checks.c.uuid])


def problems_grouped(conn, uuid: str, now: float) -> None:
    _problem_checks(conn, order=[agents.c.hostname, checks.c.plugin])
    _down(conn)


def problems_sorted(conn, uuid: str, now: float) -> None:
    _problem_checks(conn, [acknowledgements.c.id.is_(None)], [agents.c.hostname])


def problems_by_parent(conn, uuid: str, now: float) -> None:
    _problem_checks(conn, order=[cast(agents.c.parents, String), agents.c.hostname])


def problems_bulk(conn, uuid: str, now: float) -> None:
    _problem_checks(conn, [checks.c.status == 1, acknowledgements.c.id.is_(None)],
                    [checks.c.uuid], limit=1000)


def _hosts(where=()):
    return (select(agents, host_state.c.up, host_state.c.since, host_state.c.unreachable)
            .outerjoin(host_state, _host).where(*where).order_by(agents.c.hostname)
            .limit(LIMIT))


def hosts(conn, uuid: str, now: float) -> None:
    _all(conn, _hosts())


def hosts_search(conn, uuid: str, now: float) -> None:
    _all(conn, _hosts([agents.c.hostname.like("%web01%")]))


def hosts_down(conn, uuid: str, now: float) -> None:
    _all(conn, _hosts([host_state.c.up.is_(False)]))


def host(conn, uuid: str, now: float) -> None:
    """One host: its agent, host state, checks with their states, acknowledgements."""
    _all(conn, select(agents).where(agents.c.uuid == uuid))
    _all(conn, select(host_state).where(host_state.c.uuid == uuid))
    _all(conn, select(checks, check_state.c.hard, check_state.c.attempt,
                      check_state.c.max_attempts, check_state.c.since)
         .join(check_state, and_(check_state.c.uuid == checks.c.uuid,
                                 check_state.c.plugin == checks.c.plugin))
         .where(checks.c.uuid == uuid))
    _all(conn, select(acknowledgements).where(acknowledgements.c.uuid == uuid,
                                              acknowledgements.c.ended.is_(None)))


def api_hosts(conn, uuid: str, now: float, after: str = "") -> None:
    _all(conn, select(agents, host_state.c.up).outerjoin(host_state, _host)
         .where(agents.c.uuid > after).order_by(agents.c.uuid).limit(LIMIT))


def api_hosts_after(conn, uuid: str, now: float) -> None:
    """The page after a random host's uuid: a client paging through the cursor."""
    api_hosts(conn, uuid, now, uuid)


def api_checks(conn, uuid: str, now: float, after: str = "") -> None:
    _all(conn, select(checks, check_state.c.hard, check_state.c.attempt)
         .join(check_state, and_(check_state.c.uuid == checks.c.uuid,
                                 check_state.c.plugin == checks.c.plugin))
         .where(checks.c.uuid > after).order_by(checks.c.uuid, checks.c.plugin).limit(LIMIT))


def api_checks_after(conn, uuid: str, now: float) -> None:
    api_checks(conn, uuid, now, uuid)


def alerts(conn, uuid: str, now: float) -> None:
    """The newest alert events with their deliveries, and the newest notifications."""
    events = _all(conn, select(alert_events).order_by(alert_events.c.created.desc())
                  .limit(ALERTS))
    _all(conn, select(outbox).where(outbox.c.event_id.in_([e["id"] for e in events])))
    _all(conn, select(notifications).order_by(notifications.c.received_at.desc())
         .limit(ALERTS))


def _checks(conn, where=(), order=(), limit: int | None = LIMIT, acks: bool = False) -> list:
    """A page of every check (its host's name, state; ``acks``: its acknowledgement) where
    ``where``, in ``order``: the checks list's floor (which judges the page's rows alone:
    an outer join of every check to the acknowledgements, which have no index on the
    check, is a nested loop over them)."""
    query = select(checks.c.uuid, checks.c.plugin, checks.c.status, checks.c.output,
                   checks.c.last_result, agents.c.hostname, check_state.c.hard,
                   check_state.c.since,
                   *([acknowledgements.c.id.label("ack")] if acks else [])) \
        .join(agents, agents.c.uuid == checks.c.uuid) \
        .join(check_state, and_(check_state.c.uuid == checks.c.uuid,
                                check_state.c.plugin == checks.c.plugin))
    if acks:
        query = query.outerjoin(acknowledgements, _ack)
    return _all(conn, query.where(*where).order_by(*order).limit(limit))


def checks_worst(conn, uuid: str, now: float) -> None:
    _checks(conn, order=[checks.c.status.desc(), check_state.c.since.desc()])


def checks_grouped(conn, uuid: str, now: float) -> None:
    _checks(conn, [checks.c.status == 0, checks.c.plugin.like("check_d%")],
            [agents.c.hostname, checks.c.plugin])


def checks_search(conn, uuid: str, now: float) -> None:
    _checks(conn, [or_(agents.c.hostname.ilike("%timeout%"), checks.c.output.ilike("%timeout%"))],
            [check_state.c.since])


def alerts_filtered(conn, uuid: str, now: float) -> None:
    _all(conn, select(alert_events).where(alert_events.c.severity == "critical")
         .order_by(alert_events.c.created.desc()).limit(LIMIT))


def alerts_sorted(conn, uuid: str, now: float) -> None:
    _all(conn, select(alert_events).where(alert_events.c.hostname.like("web01%"))
         .order_by(alert_events.c.hostname, alert_events.c.created.desc()).limit(ALERTS))
