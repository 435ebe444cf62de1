"""The console and the API as one ASGI application (FastAPI over Starlette; uvicorn serves it).

:func:`create_app` puts together what every answer shares: the session, the security
headers, the templates, who is asking and what their role allows (:class:`Web`), and the
two halves, the pages (:mod:`web.pages`) and the API under ``/api/v1`` (:mod:`web.api`).
What they show is read by :class:`web.console.Console` through the query layer
(:mod:`query`), the same reading as ``fleetwatch status``.

Pages are rendered on the server (Jinja2, autoescaping on, and every value a sender wrote
shown with its control characters visible: :func:`fleetwatch.display.escape` as the
templates' ``finalize``), so an agent's hostname, output or notification text is inert on
every page. The API answers JSON (a sender's text as the exact string, which JSON escapes),
its OpenAPI document at ``/api/v1/openapi.json``, behind the same login as the rest of
the API (no Swagger page: it would load scripts from a CDN).

Who may ask: a session (``fleetwatch_session`` cookie, signed with the ``web.secret_file``
key, ``SameSite=Strict``, ``Secure`` with TLS, holding a session id that the state database
must still hold: :mod:`web.store`) made by logging in, or an API token (``Authorization:
Bearer``). A page without either redirects to ``/login``; an API call answers 401 before its
body is read (:mod:`web.gate`, which also refuses a body over ``web.max_body`` with 413),
one its role does not allow 403 (:func:`web.auth.allows`). Every form POST of a session
carries its CSRF token (403 without). Answers carry a Content-Security-Policy that allows
nothing from elsewhere. Every change (acknowledgement, downtime, check run) is recorded
with who made it (``web_audit``), an acknowledgement or a downtime in its own transaction.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from markupsafe import Markup
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.middleware.sessions import SessionMiddleware
from starlette.templating import Jinja2Templates

from fleetwatch.display import escape, human, skew
from query import handling
from web import api, assets, auth, pages, store
from web.console import Console, Refused
from web.gate import Gate

__all__ = ["Console", "Refused", "create_app"]

TEMPLATES = Path(__file__).parent / "templates"
SESSION_COOKIE = "fleetwatch_session"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


def _finalize(value):
    """Every value a template prints: text with its control characters visible, None empty
    (autoescaping then makes markup inert). Markup (a macro's output, the SVG of a graph,
    made of escaped values) is printed as it is."""
    if value is None:
        return ""
    if isinstance(value, Markup):
        return value
    return escape(value) if isinstance(value, str) else value


class Web:
    """What the pages and the API share: the console, the templates, who is asking, and the
    changes an operator makes, each recorded with who made it."""

    def __init__(self, console: Console, templates: Jinja2Templates):
        self.console, self.templates = console, templates

    # ------------------------------------------------------------ who is asking
    def who(self, request: Request) -> store.Who | None:
        """The user of the request's API token or session; None for nobody."""
        header = request.headers.get("authorization", "")
        if header.lower().startswith("bearer "):
            return store.bearer(self.console.engine, header[7:].strip(), self.console.clock)
        session_id = request.session.get("sid")
        if not isinstance(session_id, str):
            return None
        found = store.session(self.console.engine, session_id, self.console.clock)
        if found is None:           # ended (logout, user removed, new password): forgotten
            request.session.clear()
        return found

    def api_user(self, request: Request) -> store.Who:
        """The API's dependency: the user (found by :class:`web.gate.Gate` before the
        request's body was read), or 401."""
        found = getattr(request.state, "who", None) or self.who(request)
        if found is None:
            raise HTTPException(401, "log in, or send Authorization: Bearer TOKEN")
        return found

    @staticmethod
    def may(found: store.Who, action: str) -> None:
        if not auth.allows(found.role, action):
            raise HTTPException(403, f"{found.role} may not {action}")

    async def posted(self, request: Request, action: str | None, what: str = ""):
        """A page's POST: (its form, the user), its CSRF token and the user's role checked;
        (its form, the answer) when one is not right. Who is asking is known before the
        form is read."""
        found = await run_in_threadpool(self.who, request)
        if found is None:
            return {}, pages.to_login()
        form = await request.form()
        if not auth.same_token(request.session.get("csrf"), form.get("csrf")):
            return form, PlainTextResponse("missing or wrong CSRF token: reload the page", 403)
        if action is not None and not auth.allows(found.role, action):
            return form, PlainTextResponse(f"{found.role} may not {what}", 403)
        return form, found

    def page(self, request: Request, name: str, status: int = 200, **context) -> HTMLResponse:
        csrf = request.session.get("csrf")
        if not csrf:
            csrf = request.session["csrf"] = auth.new_csrf()
        response = self.templates.TemplateResponse(request, name, {"csrf": csrf, **context})
        response.status_code = status
        return response

    # ------------------------------------------------------------ changes, recorded
    def _audit(self, found: store.Who, action: str, target: str, details) -> None:
        self.console.changed()              # the next page shows what was just changed
        with self.console.engine.begin() as conn:
            store.audit(conn, found.name, action, target, details, self.console.clock)

    def _done(self, made):
        """``made``, once a change is committed: the next page reads the fleet again."""
        self.console.changed()
        return made

    def _record(self, found: store.Who, action: str, target: str, details=lambda made: None):
        """The audit row of a change, written by ``also(conn, made)`` in the change's own
        transaction (:class:`fleetwatch.actions.console.Actions`): the change and its record are
        kept together or not at all. Nothing is recorded when nothing was changed."""
        def also(conn, made):
            if made:
                store.audit(conn, found.name, action, target, details(made),
                            self.console.clock)
        return also

    def acknowledge(self, found: store.Who, host: str, check: str | None, comment: str,
                    sticky: bool = False, expire: float | None = None,
                    force: bool = False) -> list:
        also = self._record(found, "ack.add", f"{host} {check or '(host)'}",
                            lambda made: {"acks": [a[0] for a in made], "comment": comment})
        return self._done(self.console.actions.ack(host, check, found.name, comment, sticky,
                                                   expire, force, also))

    def end_ack(self, found: store.Who, ack_id: int) -> None:
        if not self._done(self.console.actions.end_ack(
                ack_id, self._record(found, "ack.remove", str(ack_id)))):
            raise Refused(f"no running acknowledgement {ack_id}", 404)

    def run_check(self, found: store.Who, host: str, plugin: str) -> dict:
        result = self.console.actions.run_check(host, plugin)
        self._audit(found, "run", f"{host} {plugin}", {"status": result.get("status")})
        return result

    def schedule(self, found: store.Who, host: str, check: str | None, duration: str,
                 comment: str, force: bool = False) -> int:
        also = self._record(found, "downtime.add", f"{host} {check or '(host)'}",
                            lambda made: {"id": made, "duration": duration, "comment": comment})
        return self._done(self.console.actions.downtime(found.name, host, check, duration,
                                                        comment, force=force, also=also))

    def end_downtime(self, found: store.Who, downtime_id: int) -> None:
        if not self._done(self.console.actions.end_downtime(
                downtime_id, self._record(found, "downtime.remove", str(downtime_id)))):
            raise Refused(f"no running or planned downtime {downtime_id}", 404)


def invalid_text(exc: RequestValidationError) -> str:
    """A request FastAPI could not validate, in the API's words: one line, each problem as
    ``WHERE.FIELD: what is wrong`` (``body.duration: Field required``)."""
    parts = []
    for problem in exc.errors()[:5]:
        where = ".".join(str(p) for p in problem.get("loc", ()))
        parts.append(f"{where}: {problem.get('msg', 'not valid')}" if where
                     else str(problem.get("msg", "not valid")))
    return "; ".join(parts) or "the request is not valid"


def create_app(console: Console, secret: str) -> FastAPI:
    settings = console.config.web
    app = FastAPI(title="fleetwatch", openapi_url="/api/v1/openapi.json", docs_url=None,
                  redoc_url=None, version="1")
    templates = Jinja2Templates(directory=str(TEMPLATES))
    templates.env.finalize = _finalize
    templates.env.globals.update(handled_cell=handling.cell, what=handling.what, human=human,
                                 skew=skew, kept_back=handling.kept_back)
    web = Web(console, templates)
    # (the last added runs first: the gate runs inside the session, which it reads)
    app.add_middleware(Gate, limit=settings.max_body, who=web.who)
    app.add_middleware(SessionMiddleware, secret_key=secret, session_cookie=SESSION_COOKIE,
                       max_age=int(settings.session_hours * 3600), same_site="strict",
                       https_only=bool(settings.tls_cert))
    assets.mount(app, templates, settings)       # /static/, styles(), scripts(), refresh

    @app.middleware("http")
    async def security_headers(request: Request, call_next):
        response = await call_next(request)
        for name, value in HEADERS.items():
            response.headers.setdefault(name, value)
        return response

    app.include_router(pages.routes(web))
    app.include_router(api.routes(web))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        return JSONResponse({"error": exc.detail}, exc.status_code, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        return JSONResponse({"error": invalid_text(exc)}, 422)

    app.openapi = lambda: api.error_shape(app)         # (422 documented as answered)

    return app
