"""``fleetwatch run HOST|UUID PLUGIN``: have an agent run one of its plugins now.

The RUN goes to every router's control socket; the agent is attached to some of them and
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
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
import uuid as uuidlib

import zmq
from zmq.utils.monitor import recv_monitor_message

from fleetwatch import protocol
from fleetwatch.ask import (HANDSHAKE_FAILED, Answer, ask_all, cli_id, handshake_problem,
                            replies, request)
from fleetwatch.config import load
from fleetwatch.display import escape, iso, state
from plugins.output import plugin_text
from fleetwatch.cli.operator import DEFAULT_PATH, OperatorConfig, client_keys
from fleetwatch.protocol import Message, ProtocolError, Relayed

log = logging.getLogger(__name__)

EX_USAGE = 2
#: Nagios UNKNOWN: the check could not be run (offline agent, no router, no RESULT in time)
EX_UNKNOWN = 3
#: wait for a RESULT this long when the plugin's declared timeout is not known
DEFAULT_WAIT = 30.0
#: and this much longer than the declared timeout when it is
WAIT_MARGIN = 10.0
#: first resend of the RUN while waiting, doubled each time up to RESEND_MAX
RESEND_FIRST, RESEND_MAX = 1.0, 8.0
#: declared plugins named in a refusal; more are counted
SHOWN_PLUGINS = 20


class Usage(Exception):
    """A bad argument; ``str()`` is the one line to print (exit 2)."""


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
    parser.add_argument("--config", default=DEFAULT_PATH, metavar="PATH",
                        help=f"operator config (default {DEFAULT_PATH})")


def check(args) -> None:
    if not args.target:
        raise Usage("HOST|UUID is empty")
    if not protocol.ID_PATTERN.fullmatch(args.plugin):
        raise Usage(f"{args.plugin[:64]!r} is not a plugin name (1 to 64 letters, digits or "
                    f"._:@-, starting with a letter or a digit)")
    if args.timeout is not None and not (math.isfinite(args.timeout) and args.timeout > 0):
        raise Usage(f"--timeout {args.timeout:g}: expected a positive number of seconds")


def command_id() -> str:
    """A fresh command id for a RUN from the CLI (scheduler ids start ``s:``)."""
    return "cli:" + uuidlib.uuid4().hex[:24]


def resolve(value: str, attached: dict[str, str | None],
            registry: dict[str, str | None]) -> tuple[str, str | None, bool]:
    """(uuid, hostname, known) for ``value``: a uuid, or a hostname of exactly one agent.

    ``attached`` and ``registry`` map uuids to hostnames (the routers' PEERS, the state
    database). A hostname several agents have goes to the one attached now, if only one is;
    otherwise it is ambiguous (:class:`Usage`). An unknown value that is a valid id is taken
    as a uuid (``known`` False): the routers will say whether they have it.
    """
    hostnames = {**registry, **{u: h or registry.get(u) for u, h in attached.items()}}
    if value in hostnames:
        return value, hostnames[value], True
    matches = sorted(u for u, h in hostnames.items() if h == value)
    live = [u for u in matches if u in attached]
    if len(live) == 1 or len(matches) == 1:
        uuid = (live or matches)[0]
        return uuid, value, True
    if matches:
        listed = ", ".join(f"{u}{' (attached)' if u in attached else ''}" for u in matches)
        raise Usage(f"{len(matches)} agents have the hostname {value!r}: {listed}; "
                    f"name one by uuid")
    if not protocol.ID_PATTERN.fullmatch(value):
        raise Usage(f"{value[:64]!r} is neither a known hostname nor a valid uuid")
    return value, None, False


def declared_timeout(plugins: list[dict], uuid: str, plugin: str) -> float | None:
    """The timeout the agent declared for ``plugin`` (registry ``plugins`` spec), if any."""
    for row in plugins:
        spec = row.get("spec")
        if row.get("uuid") == uuid and row.get("name") == plugin and isinstance(spec, dict):
            value = spec.get("timeout")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return float(value)
    return None


def undeclared(plugins: list[dict], registry: dict[str, str | None], uuid: str,
               plugin: str) -> list[str] | None:
    """The plugins ``uuid`` declared, when the registry knows it and ``plugin`` is not one of
    them (the RUN would be refused by the agent); else None (declared, or not known)."""
    if uuid not in registry:
        return None
    names = sorted({r["name"] for r in plugins
                    if r.get("uuid") == uuid and isinstance(r.get("name"), str)})
    return None if plugin in names else names


def refusal(who: str, plugin: str, declared: list[str]) -> str:
    """One line: ``who`` did not declare ``plugin``, and what it did declare."""
    shown = [n if protocol.ID_PATTERN.fullmatch(n) else ascii(n)
             for n in declared[:SHOWN_PLUGINS]]
    more = f" and {len(declared) - SHOWN_PLUGINS} more" if len(declared) > SHOWN_PLUGINS else ""
    what = f"it declared {', '.join(shown)}{more}" if shown else "it declared no plugins"
    return (f"{who} did not declare {plugin!r} ({what}, says the registry): not sent; "
            f"--force sends it anyway")


class Desk:
    """One control DEALER per router: sends a RUN and learns which routers forwarded it."""

    def __init__(self, ctx: zmq.Context, endpoints: list[str], keys=None):
        self.sockets: dict[str, zmq.Socket] = {}
        self.poller = zmq.Poller()
        for endpoint in endpoints:
            sock = ctx.socket(zmq.DEALER)
            sock.linger = 0
            if keys is not None:
                keys.apply(sock)
            sock.connect(endpoint)
            self.sockets[endpoint] = sock
            self.poller.register(sock, zmq.POLLIN)

    def send(self, msg: Message, target: str) -> None:
        for sock in self.sockets.values():
            try:
                sock.send_multipart(protocol.encode_control(msg, target), zmq.NOBLOCK)
                sock.send_multipart(protocol.encode_control(request("PEERS")), zmq.NOBLOCK)
            except zmq.Again:                  # a router that has not read the last ones yet
                continue

    def deliver(self, msg: Message, target: str, timeout: float,
                clock=time.monotonic) -> dict[str, str]:
        """Send ``msg``; endpoint -> "" when forwarded, else why not (within ``timeout``)."""
        self.send(msg, target)
        outcome = {e: f"no answer within {timeout:g}s" for e in self.sockets}
        pending, refused = set(self.sockets), set()
        by_socket = {s: e for e, s in self.sockets.items()}
        deadline = clock() + timeout
        while pending and (left := deadline - clock()) > 0:
            for sock, _ in self.poller.poll(left * 1000):
                endpoint = by_socket[sock]

                def bad(e, endpoint=endpoint):
                    outcome[endpoint] = f"bad answer: {e}"
                for reply in replies(sock, bad):
                    if reply.type == "ERROR" and reply.get("ref") == msg.msg_id:
                        outcome[endpoint] = f"ERROR {reply.get('status')} {reply.get('reason')}"
                        refused.add(endpoint)
                    elif reply.type == "PEERS" and endpoint in pending:
                        pending.discard(endpoint)
                        if endpoint not in refused:
                            outcome[endpoint] = ""
        return outcome

    def drain(self) -> None:
        """Read and drop the answers to resends (routers may say 404 as the agent moves)."""
        for sock in self.sockets.values():
            while True:
                try:
                    sock.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break

    def close(self) -> None:
        for sock in self.sockets.values():
            sock.close(0)


class ResultWatch:
    """A SUB on every tail endpoint, subscribed to one agent's RESULTs."""

    def __init__(self, ctx: zmq.Context, endpoints: list[str], uuid: str, keys=None):
        self.endpoints, self.uuid = endpoints, uuid
        self.sub = ctx.socket(zmq.SUB)
        self.sub.linger = 0
        if keys is not None:
            keys.apply(self.sub)
        self.sub.setsockopt(zmq.SUBSCRIBE, protocol.topic("RESULT", uuid))
        self.monitor = self.sub.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED
                                                   | HANDSHAKE_FAILED)
        for endpoint in endpoints:
            self.sub.connect(endpoint)

    def ready(self, timeout: float, clock=time.monotonic) -> tuple[int, list[str]]:
        """Wait until every tail connection has completed its handshake (so carries our
        subscription) or failed, at most ``timeout``; return how many are up, and problems."""
        up: set[bytes] = set()
        failed: dict[bytes, str] = {}
        deadline = clock() + timeout
        while len(up) + len(failed) < len(self.endpoints) and (left := deadline - clock()) > 0:
            if not self.monitor.poll(left * 1000):
                break
            event = recv_monitor_message(self.monitor)
            if event["event"] == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                up.add(event["endpoint"])
                failed.pop(event["endpoint"], None)
            elif event["endpoint"] not in up:
                failed[event["endpoint"]] = handshake_problem(event)
        problems = [f"tail {e.decode(errors='replace')}: {p}" for e, p in failed.items()]
        waiting = len(self.endpoints) - len(up) - len(failed)
        if waiting > 0:
            problems.append(f"{waiting} tail endpoint(s) not connected within {timeout:g}s")
        return len(up), problems

    def next(self, command_id: str, timeout: float, clock=time.monotonic) -> Relayed | None:
        """The RESULT with ``command_id``, if one arrives within ``timeout``."""
        deadline = clock() + timeout
        while (left := deadline - clock()) > 0 and self.sub.poll(left * 1000):
            try:
                relayed = protocol.decode_tail(self.sub.recv_multipart(zmq.NOBLOCK))
            except (zmq.Again, ProtocolError) as e:
                log.debug("tail message skipped: %s", e)
                continue
            if relayed.uuid == self.uuid and relayed.message.type == "RESULT" \
                    and relayed.message.get("command_id") == command_id:
                return relayed
        return None

    def close(self) -> None:
        self.sub.disable_monitor()
        self.monitor.close(0)
        self.sub.close(0)


def wait_result(watch: ResultWatch, desk: Desk, msg: Message, target: str, timeout: float,
                clock=time.monotonic) -> Relayed | None:
    """Wait for the RESULT of ``msg`` (a RUN), resending it now and then (same command id)."""
    deadline = clock() + timeout
    retry, resend_at = 0, clock() + RESEND_FIRST
    while (left := deadline - clock()) > 0:
        relayed = watch.next(msg.get("command_id"), max(min(left, resend_at - clock()), 0.001))
        if relayed is not None:
            return relayed
        desk.drain()
        if clock() >= resend_at and clock() < deadline:
            retry += 1
            desk.send(protocol.resend(msg, retry), target)
            resend_at = clock() + min(RESEND_FIRST * 2 ** retry, RESEND_MAX)
    return None


def _who(hostname: str | None, uuid: str) -> str:
    """The agent as messages name it: ``web-1 (UUID)``; a hostname is what the agent said in
    its HELLO, so its control characters are shown escaped."""
    return f"{escape(hostname)} ({uuid})" if hostname else uuid


def _fail(message: str, status: int) -> int:
    print(f"fleetwatch run: {message}", file=sys.stderr)
    return status


def _state_db(url: str) -> tuple[dict[str, str | None], list[dict]]:
    """uuid -> hostname and the declared plugins, from the state database if readable."""
    from fleetwatch.optional import MissingDependency
    from sinks.state.reader import Reader, StateError
    reader = None
    try:
        reader = Reader(url)
        agents = {r["uuid"]: r.get("hostname") for r in reader.read("agents")}
        return agents, reader.read("plugins")
    except (MissingDependency, StateError) as e:
        print(f"fleetwatch run: state database not used: {e}", file=sys.stderr)
        return {}, []
    finally:
        if reader is not None:
            reader.close()


def _attached(answers: list[Answer]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for answer in answers:
        peers = answer.get("PEERS")
        for peer in (peers.get("agents") or []) if peers else []:
            if isinstance(peer, dict) and isinstance(peer.get("uuid"), str):
                hostname = peer.get("hostname")
                out[peer["uuid"]] = hostname if isinstance(hostname, str) else None
    return out


def _tails(config: OperatorConfig, answers: list[Answer]) -> list[str]:
    if config.tail:
        return list(config.tail)
    endpoints = []
    for answer in answers:
        welcome = answer.get("WELCOME")
        tail = (welcome.get("endpoints") or {}).get("tail") if welcome else None
        if isinstance(tail, str) and tail not in endpoints:
            endpoints.append(tail)
    return endpoints


def run(args) -> int:
    try:
        check(args)
    except Usage as e:
        return _fail(str(e), EX_USAGE)
    config = load(OperatorConfig, args.config)
    keys = client_keys(config)
    answers = ask_all(config.routers, ("HELLO", "PEERS"), config.timeout, keys=keys)
    live = [a for a in answers if a.reachable]
    for answer in answers:
        if not answer.reachable:
            print(f"fleetwatch run: router {answer.endpoint}: {answer.problem}", file=sys.stderr)
    if not live:
        return _fail("no router answered: the RUN cannot be sent", EX_UNKNOWN)
    registry, plugins = _state_db(config.state_url)
    try:
        uuid, hostname, known = resolve(args.target, _attached(live), registry)
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
            tails = _tails(config, live)
            if not tails:
                return _fail("no tail endpoint (none configured, none in WELCOME)", EX_UNKNOWN)
            watch = ResultWatch(ctx, tails, uuid, keys)
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
