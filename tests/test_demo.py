"""`fleetwatch demo` as a new user runs it: start, look, send, stop; nothing left running."""

from __future__ import annotations

import json
import signal

import psutil
import pytest

from fleet import wait_for

pytestmark = pytest.mark.timeout(120)


def test_demo_runs_a_fleet_and_stops_cleanly(fleet):
    demo_dir = fleet.root / "demo"
    demo = fleet.start("demo", "demo", "--dir", str(demo_dir), "--heartbeat", "0.5")
    manifest = demo_dir / "demo.json"
    wait_for(lambda: manifest.exists() or not demo.alive(), 30, what="demo.json")
    assert demo.alive(), demo.log()
    procs = json.loads(manifest.read_text())["processes"]
    names = {p["name"] for p in procs}
    assert {"router-1", "router-2", "sink-registry", "sink-alerting", "agent"} <= names
    for p in procs:
        assert psutil.pid_exists(p["pid"]), p
        assert (demo_dir / f"{p['name']}.yaml").exists()
    op = str(demo_dir / "fleetwatch.yaml")
    agent_cfg = str(demo_dir / "agent.yaml")
    assert "status --config" in demo.log()

    def agent_alive():
        res = fleet.cli("status", "--config", op, "--json", check=False)
        if res.returncode != 0:
            return None
        agents = json.loads(res.stdout)["agents"]
        return agents if agents and all(a["alive"] for a in agents) else None
    agents = wait_for(agent_alive, 30, interval=0.5, what="the demo agent alive in status")
    assert len(agents) == 1
    entry = agents[0]
    assert {"uuid", "hostname", "alive", "last_seen", "routers"} <= set(entry)
    # The agent knows router-1 only; it learns router-2 from WELCOME.
    wait_for(lambda: sorted((agent_alive() or [{}])[0].get("routers", [])) ==
             ["router-1", "router-2"], 30, interval=0.5, what="agent attached to both routers")

    sent = fleet.cli("send", "notify", "--config", agent_cfg, "--severity", "error",
                     "demo disk on fire").stdout.strip()

    def alerts():
        res = fleet.cli("alerts", "--config", op, "--json", check=False)
        found = [a for a in json.loads(res.stdout)["alerts"] if a["msg_id"] == sent] \
            if res.returncode == 0 else []
        return found or None
    found = wait_for(alerts, 30, interval=0.5, what="the notification in alerts")
    assert len(found) == 1
    assert found[0]["text"] == "demo disk on fire"
    assert found[0]["severity"] == "error"
    assert found[0]["uuid"] == entry["uuid"]

    once = json.loads(fleet.cli("agent", "--once", "--config", agent_cfg).stdout)
    assert any(k.startswith("cpu.") for k in once)

    demo.signal(signal.SIGTERM)
    demo.popen.wait(30)
    assert demo.popen.returncode == 0, demo.log()
    wait_for(lambda: not any(psutil.pid_exists(p["pid"]) and
                             psutil.Process(p["pid"]).status() != psutil.STATUS_ZOMBIE
                             for p in procs), 10, what="every demo process gone")


def test_demo_settings_from_a_config_file_and_flags(fleet):
    bad = fleet.write("demo-bad.yaml", {"routers": 2, "colour": "blue"})
    res = fleet.cli("demo", "--config", str(bad), check=False)
    assert res.returncode == 78
    assert res.stderr.strip().splitlines() == [
        f"fleetwatch demo: {bad}: colour: unknown setting (known here: dir, heartbeat, "
        f"routers, stats_interval)"]
    res = fleet.cli("demo", "--routers", "0", "--dir", str(fleet.root / "d0"), check=False)
    assert res.returncode == 78 and "routers: expected at least 1" in res.stderr


def test_demo_config_file_is_used(fleet):
    cfg = fleet.write("demo.yaml", {"routers": 1, "heartbeat": 0.5,
                                    "dir": str(fleet.root / "one")})
    demo = fleet.start("demo", "demo", "--config", str(cfg), "--for", "30")
    manifest = fleet.root / "one" / "demo.json"
    wait_for(lambda: manifest.exists() or not demo.alive(), 30, what="demo.json")
    names = [p["name"] for p in json.loads(manifest.read_text())["processes"]]
    assert names == ["router-1", "sink-registry", "sink-alerting", "agent"]
    demo.signal(signal.SIGINT)
    assert demo.popen.wait(30) == 0, demo.log()
