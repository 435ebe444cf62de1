"""``fleetwatch sink TYPE --config PATH``: run one sink of a type.

SIGTERM and SIGINT stop it after the batch in hand; SIGHUP re-reads the config
(:mod:`sinks.reload` says what changes live)."""

from __future__ import annotations

import logging
import os
import signal
import sys

from fleetwatch import logs
from fleetwatch.config import ConfigError, load
from fleetwatch.optional import MissingDependency
from sinks import SINKS, UnknownSink, load_sink
from sinks.base import WriteError
from sinks.config import SinkConfig

log = logging.getLogger(__name__)

DEFAULT_PATH = "/etc/fleetwatch/sink-{type}.yaml"


def add_arguments(parser) -> None:
    parser.add_argument("type", nargs="?", metavar="TYPE",
                        help=f"sink type: {', '.join(SINKS)} (wins over the config's `type`)")
    parser.add_argument("--config", metavar="PATH",
                        help=f"config file (default {DEFAULT_PATH.format(type='TYPE')})")


def resolve_type(cli_type: str | None, config_type: str, path: str) -> str:
    """The sink type: the command line's, else the config's; both and different is an error."""
    if cli_type and config_type and cli_type != config_type:
        raise ConfigError(path, "type", f"says {config_type!r} but the command line says "
                                        f"{cli_type!r}")
    chosen = cli_type or config_type
    if not chosen:
        raise ConfigError(path, "type", "no sink type: give TYPE on the command line or "
                                        "`type` in the config")
    return chosen


def run(args) -> int:
    if not args.config and not args.type:
        raise ConfigError("fleetwatch sink", "TYPE", "give a sink type or --config PATH")
    path = args.config or DEFAULT_PATH.format(type=args.type)
    config = load(SinkConfig, path)
    type_ = resolve_type(args.type, config.type, path)
    try:
        cls = load_sink(type_)
    except UnknownSink as e:
        raise ConfigError(path, "type", str(e)) from None
    except MissingDependency as e:
        print(f"fleetwatch sink: {e}", file=sys.stderr)
        return os.EX_UNAVAILABLE
    logs.setup(config.log_level, config.name or f"sink-{type_}")
    from fleetwatch.security import check_own
    from fleetwatch.security import ClientKeys
    # A missing or unreadable key stops the sink here (exit 78): never plain text instead.
    keys = ClientKeys(config.security)
    check_own(keys, "backend")

    from sinks.loop import SinkLoop  # after the config is known good: pulls in zmq
    from fleetwatch.sqlitefiles import Unwritable
    from sinks.reload import reloader
    try:
        sink = cls.from_config(config)
        loop = SinkLoop(sink, config, keys=keys)
        loop.reloader = reloader(loop, path)
        signal.signal(signal.SIGTERM, loop.stop)
        signal.signal(signal.SIGINT, loop.stop)
        signal.signal(signal.SIGHUP, loop.reloader.request)
        return loop.run()
    except Unwritable as e:  # a file of the SQLite database: SQLite would fail or fault
        log.error("sink %s cannot use the state database: %s", type_, e)
        return os.EX_IOERR
    except WriteError as e:  # at start: the database cannot be opened or created
        log.error("sink %s cannot use the state database %s: %s", type_, config.state_url, e)
        return os.EX_UNAVAILABLE
    except OSError as e:  # the database's file, or an address it serves on (prometheus)
        log.error("sink %s cannot start (state database %s, or an address it listens on): "
                  "%s", type_, config.state_url, e)
        return os.EX_UNAVAILABLE
