"""The ``devices:`` section of the agent's config (agent/devices/config.py) and what each
synthetic check becomes (agent/devices/synthetic.py): a wrong setting stops the agent at
start naming its key (never a secret), and each check is the argument list of a Debian
plugin, declared as the agent declares its own plugins."""

from __future__ import annotations

import pytest

from agent.devices import synthetic
from agent.devices.config import DevicesConfig, InterfaceFilter, read_communities, read_secret
from agent.plugins_config import CheckConfig
from fleetwatch.config import ConfigError, build
from fleetwatch.protocol import ID_PATTERN

pytestmark = pytest.mark.timeout(60)

COMMUNITY = "s3cret-community"
PASSPHRASE = "auth-pass-123"


@pytest.fixture
def secrets(tmp_path):
    """Secret files: a community, a v3 passphrase, one too short, one empty."""
    files = {"community": COMMUNITY + "\n", "key": PASSPHRASE + "\n", "short": "abc\n",
             "empty": "\n", "traps": f"{COMMUNITY}\n\n  other-one  \n"}
    paths = {}
    for name, text in files.items():
        path = tmp_path / name
        path.write_text(text)
        path.chmod(0o600)
        paths[name] = str(path)
    paths["absent"] = str(tmp_path / "absent")
    return paths


def devices(*hosts, **section) -> DevicesConfig:
    return build(DevicesConfig, {"hosts": list(hosts), **section}, "agent.yaml", "devices")


def v2c(secrets, **more) -> dict:
    return {"community_file": secrets["community"], **more}


def v3(secrets, **more) -> dict:
    return {"version": 3, "user": "fwuser", "auth_key_file": secrets["key"],
            "priv_key_file": secrets["key"], **more}


def test_a_device_with_defaults(secrets):
    cfg = devices({"name": "sw1", "address": "192.0.2.10", "snmp": v2c(secrets)})
    (sw1,) = cfg.hosts
    assert (sw1.interval, sw1.timeout, sw1.retries, sw1.parents, sw1.traps) == \
        (60.0, 2.0, 1, [], True)
    assert (sw1.snmp.version, sw1.snmp.port, sw1.snmp.max_repetitions,
            sw1.snmp.max_interfaces) == ("2c", 161, 25, 1000)
    assert sw1.alive_check == "snmp" and sw1.slug == "sw1"
    assert cfg.max_devices == 5000 and cfg.traps.listen == "127.0.0.1:1162"
    assert not cfg.traps.enabled            # nothing to take: no community, no user
    assert cfg.trap_sources() == {"192.0.2.10": "sw1"}


def test_version_3_as_yaml_writes_it_and_its_security_level(secrets):
    for version in (3, "3"):
        snmp = devices({"name": "r1", "address": "::1", "snmp": v3(secrets, version=version)}
                       ).hosts[0].snmp
        assert (snmp.version, snmp.level) == ("3", "authPriv")
    snmp = devices({"name": "r1", "address": "r1.example.net",
                    "snmp": v3(secrets, priv_key_file="")}).hosts[0].snmp
    assert snmp.level == "authNoPriv"


def test_a_device_without_snmp_is_alive_by_ping_which_it_gets_when_undeclared():
    (web,) = devices({"name": "www.example.com", "address": "www.example.com",
                      "checks": [{"type": "http", "ssl": True}]}).hosts
    assert web.snmp is None and web.alive_check == "ping"
    assert [s.name for s in synthetic.specs(web)] == ["http", "ping"]
    (web,) = devices({"name": "w", "address": "www.example.com", "alive": "http",
                      "checks": [{"type": "http"}]}).hosts
    assert [s.name for s in synthetic.specs(web)] == ["http"]


def test_the_protocols_the_config_takes_are_those_the_snmp_code_speaks():
    pytest.importorskip("pysnmp")
    from agent.devices import config, snmp
    assert set(config.AUTH_PROTOCOLS) == set(snmp.AUTH_PROTOCOLS)
    assert set(config.PRIV_PROTOCOLS) == set(snmp.PRIV_PROTOCOLS)
    assert config.MIN_KEY == snmp.MIN_KEY


def test_interfaces_are_chosen_by_name():
    wanted = InterfaceFilter(include=["eth*", "Gi1/0/*"], exclude=["eth9*"]).wanted
    assert [n for n in ("eth0", "eth9", "eth91", "Gi1/0/1", "lo", "ETH0") if wanted(n)] == \
        ["eth0", "Gi1/0/1"]
    assert InterfaceFilter().wanted("anything")


def test_extra_oids_are_numeric_with_or_without_a_leading_dot(secrets):
    snmp = devices({"name": "sw", "address": "10.0.0.1", "snmp": v2c(secrets, extra_oids={
        "temperature": ".1.3.6.1.4.1.9.9.13.1.3.1.3.1", "fans": "1.3.6.1.4.1.2021.13.16"})}
    ).hosts[0].snmp
    assert snmp.extra == {"temperature": "1.3.6.1.4.1.9.9.13.1.3.1.3.1",
                          "fans": "1.3.6.1.4.1.2021.13.16"}


@pytest.mark.parametrize("name, slug", [
    ("sw1", "sw1"),
    ("core-1.dc2:rack4", "core-1.dc2:rack4"),
    ("a" * 27, "a" * 27),
    ("a" * 28, None),               # too long for a slug: hashed
    ("printer 3rd floor", None),
    ("sw/1", "refused"),
])
def test_a_device_s_uuid_slug(name, slug):
    if slug == "refused":
        with pytest.raises(ConfigError, match="hosts\\[0\\].name: .* without /"):
            devices({"name": name, "address": "10.0.0.1"})
        return
    got = devices({"name": name, "address": "10.0.0.1"}).hosts[0].slug
    assert got == (slug or got)
    if slug is None:
        assert len(got) == 24 and int(got, 16) >= 0
    uuid = "0b7f9ee4-7a8a-4e0c-9c3c-2b0b5c9a1e11@" + got
    assert ID_PATTERN.fullmatch(uuid)         # any device's uuid is an id (SPEC section 3)


def test_two_names_one_slug_are_refused():
    import hashlib
    long_name = "x" * 40
    hashed = hashlib.sha256(long_name.encode()).hexdigest()[:24]
    with pytest.raises(ConfigError) as e:
        devices({"name": long_name, "address": "10.0.0.1"},
                {"name": hashed, "address": "10.0.0.2"})
    assert e.value.key == "devices.hosts[1].name" and "uuid slug of hosts[0]" in str(e.value)


def test_secret_files_are_read_as_the_snmp_code_reads_them(secrets):
    assert read_secret(secrets["community"]) == COMMUNITY
    assert read_communities(secrets["traps"]) == [COMMUNITY, "other-one"]
    for bad, says in (("absent", "cannot be read (No such file or directory)"),
                      ("empty", "is empty")):
        with pytest.raises(ValueError) as e:
            read_secret(secrets[bad])
        assert str(e.value) == f"{secrets[bad]}: {says}"


def test_an_unreadable_secret_file_is_named(secrets, tmp_path):
    with pytest.raises(ConfigError) as e:
        devices({"name": "sw", "address": "10.0.0.1",
                 "snmp": v2c(secrets, community_file=str(tmp_path))})
    assert str(e.value) == (f"agent.yaml: devices.hosts[0].snmp.community_file: {tmp_path}: "
                            f"cannot be read (Is a directory)")


def _bad(secrets, snmp=None, **device) -> dict:
    return {"name": "sw", "address": "10.0.0.1", **({"snmp": snmp} if snmp else {}), **device}


@pytest.mark.parametrize("host, key, expected", [
    (lambda s: _bad(s, v2c(s, community_file=s["absent"])), "hosts[0].snmp.community_file",
     "absent: cannot be read (No such file or directory)"),
    (lambda s: _bad(s, v2c(s, community_file=s["empty"])), "hosts[0].snmp.community_file",
     "empty: is empty"),
    (lambda s: _bad(s, {"version": "2c"}), "hosts[0].snmp.community_file",
     "required with version 2c"),
    (lambda s: _bad(s, v3(s, auth_key_file=s["short"])), "hosts[0].snmp.auth_key_file",
     "holds fewer than 8 characters"),
    (lambda s: _bad(s, v3(s, priv_key_file=s["short"])), "hosts[0].snmp.priv_key_file",
     "holds fewer than 8 characters"),
    (lambda s: _bad(s, v3(s, auth_key_file="")), "hosts[0].snmp.auth_key_file",
     "required with a user"),
    (lambda s: _bad(s, v3(s, user="")), "hosts[0].snmp.user", "required with version 3"),
    (lambda s: _bad(s, v3(s, community_file=s["community"])), "hosts[0].snmp.community_file",
     "set with version 3"),
    (lambda s: _bad(s, v2c(s, user="fwuser")), "hosts[0].snmp.user", "set with version 2c"),
    (lambda s: _bad(s, v3(s, auth_protocol="SHA1")), "hosts[0].snmp.auth_protocol",
     "expected one of SHA, SHA224, SHA256, SHA384, SHA512, MD5"),
    (lambda s: _bad(s, v3(s, priv_protocol="AES128")), "hosts[0].snmp.priv_protocol",
     "expected one of AES, AES192, AES256, AES192C, AES256C, DES, 3DES"),
    (lambda s: _bad(s, v2c(s, version=1)), "hosts[0].snmp.version", "expected 2c or 3"),
    (lambda s: _bad(s, v2c(s, port=0)), "hosts[0].snmp.port", "expected 1 to 65535"),
    (lambda s: _bad(s, v2c(s, max_repetitions=0)), "hosts[0].snmp.max_repetitions",
     "expected 1 to 100"),
    (lambda s: _bad(s, v2c(s, max_interfaces=0)), "hosts[0].snmp.max_interfaces",
     "expected 1 to 100000"),
    (lambda s: _bad(s, v2c(s, extra_oids={"t": "sysDescr.0"})),
     "hosts[0].snmp.extra_oids.t", "is not a numeric OID"),
    (lambda s: _bad(s, v2c(s, extra_oids={"t": "1.3.6.1.2.1.1.3.0."})),
     "hosts[0].snmp.extra_oids.t", "is not a numeric OID"),
    (lambda s: _bad(s, v2c(s, extra_oids={"t": "4.1"})),
     "hosts[0].snmp.extra_oids.t", "is not a numeric OID"),
    (lambda s: _bad(s, v2c(s, extra_oids={"a.b": "1.3.6.1"})), "hosts[0].snmp.extra_oids",
     "is not 1 to 64 letters"),
    (lambda s: _bad(s, v2c(s, interfaces={"exclude": [""]})),
     "hosts[0].snmp.interfaces.exclude", "expected patterns of 1 to 255 characters"),
    (lambda s: _bad(s, v2c(s, interfaces={"only": ["eth*"]})),
     "hosts[0].snmp.interfaces.only", "unknown setting"),
    (lambda s: _bad(s, v2c(s), timeout=31, retries=1), "hosts[0].timeout",
     "timeout x (retries + 1) is 62 s, longer than the interval (60 s)"),
    (lambda s: _bad(s, address="sw 1"), "hosts[0].address",
     "'sw 1' is not an IP address or a DNS name"),
    (lambda s: _bad(s, address="-e"), "hosts[0].address", "is not an IP address"),
    (lambda s: _bad(s, address="10.0.0.256"), "hosts[0].address", "is not an IP address"),
    (lambda s: _bad(s, name=" sw"), "hosts[0].name", "without / or spaces at its ends"),
    (lambda s: _bad(s, name="sw\x1b[31m"), "hosts[0].name", "printable"),
    (lambda s: _bad(s, parents=["poller/"]), "hosts[0].parents", "is not HOST or HOST/CHECK"),
    (lambda s: _bad(s, parents=["sw/ping"]), "hosts[0].parents", "is the device itself"),
    (lambda s: _bad(s, interval=0.5), "hosts[0].interval", "expected 1 to 86400 seconds"),
    (lambda s: _bad(s, alive="snmp"), "hosts[0].alive", "the device has no snmp section"),
    (lambda s: _bad(s, alive="http_x", checks=[{"type": "http", "name": "y"}]),
     "hosts[0].alive", "'http_x' is not one of its checks (known: snmp, ping, http_y)"),
    (lambda s: _bad(s, chekcs=[]), "hosts[0].chekcs", "unknown setting"),
])
def test_a_wrong_setting_names_its_key_never_the_secret(secrets, host, key, expected):
    with pytest.raises(ConfigError) as e:
        devices(host(secrets))
    assert e.value.key == f"devices.{key}" and expected in str(e.value), str(e.value)
    assert COMMUNITY not in str(e.value) and PASSPHRASE not in str(e.value)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("check, key, expected", [
    ({"type": "smtp"}, "type", "expected one of ping, http, tls, tcp, dns, got 'smtp'"),
    ({"name": "x"}, "type", "expected one of ping, http, tls, tcp, dns, got 'None'"),
    ({"type": "http", "url": "/"}, "url", "unknown setting (known here: critical, expect"),
    ({"type": "ping", "port": 80}, "port", "unknown setting"),
    ({"type": "ping", "packets": 5, "timeout": 5}, "timeout", "at least packets + 2"),
    ({"type": "ping", "warning_loss": 120}, "warning_loss", "expected 0 to 100"),
    ({"type": "ping", "critical_rta": 50}, "critical_rta", "no lower than the warning"),
    ({"type": "http", "path": "health"}, "path", "expected a path starting with /"),
    ({"type": "http", "expect": [200, 999]}, "expect", "999 is not an HTTP status code"),
    ({"type": "http", "expect": ["200"]}, "expect[0]", "expected a whole number"),
    ({"type": "http", "host": "bad host"}, "host", "is not an IP address or a DNS name"),
    ({"type": "http", "warning": 2, "critical": 1}, "critical", "no less than warning"),
    ({"type": "http", "timeout": 1}, "timeout", "expected 2 to 300 seconds"),
    ({"type": "http", "name": "-x"}, "name", "is not 1 to 48 letters"),
    ({"type": "tls", "warning_days": 5, "critical_days": 10}, "warning_days",
     "critical_days <= warning_days"),
    ({"type": "tcp"}, "port", "required"),
    ({"type": "tcp", "port": 70000}, "port", "expected 1 to 65535"),
    ({"type": "tcp", "port": 25, "send": "QUIT\r\n"}, "send", "printable"),
    ({"type": "dns"}, "query", "required"),
    ({"type": "dns", "query": "example.com", "record_type": "a"}, "record_type",
     "in capitals"),
    ({"type": "dns", "query": "example.com", "server": "ns 1"}, "server",
     "is not an IP address"),
])
def test_a_wrong_check_setting_names_its_key(check, key, expected):
    with pytest.raises(ConfigError) as e:
        devices({"name": "sw", "address": "10.0.0.1", "checks": [{"type": "ping"}, check]})
    assert e.value.key == f"devices.hosts[0].checks[1].{key}", str(e.value)
    assert expected in str(e.value), str(e.value)


def test_two_checks_of_one_name_are_refused():
    with pytest.raises(ConfigError) as e:
        devices({"name": "sw", "address": "10.0.0.1",
                 "checks": [{"type": "http"}, {"type": "http", "port": 8080}]})
    assert e.value.key == "devices.hosts[0].checks[1].name"
    assert "a second check named 'http' (checks[0])" in str(e.value)


def test_the_section_s_own_rules(secrets):
    for hosts, kw, key, expected in [
        ([{"name": "a", "address": "10.0.0.1"}, {"name": "a", "address": "10.0.0.2"}], {},
         "devices.hosts[1].name", "'a' has the name of hosts[0]"),
        ([{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.1"}], {},
         "devices.hosts[1].traps", "set traps: false on all but one"),
        ([{"name": "a", "address": "10.0.0.1"}, {"name": "b", "address": "10.0.0.2"}],
         {"max_devices": 1}, "devices.hosts", "2 devices, more than max_devices (1)"),
        ([], {"max_devices": 0}, "devices.max_devices", "expected 1 to 100000"),
        ([], {"traps": {"listen": "1162"}}, "devices.traps.listen", "is not HOST:PORT"),
        ([], {"traps": {"listen": "127.0.0.1:99999"}}, "devices.traps.listen",
         "is not HOST:PORT"),
        ([], {"traps": {"listen": "::1:162"}}, "devices.traps.listen", "is not HOST:PORT"),
        ([], {"traps": {"communities_file": secrets["empty"]}},
         "devices.traps.communities_file", "holds no community"),
        ([], {"traps": {"users": [{"user": "u", "auth_key_file": secrets["short"]}]}},
         "devices.traps.users[0].auth_key_file", "holds fewer than 8 characters"),
        ([], {"traps": {"users": [{"auth_key_file": secrets["key"]}]}},
         "devices.traps.users[0].user", "required"),
        ([], {"traps": {"users": [{"user": "u", "auth_key_file": secrets["key"],
                                   "engine_id": "xyz"}]}},
         "devices.traps.users[0].engine_id", "is not 5 to 32 octets in hex"),
        ([], {"traps": {"users": [{"user": "u", "auth_key_file": secrets["key"]}] * 2}},
         "devices.traps.users", "a user is listed twice"),
        ([], {"traps": {"rate": 0}}, "devices.traps.rate", "expected a positive number"),
    ]:
        with pytest.raises(ConfigError) as e:
            devices(*hosts, **kw)
        assert e.value.key == key and expected in str(e.value), str(e.value)
    # two devices at one address: the one with traps takes them
    cfg = devices({"name": "a", "address": "Sw.Example.NET."},
                  {"name": "b", "address": "sw.example.net", "traps": False})
    assert cfg.trap_sources() == {"sw.example.net": "a"}


def test_the_trap_receiver_runs_with_a_community_or_a_user(secrets):
    cfg = devices(traps={"communities_file": secrets["traps"], "listen": "[::1]:0"})
    assert cfg.traps.enabled and cfg.traps.address == ("::1", 0)
    cfg = devices(traps={"users": [{"user": "fwtrap", "auth_key_file": secrets["key"],
                                    "engine_id": "0x8000000001020304"}]})
    assert cfg.traps.enabled and cfg.traps.users[0].level == "authNoPriv"
    assert not devices(traps={"communities_file": secrets["traps"], "listen": ""}
                       ).traps.enabled


# ------------------------------------------------------------------ the plugins they become

def specs(*checks, address="192.0.2.10", **device) -> dict[str, CheckConfig]:
    (host,) = devices({"name": "dev", "address": address, "checks": list(checks),
                       **device}).hosts
    return {s.name: s for s in synthetic.specs(host)}


def test_each_check_type_is_a_debian_plugin_s_argument_list():
    got = specs(
        {"type": "ping", "packets": 3, "timeout": 6, "critical_rta": 800.5},
        {"type": "http", "name": "home", "ssl": True, "host": "www.example.com",
         "path": "/login?next=/", "expect": [200, 302], "regex": "Welcome|Bienvenue",
         "warning": 0.5, "critical": 2, "follow": True},
        {"type": "http", "name": "plain", "port": 8080},
        {"type": "tls", "host": "www.example.com", "warning_days": 20, "critical_days": 3},
        {"type": "tls", "name": "ip", "port": 8443},
        {"type": "tcp", "name": "smtp", "port": 25, "expect": "220", "send": "QUIT",
         "critical": 3},
        {"type": "dns", "query": "www.example.com", "expect": "192.0.2.80"},
        {"type": "dns", "name": "mx", "server": "ns1.example.com", "port": 5353,
         "query": "example.com", "record_type": "MX", "timeout": 4.5},
        interval=30)
    assert {name: [s.command, *s.args] for name, s in got.items()} == {
        "ping": ["check_ping", "-H", "192.0.2.10", "-w", "200,20%", "-c", "800.5,60%",
                 "-p", "3", "-t", "5"],
        "http_home": ["check_http", "-I", "192.0.2.10", "-H", "www.example.com",
                      "-u", "/login?next=/", "-S", "--sni", "-e", "200,302",
                      "-r", "Welcome|Bienvenue", "-f", "follow", "-w", "0.5", "-c", "2",
                      "-t", "9"],
        "http_plain": ["check_http", "-I", "192.0.2.10", "-H", "192.0.2.10", "-u", "/",
                       "-p", "8080", "-t", "9"],
        "tls": ["check_http", "-I", "192.0.2.10", "-H", "www.example.com", "-p", "443",
                "-S", "--sni", "-C", "20,3", "-t", "9"],
        "tls_ip": ["check_http", "-I", "192.0.2.10", "-H", "192.0.2.10", "-p", "8443", "-S",
                   "-C", "30,7", "-t", "9"],
        "tcp_smtp": ["check_tcp", "-H", "192.0.2.10", "-p", "25", "-s", "QUIT", "-e", "220",
                     "-c", "3", "-t", "9"],
        "dns": ["check_dig", "-H", "192.0.2.10", "-p", "53", "-l", "www.example.com",
                "-T", "A", "-a", "192.0.2.80", "-t", "9"],
        "dns_mx": ["check_dig", "-H", "ns1.example.com", "-p", "5353", "-l", "example.com",
                   "-T", "MX", "-t", "4"],
    }
    # declared as the agent's own plugins: their validation passes, interval the device's
    for spec in got.values():
        spec.validate()
        assert (spec.interval, spec.wire()) == \
            (30.0, {"name": spec.name, "interval": 30.0, "timeout": spec.timeout})
    assert got["dns_mx"].timeout == 4.5


def test_a_check_s_own_interval_wins_and_plugins_come_from_debian_s_directory():
    got = specs({"type": "tcp", "port": 22, "interval": 15}, alive="tcp")
    assert list(got) == ["tcp"] and got["tcp"].interval == 15
    assert synthetic.DIRS == ("/usr/lib/nagios/plugins",)


def test_a_missing_plugin_names_the_package_to_install(tmp_path):
    declared = list(specs({"type": "dns", "query": "example.com"}, alive="dns").values())
    lines = synthetic.missing(declared, resolve=lambda command, dirs: f"command {command!r} "
                                                                        f"not found")
    assert lines == ["command 'check_dig' not found: install monitoring-plugins-standard and "
                     "bind9-dnsutils"]
    assert synthetic.missing(declared, resolve=lambda c, d: ("/x/" + c, c)) == []


def test_a_pollers_unit_holds_what_its_devices_need_and_no_more(tmp_path, secrets):
    """``fleetwatch service install agent`` reads the agent's config: ping needs CAP_NET_RAW,
    a trap port below 1024 CAP_NET_BIND_SERVICE, many devices descriptors; an agent without
    devices keeps its empty capability set."""
    from fleetwatch.cli import units
    from fleetwatch.cli.service.install import agent_needs
    agent = units.Service("agent")
    path = tmp_path / "agent.yaml"
    path.write_text("routers: [tcp://r1:5555, tcp://r2:5555]\n")
    assert agent_needs(agent, str(path)) == {}
    plain = units.render(agent, "/opt/fleetwatch/venv/bin/fleetwatch")
    assert "\nCapabilityBoundingSet=\n" in plain and "\nAmbientCapabilities=\n" in plain
    path.write_text(
        "routers: [tcp://r1:5555, tcp://r2:5555]\n"
        "devices:\n"
        "  hosts:\n"
        "    - {name: web, address: 192.0.2.7, checks: [{type: http}], alive: ping}\n"
        "    - {name: sw, address: 192.0.2.8, snmp: {community_file: "
        f"{secrets['community']}}}}}\n"
        f"  traps: {{listen: '0.0.0.0:162', communities_file: {secrets['traps']}}}\n")
    needs = agent_needs(agent, str(path))
    assert needs == {"capabilities": ["CAP_NET_RAW", "CAP_NET_BIND_SERVICE"],
                     "nofile": 1024 + 2 * 3 * 4}          # 2 devices, 3 links (routers_k)
    unit = units.render(agent, "/opt/fleetwatch/venv/bin/fleetwatch", **needs)
    assert "\nCapabilityBoundingSet=CAP_NET_RAW CAP_NET_BIND_SERVICE\n" in unit
    assert "\nAmbientCapabilities=CAP_NET_RAW CAP_NET_BIND_SERVICE\n" in unit
    assert "\nLimitNOFILE=1048\n" in unit
    assert "CAP_NET_RAW" not in units.render(units.Service("router"), "/x", **needs)


def test_a_v3_users_credentials_are_made_from_its_config(secrets):
    """A device's v3 section and a trap user make their credentials alike; without a
    privacy key file, no privacy (authNoPriv)."""
    snmp = pytest.importorskip("agent.devices.snmp")
    cfg = devices({"name": "sw", "address": "192.0.2.8",
                   "snmp": {"version": 3, "user": "fw", "auth_protocol": "SHA256",
                            "auth_key_file": secrets["key"], "priv_key_file": secrets["key"]}},
                  traps={"users": [{"user": "trap", "auth_key_file": secrets["key"]}]})
    made = snmp.Credentials.of_usm(cfg.hosts[0].snmp)
    assert made == snmp.Credentials.v3("fw", "SHA256", secrets["key"], "AES", secrets["key"])
    trap = snmp.Credentials.of_usm(cfg.traps.users[0])
    assert (trap.user, trap.auth_key, trap.priv_protocol) == ("trap", PASSPHRASE, "")
