"""The ``alerting:`` section of a sink config: how results, hosts and silences become alerts.

::

    alerting:
      max_check_attempts: 3      # SOFT attempts before a problem is HARD (per plugin: the
                                 # declared spec's max_check_attempts wins)
      renotify_interval: 3600    # reminder while a HARD problem lasts; 0: never
      flap_detection: true
      flap_low: 25               # percent state change below which flapping stops
      flap_high: 50              # ... above which it starts
      host_timeout: 0            # seconds of silence before DOWN; 0: from the heartbeat
      host_timeout_intervals: 3  #   interval: this many of the host's own intervals,
      host_timeout_min: 10       #   at least this many seconds
      tick_interval: 1           # seconds between looks for silent hosts and stale checks
      forget_after: 86400        # an agent GONE (deregistered, ephemeral and silent) this
                                 # long is forgotten: its registry and state rows removed
      clock_skew: 60             # seconds a sender's clock may be off the sink's before
                                 # it is counted and shown ("clock skew N s"); 0: never
      dependencies:              # parents (sinks.alerting.dependencies.rules)
        - {hosts: "rack3-*", parents: [sw-3]}
        - {hosts: "*", checks: "http*", parents: [nginx_proc]}
      delivery: {...}            # channels and rules (sinks.alerting.delivery.config)
      rule_interval: 30          # rules on series (sinks.alerting.series.config)
      rules: [...]
      prometheus_alerts: {...}   # alerts Prometheus posts to the console
                                 # (sinks.alerting.external.config)

Only the alerting sink reads it; other sink types accept and ignore it.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.config import setting
from sinks.alerting.checks import rules as checkstate
from sinks.alerting.dependencies import rules as deps
from sinks.alerting.hosts import rules as hoststate
from sinks.alerting.delivery.config import DeliveryConfig
from sinks.alerting.external.config import PrometheusAlertsConfig
from sinks.alerting.series import config as series
from sinks.alerting.slo import config as slo


@dataclass(frozen=True)
class AlertingConfig:
    max_check_attempts: int = setting(3, "consecutive non-OK results before a problem is HARD "
                                         "(a plugin's declared max_check_attempts wins)")
    renotify_interval: float = setting(3600.0, "seconds between reminders while a HARD "
                                               "problem lasts; 0: never remind")
    flap_detection: bool = setting(True, "detect flapping checks (no state alerts while "
                                         "flapping, one started/stopped alert)")
    flap_low: float = setting(25.0, "percent state change below which flapping stops")
    flap_high: float = setting(50.0, "percent state change above which flapping starts")
    host_timeout: float = setting(0.0, "seconds without heartbeats before a host is DOWN; "
                                       "0: host_timeout_intervals of its heartbeat interval")
    host_timeout_intervals: float = setting(3.0, "heartbeat intervals of silence before DOWN "
                                                 "(when host_timeout is 0)")
    host_timeout_min: float = setting(10.0, "the least silence, in seconds, that is DOWN "
                                            "(when host_timeout is 0)")
    tick_interval: float = setting(1.0, "seconds between two looks for silent hosts and "
                                        "stale checks")
    forget_after: float = setting(86400.0, "seconds an agent stays GONE (deregistered, or "
                                           "ephemeral and silent) before it is forgotten: "
                                           "its registry and state rows removed")
    clock_skew: float = setting(60.0, "seconds a sender's clock may differ from the sink's "
                                      "(its HEARTBEAT's or RESULT's ts against the sink's "
                                      "clock on arrival) before it is counted "
                                      "(alerting.clock_skewed) and shown for that host "
                                      "(status, the console: clock skew N s); 0: never")
    delivery: DeliveryConfig = setting(factory=DeliveryConfig,
                                       help="channels (email, webhook) and routing rules")
    dependencies: list[deps.Dependency] = setting(
        factory=list, help="parents of hosts and checks: a child that goes silent while a "
                           "parent is DOWN (or a parent check in a HARD problem) is "
                           "UNREACHABLE and pages nobody; agents may declare their own "
                           "(parents: in the agent config)")

    rule_interval: float = setting(30.0, "seconds between two evaluations of every rule on "
                                         "series (alerting.rules)")
    rule_refresh: float = setting(300.0, "an OK rule's result is written again at least this "
                                         "often (seconds; a change is written at once)")
    rule_max_series_per_host: int = setting(1000, "series the rules keep of one host at most; "
                                                  "a new one past it is refused and counted")
    rules: list[series.RuleSpec] = setting(
        factory=list, help="rules on the series the agents send (their STATS and their "
                           "checks' perfdata): each a check rule:NAME of the hosts it applies "
                           "to (docs/operating/rules.md)")

    prometheus_alerts: PrometheusAlertsConfig = setting(
        factory=PrometheusAlertsConfig,
        help="how the alerts Prometheus (or vmalert) posts to the console as to an "
             "Alertmanager become checks prom:ALERTNAME of the hosts their labels name "
             "(docs/operating/prometheus-alerts.md)")

    slos: list[slo.SloSpec] = setting(
        factory=list, help="service level objectives over check results or rule states: "
                           "error budgets and burn-rate alerts, judged every rule_interval "
                           "(docs/operating/slo.md)")

    def validate(self):
        if not 1 <= self.max_check_attempts <= 100:
            raise ValueError("max_check_attempts: expected 1 to 100")
        if self.renotify_interval < 0:
            raise ValueError("renotify_interval: expected 0 (never) or more seconds")
        if not 0 <= self.flap_low <= self.flap_high <= 100:
            raise ValueError("flap_low: expected 0 <= flap_low <= flap_high <= 100")
        if self.host_timeout < 0 or self.host_timeout_min < 0:
            raise ValueError("host_timeout: expected 0 (automatic) or more seconds")
        if self.host_timeout_intervals < 1:
            raise ValueError("host_timeout_intervals: expected at least 1")
        if self.forget_after < 0:
            raise ValueError("forget_after: expected 0 (at the next tick) or more seconds")
        if self.clock_skew < 0:
            raise ValueError("clock_skew: expected 0 (never) or more seconds")
        if self.tick_interval <= 0:
            raise ValueError("tick_interval: expected a positive number of seconds")
        if self.rule_interval <= 0 or self.rule_refresh < 0:
            raise ValueError("rule_interval: expected a positive number of seconds "
                             "(rule_refresh: 0 or more)")
        if self.rule_max_series_per_host < 1:
            raise ValueError("rule_max_series_per_host: expected 1 or more")
        series.check_rules(self.rules)
        slo.check_slos(self.slos)
        cycle = deps.config_cycle(self.dependencies)
        if cycle is not None:
            raise ValueError(f"dependencies: cycle {deps.path_text(cycle)}")

    def check_policy(self, max_attempts: int | None = None) -> checkstate.Policy:
        """The check policy, with a plugin's own ``max_check_attempts`` if it declared one."""
        return checkstate.Policy(
            max_attempts=max_attempts or self.max_check_attempts,
            renotify_interval=self.renotify_interval, flap_detection=self.flap_detection,
            flap_low=self.flap_low, flap_high=self.flap_high)

    def host_policy(self, per_router: bool = True) -> hoststate.Policy:
        return hoststate.Policy(timeout=self.host_timeout,
                                intervals=self.host_timeout_intervals,
                                minimum=self.host_timeout_min, per_router=per_router)
