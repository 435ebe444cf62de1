"""A real Net-SNMP daemon for tests (Debian's ``snmpd``), started on 127.0.0.1: a stand-in
switch whose interfaces are the machine's (``lo``, ``eth0``...).

    snmpd -f -C -c CONF -m '' -I -smux -Lo

``-C`` skips the packaged ``/etc/snmp/snmpd.conf`` (its ``systemonly`` view hides IF-MIB),
``-I -smux`` keeps it off TCP 0.0.0.0:199, ``-m ''`` loads no MIB (IF-MIB is not installed:
every OID here is numeric). Each daemon has its own ``SNMP_PERSISTENT_DIR`` under the test's
directory (``createUser`` is rewritten there, with the engine id), and the client tools run
with it too. What it answers:

- v2c: :data:`COMMUNITY`, everything; :data:`NO_HR` the same less HOST-RESOURCES-MIB (a
  device without them); :data:`NO_IFX` less IF-MIB's ifXTable (a device with 32-bit
  counters only). Another community gets no answer (snmpd drops it, as a real device does).
- v3: the :data:`USERS` (``authPriv``), keys in :attr:`Snmpd.keys`; Net-SNMP's ``AES-256``
  is the draft-blumenthal key extension.
- ``extend`` entries (:data:`EXTENDS`), read by number: :func:`extend_oid`.

Its port is chosen free outside the kernel's ephemeral range (as the tests' other servers',
:mod:`fleetwatch.cli.demo.ports`: a port-0 pick races every client's own UDP socket, the
SNMP clients' first), and a start that finds it taken tries another. :meth:`Snmpd.start`
returns once ``snmpget`` answers; :meth:`Snmpd.stop` sends SIGTERM and waits;
:meth:`Snmpd.pause` and :meth:`Snmpd.resume` (SIGSTOP, SIGCONT) make a device that does not
answer. The ``snmpd`` fixture starts one and stops it after the test; it skips when Net-SNMP
is not installed (``make install`` installs it).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetwatch.cli.demo.ports import LOWEST, ephemeral_range

#: where Debian puts the daemon (often not on a user's PATH)
SBIN = "/usr/sbin:/sbin"
#: the v2c communities (see the module's docstring)
COMMUNITY, NO_HR, NO_IFX = "fwtest-ro", "fwtest-nohr", "fwtest-noifx"
#: the subtrees the views of NO_HR and NO_IFX leave out
HOST_RESOURCES, IF_X_TABLE = "1.3.6.1.2.1.25", "1.3.6.1.2.1.31.1.1"
#: NET-SNMP-EXTEND-MIB nsExtendOutput1Line, nsExtendOutputFull, nsExtendResult (columns)
EXTEND_OUTPUT = "1.3.6.1.4.1.8072.1.3.2.3.1.1"
EXTEND_FULL = "1.3.6.1.4.1.8072.1.3.2.3.1.2"
EXTEND_RESULT = "1.3.6.1.4.1.8072.1.3.2.3.1.4"
#: sysUpTime.0, what readiness asks
SYS_UPTIME = "1.3.6.1.2.1.1.3.0"


@dataclass(frozen=True)
class User:
    """A v3 user: protocols as Net-SNMP's ``createUser`` names them."""

    name: str
    auth: str
    auth_key: str
    priv: str
    priv_key: str


#: the v3 users: the first is the one the tests use most
USERS = (
    User("fwuser", "SHA", "auth-pass-123", "AES", "priv-pass-123"),
    User("fwsha256", "SHA-256", "auth-pass-256", "AES-256", "priv-pass-256"),
    User("fwshaaes256", "SHA", "auth-pass-sha", "AES-256", "priv-pass-aes256"),
    User("fwmd5", "MD5", "auth-pass-md5", "DES", "priv-pass-des"),
    User("fwsha512", "SHA-512", "auth-pass-512", "AES-192", "priv-pass-192"),
)
#: extend NAME -> command line: one a word, one a number (an integer a config's extra OID
#: can graph), one the exit status 3
EXTENDS = {"fwcheck": "/bin/echo hello-from-extend", "fwnumber": "/bin/echo 42",
           "fwfail": "/bin/sh -c 'exit 3'"}


def extend_oid(name: str, column: str = EXTEND_OUTPUT) -> str:
    """The numeric OID of an ``extend`` entry's ``column`` (its index is the name as an
    OCTET STRING: its length, then each byte)."""
    raw = name.encode()
    return ".".join([column, str(len(raw)), *(str(b) for b in raw)])


def find(tool: str) -> str | None:
    """The path of a Net-SNMP program (``snmpd``, ``snmpget``...), None when not installed."""
    return shutil.which(tool, path=os.environ.get("PATH", "") + ":" + SBIN)


def free_udp_port(host: str = "127.0.0.1") -> int:
    """A UDP port nothing has bound now, outside the ephemeral range."""
    low, high = ephemeral_range()
    ranges = [r for r in (range(LOWEST, low), range(high + 1, 65536)) if len(r) > 1000]
    for _ in range(200):
        port = random.choice(random.choice(ranges))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        return port
    raise RuntimeError("no free UDP port found outside the ephemeral range")


class Snmpd:
    """One snmpd in ``root`` (its config, persistent directory and log)."""

    def __init__(self, root: Path, users=USERS, extends=None):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.users = tuple(users)
        self.extends = dict(EXTENDS if extends is None else extends)
        self.persist = self.root / "persist"
        self.conf, self.log_path = self.root / "snmpd.conf", self.root / "snmpd.log"
        self.host, self.port = "127.0.0.1", 0
        self.popen: subprocess.Popen | None = None
        self._log = None
        self.binary = find("snmpd")
        if self.binary is None:
            raise FileNotFoundError("snmpd not found (apt-get install snmpd, or make install)")

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, as the Net-SNMP tools take it."""
        return f"{self.host}:{self.port}"

    @property
    def env(self) -> dict:
        return {**os.environ, "SNMP_PERSISTENT_DIR": str(self.persist)}

    def user(self, name: str | None = None) -> User:
        return next(u for u in self.users if name is None or u.name == name)

    def _config(self) -> str:
        lines = [f"agentaddress udp:{self.host}:{self.port}",
                 "view fwnohr included .1", f"view fwnohr excluded .{HOST_RESOURCES}",
                 "view fwnoifx included .1", f"view fwnoifx excluded .{IF_X_TABLE}",
                 f"rocommunity {COMMUNITY} {self.host}",
                 f"rocommunity {NO_HR} {self.host} -V fwnohr",
                 f"rocommunity {NO_IFX} {self.host} -V fwnoifx",
                 "dontLogTCPWrappersConnects yes"]
        for u in self.users:
            lines += [f'createUser {u.name} {u.auth} "{u.auth_key}" {u.priv} "{u.priv_key}"',
                      f"rouser {u.name} authpriv"]
        lines += [f"extend {name} {command}" for name, command in self.extends.items()]
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 15.0) -> Snmpd:
        """Start it on a free port and wait until it answers (RuntimeError, with its log,
        when it does not within ``timeout``)."""
        deadline = time.monotonic() + timeout
        for _ in range(5):
            self.port = free_udp_port(self.host)
            shutil.rmtree(self.persist, ignore_errors=True)
            self.persist.mkdir()
            self.conf.write_text(self._config())
            self._log = open(self.log_path, "ab")
            self.popen = subprocess.Popen(
                [self.binary, "-f", "-C", "-c", str(self.conf), "-m", "", "-I", "-smux", "-Lo"],
                stdout=self._log, stderr=subprocess.STDOUT, env=self.env,
                start_new_session=True)
            while time.monotonic() < deadline:
                if self.popen.poll() is not None:
                    break                       # its port was taken meanwhile: another
                if self.get(SYS_UPTIME, timeout=0.2).returncode == 0:
                    return self
            self.stop()
            if time.monotonic() >= deadline:
                break
        raise RuntimeError(f"snmpd did not answer on {self.address} within {timeout}s:\n"
                           + self.log())

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        if self._log is not None and not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (SIGCONT first, should it be paused), wait; SIGKILL if it lingers."""
        if self.alive():
            os.kill(self.popen.pid, signal.SIGCONT)
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        if self._log is not None:
            self._log.close()

    def pause(self) -> None:
        """Stop it answering (SIGSTOP): its port stays bound, requests go unanswered."""
        os.kill(self.popen.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.popen.pid, signal.SIGCONT)

    # ---------------------------------------------------------------- the tools
    def tool(self, program: str, *args: str, community: str = COMMUNITY,
             user: str | None = None, timeout: float = 1.0, retries: int = 0
             ) -> subprocess.CompletedProcess:
        """Run a Net-SNMP tool (``snmpget``, ``snmpbulkwalk``...) against it, numeric OIDs
        out (``-On``), with ``community`` (v2c) or the v3 ``user`` (``authPriv``)."""
        if user is None:
            auth = ["-v2c", "-c", community]
        else:
            u = self.user(user)
            auth = ["-v3", "-l", "authPriv", "-u", u.name, "-a", u.auth, "-A", u.auth_key,
                    "-x", u.priv, "-X", u.priv_key]
        argv = [find(program) or program, "-m", "", "-On", "-t", f"{timeout:g}",
                "-r", str(retries), *auth, self.address, *args]
        return subprocess.run(argv, capture_output=True, text=True, env=self.env,
                              timeout=30 + timeout * (retries + 1))

    def get(self, *oids: str, **kw) -> subprocess.CompletedProcess:
        return self.tool("snmpget", *oids, **kw)

    def bulkwalk(self, oid: str, **kw) -> dict[str, str]:
        """``snmpbulkwalk`` of ``oid``: {numeric OID without its leading dot: the value as
        the tool prints it}. AssertionError when the tool fails."""
        done = self.tool("snmpbulkwalk", oid, **kw)
        assert done.returncode == 0, done.stderr
        rows = {}
        for line in done.stdout.splitlines():
            name, sep, value = line.partition(" = ")
            if sep and "No Such" not in value:
                rows[name.lstrip(".")] = value
        return rows


@pytest.fixture
def snmpds(tmp_path):
    """``start(name="snmpd", **kw)``: a started :class:`Snmpd` in ``tmp_path/NAME`` (``kw``:
    its ``users``, ``extends``); every one stopped after the test. Skips when Net-SNMP's
    snmpd or its tools are not installed."""
    if find("snmpd") is None or find("snmpget") is None:
        pytest.skip("Net-SNMP not installed (apt-get install snmpd snmp, or make install)")
    started: list[Snmpd] = []

    def start(name: str = "snmpd", **kw) -> Snmpd:
        daemon = Snmpd(tmp_path / name, **kw)
        started.append(daemon)
        return daemon.start()

    try:
        yield start
    finally:
        for daemon in started:
            daemon.stop()


@pytest.fixture
def snmpd(snmpds):
    """One started :class:`Snmpd`, stopped after the test (see ``snmpds``)."""
    return snmpds()
