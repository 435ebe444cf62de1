"""The Spark the history verbs query the lake on: a Spark Connect server reached once before
PySpark's own client would retry it for minutes, the lake opened on a session, and what a
verb says on stderr about it (a local Spark starting, lines not compacted yet). Shared by
the verbs (:mod:`fleetwatch.cli.history.sql`, ``gaps``, ``serve``) and the command's entry
(:mod:`fleetwatch.cli.history`); imports no PySpark itself.
"""

from __future__ import annotations

import shlex
import socket
import sys
import urllib.parse


#: the port of ``sc://HOST`` (Spark Connect's default)
CONNECT_PORT = 15002


def connect_address(url: str) -> tuple[str, int]:
    """The host and port of a Spark Connect URL, ``sc://HOST[:PORT][/;PARAMS]``;
    ValueError (its text what was expected) for anything else."""
    expected = f"expects a Spark Connect URL such as sc://HOST:{CONNECT_PORT}, not {url!r}"
    parts = urllib.parse.urlsplit(url)
    try:
        port = parts.port or CONNECT_PORT
    except ValueError:
        raise ValueError(expected) from None
    params = parts.path in ("", "/") or parts.path.startswith("/;")
    if parts.scheme != "sc" or not parts.hostname or not params:
        raise ValueError(expected)
    return parts.hostname, port


def reach(url: str, timeout: float = 5.0) -> None:
    """Connect to the Spark Connect server of ``url`` once: PySpark's own client retries an
    absent server for minutes before its traceback, so a command asks first and says in one
    line (OSError) that nothing answers there."""
    host, port = connect_address(url)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            pass
    except OSError as e:
        raise OSError(f"no Spark Connect server answers at {url}: "
                      f"{e.strerror or e.__class__.__name__}") from None


def tell_local_spark(args, settings, why: str = "") -> None:
    """One line on stderr before this process starts its own Spark (10 to 60 s before the
    first answer): on a terminal, and always when the config's Spark Connect server did not
    answer (``why``), so that a command run at a demo's start is never a silent minute."""
    if not (why or sys.stderr.isatty()):
        return
    because = (f": {why} (history.remote in {args.config}; it answers in seconds "
               f"once up)") if why else ""
    print(f"fleetwatch history {args.subcommand}: starting a local Spark on "
          f"{settings.master} (10-60 s){because}", file=sys.stderr, flush=True)


def open_lake(settings):
    """The lake's :class:`fleetwatch.lake.query.History` on a Spark session of ``settings``
    (:func:`run` said so on stderr when that Spark starts here)."""
    from fleetwatch.lake.query import History
    from fleetwatch.lake.spark import from_settings
    return History(from_settings(settings), settings.lake)


def tell_uncompacted(args, settings, waiting: int | None = None) -> None:
    """Before the first compaction the tables are empty: say on stderr how many lines the
    landing area holds (``waiting``, or counted here), and the command that compacts
    them."""
    if waiting is None:
        from fleetwatch.lake.query import uncompacted
        waiting = uncompacted(settings.lake)
    if waiting:
        command = f"fleetwatch history compact --config {shlex.quote(args.config)}"
        if args.lake:
            command += f" --lake {shlex.quote(args.lake)}"
        print(f"fleetwatch history {args.subcommand}: nothing compacted yet: the landing area "
              f"holds {waiting} lines not in the tables ({command})", file=sys.stderr)
