"""The rules on series: the console's pages (``/rules``, ``/rules/NAME``), a draft's backtest
run from a rule's page, and the API's list (``GET /api/v1/rules``, ``/api/v1/rules/NAME``).

- ``/rules``: each rule the alerting sinks declared (:mod:`query.rules`: name, expression,
  levels, ``for``, hosts) with how many of its hosts are in each state;
- ``/rules/NAME``: its definition, its hosts (problems first, each with its state, output
  and since when, a link to its page), a graph of the series it reads for one host (``host``:
  a uuid or hostname; the worst host by default) with its levels drawn across
  (:mod:`fleetwatch.graphs.rule`) over the host page's ranges, and the draft form;
- ``POST /rules/NAME/backtest`` (a role that may run checks, its CSRF token): the draft
  (expression, levels, ``for``, ``keep_firing_for``, hosts, how far back) checked as a sink
  checks its config (a bad one: its one line in the page, nothing run), made the policy a
  backtest replays (:mod:`fleetwatch.actions.rules`), and ``fleetwatch rules backtest
  --json`` run as a process, one at a time per console, for ``rules.backtest_timeout``
  seconds at most (:mod:`web.backtests`); recorded with who asked (``web_audit``). The page
  shows its progress (its stderr), polled every :data:`POLL` seconds; once it ends, the
  draft's would-be pages against the real ones and, on the graph, both as shaded bands;
- ``GET /rules/NAME/backtests/ID``: that section alone (what the page polls).

A page that shows a backtest running says so in its URL (``running=1``, where the form's
answer sends it), and only then: once the run is over, the first of the page's updates to
ask (this section's, or the page's own every ``web.refresh`` seconds) is answered with
``HX-Redirect`` to the page without it, loaded whole, its graph with the run's bands (an
update keeps a page's graph: it would keep the one without them); the page without it
asked while the run goes on redirects to the page with it.

A database that cannot be read makes the pages say so and the API answer 503.
"""

from __future__ import annotations

import threading
from typing import Annotated
from urllib.parse import quote, urlencode

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from fleetwatch.actions import rules as drafts
from fleetwatch.display import human, iso
from fleetwatch.graphs.rule import rule_graph
from query import rules as query_rules
from web import auth, store
from web.api import User, answer, as_json
from web.backtests import Backtests, Busy, Job
from web.console import PAGE_ROWS, Refused
from web.context import Shared, Web
from web.pages import GraphSpan, Reader, Runner

#: seconds between two polls of a running backtest's progress
POLL = 2
#: the names of the files a backtest reads
POLICY, OPERATOR = "alerting.yaml", "fleetwatch.yaml"

router = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/api/v1")
_made = threading.Lock()


def backtests_of(request: Request) -> Backtests:
    """The application's backtests (``app.state.backtests``; made at first use with the
    operator config's ``rules.backtest_timeout``)."""
    state = request.app.state
    with _made:
        found = getattr(state, "backtests", None)
        if found is None:
            console = state.web.console
            settings = getattr(console.config, "rules", None)
            found = state.backtests = Backtests(
                timeout=getattr(settings, "backtest_timeout", 600.0), clock=console.clock)
    return found


# ---------------------------------------------------------------- the list
@router.get("/rules", response_class=HTMLResponse)
def rules_page(request: Request, web: Shared, found: Reader):
    warnings: list[str] = []
    rules = web.console.read(query_rules.listed, warnings, [])
    return web.page(request, "rules.html", who=found, rules=rules, warnings=warnings,
                    duration=drafts.duration)


def _rule_json(rule: dict) -> dict:
    out = {**rule, "configured": iso(rule["configured"]), "states": dict(rule["states"])}
    if "host_states" in rule:
        out["host_states"] = [{**h, "since": iso(h["since"]),
                               "last_result": iso(h["last_result"])}
                              for h in rule["host_states"]]
    return out


@api.get("/rules", summary="The rules on series the alerting sinks declared: expression, "
                           "levels, `for`, hosts, and how many of their hosts are in each "
                           "state")
def rules_list(web: Shared, user: User,
               name: Annotated[list[str], Query(max_length=64, description=(
                   "only these rules (repeated)"))] = []):
    rules = answer(web.console.listed, query_rules.listed, names=name[:100] or None)
    return as_json({"rules": [_rule_json(r) for r in rules]})


@api.get("/rules/{name}", summary="One rule on series: its definition, its states, and "
                                  "each of its hosts with its state, output and since when, "
                                  "problems first")
def rule_one(web: Shared, user: User, name: str):
    found = answer(web.console.listed, lambda conn: [query_rules.rule(conn, name[:64])])[0]
    if found is None:
        raise HTTPException(404, "no such rule: no alerting sink declared it")
    return as_json(_rule_json(with_states(found)))


def with_states(rule: dict) -> dict:
    """``rule`` (:func:`query.rules.rule`) with ``states``, counted from its hosts."""
    counts: dict[str, int] = {}
    for h in rule["host_states"]:
        counts[h["state"]] = counts.get(h["state"], 0) + 1
    rule["states"] = [(s, counts[s]) for s in query_rules.STATES if counts.get(s)]
    return rule


# ---------------------------------------------------------------- one rule
def _chosen(hosts: list[dict], asked: str) -> tuple[dict | None, str | None]:
    """The host whose series the graph draws: the one asked (uuid or hostname), else the
    worst; and why the one asked is not drawn."""
    if asked:
        for h in hosts:
            if asked in (h["uuid"], h["hostname"]):
                return h, None
    error = f"{asked} is not a host of this rule: the worst one is drawn" if asked else None
    return (hosts[0] if hosts else None), error


def _bands(job: Job | None, host: dict | None) -> list:
    """The draft's pages and the real ones of ``host`` as the graph's bands."""
    if job is None or job.result is None or host is None:
        return []
    mine = drafts.of_host(job.result, host["uuid"], host["hostname"])
    until = job.result["until"]

    def spans(pages: list[dict], said: str) -> list:
        return [(p["start"], until if p["end"] is None else p["end"],
                 f"{said} {p['severity']} from {human(p['start'])}, "
                 f"{'still open' if p['end'] is None else 'for ' + drafts.duration(p['duration'])}")
                for p in pages]
    return [("would page (the draft)", spans(mine["pages"], "would page")),
            ("paged (for real)", spans(mine["real"], "paged"))]


def _span(request: Request, job: Job | None, now: float) -> GraphSpan:
    """The graph's range: the URL's; a finished backtest's own when the URL says none."""
    asked = request.query_params
    if job is not None and job.result is not None and not asked.get("range") \
            and not asked.get("from"):
        start, end = job.result["since"], job.result["until"]
        if start is not None and end is not None and end > start:
            return GraphSpan("", {"from": "", "until": ""}, start, end)
    return GraphSpan.of(request, str(asked.get("range", "1h")), now)


def _marked(request: Request, name: str, running: bool) -> str:
    """The rule's page as ``request`` asked it, saying (``running``) or not that its
    backtest runs."""
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "running"]
    if running:
        query.append(("running", "1"))
    return f"/rules/{quote(name, safe='')}" + (f"?{urlencode(query)}" if query else "")


def _moved(request: Request, name: str, job: Job | None):
    """A page asked in the other state than its backtest's: where it goes instead (module
    docstring), or None."""
    marked = request.query_params.get("running") == "1"
    running = job is not None and job.running
    if request.method != "GET" or marked == running:
        return None
    where = _marked(request, name, running)
    if request.headers.get("hx-request"):
        return HTMLResponse("", headers={"HX-Redirect": where})
    return RedirectResponse(where, status_code=303)


def _job_of(request: Request, name: str) -> Job | None:
    """The backtest of rule ``name`` the URL names (``backtest=ID``), if the console has it."""
    try:
        job_id = int(request.query_params.get("backtest", "0"))
    except ValueError:
        return None
    job = backtests_of(request).get(job_id) if job_id > 0 else None
    return job if job is not None and job.rule == name else None


def rule_view(web: Web, request: Request, found: store.Who, name: str, status: int = 200,
              draft: drafts.Draft | None = None, form_error: str | None = None,
              job: Job | None = None, page: int = 0):
    job = job or _job_of(request, name)
    moved = _moved(request, name, job)
    if moved is not None:
        return moved
    console, warnings = web.console, []
    rule = console.read(query_rules.rule, warnings, None, name=name)
    if rule is None and not warnings:
        return web.page(request, "missing.html", 404, who=found,
                        what=f"No rule {name}: no alerting sink declared it (alerting.rules "
                             "in a sink config), or none has started since.")
    if rule is None:
        return web.page(request, "rule.html", 503, who=found, rule=None, rule_name=name,
                        warnings=warnings)
    with_states(rule)
    hosts = rule["host_states"]
    host, host_error = _chosen(hosts, str(request.query_params.get("host", ""))[:255])
    span = _span(request, job, console.clock())
    series, same_unit = drafts.graphed(rule["expr"])
    if request.headers.get("hx-request"):      # an open page's update keeps its graph
        graph = {"status": "kept", "message": "", "graphs": ()}
    elif host is None:
        graph = {"status": "no host", "message": "No host has this rule yet: no graph.",
                 "graphs": ()}
    else:
        shown = host["hostname"] or host["uuid"]
        graph = rule_graph(getattr(console.config, "graphite", None), shown, series,
                           span.end - span.start, now=span.end, title=f"rule:{name} on {shown}",
                           levels=drafts.levels(rule) if same_unit else (),
                           bands=_bands(job, host))
    page = max(0, min(page, len(hosts) // PAGE_ROWS))
    keep = {k: v for k, v in (("host", host["uuid"] if host else ""),
                              ("backtest", job.id if job else ""),
                              ("running", 1 if job and job.running else "")) if v}
    return web.page(request, "rule.html", status, who=found, rule=rule, rule_name=name,
                    warnings=warnings, hosts=hosts[page * PAGE_ROWS:(page + 1) * PAGE_ROWS],
                    page=page, pages=max(1, -(-len(hosts) // PAGE_ROWS)), host=host,
                    host_error=host_error, graph=graph, span=span, keep=keep,
                    series=series, same_unit=same_unit, job=job, poll=POLL,
                    draft=draft or (drafts.Draft.from_item(job.draft) if job
                                    else drafts.Draft.from_rule(rule)),
                    form_error=form_error, may_run=auth.allows(found.role, "run"),
                    duration=drafts.duration)


@router.get("/rules/{name}", response_class=HTMLResponse)
def rule_page(request: Request, web: Shared, found: Reader, name: str, page: int = 0):
    return rule_view(web, request, found, name[:64], page=page)


# ---------------------------------------------------------------- a draft's backtest
def start_backtest(web: Web, request: Request, found: store.Who, name: str,
                   draft: drafts.Draft, host: str) -> Job:
    """Check the draft, record who asked, start its backtest; ValueError (the draft, the
    sink config it starts from), :class:`Refused` (the database), :class:`Busy`."""
    import yaml
    from sqlalchemy.exc import SQLAlchemyError
    console = web.console
    warnings: list[str] = []
    declared = console.read(query_rules.declared, warnings, None)
    if declared is None:
        raise Refused(warnings[0], 503)
    rule = next((r for r in declared if r["name"] == name), None)
    if rule is None:
        raise Refused(f"no rule {name}: no alerting sink declared it", 404)
    item = drafts.check_draft(draft, rule["stale_after"])
    settings = getattr(console.config, "rules", None)
    base_path = getattr(settings, "alerting_config", "")
    section = drafts.policy(declared, item, drafts.base_section(base_path) if base_path
                            else None)
    backtests = backtests_of(request)
    busy = backtests.running()
    if busy is not None:
        raise Busy(busy)
    files = {POLICY: yaml.safe_dump({"alerting": section}, sort_keys=False),
             OPERATOR: yaml.safe_dump(drafts.operator_document(console.config),
                                      sort_keys=False)}
    since = draft.since.strip()
    try:
        with console.engine.begin() as conn:
            store.audit(conn, found.name, "rule.backtest", name,
                        {"draft": item, "since": since, "from": base_path or None},
                        console.clock)
    except SQLAlchemyError as e:
        raise Refused(f"cannot record the backtest: {e.__class__.__name__}", 503) from None

    def args(paths: dict[str, str]) -> list[str]:
        return ["rules", "backtest", "--json", "--rules", paths[POLICY], "--since", since,
                "--config", paths[OPERATOR]]
    return backtests.start(name, found.name, {**item, "since": since}, files, args,
                           lambda doc: drafts.would_be(doc, name), host)


@router.post("/rules/{name}/backtest")
async def backtest_form(request: Request, web: Shared, found: Runner, name: str):
    name = name[:64]
    form = await request.form()
    draft = drafts.Draft.of(name, form)
    host = str(form.get("host", ""))[:255]
    try:
        job = await run_in_threadpool(start_backtest, web, request, found, name, draft, host)
    except Busy as e:
        return await run_in_threadpool(rule_view, web, request, found, name, 409, draft,
                                       str(e), e.job)
    except ValueError as e:
        return await run_in_threadpool(rule_view, web, request, found, name, 422, draft,
                                       str(e))
    except Refused as e:
        return await run_in_threadpool(rule_view, web, request, found, name, e.status, draft,
                                       str(e))
    except OSError as e:
        return await run_in_threadpool(rule_view, web, request, found, name, 503, draft,
                                       f"cannot start the backtest: {e}")
    query = urlencode({"backtest": job.id, **({"host": host} if host else {}),
                       "running": 1})
    return RedirectResponse(f"/rules/{quote(name, safe='')}?{query}", status_code=303)


@router.get("/rules/{name}/backtests/{job_id}", response_class=HTMLResponse)
def backtest_section(request: Request, web: Shared, found: Reader, name: str, job_id: int):
    """The backtest's section alone, as its page polls it; once the run is over, an htmx
    request is answered with ``HX-Redirect`` to the rule's page with the run's results."""
    job = backtests_of(request).get(job_id)
    if job is None or job.rule != name[:64]:
        return web.page(request, "missing.html", 404, who=found,
                        what=f"No backtest {job_id} of rule {name[:64]}: the console keeps "
                             "its latest few, until it restarts.")
    response = web.page(request, "_backtest.html", who=found, job=job, rule_name=name[:64],
                        poll=POLL, duration=drafts.duration)
    if not job.running and request.headers.get("hx-request"):
        query = urlencode({"backtest": job.id, **({"host": job.host} if job.host else {})})
        response.headers["HX-Redirect"] = f"/rules/{quote(job.rule, safe='')}?{query}"
    return response
