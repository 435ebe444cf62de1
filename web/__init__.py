"""The operator console and the HTTP API (``fleetwatch web``): one more process that reads the
state database and asks the routers, as ``fleetwatch status`` does, and writes only what an
operator changes (acknowledgements, downtimes, users), each change recorded with who made it.

- :mod:`web.settings`: the operator config's ``web:`` section;
- :mod:`web.auth`: passwords (checked in a bounded pool of threads), API tokens, session
  ids, roles, the login limiter, CSRF tokens (no I/O);
- :mod:`web.store`: users, tokens, sessions and the audit trail in the state database;
- :mod:`web.gate`: what a request passes first: the body limit, the API's authentication;
- :mod:`web.app`: the ASGI application (FastAPI over Starlette): pages rendered on the
  server with Jinja2, the API under ``/api/v1`` with its OpenAPI document.

Killing it loses nothing and it never blocks a sink: it holds no state of its own but its
session secret, and reads with short transactions. The agent never imports this package.
"""
