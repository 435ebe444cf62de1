"""``fleetwatch web [serve] | user add|list|remove|password | token add|list|remove``: the operator
console and the HTTP API (web/), and who may use them.

``serve`` (the verb by default) reads the operator config (``--config``: its routers, state
database and ``web:`` section), makes the console's tables if missing, makes the session key
(``web.secret_file``, mode 0600) at first start, and serves on ``web.listen`` (``--listen``
wins; 127.0.0.1:8080 by default: this machine only) until Ctrl-C or SIGTERM; HTTPS when
``web.tls_cert`` and ``web.tls_key`` are set. ``user`` and ``token`` manage the console's
users (roles viewer, operator, admin) and API tokens in the state database; every change is
recorded with who made it (the login name of whoever runs the command). A password is asked
on the terminal, or read from standard input with ``--password-stdin``; ``user password``
gives a user a new one, and ends their console sessions (as ``user remove`` does); a token
is printed once, when made. Errors are one line and exit 2 (78 for the config).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import secrets
import socket
import sys

from fleetwatch import __version__
from fleetwatch.cli.operator import DEFAULT_PATH, OperatorConfig, login
from fleetwatch.config import load
from fleetwatch.display import escape, iso, table

VERBS = ("serve", "user", "token")
DEFAULT_VERB = "serve"
HELP = {"serve": "serve the console and the API",
        "user": "add, list or remove the console's users, or give one a new password",
        "token": "add, list or remove API tokens"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    serve = sub.add_parser("serve", help=HELP["serve"], description=HELP["serve"])
    serve.add_argument("--listen", metavar="HOST:PORT",
                       help="listen here (wins over web.listen; default 127.0.0.1:8080)")
    user = sub.add_parser("user", help=HELP["user"], description=HELP["user"])
    user.add_argument("action", choices=("add", "list", "remove", "password"))
    user.add_argument("name", nargs="?", help="the user (add, remove, password: a new "
                                              "password ends their sessions)")
    user.add_argument("--role", default="viewer",
                      help="viewer (reads), operator (also acks, downtimes, runs checks) or "
                           "admin (also users and tokens); default viewer")
    user.add_argument("--password-stdin", action="store_true",
                      help="read the password from standard input (else asked on the terminal)")
    token = sub.add_parser("token", help=HELP["token"], description=HELP["token"])
    token.add_argument("action", choices=("add", "list", "remove"))
    token.add_argument("target", nargs="?",
                       help="add: the user it speaks for; remove: the token's id")
    token.add_argument("--label", default="", help="add: what the token is for (required)")
    token.add_argument("--role", help="add: a role below the user's (default: the user's), "
                                      "or alerter: it may post alerts and nothing else "
                                      "(Prometheus' token; for an operator or an admin)")
    for p in (serve, user, token):
        p.add_argument("--config", default=DEFAULT_PATH, metavar="PATH",
                       help=f"operator config (default {DEFAULT_PATH})")
    for p in (user, token):
        p.add_argument("--json", action="store_true", help="list: print JSON")


def _engine(config: OperatorConfig):
    from fleetwatch.store import db
    from web import store
    engine = db.engine(config.state_url)
    store.create(engine)
    return engine


def _fail(message: str) -> int:
    print(f"fleetwatch web: {escape(message)}", file=sys.stderr)
    return 2


def run(args) -> int:
    from fleetwatch.optional import MissingDependency, optional_import
    try:
        for module in ("fastapi", "uvicorn", "argon2"):
            optional_import(module, "fleetwatch web")
    except MissingDependency as e:
        print(f"fleetwatch web: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    config = load(OperatorConfig, args.config)
    if args.verb == "serve":
        return serve(config, args.listen)
    from web.auth import AuthError
    engine = _engine(config)
    try:
        return (users if args.verb == "user" else tokens)(engine, args)
    except AuthError as e:
        return _fail(str(e))
    finally:
        engine.dispose()


def users(engine, args) -> int:
    from web import store
    if args.action == "list":
        rows = store.users(engine)
        if args.json:
            print(json.dumps(rows, ensure_ascii=False))
        else:
            print(table([{**r, "created": iso(r["created"])} for r in rows],
                        ["name", "role", "tokens", "created", "created_by"]))
        return 0
    if not args.name:
        return _fail(f"user {args.action}: which user?")
    if args.action == "remove":
        store.remove_user(engine, args.name, login())
        print(f"user {escape(args.name)} removed, and their tokens and sessions")
        return 0
    from web.auth import check_name, check_role
    check_name(args.name)               # (before a password is asked for)
    if args.action == "add":
        check_role(args.role)
    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    elif not sys.stdin.isatty():
        return _fail(f"user {args.action}: no terminal to ask the password on: give it on "
                     "standard input with --password-stdin")
    else:
        try:
            password = getpass.getpass(f"password for {args.name}: ")
        except (EOFError, KeyboardInterrupt):
            print(file=sys.stderr)
            return _fail(f"user {args.action}: no password given")
    if args.action == "password":
        store.set_password(engine, args.name, password, login())
        print(f"user {escape(args.name)} has a new password (their sessions ended)")
        return 0
    store.add_user(engine, args.name, args.role, password, login())
    print(f"user {escape(args.name)} added ({args.role})")
    return 0


def tokens(engine, args) -> int:
    from web import store
    if args.action == "list":
        rows = store.tokens(engine)
        if args.json:
            print(json.dumps(rows, ensure_ascii=False))
        else:
            print(table([{**r, "created": iso(r["created"]), "last_used": iso(r["last_used"])}
                         for r in rows], ["id", "user", "role", "label", "created", "last_used"]))
        return 0
    if not args.target:
        return _fail(f"token {args.action}: " + ("for which user?" if args.action == "add"
                                                 else "which token id?"))
    if args.action == "remove":
        if not args.target.isdigit():
            return _fail("token remove: a token's id is a number (token list shows them)")
        store.remove_token(engine, int(args.target), login())
        print(f"token {args.target} removed")
        return 0
    print(store.add_token(engine, args.target, args.label, args.role, login()))
    return 0


def secret_of(path: str) -> str:
    """The session key at ``path``, made (mode 0600) if missing."""
    import os

    from fleetwatch import private
    if not os.path.exists(path):
        private.write(path, secrets.token_urlsafe(48) + "\n")
    with open(path, encoding="utf-8") as f:
        key = f.read().strip()
    if len(key) < 32:
        raise SystemExit(f"fleetwatch web: {path}: the session key is too short (delete the "
                         f"file to make a new one)")
    return key


def serve(config: OperatorConfig, listen: str | None) -> int:
    import dataclasses
    import threading

    import uvicorn

    from fleetwatch.actions.checks import Mesh
    from fleetwatch.actions.console import Actions
    from fleetwatch.ask import Remembered, ask_mesh
    from fleetwatch.cli.operator import client_keys
    from web.app import Console, create_app
    from fleetwatch.store.reader import Reader
    from web.health import FORGET, Health
    from web.settings import WebSettings
    if listen:
        try:
            settings = dataclasses.replace(config.web, listen=listen)
            WebSettings.validate(settings)
        except ValueError as e:
            return _fail(f"--listen: {e}")
        config = dataclasses.replace(config, web=settings)
    keys = client_keys(config)
    # the routers of the mesh (SPEC 4.9), and those seen before, as long as the health
    # page keeps a silent process: a router the mesh forgot stays a problem that long
    seen = Remembered(FORGET)

    def ask_routers():
        """Every router's health: PEERS without its listing (``limit`` 0)."""
        answers = ask_mesh(config.routers, ("PEERS",), config.timeout, keys=keys,
                           fields={"PEERS": {"limit": 0}}, also=seen.endpoints())
        seen.take(answers)
        return answers

    def tail_endpoints():
        """Where the health page's STATS come from (as ``fleetwatch tail`` finds them)."""
        from fleetwatch.cli.tail import endpoints_of
        return endpoints_of(config, ask_mesh(config.routers, ("HELLO",), config.timeout,
                                             keys=keys))

    from fleetwatch.logs import fatal_signals
    fatal_signals()                 # a SIGBUS (the state database's -shm) leaves its line
    engine = _engine(config)
    health = Health(tail_endpoints, keys)
    actions = Actions(config.state_url, Mesh(config.routers, config.tail, config.timeout, keys),
                      reader=Reader(config.state_url, engine))
    console = Console(config, engine, ask_routers, actions, health)
    app = create_app(console, secret_of(config.web.secret_file))
    host, port = config.web.address()
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP said: asyncio sets TCP_NODELAY only on connections of a socket made so,
    # and without it a response written in two parts waits out the client's delayed ACK
    # (40 ms a request on keep-alive connections)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(1024)           # from now on a client waits, not refused, while it starts
    except OSError as e:
        sock.close()
        return _fail(f"cannot listen on {host}:{port}: {e.strerror}")
    port = sock.getsockname()[1]
    scheme = "https" if config.web.tls_cert else "http"
    print(f"fleetwatch web {__version__}: console and API at {scheme}://{host}:{port}/ (log "
          f"in with a user made by `fleetwatch web user add NAME --role admin`)", flush=True)
    server = uvicorn.Server(uvicorn.Config(
        app, log_level="warning", ssl_certfile=config.web.tls_cert or None,
        ssl_keyfile=config.web.tls_key or None))
    health.start()
    stop = threading.Event()
    ahead = threading.Thread(target=console.refresh, args=(stop,), name="read-ahead",
                             daemon=True)
    ahead.start()
    try:
        server.run(sockets=[sock])
    finally:
        stop.set()
        health.stop()
        console.hashes.close()
        sock.close()
        engine.dispose()
    return 0
