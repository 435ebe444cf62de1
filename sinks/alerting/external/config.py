"""``alerting.prometheus_alerts``: how the alerts Prometheus posts to the console become checks.

::

    alerting:
      prometheus_alerts:
        host_labels: [host, instance]   # the first of these an alert has names its host
        ignore_labels: []               # left out of the check's name, as alertname,
                                        # severity, alertgroup and the host labels are
        default_status: warning         # a severity other than critical or warning
        interval: 10                    # seconds between two passes over the alerts
        max_per_host: 100               # checks prom:... of one host at most
        max_check_attempts: 1           # Prometheus' own `for:` has waited already

docs/operating/prometheus-alerts.md says what each does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from fleetwatch.config import setting
from sinks.alerting.checks.rules import CRITICAL, UNKNOWN, WARNING

#: what ``default_status`` may say, and the status it is
STATUSES = {"warning": WARNING, "critical": CRITICAL, "unknown": UNKNOWN}
#: a label's name (Prometheus' ``model.LabelNameRE``)
NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]{0,127}")


def _label(name) -> bool:
    return isinstance(name, str) and NAME.fullmatch(name) is not None


@dataclass(frozen=True)
class PrometheusAlertsConfig:
    host_labels: list[str] = setting(
        factory=lambda: ["host", "instance"],
        help="labels naming an alert's host, the first the alert has wins (instance: its "
             ":port left out); matched against the agents' hostnames, ignoring case")
    ignore_labels: list[str] = setting(
        factory=list, help="labels left out of the check's name prom:ALERTNAME{LABELS} "
                           "(alertname, severity, alertgroup and the host_labels always "
                           "are): alerts that differ only by them are one check, the worst "
                           "wins")
    default_status: str = setting("warning", "the status of an alert whose severity label is "
                                             "neither critical nor warning: warning, critical "
                                             "or unknown")
    interval: float = setting(10.0, "seconds between two passes over the alerts received "
                                    "(a new alert, a resolved one, becomes a result at the "
                                    "next)")
    max_per_host: int = setting(100, "checks prom:... of one host at most; the alerts past "
                                     "it (those that started last) are refused and counted "
                                     "(prom_alerts_over_host_limit)")
    max_check_attempts: int = setting(1, "passes an alert must fire before its problem is "
                                         "HARD (Prometheus' own `for:` has waited already)")

    def validate(self):
        if not self.host_labels or not all(_label(n) for n in self.host_labels):
            raise ValueError("host_labels: expected a list of one or more label names")
        if not all(_label(n) for n in self.ignore_labels):
            raise ValueError("ignore_labels: expected a list of label names")
        if self.default_status not in STATUSES:
            raise ValueError(f"default_status: expected one of {', '.join(STATUSES)}, got "
                             f"{self.default_status[:40]!r}")
        if self.interval <= 0:
            raise ValueError("interval: expected a positive number of seconds")
        if not 1 <= self.max_per_host <= 100_000:
            raise ValueError("max_per_host: expected 1 to 100000")
        if not 1 <= self.max_check_attempts <= 100:
            raise ValueError("max_check_attempts: expected 1 to 100")

    @property
    def default(self) -> int:
        return STATUSES[self.default_status]
