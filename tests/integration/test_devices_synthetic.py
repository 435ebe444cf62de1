"""Each synthetic check type (agent/devices/synthetic.py), declared in a ``devices:`` config
and run as the agent runs a plugin (agent.runner.resolve, agent.execute.execute,
agent.runner.outcome), against servers this test starts on 127.0.0.1: an http.server, the
same behind TLS with a self-signed certificate made here, a TCP listener, dnsmasq; and ping to
127.0.0.1. Each gives the status, the text and the perfdata docs/operating/devices.md says.
"""

from __future__ import annotations

import datetime
import http.server
import os
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading
import time

import pytest

from agent.devices import synthetic
from agent.devices.config import DevicesConfig
from agent.execute import Launch, execute
from agent.runner import outcome, resolve
from fleetwatch.cli.demo.ports import free_port
from fleetwatch.config import build
from support.fleet import wait_for

pytestmark = pytest.mark.timeout(120)

CERT_NAME = "web.fleet.test"
CERT_DAYS = 10
BODY = b"fleet ok: all good\n"
#: how long /slow takes to answer (the server's latency, not a wait of the test's)
SLOW = 0.6


def specs(*checks, address="127.0.0.1") -> dict:
    """The plugins of one device with ``checks``, by name (as the agent declares them); its
    first check says it is alive (no ping added)."""
    first = checks[0]["type"] + (f"_{checks[0]['name']}" if checks[0].get("name") else "")
    device = {"name": "dev1", "address": address, "checks": list(checks), "alive": first}
    (host,) = build(DevicesConfig, {"hosts": [device]}, "agent.yaml", "devices").hosts
    return {s.name: s for s in synthetic.specs(host)}


def run(spec):
    """Run one declared plugin as the agent does; its RESULT's fields (an Outcome)."""
    found = resolve(spec.command, synthetic.DIRS)
    if isinstance(found, str):
        pytest.skip(found)
    path, argv0 = found
    launch = Launch(path, argv0, tuple(spec.args), spec.timeout)
    return outcome(spec.name, launch, execute(launch))


def labels(result) -> set[str]:
    return {p["label"] for p in result.perfdata}


# ------------------------------------------------------------------ servers

class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/slow":
            time.sleep(SLOW)            # the server's latency, which the check measures
        code = 404 if self.path == "/missing" else 200
        self.send_response(code)
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


class _Server:
    """A ThreadingHTTPServer (or any socketserver) on 127.0.0.1:0 in a thread."""

    def __init__(self, server: socketserver.BaseServer):
        self.server = server
        self.port = server.server_address[1]
        self.thread = threading.Thread(target=server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def _certificate(directory) -> tuple[str, str]:
    """A self-signed certificate for CERT_NAME valid for CERT_DAYS more days (cryptography)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CERT_NAME)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=CERT_DAYS, hours=12))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(CERT_NAME)]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return str(cert_path), str(key_path)


@pytest.fixture
def web():
    server = _Server(http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler))
    yield server
    server.close()


@pytest.fixture
def tls_web(tmp_path):
    """The same server behind TLS; ``names`` collects the SNI names clients sent."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(*_certificate(tmp_path))
    names: list = []
    context.sni_callback = lambda sock, name, ctx: names.append(name)
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    server = _Server(httpd)
    server.names = names
    yield server
    server.close()


class _Banner(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(b"220 fleet ready\r\n")


@pytest.fixture
def banner():
    server = _Server(socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Banner))
    yield server
    server.close()


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on (bound, then closed: connections to it are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port that accepts connections (the kernel's backlog) and never says a word."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield s.getsockname()[1]


# ------------------------------------------------------------------ http and tls

def test_http_status_body_and_latency(web, closed_port):
    got = specs({"type": "http", "name": "health", "port": web.port, "path": "/health",
                 "expect": [200], "regex": "fleet ok"},
                {"type": "http", "name": "body", "port": web.port, "regex": "^absent"},
                {"type": "http", "name": "missing", "port": web.port, "path": "/missing"},
                {"type": "http", "name": "expect", "port": web.port, "path": "/missing",
                 "expect": [200, 301]},
                {"type": "http", "name": "slow", "port": web.port, "path": "/slow",
                 "warning": SLOW / 2, "critical": 30},
                {"type": "http", "name": "down", "port": closed_port})
    ok = run(got["http_health"])
    assert ok.status == 0 and ok.output.startswith('HTTP OK: Status line output matched "200"')
    assert labels(ok) == {"time", "size"}
    assert {p["label"]: p["uom"] for p in ok.perfdata} == {"time": "s", "size": "B"}
    assert next(p for p in ok.perfdata if p["label"] == "size")["value"] > len(BODY)
    body = run(got["http_body"])
    assert body.status == 2 and "pattern not found" in body.output
    missing = run(got["http_missing"])        # check_http's own rule: 4xx is WARNING
    assert missing.status == 1 and missing.output.startswith("HTTP WARNING: HTTP/1.0 404")
    expect = run(got["http_expect"])
    assert expect.status == 2 and expect.output.startswith("HTTP CRITICAL")
    slow = run(got["http_slow"])
    assert slow.status == 1 and slow.output.startswith("HTTP WARNING")
    slow_time = next(p for p in slow.perfdata if p["label"] == "time")
    assert slow_time["value"] >= SLOW and slow_time["warn"] == f"{SLOW / 2:.6f}"
    down = run(got["http_down"])
    assert down.status == 2 and "Connection refused" in down.output and not down.perfdata


def test_https_with_sni_and_the_certificate_s_days_left(tls_web):
    port = tls_web.port
    got = specs({"type": "http", "name": "secure", "port": port, "ssl": True,
                 "host": CERT_NAME, "path": "/health", "expect": [200], "regex": "fleet ok"},
                {"type": "tls", "port": port, "host": CERT_NAME},
                {"type": "tls", "name": "later", "port": port, "host": CERT_NAME,
                 "warning_days": CERT_DAYS - 5, "critical_days": 1},
                {"type": "tls", "name": "soon", "port": port, "host": CERT_NAME,
                 "warning_days": 60, "critical_days": CERT_DAYS + 5})
    secure = run(got["http_secure"])
    assert secure.status == 0 and secure.output.startswith("HTTP OK"), secure.output
    assert labels(secure) == {"time", "size"}
    assert CERT_NAME in tls_web.names           # the virtual host went out as SNI
    warn = run(got["tls"])                       # the defaults: WARNING under 30 days
    assert warn.status == 1, warn.output
    assert warn.output.startswith(f"WARNING - Certificate '{CERT_NAME}' expires in "
                                  f"{CERT_DAYS} day(s)")
    assert warn.perfdata == []                  # check_http -C prints none: the text says
    later = run(got["tls_later"])
    assert later.status == 0 and later.output.startswith(
        f"OK - Certificate '{CERT_NAME}' will expire on")
    soon = run(got["tls_soon"])
    assert soon.status == 2 and soon.output.startswith("CRITICAL - Certificate")


# ------------------------------------------------------------------ tcp

def test_tcp_connection_answer_and_the_plugin_s_own_timeout(banner, closed_port, silent_port):
    got = specs({"type": "tcp", "name": "smtp", "port": banner.port, "expect": "220"},
                {"type": "tcp", "name": "wrong", "port": banner.port, "expect": "530"},
                {"type": "tcp", "name": "down", "port": closed_port},
                {"type": "tcp", "name": "silent", "port": silent_port, "expect": "220",
                 "timeout": 2})
    ok = run(got["tcp_smtp"])
    assert ok.status == 0 and ok.output.startswith("TCP OK - "), ok.output
    assert labels(ok) == {"time"} and ok.perfdata[0]["uom"] == "s"
    wrong = run(got["tcp_wrong"])                # check_tcp: another answer is WARNING
    assert wrong.status == 1
    assert wrong.output.startswith("TCP WARNING - Unexpected response from host/socket: 220")
    down = run(got["tcp_down"])
    assert down.status == 2 and "Connection refused" in down.output
    # the plugin is told a second less than the check's timeout: it says CRITICAL itself
    # before the agent would kill it (UNKNOWN)
    assert got["tcp_silent"].args[-2:] == ["-t", "1"]
    silent = run(got["tcp_silent"])
    assert (silent.status, silent.timed_out) == (2, False), silent.output
    assert silent.output == "CRITICAL - Socket timeout after 1 seconds"


# ------------------------------------------------------------------ ping

def test_ping_loss_and_round_trip():
    got = specs({"type": "ping", "packets": 2, "timeout": 5})
    assert got["ping"].args[-2:] == ["-t", "4"]
    ok = run(got["ping"])
    assert ok.status == 0, f"{ok.output} {ok.long_output} (ping needs root, CAP_NET_RAW or " \
                           f"net.ipv4.ping_group_range: docs/operating/devices.md)"
    assert ok.output.startswith("PING OK - Packet loss = 0%, RTA = ")
    assert {p["label"]: p["uom"] for p in ok.perfdata} == {"rta": "ms", "pl": "%"}
    rta = next(p for p in ok.perfdata if p["label"] == "rta")
    assert (rta["warn"], rta["crit"]) == ("200.000000", "500.000000")


# ------------------------------------------------------------------ dns

def _dnsmasq_port() -> int:
    """A port free for both TCP (free_port checks it) and UDP, where dnsmasq listens."""
    while True:
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port


def _answers(port: int) -> bool:
    out = subprocess.run(["dig", "+short", "+time=1", "+tries=1", "-p", str(port),
                          "@127.0.0.1", CERT_NAME], capture_output=True, text=True,
                         timeout=10).stdout
    return out.strip() == "192.0.2.7"


@pytest.fixture
def dnsmasq(tmp_path):
    """dnsmasq on 127.0.0.1 answering web.fleet.test A 192.0.2.7 and nothing else."""
    binary = shutil.which("dnsmasq", path=os.environ.get("PATH", "") + ":/usr/sbin")
    if binary is None or shutil.which("dig") is None:
        pytest.skip("dnsmasq or dig not installed (Debian: dnsmasq-base, bind9-dnsutils)")
    import pwd
    port = _dnsmasq_port()
    log = open(tmp_path / "dnsmasq.log", "wb")
    proc = subprocess.Popen(
        [binary, "--keep-in-foreground", "--conf-file=/dev/null", f"--port={port}",
         "--listen-address=127.0.0.1", "--bind-interfaces", "--no-resolv", "--no-hosts",
         f"--user={pwd.getpwuid(os.getuid()).pw_name}", "--pid-file=", "--log-facility=-",
         f"--host-record={CERT_NAME},192.0.2.7"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: proc.poll() is not None or _answers(port), timeout=20,
                 what="dnsmasq answering")
        assert proc.poll() is None, (tmp_path / "dnsmasq.log").read_text()
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def test_dns_answer_and_the_address_expected(dnsmasq):
    got = specs({"type": "dns", "port": dnsmasq, "query": CERT_NAME, "expect": "192.0.2.7"},
                {"type": "dns", "name": "other", "port": dnsmasq, "query": CERT_NAME,
                 "expect": "192.0.2.8"},
                {"type": "dns", "name": "none", "port": dnsmasq, "query": "nope.fleet.test"})
    ok = run(got["dns"])                        # the device is the DNS server asked
    assert ok.status == 0 and ok.output.startswith("DNS OK - "), ok.output
    assert f"{CERT_NAME}." in ok.output and "192.0.2.7" in ok.output
    assert {p["label"]: p["uom"] for p in ok.perfdata} == {"time": "s"}
    other = run(got["dns_other"])               # check_dig: an answer without it is WARNING
    assert other.status == 1 and "Server not found in ANSWER SECTION" in other.output
    none = run(got["dns_none"])
    assert none.status == 2 and "No ANSWER SECTION found" in none.output
    # a service host's name looked up on a server named in the check, not the device
    got = specs({"type": "dns", "server": "127.0.0.1", "port": dnsmasq, "query": CERT_NAME},
                address=CERT_NAME)
    assert got["dns"].args[:2] == ["-H", "127.0.0.1"]
    assert run(got["dns"]).status == 0
