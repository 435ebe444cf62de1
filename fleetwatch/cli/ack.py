"""``fleetwatch ack add|list|remove``: acknowledge a problem, list and end acknowledgements.

    fleetwatch ack add HOST [CHECK] [--comment TEXT] [--sticky] [--expire DURATION]
                       [--no-notify] [--by NAME]       # print the new acknowledgement's id
    fleetwatch ack list [--json] [--all]               # running (or all) acknowledgements
    fleetwatch ack remove ID                           # end acknowledgement ID now

An acknowledgement is a row in the state database's ``acknowledgements`` table, which every
alerting sink reads (:mod:`sinks.alerting.acks.rules` says what it holds back and when it ends).
HOST is a hostname (any case) or a uuid; with CHECK it acknowledges that check's problem
(its latest result not OK), without it the host's DOWN. ``ack add`` refuses when there is no
such problem now, and a HOST (or CHECK) the fleet has never seen, naming the closest known
ones (:mod:`query.known`; ``--force`` skips that).

Exit status: 2 for a usage error (an unknown host among them), 1 when ``add`` finds no current problem or ``remove`` no
running acknowledgement of that id, 69 (EX_UNAVAILABLE) when the state database cannot be
used, 78 for a bad config file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from fleetwatch.config import load
from fleetwatch.display import escape, human, iso, state, table
from fleetwatch.optional import EX_UNAVAILABLE
from fleetwatch.cli.operator import OperatorConfig, add_config, login
from fleetwatch.cli.silence import Unavailable, add_force, removed, write

VERBS = ("add", "list", "remove")
FIELDS = ("id", "key", "uuid", "hostname", "check", "status", "state", "by", "comment",
          "sticky", "notify", "created", "until", "announced", "ended", "end_reason", "active")
#: the status of a host DOWN (a host's acknowledgement)
HOST_DOWN = 2


class NoProblem(Exception):
    """``ack add`` found nothing to acknowledge: one line on stderr, exit status 1."""


# ---------------------------------------------------------------- arguments

def _add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("host", metavar="HOST", help="hostname or uuid")
    parser.add_argument("check", nargs="?", metavar="CHECK",
                        help="plugin (default: the host's DOWN)")
    parser.add_argument("--comment", default="", metavar="TEXT",
                        help="what is being done (told to the channels, shown in listings)")
    parser.add_argument("--sticky", action="store_true",
                        help="last until recovery (default: until any state change)")
    parser.add_argument("--expire", metavar="DURATION",
                        help="end it after this long (90s, 30m, 2h, 1d): reminders resume")
    parser.add_argument("--no-notify", dest="notify", action="store_false",
                        help="do not tell the channels")
    parser.add_argument("--by", metavar="NAME", help="who acknowledges (default: your login)")
    add_force(parser)
    add_config(parser)


def _list_options(parser: argparse.ArgumentParser) -> None:
    add_config(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument("--all", action="store_true",
                        help="also the acknowledgements that ended")


def _remove_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", type=int, metavar="ID", help="the acknowledgement's id (ack list)")
    add_config(parser)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    for verb, options, help_ in (
            ("add", _add_options, "acknowledge a current problem: no more reminders"),
            ("list", _list_options, "the running acknowledgements (--all: also those ended)"),
            ("remove", _remove_options, "end an acknowledgement now")):
        options(verbs.add_parser(verb, help=help_, description=help_))


# ---------------------------------------------------------------- the state database

def problems(conn, host: str, check: str | None) -> list[tuple[str, int]]:
    """(uuid, status) of each current problem of ``host`` (a hostname or uuid) and ``check``
    (None: the host DOWN)."""
    from sqlalchemy import func, select
    from sinks.state import schema
    from sinks.state.db import has_tables
    uuids = {host}
    if has_tables(conn, "agents"):
        a = schema.agents
        uuids.update(conn.scalars(select(a.c.uuid).where(
            func.lower(a.c.hostname) == host.lower())))
    if check is not None:
        if not has_tables(conn, "check_state"):
            return []
        c = schema.check_state
        rows = conn.execute(select(c.c.uuid, c.c.status).where(
            c.c.uuid.in_(sorted(uuids)), c.c.plugin == check, c.c.status != 0,
            c.c.last_result.is_not(None)).order_by(c.c.uuid))
        return [(r.uuid, r.status) for r in rows]
    if not has_tables(conn, "host_state"):
        return []
    h = schema.host_state
    rows = conn.scalars(select(h.c.uuid).where(h.c.uuid.in_(sorted(uuids)), h.c.name == "",
                                               h.c.up.is_(False)).order_by(h.c.uuid))
    return [(uuid, HOST_DOWN) for uuid in rows]


def create(url: str, host: str, check: str | None, now: float, by: str, comment: str,
           sticky: bool, notify: bool, expire: float | None,
           force: bool = False, also=None) -> list[tuple[int, str, int]]:
    """Acknowledge the problems of ``host`` [``check``]: (id, uuid, status) of each
    (``also``: :func:`fleetwatch.cli.silence.write`'s);
    :class:`query.known.Unknown` for a host (or check) the fleet has never seen, unless
    ``force``; :class:`NoProblem` when nothing is wrong there now."""
    from query.known import refuse_unknown
    from sinks.alerting.acks import rules as acks
    from sinks.alerting.acks import store as ackstore

    def known(conn):
        refuse_unknown(conn, host, check)

    def change(conn):
        found = problems(conn, host, check)
        if not found:
            why = "its latest result is OK or it never ran" if check else "it is not DOWN"
            raise NoProblem(f"no current problem for {host}"
                            f"{' ' + check if check else ''} ({why})")
        return [(ackstore.add(conn, acks.check_key(uuid, check) if check else
                              acks.host_key(uuid), uuid, check, status, now, by, comment,
                              sticky, notify, expire), uuid, status)
                for uuid, status in found]
    return write(url, change, "acks", also, first=None if force else known)


def remove(url: str, ack_id: int, now: float, also=None) -> bool:
    from sinks.alerting.acks import rules as acks
    from sinks.alerting.acks import store as ackstore
    return write(url, lambda conn: ackstore.end(conn, ack_id, now, acks.REMOVED), "acks",
                 also)


# ---------------------------------------------------------------- the verbs

def add(args, clock=time.time) -> int:
    from sinks.alerting.acks.rules import check_comment
    from sinks.alerting.silences.rules import check_pattern, parse_duration
    try:
        host = check_pattern(args.host, "HOST")
        check = check_pattern(args.check, "CHECK") if args.check is not None else None
        comment = check_comment(args.comment)
        seconds = parse_duration(args.expire) if args.expire is not None else None
        by = check_pattern(args.by, "--by") if args.by is not None else login()
    except ValueError as e:
        print(f"fleetwatch ack: {e}", file=sys.stderr)
        return 2
    config = load(OperatorConfig, args.config)
    now = clock()
    expire = now + seconds if seconds is not None else None
    try:
        made = create(config.state_url, host, check, now, by, comment, args.sticky,
                      args.notify, expire, args.force)
    except ValueError as e:             # (query.known.Unknown: never seen)
        print(f"fleetwatch ack: {escape(str(e))}", file=sys.stderr)
        return 2
    except NoProblem as e:
        print(f"fleetwatch ack: {e}", file=sys.stderr)
        return 1
    except Unavailable as e:
        print(f"fleetwatch ack: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    for ack_id, uuid, status in made:
        what = f"{host} {check} ({state(status)})" if check else f"{host} (DOWN)"
        if uuid != host:
            what += f" [{uuid}]"
        lasts = "until recovery" if args.sticky or not check else "until its state changes"
        if expire is not None:
            lasts += f", at most until {human(expire)}"
        print(f"ack {ack_id}: {what} by {by} {lasts}" + (f": {comment}" if comment else ""))
    return 0


def end(args, clock=time.time) -> int:
    """``ack remove ID``: 0 when ended, 1 when no acknowledgement ``ID`` was running."""
    return removed(args, "ack", "ack", "running acknowledgement",
                   lambda url: remove(url, args.id, clock()))


def listed(config: OperatorConfig, now: float, ended: bool = False,
           reader=None) -> list[dict]:
    """The running acknowledgements (all with ``ended``), newest first, as ``ack list
    --json`` shows them (:func:`entry`); Unavailable when the database cannot be read (the
    console lists them through this too, with its ``reader``)."""
    from fleetwatch.optional import MissingDependency
    from sinks.state import state_reads
    from sinks.state.reader import Reader, StateError
    try:
        reads = state_reads()
        reader = reader or Reader(config.state_url)
        rows = reader.read(reads.acknowledgements, now=now, ended=ended)
        uuids = sorted({r["uuid"] for r in rows})
        names = {a["uuid"]: a["hostname"] for a in reader.read(reads.agents, uuids=uuids)} \
            if uuids else {}
    except (MissingDependency, StateError) as e:
        raise Unavailable(str(e)) from None
    finally:
        if reader is not None:
            reader.close()
    return [entry(row, now, names.get(row["uuid"])) for row in rows]


def listing(args, clock=time.time) -> int:
    config = load(OperatorConfig, args.config)
    try:
        out = listed(config, clock(), args.all)
    except Unavailable as e:
        print(f"fleetwatch ack: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    if args.json:
        print(json.dumps({"acks": out}, indent=2, ensure_ascii=False))
        return 0
    for x in out:
        x["host"] = x["hostname"] or x["uuid"]
        x["ends"] = x["ended"] or x["until"]
    print(table(out, ["id", "host", "check", "state", "by", "sticky", "ends", "comment"]))
    return 0


def entry(row: dict, now: float, hostname: str | None = None) -> dict:
    """An ``acknowledgements`` row as ``ack list`` shows it: :data:`FIELDS`, times in ISO
    8601, ``active``; one past its expiry that no sink has ended yet is shown ended then."""
    expire, ended, reason = row.get("expire"), row.get("ended"), row.get("end_reason")
    if ended is None and expire is not None and now >= expire:
        ended, reason = expire, "expired"
    check = row.get("check_name")
    return {"id": row["id"], "key": row["key"], "uuid": row["uuid"], "hostname": hostname,
            "check": check, "status": row["status"],
            "state": state(row["status"]) if check else "DOWN", "by": row["author"],
            "comment": row["comment"], "sticky": bool(row["sticky"]),
            "notify": bool(row["notify"]), "created": iso(row["created"]),
            "until": iso(expire), "announced": iso(row.get("announced")), "ended": iso(ended),
            "end_reason": reason, "active": ended is None and row["created"] <= now}


VERB_RUNS = {"add": add, "list": listing, "remove": end}


def run(args, clock=time.time) -> int:
    return VERB_RUNS[args.verb](args, clock)
