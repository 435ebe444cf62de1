"""The scheduler's configuration file (``scheduler.yaml``)."""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass

from fleetwatch.config import DEFAULT_STATE_URL, setting
from fleetwatch.security import ClientSecurity

DEFAULT_PATH = "/etc/fleetwatch/scheduler.yaml"
_ENDPOINT = re.compile(r"^(tcp://(\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+):\d+|(ipc|inproc)://\S+)$")


@dataclass(frozen=True)
class SchedulerConfig:
    routers: list[str] = setting(
        factory=list, help="control endpoints of every router, e.g. tcp://r1:5556; each RUN "
                           "goes to all of them")
    id: str = setting("", "this scheduler's id, the `uuid` of its messages "
                          "(default scheduler@HOST)")
    state_url: str = setting(DEFAULT_STATE_URL,
                             "SQLAlchemy URL of the state database the registry sink writes "
                             "(postgresql+psycopg://... for schedulers on several machines)")
    refresh_interval: float = setting(
        30.0, "seconds between two readings of the registry; jobs are added, removed or "
              "rescheduled for what changed")
    jitter: float = setting(
        5.0, "largest random delay (seconds) added before a run is sent, never more than a "
             "tenth of the plugin's interval; it does not change the run's slot or command id")
    min_interval: float = setting(
        1.0, "shortest interval a plugin is run at; a shorter declared interval is raised "
             "to this (at least 1: command ids name whole-second slots)")
    hello_interval: float = setting(1.0, "seconds between HELLOs to a router not yet answering")
    stats_interval: float = setting(60.0, "seconds between counter reports (in the log, "
                                    "and as STATS to a router: the console's health page)")
    security: ClientSecurity = setting(factory=ClientSecurity, help="CURVE keys (a back-end key)")
    log_level: str = setting("INFO", "DEBUG, INFO, WARNING or ERROR")

    def validate(self):
        from fleetwatch.protocol import ID_PATTERN
        if not self.routers:
            raise ValueError("routers: expected at least one router control endpoint")
        for endpoint in self.routers:
            if not _ENDPOINT.match(endpoint):
                raise ValueError(f"routers: {endpoint[:80]!r} is not an endpoint like "
                                 f"tcp://HOST:PORT")
        if self.id and not ID_PATTERN.fullmatch(self.id):
            raise ValueError("id: expected 1 to 64 letters, digits or ._:@- "
                             "(starting with a letter or digit)")
        for name in ("refresh_interval", "hello_interval", "stats_interval"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name}: expected a positive number of seconds")
        if self.jitter < 0:
            raise ValueError("jitter: expected 0 or more seconds")
        if self.min_interval < 1:
            raise ValueError("min_interval: expected at least 1 second")

    @property
    def sender_id(self) -> str:
        return (self.id or f"scheduler@{socket.gethostname()}")[:64]
