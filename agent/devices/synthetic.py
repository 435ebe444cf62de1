"""Synthetic checks: a device's ``checks`` (ping, http, tls, tcp, dns), each run by the poller
as a Nagios plugin of Debian's against the device's address.

One dataclass per ``type`` (checked when the config is loaded: a misspelt key stops the agent
at start, naming it) and its command line: an argument list, never a shell string. Each
becomes a plugin as the agent declares its own (:class:`agent.plugins_config.CheckConfig`:
name, command, args, interval, timeout), named ``TYPE`` or ``TYPE_NAME`` (``ping``,
``http_login``), and runs as every plugin does (SPEC.md 4.5: :mod:`agent.runner`,
:mod:`agent.execute`), its command looked up in :data:`DIRS` only.

- ``ping``: check_ping (monitoring-plugins-basic): loss and round trip, perfdata ``rta``, ``pl``;
- ``http``: check_http (the same): status line, body regex, latency: ``time``, ``size``;
- ``tls``: check_http ``-C``: the days the certificate has left (no perfdata);
- ``tcp``: check_tcp (the same): a connection, and an answer if asked: ``time``;
- ``dns``: check_dig (monitoring-plugins-standard, with ``dig`` from bind9-dnsutils): a DNS
  server's answer, and the text expected in it: ``time``.

Why these: ``check_ping`` runs ``/bin/ping``, which works wherever ping does: with CAP_NET_RAW
given to the agent, or with none through ICMP datagram sockets where
``net.ipv4.ping_group_range`` admits the agent's group, while ``check_icmp`` needs
CAP_NET_RAW in every case (measured: docs/operating/devices.md). ``check_dig`` asks a given
server (the device, or ``server``), which the standard library's resolver cannot: it only
asks the poller's own resolvers, so it could neither check a DNS server nor tell which one
answered.

Each plugin is given its own timeout (``-t``) a second below the check's ``timeout``, so that
it reports its own CRITICAL ("Socket timeout") before the agent kills it as UNKNOWN.
"""

from __future__ import annotations

import ipaddress
import math
import re
from dataclasses import dataclass

from fleetwatch.config import setting

from agent.plugins_config import DEBIAN_DIR, CheckConfig, plugin_problem
from agent.runner import resolve

#: where a synthetic check's plugin is looked up, whatever ``plugins.dirs`` says: a device's
#: check runs Debian's plugin of that name, never a file of the same name elsewhere
DIRS = (DEBIAN_DIR,)
#: the Debian package that installs each plugin (for the error when one is missing)
PACKAGES = {"check_ping": "monitoring-plugins-basic", "check_http": "monitoring-plugins-basic",
            "check_tcp": "monitoring-plugins-basic",
            "check_dig": "monitoring-plugins-standard and bind9-dnsutils"}
#: a check's own ``name`` (its plugin is ``TYPE_NAME``)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,47}")
_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_DNS_NAME = re.compile(rf"(?=.{{1,253}}\.?$){_LABEL}(?:\.{_LABEL})*\.?")
_RECORD_TYPE = re.compile(r"[A-Z][A-Z0-9]{0,9}")


def address_problem(value: str) -> str | None:
    """Why ``value`` is not an IP address or a DNS name (None: it is one)."""
    try:
        ipaddress.ip_address(value)
        return None
    except ValueError:
        pass
    if _DNS_NAME.fullmatch(value) and not value.rstrip(".").rpartition(".")[2].isdigit():
        return None                 # (a name's last label is never all digits: 1.2.3.999)
    return f"{value[:64]!r} is not an IP address or a DNS name"


def within(obj, key: str, low: float, high: float, unit: str = "") -> None:
    """ValueError("KEY: expected LOW to HIGH UNIT") unless ``obj.KEY`` is in that range."""
    if not low <= getattr(obj, key) <= high:
        raise ValueError(f"{key}: expected {low:g} to {high:g}{unit}")


def _printable(value: str, key: str, most: int = 1024) -> None:
    if len(value) > most or any(not c.isprintable() for c in value):
        raise ValueError(f"{key}: expected at most {most} printable characters")


def _latency(level: str, what: str):
    """The ``warning`` or ``critical`` setting of a check timed in seconds."""
    return setting(0.0, f"{what} (seconds) past which it is {level}; 0: none")


def _seconds(value: float) -> str:
    """A plugin's ``-t``: whole seconds, one below the check's timeout (at least 1)."""
    return str(max(1, math.ceil(value) - 1))


@dataclass(frozen=True)
class Check:
    """What every synthetic check has; each type redeclares ``type`` (its default is the
    type's name)."""

    type: str = setting("", "the check's kind")
    name: str = setting("", "the check's own name: its plugin is TYPE_NAME (http_login); "
                            "empty: TYPE (ping). Two checks of a device never share a name")
    interval: float = setting(0.0, "seconds between runs (0: the device's interval)")
    timeout: float = setting(10.0, "seconds before the plugin's process group is killed "
                                   "(UNKNOWN); the plugin itself gives up a second earlier "
                                   "(CRITICAL)")

    @property
    def plugin(self) -> str:
        """The plugin's name in RUN and RESULT: ``TYPE`` or ``TYPE_NAME``."""
        return f"{self.type}_{self.name}" if self.name else self.type

    def validate(self):
        if self.name and not _NAME.fullmatch(self.name):
            raise ValueError(f"name: {self.name[:64]!r} is not 1 to 48 letters, digits or "
                             f"._- starting with a letter or a digit")
        if not 0 <= self.interval <= 86400:
            raise ValueError("interval: expected 0 (the device's) or up to 86400 seconds")
        within(self, "timeout", 2, 300, " seconds")

    def argv(self, address: str) -> tuple[str, list[str]]:
        """(the plugin's file name, its arguments) against the device at ``address``."""
        raise NotImplementedError


def _latency_args(check) -> list[str]:
    """``-w``/``-c`` of a check with ``warning`` and ``critical`` in seconds (0: none)."""
    args = []
    for option, value in (("-w", check.warning), ("-c", check.critical)):
        if value > 0:
            args += [option, f"{value:g}"]
    return args


def _check_latency(check) -> None:
    for key in ("warning", "critical"):
        if getattr(check, key) < 0:
            raise ValueError(f"{key}: expected 0 (none) or a positive number of seconds")
    if 0 < check.critical < check.warning:
        raise ValueError("critical: expected no less than warning")


def _port(value: int, key: str = "port", zero: bool = False) -> None:
    if not (0 if zero else 1) <= value <= 65535:
        raise ValueError(f"{key}: expected {'0 (the default) or ' if zero else ''}"
                         f"1 to 65535")


def _host(value: str, key: str = "host") -> None:
    problem = value and address_problem(value)
    if problem:
        raise ValueError(f"{key}: {problem}")


@dataclass(frozen=True)
class PingCheck(Check):
    type: str = setting("ping", "ping: ICMP echo, loss and round trip (check_ping)")
    packets: int = setting(5, "echo requests sent, one a second")
    warning_rta: float = setting(200.0, "round trip average (ms) past which it is WARNING")
    warning_loss: int = setting(20, "packet loss (%) from which it is WARNING")
    critical_rta: float = setting(500.0, "round trip average (ms) past which it is CRITICAL")
    critical_loss: int = setting(60, "packet loss (%) from which it is CRITICAL")

    def validate(self):
        super().validate()
        within(self, "packets", 1, 20)
        if self.timeout < self.packets + 2:
            raise ValueError(f"timeout: expected at least packets + 2 seconds "
                             f"({self.packets + 2}): one echo request a second")
        for key in ("warning_loss", "critical_loss"):
            within(self, key, 0, 100, " (%)")
        for key in ("warning_rta", "critical_rta"):
            if getattr(self, key) <= 0:
                raise ValueError(f"{key}: expected a positive number of milliseconds")
        if self.critical_rta < self.warning_rta or self.critical_loss < self.warning_loss:
            raise ValueError("critical_rta: expected critical thresholds no lower than the "
                             "warning ones")

    def argv(self, address):
        return "check_ping", [
            "-H", address, "-w", f"{self.warning_rta:g},{self.warning_loss}%",
            "-c", f"{self.critical_rta:g},{self.critical_loss}%", "-p", str(self.packets),
            "-t", _seconds(self.timeout)]


@dataclass(frozen=True)
class HttpCheck(Check):
    type: str = setting("http", "http: an HTTP(S) request, its status line, body and "
                                "latency (check_http)")
    port: int = setting(0, "TCP port (0: 80, or 443 with ssl)")
    ssl: bool = setting(False, "speak HTTPS (the certificate is not verified: a tls check "
                               "tells its days left)")
    host: str = setting("", "the virtual host (Host header, and TLS SNI with ssl); "
                            "empty: the device's address")
    path: str = setting("/", "the path (and query) requested")
    expect: list[int] = setting(factory=list,
                                help="status codes that are OK ([200, 301]); empty: check_http's "
                                     "own rule (2xx and 3xx OK, 4xx WARNING, 5xx CRITICAL); "
                                     "another status is then CRITICAL")
    regex: str = setting("", "an extended regular expression the body must match "
                             "(CRITICAL otherwise); empty: none")
    follow: bool = setting(False, "follow redirections (else a 3xx is the answer)")
    warning: float = _latency("WARNING", "response time")
    critical: float = _latency("CRITICAL", "response time")

    def validate(self):
        super().validate()
        _port(self.port, zero=True)
        _host(self.host)
        if not self.path.startswith("/") or any(c.isspace() for c in self.path):
            raise ValueError(f"path: expected a path starting with / and no spaces, got "
                             f"{self.path[:60]!r}")
        _printable(self.path, "path")
        for code in self.expect:
            if not 100 <= code <= 599:
                raise ValueError(f"expect: {code} is not an HTTP status code (100 to 599)")
        _printable(self.regex, "regex")
        _check_latency(self)

    def argv(self, address):
        args = ["-I", address, "-H", self.host or address, "-u", self.path]
        if self.port:
            args += ["-p", str(self.port)]
        if self.ssl:
            args += ["-S"] + (["--sni"] if self.host else [])
        if self.expect:
            args += ["-e", ",".join(str(c) for c in self.expect)]
        if self.regex:
            args += ["-r", self.regex]
        if self.follow:
            args += ["-f", "follow"]
        return "check_http", args + _latency_args(self) + ["-t", _seconds(self.timeout)]


@dataclass(frozen=True)
class TlsCheck(Check):
    type: str = setting("tls", "tls: the days the server's certificate has left "
                               "(check_http -C)")
    port: int = setting(443, "TCP port")
    host: str = setting("", "the name sent in TLS SNI (and Host); empty: the device's "
                            "address, no SNI")
    warning_days: int = setting(30, "WARNING when the certificate has fewer days left")
    critical_days: int = setting(7, "CRITICAL when the certificate has fewer days left")

    def validate(self):
        super().validate()
        _port(self.port)
        _host(self.host)
        if not 0 <= self.critical_days <= self.warning_days <= 3650:
            raise ValueError("warning_days: expected 0 <= critical_days <= warning_days "
                             "<= 3650")

    def argv(self, address):
        args = ["-I", address, "-H", self.host or address, "-p", str(self.port), "-S"]
        if self.host:
            args.append("--sni")
        return "check_http", args + ["-C", f"{self.warning_days},{self.critical_days}",
                                     "-t", _seconds(self.timeout)]


@dataclass(frozen=True)
class TcpCheck(Check):
    type: str = setting("tcp", "tcp: a TCP connection, optionally a line sent and an "
                               "answer expected (check_tcp)")
    port: int = setting(0, "TCP port (required)")
    send: str = setting("", "a string sent once connected; empty: none")
    expect: str = setting("", "a string the answer must hold (CRITICAL otherwise); "
                              "empty: none")
    ssl: bool = setting(False, "connect with TLS")
    warning: float = _latency("WARNING", "connection time")
    critical: float = _latency("CRITICAL", "connection time")

    def validate(self):
        super().validate()
        if self.port == 0:
            raise ValueError("port: required (1 to 65535)")
        _port(self.port)
        _printable(self.send, "send")
        _printable(self.expect, "expect")
        _check_latency(self)

    def argv(self, address):
        args = ["-H", address, "-p", str(self.port)]
        if self.send:
            args += ["-s", self.send]
        if self.expect:
            args += ["-e", self.expect]
        if self.ssl:
            args.append("-S")
        return "check_tcp", args + _latency_args(self) + ["-t", _seconds(self.timeout)]


@dataclass(frozen=True)
class DnsCheck(Check):
    type: str = setting("dns", "dns: a DNS server's answer to a query (check_dig)")
    query: str = setting("", "the name looked up (required)")
    server: str = setting("", "the DNS server asked (an address or a name); empty: the "
                              "device")
    port: int = setting(53, "the server's UDP port")
    record_type: str = setting("A", "the record type asked (A, AAAA, MX, TXT...)")
    expect: str = setting("", "text the answer must hold, such as an address (WARNING "
                              "otherwise, as check_dig says); empty: any answer")
    warning: float = _latency("WARNING", "response time")
    critical: float = _latency("CRITICAL", "response time")

    def validate(self):
        super().validate()
        if not self.query:
            raise ValueError("query: required (the name to look up)")
        _host(self.query, "query")
        _host(self.server, "server")
        _port(self.port)
        if not _RECORD_TYPE.fullmatch(self.record_type):
            raise ValueError(f"record_type: expected a record type in capitals (A, AAAA, "
                             f"MX...), got {self.record_type[:20]!r}")
        _printable(self.expect, "expect", 255)
        if any(c.isspace() for c in self.expect):
            raise ValueError("expect: expected no spaces")
        _check_latency(self)

    def argv(self, address):
        args = ["-H", self.server or address, "-p", str(self.port), "-l", self.query,
                "-T", self.record_type]
        if self.expect:
            args += ["-a", self.expect]
        return "check_dig", args + _latency_args(self) + ["-t", _seconds(self.timeout)]


CHECK_TYPES: dict[str, type[Check]] = {"ping": PingCheck, "http": HttpCheck, "tls": TlsCheck,
                                       "tcp": TcpCheck, "dns": DnsCheck}
#: the check ``alive: ping`` runs when the device declares none named ``ping``
DEFAULT_PING = PingCheck()


def spec(check: Check, address: str, interval: float) -> CheckConfig:
    """``check`` against ``address`` as a plugin the agent declares and runs; ``interval``
    is the device's (a check's own 0)."""
    command, args = check.argv(address)
    made = CheckConfig(name=check.plugin, command=command, args=args,
                       interval=check.interval or interval, timeout=check.timeout)
    problem = plugin_problem(made.name, made.command, made.args, made.interval, made.timeout)
    if problem:                 # the checks' validate() rule this out: a bug if it happens
        raise ValueError(": ".join(problem))
    return made


def specs(device) -> list[CheckConfig]:
    """The plugins of a device (:class:`agent.devices.config.Device`): its checks, and a
    ``ping`` with the defaults when ``alive`` is ping and it declares none."""
    checks = list(device.synthetic())
    if device.alive_check == "ping" and all(c.plugin != "ping" for c in checks):
        checks.append(DEFAULT_PING)
    return [spec(c, device.address, device.interval) for c in checks]


def missing(declared, resolve=resolve) -> list[str]:
    """One line per plugin of ``declared`` (:func:`specs`) that cannot run here, naming the
    Debian package to install (``resolve``: :func:`agent.runner.resolve`)."""
    lines = []
    for command in sorted({s.command for s in declared}):
        found = resolve(command, DIRS)
        if isinstance(found, str):
            lines.append(f"{found}: install {PACKAGES.get(command, 'it')}")
    return lines
