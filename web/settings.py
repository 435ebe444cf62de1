"""The operator config's ``web:`` section (fleetwatch.yaml), read by ``fleetwatch web``."""

from __future__ import annotations

from dataclasses import dataclass

from fleetwatch.config import setting

#: the address the console listens on unless told: this machine only
DEFAULT_LISTEN = "127.0.0.1:8080"


@dataclass(frozen=True)
class WebSettings:
    listen: str = setting(DEFAULT_LISTEN, "HOST:PORT the console and the API listen on "
                                          "(127.0.0.1: this machine only; put a reverse proxy "
                                          "or tls_cert in front of anything wider; port 0: "
                                          "any free port, printed at start)")
    secret_file: str = setting(
        "/var/lib/fleetwatch/web-secret",
        "file holding the key that signs session cookies (made, mode 0600, at first start)")
    tls_cert: str = setting("", "PEM certificate chain: serve HTTPS (with tls_key)")
    tls_key: str = setting("", "PEM private key of tls_cert")
    session_hours: float = setting(12.0, "hours a login lasts")
    login_attempts: int = setting(5, "failed logins of one user from one address before "
                                     "they are refused for login_lockout seconds")
    login_lockout: float = setting(300.0, "seconds failed logins are refused after "
                                          "login_attempts (or login_address_attempts)")
    login_address_attempts: int = setting(20, "failed logins from one address, whatever the "
                                              "user names (names that do not exist too), "
                                              "before that address is refused for "
                                              "login_lockout seconds")
    login_hashes: int = setting(2, "password checks computed at once, in threads of their own "
                                   "(never in the loop that answers pages); up to 8 times as "
                                   "many more wait, logins beyond that are refused (503)")
    max_body: int = setting(1_048_576, "bytes a request's body may hold at most (a form, an "
                                       "API call's JSON); a bigger one is refused with 413 "
                                       "before it is read; 1024 or more")
    refresh: float = setting(10.0, "seconds between updates of a page left open (the browser "
                                   "asks for the same page again and swaps in its content; "
                                   "0: pages do not update); 1 to 3600")
    assets: str = setting("", "directory of the console's built CSS and JavaScript ('': "
                              "web/static beside the code, where `make assets` builds them)")
    alerts_max: int = setting(10_000, "alerts from Prometheus (POST /api/v2/alerts: "
                                      "docs/operating/prometheus-alerts.md) kept at most; "
                                      "past it, resolved ones make room, and new ones are "
                                      "refused (429) while it holds only firing ones")
    alerts_resolve_timeout: float = setting(300.0, "seconds after its last post that an "
                                                   "alert posted without endsAt is "
                                                   "resolved (Alertmanager's "
                                                   "resolve_timeout)")

    def validate(self):
        host, sep, port = self.listen.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
            raise ValueError(f"listen: expected HOST:PORT, got {self.listen[:80]!r}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("tls_cert and tls_key: give both, or neither")
        if self.session_hours <= 0:
            raise ValueError("session_hours: expected a positive number")
        if self.login_attempts < 1 or self.login_lockout < 0:
            raise ValueError("login_attempts: at least 1; login_lockout: 0 or more")
        if self.login_address_attempts < 1 or self.login_hashes < 1:
            raise ValueError("login_address_attempts and login_hashes: at least 1")
        if self.max_body < 1024:
            raise ValueError(f"max_body: expected 1024 bytes or more, got {self.max_body}")
        if self.alerts_max < 1 or self.alerts_resolve_timeout <= 0:
            raise ValueError("alerts_max: at least 1; alerts_resolve_timeout: a positive "
                             "number of seconds")
        if self.refresh != 0 and not 1 <= self.refresh <= 3600:
            raise ValueError(f"refresh: expected 0 (off) or 1 to 3600 seconds, got "
                             f"{self.refresh:g}")

    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


@dataclass(frozen=True)
class RulesSettings:
    """The operator's ``rules:`` section: how the console's rule pages try a draft of a rule
    (``fleetwatch rules backtest``, docs/operating/console.md)."""

    alerting_config: str = setting(
        "", "an alerting sink's config (sink-alerting.yaml) whose alerting: section a draft "
            "is tried with (channels, dependencies, host timeouts, rule_interval...), its "
            "rules replaced by those the sinks declared and the draft; '': the defaults")
    backtest_timeout: float = setting(600.0, "seconds a draft's backtest run by the console "
                                             "may take before it is stopped")

    def validate(self):
        if not self.backtest_timeout > 0:
            raise ValueError("backtest_timeout: expected a positive number of seconds")
