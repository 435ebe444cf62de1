"""The HTTP API under ``/api/v1``: JSON, for scripts and integrations that do not speak ZeroMQ.

Lists are paginated by a cursor: ``limit`` (at most :data:`PAGE_MAX`) and ``after`` (the
``next`` of the page before); an answer is ``{"items": [...], "next": CURSOR or null}``.
Hosts go in uuid order (cursor: the last uuid), checks in (uuid, plugin) order (cursor:
``UUID/PLUGIN``), problems worst first (cursor: how many came before). Reads need any role;
acknowledging, scheduling downtimes and running checks need ``operator``
(:func:`web.auth.allows`). A state database that cannot be read answers 503, with what
went wrong in ``error``.

Who may ask is each handler's dependency (:class:`web.asking.Asking`: the user the gate
found, and 403 for a role that does not allow the action); what it reads and changes it
reaches through ``web: Shared`` (:mod:`web.context`). A request FastAPI cannot validate
answers 422, every error ``{"error": "..."}`` (:mod:`web.context`), and so the OpenAPI
document at ``/api/v1/openapi.json`` says, describing every route (:func:`error_shape`).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Query
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field

from fleetwatch.actions.alerts import document as alerts_document
from fleetwatch.display import iso
from query import alerts as query_alerts
from query import problems as query_problems
from web import store
from web.asking import Asking
from web.console import PAGE_ROWS, Refused
from web.context import Shared, refused

#: most entries one API list answers
PAGE_MAX = 1000
Limit = Annotated[int, Query(ge=1, le=PAGE_MAX, description=f"at most this many (1-{PAGE_MAX})")]
After = Annotated[str, Query(max_length=600, description="the `next` of the page before")]
State = Annotated[str | None, Query(max_length=16, description="only those in this state")]
# the lists' filters (query/problems.py, query/alerts.py), as the console's pages take them
CheckGlob = Annotated[str, Query(max_length=255, description="the check's name, a glob")]
Parent = Annotated[str, Query(max_length=255, description="of hosts that declare this parent")]
Site = Annotated[str, Query(max_length=255, description="of hosts behind this site router")]
Handled = Annotated[str, Query(pattern="^(no|yes|all)$", description=(
    "yes: hosts DOWN or UNREACHABLE and handled (acknowledged, in a downtime, behind a "
    "parent that is down), no: every other host, all (the default)"))]
Group = Annotated[str, Query(max_length=16, description=(
    "group by " + ", ".join(query_problems.GROUPS)
    + ": each group's rows together, `groups` counting them"))]


def states_of(states: tuple[str, ...]):
    return Query(max_length=120, description="only those in these states (repeated, or "
                                             "comma-separated): " + ", ".join(states))


def sorts_of(sorts: tuple[str, ...], said: str):
    return Query(max_length=16, description=f"the order: {', '.join(sorts)} (-NAME: the "
                                            f"other way); {said}")


def text_in(where: str):
    return Query(max_length=255, description=f"text in the hostname, the check's name or "
                                             f"{where}")


class AckRequest(BaseModel):
    host: str = Field(min_length=1, max_length=255, description="hostname or uuid")
    check: str | None = Field(None, max_length=255, description="the check; none: the host")
    comment: str = Field("", max_length=1000)
    sticky: bool = Field(False, description="until recovery, not the next state change")
    expire: float | None = Field(None, gt=0, description="seconds it lasts at most")
    force: bool = Field(False, description="accept a host (or check) the fleet has never "
                                           "seen (`fleetwatch ack add --force`)")


class RunRequest(BaseModel):
    host: str = Field(min_length=1, max_length=255, description="hostname or uuid")
    plugin: str = Field(min_length=1, max_length=255, description="a check it declared")


class DowntimeRequest(BaseModel):
    host: str = Field(min_length=1, max_length=255, description="hostname, uuid or pattern")
    check: str | None = Field(None, max_length=255, description="none: every alert")
    duration: str = Field(min_length=1, max_length=32, description="how long: 30m, 2h, 1d")
    comment: str = Field("", max_length=1000)
    force: bool = Field(False, description="accept a host (or check) the fleet has never "
                                           "seen: one not deployed yet (`fleetwatch "
                                           "downtime add --force`)")


#: what every error answers (the OpenAPI document's ``Error``)
ERROR_SCHEMA = {"title": "Error", "type": "object", "required": ["error"],
                "properties": {"error": {"type": "string", "title": "Error",
                                         "description": "what is wrong, one line"}}}


def error_shape(app) -> dict:
    """The app's OpenAPI document with the errors as they are answered: a 422 (a body or
    parameter not valid) is ``{"error": "..."}`` (:func:`web.context.invalid`), not FastAPI's
    ``{"detail": [...]}``."""
    from fastapi.openapi.utils import get_openapi
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        schemas = schema.setdefault("components", {}).setdefault("schemas", {})
        for name in ("HTTPValidationError", "ValidationError"):
            schemas.pop(name, None)
        schemas["Error"] = ERROR_SCHEMA
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                invalid = operation.get("responses", {}).get("422")
                if invalid is not None:
                    invalid["content"] = {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Error"}}}
        app.openapi_schema = schema
    return app.openapi_schema


#: who may ask: anyone logged in (the gate found them); who may change what
User = Annotated[store.Who, Depends(Asking())]
Acker = Annotated[store.Who, Depends(Asking("ack"))]
Runner = Annotated[store.Who, Depends(Asking("run"))]
Scheduler = Annotated[store.Who, Depends(Asking("downtime"))]

router = APIRouter(prefix="/api/v1")


def answer(fn, *args, **kwargs):
    """``fn(*args, **kwargs)``, what the fleet refuses answered with its status."""
    try:
        return fn(*args, **kwargs)
    except Refused as e:
        raise refused(e) from None


def as_json(content):
    """A list's answer rendered at once when it is made of JSON's own types, as FastAPI
    would render it (100 checks: 1 ms, not the 25 ms of its ``jsonable_encoder`` walking
    each value first); anything else is left to FastAPI."""
    try:
        return JSONResponse(content)
    except (TypeError, ValueError):
        return content


# ---------------------------------------------------------------- reading
@router.get("/hosts", summary="The agents of the fleet with their state, in uuid order")
def hosts(web: Shared, user: User, limit: Limit = PAGE_ROWS, after: After = "",
          state: State = None,
          q: Annotated[str, Query(max_length=255, description="hostname contains, or "
                                                              "uuid starts with; a glob "
                                                              "(*, ?, [...]) matches the "
                                                              "whole name or uuid")] = "",
          handled: Handled = "all"):
    return as_json(answer(web.console.host_list, after, limit, state, q, handled))


@router.get("/hosts/{uuid}", summary="One agent, its checks and its problems")
def host(web: Shared, user: User, uuid: str):
    found = answer(web.console.host, uuid[:64])
    if found is None:
        raise HTTPException(404, "no such host in the fleet")
    return as_json({k: found[k] for k in ("agent", "checks", "problems")})


@router.get("/checks", summary="The declared checks with their latest result and state: "
                               "in (uuid, plugin) order by a cursor; with a filter, an order "
                               "or a grouping (as the console's checks page, by the same "
                               "query parameters), filtered, sorted and grouped in SQL")
def checks(web: Shared, user: User, limit: Limit = PAGE_ROWS, after: After = "",
           state: Annotated[list[str], states_of(query_problems.CHECK_STATES)] = [],
           host: Annotated[str | None, Query(max_length=255, description=(
               "only this agent's (its uuid); with a filter, a hostname or uuid glob "
               "(ignoring case)"))] = None,
           check: CheckGlob = "", parent: Parent = "", site: Site = "",
           handled: Annotated[str, Query(pattern="^(no|yes|all)$", description=(
               "no: those nothing handles (OK ones too), yes: problems handled, "
               "all (the default)"))] = "",
           q: Annotated[str, text_in("the output")] = "",
           sort: Annotated[str, sorts_of(query_problems.SORTS, "state is worst first")] = "",
           group: Group = ""):
    states = ",".join(state)
    if not any((check, parent, site, handled, q, sort, group)) and "," not in states:
        # the cursor list: (uuid, plugin) order, each page as fast at any size
        return as_json(answer(web.console.check_list, after, limit, host, states or None))
    params = {"state": states, "host": host or "", "check": check, "parent": parent,
              "site": site, "handled": handled, "q": q, "sort": sort, "group": group}
    return as_json(filtered(web, query_problems.CheckFilter, params, after, limit))


@router.get("/problems", summary="The fleet's own faults (`fleet`: routers, sites, "
                                  "sinks, schedulers, worst first), then the problems the "
                                  "filter shows (all by default), with how each is "
                                  "handled: filtered, sorted and grouped as the console's "
                                  "problems page does, by the same query parameters")
def problems(web: Shared, user: User, limit: Limit = PAGE_ROWS,
             after: After = "",
             unhandled: Annotated[bool, Query(description="only those nothing handles "
                                                          "(handled=no)")] = False,
             state: Annotated[list[str], states_of(query_problems.STATES)] = [],
             host: Annotated[str, Query(max_length=255, description="hostname or uuid "
                                        "glob (ignoring case)")] = "",
             check: Annotated[str, Query(max_length=255, description="the check's (or "
                                         "process's) name, a glob")] = "",
             parent: Parent = "", site: Site = "",
             handled: Annotated[str, Query(pattern="^(no|yes|all)$", description=(
                 "no: those nothing handles, yes: those handled, all (the default)"))] = "",
             q: Annotated[str, text_in("the output")] = "",
             sort: Annotated[str, sorts_of(query_problems.SORTS, "state is worst first, "
                                           "as `status --problems`")] = "state",
             group: Group = ""):
    params = {"state": ",".join(state), "host": host, "check": check, "parent": parent,
              "site": site, "handled": handled or ("no" if unhandled else "all"), "q": q,
              "sort": sort, "group": group}
    return as_json({"fleet": web.console.fleet_faults(),
                    **filtered(web, query_problems.Filter, params, after, limit)})


def filtered(web, kind: type[query_problems.Filter], params: dict, after: str,
             limit: int) -> dict:
    """A list of :mod:`query.problems` (``kind``: the problems or the checks) as the API
    answers it: ``items``, ``total``, ``groups``, ``next`` (how many came before the next
    page), ``read_at``, ``read_ms``; 422 for a filter that is not one."""
    try:
        f = kind.parse(params)
    except ValueError as e:
        raise HTTPException(422, str(e)) from None
    start = int(after) if after.isdigit() else 0
    listing = web.console.problem_list(f, start, limit)
    if listing["warnings"]:
        raise HTTPException(503, listing["warnings"][0])
    return {"items": listing["rows"], "total": listing["total"],
            "groups": listing["groups"] if f.group else None,
            "next": str(start + limit) if start + limit < listing["total"] else None,
            "read_at": iso(listing["read_at"]), "read_ms": listing["read_ms"]}


@router.get("/routers", summary="The routers, whether they answered, and the fleet's "
                                "durability")
def routers(web: Shared, user: User):
    return web.console.routers()


@router.get("/health", summary="The fleet's own health: the routers, the latest "
                                "counters of every router, sink and scheduler, the "
                                "routers' drops per agent, the agents that dropped")
def health(web: Shared, user: User):
    view = web.console.fleet_health()
    for key in ("router_stats", "sinks", "schedulers"):
        if key in view:         # (copies: the processes are the tail's own records)
            view[key] = [{k: v for k, v in process.items() if k not in PAGE_ONLY}
                         for process in view[key]]
    return view


#: what the health page shows of a process that the API does not (its counters once more,
#: and the report before, which the tiles' rates are made of)
PAGE_ONLY = ("shown", "before", "before_heard")


@router.get("/alerts", summary="The newest alerts with their delivery per channel and "
                               "how each is handled (`fleetwatch alerts --json`), filtered "
                               "and sorted as the console's alerts page, by the same query "
                               "parameters")
def alerts(web: Shared, user: User, limit: Limit = 50, after: After = "",
           severity: Annotated[list[str], Query(max_length=120, description=(
               "only those of these severities (repeated, or comma-separated): "
               + ", ".join(query_alerts.KNOWN)))] = [],
           host: Annotated[str, Query(max_length=255, description=(
               "hostname or uuid glob (ignoring case): a uuid, that agent's"))] = "",
           check: CheckGlob = "",
           q: Annotated[str, text_in("the alert's text")] = "",
           sort: Annotated[str, sorts_of(query_alerts.SORTS, "received is the newest "
                                         "first, severity the worst first")] = ""):
    try:
        f = query_alerts.AlertFilter.parse({"severity": ",".join(severity), "host": host,
                                            "check": check, "q": q, "sort": sort})
    except ValueError as e:
        raise HTTPException(422, str(e)) from None
    start = int(after) if after.isdigit() else 0
    found, total = answer(web.console.alert_list, f, start, limit)
    # alerts --json's document, of a page from ``after``: truncated when more follow it
    return as_json({**alerts_document(found, total), "truncated": start + len(found) < total,
                    "next": str(start + limit) if start + limit < total else None})


@router.get("/deliveries", summary="Every attempt to send an alert, newest first: the "
                                   "channel, the outcome (sent, retry, failed), what the "
                                   "service answered and its id for the message, how long "
                                   "it took (`fleetwatch alerts --deliveries --json`)")
def deliveries(web: Shared, user: User, limit: Limit = 50,
               channel: Annotated[str, Query(max_length=64, description=(
                   "only the attempts on this channel"))] = ""):
    return as_json(answer(web.console.actions.deliveries, limit, channel or None))


@router.get("/acknowledgements", summary="The running acknowledgements (all with "
                                         "`ended`), newest first, as `fleetwatch ack "
                                         "list --json`")
def acknowledgements(web: Shared, user: User, ended: bool = False):
    return {"acknowledgements": answer(web.console.actions.acks, ended)}


@router.get("/silences", summary="The running silences (all with `ended`), newest "
                                 "first, with how many alerts each muted")
def silences(web: Shared, user: User, ended: bool = False):
    from fleetwatch.store import reads
    return {"silences": answer(web.console.listed, reads.silences, now=web.console.clock(),
                               ended=ended)}


@router.get("/downtimes", summary="The running and planned downtimes")
def downtimes(web: Shared, user: User):
    return {"downtimes": answer(web.console.actions.downtimes)}


# ---------------------------------------------------------------- changing
@router.post("/acks", status_code=201,
             summary="Acknowledge a host's problem (check None: the host DOWN); operator")
def ack(web: Shared, user: Acker, body: AckRequest):
    try:
        made = web.acknowledge(user, body.host, body.check, body.comment, body.sticky,
                               web.console.clock() + body.expire if body.expire else None,
                               body.force)
    except Refused as e:
        raise refused(e) from None
    except ValueError as e:
        raise HTTPException(422, str(e)) from None
    return {"acks": [{"id": i, "uuid": u, "status": st} for i, u, st in made]}


@router.delete("/acks/{ack_id}", status_code=204,
               summary="End a running acknowledgement (`fleetwatch ack remove`); operator")
def end_ack(web: Shared, user: Acker, ack_id: int):
    answer(web.end_ack, user, ack_id)
    return Response(status_code=204)


@router.post("/runs", summary="Run a check now and answer its result (as "
                              "`fleetwatch run --wait --json`); operator")
def run(web: Shared, user: Runner, body: RunRequest):
    return answer(web.run_check, user, body.host, body.plugin)


@router.post("/downtimes", status_code=201,
             summary="Schedule a downtime from now (check None: every alert of the "
                     "host); operator")
def downtime(web: Shared, user: Scheduler, body: DowntimeRequest):
    return {"id": answer(web.schedule, user, body.host, body.check, body.duration,
                         body.comment, body.force)}


@router.delete("/downtimes/{downtime_id}", status_code=204,
               summary="End a running or planned downtime; operator")
def end_downtime(web: Shared, user: Scheduler, downtime_id: int):
    answer(web.end_downtime, user, downtime_id)
    return Response(status_code=204)
