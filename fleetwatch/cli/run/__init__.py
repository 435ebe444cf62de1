"""``fleetwatch run HOST|UUID PLUGIN``: have an agent run one of its plugins now.

The RUN goes to every router's control socket (the configured ones, and the live routers of
their mesh that their WELCOME names); the agent is attached to some of them and
runs the command id once however many RUNs name it (SPEC 4, RUN). A router forwards a RUN
without answering and answers ``ERROR 404`` when it does not have the agent, so each RUN is
followed by a PEERS on the same connection: a router answers one connection's requests in
order (SPEC 4.3), so a PEERS answer with no ERROR before it means the RUN was forwarded.
When no router forwards it, the agent is offline and the command exits 3 at once.

With ``--wait`` it subscribes to ``RESULT/UUID/`` on every router's tail *before* sending
(a socket monitor says when each subscription's connection is up), prints the RESULT with
our command id as the plugin printed it, and exits with the plugin's status. A subscription
can still lose the race with a very fast RESULT, and RESULT is at most once: so the RUN is
resent, same command id, at growing intervals while we wait; the agent answers a repeated
id with its first RESULT and does not run the plugin again.

Before sending, the plugin is checked against what the agent declared in the registry
(the state database's ``plugins``): one it did not declare is not sent (the agent would
refuse it; ``--force`` sends it anyway, for a registry that lags the agent). When the
registry cannot be read or does not know the agent, the RUN is sent unchecked, with a warning.

Exit statuses: the plugin's 0-3 with ``--wait``; 0 once sent without it; 2 for bad
arguments or an ambiguous hostname; 3 (Nagios UNKNOWN, "could not check") when the agent
did not declare the plugin, no router answers or has the agent, or no RESULT arrives in
time; 78 for config and key problems.

The agent is found by :mod:`.target` (routers' PEERS, the state database), the RUN sent and
its RESULT awaited by :mod:`.exchange`; this module is the command: arguments, messages,
printing and exit statuses.
"""

from __future__ import annotations

import json
import math
import sys

import zmq

from fleetwatch import protocol
from fleetwatch.ask import ask_all, cli_id
from fleetwatch.config import load
from fleetwatch.display import escape, iso, state
from plugins.output import plugin_text
from fleetwatch.cli.operator import OperatorConfig, add_config, client_keys
from fleetwatch.cli.run.exchange import Desk, ResultWatch, command_id, tails, wait_result
from fleetwatch.cli.run.target import (Usage, attached, declared_timeout, refusal, resolve,
                                       state_db, undeclared)
from fleetwatch.protocol import Message, Relayed

EX_USAGE = 2
#: Nagios UNKNOWN: the check could not be run (offline agent, no router, no RESULT in time)
EX_UNKNOWN = 3
#: wait for a RESULT this long when the plugin's declared timeout is not known
DEFAULT_WAIT = 30.0
#: and this much longer than the declared timeout when it is
WAIT_MARGIN = 10.0


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


def check(args) -> None:
    if not args.target:
        raise Usage("HOST|UUID is empty")
    if not protocol.ID_PATTERN.fullmatch(args.plugin):
        raise Usage(f"{args.plugin[:64]!r} is not a plugin name (1 to 64 letters, digits or "
                    f"._:@-, starting with a letter or a digit)")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise Usage(f"--timeout {args.timeout:g}: expected a positive number of seconds")


def _who(hostname: str | None, uuid: str) -> str:
    """The agent as messages name it: ``web-1 (UUID)``; a hostname is what the agent said in
    its HELLO, so its control characters are shown escaped."""
    return f"{escape(hostname)} ({uuid})" if hostname else uuid


def _fail(message: str, status: int) -> int:
    print(f"fleetwatch run: {message}", file=sys.stderr)
    return status


def run(args) -> int:
    try:
        check(args)
    except Usage as e:
        return _fail(str(e), EX_USAGE)
    config = load(OperatorConfig, args.config)
    keys = client_keys(config)
    answers = ask_all(config.routers, ("HELLO", "PEERS"), config.timeout, keys=keys)
    answers += _mesh(answers, config.timeout, keys)
    live = [a for a in answers if a.reachable]
    for answer in answers:
        if not answer.reachable:
            print(f"fleetwatch run: router {answer.endpoint}: {answer.problem}", file=sys.stderr)
    if not live:
        return _fail("no router answered: the RUN cannot be sent", EX_UNKNOWN)
    registry, plugins, unread = state_db(config.state_url)
    if unread is not None:
        print(f"fleetwatch run: state database not used: {unread}", file=sys.stderr)
    try:
        uuid, hostname, known = resolve(args.target, attached(live), registry)
    except Usage as e:
        return _fail(str(e), EX_USAGE)
    who = _who(hostname, uuid)
    declared_names = undeclared(plugins, registry, uuid, args.plugin)
    if declared_names is not None and not args.force:
        return _fail(refusal(who, args.plugin, declared_names), EX_UNKNOWN)
    names = {a.endpoint: a.router_id or a.endpoint for a in live}
    declared = declared_timeout(plugins, uuid, args.plugin)
    wait = args.timeout or (declared + WAIT_MARGIN if declared else DEFAULT_WAIT)
    msg = protocol.make("RUN", cli_id(), command_id=command_id(), plugin=args.plugin)
    ctx = zmq.Context.instance()
    watch = desk = None
    try:
        if args.wait:
            endpoints = tails(config.tail, live)
            if not endpoints:
                return _fail("no tail endpoint (none configured, none in WELCOME)", EX_UNKNOWN)
            watch = ResultWatch(ctx, endpoints, uuid, keys)
            up, problems = watch.ready(config.timeout)
            for problem in problems:
                print(f"fleetwatch run: {problem}", file=sys.stderr)
            if not up:
                return _fail("cannot subscribe to any router's tail", EX_UNKNOWN)
        desk = Desk(ctx, [a.endpoint for a in live], keys)
        outcome = desk.deliver(msg, uuid, config.timeout)
        accepted = [names[e] for e, problem in outcome.items() if not problem]
        refused = {names[e]: problem for e, problem in outcome.items() if problem}
        if not accepted:
            why = ", ".join(f"{r}: {p}" for r, p in refused.items())
            what = f"{who} is offline: no router has it attached" if known else \
                f"no agent is known as {uuid!r} and no router has it attached"
            return _fail(f"{what} ({why})", EX_UNKNOWN)
        if uuid not in registry:
            print(f"fleetwatch run: warning: the registry does not list {who}'s plugins: "
                  f"{args.plugin} not checked", file=sys.stderr)
        if not args.wait:
            return _sent(args, msg, uuid, hostname, accepted, refused)
        relayed = wait_result(watch, desk, msg, uuid, wait)
        if relayed is None:
            return _fail(f"no RESULT of {args.plugin} from {who} within {wait:g}s "
                         f"(RUN {msg.get('command_id')} forwarded by {', '.join(accepted)})",
                         EX_UNKNOWN)
        return _result(args, relayed, hostname)
    finally:
        for sock in (watch, desk):
            if sock is not None:
                sock.close()


def _mesh(answers, timeout: float, keys) -> list:
    """The routers of a mesh that the configured ones name in WELCOME ``members`` and that
    did not answer yet, asked the same: an agent is attached to ``k`` of the live routers
    only (SPEC 4.9), maybe none of those configured."""
    answered = {a.router_id for a in answers if a.reachable}
    asked = {a.endpoint for a in answers}
    named = []
    for answer in answers:
        welcome = answer.get("WELCOME")
        members = welcome.get("members") if welcome is not None else None
        for member in members if isinstance(members, list) else ():
            control = member.get("control") if isinstance(member, dict) else None
            if isinstance(control, str) and control not in asked \
                    and member.get("id") not in answered:
                named.append(control)
    named = list(dict.fromkeys(named))
    return ask_all(named, ("HELLO", "PEERS"), timeout, keys=keys) if named else []


def _sent(args, msg: Message, uuid: str, hostname: str | None, accepted: list[str],
          refused: dict[str, str]) -> int:
    cid = msg.get("command_id")
    if args.json:
        print(json.dumps({"command_id": cid, "uuid": uuid, "hostname": hostname,
                          "plugin": args.plugin, "accepted": accepted, "refused": refused},
                         indent=2, ensure_ascii=False))
    else:
        who = _who(hostname, uuid)
        print(f"RUN {cid} of {args.plugin} sent to {who}: forwarded by {', '.join(accepted)}")
    return 0


def _result(args, relayed: Relayed, hostname: str | None) -> int:
    body = relayed.message.body
    status = body["status"]
    if args.json:
        print(json.dumps({
            "uuid": relayed.uuid, "hostname": hostname, "plugin": body["plugin"],
            "command_id": body["command_id"], "router": relayed.router, "state": state(status),
            "status": status, "output": body["output"], "long_output": body.get("long_output", ""),
            "perfdata": body.get("perfdata") or [], "started": iso(_time(body.get("started"))),
            "duration": _time(body.get("duration"))}, indent=2, ensure_ascii=False))
    else:
        print(plugin_text(body["output"], body.get("long_output") or "", body.get("perfdata")))
    return status


def _time(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None
