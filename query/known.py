"""Whether the fleet has ever seen a host (and a check of it): what ``downtime add``,
``silence add`` and ``ack add`` ask before they write, in the command line, the console and
the API alike, so that a typo in planned work is refused instead of leaving the real host
paging.

A host is **known** when the state database names it anywhere the fleet wrote it: an agent
of the registry (``agents``: its uuid or its hostname, ignoring case, and the parents the
agents declared), or a uuid the alerting sinks judged (``host_state``, ``check_state``,
``checks``: a RESULT may come before the registry recorded its agent). A check is known for
those hosts when they declared it (``plugins``), reported it (``checks``, ``check_state``),
heartbeat as a local process of that name (``host_state``), or sent a NOTIFY with that
``source``. HOST and CHECK may be globs (``web-*``), matched as the silences and downtimes
match them (:func:`sinks.alerting.silences.rules.matches`): a glob is known when it matches a
known name.

:func:`refuse_unknown` raises :class:`Unknown` (a ValueError: the commands' usage error)
with one line naming the closest known names (:func:`difflib.get_close_matches`), as
written (a terminal escapes them, :func:`fleetwatch.display.escape`; a page's template
does); the caller skips it for a host not deployed yet (``--force``, a ``force`` field).
Plain reads on a connection: the caller runs them before the transaction that writes, on a
reader (:func:`fleetwatch.actions.database.write`'s ``first``), not under the write lock.
A name costs a lookup (3 to 6 ms at 10,000 hosts and 50,000 checks, SQLite, bench/webfill.py's
database); a glob, or a name the fleet does not know, reads every host's names (0.3 s
there).
"""

from __future__ import annotations

import difflib
import re
from fnmatch import fnmatchcase

from sqlalchemy import func, select
from sqlalchemy.engine import Connection

from fleetwatch.store import schema
from fleetwatch.store.db import has_tables

#: how many close names the refusal offers
CLOSEST = 3
_GLOB = re.compile(r"[*?\[]")


class Unknown(ValueError):
    """A host or check the fleet has never seen: one line, naming the closest known ones."""


def _hosts(conn: Connection) -> dict[str, set[str]]:
    """Every name a host is known by (lower case) -> its uuids (empty for a parent that is
    not an agent)."""
    names: dict[str, set[str]] = {}
    if has_tables(conn, "agents"):
        a = schema.agents
        for uuid, hostname, parents in conn.execute(select(a.c.uuid, a.c.hostname,
                                                           a.c.parents)):
            names.setdefault(uuid.lower(), set()).add(uuid)
            if hostname:
                names.setdefault(hostname.lower(), set()).add(uuid)
            for parent in parents if isinstance(parents, list) else ():
                if isinstance(parent, str) and parent:
                    names.setdefault(parent.split("/", 1)[0].lower(), set())
    for table in (schema.host_state, schema.check_state, schema.checks):
        if has_tables(conn, table.name):
            for uuid in conn.scalars(select(table.c.uuid).distinct()):
                names.setdefault(uuid.lower(), set()).add(uuid)
    return names


def _named(conn: Connection, name: str) -> set[str]:
    """The uuids known by ``name`` (lower case, no glob), found by their own rows: a
    command's usual case costs a lookup, not the fleet's names."""
    found: set[str] = set()
    if has_tables(conn, "agents"):
        a = schema.agents
        found.update(conn.scalars(select(a.c.uuid).where(
            (a.c.uuid == name) | (func.lower(a.c.hostname) == name))))
    for table in (schema.host_state, schema.check_state, schema.checks):
        if not found and has_tables(conn, table.name):
            found.update(conn.scalars(select(table.c.uuid).where(
                table.c.uuid == name).limit(1)))
    return found


def _checks(conn: Connection, uuids: set[str]):
    """The names of the checks (plugins, local processes, NOTIFY sources) of ``uuids``, a
    table at a time (the caller stops at the first that has its check)."""
    for table, column in ((schema.plugins, "name"), (schema.checks, "plugin"),
                          (schema.check_state, "plugin"), (schema.host_state, "name"),
                          (schema.notifications, "source")):
        if uuids and has_tables(conn, table.name):
            col = table.c[column]
            yield set(conn.scalars(select(col).distinct().where(
                table.c.uuid.in_(sorted(uuids)), col.is_not(None), col != "")))


def _closest(text: str, names) -> str:
    close = difflib.get_close_matches(text, sorted(names), CLOSEST, 0.6)
    return f"closest known: {', '.join(close)}" if close else "none is close"


def refuse_unknown(conn: Connection, host: str, check: str | None = None) -> None:
    """Nothing when the fleet has seen ``host`` (and ``check`` on it); :class:`Unknown`
    otherwise, one line naming the closest known hosts (checks of that host)."""
    pattern = host.lower()
    uuids = None if _GLOB.search(host) else _named(conn, pattern)
    if not uuids:                       # a glob, or a miss: every name, for the closest
        hosts = _hosts(conn)
        matched = {name for name in hosts if fnmatchcase(name, pattern)}
        if not matched:
            raise Unknown(f"HOST {host}: no host of that name has been seen in the fleet "
                          f"({_closest(pattern, hosts)}; --force for a host not deployed "
                          f"yet)")
        uuids = set().union(*(hosts[name] for name in matched))
    if check is None:
        return
    seen: set[str] = set()
    for checks in _checks(conn, uuids):
        if any(fnmatchcase(name, check) for name in checks):
            return
        seen |= checks
    raise Unknown(f"CHECK {check}: {host} has never had a check of that name "
                  f"({_closest(check, seen)}; --force for a check not deployed yet)")
