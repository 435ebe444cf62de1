"""Logging in and out of the console: the login page, its form, and the logout form.

A login is checked in the pool of threads passwords are hashed in (``console.hashes``:
never in the event loop, a bounded number at once, 503 beyond), after the login limiter
(``console.limiter``: too many failures of one user from one address, or from one address
whatever the names, answer 429 without a hash). A login makes a new session (a row of
``web_sessions``: :func:`web.store.login`) and a new CSRF token; logging out ends the
session on the server, so a copy of its cookie is refused after. Both forms carry the
CSRF token of the login page (:func:`web.asking.checked_form`).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from starlette.concurrency import run_in_threadpool

from web import auth, store
from web.asking import checked_form
from web.context import Shared, to_login

router = APIRouter(include_in_schema=False)


@router.get("/login", response_class=HTMLResponse)
def login_form(request: Request, web: Shared):
    return web.page(request, "login.html", error=None)


@router.post("/login")
async def login(request: Request, web: Shared):
    console = web.console
    form = await checked_form(request)
    name, password = str(form.get("user", ""))[:64], str(form.get("password", ""))
    address = request.client.host if request.client else "-"
    if console.limiter.locked(name, address):
        return web.page(request, "login.html", 429,
                        error="too many failed logins: try again later")
    try:                            # (the hash: in the pool's threads, not this loop)
        done = await console.hashes.run(store.login, console.engine, name, password,
                                        address, console.config.web.session_hours,
                                        console.clock)
    except auth.Busy as e:
        return web.page(request, "login.html", 503, error=str(e))
    if done is None:
        console.limiter.failed(name, address)
        return web.page(request, "login.html", 401, error="wrong user name or password")
    console.limiter.succeeded(name, address)
    request.session.clear()
    request.session.update(sid=done[1], csrf=auth.new_csrf())
    return RedirectResponse("/", status_code=303)


@router.post("/logout")
async def logout(request: Request, web: Shared):
    await checked_form(request)
    session_id = request.session.get("sid")
    if isinstance(session_id, str):         # ended on the server: a copy of the cookie
        await run_in_threadpool(store.logout, web.console.engine, session_id)  # is refused
    request.session.clear()
    return to_login()
