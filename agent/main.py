"""``fleetwatch agent``: run the daemon, print one collection (``--once``), or mint a uuid.

    fleetwatch agent --config /etc/fleetwatch/agent.yaml
    fleetwatch agent --once            # one collection as a flat JSON object {name: number}
    fleetwatch agent --new-uuid        # for a cloned VM: new uuid, old kept as uuid.old
    fleetwatch agent --deregister      # leave the fleet for good (the daemon stopped)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import socket
import sys

from fleetwatch import config, logs

from agent.config import AgentConfig

log = logging.getLogger(__name__)

DEFAULT_CONFIG = "/etc/fleetwatch/agent.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=DEFAULT_CONFIG,
                        help=f"agent config file (default {DEFAULT_CONFIG})")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--once", action="store_true",
                      help="print one stats collection as JSON and exit (connects nowhere)")
    mode.add_argument("--new-uuid", action="store_true",
                      help="replace this machine's agent uuid (for cloned VMs); the old one "
                           "is kept as STATE_DIR/uuid.old. Stop the agent first.")
    mode.add_argument("--deregister", action="store_true",
                      help="leave the fleet for good: send a DEREGISTER through the routers "
                           "and wait for the registry's and the alerting sinks' ACKs (at most "
                           "deregister_timeout); its checks, RUNs and DOWN alerting end. Stop "
                           "the agent first (or set deregister_on_stop: true). Exit 0 when "
                           f"acknowledged, {os.EX_TEMPFAIL} when not")


def _check_group(cfg: AgentConfig, path: str) -> None:
    if not cfg.intake_group:
        return
    from agent.intake import group_id
    try:
        group_id(cfg.intake_group)
    except KeyError:
        raise config.ConfigError(path, "intake_group",
                                 f"no such group {cfg.intake_group[:64]!r}") from None


def _fail(code: int, text: str) -> int:
    print(f"fleetwatch agent: {text}", file=sys.stderr)
    return code


def run(args: argparse.Namespace) -> int:
    cfg = config.load(AgentConfig, args.config)
    logs.setup(cfg.log_level, "agent")
    if args.once:
        return once(cfg)
    from agent import identity
    from fleetwatch.security import check_own
    from fleetwatch.security import ClientKeys

    _check_group(cfg, args.config)
    # A missing or unreadable key stops the agent here (exit 78): never plain text instead.
    keys = ClientKeys(cfg.security) if not args.new_uuid else None

    try:
        lock = identity.lock(cfg.state_dir)
    except identity.StateDirBusy as e:
        return _fail(os.EX_TEMPFAIL, f"{e} (stop it first)")
    except OSError as e:
        return _fail(os.EX_CANTCREAT, f"state_dir {cfg.state_dir}: {e.strerror}")
    try:
        if args.new_uuid:
            old, new = identity.renew(cfg.state_dir)
            print(f"old uuid: {old or '(none)'}\nnew uuid: {new}")
            return 0
        if args.deregister:
            return deregister(cfg, keys)
        hostname = cfg.hostname or socket.gethostname()
        uuid = identity.load_or_create(cfg.state_dir)
        check_own(keys, "agent", uuid)
        return daemon(cfg, hostname, uuid, keys, args.config)
    except identity.IdentityError as e:
        return _fail(os.EX_CANTCREAT, str(e))
    finally:
        os.close(lock)


def deregister(cfg: AgentConfig, keys) -> int:
    """``--deregister``: one line on stdout when the sinks ACKed, on stderr (exit 75) when
    not in ``deregister_timeout``."""
    from agent import identity
    from agent.departure import leave
    from fleetwatch.security import check_own

    uuid = identity.read(cfg.state_dir)
    if uuid is None:
        return _fail(os.EX_CANTCREAT, f"no uuid in {cfg.state_dir}: this agent never ran, "
                                   f"there is nothing to deregister")
    check_own(keys, "agent", uuid)
    hostname = cfg.hostname or socket.gethostname()
    departure = leave(cfg, uuid, hostname, keys)
    if not departure.done:
        return _fail(os.EX_TEMPFAIL, f"deregistration of {uuid} ({hostname}) "
                                  f"{departure.summary()} within {cfg.deregister_timeout:g}s")
    print(f"deregistered {uuid} ({hostname}): {departure.summary()}")
    return 0


def once(cfg: AgentConfig) -> int:
    from agent.collectors import Collectors

    metrics = Collectors(cfg.collectors).collect()
    json.dump(metrics, sys.stdout, indent=1, sort_keys=True)
    print()
    return 0


def daemon(cfg: AgentConfig, hostname: str, uuid: str, keys=None,
           config_path: str | None = None) -> int:
    import sqlite3

    from agent.collectors import Collectors
    from agent.daemon import Agent, StartError
    from agent.spool import Spool

    path = os.path.join(cfg.state_dir, "spool.db")
    try:
        spool = Spool(path, cfg.spool.max_messages, cfg.spool.ack_timeout,
                      cfg.spool.max_backoff, required=cfg.spool.required_acks())
    except (sqlite3.Error, OSError) as e:
        return _fail(os.EX_CANTCREAT, f"spool {path}: {e}")
    try:
        return Agent(cfg, uuid, hostname, spool, Collectors(cfg.collectors), keys=keys,
                     config_path=config_path).run()
    except StartError as e:
        return _fail(os.EX_CANTCREAT, str(e))
