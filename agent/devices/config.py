"""The ``devices:`` section of ``agent.yaml``: the devices this agent polls, as their poller.

    devices:
      hosts:
        - name: sw-core-1                      # its hostname in the fleet
          address: 192.0.2.10                  # an IP address or a DNS name
          snmp: {version: 2c, community_file: /etc/fleetwatch/snmp/sw-core-1.community,
                 interfaces: {exclude: ["Null*", "lo"]}}
          checks: [{type: ping}]
        - name: www.example.com                # a service seen from outside
          address: www.example.com
          checks:
            - {type: http, name: home, ssl: true, host: www.example.com, regex: Welcome}
            - {type: tls, host: www.example.com}
          alive: http_home
      traps: {listen: 127.0.0.1:1162, communities_file: /etc/fleetwatch/snmp/traps.communities}

Each device is a host of the fleet (docs/operating/devices.md). Secrets are never in the
file: a community or a v3 key is read from its own file, here once to check it can be (the
error names the key and the file, never what it holds) and again by the SNMP code at start
(:func:`read_secret`, :func:`read_communities`). Nothing here imports pysnmp.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass
from typing import Any

from fleetwatch.config import ConfigError, build, setting
from fleetwatch.protocol import device_slug

from agent.devices.synthetic import CHECK_TYPES, Check, address_problem, within
from agent.parents import check_parents

#: SNMPv3 authentication and privacy protocols (USM), as the config names them (the SNMP
#: code, agent.devices.snmp, maps each to pysnmp's). AES192 and AES256 extend a short key as
#: Net-SNMP does (draft-blumenthal), AES192C and AES256C as Cisco does (draft-reeder)
AUTH_PROTOCOLS = ("SHA", "SHA224", "SHA256", "SHA384", "SHA512", "MD5")
PRIV_PROTOCOLS = ("AES", "AES192", "AES256", "AES192C", "AES256C", "DES", "3DES")
#: USM's shortest passphrase (RFC 3414 11.2: 8 octets)
MIN_KEY = 8
#: the largest ``max_devices``
MAX_DEVICES = 100_000
MAX_EXTRA_OIDS = 64
MAX_CHECKS = 32
MAX_COMMUNITIES = 64
#: sockets and descriptors the agent keeps for itself beside its devices' (libzmq's default
#: socket limit, 1,023, and a unit's default LimitNOFILE, 1,024, are about that)
RESERVED = 1024
#: descriptors one link of a device may hold: its DEALER's mailbox and TCP connection, and
#: with CURVE its monitor's two inproc sockets' mailboxes
PER_LINK = 4
#: a numeric OID (a leading dot allowed): two or more arcs, each a number
_OID = re.compile(r"\.?(0|1|2)(\.(0|[1-9][0-9]{0,9})){1,127}")
_EXTRA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}")
_USER = re.compile(r"[!-~]{1,32}")
_ENGINE_ID = re.compile(r"(0x)?([0-9A-Fa-f]{2}){5,32}")


def _read(path: str) -> str:
    """The text of ``path`` (its first 64 KiB); ValueError naming the file, never its
    content, when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return f.read(65536)
    except OSError as e:
        raise ValueError(f"{path}: cannot be read ({e.strerror or e.__class__.__name__})") \
            from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: is not UTF-8 text") from None


def read_secret(path: str) -> str:
    """The secret in the file ``path``, whitespace at its ends removed. ValueError, naming
    the file and never its content, when it cannot be read or is empty."""
    value = _read(path).strip()
    if not value:
        raise ValueError(f"{path}: is empty")
    if any(not c.isprintable() for c in value):
        raise ValueError(f"{path}: holds more than one line, or control characters")
    return value


def read_communities(path: str) -> list[str]:
    """The communities in the file ``path``: one a line, blank lines skipped (ValueError as
    :func:`read_secret`)."""
    communities = [line.strip() for line in _read(path).splitlines() if line.strip()]
    if not communities:
        raise ValueError(f"{path}: holds no community")
    if len(communities) > MAX_COMMUNITIES:
        raise ValueError(f"{path}: holds more than {MAX_COMMUNITIES} communities")
    if any(not c.isprintable() for c in communities):
        raise ValueError(f"{path}: holds control characters")
    return communities


def _secret_file(key: str, path: str, shortest: int = 1) -> None:
    """ValueError("KEY: ...") unless ``path`` holds a secret of ``shortest`` characters."""
    try:
        value = read_secret(path)
    except ValueError as e:
        raise ValueError(f"{key}: {e}") from None
    if len(value) < shortest:
        raise ValueError(f"{key}: {path}: holds fewer than {shortest} characters "
                         f"(SNMPv3's shortest key)")


@dataclass(frozen=True)
class Usm:
    """An SNMPv3 user (USM): its name, and its keys' files."""

    user: str = setting("", "SNMPv3 user name (version 3)")
    auth_protocol: str = setting("SHA", f"authentication: {', '.join(AUTH_PROTOCOLS)}")
    auth_key_file: str = setting("", "file holding the authentication passphrase (at least "
                                     "8 characters; required with a user)")
    priv_protocol: str = setting("AES", f"privacy (encryption): {', '.join(PRIV_PROTOCOLS)}")
    priv_key_file: str = setting("", "file holding the privacy passphrase (at least 8 "
                                     "characters); empty: no privacy (authNoPriv), the "
                                     "requests and answers in clear")

    def check_usm(self):
        if not self.user:
            for key in ("auth_key_file", "priv_key_file"):
                if getattr(self, key):
                    raise ValueError(f"{key}: set without a user")
            return
        if not _USER.fullmatch(self.user):
            raise ValueError(f"user: {self.user[:40]!r} is not 1 to 32 printable characters "
                             f"without spaces")
        if self.auth_protocol not in AUTH_PROTOCOLS:
            raise ValueError(f"auth_protocol: expected one of {', '.join(AUTH_PROTOCOLS)}, "
                             f"got {self.auth_protocol[:20]!r}")
        if self.priv_protocol not in PRIV_PROTOCOLS:
            raise ValueError(f"priv_protocol: expected one of {', '.join(PRIV_PROTOCOLS)}, "
                             f"got {self.priv_protocol[:20]!r}")
        if not self.auth_key_file:
            raise ValueError("auth_key_file: required with a user (noAuthNoPriv is not "
                             "offered)")
        _secret_file("auth_key_file", self.auth_key_file, MIN_KEY)
        if self.priv_key_file:
            _secret_file("priv_key_file", self.priv_key_file, MIN_KEY)

    @property
    def level(self) -> str:
        """The USM security level: authPriv or authNoPriv."""
        return "authPriv" if self.priv_key_file else "authNoPriv"


@dataclass(frozen=True)
class InterfaceFilter:
    """Which interfaces are polled, by ifName (ifDescr when a device has no ifName)."""

    include: list[str] = setting(factory=lambda: ["*"],
                                 help="shell patterns (fnmatch, case-sensitive): an interface "
                                      "whose name matches one is polled")
    exclude: list[str] = setting(factory=list,
                                 help="shell patterns: an interface whose name matches one is "
                                      "not polled, even if included (e.g. [\"Null*\", lo])")

    def validate(self):
        for key in ("include", "exclude"):
            for pattern in getattr(self, key):
                if not pattern or len(pattern) > 255:
                    raise ValueError(f"{key}: expected patterns of 1 to 255 characters")

    def wanted(self, name: str) -> bool:
        """Whether the interface ``name`` is polled."""
        return any(fnmatch.fnmatchcase(name, p) for p in self.include) and \
            not any(fnmatch.fnmatchcase(name, p) for p in self.exclude)


@dataclass(frozen=True)
class SnmpConfig(Usm):
    """How the poller reaches a device by SNMP; ``version: 3`` takes the user above."""

    version: Any = setting("2c", "2c (a community) or 3 (a user, its keys)")
    port: int = setting(161, "the device's SNMP port (UDP)")
    community_file: str = setting("", "file holding the community (version 2c; required)")
    max_repetitions: int = setting(25, "rows asked for in one GETBULK request")
    max_interfaces: int = setting(1000, "interfaces polled at most (in ifIndex order); the "
                                        "rest are counted, not polled")
    interfaces: InterfaceFilter = setting(factory=InterfaceFilter,
                                          help="which interfaces are polled, by name")
    extra_oids: dict[str, str] = setting(
        factory=dict, help="NAME -> numeric OID read (GET) at each poll besides the standard "
                           "ones; a numeric answer is the series extra.NAME (e.g. "
                           "{temperature: 1.3.6.1.4.1.9.9.13.1.3.1.3.1})")

    def __post_init__(self):
        # YAML reads `version: 3` as a number and `version: 2c` as a string: take both.
        if self.version in (3, "3", "2c"):
            object.__setattr__(self, "version", str(self.version))

    def validate(self):
        if self.version not in ("2c", "3"):
            raise ValueError(f"version: expected 2c or 3 (SNMPv1 is not offered: no 64-bit "
                             f"counters), got {str(self.version)[:20]!r}")
        if self.version == "2c":
            if self.user:
                raise ValueError("user: set with version 2c (set version: 3)")
            if not self.community_file:
                raise ValueError("community_file: required with version 2c")
            _secret_file("community_file", self.community_file)
        else:
            if self.community_file:
                raise ValueError("community_file: set with version 3 (a user is used)")
            if not self.user:
                raise ValueError("user: required with version 3")
        self.check_usm()
        within(self, "port", 1, 65535)
        within(self, "max_repetitions", 1, 100)
        within(self, "max_interfaces", 1, 100_000)
        if len(self.extra_oids) > MAX_EXTRA_OIDS:
            raise ValueError(f"extra_oids: expected at most {MAX_EXTRA_OIDS}")
        for name, oid in self.extra_oids.items():
            if not _EXTRA_NAME.fullmatch(name):
                raise ValueError(f"extra_oids: {name[:40]!r} is not 1 to 64 letters, digits, "
                                 f"_ or - starting with a letter or a digit")
            if not _OID.fullmatch(oid):
                raise ValueError(f"extra_oids.{name}: {oid[:60]!r} is not a numeric OID "
                                 f"(1.3.6.1...: names are not resolved, no MIB is loaded)")

    @property
    def extra(self) -> dict[str, str]:
        """``extra_oids`` without a leading dot."""
        return {name: oid.lstrip(".") for name, oid in self.extra_oids.items()}


@dataclass(frozen=True)
class Device:
    """One device: a host of the fleet that this agent speaks for."""

    name: str = setting(help="its hostname in the fleet (status, the console, alerts, "
                             "Graphite); 1 to 255 printable characters, no /")
    address: str = setting(help="how the poller reaches it: an IP address or a DNS name "
                                "(resolved at each poll)")
    parents: list[str] = setting(factory=list,
                                 help="HOST or HOST/CHECK it can only be reached through "
                                      "(as the agent's own parents); empty: the poller's "
                                      "hostname, so that a poller gone silent makes its "
                                      "devices UNREACHABLE, not DOWN")
    interval: float = setting(60.0, "seconds between two polls (and the checks' runs)")
    timeout: float = setting(2.0, "seconds an SNMP request waits for its answer")
    retries: int = setting(1, "times an SNMP request is sent again when unanswered")
    snmp: SnmpConfig | None = setting(None, "how it is polled by SNMP; absent: not polled "
                                            "(synthetic checks only)")
    checks: list[dict[str, Any]] = setting(
        factory=list, help=f"synthetic checks run against its address: {{type: "
                           f"{'|'.join(CHECK_TYPES)}, ...}}", variants=CHECK_TYPES)
    alive: str = setting("", "what says it is up (its heartbeat): snmp (an SNMP answer), "
                             "ping, or the name of one of its checks (http_home) in OK or "
                             "WARNING; empty: snmp when it is polled, else ping")
    traps: bool = setting(True, "SNMP traps from its address are its own (false: another "
                                "device of the same address takes them)")

    def __post_init__(self):
        # Parsed once; an error is raised by validate() (at load, naming the key).
        try:
            parsed, error = self._parse(), None
        except ValueError as e:
            parsed, error = (), e
        object.__setattr__(self, "_checks", parsed)
        object.__setattr__(self, "_error", error)

    def _parse(self) -> tuple[Check, ...]:
        if len(self.checks) > MAX_CHECKS:
            raise ValueError(f"checks: expected at most {MAX_CHECKS}")
        parsed = tuple(parse_check(f"checks[{i}]", raw) for i, raw in enumerate(self.checks))
        seen: dict[str, int] = {}
        for i, check in enumerate(parsed):
            if check.plugin in seen:
                raise ValueError(f"checks[{i}].name: a second check named {check.plugin!r} "
                                 f"(checks[{seen[check.plugin]}]): give each its own name")
            seen[check.plugin] = i
        return parsed

    def validate(self):
        if self._error is not None:
            raise self._error
        if not 1 <= len(self.name) <= 255 or "/" in self.name or self.name != self.name.strip() \
                or any(not c.isprintable() for c in self.name):
            raise ValueError(f"name: {self.name[:64]!r} is not 1 to 255 printable characters "
                             f"without / or spaces at its ends")
        problem = address_problem(self.address)
        if problem:
            raise ValueError(f"address: {problem}")
        check_parents(self.parents)
        for parent in self.parents:
            if parent.split("/")[0] == self.name:
                raise ValueError(f"parents: {parent[:60]!r} is the device itself")
        within(self, "interval", 1, 86400, " seconds")
        within(self, "timeout", 0.1, 60, " seconds")
        within(self, "retries", 0, 10)
        if self.snmp is not None and self.timeout * (self.retries + 1) > self.interval:
            raise ValueError(f"timeout: timeout x (retries + 1) is "
                             f"{self.timeout * (self.retries + 1):g} s, longer than the "
                             f"interval ({self.interval:g} s)")
        if self.alive == "snmp" and self.snmp is None:
            raise ValueError("alive: snmp, but the device has no snmp section")
        names = {c.plugin for c in self._checks}
        if self.alive not in ("", "snmp", "ping") and self.alive not in names:
            known = ", ".join(["snmp", "ping", *sorted(names - {"ping"})])
            raise ValueError(f"alive: {self.alive[:64]!r} is not one of its checks "
                             f"(known: {known})")

    def synthetic(self) -> tuple[Check, ...]:
        """Its ``checks`` as their typed dataclasses (:mod:`agent.devices.synthetic`)."""
        if self._error is not None:
            raise self._error
        return self._checks

    @property
    def alive_check(self) -> str:
        """What says it is up: ``snmp``, or the plugin name of one of its checks (``ping``
        is added by :func:`agent.devices.synthetic.specs` when not declared)."""
        return self.alive or ("snmp" if self.snmp is not None else "ping")

    @property
    def slug(self) -> str:
        """Its part of its uuid (``POLLERUUID@SLUG``: :func:`fleetwatch.protocol.device_slug`)."""
        return device_slug(self.name)


def parse_check(prefix: str, raw: dict) -> Check:
    """One check's mapping as its typed dataclass; ValueError("PREFIX.KEY: ...")."""
    kind = raw.get("type")
    if kind not in CHECK_TYPES:
        raise ValueError(f"{prefix}.type: expected one of {', '.join(CHECK_TYPES)}, got "
                         f"{str(kind)[:40]!r}")
    try:
        return build(CHECK_TYPES[kind], dict(raw), "", prefix)
    except ConfigError as e:
        raise ValueError(f"{e.key}: {e.expected}") from None


@dataclass(frozen=True)
class TrapUser(Usm):
    """An SNMPv3 user whose traps and informs are taken."""

    engine_id: str = setting("", "the sending device's snmpEngineID (hex, e.g. "
                                 "80001f8880...), to which its v3 traps' keys are "
                                 "localized; empty: learnt from its first trap (informs "
                                 "need none). snmpget -v3 ... 1.3.6.1.6.3.10.2.1.1.0 reads "
                                 "it")

    def validate(self):
        if not self.user:
            raise ValueError("user: required")
        self.check_usm()
        if self.engine_id and not _ENGINE_ID.fullmatch(self.engine_id):
            raise ValueError(f"engine_id: {self.engine_id[:70]!r} is not 5 to 32 octets in "
                             f"hex")


@dataclass(frozen=True)
class TrapsConfig:
    """The trap and inform receiver."""

    listen: str = setting("127.0.0.1:1162",
                          "HOST:PORT the receiver listens on (UDP; [::]:PORT for IPv6); '': "
                          "no receiver. Port 162 needs CAP_NET_BIND_SERVICE or a redirection "
                          "(docs/operating/devices.md)")
    communities_file: str = setting("", "file holding the SNMPv2c communities taken, one a "
                                        "line; empty: no v2c trap is taken")
    users: list[TrapUser] = setting(factory=list, help="SNMPv3 users whose traps and informs "
                                                       "are taken")
    rate: float = setting(10.0, "traps a second taken from one source address; more are "
                                "dropped and counted (traps_rate_limited)")
    burst: int = setting(50, "traps one source may send at once before rate applies")

    def validate(self):
        if self.listen:
            host, sep, port = self.listen.rpartition(":")
            bare = host.strip("[]")
            if not sep or not bare or any(c.isspace() for c in host) or not port.isdigit() \
                    or int(port) > 65535 or (":" in bare and host != f"[{bare}]"):
                raise ValueError(f"listen: {self.listen[:60]!r} is not HOST:PORT (e.g. "
                                 f"127.0.0.1:1162) or '' (no receiver)")
        if self.communities_file:
            try:
                read_communities(self.communities_file)
            except ValueError as e:
                raise ValueError(f"communities_file: {e}") from None
        names = [u.user for u in self.users]
        if len(set(names)) < len(names):
            raise ValueError("users: a user is listed twice")
        if not 0 < self.rate <= 100_000:
            raise ValueError("rate: expected a positive number of traps a second")
        within(self, "burst", 1, 100_000)

    @property
    def enabled(self) -> bool:
        """Whether the receiver runs: an address, and a community or a user to take."""
        return bool(self.listen and (self.communities_file or self.users))

    @property
    def address(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host.strip("[]"), int(port)


@dataclass(frozen=True)
class DevicesConfig:
    """The devices this agent polls, each a host of the fleet, and its trap receiver."""

    hosts: list[Device] = setting(factory=list, help="the devices: each a host of the fleet "
                                                     "that this agent speaks for")
    traps: TrapsConfig = setting(factory=TrapsConfig,
                                 help="SNMP traps and informs from the devices (the "
                                      "receiver runs when a community or a user is given)")
    max_devices: int = setting(5000, "devices at most (hosts past it stop the agent at start)")
    heartbeat_interval: float = setting(
        10.0, "seconds between a device's heartbeats to each router while it answers (the "
              "alerting sinks call it DOWN after 3 of them, at least 10 s, without one)")
    max_concurrent: int = setting(20, "SNMP polls at once; the others wait their turn (more "
                                      "does not poll faster: the poller is bound by decoding "
                                      "answers, and their requests time out waiting)")
    max_running: int = setting(16, "synthetic checks running at once, all devices together "
                                   "(besides the agent's own plugins.max_running)")

    def validate(self):
        within(self, "max_devices", 1, MAX_DEVICES)
        within(self, "heartbeat_interval", 0.1, 3600, " seconds")
        within(self, "max_concurrent", 1, 10_000)
        within(self, "max_running", 1, 1000)
        if len(self.hosts) > self.max_devices:
            raise ValueError(f"hosts: {len(self.hosts)} devices, more than max_devices "
                             f"({self.max_devices})")
        names: dict[str, int] = {}
        slugs: dict[str, int] = {}
        trapped: dict[str, int] = {}
        for i, device in enumerate(self.hosts):
            for seen, key, what in ((names, device.name, "name"),
                                    (slugs, device.slug, "uuid slug")):
                if key in seen:
                    other = self.hosts[seen[key]].name
                    raise ValueError(f"hosts[{i}].name: {device.name[:64]!r} has the {what} "
                                     f"of hosts[{seen[key]}] ({other[:64]!r})")
                seen[key] = i
            if device.traps:
                address = device.address.lower().rstrip(".")
                if address in trapped:
                    raise ValueError(f"hosts[{i}].traps: {device.name[:64]!r} has the address "
                                     f"of hosts[{trapped[address]}], which takes its traps "
                                     f"(set traps: false on all but one)")
                trapped[address] = i

    def capabilities(self) -> list[str]:
        """The Linux capabilities the poller's unit must give it: CAP_NET_RAW for ``ping``
        (Debian's /bin/ping under an empty bounding set cannot start), CAP_NET_BIND_SERVICE
        for a trap port below 1024 (docs/operating/devices.md, "What needs a capability")."""
        wanted = []
        if any(d.alive_check == "ping" or any(c.type == "ping" for c in d.synthetic())
               for d in self.hosts):
            wanted.append("CAP_NET_RAW")
        if self.traps.enabled and self.traps.address[1] < 1024:
            wanted.append("CAP_NET_BIND_SERVICE")
        return wanted

    def sockets(self, links: int) -> int:
        """ZeroMQ sockets the poller may hold: its own :data:`RESERVED`, and for each of its
        devices' ``links`` a DEALER and (CURVE) its monitor."""
        return RESERVED + len(self.hosts) * links * 2

    def descriptors(self, links: int) -> int:
        """File descriptors the poller may hold: its own :data:`RESERVED`, and
        :data:`PER_LINK` for each of its devices' ``links``."""
        return RESERVED + len(self.hosts) * links * PER_LINK

    def trap_sources(self) -> dict[str, str]:
        """Address (as written, lower case) -> the device whose traps come from it."""
        return {d.address.lower().rstrip("."): d.name for d in self.hosts if d.traps}
