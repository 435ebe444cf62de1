"""``fleetwatch history serve [--socket PATH]``: keep a Spark session warm and answer
``history sql`` from it over a local socket, so that a query answers in about a second
instead of three (bench/RESULTS.md: the Connect client's import alone takes most of one).

The socket is ``history.answerer`` of the operator config (or ``--socket``): a Unix socket
only its owner may use (0600), since whoever asks runs Spark SQL over the lake with this
process's rights. ``history sql`` asks it first when the config names one and no
``--lake``, ``--master`` or ``--remote`` is given (:func:`ask`), and when nothing answers
there, or the answerer serves another lake or cannot answer, runs as without it: the
answerer is never a reason for a query to fail. The demo keeps one beside its warm Spark.

One request at a time, each one JSON line each way: ``{"query", "json", "limit", "lake"}``
and ``{"code", "stdout", "stderr", "uncompacted"}``, or ``{"refused": WHY}``. The session
is the configuration's (``history.remote``: the answerer waits for that server, saying so
once, however long it takes to start; else a Spark of its own on ``history.master``). The
views a query names are read again for each query (:meth:`fleetwatch.lake.query.History.sql`),
so an answer is never older than the last compaction. A Spark Connect server that does not
answer (0.5 s) has the query refused at once (its client would retry for minutes; the
command then runs a Spark of its own, saying so); a session that no longer answers (the
server restarted: a refused query is followed by ``SELECT 1``) has it refused and a new
session opened. SIGTERM or SIGINT ends it after the current answer, and at once while it
opens a session (Spark's client may retry a server that is gone for minutes: the demo's
answerer outlived the demo so) or when sent twice; its socket is removed.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import os
import signal
import socket
import sys
import time

from fleetwatch import private

log = logging.getLogger(__name__)

HELP = "keep a Spark session warm and answer history sql from it over a local socket"

#: bytes of a request at most (its query: a page of SQL is a few KB)
MAX_REQUEST = 1 << 20
#: seconds a client has to send its request once connected
REQUEST_TIMEOUT = 10.0
#: seconds ``history sql`` waits for the answerer to take its connection
CONNECT_TIMEOUT = 1.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--socket", metavar="PATH",
                   help="the Unix socket to answer on (default: history.answerer)")


# ---------------------------------------------------------------- the client side

def ask(path: str, request: dict) -> dict | None:
    """The answerer's reply to ``request`` at ``path``, or None when there is none (no
    socket, nothing listening, a refusal, a reply cut short): the caller answers itself."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(CONNECT_TIMEOUT)
            conn.connect(path)
            conn.settimeout(None)           # a query takes what it takes (Ctrl-C ends it)
            conn.sendall(json.dumps(request).encode() + b"\n")
            reply = json.loads(_line(conn, None) or b"null")
    except (OSError, ValueError) as e:
        log.debug("no answer from %s: %s", path, e)
        return None
    if not isinstance(reply, dict) or "refused" in reply or not isinstance(
            reply.get("code"), int):
        log.debug("the answerer at %s refused: %s", path, reply)
        return None
    return reply


def _line(conn: socket.socket, limit: int | None) -> bytes:
    """One line from ``conn`` (at most ``limit`` bytes), without its newline."""
    data = bytearray()
    while b"\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
        if limit is not None and len(data) > limit:
            raise ValueError(f"a request of more than {limit} bytes")
    return bytes(data).split(b"\n", 1)[0]


# ---------------------------------------------------------------- the answerer

def run(args, settings) -> int:
    path = args.socket or settings.answerer
    if not path:
        print(f"fleetwatch history serve: no socket: --socket PATH, or history.answerer in "
              f"{args.config}", file=sys.stderr)
        return 2
    stopping: list[int] = []
    answering = [False]

    def stop(signum, frame):
        # between answers (or asked twice) the loop ends itself; opening a session, Spark's
        # client may retry a server that is gone for minutes: it ends now
        stopping.append(signum)
        if not answering[0] or len(stopping) > 1:
            raise SystemExit(0)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    try:
        listener = listen(path)
    except OSError as e:
        print(f"fleetwatch history serve: {path}: {e}", file=sys.stderr)
        return 1
    try:
        history = warm(settings, stopping)
        if history is None:
            return 0
        print(f"fleetwatch history serve: answering history sql at {path} (lake "
              f"{settings.lake}, Spark {settings.remote or settings.master})", flush=True)
        while not stopping:
            try:
                conn, _ = listener.accept()
            except (TimeoutError, InterruptedError):
                continue
            except SystemExit:
                break
            with conn:
                answering[0] = True
                try:
                    fine = serve_one(conn, history, settings)
                except Exception:   # a bug must not end the answerer: logged, it goes on
                    log.exception("history serve: a request failed")
                    fine = True
                finally:
                    answering[0] = False
            if not fine:                # its session lost (the server restarted): a new one
                print("fleetwatch history serve: the session was lost; opening a new one",
                      flush=True)
                history = warm(settings, stopping)
                if history is None:
                    break
        return 0
    finally:
        listener.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def listen(path: str) -> socket.socket:
    """A listening Unix socket at ``path``, its owner's only; a socket file left by an
    answerer that ended is replaced, one that still answers is not (OSError)."""
    if os.path.exists(path):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            try:
                probe.connect(path)
            except OSError:
                os.unlink(path)             # nobody listens: left by an ended answerer
            else:
                raise OSError("another answerer listens there")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with private.born_with(private.PRIVATE):
        listener.bind(path)
    listener.listen(16)
    listener.settimeout(0.5)                # a stop request is seen within that
    return listener


def warm(settings, stopping: list):
    """The lake's History on a session that has answered one query: the configured Spark
    Connect server's once it answers (waited for, said once), else a Spark of its own.
    None when asked to stop first."""
    from fleetwatch.cli.history.session import open_lake, reach
    if settings.remote:
        said = False
        while not stopping:
            try:
                reach(settings.remote, 2.0)
                break
            except OSError as e:
                if not said:
                    print(f"fleetwatch history serve: waiting for the Spark Connect server: "
                          f"{e}", flush=True)
                    said = True
                time.sleep(1.0)
    if stopping:
        return None
    history = open_lake(settings)
    history.sql("SELECT 1").collect()       # the session's first query is its slowest
    return history


def serve_one(conn: socket.socket, history, settings) -> bool:
    """Answer one client: its request read (bounded in size and time), its query answered
    as ``history sql`` would print it; a bad request or an error is refused, never fatal.
    False when the session no longer answers (the caller opens another): a query Spark
    refused is tried on it once more with ``SELECT 1``."""
    from fleetwatch.cli.history.session import reach
    from fleetwatch.cli.history.sql import answer
    from fleetwatch.lake.query import uncompacted
    lake = settings.lake
    try:
        conn.settimeout(REQUEST_TIMEOUT)
        request = json.loads(_line(conn, MAX_REQUEST))
        query, as_json, limit = request["query"], request["json"], request["limit"]
        if not (isinstance(query, str) and isinstance(as_json, bool) and
                isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0):
            raise ValueError("expected query (text), json (true or false) and limit (0 or "
                             "more)")
    except (OSError, ValueError, KeyError, TypeError) as e:
        _reply(conn, {"refused": f"bad request: {e}"})
        return True
    if request.get("lake") != lake:
        _reply(conn, {"refused": f"this answerer serves the lake {lake}"})
        return True
    if settings.remote:
        try:        # (its client would retry a server gone for minutes: the command knows
            reach(settings.remote, 0.5)     # at once, and runs a Spark of its own)
        except OSError as e:
            _reply(conn, {"refused": str(e)})
            return True
    out, err = io.StringIO(), io.StringIO()
    try:
        code = answer(history, query, as_json, limit, out, err)
        if code != 0:
            history.sql("SELECT 1").collect()       # the query's fault, or the session's?
        waiting = uncompacted(lake) if code == 0 else 0
    except Exception as e:  # its Spark gone, a bug: the client answers itself, we go on
        log.warning("history serve: the session failed: %s", e)
        _reply(conn, {"refused": f"{e.__class__.__name__}: {e}"})
        return False
    _reply(conn, {"code": code, "stdout": out.getvalue(), "stderr": err.getvalue(),
                  "uncompacted": waiting})
    return True


def _reply(conn: socket.socket, reply: dict) -> None:
    try:
        conn.settimeout(REQUEST_TIMEOUT)
        # (escaped to ASCII: a value of the lake that is no valid UTF-8 still goes)
        conn.sendall(json.dumps(reply).encode() + b"\n")
    except OSError as e:                    # the client left (Ctrl-C): nothing to tell
        log.debug("history serve: a reply not sent: %s", e)
