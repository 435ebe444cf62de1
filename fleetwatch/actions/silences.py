"""Silences: mute a host's (or a check's) alerts for a while, end a silence, list them.

A silence is a row in the state database's ``silences`` table, which every alerting sink
reads when an alert is due (:mod:`sinks.alerting.silences.rules` says what it matches). Muted
alerts are recorded as suppressed, and the sinks keep tracking state, so what is still wrong
when the silence ends is alerted then. A host (or host and check) the fleet has never seen
is refused, naming the closest known ones (:class:`query.known.Unknown`), unless ``force``
(a host not deployed yet). :func:`listed` gives them as ``fleetwatch silence list --json``
prints them (:func:`document`).
"""

from __future__ import annotations

from fleetwatch.actions.database import Unavailable, reading, write
from fleetwatch.display import iso

__all__ = ["FIELDS", "Unavailable", "add", "document", "entry", "listed", "remove"]

FIELDS = ("id", "host", "check", "created", "until", "reason", "created_by", "removed",
          "suppressed")


def add(state_url: str, host: str, check: str | None, seconds: float, reason: str,
        now: float, by: str, force: bool = False) -> int:
    """A silence of ``host`` [``check``] (hostnames, uuids or globs) from ``now`` for
    ``seconds``, made ``by`` (``login@host``): its id; :class:`query.known.Unknown` for a
    host (or check) the fleet has never seen, unless ``force``."""
    from query.known import refuse_unknown
    from sinks.alerting.silences import store as alertstate

    def known(conn):
        refuse_unknown(conn, host, check)

    def change(conn):
        return alertstate.add_silence(conn, host, check, now, now + seconds, reason, by)
    return write(state_url, change, first=None if force else known)


def remove(state_url: str, silence_id: int, now: float) -> bool:
    """End the running silence ``silence_id`` now; False when none was running."""
    from sinks.alerting.silences import store as alertstate
    return bool(write(state_url, lambda conn: alertstate.end_silence(conn, silence_id, now)))


def listed(state_url: str, now: float, ended: bool = False, reader=None) -> list[dict]:
    """The running silences (all with ``ended``), newest first, each as :func:`entry`
    makes it; :class:`Unavailable` when the database cannot be read."""
    with reading(state_url, reader) as (reader, reads):
        rows = reader.read(reads.silences, now=now, ended=ended)
    return [entry(row, now) for row in rows]


def document(entries: list[dict]) -> dict:
    """What ``silence list --json`` prints."""
    return {"silences": entries}


def entry(row: dict, now: float) -> dict:
    """A ``silences`` row as listed: its :data:`FIELDS`, times in ISO 8601, ``active``."""
    out = {k: row.get(k) for k in FIELDS if k != "check"}
    out["check"] = row.get("check_name")
    out["active"] = row.get("removed") is None and row["created"] <= now < row["until"]
    for k in ("created", "until", "removed"):
        out[k] = iso(out[k])
    return out
