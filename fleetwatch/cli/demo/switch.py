"""The demo's devices (docs/operating/devices.md): hosts of the fleet that run no agent, which
the demo agent polls and speaks for.

- ``demo-switch``: a Net-SNMP daemon (Debian's ``snmpd``) on a free UDP port of 127.0.0.1, a
  stand-in switch whose interfaces are this machine's (``lo``, ``eth0``...). :class:`Switch`
  writes its config into ``DIR/switch/`` (``snmpd.conf``; a v2c community made at the first
  start and kept in ``community``, 0600, which the agent reads too; its persistent directory
  ``persist/``, so nothing of /etc/snmp or /var/lib/snmp is read or written) and its command
  line. The agent polls it every :data:`INTERVAL` seconds (the checks ``snmp`` and
  ``if_NODE``, the series ``fleet.demo-switch.if.NODE.in_bps``...) and takes its traps on
  another free UDP port (``devices.traps``).
- ``demo-web``: the demo's console seen from outside, an ``http`` synthetic check of its login
  page (``http_console``, what says it is up); it needs neither snmpd nor pysnmp, only the
  console (the web extra).

Without snmpd or pysnmp (the ``snmp`` extra) the demo runs no switch, saying why
(:func:`missing`). :func:`device_lines` and :func:`device_commands` are what the demo
prints: where to look, and a ready-to-paste ``snmptrap`` line sending a linkDown of ``lo``.
"""

from __future__ import annotations

import importlib.util
import os
import secrets
import shlex
import shutil
import socket
from pathlib import Path

from fleetwatch import private
from fleetwatch.cli.demo.ports import free_port
from fleetwatch.protocol import device_uuid

#: the devices' names in the fleet
SWITCH, WEB = "demo-switch", "demo-web"
#: seconds between two polls of a device (and runs of its checks)
INTERVAL = 10
#: where Debian puts the daemon (often not on a user's PATH)
SBIN = "/usr/sbin:/sbin"
#: SNMPv2-MIB linkDown, and IF-MIB's ifIndex, ifAdminStatus and ifOperStatus (columns)
LINK_DOWN = "1.3.6.1.6.3.1.1.5.3"
IF_INDEX, IF_ADMIN, IF_OPER = "1.3.6.1.2.1.2.2.1.1", "1.3.6.1.2.1.2.2.1.7", "1.3.6.1.2.1.2.2.1.8"


def binary() -> str | None:
    return shutil.which("snmpd", path=os.environ.get("PATH", "") + os.pathsep + SBIN)


def missing() -> str | None:
    """Why the demo runs no switch, or None when it can."""
    if binary() is None:
        return ("no snmpd: Net-SNMP's daemon is not installed (apt-get install snmpd snmp; "
                "make install does)")
    if importlib.util.find_spec("pysnmp") is None:
        return "the agent's SNMP poller needs pysnmp (pip install 'fleetwatch[snmp]')"
    return None


class Switch:
    """The demo's snmpd in ``root`` (``DIR/switch``), answering on 127.0.0.1:``port``, its
    traps to go to the agent's receiver on 127.0.0.1:``traps``."""

    def __init__(self, root: Path, port: int, traps: int):
        self.root, self.port, self.traps = Path(root), port, traps

    @property
    def config_path(self) -> Path:
        return self.root / "snmpd.conf"

    @property
    def community_path(self) -> Path:
        return self.root / "community"

    @property
    def log_path(self) -> Path:
        return self.root.parent / "logs" / "snmpd.log"

    def community(self) -> str:
        """The v2c community: made at the first start, then kept (0600)."""
        if self.community_path.exists():
            return self.community_path.read_text().strip()
        made = f"demo-{secrets.token_hex(6)}"
        private.write(self.community_path, made + "\n")
        return made

    def write_config(self) -> None:
        """``snmpd.conf`` (0600: it holds the community), and the persistent directory."""
        (self.root / "persist").mkdir(parents=True, exist_ok=True)
        private.write(self.config_path, "\n".join([
            f"agentaddress udp:127.0.0.1:{self.port}",
            f"rocommunity {self.community()} 127.0.0.1",
            f"sysName {SWITCH}",
            "sysLocation the fleetwatch demo",
            "sysContact fleetwatch demo",
            "dontLogTCPWrappersConnects yes"]) + "\n")

    def command(self) -> list[str]:
        """snmpd in the foreground (``-f``), logging to its output (``-Lo``), its config
        alone (``-C``: not /etc/snmp's), no MIB loaded (``-m ''``: every OID is numeric),
        no AgentX or SMUX (``-I -smux``: nothing on TCP 199); ``env`` execs it with its
        own persistent directory."""
        return [shutil.which("env") or "/usr/bin/env",
                f"SNMP_PERSISTENT_DIR={self.root / 'persist'}", binary() or "snmpd",
                "-f", "-C", "-c", str(self.config_path), "-m", "", "-I", "-smux", "-Lo"]

    def listening(self) -> bool:
        """Whether its UDP port is bound (by it: the demo checks it is alive)."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", self.port))
            except OSError:
                return True
        return False


def devices_section(switch: Switch | None, console: str | None) -> dict | None:
    """The demo agent's ``devices:`` section: the switch polled by SNMP and taking its traps,
    and the console (host:port) as a web site seen from outside; None for neither."""
    hosts = []
    if switch is not None:
        hosts.append({"name": SWITCH, "address": "127.0.0.1", "interval": INTERVAL,
                      "timeout": 2, "retries": 1,
                      "snmp": {"version": "2c", "port": switch.port,
                               "community_file": str(switch.community_path)}})
    if console is not None:
        # the same address as the switch: its traps are the switch's
        hosts.append({"name": WEB, "address": "127.0.0.1", "interval": INTERVAL,
                      "traps": False, "alive": "http_console",
                      "checks": [{"type": "http", "name": "console",
                                  "port": int(console.rpartition(":")[2]), "path": "/login",
                                  "expect": [200], "timeout": 5}]})
    if not hosts:
        return None
    section = {"hosts": hosts}
    if switch is not None:
        section["traps"] = {"listen": f"127.0.0.1:{switch.traps}",
                            "communities_file": str(switch.community_path)}
    return section


def lo_index() -> int:
    """The ifIndex of ``lo`` (Net-SNMP's on Linux is the kernel's: 1 almost always)."""
    try:
        return int(Path("/sys/class/net/lo/ifindex").read_text())
    except (OSError, ValueError):
        return 1


def trap_command(switch: Switch) -> str:
    """A linkDown of ``lo`` from the switch to the agent, as Net-SNMP's ``snmptrap``."""
    i = lo_index()
    return shlex.join(["snmptrap", "-v2c", "-c", switch.community(),
                       f"127.0.0.1:{switch.traps}", "", LINK_DOWN, f"{IF_INDEX}.{i}", "i",
                       str(i), f"{IF_ADMIN}.{i}", "i", "1", f"{IF_OPER}.{i}", "i", "2"])


def planned(root: Path, console: str | None, poller: str) -> dict:
    """The demo's devices, planned: ``switch`` (a :class:`Switch` with its config written,
    or None), ``section`` (the agent's ``devices:``, or None), ``why`` (no switch: why),
    and ``uuids`` (each device's, the agent's uuid being ``poller``)."""
    why = missing()
    switch = None if why else Switch(root / "switch", free_port(udp=True),
                                     free_port(udp=True))
    if switch is not None:
        switch.write_config()
    section = devices_section(switch, console)
    names = [h["name"] for h in (section or {}).get("hosts", [])]
    return {"switch": switch, "section": section, "why": why,
            "uuids": {name: device_uuid(poller, name) for name in names}}


def record(devices: dict) -> dict:
    """demo.json's ``devices``: each device's uuid; the switch's port, trap port, community
    file and snmptrap line (None without it), and why not."""
    switch = devices["switch"]
    return {"uuids": devices["uuids"], "why": devices["why"],
            "switch": {"port": switch.port, "traps": switch.traps,
                       "community_file": str(switch.community_path),
                       "trap": trap_command(switch)} if switch is not None else None}


def device_lines(devices: dict) -> list[str]:
    """Where the demo's devices are, or why there is no switch."""
    switch, lines = devices["switch"], []
    if switch is None:
        lines.append(f"  devices         {SWITCH} not running: {devices['why']}")
    else:
        lines += [f"  devices         {SWITCH}: snmpd (Net-SNMP) on udp 127.0.0.1:{switch.port}, "
                  f"a stand-in switch with this machine's interfaces, polled every "
                  f"{INTERVAL} s by the agent (its community in {switch.community_path})",
                  f"                  its traps: to the agent on udp 127.0.0.1:{switch.traps} "
                  f"(devices.traps in agent.yaml); its log {switch.log_path}"]
    if WEB in devices["uuids"]:
        lines.append(f"                  {WEB}: the console seen from outside (its check "
                     f"http_console, every {INTERVAL} s)")
    return lines


def device_commands(devices: dict, fw: str, op: str, graphite: str | None,
                    console: str | None) -> list[str]:
    """What to type to see the devices: status, the switch's graphs and its page in the
    console, and a linkDown trap."""
    if not devices["uuids"]:
        return []
    lines = [f"  {fw} status --config {op} | grep demo-   (the devices: {SWITCH}'s snmp and "
             f"if_* checks, {WEB}'s http_console)"]
    switch = devices["switch"]
    if switch is None:
        return lines
    if graphite:
        lines.append(f"  {graphite}/render?target=fleet.{SWITCH}.if.*.in_bps&format=json   "
                     f"({SWITCH}'s interfaces' traffic, bit/s)")
    if console:
        lines.append(f"  {console}hosts/{devices['uuids'][SWITCH]}   ({SWITCH} in the "
                     f"console: its checks and graphs)")
    lines.append(f"  {trap_command(switch)}   (a linkDown of lo: an alert of {SWITCH} at "
                 f"once, in fleetwatch alerts; if_lo CRITICAL until the poll the trap starts "
                 f"finds lo up)")
    return lines
