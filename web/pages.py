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

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from fleetwatch.graphs.host import host_graphs
from web import auth, store
from web.asking import Asking
from web.console import PAGE_ROWS, Refused
from web.context import Shared, Web

#: alerts the alerts page lists
ALERTS_SHOWN = 200
#: a host's recent alerts its page lists
HOST_ALERTS = 20
#: the ranges a host page's graphs offer, in seconds
RANGES = {"1h": 3600, "6h": 6 * 3600, "1d": 86400, "7d": 7 * 86400}
#: the host states the hosts page filters by
HOST_FILTERS = ("DOWN", "UNREACHABLE", "UP", "UNKNOWN", "GONE")
#: the problems page's sections: (id, heading, which handled problems it lists)
SECTIONS = (("acknowledged", "Acknowledged", lambda h: bool(h.get("ack"))),
            ("downtime", "In downtime", lambda h: not h.get("ack") and bool(h.get("downtime"))),
            ("unreachable", "Unreachable or on a host down",
             lambda h: not h.get("ack") and not h.get("downtime")
             and bool(h.get("unreachable") or h.get("host"))))


def _back(value) -> str:
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


@router.get("/problems", response_class=HTMLResponse)
def problems_page(request: Request, web: Shared, found: Reader, page: int = 0):
    view = web.console.problems()
    unhandled = {id(p) for p in view["unhandled"]}
    handled = [p for p in view["problems"] if id(p) not in unhandled]
    sections = []
    for key, title, test in SECTIONS:
        rows = [p for p in handled if test(p["handled"] or {})]
        sections.append((key, title, rows[:PAGE_ROWS], len(rows)))
    pages = max(1, -(-len(view["unhandled"]) // PAGE_ROWS))
    page = max(0, min(page, pages - 1))
    return web.page(request, "problems.html", who=found, view=view, sections=sections,
                    shown=view["unhandled"][page * PAGE_ROWS:(page + 1) * PAGE_ROWS],
                    page=page, pages=pages, may_ack=auth.allows(found.role, "ack"))


@router.get("/hosts", response_class=HTMLResponse)
def hosts_page(request: Request, web: Shared, found: Reader, q: str = "", state: str = "",
               parent: str = "", group: str = "", page: int = 0):
    q, parent = q[:255], parent[:255]
    state = state.upper() if state.upper() in HOST_FILTERS else ""
    if group == "parent":
        return web.page(request, "parents.html", who=found, view=web.console.parents())
    view = web.console.hosts(q, state or None, parent or None, max(0, min(page, 10**6)))
    return web.page(request, "hosts.html", who=found, view=view, q=q, state=state,
                    parent=parent, states=HOST_FILTERS)


@router.get("/hosts/{uuid}", response_class=HTMLResponse)
def host_page(request: Request, web: Shared, found: Reader, uuid: str, range: str = "1h"):
    console = web.console
    view = console.host(uuid[:64])
    if view is None:
        return web.page(request, "missing.html", 404, who=found,
                        what=f"no host {uuid[:64]} in the fleet")
    agent = view["agent"]
    range = range if range in RANGES else "1h"
    # an open page's update keeps the graphs it has (hx-preserve): Graphite is asked
    # when the page is loaded, not every web.refresh seconds
    graphs = {"status": "kept", "message": "", "graphs": []} \
        if request.headers.get("hx-request") else \
        host_graphs(getattr(console.config, "graphite", None),
                    agent.get("hostname") or uuid, RANGES[range], now=console.clock())
    (alerts, total), error = _or_error(console.actions.alerts, ([], 0), HOST_ALERTS,
                                       agent["uuid"])
    return web.page(request, "host.html", who=found, view=view, agent=agent,
                    alerts=alerts, alerts_total=total, alerts_error=error,
                    checks=view["checks"], problems=view["unhandled"], graphs=graphs,
                    ranges=list(RANGES), range=range,
                    may_ack=auth.allows(found.role, "ack"),
                    may_run=auth.allows(found.role, "run"))


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
        return refused_page(web, request, found, e, _back(form.get("back")))
    return RedirectResponse(_back(form.get("back")), status_code=303)


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
def alerts_page(request: Request, web: Shared, found: Reader):
    (rows, total), error = _or_error(web.console.actions.alerts, ([], 0), ALERTS_SHOWN)
    return web.page(request, "alerts.html", who=found, alerts=rows, total=total, error=error)


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
