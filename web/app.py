"""The console and the API as one ASGI application (FastAPI over Starlette; uvicorn serves it).

Pages are rendered on the server (Jinja2, autoescaping on, and every value a sender wrote
shown with its control characters visible: :func:`fleetwatch.display.escape` as the
templates' ``finalize``), so an agent's hostname, output or notification text is inert on
every page. The API under ``/api/v1`` answers JSON (a sender's text as the exact string,
which JSON escapes), its OpenAPI document at ``/api/v1/openapi.json`` (no Swagger page: it
would load scripts from a CDN).

Who may ask: a session (``fleetwatch_session`` cookie, signed with the ``web.secret_file``
key, ``SameSite=Strict``, ``Secure`` with TLS) made by logging in, or an API token
(``Authorization: Bearer``). A page without either redirects to ``/login``; an API call
answers 401, one its role does not allow 403 (:func:`web.auth.allows`). Every form POST of a
session carries its CSRF token (403 without). Answers carry a Content-Security-Policy that
allows nothing from elsewhere.

What the fleet looks like is read as ``fleetwatch status`` reads it
(:func:`fleetwatch.cli.status.gather`): the routers asked, the state database read, merged;
no second copy of that logic here.
"""

# (no ``from __future__ import annotations``: FastAPI reads the handlers' annotations at
# run time, ``Reader`` among them, which is local to create_app)
import time
from pathlib import Path
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.middleware.sessions import SessionMiddleware
from starlette.templating import Jinja2Templates

from fleetwatch.display import escape
from fleetwatch.graphs.host import host_graphs
from web import assets, auth, store

TEMPLATES = Path(__file__).parent / "templates"
SESSION_COOKIE = "fleetwatch_session"
#: most entries one API list answers
PAGE_MAX = 1000
#: alerts the alerts page lists
ALERTS_SHOWN = 200
#: the ranges a host page's graphs offer, in seconds
RANGES = {"1h": 3600, "6h": 6 * 3600, "1d": 86400, "7d": 7 * 86400}
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def _finalize(value):
    """Every value a template prints: text with its control characters visible, None empty
    (autoescaping then makes markup inert)."""
    if value is None:
        return ""
    return escape(value) if isinstance(value, str) else value


class Refused(Exception):
    """An action the fleet's state refuses (nothing to acknowledge): its text is for the
    user, the status (404, 422) for the API."""

    def __init__(self, message: str, status: int = 422):
        super().__init__(message)
        self.status = status


class Console:
    """What the application's handlers share: the operator config, the state database's
    engine, the login limiter, how the fleet is read (``gather(config, now, warn)``), what
    an operator may change (``actions``: ``ack(host, check, by, comment, sticky, expire)``
    -> [(id, uuid, status)], raising :class:`Refused`) and clocks. The command line gives
    them (fleetwatch/cli/web.py): the same code as ``fleetwatch status`` and ``ack``."""

    def __init__(self, config, engine, gather, actions=None, clock=time.time,
                 monotonic=time.monotonic):
        self.config, self.engine, self.gather, self.clock = config, engine, gather, clock
        self.actions = actions
        settings = config.web
        self.limiter = auth.LoginLimiter(settings.login_attempts, settings.login_lockout,
                                         monotonic)

    def fleet(self) -> dict:
        warnings: list[str] = []
        view = self.gather(self.config, self.clock(), warnings.append)
        view["warnings"] = warnings
        return view


def create_app(console: Console, secret: str) -> FastAPI:
    settings = console.config.web
    app = FastAPI(title="fleetwatch", openapi_url="/api/v1/openapi.json", docs_url=None,
                  redoc_url=None, version="1")
    app.add_middleware(SessionMiddleware, secret_key=secret, session_cookie=SESSION_COOKIE,
                       max_age=int(settings.session_hours * 3600), same_site="strict",
                       https_only=bool(settings.tls_cert))
    templates = Jinja2Templates(directory=str(TEMPLATES))
    templates.env.finalize = _finalize
    assets.mount(app, templates, settings)       # /static/, styles(), scripts(), refresh

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    # ------------------------------------------------------------ who is asking
    def who(request: Request) -> store.Who | None:
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return store.bearer(console.engine, header[7:].strip(), console.clock)
        name = request.session.get("user")
        if not isinstance(name, str):
            return None
        found = store.user(console.engine, name)
        if found is None:                   # removed meanwhile: the session ends
            request.session.clear()
        return found

    def api_reader(request: Request) -> store.Who:
        found = who(request)
        if found is None:
            raise HTTPException(401, "log in, or send Authorization: Bearer TOKEN")
        return found

    Reader = Annotated[store.Who, Depends(api_reader)]

    def may(found: store.Who, action: str) -> None:
        if not auth.allows(found.role, action):
            raise HTTPException(403, f"{found.role} may not {action}")

    def checked_form(request: Request, form) -> store.Who | Response:
        """The user a page's POST comes from, its CSRF token checked; or the answer."""
        found = who(request)
        if found is None:
            return to_login()
        if not auth.same_token(request.session.get("csrf"), form.get("csrf")):
            return Response("missing or wrong CSRF token: reload the page", 403)
        return found

    async def posted(request: Request, action: str, what: str):
        """A page's POST: (its form, the user), its CSRF token and the user's role checked;
        (its form, the answer) when one is not right."""
        form = await request.form()
        found = checked_form(request, form)
        if isinstance(found, store.Who) and not auth.allows(found.role, action):
            return form, Response(f"{found.role} may not {what}", 403)
        return form, found

    def acknowledge(found: store.Who, host: str, check: str | None, comment: str,
                    sticky: bool = False, expire: float | None = None) -> list:
        made = console.actions.ack(host, check, found.name, comment, sticky, expire)
        with console.engine.begin() as conn:
            store.audit(conn, found.name, "ack.add", f"{host} {check or '(host)'}",
                        {"acks": [a[0] for a in made], "comment": comment}, console.clock)
        return made

    def page(request: Request, name: str, **context) -> HTMLResponse:
        csrf = request.session.get("csrf")
        if not csrf:
            csrf = request.session["csrf"] = auth.new_csrf()
        return templates.TemplateResponse(request, name, {"csrf": csrf, **context})

    def to_login() -> RedirectResponse:
        return RedirectResponse("/login", status_code=303)

    # ------------------------------------------------------------ log in and out
    @app.get("/login", response_class=HTMLResponse, include_in_schema=False)
    def login_form(request: Request):
        return page(request, "login.html", error=None)

    @app.post("/login", include_in_schema=False)
    async def login(request: Request):
        form = await request.form()
        name, password = str(form.get("user", ""))[:64], str(form.get("password", ""))
        if not auth.same_token(request.session.get("csrf"), form.get("csrf")):
            return Response("missing or wrong CSRF token: reload the page", 403)
        address = request.client.host if request.client else "-"
        if console.limiter.locked(name, address):
            return page_with_status(request, "login.html", 429,
                                    error="too many failed logins: try again later")
        found = store.login(console.engine, name, password, address, console.clock)
        if found is None:
            console.limiter.failed(name, address)
            return page_with_status(request, "login.html", 401,
                                    error="wrong user name or password")
        console.limiter.succeeded(name, address)
        request.session.clear()
        request.session.update(user=found.user, csrf=auth.new_csrf())
        return RedirectResponse("/", status_code=303)

    def page_with_status(request: Request, name: str, status: int, **context):
        response = page(request, name, **context)
        response.status_code = status
        return response

    @app.post("/logout", include_in_schema=False)
    async def logout(request: Request):
        form = await request.form()
        if not auth.same_token(request.session.get("csrf"), form.get("csrf")):
            return Response("missing or wrong CSRF token: reload the page", 403)
        request.session.clear()
        return to_login()

    # ------------------------------------------------------------ pages
    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def overview(request: Request):
        found = who(request)
        if found is None:
            return to_login()
        fleet = console.fleet()
        return page(request, "overview.html", who=found, fleet=fleet,
                    summary=summarise(fleet), may_ack=auth.allows(found.role, "ack"))

    @app.get("/hosts/{uuid}", response_class=HTMLResponse, include_in_schema=False)
    def host_page(request: Request, uuid: str, range: str = "1h"):
        found = who(request)
        if found is None:
            return to_login()
        fleet = console.fleet()
        agent = next((a for a in fleet["agents"] if a["uuid"] == uuid), None)
        if agent is None:
            return page_with_status(request, "missing.html", 404, who=found,
                                    what=f"no host {uuid[:64]} in the fleet")
        seconds = RANGES.get(range, RANGES["1h"])
        graphs = host_graphs(getattr(console.config, "graphite", None),
                             agent.get("hostname") or uuid, seconds, now=console.clock())
        return page(request, "host.html", who=found, agent=agent,
                    checks=[c for c in fleet["checks"] if c["uuid"] == uuid],
                    problems=[p for p in fleet["unhandled"] if p["uuid"] == uuid],
                    graphs=graphs, ranges=list(RANGES), range=range,
                    may_ack=auth.allows(found.role, "ack"), may_run=auth.allows(found.role, "run"))

    @app.post("/ack", include_in_schema=False)
    async def ack_form(request: Request):
        form, found = await posted(request, "ack", "acknowledge")
        if not isinstance(found, store.Who):
            return found
        host = str(form.get("host", ""))[:255]
        check = str(form.get("check", ""))[:255] or None
        try:
            acknowledge(found, host, check, str(form.get("comment", ""))[:1000])
        except (Refused, ValueError) as e:
            return Response(str(e), 422)
        back = str(form.get("back", "/"))
        return RedirectResponse(back if back.startswith("/") and not back.startswith("//")
                                else "/", status_code=303)

    def run_check(found: store.Who, host: str, plugin: str) -> dict:
        result = console.actions.run_check(host, plugin)
        with console.engine.begin() as conn:
            store.audit(conn, found.name, "run", f"{host} {plugin}",
                        {"status": result.get("status")}, console.clock)
        return result

    @app.post("/run", response_class=HTMLResponse, include_in_schema=False)
    async def run_form(request: Request):
        form, found = await posted(request, "run", "run checks")
        if not isinstance(found, store.Who):
            return found
        host, plugin = str(form.get("host", ""))[:255], str(form.get("plugin", ""))[:255]
        try:
            result, error = await run_in_threadpool(run_check, found, host, plugin), None
        except Refused as e:
            result, error = None, str(e)
        return page(request, "ran.html", who=found, host=host, plugin=plugin, result=result,
                    error=error)

    @app.get("/alerts", response_class=HTMLResponse, include_in_schema=False)
    def alerts_page(request: Request):
        found = who(request)
        if found is None:
            return to_login()
        try:
            (rows, total), error = console.actions.alerts(ALERTS_SHOWN), None
        except Refused as e:
            (rows, total), error = ([], 0), str(e)
        return page(request, "alerts.html", who=found, alerts=rows, total=total, error=error)

    @app.get("/downtimes", response_class=HTMLResponse, include_in_schema=False)
    def downtimes_page(request: Request):
        found = who(request)
        if found is None:
            return to_login()
        try:
            rows, error = console.actions.downtimes(), None
        except Refused as e:
            rows, error = [], str(e)
        return page(request, "downtimes.html", who=found, downtimes=rows, error=error,
                    may=auth.allows(found.role, "downtime"))

    @app.post("/downtimes", include_in_schema=False)
    async def downtime_form(request: Request):
        form, found = await posted(request, "downtime", "schedule downtimes")
        if not isinstance(found, store.Who):
            return found
        try:
            if form.get("remove"):
                end_downtime(found, int(str(form.get("remove"))))
            else:
                schedule(found, str(form.get("host", ""))[:255],
                         str(form.get("check", ""))[:255] or None,
                         str(form.get("duration", ""))[:32],
                         str(form.get("comment", ""))[:1000])
        except (Refused, ValueError) as e:
            return Response(str(e), 422)
        return RedirectResponse("/downtimes", status_code=303)

    def schedule(found: store.Who, host: str, check: str | None, duration: str,
                 comment: str) -> int:
        downtime_id = console.actions.downtime(found.name, host, check, duration, comment)
        with console.engine.begin() as conn:
            store.audit(conn, found.name, "downtime.add", f"{host} {check or '(host)'}",
                        {"id": downtime_id, "duration": duration, "comment": comment},
                        console.clock)
        return downtime_id

    def end_downtime(found: store.Who, downtime_id: int) -> None:
        if not console.actions.end_downtime(downtime_id):
            raise Refused(f"no running or planned downtime {downtime_id}", 404)
        with console.engine.begin() as conn:
            store.audit(conn, found.name, "downtime.remove", str(downtime_id), None,
                        console.clock)

    # ------------------------------------------------------------ the API
    @app.get("/api/v1/hosts", summary="The agents of the fleet, as `fleetwatch status` "
                                      "lists them (uuid order, paginated)")
    def api_hosts(reader: Reader,
                  limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 100,
                  after: Annotated[str, Query(max_length=64)] = "",
                  state: Annotated[str | None, Query(max_length=16)] = None):
        hosts = sorted(console.fleet()["agents"], key=lambda a: a["uuid"])
        if state:
            hosts = [h for h in hosts if str(h.get("state")).upper() == state.upper()]
        return paged([h for h in hosts if h["uuid"] > after], limit, "uuid")

    @app.get("/api/v1/problems", summary="Every problem, worst first, with how it is handled")
    def api_problems(reader: Reader):
        return {"problems": console.fleet()["problems"]}

    @app.get("/api/v1/routers", summary="The routers, whether they answered, and the "
                                        "fleet's durability")
    def api_routers(reader: Reader):
        fleet = console.fleet()
        return {"routers": fleet["routers"], "durability": fleet["durability"]}

    @app.post("/api/v1/acks", status_code=201,
              summary="Acknowledge a host's problem (check None: the host DOWN); operator")
    def api_ack(reader: Reader, body: AckRequest):
        may(reader, "ack")
        try:
            made = acknowledge(reader, body.host, body.check, body.comment, body.sticky,
                               console.clock() + body.expire if body.expire else None)
        except Refused as e:
            raise HTTPException(e.status, str(e)) from None
        except ValueError as e:
            raise HTTPException(422, str(e)) from None
        return {"acks": [{"id": i, "uuid": u, "status": st} for i, u, st in made]}

    @app.post("/api/v1/runs", summary="Run a check now and answer its result (as "
                                      "`fleetwatch run --wait --json`); operator")
    def api_run(reader: Reader, body: RunRequest):
        may(reader, "run")
        try:
            return run_check(reader, body.host, body.plugin)
        except Refused as e:
            raise HTTPException(e.status, str(e)) from None

    @app.get("/api/v1/alerts", summary="The newest alerts with their delivery per channel "
                                       "and how each is handled (`fleetwatch alerts --json`)")
    def api_alerts(reader: Reader, limit: Annotated[int, Query(ge=1, le=PAGE_MAX)] = 50):
        try:
            rows, total = console.actions.alerts(limit)
        except Refused as e:
            raise HTTPException(e.status, str(e)) from None
        return {"alerts": rows, "total": total, "truncated": total > len(rows)}

    @app.get("/api/v1/downtimes", summary="The running and planned downtimes")
    def api_downtimes(reader: Reader):
        try:
            return {"downtimes": console.actions.downtimes()}
        except Refused as e:
            raise HTTPException(e.status, str(e)) from None

    @app.post("/api/v1/downtimes", status_code=201,
              summary="Schedule a downtime from now (check None: every alert of the host); "
                      "operator")
    def api_downtime(reader: Reader, body: DowntimeRequest):
        may(reader, "downtime")
        try:
            return {"id": schedule(reader, body.host, body.check, body.duration, body.comment)}
        except Refused as e:
            raise HTTPException(e.status, str(e)) from None

    @app.delete("/api/v1/downtimes/{downtime_id}", status_code=204,
                summary="End a running or planned downtime; operator")
    def api_end_downtime(reader: Reader, downtime_id: int):
        may(reader, "downtime")
        try:
            end_downtime(reader, downtime_id)
        except Refused as e:
            raise HTTPException(e.status, str(e)) from None
        return Response(status_code=204)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return JSONResponse({"error": exc.detail}, exc.status_code)

    return app


class AckRequest(BaseModel):
    host: str = Field(min_length=1, max_length=255, description="hostname or uuid")
    check: str | None = Field(None, max_length=255, description="the check; none: the host")
    comment: str = Field("", max_length=1000)
    sticky: bool = Field(False, description="until recovery, not the next state change")
    expire: float | None = Field(None, gt=0, description="seconds it lasts at most")


class RunRequest(BaseModel):
    host: str = Field(min_length=1, max_length=255, description="hostname or uuid")
    plugin: str = Field(min_length=1, max_length=255, description="a check it declared")


class DowntimeRequest(BaseModel):
    host: str = Field(min_length=1, max_length=255, description="hostname, uuid or pattern")
    check: str | None = Field(None, max_length=255, description="none: every alert")
    duration: str = Field(min_length=1, max_length=32, description="how long: 30m, 2h, 1d")
    comment: str = Field("", max_length=1000)


def paged(items: list[dict], limit: int, key: str) -> dict:
    """One page of ``items`` (already after the cursor): ``next`` when more follow."""
    page = items[:limit]
    return {"items": page, "next": page[-1][key] if len(items) > limit else None}


def summarise(fleet: dict) -> dict:
    """The overview's counts: hosts by state, checks by state, unhandled problems."""
    hosts: dict[str, int] = {}
    for agent in fleet["agents"]:
        key = str(agent.get("state") or "UNKNOWN")
        hosts[key] = hosts.get(key, 0) + 1
    checks: dict[str, int] = {}
    for check in fleet["checks"]:
        key = str(check.get("state") or "PENDING")
        checks[key] = checks.get(key, 0) + 1
    unhandled = fleet["unhandled"]
    return {"hosts": sorted(hosts.items()), "checks": sorted(checks.items()),
            "unhandled": unhandled, "handled": len(fleet["problems"]) - len(unhandled)}
