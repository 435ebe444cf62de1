"""``fleetwatch history compact|sql|gaps|replay|expire|cluster|notebook|serve``: the history
lake's operator commands.

Every verb reads the operator config's ``history:`` section (lake, Spark master and settings,
a Spark Connect server; ``--config``, default /etc/fleetwatch/fleetwatch.yaml), which
``--lake``, ``--master`` and ``--remote`` override. The verbs' modules here hold the command
side (options, printing, exit status); the work is the library's, :mod:`fleetwatch.lake`
(compaction, queries, replay, expiry), which notebooks use too. PySpark is imported only
by the verb that runs, so a missing ``history`` extra, like a missing Java, is one clear
line (exit 69), and ``--help`` works without either.

Adding a verb: a module here with ``HELP``, ``add_arguments(parser)`` for its own options
and ``run(args, settings) -> int`` (``settings``: the loaded
:class:`sinks.history.config.HistorySettings`), importing PySpark only inside ``run``; and
one entry in :data:`VERBS`. A verb that queries the lake opens it with
:func:`fleetwatch.cli.history.session.open_lake` and ends with ``tell_uncompacted``
(same module), as ``sql`` and ``gaps`` do.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys

from fleetwatch.config import load
from fleetwatch.cli.history.session import connect_address, reach, tell_local_spark, \
    tell_uncompacted
from fleetwatch.cli.operator import DEFAULT_PATH, OperatorConfig
from fleetwatch.lake.settings import HistorySettings

#: verb -> the module of ``fleetwatch history VERB``
VERBS = {
    "compact": "fleetwatch.cli.history.compact",
    "sql": "fleetwatch.cli.history.sql",
    "gaps": "fleetwatch.cli.history.gaps",
    "replay": "fleetwatch.cli.history.replay",
    "expire": "fleetwatch.cli.history.expire",
    "cluster": "fleetwatch.cli.history.cluster",
    "notebook": "fleetwatch.cli.history.notebook",
    "serve": "fleetwatch.cli.history.serve",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    for name, module_name in VERBS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        p.add_argument("--config", metavar="PATH", default=DEFAULT_PATH,
                       help=f"operator config with a history: section (default {DEFAULT_PATH})")
        p.add_argument("--lake", metavar="PATH", help="the lake directory (wins over the config)")
        p.add_argument("--master", metavar="URL", help="spark.master (wins over the config)")
        p.add_argument("--remote", metavar="URL", help="a Spark Connect server, sc://HOST:15002 "
                       "(history.remote; wins over the config)")
        module.add_arguments(p)


def settings_from(args):
    """The ``history:`` settings of ``args.config``, with the command line's overrides (a
    verb whose module sets ``CONFIG_OPTIONAL`` runs on the defaults when given ``--dir``
    and no config exists)."""
    module = importlib.import_module(VERBS[args.subcommand])
    if (getattr(module, "CONFIG_OPTIONAL", False) and getattr(args, "dir", None)
            and not os.path.exists(args.config)):
        settings = HistorySettings()
    else:
        settings = load(OperatorConfig, args.config).history
    changes = {k: v for k, v in (("lake", args.lake), ("master", args.master),
                                 ("remote", args.remote)) if v}
    if changes.get("remote"):
        try:
            connect_address(changes["remote"])
        except ValueError as e:
            print(f"fleetwatch history {args.subcommand}: --remote {e}", file=sys.stderr)
            raise SystemExit(2) from None
    return dataclasses.replace(settings, **changes) if changes else settings


#: the verbs that start Spark at once (a query, a compaction): without a Spark Connect
#: server answering they run a local Spark, saying so (:func:`tell_local_spark`)
SPARK_NOW = ("compact", "sql", "gaps", "replay", "expire")
#: how long a command waits for the configured Spark Connect server to take a connection
PROBE = 0.5


def run(args) -> int:
    from fleetwatch.optional import MissingDependency, optional_import
    from fleetwatch.lake.spark import JavaMissing, java
    settings = settings_from(args)
    if args.subcommand == "sql":
        code = answered(args, settings)
        if code is not None:
            return code
    why = ""
    try:
        # (the answerer waits for its Spark Connect server itself, however long it takes)
        if settings.remote and args.subcommand not in ("cluster", "serve"):
            try:
                reach(settings.remote, PROBE if args.subcommand in SPARK_NOW else 5.0)
            except OSError as e:
                # the config's server (the demo's warm Spark, still starting): a local Spark;
                # one named by --remote is asked for: its absence is the answer
                if args.remote or args.subcommand not in SPARK_NOW:
                    raise
                settings, why = dataclasses.replace(settings, remote=""), str(e)
        if not settings.remote:
            java()
        if args.subcommand in SPARK_NOW and not settings.remote:
            tell_local_spark(args, settings, why)    # before the imports: a second or two
        optional_import("pyspark", f"fleetwatch history {args.subcommand}")
        if settings.remote and args.subcommand != "cluster":
            from fleetwatch.lake.spark import CONNECT_MODULES
            for module in CONNECT_MODULES:
                optional_import(module, f"fleetwatch history {args.subcommand} --remote")
    except (MissingDependency, JavaMissing, OSError) as e:
        print(f"fleetwatch history: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    except ValueError as e:          # the config's history.remote (--remote was checked)
        print(f"fleetwatch history: {args.config}: history.remote {e}", file=sys.stderr)
        return 78
    return importlib.import_module(VERBS[args.subcommand]).run(args, settings)


def answered(args, settings) -> int | None:
    """``history sql`` answered by the warm answerer of ``history.answerer``
    (:mod:`fleetwatch.cli.history.serve`): its exit status, or None when there is none to
    ask (or it did not answer): the command then runs its query itself. Not with ``--lake``,
    ``--master`` or ``--remote``: the answerer serves the config's lake on its own Spark."""
    if not settings.answerer or args.lake or args.master or args.remote:
        return None
    from fleetwatch.cli.history.serve import ask
    reply = ask(settings.answerer, {"query": args.query, "json": args.json,
                                    "limit": args.limit, "lake": settings.lake})
    if reply is None:
        return None
    sys.stdout.write(str(reply.get("stdout") or ""))
    sys.stderr.write(str(reply.get("stderr") or ""))
    if reply["code"] == 0:
        waiting = reply.get("uncompacted")
        tell_uncompacted(args, settings, waiting if isinstance(waiting, int) else 0)
    return reply["code"]
