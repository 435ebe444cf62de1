"""``fleetwatch tail``: print live traffic from the routers' tail sockets.

The tail endpoints come from the operator config (``tail``) or from the WELCOME of each router
of the mesh (the operator config's and every router they name: :func:`fleetwatch.ask.ask_mesh`).
Filtering happens on the routers: the SUB subscribes to topic prefixes (``NOTIFY/``,
``NOTIFY/<uuid>/``, prefixes of each message's envelope), and messages are checked once more
here.
``--agent`` takes a uuid or a hostname, resolved through the routers' PEERS answers and the
state database.

A subscriber too slow for the traffic loses messages at the router (its queue for the
subscriber, ``limits.tail_hwm``, is full): each message's SEQ frame tells how many
(:mod:`fleetwatch.tailgaps`), and ``tail`` says so on standard error as it happens, naming
the router; with ``--strict`` it stops there, exit status 75 (EX_TEMPFAIL): the fail-fast
policy of a subscriber that must see everything.

``--since MSG_ID|TIME`` replays first what the history lake holds since that point (the
operator config's ``history.lake``), then goes on live with no gap and no duplicate at the
seam (:mod:`fleetwatch.lake.follow`, which programs use as a generator). Exit status: 2 for a
``--since`` that is neither a time nor a msg_id, 66 for a lake that is not there or a msg_id
it does not hold, 69 when the lake's tables must be read and PySpark (the ``history``
extra) or Java is missing, 75 when the lake does not catch up with the live tail.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

import zmq

from fleetwatch import protocol
from fleetwatch.ask import ask_mesh
from fleetwatch.config import load
from fleetwatch.display import compact, escape, human, iso
from fleetwatch.cli.operator import OperatorConfig, add_config, client_keys
from fleetwatch.protocol import ProtocolError, Relayed
from fleetwatch.tailgaps import Gaps, Lost

log = logging.getLogger(__name__)

#: ``--strict``: a message was lost (EX_TEMPFAIL: following again may see everything); with
#: ``--since``: the lake did not catch up with the live tail
EX_LOST = 75
#: ``--since``: no lake there, or a msg_id it does not hold (EX_NOINPUT)
#: ``--since``: how long the lake may take to catch up with the live tail
CATCH_UP = 30.0


def add_arguments(parser) -> None:
    add_config(parser)
    parser.add_argument("--type", action="append", default=[], metavar="T",
                        type=str.upper, choices=sorted(protocol.AGENT_TYPES),
                        help="only messages of this type (repeatable)")
    parser.add_argument("--agent", metavar="UUID|HOSTNAME", help="only this agent's messages")
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    parser.add_argument("--count", type=int, default=0, metavar="N",
                        help="stop after N messages")
    parser.add_argument("--timeout", type=float, default=0.0, metavar="S",
                        help="stop after S seconds")
    parser.add_argument("--strict", action="store_true",
                        help="stop at the first message lost (this subscriber fell behind "
                             "a router's queue), exit status 75")
    parser.add_argument("--since", metavar="MSG_ID|TIME",
                        help="first what the history lake holds since then (a msg_id: after "
                             "it; a time: epoch seconds, ISO 8601 like 2026-11-20T10:00Z, or "
                             "15m for 15 minutes ago), then live, no gap, no duplicate")


def subscriptions(types: list[str], uuids: list[str]) -> list[bytes]:
    """Topic prefixes to subscribe to: types x uuids (no filter: everything)."""
    if not uuids:
        return [protocol.topic(t) for t in types] or [b""]
    return [protocol.topic(t, u) for t in (types or sorted(protocol.AGENT_TYPES))
            for u in uuids]


def resolve_agent(value: str, hostnames: dict[str, str | None]) -> list[str]:
    """The uuids ``value`` names: itself if a known uuid, else the agents with that hostname."""
    if value in hostnames:
        return [value]
    matches = sorted(u for u, h in hostnames.items() if h == value)
    return matches or [value]


def wanted(relayed: Relayed, types: list[str], uuids: list[str]) -> bool:
    return (not types or relayed.message.type in types) and (not uuids or relayed.uuid in uuids)


def line(relayed: Relayed, hostnames: dict[str, str | None], as_json: bool,
         extra: dict | None = None) -> str:
    """One message as ``tail`` prints it; ``extra``: more fields for ``--json``. The routers
    it passed are shown whole (SPEC 4.10): ``central-1,site-3`` (the relaying router first,
    the agent's own last), and in ``--json`` as ``path``, a list, beside ``router`` (the
    first of them)."""
    msg = relayed.message
    ts = msg.get("ts")
    ts = ts if isinstance(ts, (int, float)) and not isinstance(ts, bool) else None
    hostname = hostnames.get(relayed.uuid) or msg.get("hostname")
    path = relayed.path or (relayed.router,)
    if as_json:
        return json.dumps({"time": iso(ts), "router": relayed.router, "path": list(path),
                           "type": msg.type, "uuid": relayed.uuid, "hostname": hostname,
                           **(extra or {}), "body": msg.body},
                          separators=(",", ":"), ensure_ascii=False)
    who = f"{hostname}/{relayed.uuid[:8]}" if hostname else relayed.uuid
    return escape(f"{human(ts) or '-'} {','.join(path)} {msg.type} {who} {compact(msg.body)}")


def lost_line(lost: Lost) -> str:
    """What ``tail`` says of messages lost before one it received."""
    of = f" of {lost.uuid}" if lost.uuid else ""
    return (f"fleetwatch tail: lost {lost.count} {lost.type} message"
            f"{'s' if lost.count != 1 else ''}{of} from router {lost.router} (this subscriber "
            f"fell behind: the router's queue for it, limits.tail_hwm, was full)")


def _known_hostnames(answers, state_url: str) -> dict[str, str | None]:
    hostnames: dict[str, str | None] = {}
    from fleetwatch.optional import MissingDependency
    from fleetwatch.store import state_reads
    from fleetwatch.store.reader import StateError, read
    try:
        for row in read(state_url, state_reads().agents):
            hostnames[row["uuid"]] = row.get("hostname")
    except (MissingDependency, StateError) as e:  # optional here: hostnames from routers only
        print(f"fleetwatch tail: state database not used: {e}", file=sys.stderr)
    for answer in answers:
        peers = answer.get("PEERS")
        for peer in (peers.get("agents") or []) if peers else []:
            if isinstance(peer, dict) and isinstance(peer.get("uuid"), str):
                hostnames[peer["uuid"]] = peer.get("hostname") or hostnames.get(peer["uuid"])
    return hostnames


def endpoints_of(config: OperatorConfig, answers, warn=None) -> list[str]:
    """The tail endpoints: the operator config's ``tail``, else those the routers' WELCOME
    answers name (``answers`` of HELLO); ``warn(line)`` for each router not reached."""
    endpoints = list(config.tail)
    for answer in answers:
        if not answer.reachable:
            if warn is not None:
                warn(f"router {answer.endpoint}: {answer.problem}")
            continue
        welcome = answer.get("WELCOME")
        tail = ((welcome.get("endpoints") or {}).get("tail") if welcome else None)
        if not config.tail and isinstance(tail, str) and tail not in endpoints:
            endpoints.append(tail)
    return endpoints


def run(args) -> int:
    config = load(OperatorConfig, args.config)
    if args.since is not None:
        from fleetwatch.lake.follow import check_since
        try:
            check_since(args.since)
        except ValueError as e:
            print(f"fleetwatch tail: {e}", file=sys.stderr)
            return 2
        if not os.path.isdir(config.history.lake):
            print(f"fleetwatch tail: no history lake at {config.history.lake} (the operator "
                  f"config's history.lake)", file=sys.stderr)
            return os.EX_NOINPUT
    keys = client_keys(config)
    # every router of the mesh: the operator config may name one seed (SPEC 4.9)
    answers = ask_mesh(config.routers, ("HELLO", "PEERS"), config.timeout, keys=keys)
    endpoints = endpoints_of(config, answers,
                             lambda line: print(f"fleetwatch tail: {line}", file=sys.stderr))
    if not endpoints:
        print("fleetwatch tail: no tail endpoint (no router answered, none configured)",
              file=sys.stderr)
        return os.EX_UNAVAILABLE
    hostnames = _known_hostnames(answers, config.state_url)
    uuids = resolve_agent(args.agent, hostnames) if args.agent else []
    if args.agent and uuids == [args.agent] and args.agent not in hostnames:
        print(f"fleetwatch tail: no known agent is {args.agent!r}; taking it as a uuid",
              file=sys.stderr)
    if args.since is not None:
        return replay(config, endpoints, uuids, hostnames, args, keys=keys)
    return follow(endpoints, args.type, uuids, hostnames, args, keys=keys)


def replay(config: OperatorConfig, endpoints: list[str], uuids: list[str],
           hostnames: dict[str, str | None], args, clock=time.monotonic, keys=None) -> int:
    """``--since``: the lake's messages since the point, then live (fleetwatch.lake.follow)."""
    from fleetwatch.optional import MissingDependency
    from fleetwatch.lake.follow import Follower, LakeBehind, LakeMissing, NotFound
    from fleetwatch.lake.spark import JavaMissing

    def stderr(text: str) -> None:
        print(f"fleetwatch tail: {text}", file=sys.stderr, flush=True)

    def on_lost(what) -> None:
        print(lost_line(what), file=sys.stderr, flush=True)
        if args.strict:
            raise Strict
    deadline = clock() + args.timeout if args.timeout > 0 else None
    follower = Follower(config.history, args.since, args.type, uuids, endpoints, keys,
                        catch_up=CATCH_UP, progress=stderr, on_lost=on_lost,
                        deadline=deadline, clock=clock)
    shown, status = 0, 0
    events = follower.events()
    try:
        for event in events:
            relayed = Relayed(event.uuid, event.router, protocol.Message(event.type, event.body),
                              path=event.path)
            print(line(relayed, hostnames, args.json, {"received": iso(event.received)}),
                  flush=True)
            shown += 1
            if args.count and shown >= args.count:
                break
    except (NotFound, LakeMissing) as e:
        stderr(str(e))
        return os.EX_NOINPUT
    except LakeBehind as e:
        stderr(f"{e}; what the live tail brought meanwhile is not shown")
        return EX_LOST
    except (MissingDependency, JavaMissing) as e:
        stderr(f"the lake's tables must be read: {e}")
        return os.EX_UNAVAILABLE
    except Strict:
        status = EX_LOST
    except KeyboardInterrupt:
        pass
    finally:
        events.close()
    if follower.bad[0]:
        stderr(f"{follower.bad[0]} landing lines skipped (not a message the lake keeps)")
    tell_end(follower.live.bad if follower.live is not None else 0, follower.gaps)
    return status


class Strict(Exception):
    """``--strict``: a message was lost on the live part."""


def tell_end(bad: int, gaps: Gaps) -> None:
    """What ``tail`` says on stderr at its end: undecodable messages, losses."""
    if bad:
        print(f"fleetwatch tail: {bad} undecodable messages skipped", file=sys.stderr)
    if gaps.lost:
        print(f"fleetwatch tail: {gaps.lost} messages lost in all", file=sys.stderr)
    if gaps.unnumbered:
        print(f"fleetwatch tail: {gaps.unnumbered} messages came from routers that do not "
              f"number their tail (older than fleetwatch's tail sequence numbers): what "
              f"they lost cannot be told", file=sys.stderr)


def follow(endpoints: list[str], types: list[str], uuids: list[str],
           hostnames: dict[str, str | None], args, clock=time.monotonic, keys=None) -> int:
    ctx = zmq.Context.instance()
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    if keys is not None:
        keys.apply(sub)
    for prefix in subscriptions(types, uuids):
        sub.setsockopt(zmq.SUBSCRIBE, prefix)
    for endpoint in endpoints:
        sub.connect(endpoint)
    deadline = clock() + args.timeout if args.timeout > 0 else None
    shown = bad = 0
    gaps = Gaps(by_sender=bool(uuids))
    strict = getattr(args, "strict", False)
    status = 0
    try:
        while not args.count or shown < args.count:
            wait = 1000 if deadline is None else max(0.0, deadline - clock()) * 1000
            if deadline is not None and wait <= 0:
                break
            if not sub.poll(min(wait, 1000)):
                continue
            try:
                relayed = protocol.decode_tail(sub.recv_multipart())
            except ProtocolError as e:
                bad += 1
                log.debug("bad tail message: %s", e)
                continue
            if not wanted(relayed, types, uuids):
                continue
            lost = gaps.seen(relayed)
            if lost is not None:
                print(lost_line(lost), file=sys.stderr, flush=True)
                if strict:
                    status = EX_LOST
                    break
            print(line(relayed, hostnames, args.json), flush=True)
            shown += 1
    except KeyboardInterrupt:
        pass
    finally:
        sub.close(0)
    tell_end(bad, gaps)
    return status
