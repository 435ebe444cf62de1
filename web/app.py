"""The console and the API as one ASGI application (FastAPI over Starlette; uvicorn serves it).

:func:`create_app` puts together what every answer passes through: the session, the body
limit and the API's authentication (:class:`web.gate.Gate`), the security headers, the
error handlers, the CSS and JavaScript (:mod:`web.assets`); what every handler shares
(:class:`web.context.Web`, as ``app.state.web``); and the routes, each module's router:
logging in and out (:mod:`web.login`), the pages (:mod:`web.pages`), the API under
``/api/v1`` (:mod:`web.api`), the SLOs' page and list (:mod:`web.slos`), the rules'
pages and lists and a draft's backtest (:mod:`web.rules`, :mod:`web.backtests`), the
alerts Prometheus posts as to an Alertmanager (``/api/v2/alerts``: :mod:`web.alertmanager`).
What they show is read by :class:`web.console.Console` through the query layer
(:mod:`query`), the same reading as ``fleetwatch status``.

Pages are rendered on the server; the API answers JSON (a sender's text as the exact
string, which JSON escapes), its OpenAPI document at ``/api/v1/openapi.json``, behind the
same login as the rest of the API (no Swagger page: it would load scripts from a CDN).

Who may ask: a session (``fleetwatch_session`` cookie, signed with the ``web.secret_file``
key, ``SameSite=Strict``, ``Secure`` with TLS, holding a session id that the state database
must still hold: :mod:`web.store`) made by logging in, or an API token (``Authorization:
Bearer``), found once a request by one dependency (:class:`web.asking.Asking`). A page
without either redirects to ``/login``; an API call answers 401 before its body is read
(:mod:`web.gate`, which also refuses a body over ``web.max_body`` with 413), one its role
does not allow 403 (:func:`web.auth.allows`). Every form POST of a session carries its CSRF
token (403 without). Answers carry a Content-Security-Policy that allows nothing from
elsewhere. Every change (acknowledgement, downtime, check run) is recorded with who made it
(``web_audit``), an acknowledgement or a downtime in its own transaction.

Nothing of web/ imports this module: it imports the others.
"""

from __future__ import annotations

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from starlette.middleware.sessions import SessionMiddleware

from web import alertmanager, api, assets, bulk, context, dashboards, login, pages, rules, slos
from web.console import Console, Refused
from web.gate import Gate

__all__ = ["Console", "Refused", "create_app"]

SESSION_COOKIE = "fleetwatch_session"
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
                               "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
}


async def security_headers(request: Request, call_next):
    response = await call_next(request)
    for name, value in HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def create_app(console: Console, secret: str) -> FastAPI:
    settings = console.config.web
    app = FastAPI(title="fleetwatch", openapi_url="/api/v1/openapi.json", docs_url=None,
                  redoc_url=None, version="1")
    templates = context.templates()
    web = app.state.web = context.Web(console, templates)
    intake = app.state.intake = alertmanager.Intake(settings)
    # (the last added runs first: the gate runs inside the session, which it reads)
    app.add_middleware(Gate, limit=settings.max_body, who=web.who, refused=intake.refused)
    app.add_middleware(SessionMiddleware, secret_key=secret, session_cookie=SESSION_COOKIE,
                       max_age=int(settings.session_hours * 3600), same_site="strict",
                       https_only=bool(settings.tls_cert))
    assets.mount(app, templates, settings)       # /static/, styles(), scripts(), refresh
    app.middleware("http")(security_headers)

    app.include_router(login.router)
    app.include_router(pages.router)
    app.include_router(bulk.router)
    app.include_router(dashboards.router)
    app.include_router(slos.router)
    app.include_router(rules.router)
    app.include_router(api.router)
    app.include_router(slos.api)
    app.include_router(rules.api)
    app.include_router(alertmanager.router)

    app.add_exception_handler(context.Answer, context.answered)
    app.add_exception_handler(HTTPException, context.http_error)
    app.add_exception_handler(RequestValidationError, context.invalid)
    app.openapi = lambda: api.error_shape(app)         # (422 documented as answered)

    return app
