"""The operator console and the HTTP API (``fleetwatch web``): one more process that reads the
state database and asks the routers, as ``fleetwatch status`` does, and writes only what an
operator changes (acknowledgements, downtimes, users), each change recorded with who made it.

- :mod:`web.settings`: the operator config's ``web:`` section;
- :mod:`web.auth`: passwords (checked in a bounded pool of threads), API tokens, session
  ids, roles, the login limiter, CSRF tokens (no I/O);
- :mod:`web.store`: users, tokens, sessions and the audit trail in the state database;
- :mod:`web.console`: what the pages and the API read, through the query layer;
- :mod:`web.health`: the fleet's own counters, from the routers' tails;
- :mod:`web.assets`: the CSS and JavaScript, built from npm packages, served under /static/;
- :mod:`web.gate`: what a request passes first: the body limit, the API's authentication;
- :mod:`web.context`: what every handler shares (:class:`web.context.Web`: the console,
  the templates, rendering, the changes recorded with who made them) and the error answers;
- :mod:`web.asking`: who is asking, the one dependency of every handler that needs a login
  (a page: else to ``/login``; the API: 401; a role not allowed: 403);
- :mod:`web.login`, :mod:`web.pages`, :mod:`web.api`: the routes, each module's router:
  logging in and out, the pages rendered on the server with Jinja2, the API under
  ``/api/v1`` with its OpenAPI document;
- :mod:`web.app`: the ASGI application (FastAPI over Starlette) made of them.

Imports point one way (app, then the routes, then asking, then context and gate, then
console, store and auth): no module imports, however indirectly, one that imports it
(tests/unit/test_layers.py).

Killing it loses nothing and it never blocks a sink: it holds no state of its own but its
session secret, and reads with short transactions. The agent never imports this package.
"""
