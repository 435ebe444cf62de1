"""The registry sink: which agents exist, through which routers, with which plugins.

It takes the HELLOs and REGISTERs routers relay (SPEC 4.1) and keeps the ``agents``,
``agent_routers`` and ``plugins`` tables (it is their only writer). REGISTER is ACKed once
committed (SPEC 4.2); HELLO is not acknowledged. A REGISTER replaces the plugins its source
(``name``: ``agent`` or a local process) declared before. Writes are idempotent, so a
duplicate that slips past the loop's msg_id set changes nothing.

A declared plugin is a name (``"check_disk"``) or an object with a string ``name`` and any
other fields (interval, arguments...), stored whole as ``spec``; other entries are skipped
and counted (``bad_plugin``).

The agent's ``parents`` (the hosts and checks it can only be reached through, ``HOST`` or
``HOST/CHECK``, :mod:`sinks.alerting.dependencies.rules`), from its HELLO and its own REGISTER,
are kept in ``agents.parents`` (NULL when it declares none: a message without the field
clears them); entries that are not a reference are skipped and counted (``bad_parent``).
An agent behind a site router (SPEC 4.10: the envelope's path names more than the relaying
router) has its site as a parent too, the last router of the path but itself
(:func:`site_parent`): a site router's HELLO upstream names it by its id, so when the
site's uplink is down and its heartbeats stop, its agents are UNREACHABLE behind it, not
DOWN (:mod:`sinks.alerting.dependencies.store`); that site is ``agents.site`` too (NULL when
it came straight to a central router), what the console's lists filter and group by.
Its ``ephemeral`` flag (the same messages) goes to ``agents.ephemeral``: the alerting sinks
call such an agent GONE, not DOWN, when it goes silent (:mod:`sinks.alerting.hosts.rules`).

DEREGISTER (the agent leaves for good, SPEC 4.8) is ACKed once committed: the agent's
``plugins`` and ``agent_routers`` rows are removed (so the scheduler drops its jobs) and its
``agents`` row is marked ``gone`` with the DEREGISTER's ``ts``, which readers take as not
there; a HELLO or REGISTER of that uuid sent before it (relayed late, or by another registry
sink) is ignored and counted (``after_deregister``), a later one registers the agent again.
That ``ts`` is the sender's clock, kept bounded by the receiver's: never after the moment the
DEREGISTER was written (``last_seen``), so one dated in the future (a wrong clock, or a forged
one) does not make the agent's later HELLOs "sent before it".
The alerting sinks forget the row with the rest after ``alerting.forget_after``
(:mod:`fleetwatch.store.forget`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from sqlalchemy import bindparam, select
from sqlalchemy.exc import SQLAlchemyError

from fleetwatch import sinktypes
from fleetwatch.logs import Throttle
from fleetwatch.protocol import Relayed
from sinks.alerting.dependencies.rules import declared_refs
from fleetwatch.store import db, schema
from sinks.database import DatabaseSink
from sinks.base import WriteError

log = logging.getLogger(__name__)


def plugin_rows(uuid: str, source: str, declared: list, now: float) -> tuple[list[dict], int]:
    """Rows for the ``plugins`` table from a REGISTER's list, and how many entries were bad."""
    rows: dict[str, dict] = {}
    bad = 0
    for item in declared:
        if isinstance(item, str) and 0 < len(item) <= 255:
            rows[item] = {"uuid": uuid, "source": source, "name": item, "spec": {},
                          "declared_at": now}
        elif isinstance(item, dict) and isinstance(item.get("name"), str) \
                and 0 < len(item["name"]) <= 255:
            spec = {k: v for k, v in item.items() if k != "name"}
            rows[item["name"]] = {"uuid": uuid, "source": source, "name": item["name"],
                                  "spec": spec, "declared_at": now}
        else:
            bad += 1
    return list(rows.values()), bad


class RegistrySink(DatabaseSink):
    type = "registry"
    handles = sinktypes.BY_NAME["registry"].handles
    acks = sinktypes.BY_NAME["registry"].acks

    def __init__(self, engine, clock=time.time):
        super().__init__(engine, clock)
        self._throttle = Throttle(log)

    def write(self, batch: list[Relayed]) -> None:
        now = self.clock()
        counts: Counter = Counter()
        try:
            with self.transaction() as conn:
                gone = _gone(conn, {r.uuid for r in batch})
                writes = Writes()
                for relayed in batch:
                    msg = relayed.message
                    if msg.type == "DEREGISTER":
                        left = min(msg.ts, now)             # the sender's clock, bounded
                        writes.flush(conn)                  # what came before it first
                        self._deregister(conn, relayed, now, left)
                        gone[relayed.uuid] = max(gone.get(relayed.uuid, left), left)
                    elif relayed.uuid in gone and msg.ts <= gone[relayed.uuid]:
                        counts["after_deregister"] += 1      # sent before it left
                    elif msg.type == "HELLO":
                        gone.pop(relayed.uuid, None)
                        counts["bad_parent"] += self._hello(writes, relayed, now)
                    else:
                        gone.pop(relayed.uuid, None)
                        bad_plugins, bad_parents = self._register(writes, relayed, now)
                        counts["bad_plugin"] += bad_plugins
                        counts["bad_parent"] += bad_parents
                    counts[relayed.message.type.lower()] += 1
                writes.flush(conn)
        except SQLAlchemyError as e:
            raise WriteError(f"registry write failed: {e.__class__.__name__}: {e}") from e
        if counts["bad_plugin"]:
            self._throttle.warning("bad_plugin", "skipped %d malformed plugin declarations",
                                   counts["bad_plugin"])
        if counts["bad_parent"]:
            self._throttle.warning("bad_parent", "skipped %d parents that are not HOST or "
                                   "HOST/CHECK", counts["bad_parent"])
        self.counts.update(counts)

    def _hello(self, writes: Writes, relayed: Relayed, now: float) -> int:
        fields, bad = _identity(relayed.message, site_parent(relayed))
        writes.seen(relayed, now, fields)
        return bad

    def _deregister(self, conn, relayed: Relayed, now: float, left: float) -> None:
        uuid = relayed.uuid
        for t in (schema.plugins, schema.agent_routers):
            conn.execute(t.delete().where(t.c.uuid == uuid))
        db.upsert(conn, schema.agents, {"uuid": uuid, "first_seen": now, "last_seen": now,
                                        "gone": left}, update=["gone", "last_seen"])
        log.info("agent %s deregistered (%s)", uuid,
                 str(relayed.message.get("reason") or "no reason given")[:200])

    def _register(self, writes: Writes, relayed: Relayed, now: float) -> tuple[int, int]:
        msg = relayed.message
        # only the agent's own REGISTER names the machine (a local process's may not)
        fields, bad_parents = (_identity(msg, site_parent(relayed))
                               if msg.get("name") == "agent" else ({}, 0))
        writes.seen(relayed, now, fields)
        source = msg.get("name")[:255]
        declared = msg.get("plugins")
        if declared is None:
            return 0, bad_parents
        rows, bad = plugin_rows(relayed.uuid, source, declared, now)
        writes.plugins[(relayed.uuid, source)] = rows
        return bad, bad_parents


class Writes:
    """A batch's writes, gathered so that each table gets a few statements, not a few per
    message (10,000 agents attaching are 10,000 HELLOs and as many REGISTERs): the rows
    each message would have upserted, merged per key in the batch's order (a later
    message's fields over an earlier one's, the columns either updates), and each (uuid,
    source)'s last plugin list. :meth:`flush` writes them, rows in key order (two registry
    sinks on one PostgreSQL database lock rows in the same order: no deadlock); the caller
    flushes before a DEREGISTER, which must come after what was sent before it."""

    def __init__(self):
        #: uuid -> [agents row, the columns an existing row takes from it]
        self.agents: dict[str, list] = {}
        #: (uuid, router) -> last_seen
        self.routers: dict[tuple[str, str], float] = {}
        #: (uuid, source) -> the plugins rows that replace that source's
        self.plugins: dict[tuple[str, str], list[dict]] = {}

    def seen(self, relayed: Relayed, now: float, fields: dict) -> None:
        row = {"uuid": relayed.uuid, "first_seen": now, "last_seen": now, "gone": None,
               **fields}
        kept = self.agents.get(relayed.uuid)
        if kept is None:
            self.agents[relayed.uuid] = [row, {"last_seen", "gone", *fields}]
        else:
            kept[0].update(row)
            kept[1].update(fields)
        self.routers[(relayed.uuid, relayed.router)] = now

    def flush(self, conn) -> None:
        groups: dict[tuple, list[dict]] = {}
        for uuid in sorted(self.agents):
            row, update = self.agents[uuid]
            groups.setdefault((tuple(sorted(row)), tuple(sorted(update))), []).append(row)
        for (_, update), rows in groups.items():
            db.upsert_many(conn, schema.agents, rows, update=update)
        db.upsert_many(conn, schema.agent_routers,
                       [{"uuid": uuid, "router": router, "last_seen": seen}
                        for (uuid, router), seen in sorted(self.routers.items())],
                       update=["last_seen"])
        if self.plugins:
            t = schema.plugins
            conn.execute(t.delete().where(t.c.uuid == bindparam("u"),
                                          t.c.source == bindparam("s")),
                         [{"u": uuid, "s": source} for uuid, source in sorted(self.plugins)])
            rows = [row for key in sorted(self.plugins) for row in self.plugins[key]]
            if rows:
                conn.execute(t.insert(), rows)
        self.agents.clear()
        self.routers.clear()
        self.plugins.clear()


def site_parent(relayed: Relayed) -> str | None:
    """The site router a message's sender is behind (SPEC 4.10): the last router of the
    envelope's path after the relaying one, the sender itself left out (a site router's
    own HELLO names the site above it); None when it came straight to the relaying router."""
    hops = list(relayed.path[1:])
    if hops and hops[-1] == relayed.uuid:
        hops.pop()
    return hops[-1] if hops else None


def _identity(msg, site: str | None = None) -> tuple[dict, int]:
    """hostname, version and parents as a HELLO or the agent's own REGISTER gives them
    (``site``: the site router it is behind, a parent too), and how many parents were not
    a reference."""
    fields = {}
    if isinstance(msg.get("hostname"), str):
        fields["hostname"] = msg.get("hostname")[:255]
    if isinstance(msg.get("version"), str):
        fields["version"] = msg.get("version")[:64]
    refs, bad = declared_refs(msg.get("parents"))
    parents = [str(r) for r in refs]
    if site is not None and site not in parents:
        parents.append(site)
    fields["parents"] = parents or None
    fields["site"] = site[:255] if site is not None else None
    fields["ephemeral"] = msg.get("ephemeral") is True
    return fields, bad


def _gone(conn, uuids: set[str]) -> dict[str, float]:
    """uuid -> the ``ts`` of its DEREGISTER, for the deregistered agents among ``uuids``,
    never after its row was last written (a row marked before that bound holds the ``ts``
    as sent)."""
    t = schema.agents
    rows = conn.execute(select(t.c.uuid, t.c.gone, t.c.last_seen).where(
        t.c.uuid.in_(sorted(uuids)), t.c.gone.is_not(None))).all() if uuids else []
    return {uuid: min(left, seen) for uuid, left, seen in rows}
