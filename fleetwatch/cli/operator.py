"""The operator's configuration (``fleetwatch.yaml``), read by status, alerts, tail and run."""

from __future__ import annotations

import getpass
from dataclasses import dataclass

from fleetwatch.config import DEFAULT_STATE_URL, OPERATOR_CONFIG, setting
from fleetwatch.graphs.settings import GraphiteWebSettings
from fleetwatch.security import ClientSecurity
from fleetwatch.lake.settings import HistorySettings
from web.settings import RulesSettings, WebSettings

DEFAULT_PATH = OPERATOR_CONFIG


@dataclass(frozen=True)
class OperatorConfig:
    routers: list[str] = setting(help="control endpoints of every router")
    tail: list[str] = setting(factory=list, help="tail endpoints (default: asked of each router)")
    state_url: str = setting(DEFAULT_STATE_URL, "SQLAlchemy URL of the state database")
    timeout: float = setting(2.0, "seconds to wait for a router's answer")
    security: ClientSecurity = setting(factory=ClientSecurity, help="CURVE keys (a back-end key)")
    history: HistorySettings = setting(factory=HistorySettings,
                                       help="the history lake and Spark (fleetwatch history)")
    graphite: GraphiteWebSettings = setting(factory=GraphiteWebSettings,
                                            help="graphite-web's render API, for the "
                                                 "console's host graphs")
    web: WebSettings = setting(factory=WebSettings,
                               help="the console and the HTTP API (fleetwatch web)")
    rules: RulesSettings = setting(factory=RulesSettings,
                                   help="the console's rule pages: a draft's backtest")

    def validate(self):
        if not self.routers:
            raise ValueError("routers: expected at least one router control endpoint")


def login() -> str:
    """The operator's login name (recorded with what they change: a silence, an ack)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):     # no name for this uid (a container)
        return "uid-unknown"


def add_config(parser) -> None:
    """The ``--config PATH`` option every operator command takes."""
    parser.add_argument("--config", default=DEFAULT_PATH, metavar="PATH",
                        help=f"operator config (default {DEFAULT_PATH})")


def client_keys(config: OperatorConfig):
    """The operator's CURVE keys, checked: a missing or unreadable key, or one of another
    role than ``backend``, raises SecurityError (the command exits 78), never plain text."""
    from fleetwatch.security import ClientKeys, check_own
    keys = ClientKeys(config.security)
    check_own(keys, "backend")
    return keys
