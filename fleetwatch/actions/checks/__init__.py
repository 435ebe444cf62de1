"""Run a check now: have an agent run one of its plugins, and wait for its RESULT.

The RUN goes to every router's control socket (the configured ones, and the live routers of
their mesh that their WELCOME names); the agent is attached to some of them and runs the
command id once however many RUNs name it (SPEC 4, RUN). A router forwards a RUN without
answering and answers ``ERROR 404`` when it does not have the agent, so each RUN is followed
by a PEERS on the same connection: a router answers one connection's requests in order
(SPEC 4.3), so a PEERS answer with no ERROR before it means the RUN was forwarded. When no
router forwards it, the agent is offline (:class:`CannotCheck`).

With ``wait`` it subscribes to ``RESULT/UUID/`` on every router's tail *before* sending (a
socket monitor says when each subscription's connection is up) and answers the RESULT with
our command id. A subscription can still lose the race with a very fast RESULT, and RESULT
is at most once: so the RUN is resent, same command id, at growing intervals while we wait;
the agent answers a repeated id with its first RESULT and does not run the plugin again.

Before sending, the plugin is checked against what the agent declared in the registry (the
state database's ``plugins``): one it did not declare is not sent (the agent would refuse
it; ``force`` sends it anyway, for a registry that lags the agent). When the registry cannot
be read or does not know the agent, the RUN is sent unchecked, with a warning.

:func:`run` does it all in the caller's thread, every wait bounded (the routers' answers by
``Mesh.timeout``, the RESULT by ``timeout``): ``fleetwatch run`` calls it, and the console
from its thread pool. It answers the document ``fleetwatch run --json`` prints; what it
could not do is :class:`~.target.Usage` (a bad argument, exit 2) or :class:`CannotCheck`
(exit 3); what went wrong on the way is told to ``warn``, one line each. The agent is found
by :mod:`.target` (routers' PEERS, the state database), the RUN sent and its RESULT awaited
by :mod:`.exchange`.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import zmq

from fleetwatch import protocol
from fleetwatch.actions.checks.exchange import (Desk, ResultWatch, command_id, tails,
                                                wait_result)
from fleetwatch.actions.checks.target import (Usage, attached, declared_timeout, refusal,
                                              resolve, state_db, undeclared)
from fleetwatch.ask import ask_all, cli_id
from fleetwatch.display import escape, iso, state
from fleetwatch.protocol import Relayed

__all__ = ["CannotCheck", "DEFAULT_WAIT", "Mesh", "Usage", "WAIT_MARGIN", "check", "run",
           "who"]

log = logging.getLogger(__name__)

#: wait for a RESULT this long when the plugin's declared timeout is not known
DEFAULT_WAIT = 30.0
#: and this much longer than the declared timeout when it is
WAIT_MARGIN = 10.0


class CannotCheck(Exception):
    """The check could not be run (no router answers or has the agent, the agent did not
    declare the plugin, no RESULT in time): Nagios UNKNOWN, exit status 3."""


@dataclass(frozen=True)
class Mesh:
    """How the routers are reached: their control endpoints, the tail endpoints (none: as
    each router's WELCOME names them), seconds to wait for a router's answer, and the
    operator's CURVE keys (:class:`fleetwatch.security.ClientKeys`, or None)."""
    routers: Sequence[str]
    tail: Sequence[str] = ()
    timeout: float = 2.0
    keys: object = None


def _quiet(line: str) -> None:
    log.debug("run: %s", line)


def who(hostname: str | None, uuid: str) -> str:
    """The agent as messages name it: ``web-1 (UUID)``; a hostname is what the agent said in
    its HELLO, so its control characters are shown escaped."""
    return f"{escape(hostname)} ({uuid})" if hostname else uuid


def check(target: str, plugin: str, timeout: float | None = None) -> None:
    """:class:`Usage` unless ``target``, ``plugin`` and ``timeout`` can be asked for."""
    if not target:
        raise Usage("HOST|UUID is empty")
    if not protocol.ID_PATTERN.fullmatch(plugin):
        raise Usage(f"{plugin[:64]!r} is not a plugin name (1 to 64 letters, digits or "
                    f"._:@-, starting with a letter or a digit)")
    if timeout is not None and not (math.isfinite(timeout) and timeout > 0):
        raise Usage(f"--timeout {timeout:g}: expected a positive number of seconds")


def run(mesh: Mesh, state_url: str, target: str, plugin: str, wait: bool = True,
        timeout: float | None = None, force: bool = False,
        warn: Callable[[str], None] = _quiet) -> dict:
    """Have the agent ``target`` (hostname or uuid) run ``plugin`` now: with ``wait``, its
    RESULT (``uuid``, ``hostname``, ``plugin``, ``command_id``, ``router``, ``state``,
    ``status``, ``output``, ``long_output``, ``perfdata``, ``started``, ``duration``), awaited
    ``timeout`` seconds (default: the plugin's declared timeout + :data:`WAIT_MARGIN`, or
    :data:`DEFAULT_WAIT`); without, who forwarded the RUN (``command_id``, ``uuid``,
    ``hostname``, ``plugin``, ``accepted``, ``refused``)."""
    check(target, plugin, timeout)
    answers = ask_all(list(mesh.routers), ("HELLO", "PEERS"), mesh.timeout, keys=mesh.keys)
    answers += _members(answers, mesh.timeout, mesh.keys)
    live = [a for a in answers if a.reachable]
    for answer in answers:
        if not answer.reachable:
            warn(f"router {answer.endpoint}: {answer.problem}")
    if not live:
        raise CannotCheck("no router answered: the RUN cannot be sent")
    registry, plugins, unread = state_db(state_url)
    if unread is not None:
        warn(f"state database not used: {unread}")
    uuid, hostname, known = resolve(target, attached(live), registry)
    agent = who(hostname, uuid)
    declared_names = undeclared(plugins, registry, uuid, plugin)
    if declared_names is not None and not force:
        raise CannotCheck(refusal(agent, plugin, declared_names))
    names = {a.endpoint: a.router_id or a.endpoint for a in live}
    declared = declared_timeout(plugins, uuid, plugin)
    waited = timeout or (declared + WAIT_MARGIN if declared else DEFAULT_WAIT)
    msg = protocol.make("RUN", cli_id(), command_id=command_id(), plugin=plugin)
    ctx = zmq.Context.instance()
    watch = desk = None
    try:
        if wait:
            endpoints = tails(list(mesh.tail), live)
            if not endpoints:
                raise CannotCheck("no tail endpoint (none configured, none in WELCOME)")
            watch = ResultWatch(ctx, endpoints, uuid, mesh.keys)
            up, problems = watch.ready(mesh.timeout)
            for problem in problems:
                warn(problem)
            if not up:
                raise CannotCheck("cannot subscribe to any router's tail")
        desk = Desk(ctx, [a.endpoint for a in live], mesh.keys)
        outcome = desk.deliver(msg, uuid, mesh.timeout)
        accepted = [names[e] for e, problem in outcome.items() if not problem]
        refused = {names[e]: problem for e, problem in outcome.items() if problem}
        if not accepted:
            why = ", ".join(f"{r}: {p}" for r, p in refused.items())
            what = f"{agent} is offline: no router has it attached" if known else \
                f"no agent is known as {uuid!r} and no router has it attached"
            raise CannotCheck(f"{what} ({why})")
        if uuid not in registry:
            warn(f"warning: the registry does not list {agent}'s plugins: {plugin} not "
                 f"checked")
        if not wait:
            return {"command_id": msg.get("command_id"), "uuid": uuid, "hostname": hostname,
                    "plugin": plugin, "accepted": accepted, "refused": refused}
        relayed = wait_result(watch, desk, msg, uuid, waited)
        if relayed is None:
            raise CannotCheck(f"no RESULT of {plugin} from {agent} within {waited:g}s "
                              f"(RUN {msg.get('command_id')} forwarded by "
                              f"{', '.join(accepted)})")
        return result(relayed, hostname)
    finally:
        for sock in (watch, desk):
            if sock is not None:
                sock.close()


def _members(answers, timeout: float, keys) -> list:
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


def result(relayed: Relayed, hostname: str | None) -> dict:
    """A RESULT as ``run --wait --json`` prints it (times in ISO 8601 and seconds)."""
    body = relayed.message.body
    status = body["status"]
    return {"uuid": relayed.uuid, "hostname": hostname, "plugin": body["plugin"],
            "command_id": body["command_id"], "router": relayed.router,
            "state": state(status), "status": status, "output": body["output"],
            "long_output": body.get("long_output", ""),
            "perfdata": body.get("perfdata") or [],
            "started": iso(_time(body.get("started"))),
            "duration": _time(body.get("duration"))}


def _time(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else None
