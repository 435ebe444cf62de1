"""``fleetwatch run HOST|UUID PLUGIN``: have an agent run one of its plugins now.

The RUN goes to every router of the mesh; the agent is attached to some of them and runs
the command id once however many RUNs name it (SPEC 4, RUN). When no router forwards it,
the agent is offline and the command exits 3 at once. With ``--wait`` it prints the RESULT
with our command id as the plugin printed it, and exits with the plugin's status. A plugin
the agent did not declare in the registry is not sent (``--force`` sends it anyway).
:mod:`fleetwatch.actions.checks` does it all (the console runs a check through it too);
this module is the command: arguments, messages, printing and exit statuses.

Exit statuses: the plugin's 0-3 with ``--wait``; 0 once sent without it; 2 for bad
arguments or an ambiguous hostname; 3 (Nagios UNKNOWN, "could not check") when the agent
did not declare the plugin, no router answers or has the agent, or no RESULT arrives in
time; 78 for config and key problems.
"""

from __future__ import annotations

import json
import sys

from fleetwatch.actions import checks
from fleetwatch.actions.checks import DEFAULT_WAIT, WAIT_MARGIN, CannotCheck, Mesh, Usage
from fleetwatch.cli.operator import OperatorConfig, add_config, client_keys
from fleetwatch.config import load
from plugins.output import plugin_text

EX_USAGE = 2
#: Nagios UNKNOWN: the check could not be run (offline agent, no router, no RESULT in time)
EX_UNKNOWN = 3


def add_arguments(parser) -> None:
    parser.add_argument("target", metavar="HOST|UUID", help="an agent's hostname or uuid")
    parser.add_argument("plugin", metavar="PLUGIN", help="a plugin the agent declared")
    parser.add_argument("--wait", action="store_true",
                        help="wait for the result, print it and exit with the plugin's status")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help=f"seconds to wait for the result (default: the plugin's declared "
                             f"timeout + {WAIT_MARGIN:g}, or {DEFAULT_WAIT:g})")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--force", action="store_true",
                        help="send even a plugin the registry says the agent did not declare")
    add_config(parser)


def mesh_of(config: OperatorConfig) -> Mesh:
    """How the operator's config reaches the routers, its CURVE keys checked
    (:func:`fleetwatch.cli.operator.client_keys`: SecurityError, exit 78)."""
    return Mesh(config.routers, config.tail, config.timeout, client_keys(config))


def _warn(line: str) -> None:
    print(f"fleetwatch run: {line}", file=sys.stderr)


def run(args) -> int:
    try:
        checks.check(args.target, args.plugin, args.timeout)
    except Usage as e:
        return _fail(str(e), EX_USAGE)
    config = load(OperatorConfig, args.config)
    try:
        done = checks.run(mesh_of(config), config.state_url, args.target, args.plugin,
                          args.wait, args.timeout, args.force, _warn)
    except Usage as e:
        return _fail(str(e), EX_USAGE)
    except CannotCheck as e:
        return _fail(str(e), EX_UNKNOWN)
    if args.json:
        print(json.dumps(done, indent=2, ensure_ascii=False))
    elif args.wait:
        print(plugin_text(done["output"], done["long_output"] or "", done["perfdata"]))
    else:
        print(f"RUN {done['command_id']} of {args.plugin} sent to "
              f"{checks.who(done['hostname'], done['uuid'])}: forwarded by "
              f"{', '.join(done['accepted'])}")
    return done["status"] if args.wait else 0


def _fail(message: str, status: int) -> int:
    print(f"fleetwatch run: {message}", file=sys.stderr)
    return status
