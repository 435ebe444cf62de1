"""Dependencies at work in the alerting sink: UNREACHABLE hosts, checks held by a parent.

The SQL side of :mod:`sinks.alerting.dependencies.rules`, acting on a transaction's
:class:`sinks.alerting.port.Port`:

- :class:`Topology` (one per sink): the :class:`~sinks.alerting.dependencies.rules.Graph` from the
  config's ``alerting.dependencies`` and the parents agents declared (``agents.parents``,
  kept by the registry), built again when either changed (the declarations are looked at
  every ``every`` seconds). A cycle the declarations make is broken and logged, throttled.
- :meth:`Parents.judge_host`, from the expiry pass, for an agent past its deadline: which parent,
  if any, holds it (:func:`sinks.alerting.freshness.rules.blocking`, the rule that holds a stale
  check behind its host). A parent DOWN (or UNREACHABLE itself), or a parent check in a
  HARD problem: the host is UNREACHABLE (``host_state.unreachable``), its DOWN is held and
  pages nobody, and the tick looks at it again (it is ``pending``) until the parent is
  back and the host has had its own timeout since (:func:`freshness.returned`: its
  heartbeats may come through the parent): then, still silent, it is DOWN and pages once.
  A parent not heard since the child's deadline, or a parent check in a SOFT problem: the
  child is not judged yet.
- :meth:`Parents.check_blocker`, from every check evaluation: the parent that holds the check's
  problem alerts back (its host UNREACHABLE, or a parent check in a HARD problem),
  recorded as ``check_state.unreachable``; a held alert is not told to the state machine,
  so it is raised again: at the tick once the parent is fine (:func:`held`).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from sqlalchemy import func, select, tuple_

from sinks.alerting.checks import rules as checkstate
from sinks.alerting.freshness import rules as freshness
from sinks.alerting.dependencies.rules import Graph, Ref, declared_refs, path_text
from fleetwatch.store import db, schema

if TYPE_CHECKING:
    from sinks.alerting.port import Port

log = logging.getLogger(__name__)

#: held checks looked at per tick, at most (the rest at the next tick)
LIMIT = 1000
#: seconds a silent host is held at most behind a parent not decided (longer than any
#: parent's host timeout should be; a parent check stuck in a SOFT problem ends it)
HOLD_MAX = 600.0


class Topology:
    """The dependency graph of one sink: the config's rules and the agents' declarations."""

    def __init__(self, every: float = 2.0, clock=time.monotonic):
        self.every, self.clock = every, clock
        self._graph = Graph()
        self._rules = None
        self._mark = None
        self._next = None

    def graph(self, conn, rules, throttle=None) -> Graph:
        rules = tuple(rules)
        now = self.clock()
        if self._next is not None and now < self._next and rules == self._rules:
            return self._graph
        self._next = now + self.every
        mark, declared = self._declared(conn, rules)
        if declared is None:
            return self._graph
        self._rules, self._mark = rules, mark
        self._graph = Graph(rules, declared)
        for cycle in self._graph.broken:
            message = ("the parents agents declared make a cycle %s: its last declared edge "
                       "is ignored")
            if throttle is not None:
                throttle.warning(f"cycle:{path_text(cycle)}", message, path_text(cycle))
            else:
                log.warning(message, path_text(cycle))
        return self._graph

    def _declared(self, conn, rules):
        """The agents' declarations, read again only when they may have changed (a HELLO
        or REGISTER of an agent that declares some moves the mark)."""
        if not db.has_tables(conn, "agents"):
            return None, {}
        t = schema.agents
        declaring = (t.c.parents.is_not(None), t.c.hostname.is_not(None))
        mark = tuple(conn.execute(select(func.count(), func.max(t.c.last_seen))
                                  .where(*declaring)).one())
        if mark == self._mark and rules == self._rules:
            return mark, None
        declared = {}
        for r in conn.execute(select(t.c.hostname, t.c.parents).where(*declaring)
                              .order_by(t.c.last_seen)):
            declared[r.hostname] = declared_refs(r.parents)[0]   # the latest agent wins
        return mark, declared


def uuids_of(conn, hostnames) -> dict[str, str]:
    """The uuid of each hostname (the agent seen last, when several carry it)."""
    hostnames = sorted(set(hostnames))
    if not hostnames or not db.has_tables(conn, "agents"):
        return {}
    t = schema.agents
    rows = conn.execute(select(t.c.hostname, t.c.uuid).where(t.c.hostname.in_(hostnames))
                        .order_by(t.c.last_seen, t.c.uuid))
    return {r.hostname: r.uuid for r in rows}


def parent_states(conn, refs) -> dict[str, freshness.Host | None]:
    """Each parent as the freshness rule sees it: a host's ``host_state`` (UNREACHABLE is
    not up either), a check's ``check_state`` (:meth:`freshness.Host.of_check`); None for a
    parent nobody has heard of (it holds nothing)."""
    refs = sorted(set(refs), key=Ref.key)
    uuids = uuids_of(conn, (r.host for r in refs))
    out: dict[str, freshness.Host | None] = {str(r): None for r in refs}
    hosts = [uuids[r.host] for r in refs if r.check is None and r.host in uuids]
    if hosts:
        known = {h.uuid: h for h in _host_rows(conn, hosts)}
        for r in refs:
            row = known.get(uuids.get(r.host)) if r.check is None else None
            if row is not None:
                out[str(r)] = freshness.Host(bool(row.up), row.last_heard, since=row.since)
    checks = [(uuids[r.host], r.check) for r in refs if r.check is not None and r.host in uuids]
    if checks:
        t = schema.check_state
        known = {(c.uuid, c.plugin): c for c in conn.execute(
            select(t.c.uuid, t.c.plugin, t.c.status, t.c.hard)
            .where(tuple_(t.c.uuid, t.c.plugin).in_(checks)))}
        for r in refs:
            row = known.get((uuids.get(r.host), r.check)) if r.check is not None else None
            if row is not None:
                out[str(r)] = freshness.Host.of_check(row.status != checkstate.OK, bool(row.hard))
    return out


def _host_rows(conn, uuids):
    t = schema.host_state
    return conn.execute(select(t.c.uuid, t.c.up, t.c.last_heard, t.c.since).where(
        t.c.name == "", t.c.last_heard > 0, t.c.uuid.in_(sorted(set(uuids)))))


class Parents:
    """The parents' states one transaction read (the children behind one parent share
    them), and the hosts UNREACHABLE, read once: what holds a host or a check back."""

    def __init__(self, port: Port, graph: Graph):
        self.port, self.graph = port, graph
        #: parents' states read in this transaction, by their references
        self.seen: dict = {}
        #: uuid -> the parent it is UNREACHABLE behind
        self.unreachable: dict[str, str] | None = None

    def _seen(self, refs) -> dict[str, freshness.Host | None]:
        """:func:`parent_states` of ``refs``, read once per transaction."""
        seen = self.seen.get(refs)
        if seen is None:
            seen = self.seen[refs] = parent_states(self.port.conn, refs)
        return seen

    def judge_host(self, uuid: str, deadline: float,
                   timeout: float = 0.0) -> tuple[str, str] | None:
        """What holds agent ``uuid``, silent past ``deadline`` (its ``timeout`` after its
        last heartbeat): ``(parent, reason)``, reason :data:`freshness.DOWN` (it is
        UNREACHABLE) or :data:`freshness.QUIET` (not judged yet); None: nothing, it is
        DOWN. Not judged is for :data:`HOLD_MAX` seconds at most (a parent check left in a
        SOFT problem by a plugin that stopped must not hold its children for ever), or,
        behind a parent that came back after the agent fell silent, until the agent has
        had its ``timeout`` since (:func:`freshness.returned`)."""
        port, graph = self.port, self.graph
        hostname = port.hostname(uuid) if graph else None
        refs = graph.parents(Ref(hostname)) if hostname else ()
        if not refs:
            return None
        seen = self._seen(refs)
        blocked = freshness.blocking(seen, deadline)
        if blocked is None:
            back = freshness.returned(seen, deadline - timeout, timeout, port.now)
            return None if back is None else (back, freshness.QUIET)
        if blocked[1] == freshness.QUIET and port.now - deadline > HOLD_MAX:
            port.warning(f"hold:{blocked[0]}", "parent %s still not decided %d s after a "
                         "child's deadline: the child is judged without it", blocked[0],
                         HOLD_MAX)
            return None
        return blocked

    def check_blocker(self, key: tuple[str, str]) -> str | None:
        """The parent holding check ``key``'s problem alerts back: its host's, when the host
        is UNREACHABLE; else the first parent check in a HARD problem; None when none."""
        port, graph = self.port, self.graph
        if not graph:
            return None
        uuid, plugin = key
        if self.unreachable is None:
            t = schema.host_state
            self.unreachable = dict(port.conn.execute(select(t.c.uuid, t.c.unreachable).where(
                t.c.name == "", t.c.unreachable.is_not(None))).all())
        parent = self.unreachable.get(uuid)
        if parent is not None:
            return parent
        hostname = port.hostname(uuid)
        refs = graph.parents(Ref(hostname, plugin)) if hostname else ()
        if not refs:
            return None
        for ref, host in sorted(self._seen(refs).items()):
            if freshness.held(host, port.now) == freshness.DOWN:
                return ref
        return None


def held(port: Port) -> list[tuple[str, str]]:
    """The tick's pass: the checks a parent held back (``check_state.unreachable``), read
    without a lock; those whose parent is fine again get their owed alert now, not at their
    next result (:meth:`sinks.alerting.evaluation.Evaluation.owed`), one across every
    alerting sink (under the check locks)."""
    conn = port.conn
    if not port.graph() or not db.has_tables(conn, "check_state"):
        return []
    t = schema.check_state
    return [(r.uuid, r.plugin) for r in conn.execute(
        select(t.c.uuid, t.c.plugin).where(t.c.unreachable.is_not(None))
        .order_by(t.c.updated).limit(LIMIT))]
