"""The SLOs: the console's page (``/slo``) and the API's list (``GET /api/v1/slos``).

Both read what ``fleetwatch slo report`` prints (:func:`fleetwatch.actions.slo.report`,
through ``console.actions``): each SLO the alerting sinks declared, its state (ok, ticket,
page), its SLI and error budget left over its window, its burn rates over 5 min, 30 min,
1 h and 6 h, and the hosts that spent most of its budget. The page lists them in one table,
then a section per SLO with its worst offenders; the API answers the command's ``--json``
document. A database that cannot be read makes the page say so, the API answer 503.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from fleetwatch.actions.slo import amount, document, percent, rate
from web.api import User, answer, as_json
from web.context import Shared
from web.pages import Reader, _or_error

#: the state a page colours an SLO's level as (a check's: its words are the level's)
LEVEL_CLASS = {"ok": "OK", "ticket": "WARNING", "page": "CRITICAL", None: "PENDING"}
#: the worst offenders each SLO's section lists
OFFENDERS = 10

router = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api/v1")


@router.get("/slo", response_class=HTMLResponse)
def slo_page(request: Request, web: Shared, found: Reader):
    slos, error = _or_error(web.console.actions.slos, [], None, OFFENDERS)
    return web.page(request, "slo.html", who=found, slos=document(slos)["slos"], error=error,
                    level_class=LEVEL_CLASS, percent=percent, rate=rate, amount=amount)


@api.get("/slos", summary="The SLOs with their state (ok, ticket, page), SLI and error "
                          "budget left over their window, burn rates over 5m, 30m, 1h and "
                          "6h, and worst offenders (`fleetwatch slo report --json`)")
def slos(web: Shared, user: User,
         name: Annotated[list[str], Query(max_length=64, description=(
             "only these SLOs (repeated)"))] = [],
         offenders: Annotated[int, Query(ge=0, le=1000, description=(
             "the hosts that spent most of each budget, at most this many"))] = 5):
    return as_json(document(answer(web.console.actions.slos, name[:100] or None, offenders)))
