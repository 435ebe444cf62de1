"""The console over a real fleet, for the console's tests: :func:`start_console` starts
``fleetwatch web`` on a fleet (router, registry and alerting sinks, an agent) with two users,
alice (operator) and bob (viewer), whose password is :data:`PASSWORD`; :func:`api_post`
posts JSON to its API with a token."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

from support import webcli
from support.fleet import wait_for

PASSWORD = "correct horse battery"


def start_console(fleet, alerting: dict | None = None, scheduler: bool = False,
                  sinks: dict | None = None, web: str = "", **agent):
    """A fleet (router, registry and alerting sinks with ``sinks`` settings, an agent with
    ``agent`` settings) and ``fleetwatch web`` over it (``web``: YAML lines of its ``web:``
    section), with users alice (operator) and bob (viewer): (fleet, the operator config,
    the console's URL)."""
    router = fleet.router()
    fleet.sink("registry", [router], **(sinks or {}))
    fleet.sink("alerting", [router], **(sinks or {}),
               **({"alerting": alerting} if alerting else {}))
    fleet.agent([router], **agent)
    if scheduler:
        fleet.scheduler([router])
    op = fleet.operator_config([router])
    url = serve(fleet, op, web=web, users=(("alice", "operator"), ("bob", "viewer")))
    wait_for(lambda: fleet.db_rows("SELECT hostname FROM agents"), 20, what="the agent known")
    return fleet, op, url


def serve(fleet, op, config: str = "", web: str = "",
          users=(("alice", "viewer"),)) -> str:
    """``fleetwatch web`` on the operator config ``op`` (with ``config`` added at its top
    level and ``web`` in its ``web:`` section, YAML lines), its ``users`` made with
    :data:`PASSWORD`: the console's URL (http or https)."""
    op.write_text(op.read_text() + config + f"web:\n  listen: 127.0.0.1:0\n  secret_file: "
                  f"{fleet.root}/secret\n" + web)
    for name, role in users:        # in the worker: a process each cost 0.8 core-seconds
        webcli.web(fleet, "user", "add", name, "--role", role, "--password-stdin",
                   "--config", str(op), input=PASSWORD + "\n")
    proc = fleet.start("web", "web", "--config", str(op))
    return wait_for(lambda: re.search(r"at (https?://127\.0\.0\.1:\d+)/", proc.log()), 20,
                    what="the console's address").group(1)


def api_post(url: str, path: str, token: str, body: dict):
    """POST ``body`` as JSON to ``url + path`` with ``token``: (status, the JSON answer)."""
    req = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Authorization": f"Bearer {token}",
                                          "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, json.loads(res.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
