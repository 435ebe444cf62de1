"""Acknowledgements: acknowledge a current problem, end an acknowledgement, list them.

An acknowledgement is a row in the state database's ``acknowledgements`` table, which every
alerting sink reads (:mod:`sinks.alerting.acks.rules` says what it holds back and when it ends).
A host is a hostname (any case) or a uuid; with a check it is that check's problem (its
latest result not OK), without one the host's DOWN. :func:`add` refuses when there is no such
problem now (:class:`NoProblem`), and a host (or check) the fleet has never seen, naming
the closest known ones (:class:`query.known.Unknown`, unless ``force``). :func:`listed`
gives them as ``fleetwatch ack list --json`` prints them (:func:`document`).
"""

from __future__ import annotations

from fleetwatch.actions.database import Unavailable, reading, write
from fleetwatch.display import iso, state

__all__ = ["FIELDS", "HOST_DOWN", "NoProblem", "Unavailable", "add", "document", "entry",
           "listed", "problems", "remove"]

FIELDS = ("id", "key", "uuid", "hostname", "check", "status", "state", "by", "comment",
          "sticky", "notify", "created", "until", "announced", "ended", "end_reason", "active")
#: the status of a host DOWN (a host's acknowledgement)
HOST_DOWN = 2


class NoProblem(Exception):
    """Nothing to acknowledge there now: ``ack add`` exits 1, the console answers 404."""


def problems(conn, host: str, check: str | None) -> list[tuple[str, int]]:
    """(uuid, status) of each current problem of ``host`` (a hostname or uuid) and ``check``
    (None: the host DOWN)."""
    from sqlalchemy import func, select
    from fleetwatch.store import schema
    from fleetwatch.store.db import has_tables
    uuids = {host}
    if has_tables(conn, "agents"):
        a = schema.agents
        uuids.update(conn.scalars(select(a.c.uuid).where(
            func.lower(a.c.hostname) == host.lower())))
    if check is not None:
        if not has_tables(conn, "check_state"):
            return []
        c = schema.check_state
        rows = conn.execute(select(c.c.uuid, c.c.status).where(
            c.c.uuid.in_(sorted(uuids)), c.c.plugin == check, c.c.status != 0,
            c.c.last_result.is_not(None)).order_by(c.c.uuid))
        return [(r.uuid, r.status) for r in rows]
    if not has_tables(conn, "host_state"):
        return []
    h = schema.host_state
    rows = conn.scalars(select(h.c.uuid).where(h.c.uuid.in_(sorted(uuids)), h.c.name == "",
                                               h.c.up.is_(False)).order_by(h.c.uuid))
    return [(uuid, HOST_DOWN) for uuid in rows]


def add(state_url: str, host: str, check: str | None, now: float, by: str, comment: str,
        sticky: bool, notify: bool, expire: float | None,
        force: bool = False, also=None) -> list[tuple[int, str, int]]:
    """Acknowledge the problems of ``host`` [``check``]: (id, uuid, status) of each
    (``also``: :func:`fleetwatch.actions.database.write`'s);
    :class:`query.known.Unknown` for a host (or check) the fleet has never seen, unless
    ``force``; :class:`NoProblem` when nothing is wrong there now."""
    from query.known import refuse_unknown
    from sinks.alerting.acks import rules as acks
    from sinks.alerting.acks import store as ackstore

    def known(conn):
        refuse_unknown(conn, host, check)

    def change(conn):
        found = problems(conn, host, check)
        if not found:
            why = "its latest result is OK or it never ran" if check else "it is not DOWN"
            raise NoProblem(f"no current problem for {host}"
                            f"{' ' + check if check else ''} ({why})")
        return [(ackstore.add(conn, acks.check_key(uuid, check) if check else
                              acks.host_key(uuid), uuid, check, status, now, by, comment,
                              sticky, notify, expire), uuid, status)
                for uuid, status in found]
    return write(state_url, change, "acks", also, first=None if force else known)


def remove(state_url: str, ack_id: int, now: float, also=None) -> bool:
    """End the running acknowledgement ``ack_id`` now; False when none was running."""
    from sinks.alerting.acks import rules as acks
    from sinks.alerting.acks import store as ackstore
    return bool(write(state_url, lambda conn: ackstore.end(conn, ack_id, now, acks.REMOVED),
                      "acks", also))


def listed(state_url: str, now: float, ended: bool = False, reader=None) -> list[dict]:
    """The running acknowledgements (all with ``ended``), newest first, each as
    :func:`entry` makes it; :class:`Unavailable` when the database cannot be read.
    ``reader``: the console's (:class:`fleetwatch.store.reader.Reader` over its engine)."""
    with reading(state_url, reader) as (reader, reads):
        rows = reader.read(reads.acknowledgements, now=now, ended=ended)
        uuids = sorted({r["uuid"] for r in rows})
        names = {a["uuid"]: a["hostname"] for a in reader.read(reads.agents, uuids=uuids)} \
            if uuids else {}
    return [entry(row, now, names.get(row["uuid"])) for row in rows]


def document(entries: list[dict]) -> dict:
    """What ``ack list --json`` prints."""
    return {"acks": entries}


def entry(row: dict, now: float, hostname: str | None = None) -> dict:
    """An ``acknowledgements`` row as listed: :data:`FIELDS`, times in ISO 8601,
    ``active``; one past its expiry that no sink has ended yet is shown ended then."""
    expire, ended, reason = row.get("expire"), row.get("ended"), row.get("end_reason")
    if ended is None and expire is not None and now >= expire:
        ended, reason = expire, "expired"
    check = row.get("check_name")
    return {"id": row["id"], "key": row["key"], "uuid": row["uuid"], "hostname": hostname,
            "check": check, "status": row["status"],
            "state": state(row["status"]) if check else "DOWN", "by": row["author"],
            "comment": row["comment"], "sticky": bool(row["sticky"]),
            "notify": bool(row["notify"]), "created": iso(row["created"]),
            "until": iso(expire), "announced": iso(row.get("announced")), "ended": iso(ended),
            "end_reason": reason, "active": ended is None and row["created"] <= now}
