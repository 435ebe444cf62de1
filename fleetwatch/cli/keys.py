"""``fleetwatch keys``: create and list the fleet's CURVE certificates.

    fleetwatch keys new agent --uuid UUID DIR     # an agent's key, bound to its uuid
    fleetwatch keys new router NAME DIR           # the routers' shared server key
    fleetwatch keys new backend NAME DIR [NAME DIR ...]  # sinks', schedulers', the CLI's keys
    fleetwatch keys list DIR [--json]             # every certificate under DIR

A certificate is a pair of zmq.auth ZPL files, ``NAME.key`` (public, 0644) and
``NAME.key_secret`` (secret, 0600), with ``role``, ``name`` and (agents) ``uuid`` in the
metadata; see :mod:`fleetwatch.security`. An existing key is never overwritten: a key is
rotated by making a new one under a new name. Exit status: 2 for usage errors (a bad uuid or
name), 78 when a key cannot be written or read. Several NAME DIR pairs make several keys of
one role; none is written when any name is bad or any of their files exists already.

The client processes check their own key at start with
:func:`fleetwatch.security.check_own`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from fleetwatch.protocol import ID_PATTERN, MAX_ID
from fleetwatch.security import (PUBLIC_SUFFIX, SECRET_SUFFIX, ClientKeys, SecurityError,
                                 read_certificate, write_certificates)

EX_USAGE = 2
ROLES = ("agent", "router", "backend", "site")
#: ``keys new --help``'s usage: the forms :func:`new_command` takes, and only those
NEW_USAGE = ("%(prog)s agent --uuid UUID DIR [--config PATH]\n"
             "       %(prog)s {router,backend,site} NAME DIR [NAME DIR ...] [--config PATH]")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH",
                        help="accepted like every subcommand; keys reads no config")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS,
                        help="accepted like every subcommand; keys reads no config")
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    new = sub.add_parser("new", parents=[common],
                         help="create a certificate (NAME.key and NAME.key_secret)",
                         usage=NEW_USAGE,
                         description="Create NAME.key (0644) and NAME.key_secret (0600) in DIR; "
                                     "an agent's key is named by its uuid. Several NAME DIR "
                                     "pairs make several keys of one role.")
    new.add_argument("role", choices=ROLES, help="agent, router, backend or site (a site "
                                                 "router's uplink, named by its id)")
    new.add_argument("where", nargs="+", metavar="NAME DIR",
                     help="the key's name (not for agents: their name is the uuid) and "
                          "the directory to write it in; router, backend and site keys "
                          "take several pairs")
    new.add_argument("--uuid", help="the agent's uuid (STATE_DIR/uuid); agents only")
    lst = sub.add_parser("list", parents=[common],
                         help="show every certificate under DIR (recursively)")
    lst.add_argument("dir", metavar="DIR")
    lst.add_argument("--json", action="store_true", help="print one JSON document")


def _usage(text: str) -> int:
    print(f"fleetwatch keys: {text}", file=sys.stderr)
    return EX_USAGE


def _valid_id(text: str) -> bool:
    return ID_PATTERN.fullmatch(text) is not None


def run(args: argparse.Namespace) -> int:
    if args.action == "list":
        return list_command(args.dir, args.json)
    return new_command(args.role, args.where, args.uuid)


# ---------------------------------------------------------------- new

def new_command(role: str, where: list[str], uuid: str | None) -> int:
    if role == "agent":
        if not uuid:
            return _usage("new agent: --uuid UUID is required (the agent's STATE_DIR/uuid)")
        if len(where) != 1:
            return _usage("new agent --uuid UUID DIR: give the directory only (the key's "
                          "name is the uuid)")
        keys = [(uuid, where[0], {"role": "agent", "uuid": uuid, "name": uuid})]
    else:
        if uuid:
            return _usage(f"new {role}: --uuid is for agent keys only")
        if len(where) % 2:
            return _usage(f"new {role} NAME DIR [NAME DIR ...]: expected NAME DIR pairs, "
                          f"got {len(where)} argument{'s' if len(where) > 1 else ''}")
        keys = [(name, directory, {"role": role, "name": name})
                for name, directory in zip(where[::2], where[1::2])]
    problem = _check_new(role, keys)
    if problem is not None:
        return problem
    for name, directory, metadata in keys:
        try:
            public, secret = write_certificates(directory, name, metadata)
            cert = read_certificate(public)
        except SecurityError as e:
            print(f"fleetwatch keys: {e}", file=sys.stderr)
            return os.EX_CONFIG
        except OSError as e:
            print(f"fleetwatch keys: {directory}: {e.strerror}", file=sys.stderr)
            return os.EX_CONFIG
        print(f"public  {public}")
        print(f"secret  {secret}  (mode 0600: it stays on the machine that uses it)")
        print(f"key     {cert.public.decode()}")
    return 0


def _check_new(role: str, keys: list[tuple[str, str, dict]]) -> int | None:
    """Refuse the whole command before writing anything: a bad or repeated name, or a key
    file that exists already (exit status 2 or 78), else None."""
    what = "uuid" if role == "agent" else "NAME"
    seen = set()
    for name, directory, _ in keys:
        if not _valid_id(name):
            return _usage(f"{what} {name[:80]!r}: expected 1 to {MAX_ID} letters, digits or "
                          f"._:@- (starting with a letter or digit)")
        where = (os.path.abspath(directory), name)
        if where in seen:
            return _usage(f"new {role}: {name} twice in {directory}")
        seen.add(where)
        for suffix in (PUBLIC_SUFFIX, SECRET_SUFFIX):
            path = os.path.join(directory, name + suffix)
            if os.path.lexists(path):
                print(f"fleetwatch keys: {path} exists already (pick another name to rotate "
                      f"a key)", file=sys.stderr)
                return os.EX_CONFIG
    return None


# ---------------------------------------------------------------- list

def scan(directory: str) -> list[dict]:
    """One entry per certificate (a NAME.key and/or NAME.key_secret) under ``directory``."""
    stems: dict[Path, dict[str, Path]] = {}
    for path in sorted(Path(directory).rglob("*")):
        if not path.is_file():
            continue
        for kind, suffix in (("secret", SECRET_SUFFIX), ("public", PUBLIC_SUFFIX)):
            if path.name.endswith(suffix) and len(path.name) > len(suffix):
                stems.setdefault(path.with_name(path.name[:-len(suffix)]), {})[kind] = path
                break
    return [_entry(stem, files) for stem, files in sorted(stems.items())]


def _entry(stem: Path, files: dict[str, Path]) -> dict:
    entry = {"name": stem.name, "role": None, "uuid": None, "public_key": None,
             "secret": "secret" in files, "path": str(files.get("public") or files["secret"]),
             "warnings": []}
    warnings = entry["warnings"]
    cert = None
    for kind in ("public", "secret"):
        if kind not in files:
            continue
        try:
            cert = read_certificate(str(files[kind]))
            break
        except SecurityError as e:
            warnings.append(str(e))
    if cert is not None:
        entry.update(name=cert.name or stem.name, role=cert.role or None,
                     uuid=cert.uuid or None, public_key=cert.public.decode())
        if "public" in files and cert.secret is not None and cert.path == str(files["public"]):
            warnings.append(f"{files['public']}: the public file holds a secret key")
    if "secret" in files:
        try:
            mode = os.stat(files["secret"]).st_mode & 0o777
        except OSError as e:
            warnings.append(f"{files['secret']}: {e.strerror}")
        else:
            if mode & 0o077:
                warnings.append(f"{files['secret']}: mode {mode:04o}, expected 0600 "
                                f"(chmod 600 it)")
        if "public" in files and cert is not None:
            try:
                own = read_certificate(str(files["secret"]))
            except SecurityError as e:
                warnings.append(str(e))
            else:
                if own.public != cert.public:
                    warnings.append(f"{files['secret']}: does not match {files['public']}")
    return entry


def list_command(directory: str, as_json: bool) -> int:
    if not os.path.isdir(directory):
        print(f"fleetwatch keys: {directory}: no such directory", file=sys.stderr)
        return os.EX_CONFIG
    entries = scan(directory)
    if as_json:
        print(json.dumps({"keys": entries}, indent=2))
        return 0
    from fleetwatch.display import table
    rows = [dict(e, warnings="; ".join(e["warnings"]) or None) for e in entries]
    print(table(rows, ["name", "role", "uuid", "public_key", "secret", "path"]))
    for e in entries:
        for w in e["warnings"]:
            print(f"fleetwatch keys: warning: {w}", file=sys.stderr)
    return 0
