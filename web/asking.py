"""Who is asking, found once a request: the one dependency every page and API call that
needs a login declares (:class:`Asking`), after Starlette's ``requires``.

A request is someone's by its session (``fleetwatch_session`` cookie, holding a session id
that the state database must still hold) or by an API token (``Authorization: Bearer``):
:meth:`web.context.Web.who`. What the dependency answers instead of the handler:

- **nobody**: a page redirects to ``/login``; an API call was answered 401 by
  :class:`web.gate.Gate` before its body was read (the user it found is
  ``request.state.who``; 401 here too, should a route be reached without it);
- **a form of a session** (a page's POST): its CSRF token, else 403 (:func:`checked_form`,
  also what logging in and out check);
- **a role that does not allow the action** (:func:`web.auth.allows`): 403, in the page's
  words (``viewer may not acknowledge``) or the API's (``{"error": "viewer may not ack"}``);
  FastAPI solves a dependency before it validates the body and the path, so an API change
  its role may not make answers 403 even when its body is not valid either.

The pages and the API declare it as a parameter's type, e.g.
``found: Annotated[Who, Depends(Asking("ack", "acknowledge", page=True))]``.
"""

from __future__ import annotations

from fastapi import HTTPException, Request
from fastapi.responses import PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData

from web import auth, store
from web.context import Answer, to_login
from web.gate import LOG_IN


#: fields a page's form may have: a bulk change's rows (web/bulk.py, at most 1,000) and the
#: form's own (Starlette's default, 1,000, would refuse the 1,000 rows with a bare 400)
FORM_FIELDS = 1100


async def checked_form(request: Request) -> FormData:
    """The form of a page's POST (read once: the handler's ``request.form()`` is this one),
    once its CSRF token is the session's; else :class:`Answer` 403."""
    form = await request.form(max_fields=FORM_FIELDS)
    if not auth.same_token(request.session.get("csrf"), form.get("csrf")):
        raise Answer(PlainTextResponse("missing or wrong CSRF token: reload the page", 403))
    return form


class Asking:
    """The dependency: the user a request is made by, allowed ``action`` (``read``: any
    role); else the answer a page (``page``) or the API gives. ``what`` is the action in a
    page's words (``remove acknowledgements``). A page's POST is its form's: the form is
    read, and its CSRF token checked, once who is asking is known, before the role."""

    def __init__(self, action: str = "read", what: str = "", *, page: bool = False):
        self.action, self.what, self.page = action, what or action, page

    async def __call__(self, request: Request) -> store.Who:
        found = getattr(request.state, "who", None)          # the API's: the gate's
        if found is None:
            found = await run_in_threadpool(request.app.state.web.who, request)
        if found is None:
            if self.page:
                raise Answer(to_login())
            raise HTTPException(401, LOG_IN)
        if self.page and request.method == "POST":
            await checked_form(request)
        if not auth.allows(found.role, self.action):
            if self.page:
                raise Answer(PlainTextResponse(f"{found.role} may not {self.what}", 403))
            raise HTTPException(403, f"{found.role} may not {self.action}")
        return found
