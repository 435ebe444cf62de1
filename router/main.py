"""``fleetwatch router``: load the config, bind, write the ready file, relay until signalled.

SIGTERM and SIGINT stop it; SIGHUP re-reads the key allowlists (SPEC 7.4) and the config
file, applying what is safe while running (:mod:`router.reload`).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys

import zmq

from fleetwatch import config as fwconfig
from fleetwatch import logs, sdnotify
from fleetwatch.security import SecurityError
from router import priority
from router.config import RouterConfig
from router.descriptors import RESERVED, nofile, raise_limit
from router.endpoints import write_ready_file
from router.relay import Relay
from router.reload import reloader
from router.sitebuffer import SpoolError

log = logging.getLogger(__name__)



def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default="/etc/fleetwatch/router.yaml",
                        help="router config file (YAML; default %(default)s)")


def descriptors(max_agents: int) -> None:
    """The descriptor limit ``max_agents`` wants (the unit sets it: ``LimitNOFILE=``),
    raised to if the hard limit allows; a warning when it cannot even give each of
    ``max_agents`` one connection, a line of information when it falls short of the margin."""
    wanted = nofile(max_agents)
    before, after = raise_limit(wanted)
    if after > before:
        log.info("descriptor limit raised from %d to %d", before, after)
    if after < wanted:
        (log.warning if after < max_agents + RESERVED else log.info)(
            "descriptor limit %d, below the %d max_agents %d wants (LimitNOFILE=, ulimit -n)",
            after, wanted, max_agents)


def run(args: argparse.Namespace) -> int:
    cfg = fwconfig.load(RouterConfig, args.config)  # ConfigError: the CLI exits 78
    logs.setup(cfg.log_level, cfg.id)
    notifier = sdnotify.Notifier.from_env()
    relay = Relay(cfg)
    relay.notifier = notifier
    relay.reloader = reloader(relay, args.config)
    previous = {sig: signal.signal(sig, relay.stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, relay.reload)
    try:
        try:
            relay.bind()
        except (SecurityError, SpoolError) as e:    # a missing key (never plain text
            # instead), a site's spool directory that cannot be written
            print(f"fleetwatch router: {e}", file=sys.stderr)
            return os.EX_CONFIG
        except zmq.ZMQError as e:
            log.error("%s", e)
            return os.EX_UNAVAILABLE
        descriptors(cfg.max_agents)     # (once bound: a start that fails says one line)
        priority.apply(cfg.nice)        # every thread: libzmq's I/O thread runs by now
        if cfg.ready_file:
            write_ready_file(cfg.ready_file, cfg.id, relay.endpoints)
        notifier.ready(f"router {cfg.id}: agents {relay.endpoints['agents']}")
        relay.run(notifier.tick)
        notifier.stopping()
        log.info("router %s stopping", cfg.id)
        return 0
    finally:
        relay.close()
        notifier.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
