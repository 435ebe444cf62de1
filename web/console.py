"""What the console shows, read through the query layer (:mod:`query`): the pages' data.

Each page reads its own scope of the state database (:mod:`query.pages` picks it in SQL,
:mod:`query.fleet` reads and judges it, as ``fleetwatch status`` does), so a page of a fleet
of 10,000 hosts costs its own rows, not the fleet's. The overview and the lists (problems,
checks, hosts, alerts, and the API's) read theirs in SQL (:mod:`query.problems`), each kept
a ``web.refresh`` period and read ahead of the open pages that ask for it. The routers are
asked for their health only (PEERS with ``limit`` 0: reachable, agents attached, sinks
connected, durable routes), at most every :data:`ROUTERS_TTL` seconds whatever the number of
open pages; a host's ``alive`` is therefore unknown (None) here, and its ``state`` (UP,
DOWN, UNREACHABLE, GONE: the alerting sinks' judgement) says what the console knows.

A database that cannot be read makes a page with a warning (``warnings``), never an error
page; what the routers did not answer is said in their table.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from fleetwatch import durability
from fleetwatch.actions.console import Refused
from query import faults, fleet, pages, problems, tactical, versions
from web import auth, tiles

log = logging.getLogger(__name__)

#: seconds the routers' health is kept before they are asked again
ROUTERS_TTL = 5.0
#: unhandled problems the overview lists (the problems page has them all)
OVERVIEW_PROBLEMS = 50
#: the lists of open pages read ahead each period at most (Console._warm_lists)
WARM_LISTS = 8
#: rows of one page of the hosts and problems pages
PAGE_ROWS = 100
#: problem lists (a filter, a page) kept for their period (Console.problem_list)
LISTS_KEPT = 64


class Console:
    """What the application's handlers share: the operator config, the state database's
    engine, the login limiter and the pool passwords are checked in (``hashes``), how the
    routers are asked (``ask_routers()`` -> their answers to PEERS with ``limit`` 0), what
    an operator may change and the lists the commands make (``actions``: ``ack``,
    ``end_ack``, ``acks``, ``run_check``, ``alerts``, ``downtimes``, ``downtime``,
    ``end_downtime``, raising :class:`Refused`), the fleet's
    own counters (``health``: a started :class:`web.health.Health`, or None) and clocks.
    The command line (fleetwatch/cli/web.py) gives the callables; ``actions`` is
    :class:`fleetwatch.actions.console.Actions`, the same functions ``fleetwatch ack``,
    ``run`` and ``downtime`` call."""

    def __init__(self, config, engine, ask_routers: Callable[[], list], actions=None,
                 health=None, clock=time.time, monotonic=time.monotonic):
        self.config, self.engine, self.clock, self.monotonic = config, engine, clock, monotonic
        self.ask_routers, self.actions, self.health = ask_routers, actions, health
        settings = config.web
        self.limiter = auth.LoginLimiter(settings.login_attempts, settings.login_lockout,
                                         monotonic, per_address=settings.login_address_attempts)
        #: where passwords are checked: threads of their own, a bounded number at once
        self.hashes = auth.HashPool(settings.login_hashes, 8 * settings.login_hashes)
        self._routers: tuple[float, dict] | None = None
        self._routers_lock = threading.Lock()
        #: seconds a reading serves (web.refresh; 10 when pages do not update)
        self.every = float(settings.refresh) if getattr(settings, "refresh", 0) else 10.0
        #: the problem lists read lately: (filter, offset, limit) -> (when, the list)
        self._lists: OrderedDict[tuple, tuple[float, dict]] = OrderedDict()
        self._lists_lock = threading.Lock()
        #: when each kept list was last asked for (the open pages' lists are read ahead)
        self._lists_asked: dict[tuple, float] = {}
        #: the lists a page is reading now (not read ahead meanwhile: the same reading twice
        #: at once, each slowing the other down)
        self._lists_reading: set[tuple] = set()
        #: the overview's counts (:meth:`tally`): (when, the counts)
        self._tally: tuple[float, dict] | None = None
        self._asked: float | None = None

    # ------------------------------------------------------------ reading
    def read(self, fn, warnings: list[str], default, **kwargs):
        """``fn(connection, **kwargs)`` on the state database; ``default`` (and a line in
        ``warnings``) when it cannot be read."""
        from sqlalchemy.exc import SQLAlchemyError
        try:
            with self.engine.connect() as conn:
                return fn(conn, **kwargs)
        except SQLAlchemyError as e:
            line = (str(e).splitlines() or [""])[0]
            warnings.append(f"cannot read the state database: {e.__class__.__name__}: {line}")
            return default

    def view(self, uuids, pairs=None, warnings: list[str] | None = None) -> dict:
        """Agents, checks and problems of a scope (:func:`query.fleet.read`)."""
        now = self.clock()
        rows = self.read(fleet.read, warnings if warnings is not None else [], fleet.Rows(),
                         now=now, uuids=uuids, pairs=pairs)
        return fleet.assemble(rows, now)

    def routers(self) -> dict:
        """``routers`` (endpoint, id, reachable, problem, known, version, agents, sinks: of
        the mesh, :func:`fleetwatch.ask.ask_mesh`), the fleet's ``durability`` and the
        routers' and sinks' faults (``router_faults``: :func:`query.faults.of_routers`),
        asked at most every :data:`ROUTERS_TTL` seconds."""
        with self._routers_lock:
            if self._routers is not None and self.monotonic() - self._routers[0] < ROUTERS_TTL:
                return self._routers[1]
            answers = self.ask_routers()
            routers = []
            for a in answers:
                peers = a.get("PEERS")
                routers.append({"endpoint": a.endpoint, "id": a.router_id,
                                "reachable": a.reachable, "problem": a.problem or None,
                                "known": a.known, "version": versions.of_answer(a),
                                "agents": peers.get("total") if peers else None,
                                "sinks": peers.get("sinks") if peers else None})
            found = {"routers": routers, "durability": durability.assess(answers),
                     "router_faults": faults.of_routers(answers, self._declares_checks())}
            self._routers = (self.monotonic(), found)
            return found

    # ------------------------------------------------------------ kept readings
    def changed(self) -> None:
        """Something was changed through this console (an acknowledgement, a downtime): the
        next page reads the fleet again."""
        with self._lists_lock:
            self._lists.clear()
            self._lists_asked.clear()
        self._tally = None

    def refresh(self, stop: threading.Event, idle: float | None = None) -> None:
        """Keep the overview's counts and the open pages' lists fresh while pages are being
        asked (one asked in the last ``idle`` seconds: three periods by default), until
        ``stop``: read again a little before they are :attr:`every` seconds old. A thread of
        the serving process."""
        idle = 3 * self.every if idle is None else idle
        while not stop.wait(min(0.5, self.every / 4)):
            if self._asked is None or self.monotonic() - self._asked > idle:
                continue
            try:
                if self._tally is not None and self._due(self._tally):
                    # the overview's counts and list, as its next page asks for them
                    self.tally(fresh=True)
                    self.problem_list(problems.Filter(), 0, OVERVIEW_PROBLEMS, fresh=True)
                self._warm_lists(idle)
            except Exception:       # a page reads it itself, and says what failed
                log.exception("reading the fleet ahead failed")

    def _warm_lists(self, idle: float) -> None:
        """Read again, ahead of their pages, the lists asked for in the last ``idle``
        seconds (open pages updating themselves) that are due: at most
        :data:`WARM_LISTS`, the latest asked first, so that a page does not wait for a
        list's first reading (0.4 s for every check of 50,000). The others are forgotten;
        a list a page is reading, or has read since, is not read again."""
        now = self.monotonic()
        with self._lists_lock:
            for key in [k for k, t in self._lists_asked.items()
                        if now - t > idle or k not in self._lists]:
                del self._lists_asked[key]
            open_ = sorted(self._lists_asked, key=self._lists_asked.get,
                           reverse=True)[:WARM_LISTS]
        for key in open_:
            with self._lists_lock:     # judged as each comes: a page may have read it since
                kept = self._lists.get(key)
                if key in self._lists_reading or kept is None or not self._due(kept):
                    continue
            if key[0] == "alerts":
                self.alert_list(*key[1:], fresh=True)
            elif key[0] == "hosts":
                self.hosts(*key[1:], fresh=True)
            else:
                self.problem_list(*key, fresh=True)

    def _due(self, kept: tuple[float, dict]) -> bool:
        """Whether a reading kept since ``kept[0]`` is to be read again ahead of a page."""
        return self.monotonic() - kept[0] >= 0.8 * self.every

    # ------------------------------------------------------------ the pages' data
    def fleet_faults(self, routers: dict | None = None) -> list[dict]:
        """The fleet's own faults, worst first (:mod:`query.faults`): routers not answering,
        sink types without a sink, site links lost and schedulers silent (the routers'
        answers), alert channels failing (the state database), and sites whose uplink is
        down and schedulers silent as the STATS :mod:`web.health` follows tell them."""
        from fleetwatch.store import reads
        found = list((routers or self.routers())["router_faults"])
        found += faults.of_channels(self.read(reads.channels, [], []))   # (a few rows)
        if self.health is not None:
            found += faults.of_health(self.health.snapshot(), self.clock(),
                                      self._declares_checks())
        return faults.ordered(found)

    def _declares_checks(self) -> bool:
        """Whether the fleet declares any check, as last counted (True before a count)."""
        return True if self._tally is None else bool(self._tally[1]["checks"])

    def overview(self) -> dict:
        """Hosts and checks by state, the fleet's own faults (``fleet``), the tactical
        summary of both (``tactical``: :func:`query.tactical.summary`), the unhandled
        problems (the first :data:`OVERVIEW_PROBLEMS`), how many are handled, the
        routers. Counted and listed in SQL (:meth:`tally`, :meth:`problem_list`): what it
        reads does not grow with the problems."""
        self._asked = self.monotonic()
        tally = self.tally()
        listing = self.problem_list(problems.Filter(), 0, OVERVIEW_PROBLEMS)
        routers = self.routers()
        found = self.fleet_faults(routers)
        split = tally["split"]
        problem_count = sum(u + h for u, h in split.values())
        unhandled = sum(u for u, _ in split.values())
        return {"hosts": tally["hosts"], "checks": tally["checks"],
                "read_at": tally["read_at"], "read_ms": tally["read_ms"] + listing["read_ms"],
                "unhandled": listing["rows"], "unhandled_count": listing["total"],
                "handled_count": problem_count - unhandled,
                "warnings": list(dict.fromkeys(tally["warnings"] + listing["warnings"])),
                **routers, "fleet": found,
                "tactical": tactical.summary(tally["hosts"], tally["checks"], split, found,
                                             routers["routers"])}

    def tally(self, fresh: bool = False) -> dict:
        """Hosts and checks counted by state and the problems by (kind, state) split into
        unhandled and handled (:func:`query.problems.counts`): ``hosts``, ``checks``,
        ``split``, ``read_at``, ``read_ms``, ``warnings``; read again when older than
        :attr:`every` seconds, as the lists are (``fresh``: now, ahead of a page)."""
        kept = self._tally
        if not fresh and kept is not None and self.monotonic() - kept[0] < self.every:
            return kept[1]
        started, now = self.monotonic(), self.clock()
        warnings: list[str] = []
        hosts = self.read(pages.host_counts, warnings, {}, now=now)
        checks = self.read(pages.check_counts, warnings, {})
        split = self.read(problems.counts, warnings, {}, now=now)
        found = {"hosts": _ordered(hosts, pages.HOST_STATES),
                 "checks": _ordered(checks, pages.CHECK_STATES), "split": split,
                 "read_at": now, "read_ms": round((self.monotonic() - started) * 1000, 1),
                 "warnings": warnings}
        if not warnings:
            self._tally = (started, found)
        return found

    def problem_list(self, f: problems.Filter, offset: int = 0, limit: int = PAGE_ROWS,
                     fresh: bool = False) -> dict:
        """The ``limit`` problems from ``offset`` that ``f`` shows, filtered, sorted,
        grouped and cut in SQL (:func:`query.problems.listed`): ``rows``, ``total``,
        ``groups``, ``page`` (of pages of ``limit``), ``pages``, ``read_at``, ``read_ms``,
        ``warnings``. A list read in the last :attr:`every` seconds (``web.refresh``) is
        served again: the open pages of one view, updating
        every period, cost one reading a period, whatever their number (the latest
        :data:`LISTS_KEPT` views are kept; a change made here forgets them). ``fresh``:
        read now (a bulk change to all a filter matches)."""
        return self._kept((f, offset, limit), lambda: self._read_list(f, offset, limit),
                          fresh, lambda found: not found["warnings"])

    def alert_list(self, f, offset: int = 0, limit: int = PAGE_ROWS,
                   fresh: bool = False) -> tuple[list[dict], int]:
        """The alerts the filter ``f`` shows (:class:`query.alerts.AlertFilter`) from
        ``offset``, and how many match, as :meth:`fleetwatch.actions.console.Actions.alerts`
        reads them; served again for :attr:`every` seconds, as the problem lists are
        (Refused when the database cannot be read)."""
        return self._kept(("alerts", f, offset, limit),
                          lambda: self.actions.alerts(limit, None, f, offset), fresh)

    def _kept(self, key: tuple, read, fresh: bool, keep=lambda found: True):
        """A list kept under ``key``: served again while younger than :attr:`every`
        seconds, else ``read()`` and kept when ``keep(found)`` (not a reading that
        failed), the latest :data:`LISTS_KEPT` of them; ``fresh``: read now. Each asking
        is remembered (:meth:`_warm_lists` reads an open page's list ahead), when asked
        and again when answered: a first reading is long."""
        if not fresh:
            with self._lists_lock:
                self._lists_asked[key] = self._asked = self.monotonic()
                kept = self._lists.get(key)
                if kept is not None and self.monotonic() - kept[0] < self.every:
                    self._lists.move_to_end(key)
                    return kept[1]
                self._lists_reading.add(key)
        try:
            found = read()
        finally:
            if not fresh:
                with self._lists_lock:
                    self._lists_reading.discard(key)
        if keep(found):
            with self._lists_lock:
                if not fresh:
                    self._lists_asked[key] = self._asked = self.monotonic()
                self._lists[key] = (self.monotonic(), found)
                self._lists.move_to_end(key)
                while len(self._lists) > LISTS_KEPT:
                    self._lists.popitem(last=False)
        return found

    def _read_list(self, f: problems.Filter, offset: int, limit: int) -> dict:
        warnings: list[str] = []
        started, now = self.monotonic(), self.clock()
        found = self.read(problems.listed, warnings, problems.Page([], 0, {}), now=now, f=f,
                          offset=offset, limit=limit)
        return {"rows": found.rows, "total": found.total, "groups": found.groups,
                "page": offset // limit, "pages": max(1, -(-found.total // limit)),
                "read_at": now,
                "read_ms": round((self.monotonic() - started) * 1000, 1),
                "warnings": warnings}

    def host(self, uuid: str) -> dict | None:
        """One agent (None: not in the fleet), its checks, its problems, its routers."""
        warnings: list[str] = []
        found = self.view([uuid], warnings=warnings)
        if not found["agents"]:
            return None
        return {"agent": found["agents"][0], "checks": found["checks"],
                "problems": found["problems"], "unhandled": found["unhandled"],
                "warnings": warnings}

    def hosts(self, search: str = "", state: str | None = None, parent: str | None = None,
              page: int = 0, sort: str = "hostname", site: str | None = None,
              handled: str = "all", fresh: bool = False) -> dict:
        """One page (:data:`PAGE_ROWS`) of agents in the order ``sort``
        (:data:`query.pages.HOST_SORTS`): matching ``search`` (text or a glob), in host
        ``state``, declaring ``parent``, behind ``site``, ``handled`` or not; each with its
        checks' states counted: ``agents``, ``total``, ``page``, ``pages``, ``read_at``,
        ``read_ms``, ``warnings``. Kept and read ahead as the problem lists are
        (:meth:`problem_list`)."""
        key = ("hosts", search, state, parent, page, sort, site, handled)
        return self._kept(key, lambda: self._read_hosts(*key[1:]), fresh,
                          lambda found: not found["warnings"])

    def _read_hosts(self, search: str, state: str | None, parent: str | None, page: int,
                    sort: str, site: str | None, handled: str) -> dict:
        warnings: list[str] = []
        started = self.monotonic()
        now = self.clock()
        uuids, total = self.read(problems.hosts, warnings, ([], 0), now=now,
                                 search=search, state=state, parent=parent, site=site,
                                 offset=page * PAGE_ROWS, limit=PAGE_ROWS, sort=sort,
                                 handled=handled)
        found = self.view(uuids, (), warnings) if uuids else {"agents": []}
        counts = self.read(pages.check_counts_of, warnings, {}, uuids=uuids)
        order = {u: i for i, u in enumerate(uuids)}
        agents = sorted(found["agents"], key=lambda a: order.get(a["uuid"], 0))
        for agent in agents:
            agent["checks"] = _ordered(counts.get(agent["uuid"], {}), pages.CHECK_STATES)
        return {"agents": agents, "total": total, "page": page,
                "pages": max(1, -(-total // PAGE_ROWS)), "read_at": now,
                "read_ms": round((self.monotonic() - started) * 1000, 1), "warnings": warnings}

    def sites(self) -> dict:
        """The sites the agents are behind, each with its agents' states counted."""
        return self._host_groups("sites", pages.sites)

    def parents(self) -> dict:
        """The parents the agents declared, each with its agents' states counted."""
        return self._host_groups("parents", pages.parents)

    def _host_groups(self, name: str, read) -> dict:
        """``{name: the groups read (one GROUP BY), warnings}``, each group's host states
        in the order the console lists them."""
        warnings: list[str] = []
        groups = self.read(read, warnings, [], now=self.clock())
        for group in groups:
            group["states"] = _ordered(group["states"], pages.HOST_STATES)
        return {name: groups, "warnings": warnings}

    def fleet_health(self) -> dict:
        """The health page: the routers' answers, the latest counters of every router, sink
        and scheduler (their non-zero ``problems``: drops, refusals, errors), the routers'
        drops per agent and the agents that dropped (:mod:`web.health`), hostnames added."""
        view = {**self.routers(), "warnings": []}
        if self.health is None:
            view["warnings"].append("the routers' tails are not followed: no counters")
            faults = self.fleet_faults(view)
            return {**view, "fleet": faults,
                    "tiles": tiles.tiles(view["routers"], faults, None)}
        found = self.health.snapshot()
        for process in found["router_stats"] + found["sinks"] + found["schedulers"]:
            process["problems"] = {k: v for k, v in sorted(process["metrics"].items())
                                   if v and tiles.is_problem(k)}
            process["shown"] = {k: v for k, v in sorted(process["metrics"].items()) if v}
        uuids = sorted({d["uuid"] for d in found["router_drops"]}
                       | {a["uuid"] for a in found["agents"]})
        names = {}
        if uuids:
            from fleetwatch.store import reads
            names = {r["uuid"]: r.get("hostname") for r in
                     self.read(reads.agents, view["warnings"], [], uuids=uuids)}
        for row in found["router_drops"] + found["agents"]:
            row["hostname"] = names.get(row["uuid"]) or row.get("hostname")
        if not found["connected"]:
            view["warnings"].append("no router's tail reached yet: counters come with the "
                                    "next STATS once one is")
        faults = self.fleet_faults(view)
        return {**view, **found, "fleet": faults,
                "tiles": tiles.tiles(view["routers"], faults, found)}

    # ------------------------------------------------------------ the API's lists
    def host_list(self, after: str, limit: int, state: str | None, search: str,
                  handled: str = "all") -> dict:
        """Agents in uuid order after the cursor ``after``: ``items``, ``next``."""
        warnings: list[str] = []
        uuids, _ = self.read(problems.hosts, warnings, ([], 0), now=self.clock(), search=search,
                             state=state, after=after, limit=limit + 1, by_name=False,
                             handled=handled, count=False)
        found = self.view(uuids[:limit], (), warnings) if uuids else {"agents": []}
        items = sorted(found["agents"], key=lambda a: a["uuid"])
        _unavailable(warnings)
        return {"items": items, "next": items[-1]["uuid"] if len(uuids) > limit and items
                else None}

    def check_list(self, after: str, limit: int, uuid: str | None, state: str | None) -> dict:
        """Checks in (uuid, plugin) order after the cursor ``after`` (``UUID/PLUGIN``):
        ``items``, ``next``."""
        warnings: list[str] = []
        cursor = tuple(after.split("/", 1)) if "/" in after else None
        pairs = self.read(pages.checks, warnings, [], now=self.clock(), uuid=uuid,
                          state=state, after=cursor, limit=limit + 1)
        shown = pairs[:limit]
        found = self.view(sorted({u for u, _ in shown}), shown, warnings) if shown \
            else {"checks": []}
        items = sorted(found["checks"], key=lambda c: (c["uuid"], c["plugin"]))
        _unavailable(warnings)
        return {"items": items, "next": f"{items[-1]['uuid']}/{items[-1]['plugin']}"
                if len(pairs) > limit and items else None}

    def listed(self, fn, **kwargs) -> list[dict]:
        """A reader of :mod:`fleetwatch.store.reads` (acknowledgements, silences), its rows; 503
        when the database cannot be read."""
        warnings: list[str] = []
        rows = self.read(fn, warnings, [], **kwargs)
        _unavailable(warnings)
        return rows


def _ordered(counts: dict[str, int], order: tuple[str, ...]) -> list[tuple[str, int]]:
    """(state, count) in ``order``, then any other state by name; none of count 0."""
    rank = {name: i for i, name in enumerate(order)}
    return sorted(((k, v) for k, v in counts.items() if v),
                  key=lambda kv: (rank.get(kv[0], len(order)), kv[0]))


def _unavailable(warnings: list[str]) -> None:
    if warnings:
        raise Refused(warnings[0], 503)
