"""The SQL side of a check's state: its ``check_state`` row locked, read and saved.

Every evaluation of a check (a result, a stale result, an owed alert) reads its row with
:func:`lock_checks` inside the transaction that decides it (:mod:`sinks.alerting.locks`:
how two sinks take turns) and writes it back with :func:`save_checks`.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select, tuple_
from sqlalchemy.engine import Connection

from sinks.alerting.checks.rules import CheckState
from sinks.alerting.locks import lock, update_by_key
from fleetwatch.store import schema

CheckKey = tuple[str, str]      # (uuid, plugin)

#: the columns of ``check_state`` that are a :class:`CheckState`'s fields
FIELDS = ("status", "hard", "attempt", "hard_status", "since", "last_change", "last_result",
          "history", "percent", "flapping", "notified", "last_notified", "flap_notified",
          "unreachable", "received", "boot", "seq")


def lock_checks(conn: Connection, keys: Iterable[CheckKey], now: float,
                known: set | None = None) -> dict[CheckKey, CheckState]:
    """The state of each check, locked for this transaction (the initial state if new)."""
    blank = CheckState()
    fields = {f: getattr(blank, f) for f in FIELDS}
    rows = lock(conn, schema.check_state, ("uuid", "plugin"), keys,
                lambda k: {"uuid": k[0], "plugin": k[1], "max_attempts": 0, "updated": now,
                           **fields}, known)
    return {k: CheckState(**{f: getattr(r, f) for f in FIELDS}) for k, r in rows.items()}


def save_checks(conn: Connection, states: dict[CheckKey, tuple[CheckState, int]],
                now: float) -> None:
    """Write back ``(state, max_attempts)`` per check."""
    if not states:
        return
    conn.execute(update_by_key("check_state", "uuid", "plugin"),
                 [{"k_uuid": u, "k_plugin": p, "max_attempts": attempts, "updated": now,
                   **{f: getattr(state, f) for f in FIELDS}}
                  for (u, p), (state, attempts) in sorted(states.items())])


def latest_outputs(conn: Connection, keys: list[CheckKey]) -> dict[CheckKey, tuple[str, str]]:
    """(output, long_output) of each check's latest result (``checks``)."""
    t = schema.checks
    return {(r.uuid, r.plugin): (r.output, r.long_output) for r in conn.execute(
        select(t.c.uuid, t.c.plugin, t.c.output, t.c.long_output)
        .where(tuple_(t.c.uuid, t.c.plugin).in_(keys)))}

