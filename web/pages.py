"""The console's pages: the overview, problems, hosts, one host, the fleet's own health,
alerts, acknowledgements, downtimes, and the forms that acknowledge (and remove an
acknowledgement), schedule a downtime and run a check.

Each page reads what it shows through :class:`web.console.Console` (one scope of the state
database: a page of a fleet of 10,000 hosts reads its own rows) and renders it on the server.
A page asked without a session redirects to ``/login``; a form's POST needs its CSRF token
and a role that allows it: each handler declares who may ask (:class:`web.asking.Asking`)
and reaches the console through ``web: Shared`` (:mod:`web.context`). Logging in and out:
:mod:`web.login`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from fleetwatch.graphs.host import host_graphs
from query import problems
from query.alerts import KNOWN, AlertFilter
from query.pages import HOST_SORTS
from web import auth, store
from web.asking import Asking
from web.console import PAGE_ROWS, Refused
from web.context import Shared, Web

#: a host's recent alerts its page lists
HOST_ALERTS = 20
#: the ranges a host page's graphs offer, in seconds
RANGES = {"1h": 3600, "6h": 6 * 3600, "1d": 86400, "7d": 7 * 86400}
#: the host states the hosts page filters by
HOST_FILTERS = ("DOWN", "UNREACHABLE", "UP", "UNKNOWN", "GONE")
#: the handled problems the problems page splits into its sections, at most (more: the
#: sections count the first ones, and say so)
HANDLED_READ = 1000
#: the problems page's sections: (id, heading, which handled problems it lists)
SECTIONS = (("acknowledged", "Acknowledged", lambda h: bool(h.get("ack"))),
            ("downtime", "In downtime", lambda h: not h.get("ack") and bool(h.get("downtime"))),
            ("unreachable", "Unreachable or on a host down",
             lambda h: not h.get("ack") and not h.get("downtime")
             and bool(h.get("unreachable") or h.get("host"))))


def back_to(value) -> str:
    """Where a form returns to: a path of this console, else the overview."""
    back = str(value or "/")
    return back if back.startswith("/") and not back.startswith("//") else "/"


def _or_error(fn, empty, *args):
    """(``fn(*args)``, None), or (``empty``, what refused it): a page says why it is empty."""
    try:
        return fn(*args), None
    except Refused as e:
        return empty, str(e)


def status_of(e: Exception) -> int:
    """The status a form's refusal answers with: the API's for it (404: nothing running by
    that id; 503: no database), 422 for a value that is not one (ValueError)."""
    return e.status if isinstance(e, Refused) else 422



#: who may ask for a page: anyone logged in
Reader = Annotated[store.Who, Depends(Asking(page=True))]
#: who may post each form (its CSRF token, then their role)
Acker = Annotated[store.Who, Depends(Asking("ack", "acknowledge", page=True))]
Remover = Annotated[store.Who, Depends(Asking("ack", "remove acknowledgements", page=True))]
Runner = Annotated[store.Who, Depends(Asking("run", "run checks", page=True))]
Scheduler = Annotated[store.Who, Depends(Asking("downtime", "schedule downtimes", page=True))]

router = APIRouter(include_in_schema=False)


def refused_page(web: Web, request: Request, found: store.Who, e: Exception, back: str):
    """A form's change refused: the page saying why, and where to go back to."""
    return web.page(request, "refused.html", status_of(e), who=found, error=str(e), back=back)


# ---------------------------------------------------------------- the fleet
@router.get("/", response_class=HTMLResponse)
def overview(request: Request, web: Shared, found: Reader):
    return web.page(request, "overview.html", who=found, view=web.console.overview(),
                    may_ack=auth.allows(found.role, "ack"))


@dataclass(frozen=True)
class Listed:
    """What a list page's URL asks (:mod:`query.problems`): the filter, the page, the
    filter's error (the filter not applied), the view's own URL (``here``), or a redirect
    to it."""
    f: problems.Filter | AlertFilter
    page: int
    error: str | None
    here: str
    redirect: RedirectResponse | None


def listed_view(request: Request, path: str, kind: type[problems.Filter] | type[AlertFilter],
                page: int) -> Listed:
    """The filter of ``kind`` the URL's query says, on ``path``. The form sends its empty
    fields too: the view's URL is the filter's own, short and the same however it was
    asked (a bookmark, a link, the form), so anything else is redirected to it."""
    try:
        f, error = kind.parse(request.query_params), None
    except ValueError as e:
        f, error = kind(), str(e)
    page = max(0, min(page, 10**6))
    query = f.query() + ([("page", str(page))] if page else [])
    here = path + ("?" + urlencode(query) if query else "")
    moved = error is None and list(request.query_params.multi_items()) != query
    return Listed(f, page, error, here, RedirectResponse(here, 303) if moved else None)


@router.get("/problems", response_class=HTMLResponse)
def problems_page(request: Request, web: Shared, found: Reader, page: int = 0):
    """The problems the URL's filter shows (the unhandled ones by default), sorted,
    grouped and paged in SQL (:mod:`query.problems`); unfiltered, the handled ones below
    in a section per reason."""
    asked = listed_view(request, "/problems", problems.Filter, page)
    if asked.redirect:
        return asked.redirect
    f, page = asked.f, asked.page
    listing = web.console.problem_list(f, page * PAGE_ROWS)
    sections, held = [], None
    if not f.narrowed:
        # the handled problems, worst first, as the handled list reads them (in SQL, kept
        # a period as every list is), split by why they are handled
        held = web.console.problem_list(problems.Filter(handled="yes"), 0, HANDLED_READ)
        for key, title, test in SECTIONS:
            rows = [p for p in held["rows"] if test(p["handled"] or {})]
            sections.append((key, title, rows[:PAGE_ROWS], len(rows)))
    return web.page(request, "problems.html", who=found, listing=listing, f=f,
                    filter_error=asked.error, fleet=web.console.fleet_faults(),
                    sections=sections, held=held, states=problems.STATES,
                    groups=problems.GROUPS, back=asked.here,
                    may_ack=auth.allows(found.role, "ack"))


@router.get("/checks", response_class=HTMLResponse)
def checks_page(request: Request, web: Shared, found: Reader, page: int = 0):
    """Every declared check the URL's filter shows (all by default, OK too), sorted,
    grouped and paged in SQL as the problems are (:class:`query.problems.CheckFilter`)."""
    asked = listed_view(request, "/checks", problems.CheckFilter, page)
    if asked.redirect:
        return asked.redirect
    listing = web.console.problem_list(asked.f, asked.page * PAGE_ROWS)
    return web.page(request, "checks.html", who=found, listing=listing, f=asked.f,
                    filter_error=asked.error, states=problems.CHECK_STATES,
                    groups=problems.GROUPS, back=asked.here,
                    may_ack=auth.allows(found.role, "ack"))


@router.get("/hosts", response_class=HTMLResponse)
def hosts_page(request: Request, web: Shared, found: Reader, q: str = "", state: str = "",
               parent: str = "", group: str = "", page: int = 0, sort: str = "hostname",
               site: str | None = None, handled: str = "all"):
    """The hosts by name (or ``sort``), searched (text or a glob), filtered by state,
    handling, parent and site; ``group=parent`` and ``group=site`` list the groups with
    their hosts' states."""
    q, parent, site = q[:255], parent[:255], None if site is None else site[:255]
    state = state.upper() if state.upper() in HOST_FILTERS else ""
    handled = handled if handled in problems.HANDLED else "all"
    sort = sort if sort.lstrip("-") in HOST_SORTS else "hostname"
    if group == "parent":
        return web.page(request, "parents.html", who=found, view=web.console.parents())
    if group == "site":
        return web.page(request, "sites.html", who=found, view=web.console.sites())
    view = web.console.hosts(q, state or None, parent or None, max(0, min(page, 10**6)),
                             sort, site, handled)
    return web.page(request, "hosts.html", who=found, view=view, q=q, state=state,
                    parent=parent, site=site, states=HOST_FILTERS, sort=sort,
                    sorts=HOST_SORTS, handled=handled)


@router.get("/hosts/{uuid}", response_class=HTMLResponse)
def host_page(request: Request, web: Shared, found: Reader, uuid: str, range: str = "1h"):
    console = web.console
    view = console.host(uuid[:64])
    if view is None:
        return web.page(request, "missing.html", 404, who=found,
                        what=f"no host {uuid[:64]} in the fleet")
    agent = view["agent"]
    span = GraphSpan.of(request, range, console.clock())
    start, end = span.start, span.end
    # an open page's update keeps the graphs it has (hx-preserve): Graphite is asked
    # when the page is loaded, not every web.refresh seconds
    graphs = {"status": "kept", "message": "", "graphs": []} \
        if request.headers.get("hx-request") else \
        host_graphs(getattr(console.config, "graphite", None),
                    agent.get("hostname") or uuid, end - start, now=end,
                    units=perfdata_units(view["checks"]))
    (alerts, total), error = _or_error(console.actions.alerts, ([], 0), HOST_ALERTS,
                                       agent["uuid"])
    return web.page(request, "host.html", who=found, view=view, agent=agent,
                    alerts=alerts, alerts_total=total, alerts_error=error,
                    checks=view["checks"], problems=view["unhandled"], graphs=graphs,
                    span=span, may_ack=auth.allows(found.role, "ack"),
                    may_run=auth.allows(found.role, "run"))


#: the longest custom range of a host page's graphs
RANGE_MAX = 90 * 86400


@dataclass(frozen=True)
class GraphSpan:
    """The time range of a page's graphs, from its URL: a preset (``range``: 1h, 6h, 1d,
    7d) or ``from`` and ``until`` (UTC); what was asked (to show it again), the range
    drawn, and why what was asked is not (the preset's range drawn instead)."""
    preset: str
    custom: dict
    start: float
    end: float
    error: str | None = None
    ranges: tuple = tuple(RANGES)

    @classmethod
    def of(cls, request: Request, preset: str, now: float) -> "GraphSpan":
        preset = preset if preset in RANGES else "1h"
        custom = {"from": str(request.query_params.get("from", ""))[:32],
                  "until": str(request.query_params.get("until", ""))[:32]}
        try:
            start, end = graph_range(custom, RANGES[preset], now)
        except ValueError as e:
            return cls(preset, custom, now - RANGES[preset], now, str(e))
        return cls("" if custom["from"] else preset, custom, start, end)


def graph_range(custom: dict, preset: float, now: float) -> tuple[float, float]:
    """The graphs' (start, end): ``from`` and ``until`` (``YYYY-MM-DDTHH:MM``, UTC, as a
    datetime-local field sends them; ``until`` empty: now) when given, else the last
    ``preset`` seconds; ValueError saying what is wrong with them."""
    from datetime import datetime, timezone
    if not custom["from"]:
        return now - preset, now

    def stamp(name: str) -> float:
        try:
            return datetime.fromisoformat(custom[name]).replace(
                tzinfo=timezone.utc).timestamp()
        except ValueError:
            raise ValueError(f"{name}: expected a date and time like 2026-12-01T09:30 "
                             f"(UTC)") from None
    start = stamp("from")
    end = stamp("until") if custom["until"] else now
    if end <= start:
        raise ValueError("the range ends before it starts: until must come after from")
    if end - start > RANGE_MAX:
        raise ValueError(f"a range of at most {RANGE_MAX // 86400} days")
    return start, end


def perfdata_units(checks: list[dict]) -> dict[str, str]:
    """Each perfdata series' unit (``checks.PLUGIN.LABEL`` as the graphite sink names it ->
    its uom), from the checks' latest results: what puts a check's graphs in one unit."""
    from fleetwatch.metricpath import node
    out = {}
    for check in checks:
        for item in check.get("perfdata") or ():
            if isinstance(item, dict) and isinstance(item.get("label"), str) \
                    and isinstance(item.get("uom") or "", str):
                out[f"checks.{node(check['plugin'])}.{node(item['label'])}"] = \
                    item.get("uom") or ""
    return out


@router.get("/health", response_class=HTMLResponse)
def health_page(request: Request, web: Shared, found: Reader):
    return web.page(request, "health.html", who=found, view=web.console.fleet_health())


# ---------------------------------------------------------------- acknowledge, run
@router.post("/ack")
async def ack_form(request: Request, web: Shared, found: Acker):
    form = await request.form()
    host = str(form.get("host", ""))[:255]
    check = str(form.get("check", ""))[:255] or None
    try:
        await run_in_threadpool(web.acknowledge, found, host, check,
                                str(form.get("comment", ""))[:1000],
                                force=bool(form.get("force")))
    except (Refused, ValueError) as e:
        return refused_page(web, request, found, e, back_to(form.get("back")))
    return RedirectResponse(back_to(form.get("back")), status_code=303)


@router.get("/acks", response_class=HTMLResponse)
def acks_page(request: Request, web: Shared, found: Reader):
    rows, error = _or_error(web.console.actions.acks, [])
    return web.page(request, "acks.html", who=found, acks=rows, error=error,
                    may=auth.allows(found.role, "ack"))


@router.post("/acks")
async def ack_remove_form(request: Request, web: Shared, found: Remover):
    form = await request.form()
    try:
        await run_in_threadpool(web.end_ack, found, int(str(form.get("remove"))))
    except (Refused, ValueError) as e:
        return refused_page(web, request, found, e, "/acks")
    return RedirectResponse("/acks", status_code=303)


@router.post("/run", response_class=HTMLResponse)
async def run_form(request: Request, web: Shared, found: Runner):
    form = await request.form()
    host, plugin = str(form.get("host", ""))[:255], str(form.get("plugin", ""))[:255]
    try:
        result, error = await run_in_threadpool(web.run_check, found, host, plugin), None
    except Refused as e:
        result, error = None, str(e)
    return web.page(request, "ran.html", who=found, host=host, plugin=plugin,
                    result=result, error=error)


# ---------------------------------------------------------------- alerts, downtimes
@router.get("/alerts", response_class=HTMLResponse)
def alerts_page(request: Request, web: Shared, found: Reader, page: int = 0):
    """The alerts the URL's filter shows (all by default), the newest first, 100 a page;
    filtered, sorted and paged in SQL (:mod:`query.alerts`)."""
    asked = listed_view(request, "/alerts", AlertFilter, page)
    if asked.redirect:
        return asked.redirect
    (rows, total), error = _or_error(web.console.alert_list, ([], 0), asked.f,
                                     asked.page * PAGE_ROWS)
    listing = {"page": asked.page, "pages": max(1, -(-total // PAGE_ROWS))}
    return web.page(request, "alerts.html", who=found, alerts=rows, total=total, error=error,
                    f=asked.f, filter_error=asked.error, listing=listing,
                    severities=KNOWN)


@router.get("/alerts/{event_id}", response_class=HTMLResponse)
def alert_page(request: Request, web: Shared, found: Reader, event_id: int):
    """One alert: what it said, its delivery per channel, and every attempt to send it
    with what the service answered (the ``deliveries`` table: proof that it went out)."""
    (alert, tried), error = _or_error(web.console.actions.alert, (None, []), event_id)
    if alert is None and error is None:
        return web.page(request, "missing.html", 404, who=found,
                        what=f"No alert {event_id}: the state database keeps an alert for "
                             "alerting.delivery.keep (30 days by default), the lake for good.")
    return web.page(request, "alert.html", who=found, alert=alert, tried=tried, error=error)


def downtimes_view(web: Web, request: Request, found: store.Who, status: int = 200,
                   form_error: str | None = None, typed: dict | None = None):
    rows, error = _or_error(web.console.actions.downtimes, [])
    return web.page(request, "downtimes.html", status, who=found, downtimes=rows,
                    error=error, may=auth.allows(found.role, "downtime"),
                    form_error=form_error, typed=typed or {})


@router.get("/downtimes", response_class=HTMLResponse)
def downtimes_page(request: Request, web: Shared, found: Reader):
    return downtimes_view(web, request, found)


@router.post("/downtimes")
async def downtime_form(request: Request, web: Shared, found: Scheduler):
    form = await request.form()
    typed = {"host": str(form.get("host", ""))[:255],
             "check": str(form.get("check", ""))[:255],
             "duration": str(form.get("duration", ""))[:32],
             "comment": str(form.get("comment", ""))[:1000],
             "force": bool(form.get("force"))}
    try:
        if form.get("remove"):
            typed = {}
            await run_in_threadpool(web.end_downtime, found, int(str(form.get("remove"))))
        else:
            await run_in_threadpool(web.schedule, found, typed["host"],
                                    typed["check"] or None, typed["duration"],
                                    typed["comment"], typed["force"])
    except (Refused, ValueError) as e:
        # the page again, the reason beside the form and what was typed kept in it
        return await run_in_threadpool(downtimes_view, web, request, found, status_of(e),
                                       str(e), typed)
    return RedirectResponse("/downtimes", status_code=303)
