"""``fleetwatch forget HOST|UUID``: remove an agent that is gone for good from the state database.

    fleetwatch forget web-7                 # by hostname (any case): it must name one agent
    fleetwatch forget 3f2c9a0e...           # by uuid
    fleetwatch forget web-7 --json          # what was removed, as one JSON document

What an agent that deregisters or an ephemeral one gone silent gets from the alerting sinks
after ``alerting.forget_after`` (docs/operating/dynamic-fleets.md), done by hand now:
every row of its uuid, the registry's (``agents``, ``agent_routers``, ``plugins``) and the
alerting sinks' (its checks' results, states and freshness, its heartbeat state, its open
problems), goes at once (:func:`sinks.state.forget.forget`); its running acknowledgements
end. Notifications and alert events stay (they are what happened). A problem it had told
is not resolved on the channels: deregister the agent instead (``fleetwatch agent
--deregister``) when its pager incidents should close. An agent still running comes back
at its next HELLO or heartbeat, as a new one.

Exit status: 0 when forgotten, 1 when HOST names no agent or several (then forget each by
its uuid), 2 for a usage error, 69 (EX_UNAVAILABLE) when the state database cannot be used,
78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from fleetwatch.config import load
from fleetwatch.display import ago
from fleetwatch.optional import EX_UNAVAILABLE
from fleetwatch.cli.operator import OperatorConfig, add_config
from fleetwatch.cli.silence import Unavailable, write


class NotOne(Exception):
    """HOST names no agent, or several: one line on stderr, exit status 1."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST|UUID",
                        help="the agent's hostname (any case; it must name one agent) or uuid")
    parser.add_argument("--json", action="store_true",
                        help="print what was removed as one JSON document")
    add_config(parser)


def find(conn, host: str) -> tuple[str, str | None, float | None]:
    """(uuid, hostname, last heard) of the one agent ``host`` names: a uuid the registry or
    the alerting sinks know, else a hostname of the registry (deregistered agents too)."""
    from sqlalchemy import func, select
    from sinks.state import schema
    from sinks.state.db import has_tables
    a, h = schema.agents, schema.host_state
    names: dict[str, str | None] = {}
    if has_tables(conn, "agents"):
        names = dict(conn.execute(select(a.c.uuid, a.c.hostname).where(
            (a.c.uuid == host) | (func.lower(a.c.hostname) == host.lower()))).all())
    heard: dict[str, float] = {}
    if has_tables(conn, "host_state"):
        heard = dict(conn.execute(select(h.c.uuid, h.c.last_heard).where(h.c.name == "", (
            h.c.uuid == host) | h.c.uuid.in_(sorted(names)))).all())
    if host in names or host in heard:
        return host, names.get(host), heard.get(host) or None
    if not names:
        raise NotOne(f"no agent {host!r} is known (neither a hostname nor a uuid of the "
                     f"registry or the alerting sinks)")
    if len(names) > 1:
        raise NotOne(f"{host!r} names {len(names)} agents ({', '.join(sorted(names))}): "
                     f"forget each by its uuid")
    uuid = next(iter(names))
    return uuid, names[uuid], heard.get(uuid) or None


def run(args, clock=time.time) -> int:
    from sinks.alerting.silences.rules import check_pattern
    try:
        host = check_pattern(args.host, "HOST")
    except ValueError as e:
        print(f"fleetwatch forget: {e}", file=sys.stderr)
        return 2
    config = load(OperatorConfig, args.config)
    now = clock()

    def change(conn):
        from sinks.state.forget import forget
        uuid, hostname, heard = find(conn, host)
        return uuid, hostname, heard, forget(conn, [uuid], now)
    try:
        uuid, hostname, heard, removed = write(config.state_url, change, "acks")
    except NotOne as e:
        print(f"fleetwatch forget: {e}", file=sys.stderr)
        return 1
    except Unavailable as e:
        print(f"fleetwatch forget: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    if args.json:
        print(json.dumps({"uuid": uuid, "hostname": hostname, "last_heard": heard,
                          "removed": removed}, indent=2, ensure_ascii=False))
        return 0
    rows = ", ".join(f"{table} {n}" for table, n in removed.items()) or "no rows left"
    print(f"forgot {hostname or uuid}" + (f" [{uuid}]" if hostname else "") + f": {rows}")
    if heard is not None and now - heard < 300:
        print(f"fleetwatch forget: {hostname or uuid} was heard {ago(heard, now)}: a running "
              f"agent comes back at its next heartbeat", file=sys.stderr)
    return 0
