"""Dashboards: the graphs a user pinned from host pages, on one page of their own.

Each graph of a host page has a Pin button (``POST /pins``: the host's uuid and the graph's
key from :mod:`fleetwatch.graphs.panels`, which a later page draws again), and a host page
pins any of its series a user picks (``series``: a glob over the path below the host,
``load.*``, ``checks.http.*``; pinned as ``series:PATTERN``, drawn by
:func:`fleetwatch.graphs.host.picked_graphs`); ``/dashboard``
shows the logged-in user's pins, drawn for one time range as a host page draws them, each
named by its host, with Unpin (``POST /pins/remove``). A dashboard is saved per user in the
state database (``web_pins``, at most :data:`web.store.PINS_PER_USER` graphs) and shared by
its URL: ``/dashboard?user=alice`` shows alice's to anyone logged in, who may not change it.
Every pin and unpin is audited. Graphite is asked once per host on the dashboard.
"""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from fleetwatch.graphs.host import PICKED, PICKED_KEY, host_graphs, picked_graphs
from web import auth, store
from web.asking import Asking
from web.context import Shared
from web.pages import GraphSpan, Reader, back_to, perfdata_units

#: a graph's key as the catalogue makes them (an HTML id's characters)
GRAPH_KEY = re.compile(r"[A-Za-z0-9_-]{1,200}")

#: anyone logged in pins to their own dashboard (the form's CSRF token checked)
Pinner = Annotated[store.Who, Depends(Asking(page=True))]

router = APIRouter(include_in_schema=False)


@router.post("/pins")
async def pin_form(request: Request, web: Shared, found: Pinner):
    form = await request.form()
    back = back_to(form.get("back"))
    uuid, graph = str(form.get("uuid", ""))[:64], str(form.get("graph", ""))
    series = str(form.get("series", "")).strip()
    if series:
        if not PICKED.fullmatch(series):
            return web.page(request, "refused.html", 422, who=found, back=back,
                            error="a series is a glob over the path below the host: letters, "
                                  "digits, . _ - * ? [ ] !, at most 200 (load.*, "
                                  "checks.http.*)")
        graph = PICKED_KEY + series
    elif not GRAPH_KEY.fullmatch(graph):
        return web.page(request, "refused.html", 422, who=found, back=back,
                        error="not a graph of a host page")
    if not uuid:
        return web.page(request, "refused.html", 422, who=found, back=back,
                        error="not a graph of a host page")
    try:
        await run_in_threadpool(store.pin, web.console.engine, found, uuid, graph,
                                web.console.clock)
    except auth.AuthError as e:
        return web.page(request, "refused.html", 409, who=found, back=back, error=str(e))
    return RedirectResponse(back, status_code=303)


@router.post("/pins/remove")
async def unpin_form(request: Request, web: Shared, found: Pinner):
    form = await request.form()
    try:
        await run_in_threadpool(store.unpin, web.console.engine, found,
                                int(str(form.get("remove", ""))), web.console.clock)
    except (auth.AuthError, ValueError) as e:
        return web.page(request, "refused.html", 404, who=found, back="/dashboard",
                        error=str(e) if isinstance(e, auth.AuthError) else "no such pin")
    return RedirectResponse("/dashboard", status_code=303)


@router.get("/dashboard", response_class=HTMLResponse)
def dashboard_page(request: Request, web: Shared, found: Reader, user: str = "",
                   range: str = "1h"):
    console = web.console
    owner = user[:64] or found.user
    span = GraphSpan.of(request, range, console.clock())
    start, end = span.start, span.end
    pins = store.pins(console.engine, owner)
    settings = getattr(console.config, "graphite", None)
    # each host's pins: the catalogue's graphs (a host page's, one fetch) and the series
    # picked (picked_graphs, one fetch for all of them)
    wanted: dict[str, tuple[list[str], list[str]]] = {}
    for pin in pins:
        keys, picks = wanted.setdefault(pin["uuid"], ([], []))
        if pin["graph"].startswith(PICKED_KEY):
            picks.append(pin["graph"][len(PICKED_KEY):])
        else:
            keys.append(pin["graph"])
    drawn: dict[str, tuple] = {}
    for uuid, (keys, picks) in wanted.items():
        view = console.host(uuid)
        name = (view["agent"].get("hostname") or uuid) if view else uuid
        graphs = host_graphs(settings, name, end - start, now=end,
                             units=perfdata_units(view["checks"])) \
            if view is not None and keys else None
        picked = picked_graphs(settings, name, picks, end - start, now=end) \
            if view is not None and picks else None
        drawn[uuid] = (name, graphs, picked)
    shown = []
    for pin in pins:
        name, graphs, picked = drawn[pin["uuid"]]
        is_picked = pin["graph"].startswith(PICKED_KEY)
        graphs = picked if is_picked else graphs
        graph = next((g for g in graphs.graphs if g.key == pin["graph"]), None) \
            if graphs is not None else None
        why = "" if graph is not None else (
            "no such host in the fleet now" if graphs is None else
            graphs.message or ("none of the host's series matches it" if is_picked
                               else "no data in this range"))
        shown.append({"pin": pin, "host": name, "graph": graph, "why": why})
    return web.page(request, "dashboard.html", who=found, owner=owner,
                    mine=owner == found.user, shown=shown, span=span,
                    most=store.PINS_PER_USER)
