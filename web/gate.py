"""What every request passes before the application reads it (an ASGI middleware, inside the
session's): its body's size, and for the API who is asking.

- A body over ``limit`` bytes (``web.max_body``) is refused with 413: at once when its
  ``Content-Length`` says so, before a byte of it is read; counted as it streams otherwise
  (chunked), the reading stopped at the limit. The 413 closes the connection, so what is
  left of the body is not read either.
- A call under :data:`API` is authenticated first (``who(request)``, in a worker thread: it
  reads the state database): without a session or a token it answers 401 before its body is
  read or parsed, whatever it holds; the user found is ``request.state.who`` for the route.
  The OpenAPI document (``/api/v1/openapi.json``) is part of the API, behind the same login.

Under :data:`ALERTMANAGER` (the console as an Alertmanager, :mod:`web.alertmanager`) the
refusals are in Alertmanager's shape, ``{"code": 401, "message": "..."}``, and told to
``refused(path, status)``, which counts them.
"""

from __future__ import annotations

import json

from fastapi import HTTPException
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

#: the paths a request must be authenticated for before anything else
API = "/api/"
#: what an API call without a login is answered
LOG_IN = "log in, or send Authorization: Bearer TOKEN"
#: the paths of Alertmanager's API, whose errors are in its shape
ALERTMANAGER = "/api/v2/"


def error_body(path: str, status: int, error: str) -> dict:
    """An API error as the path's API answers it: ``{"error"}``, or Alertmanager's
    ``{"code", "message"}`` under :data:`ALERTMANAGER`."""
    if path.startswith(ALERTMANAGER):
        return {"code": status, "message": error}
    return {"error": error}


async def _answer(send, path: str, status: int, error: str, close: bool = False) -> None:
    body = json.dumps(error_body(path, status, error)).encode()
    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(len(body)).encode())]
    if close:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class Gate:
    """``app`` behind the body limit and the API's authentication; ``who(request)`` is the
    user of a request (its session or token) or None."""

    def __init__(self, app, limit: int, who, refused=None):
        self.app, self.limit, self.who = app, limit, who
        self.refused = refused or (lambda path, status: None)

    def too_large(self) -> str:
        return f"a request's body holds at most {self.limit} bytes (web.max_body)"

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
        path = scope["path"]
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            self.refused(path, 413)
            return await _answer(send, path, 413, self.too_large(), close=True)
        if path.startswith(API):
            found = await run_in_threadpool(self.who, Request(scope))
            if found is None:
                self.refused(path, 401)
                return await _answer(send, path, 401, LOG_IN)
            scope.setdefault("state", {})["who"] = found
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    # (FastAPI and Starlette's form parser let an HTTPException through:
                    # the application's handler answers it)
                    raise HTTPException(413, self.too_large(), {"Connection": "close"})
            return message

        await self.app(scope, counted, send)
