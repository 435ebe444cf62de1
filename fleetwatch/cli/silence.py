"""``fleetwatch silence HOST [CHECK] --for 2h [--reason TEXT]``: mute alerts for planned work.

The silence is a row in the state database's ``silences`` table, which every alerting sink
reads when an alert is due (:mod:`sinks.alerting.silences` says what it matches). Muted alerts are
recorded as suppressed, and the sinks keep tracking state, so what is still wrong when the
silence ends is alerted then. ``fleetwatch silences`` lists and removes them.
"""

from __future__ import annotations

import getpass
import socket
import sys
import time

from fleetwatch.config import load
from fleetwatch.display import human
from fleetwatch.cli.operator import DEFAULT_PATH, OperatorConfig

#: exit status when the state database cannot be used (EX_UNAVAILABLE, as `alerts`)
EX_UNAVAILABLE = 69


class Usage(Exception):
    """A bad argument: one line on stderr, exit status 2."""


class Unavailable(Exception):
    """The state database cannot be written or read: one line on stderr, exit status 69."""


def add_arguments(parser) -> None:
    parser.add_argument("host", metavar="HOST", help="hostname, uuid or glob (web-*)")
    parser.add_argument("check", nargs="?", metavar="CHECK",
                        help="plugin or glob (default: every alert of the host)")
    parser.add_argument("--for", dest="duration", required=True, metavar="DURATION",
                        help="how long: 90s, 30m, 2h, 1d, 1h30m")
    parser.add_argument("--reason", default="", metavar="TEXT", help="why (shown in listings)")
    parser.add_argument("--config", default=DEFAULT_PATH, metavar="PATH",
                        help=f"operator config (default {DEFAULT_PATH})")


def who() -> str:
    try:
        user = getpass.getuser()
    except (KeyError, OSError):     # no name for this uid (a container)
        user = "uid-unknown"
    return f"{user}@{socket.gethostname()}"


def writer(url: str):
    """A writing engine on the state database, its ``silences`` table created if missing."""
    from fleetwatch.optional import MissingDependency
    from sinks.state import state_db
    try:
        db = state_db()
    except MissingDependency as e:
        raise Unavailable(str(e)) from None
    from sinks.state.reader import safe_url
    if not db.exists(url):
        raise Unavailable(f"no state database at {safe_url(url)} (has no sink run yet?)")
    from sinks.base import WriteError
    try:
        eng = db.engine(url)
        db.create(eng, "silences")
    except (WriteError, ImportError) as e:
        raise Unavailable(f"cannot use the state database {safe_url(url)}: "
                          f"{(str(e).splitlines() or [''])[0]}") from None
    return eng


def database_error(url: str, e: Exception) -> Unavailable:
    from sinks.state.reader import safe_url
    return Unavailable(f"cannot use the state database {safe_url(url)}: "
                       f"{e.__class__.__name__}: {(str(e).splitlines() or [''])[0]}")


def create(url: str, host: str, check: str | None, seconds: float, reason: str,
           now: float) -> int:
    from sqlalchemy.exc import SQLAlchemyError
    from sinks.alerting import state as alertstate
    eng = writer(url)
    try:
        with eng.begin() as conn:
            return alertstate.add_silence(conn, host, check, now, now + seconds, reason, who())
    except SQLAlchemyError as e:
        raise database_error(url, e) from None
    finally:
        eng.dispose()


def run(args, clock=time.time) -> int:
    from sinks.alerting.silences import check_pattern, parse_duration
    try:
        host = check_pattern(args.host, "HOST")
        check = check_pattern(args.check, "CHECK") if args.check is not None else None
        seconds = parse_duration(args.duration)
        if len(args.reason) > 1000 or "\n" in args.reason:
            raise ValueError("--reason: expected one line of at most 1000 characters")
    except ValueError as e:
        print(f"fleetwatch silence: {e}", file=sys.stderr)
        return 2
    config = load(OperatorConfig, args.config)
    now = clock()
    try:
        silence_id = create(config.state_url, host, check, seconds, args.reason, now)
    except Unavailable as e:
        print(f"fleetwatch silence: {e}", file=sys.stderr)
        return EX_UNAVAILABLE
    what = f"{host} {check}" if check else f"{host} (every alert)"
    print(f"silence {silence_id}: {what} until {human(now + seconds)}"
          + (f": {args.reason}" if args.reason else ""))
    return 0
