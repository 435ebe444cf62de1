"""``fleetwatch forget HOST|UUID``: remove an agent that is gone for good from the state database.

    fleetwatch forget web-7                 # by hostname (any case): it must name one agent
    fleetwatch forget 3f2c9a0e...           # by uuid
    fleetwatch forget web-7 --json          # what was removed, as one JSON document

What an agent that deregisters or an ephemeral one gone silent gets from the alerting sinks
after ``alerting.forget_after`` (docs/operating/dynamic-fleets.md), done by hand now:
every row of its uuid, the registry's (``agents``, ``agent_routers``, ``plugins``) and the
alerting sinks' (its checks' results, states and freshness, its heartbeat state, its open
problems), goes at once (:func:`fleetwatch.actions.forget.forget`); its running
acknowledgements end. Notifications and alert events stay (they are what happened). A
problem it had told is not resolved on the channels: deregister the agent instead
(``fleetwatch agent --deregister``) when its pager incidents should close. An agent still
running comes back at its next HELLO or heartbeat, as a new one.

Exit status: 0 when forgotten, 1 when HOST names no agent or several (then forget each by
its uuid), 2 for a usage error, 69 (EX_UNAVAILABLE) when the state database cannot be used,
78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from fleetwatch.actions import forget
from fleetwatch.actions.forget import NotOne, Unavailable
from fleetwatch.config import load
from fleetwatch.display import ago
from fleetwatch.cli.operator import OperatorConfig, add_config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST|UUID",
                        help="the agent's hostname (any case; it must name one agent) or uuid")
    parser.add_argument("--json", action="store_true",
                        help="print what was removed as one JSON document")
    add_config(parser)


def run(args, clock=time.time) -> int:
    from sinks.alerting.silences.rules import check_pattern
    try:
        host = check_pattern(args.host, "HOST")
    except ValueError as e:
        print(f"fleetwatch forget: {e}", file=sys.stderr)
        return 2
    config = load(OperatorConfig, args.config)
    now = clock()
    try:
        done = forget.forget(config.state_url, host, now)
    except NotOne as e:
        print(f"fleetwatch forget: {e}", file=sys.stderr)
        return 1
    except Unavailable as e:
        print(f"fleetwatch forget: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    if args.json:
        print(json.dumps(done, indent=2, ensure_ascii=False))
        return 0
    uuid, hostname, heard, removed = (done[k] for k in ("uuid", "hostname", "last_heard",
                                                        "removed"))
    rows = ", ".join(f"{table} {n}" for table, n in removed.items()) or "no rows left"
    print(f"forgot {hostname or uuid}" + (f" [{uuid}]" if hostname else "") + f": {rows}")
    if heard is not None and now - heard < 300:
        print(f"fleetwatch forget: {hostname or uuid} was heard {ago(heard, now)}: a running "
              f"agent comes back at its next heartbeat", file=sys.stderr)
    return 0
