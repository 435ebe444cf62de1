"""The demo's devices on their own (fleetwatch/cli/demo/switch.py): the snmpd it writes, the
agent's ``devices:`` section it makes (checked by the agent's own config), what it prints
with and without snmpd. The whole of it runs in tests/integration/test_demo.py."""

from __future__ import annotations

import os
import shlex
import socket

import pytest

from agent.devices.config import DevicesConfig
from fleetwatch.cli.demo import switch as demo_switch
from fleetwatch.cli.demo.switch import Switch, device_commands, device_lines, devices_section, \
    planned, record
from fleetwatch.config import build

pytestmark = pytest.mark.timeout(30)

POLLER = "0b5c3e0e-1111-4222-8333-944455556666"
CONSOLE = "127.0.0.1:18080"


def test_the_switch_config_is_private_and_its_community_kept(tmp_path):
    sw = Switch(tmp_path / "switch", 16161, 16162)
    sw.write_config()
    community = sw.community()
    assert community.startswith("demo-") and len(community) > 10
    conf = sw.config_path.read_text()
    assert conf.splitlines()[:3] == ["agentaddress udp:127.0.0.1:16161",
                                     f"rocommunity {community} 127.0.0.1",
                                     "sysName demo-switch"]
    for path in (sw.config_path, sw.community_path):      # both hold the community
        assert oct(os.stat(path).st_mode & 0o777) == "0o600", path
    Switch(tmp_path / "switch", 17161, 17162).write_config()      # a demo started again
    assert sw.community() == community
    argv = sw.command()
    assert argv[1] == f"SNMP_PERSISTENT_DIR={tmp_path / 'switch' / 'persist'}"
    assert (tmp_path / "switch" / "persist").is_dir()
    assert argv[3:] == ["-f", "-C", "-c", str(sw.config_path), "-m", "", "-I", "-smux", "-Lo"]


def test_listening_is_its_udp_port_bound():
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        assert Switch("unused", port, 0).listening()
    assert not Switch("unused", port, 0).listening()


def test_the_devices_section_is_one_the_agent_takes(tmp_path):
    sw = Switch(tmp_path / "switch", 16161, 16162)
    sw.write_config()
    section = build(DevicesConfig, devices_section(sw, CONSOLE), "agent.yaml", "devices")
    switch_, web = section.hosts
    assert (switch_.name, switch_.snmp.port, switch_.traps) == ("demo-switch", 16161, True)
    assert (web.name, web.snmp, web.traps, web.alive) == ("demo-web", None, False,
                                                          "http_console")
    assert web.checks[0]["port"] == 18080 and web.checks[0]["path"] == "/login"
    assert section.traps.address == ("127.0.0.1", 16162)
    assert section.traps.communities_file == str(sw.community_path)
    # no snmpd: demo-web alone, no trap receiver; no console either: no devices at all
    alone = build(DevicesConfig, devices_section(None, CONSOLE), "agent.yaml", "devices")
    assert [h.name for h in alone.hosts] == ["demo-web"] and not alone.traps.enabled
    assert devices_section(None, None) is None


def test_what_the_demo_prints_with_the_switch(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_switch, "missing", lambda: None)
    devices = planned(tmp_path, CONSOLE, POLLER)
    sw = devices["switch"]
    lines = "\n".join(device_lines(devices) + device_commands(
        devices, "fw", "op.yaml", "http://127.0.0.1:8081", f"http://{CONSOLE}/"))
    assert f"demo-switch: snmpd (Net-SNMP) on udp 127.0.0.1:{sw.port}" in lines
    assert f"its traps: to the agent on udp 127.0.0.1:{sw.traps}" in lines
    assert "http://127.0.0.1:8081/render?target=fleet.demo-switch.if.*.in_bps" in lines
    assert f"http://{CONSOLE}/hosts/{POLLER}@demo-switch" in lines
    trap = record(devices)["switch"]["trap"]
    assert f"  {trap}   (a linkDown of lo" in lines
    words = shlex.split(trap)
    assert words[:6] == ["snmptrap", "-v2c", "-c", sw.community(), f"127.0.0.1:{sw.traps}", ""]
    i = demo_switch.lo_index()           # lo's: RFC 2863's ifIndex, ifAdminStatus up,
    assert words[6:] == [demo_switch.LINK_DOWN, f"1.3.6.1.2.1.2.2.1.1.{i}", "i", str(i),
                         f"1.3.6.1.2.1.2.2.1.7.{i}", "i", "1",      # ifOperStatus down
                         f"1.3.6.1.2.1.2.2.1.8.{i}", "i", "2"]
    assert devices["uuids"] == {"demo-switch": f"{POLLER}@demo-switch",
                                "demo-web": f"{POLLER}@demo-web"}


def test_without_snmpd_the_demo_says_why_and_keeps_demo_web(tmp_path, monkeypatch):
    monkeypatch.setattr(demo_switch, "binary", lambda: None)
    devices = planned(tmp_path, CONSOLE, POLLER)
    assert devices["switch"] is None and not (tmp_path / "switch").exists()
    assert record(devices)["switch"] is None
    assert device_lines(devices) == [
        "  devices         demo-switch not running: no snmpd: Net-SNMP's daemon is not "
        "installed (apt-get install snmpd snmp; make install does)",
        "                  demo-web: the console seen from outside (its check http_console, "
        "every 10 s)"]
    commands = device_commands(devices, "fw", "op.yaml", None, None)
    assert len(commands) == 1 and "grep demo-" in commands[0]


def test_without_pysnmp_the_demo_says_how_to_get_it(monkeypatch):
    import importlib.util
    monkeypatch.setattr(demo_switch, "binary", lambda: "/usr/sbin/snmpd")
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "pysnmp" else real(name, *a))
    assert demo_switch.missing() == ("the agent's SNMP poller needs pysnmp (pip install "
                                     "'fleetwatch[snmp]')")
