"""What every handler of the console and the API shares: :class:`Web` (the console, the
templates, who a request's session or token names, the pages' rendering, and the changes an
operator makes, each recorded with who made it), reached by a handler as ``web: Shared``
(``request.app.state.web``, put there by :func:`web.app.create_app`), and how an answer
that is not the handler's is made: :class:`Answer` (a response instead: the login page, a
refused form), the API's errors as ``{"error": "..."}`` (:func:`http_error`,
:func:`invalid`).

Pages are rendered on the server (Jinja2, autoescaping on, and every value a sender wrote
shown with its control characters visible: :func:`fleetwatch.display.escape` as the
templates' ``finalize``), so an agent's hostname, output or notification text is inert on
every page. Every page carries the session's CSRF token (made at its first page).

Imports nothing of web/ but the layers below the handlers (auth, store, console, gate): the
handlers import it, never the other way round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from markupsafe import Markup
from starlette.templating import Jinja2Templates

from fleetwatch.display import ago, escape, first_line, human, skew
from query import handling
from web import auth, store
from web.console import Console, Refused
from web.gate import error_body

TEMPLATES = Path(__file__).parent / "templates"


def _finalize(value):
    """Every value a template prints: text with its control characters visible, None empty
    (autoescaping then makes markup inert). Markup (a macro's output, the SVG of a graph,
    made of escaped values) is printed as it is."""
    if value is None:
        return ""
    if isinstance(value, Markup):
        return value
    return escape(value) if isinstance(value, str) else value


def _ago(stamp, now: float) -> str | None:
    """How long before ``now`` a time of a row was (``5m ago``): a :class:`Stamp` (what the
    reading gives) or epoch seconds; None for none, the text itself for another text."""
    ts = getattr(stamp, "ts", stamp)
    if isinstance(ts, str):
        return ts
    return ago(ts, now)


def templates() -> Jinja2Templates:
    """The pages' templates, with what they call (how a problem is handled, ages, skew)."""
    made = Jinja2Templates(directory=str(TEMPLATES))
    made.env.finalize = _finalize
    made.env.globals.update(handled_cell=handling.cell, what=handling.what, human=human,
                            skew=skew, kept_back=handling.kept_back, ago=_ago,
                            first_line=first_line, allows=auth.allows)
    return made


class Web:
    """What the pages and the API share: the console, the templates, who is asking, and the
    changes an operator makes, each recorded with who made it."""

    def __init__(self, console: Console, templates: Jinja2Templates):
        self.console, self.templates = console, templates

    def who(self, request: Request) -> store.Who | None:
        """The user of the request's API token or session; None for nobody. (It reads the
        state database: called in a worker thread.)"""
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

    def page(self, request: Request, name: str, status: int = 200, **context) -> HTMLResponse:
        """The template ``name`` rendered with ``context``, the session's CSRF token and
        ``now`` (the console's clock: what the rows' ages are counted from)."""
        csrf = request.session.get("csrf")
        if not csrf:
            csrf = request.session["csrf"] = auth.new_csrf()
        response = self.templates.TemplateResponse(
            request, name, {"csrf": csrf, "now": self.console.clock(), **context})
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
        transaction (``console.actions``): the change and its record are kept together or
        not at all. Nothing is recorded when nothing was changed."""
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


async def shared(request: Request) -> Web:
    """The dependency that hands a handler the application's :class:`Web`."""
    return request.app.state.web


#: a handler's parameter for what it shares (``web: Shared``)
Shared = Annotated[Web, Depends(shared)]


# ---------------------------------------------------------------- answers and errors
class Answer(Exception):
    """Raised by a dependency: ``response`` is the answer, not the handler's (the login
    page for nobody, a form refused); :func:`answered` gives it."""

    def __init__(self, response: Response):
        super().__init__(response.status_code)
        self.response = response


def to_login() -> RedirectResponse:
    return RedirectResponse("/login", status_code=303)


def refused(e: Refused) -> HTTPException:
    """What the fleet refused, as the API answers it (its status, its text)."""
    return HTTPException(e.status, str(e))


def invalid_text(exc: RequestValidationError) -> str:
    """A request FastAPI could not validate, in the API's words: one line, each problem as
    ``WHERE.FIELD: what is wrong`` (``body.duration: Field required``)."""
    parts = []
    for problem in exc.errors()[:5]:
        where = ".".join(str(p) for p in problem.get("loc", ()))
        parts.append(f"{where}: {problem.get('msg', 'not valid')}" if where
                     else str(problem.get("msg", "not valid")))
    return "; ".join(parts) or "the request is not valid"


async def answered(request: Request, exc: Answer) -> Response:
    return exc.response


async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
    return JSONResponse(error_body(request.url.path, exc.status_code, exc.detail),
                        exc.status_code, headers=exc.headers)


async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
    return JSONResponse({"error": invalid_text(exc)}, 422)
